//! Thread-local storage for custom-loaded libraries.
//!
//! Each custom-loaded library with a `PT_TLS` segment is a *module* with an id of our own:
//! bit 63 set (system module ids are small integers), a slot number in the low 32 bits
//! and a never-reused sequence number in bits 32..63. `DTPMOD64` relocations store that
//! id; the loader's own `__tls_get_addr` (which custom libraries are bound to) serves our
//! ids and forwards every other id to the system's `__tls_get_addr`. `R_X86_64_TLSDESC`
//! descriptors point at the loader's TLS descriptor functions (`tlsdesc_*`).
//!
//! A thread's block for a module is allocated on its first access (so threads created
//! before and after the load are alike), initialised from the relocated init image plus
//! zeroed tbss. Blocks are owned by the module's registry entry: they are freed when the
//! module is unloaded, or after the thread has exited, whichever comes first; a stale
//! cache entry never matches because ids are never reused.
//!
//! Thread exit, in glibc's order (`nptl/pthread_create.c`, `start_thread`): the
//! `thread_local` destructors (`__call_tls_dtors`, C++'s and Rust's), then the pthread
//! key destructors (`__nptl_deallocate_tsd`, up to four rounds), then glibc's own
//! cleanup; the thread's dynamic TLS blocks are freed only after that, when its stack
//! is reused. Libraries rely on the order: jemalloc (bundled by pyarrow and duckdb)
//! stores the address of its thread-local data as a pthread key value and writes
//! through it from the key destructor. So a thread's blocks stay valid through all of
//! that: when the thread's cache is destroyed (a Rust thread-local destructor, the first
//! of those steps) the thread is *retired*, its blocks stay where they are (a later
//! access, from a key destructor, finds them by the thread's key), and they are freed
//! once the kernel reports the thread gone ([`reap_exited_threads`], run on the next
//! retirement, block allocation, load or unload).
//!
//! Initial-exec TLS (`TPOFF64` against a custom library's own variables, `DF_STATIC_TLS`):
//! the access is `%fs`-relative with an offset fixed at load, so the block must be at the
//! same offset from every thread's thread pointer, i.e. in the static TLS block that
//! each thread gets when it starts. glibc gives a `dlopen`ed library a slot of its
//! surplus static TLS; this loader has a static pool of its own for the same purpose
//! (`elf_loader_static_tls_pool`, [`STATIC_POOL_SIZE`] zero bytes of the loader's
//! `.tdata`, i.e. of the TLS init image glibc copies into every thread's static TLS
//! when the thread starts). A module flagged `DF_STATIC_TLS` gets a never-reused part
//! of it while there is room (glibc does not reuse its surplus either); its block in
//! every thread is then `tp + offset`, which the general-dynamic paths serve too. For a
//! module with initialised data (`.tdata`), after its relocation its image is copied
//! into the loading thread's part, into the loader's init image (pages made writable
//! for the copy, `RELRO` restored after), so every thread started later starts with it,
//! and into the part of every thread already running (`broadcast.rs`: glibc walks its
//! own thread list for this; here each thread copies into its own static TLS on a
//! signal, and a thread that does not answer fails the load, naming it).
//!
//! Fast path: each thread has an array of its own, slot -> (module id, block) (the
//! loader's dtv), found through a 16-byte thread-local of the loader library itself
//! (`elf_loader_tls_dtv`: pointer and length), defined and read in assembly with the
//! initial-exec model, so that it is one `%fs`-relative access (local-exec once linked
//! into an executable) and the loader's `__tls_get_addr` and dynamic TLS descriptor
//! serve a cached block in about ten instructions, with no lock and no call. A miss
//! (first access of the thread, another module in the slot, a system module) goes to
//! Rust code, which allocates, caches and answers.

use parking_lot::{Mutex, RwLock};
use std::alloc::Layout;
use std::cell::{Cell, UnsafeCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// A `tls_index` as the x86_64 ABI passes it to `__tls_get_addr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsIndex {
    /// Module id (ours have bit 63 set; others are the system loader's).
    pub module: u64,
    /// Offset of the variable inside the module's block.
    pub offset: u64,
}

impl TlsIndex {
    /// The calling thread's address of the thread-local variable this index names (as
    /// [`SymbolProvider::tls_sym`](crate::SymbolProvider::tls_sym) gives it): what the
    /// library's own code reaches through `__tls_get_addr` (the thread's block is
    /// allocated on its first access). `None` for a variable of a library this loader
    /// no longer has loaded.
    ///
    /// # Safety
    /// For a module of the system loader (an id without bit 63 set), the index must
    /// name a module the system loader has loaded (it is handed to glibc's
    /// `__tls_get_addr` as is); indices of this loader's modules are checked.
    pub unsafe fn address_in_thread(&self) -> Option<std::ptr::NonNull<u8>> {
        std::ptr::NonNull::new(address_in_thread(self) as *mut u8)
    }
}

/// Bit set in every module id this loader hands out.
pub const OUR_MODULE: u64 = 1 << 63;

/// What a module's blocks are made from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Template {
    /// Runtime address of the relocated init image (`.tdata`).
    pub image: usize,
    /// Bytes copied from the image.
    pub filesz: usize,
    /// Block size (`.tdata` + `.tbss`).
    pub memsz: usize,
    /// Block alignment.
    pub align: usize,
    /// The library is flagged `DF_STATIC_TLS` (initial-exec accesses to its own TLS):
    /// give it a part of the static pool if it qualifies (see the module doc).
    pub static_tls: bool,
}

struct Module {
    id: u64,
    template: Template,
    /// Offset of the module's block from the thread pointer when it lives in the static
    /// pool (the same in every thread), or why it does not (its blocks are then per
    /// thread, and an initial-exec relocation against it is refused with that reason).
    static_off: Result<u64, String>,
    layout: Layout,
    /// Blocks by thread key.
    blocks: Mutex<HashMap<u64, usize>>,
}

struct Registry {
    slots: Vec<Option<Module>>,
    free: Vec<usize>,
}

static REGISTRY: RwLock<Registry> = RwLock::new(Registry {
    slots: Vec::new(),
    free: Vec::new(),
});
static SEQUENCE: AtomicU32 = AtomicU32::new(1);
static NEXT_THREAD_KEY: AtomicU64 = AtomicU64::new(1);
static LIVE_BLOCKS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's key in the modules' block maps (no destructor: always accessible).
    static THREAD_KEY: Cell<u64> = const { Cell::new(0) };
    /// This thread's cache: slot -> (module id, block). Owns the storage; its
    /// destructor frees the thread's blocks. The fast paths read it through
    /// `elf_loader_tls_dtv` (see [`dtv`]), reset to empty when CACHE is destroyed.
    static CACHE: ThreadCache = const { ThreadCache { entries: UnsafeCell::new(Vec::new()) } };
}

/// One entry of a thread's dtv, as the assembly fast paths read it: 16 bytes, the
/// module id at offset 0 and the block at offset 8.
#[repr(C)]
#[derive(Clone, Copy)]
struct DtvEntry {
    id: u64,
    block: usize,
}

const _: () = assert!(std::mem::size_of::<DtvEntry>() == 16);

// The loader's own thread-local word pair (dtv pointer, length), 16 bytes of the
// loader library's static TLS; `elf_loader_tls_dtv@GOTTPOFF` gives its offset from the
// thread pointer (initial-exec: the library that holds this code is loaded at start-up
// or is the executable, where the linker relaxes it to local-exec).
//
// The static pool for initial-exec modules is in `.tdata`, zero-filled: part of the init
// image glibc copies into each thread's static TLS when the thread starts, which is
// where a module with initialised data has its image written (`publish_static`).
std::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".p2align 4",
    ".globl elf_loader_tls_dtv",
    ".hidden elf_loader_tls_dtv",
    ".type elf_loader_tls_dtv, @object",
    ".size elf_loader_tls_dtv, 16",
    "elf_loader_tls_dtv:",
    ".zero 16",
    ".section .tdata,\"awT\",@progbits",
    ".p2align 6",
    ".globl elf_loader_static_tls_pool",
    ".hidden elf_loader_static_tls_pool",
    ".type elf_loader_static_tls_pool, @object",
    ".size elf_loader_static_tls_pool, 512",
    "elf_loader_static_tls_pool:",
    ".zero 512",
    ".text",
);

/// Bytes of the loader's static TLS pool for initial-exec modules (the size in the
/// assembly above): about what glibc keeps for `dlopen`ed libraries (its
/// `rtld.optional_static_tls` default is 512 bytes), and what every thread of a process
/// that links the loader carries.
pub const STATIC_POOL_SIZE: usize = 512;

/// Bytes of the static pool handed out so far (never given back: a thread's copy of a
/// part is only zero until a module has used it).
static STATIC_POOL_USED: Mutex<usize> = Mutex::new(0);

/// The offset from the thread pointer of a variable in the loader library's own static
/// TLS (the same in every thread), read from its `@GOTTPOFF` GOT entry.
macro_rules! own_tpoff {
    ($symbol:literal) => {{
        let off: u64;
        // SAFETY: reads the GOT entry (or, relaxed by the linker, the immediate) that
        // holds the offset; no memory is written.
        unsafe {
            std::arch::asm!(
                concat!("mov {o}, qword ptr [rip + ", $symbol, "@GOTTPOFF]"),
                o = out(reg) off,
                options(nostack, readonly, preserves_flags),
            )
        };
        off
    }};
}

/// This thread's offset of `elf_loader_static_tls_pool` from the thread pointer.
fn static_pool_tpoff() -> u64 {
    own_tpoff!("elf_loader_static_tls_pool")
}

/// A part of the static pool for a module with this template, as its offset from the
/// thread pointer, or why it gets none: it does not ask for static TLS, is aligned
/// beyond the pool's 64 bytes, or does not fit what is left.
fn static_part(t: &Template) -> Result<u64, String> {
    if !t.static_tls {
        return Err("it is not flagged DF_STATIC_TLS".into());
    }
    if t.align > 64 {
        return Err(format!(
            "its TLS alignment {} is beyond the static pool's 64",
            t.align
        ));
    }
    let align = t.align.max(1);
    let mut used = STATIC_POOL_USED.lock();
    let start = used.div_ceil(align) * align;
    let end = start.saturating_add(t.memsz.max(1));
    if end > STATIC_POOL_SIZE {
        return Err(format!(
            "it needs {} bytes and the loader's {STATIC_POOL_SIZE}-byte static pool has {} left",
            t.memsz,
            STATIC_POOL_SIZE - *used
        ));
    }
    *used = end;
    Ok(static_pool_tpoff().wrapping_add(start as u64))
}

/// Where the static pool's bytes are in the loader's TLS init image, the image glibc
/// copies into every thread's static TLS when the thread starts: found through
/// `dl_iterate_phdr` as the object whose TLS block in the calling thread
/// (`dlpi_tls_data`) holds the calling thread's pool. With the pages' protection to
/// restore after writing (read-only inside the object's `PT_GNU_RELRO`).
#[derive(Clone, Copy, Debug)]
struct PoolTemplate {
    /// Address of the pool's first byte in the init image.
    addr: usize,
    /// The object's `PT_GNU_RELRO` range (start, end), if it has one.
    relro: Option<(usize, usize)>,
}

fn pool_template() -> Result<PoolTemplate, String> {
    static FOUND: OnceLock<Result<PoolTemplate, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            struct Search {
                pool: usize,
                found: Option<Result<PoolTemplate, String>>,
            }
            unsafe extern "C" fn visit(
                info: *mut libc::dl_phdr_info,
                _size: libc::size_t,
                data: *mut std::ffi::c_void,
            ) -> std::ffi::c_int {
                // SAFETY: glibc passes a valid info for the duration of the call; data is
                // the `Search` below.
                let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
                if info.dlpi_tls_data.is_null() || info.dlpi_phdr.is_null() {
                    return 0;
                }
                // SAFETY: dlpi_phdr has dlpi_phnum entries.
                let phdrs =
                    unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
                let Some(tls) = phdrs.iter().find(|p| p.p_type == libc::PT_TLS) else {
                    return 0;
                };
                let block = info.dlpi_tls_data as usize;
                if search.pool < block || search.pool >= block + tls.p_memsz as usize {
                    return 0;
                }
                let off = search.pool - block;
                search.found = Some(if off + STATIC_POOL_SIZE > tls.p_filesz as usize {
                    Err(format!(
                        "the loader's static pool is not in its TLS init image (offset {off}, init image {} bytes)",
                        tls.p_filesz
                    ))
                } else {
                    let base = info.dlpi_addr as usize;
                    let relro = phdrs
                        .iter()
                        .find(|p| p.p_type == libc::PT_GNU_RELRO)
                        .map(|p| {
                            let start = base + p.p_vaddr as usize;
                            (start, start + p.p_memsz as usize)
                        });
                    Ok(PoolTemplate {
                        addr: base + tls.p_vaddr as usize + off,
                        relro,
                    })
                });
                1
            }
            let mut search = Search {
                pool: thread_pointer().wrapping_add(static_pool_tpoff() as usize),
                found: None,
            };
            // SAFETY: the callback matches dl_iterate_phdr's contract and `search` outlives
            // the call.
            unsafe {
                libc::dl_iterate_phdr(Some(visit), (&mut search as *mut Search).cast());
            }
            search.found.unwrap_or_else(|| {
                Err("no loaded object's TLS block holds the loader's static pool".into())
            })
        })
        .clone()
}

/// Gives a module with initialised data in the static pool its init image, after its
/// relocation and before its initialisers: in the calling thread's copy of its part of
/// the pool, in the loader's TLS init image (from which glibc fills the pool of every
/// thread started later), then in every other running thread's copy (`broadcast`).
pub(crate) fn publish_static(id: u64) -> Result<(), String> {
    let (t, off) = {
        let slot = (id & 0xffff_ffff) as usize;
        let reg = REGISTRY.read();
        let Some(m) = reg
            .slots
            .get(slot)
            .and_then(Option::as_ref)
            .filter(|m| m.id == id)
        else {
            return Ok(());
        };
        match m.static_off {
            Ok(off) if m.template.filesz != 0 => (m.template, off),
            _ => return Ok(()),
        }
    };
    let template = pool_template()?;
    let part = off.wrapping_sub(static_pool_tpoff()) as usize;
    let here = thread_pointer().wrapping_add(off as usize) as *mut u8;
    // SAFETY: the part lies inside this thread's pool (static_part checked its end), and
    // the image has `filesz <= memsz` readable bytes inside the module's mapping.
    unsafe {
        std::ptr::copy_nonoverlapping(t.image as *const u8, here, t.filesz);
        std::ptr::write_bytes(here.add(t.filesz), 0, t.memsz - t.filesz);
    }
    write_init_image(template, part, t.image, t.filesz)?;
    crate::broadcast::copy_into_other_threads(off, t.image, t.filesz, t.memsz).map(|_| ())
}

/// Writes `len` bytes from `src` at `part` bytes into the pool's copy in the loader's
/// TLS init image, making its pages writable meanwhile.
fn write_init_image(t: PoolTemplate, part: usize, src: usize, len: usize) -> Result<(), String> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let dst = t.addr + part;
    let (first, last) = (dst & !(page - 1), (dst + len).div_ceil(page) * page);
    let protect = |prot| {
        // SAFETY: the pages hold the loader's own TLS init image, mapped for the process's
        // life; only their protection changes.
        if unsafe { libc::mprotect(first as *mut libc::c_void, last - first, prot) } != 0 {
            Err(format!(
                "mprotect of the loader's TLS init image: {}",
                std::io::Error::last_os_error()
            ))
        } else {
            Ok(())
        }
    };
    protect(libc::PROT_READ | libc::PROT_WRITE)?;
    // SAFETY: inside the init image's pool (part + len <= STATIC_POOL_SIZE), now writable;
    // the source is the module's relocated image.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
    let in_relro = t
        .relro
        .is_some_and(|(a, b)| first >= a && last <= b.div_ceil(page) * page);
    protect(if in_relro {
        libc::PROT_READ
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    })
}

/// The offset from the thread pointer of module `id`'s block if it lives in the static
/// pool (what a `TPOFF64` relocation against its variables adds to their offsets).
pub(crate) fn static_offset(id: u64) -> Result<u64, String> {
    let slot = (id & 0xffff_ffff) as usize;
    let reg = REGISTRY.read();
    reg.slots
        .get(slot)
        .and_then(Option::as_ref)
        .filter(|m| m.id == id)
        .ok_or_else(|| "its TLS module is no longer registered".to_string())?
        .static_off
        .clone()
}

/// Bytes of the static pool still free for initial-exec modules.
pub fn static_pool_free() -> usize {
    STATIC_POOL_SIZE - *STATIC_POOL_USED.lock()
}

/// This thread's dtv as the fast paths see it: (entries, number of entries). The
/// thread-local holds the length in bytes (16 per entry), which the fast paths compare
/// with the slot's byte offset.
#[inline]
fn dtv() -> (*const DtvEntry, usize) {
    let (ptr, len): (usize, usize);
    // SAFETY: reads the 16 bytes of this thread's `elf_loader_tls_dtv` (static TLS of
    // the loader, present in every thread).
    unsafe {
        std::arch::asm!(
            "mov {t}, qword ptr [rip + elf_loader_tls_dtv@GOTTPOFF]",
            "mov {p}, qword ptr fs:[{t}]",
            "mov {n}, qword ptr fs:[{t} + 8]",
            t = out(reg) _,
            p = out(reg) ptr,
            n = out(reg) len,
            options(nostack, readonly, preserves_flags),
        )
    };
    (ptr as *const DtvEntry, len / 16)
}

/// Publishes this thread's dtv (entries, length) to the fast paths.
fn set_dtv(ptr: *const DtvEntry, len: usize) {
    // SAFETY: writes the 16 bytes of this thread's `elf_loader_tls_dtv`, which only this
    // thread reads.
    unsafe {
        std::arch::asm!(
            "mov {t}, qword ptr [rip + elf_loader_tls_dtv@GOTTPOFF]",
            "mov qword ptr fs:[{t}], {p}",
            "mov qword ptr fs:[{t} + 8], {n}",
            t = out(reg) _,
            p = in(reg) ptr as usize,
            n = in(reg) len * 16,
            options(nostack, preserves_flags),
        )
    };
}

struct ThreadCache {
    entries: UnsafeCell<Vec<DtvEntry>>,
}

impl Drop for ThreadCache {
    /// The thread is exiting (this runs among its `thread_local` destructors): the fast
    /// paths stop using the cache, and the thread is retired, its blocks kept until the
    /// kernel reports it gone (see the module doc).
    fn drop(&mut self) {
        set_dtv(std::ptr::null(), 0);
        drop(std::mem::take(self.entries.get_mut()));
        retire_this_thread();
        reap_exited_threads();
    }
}

thread_local! {
    /// This thread is in [`RETIRED`] already (no destructor: always accessible).
    static IS_RETIRED: Cell<bool> = const { Cell::new(false) };
}

/// Exiting threads whose blocks are kept until they are gone: (thread key, kernel id).
static RETIRED: Mutex<Vec<(u64, libc::pid_t)>> = Mutex::new(Vec::new());
/// [`RETIRED`] is not empty.
static ANY_RETIRED: AtomicBool = AtomicBool::new(false);

/// Records that the calling thread is exiting (once), if it has blocks at all.
fn retire_this_thread() {
    let key = THREAD_KEY.with(Cell::get);
    if key == 0 || IS_RETIRED.with(|r| r.replace(true)) {
        return;
    }
    RETIRED.lock().push((key, crate::kthread::current()));
    ANY_RETIRED.store(true, Ordering::Release);
}

/// Frees now the TLS blocks of threads that have exited; the loader does it on its own
/// at its next load or unload and when a thread allocates a block. A thread's blocks
/// outlive everything glibc runs at its exit (`thread_local` destructors, then pthread
/// key destructors, which libraries such as jemalloc use to write into their
/// thread-local data), so they are freed only once the kernel reports the thread gone,
/// a moment after `join` returns. Cheap when no thread is exiting.
pub fn reap_exited_threads() {
    if !ANY_RETIRED.load(Ordering::Acquire) {
        return;
    }
    let gone: Vec<u64> = {
        let mut retired = RETIRED.lock();
        let mut gone = Vec::new();
        retired.retain(|&(key, tid)| {
            let alive = crate::kthread::alive(tid);
            if !alive {
                gone.push(key);
            }
            alive
        });
        ANY_RETIRED.store(!retired.is_empty(), Ordering::Release);
        gone
    };
    if gone.is_empty() {
        return;
    }
    let reg = REGISTRY.read();
    for m in reg.slots.iter().flatten() {
        let mut blocks = m.blocks.lock();
        for key in &gone {
            if let Some(block) = blocks.remove(key) {
                free_block(block, m.layout);
            }
        }
    }
}

fn thread_key() -> u64 {
    THREAD_KEY.with(|k| {
        let mut v = k.get();
        if v == 0 {
            v = NEXT_THREAD_KEY.fetch_add(1, Ordering::Relaxed);
            k.set(v);
        }
        v
    })
}

fn free_block(block: usize, layout: Layout) {
    // SAFETY: `block` was allocated by `new_block` with this layout and has just been
    // removed from its module's map, so nobody else frees it.
    unsafe { std::alloc::dealloc(block as *mut u8, layout) };
    LIVE_BLOCKS.fetch_sub(1, Ordering::Relaxed);
}

/// Registers a module; returns its id for `DTPMOD64`.
pub(crate) fn register(template: Template) -> u64 {
    reap_exited_threads();
    let align = template.align.max(16);
    let layout = Layout::from_size_align(template.memsz.max(1), align)
        .expect("TLS layout (checked by the parser)");
    let seq = u64::from(SEQUENCE.fetch_add(1, Ordering::Relaxed) & 0x7fff_ffff);
    let mut reg = REGISTRY.write();
    let slot = reg.free.pop().unwrap_or_else(|| {
        reg.slots.push(None);
        reg.slots.len() - 1
    });
    let id = OUR_MODULE | (seq << 32) | slot as u64;
    let static_off = static_part(&template);
    reg.slots[slot] = Some(Module {
        id,
        template,
        static_off,
        layout,
        blocks: Mutex::new(HashMap::new()),
    });
    id
}

/// Unregisters a module and frees every thread's block for it.
pub(crate) fn unregister(id: u64) {
    let slot = (id & 0xffff_ffff) as usize;
    let module = {
        let mut reg = REGISTRY.write();
        match reg.slots.get_mut(slot) {
            Some(s) if s.as_ref().is_some_and(|m| m.id == id) => {
                let m = s.take();
                reg.free.push(slot);
                m
            }
            _ => None,
        }
    };
    if let Some(m) = module {
        for (_, block) in m.blocks.into_inner() {
            free_block(block, m.layout);
        }
    }
}

/// Number of TLS blocks currently allocated for custom-loaded modules (all threads;
/// those of exited threads until [`reap_exited_threads`] has freed them).
pub fn live_blocks() -> usize {
    LIVE_BLOCKS.load(Ordering::Relaxed)
}

fn new_block(m: &Module) -> usize {
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc(m.layout) };
    if p.is_null() {
        std::alloc::handle_alloc_error(m.layout);
    }
    let t = m.template;
    // SAFETY: `p` has `memsz` bytes; the image has `filesz <= memsz` readable bytes inside
    // the module's mapping (checked by the parser), which stays mapped while registered.
    unsafe {
        std::ptr::copy_nonoverlapping(t.image as *const u8, p, t.filesz);
        std::ptr::write_bytes(p.add(t.filesz), 0, t.memsz - t.filesz);
    }
    LIVE_BLOCKS.fetch_add(1, Ordering::Relaxed);
    p as usize
}

/// The calling thread's block for module `id` (allocated on first use), or `None` if
/// the module is not registered.
#[inline]
pub(crate) fn block_for(id: u64) -> Option<usize> {
    let slot = (id & 0xffff_ffff) as usize;
    let (ptr, len) = dtv();
    if slot < len {
        // SAFETY: (ptr, len) describes CACHE's live buffer of this thread (updated
        // whenever the buffer changes, reset when it is destroyed).
        let e = unsafe { *ptr.add(slot) };
        if e.id == id {
            return Some(e.block);
        }
    }
    slow_block_for(id, slot)
}

/// The calling thread's block for module `id` if it has one already (no allocation).
pub(crate) fn allocated_block(id: u64) -> Option<usize> {
    let slot = (id & 0xffff_ffff) as usize;
    let (ptr, len) = dtv();
    if slot < len {
        // SAFETY: as in `block_for`.
        let e = unsafe { *ptr.add(slot) };
        if e.id == id {
            return Some(e.block);
        }
    }
    let key = THREAD_KEY.with(Cell::get);
    if key == 0 {
        return None;
    }
    let reg = REGISTRY.read();
    let m = reg.slots.get(slot)?.as_ref().filter(|m| m.id == id)?;
    if let Ok(off) = m.static_off {
        return Some(thread_pointer().wrapping_add(off as usize));
    }
    let b = m.blocks.lock().get(&key).copied();
    b
}

#[cold]
fn slow_block_for(id: u64, slot: usize) -> Option<usize> {
    reap_exited_threads();
    let key = thread_key();
    let block = {
        let reg = REGISTRY.read();
        let m = reg.slots.get(slot)?.as_ref().filter(|m| m.id == id)?;
        match m.static_off {
            // In the static pool: this thread's copy, set from the loader's init image
            // when the thread started (or by `publish_static` on the loading thread).
            Ok(off) => thread_pointer().wrapping_add(off as usize),
            Err(_) => *m.blocks.lock().entry(key).or_insert_with(|| new_block(m)),
        }
    };
    // Cache it, unless this thread's cache is already destroyed (thread exit, e.g. a
    // pthread key destructor): the thread is then retired (if it was not yet), and the
    // block is freed with its others once the thread is gone.
    let cached = CACHE.try_with(|c| {
        // SAFETY: as in `block_for`: this thread only, not re-entrant.
        let v = unsafe { &mut *c.entries.get() };
        if v.len() <= slot {
            v.resize(slot + 1, DtvEntry { id: 0, block: 0 });
        }
        v[slot] = DtvEntry { id, block };
        set_dtv(v.as_ptr(), v.len());
    });
    if cached.is_err() {
        retire_this_thread();
    }
    Some(block)
}

type SysTlsGetAddr = unsafe extern "C" fn(*const TlsIndex) -> *mut u8;

/// The system's `__tls_get_addr` once looked up (0 before): the fast path's tail call
/// for the system loader's module ids.
static SYS_TLS_GET_ADDR: AtomicUsize = AtomicUsize::new(0);

fn system_tls_get_addr() -> SysTlsGetAddr {
    static SYS: OnceLock<usize> = OnceLock::new();
    let addr = *SYS.get_or_init(|| {
        let p = crate::phdr::global_symbol(c"__tls_get_addr")
            .expect("the system loader exports no __tls_get_addr");
        SYS_TLS_GET_ADDR.store(p, Ordering::Release);
        p
    });
    // SAFETY: the address is glibc's __tls_get_addr, which has exactly this signature.
    unsafe { std::mem::transmute::<usize, SysTlsGetAddr>(addr) }
}

/// The address of `ti` in the calling thread, for the slow paths of the assembly
/// entries: our blocks (allocated on first use), or the system's `__tls_get_addr`.
/// An id of ours that is not registered aborts: code of an unloaded library is running,
/// and there is no address to give (handing out memory that belongs to something else
/// would be worse).
fn address_or_abort(ti: TlsIndex) -> usize {
    if ti.module & OUR_MODULE == 0 {
        // SAFETY: a system module id and offset, as __tls_get_addr takes them.
        return unsafe { system_tls_get_addr()(&ti) as usize };
    }
    match block_for(ti.module) {
        Some(b) => b.wrapping_add(ti.offset as usize),
        None => {
            eprintln!(
                "elf-loader: TLS access for module {:#x}, which is not loaded; aborting",
                ti.module
            );
            std::process::abort();
        }
    }
}

/// `__tls_get_addr` for custom-loaded code, after the assembly fast path missed.
///
/// # Safety
/// `ti` must point to a valid `tls_index`.
unsafe extern "C" fn elf_loader_tls_get_addr_impl(ti: *const TlsIndex) -> *mut u8 {
    crate::boundary::or_abort("__tls_get_addr", || {
        // SAFETY: the caller passes a valid tls_index (the ABI contract of __tls_get_addr).
        address_or_abort(unsafe { *ti }) as *mut u8
    })
}

/// The dynamic TLS descriptor's slow path: the address (not yet made relative to the
/// thread pointer) of the variable `ti` names, in the calling thread.
///
/// # Safety
/// `ti` must point to a valid `tls_index` (the argument of a descriptor made by
/// [`tlsdesc_dynamic`]).
unsafe extern "C" fn elf_loader_tlsdesc_slow(ti: *const TlsIndex) -> usize {
    crate::boundary::or_abort("TLS descriptor", || {
        // SAFETY: the descriptor's argument is a live TlsIndex owned by its image.
        address_or_abort(unsafe { *ti })
    })
}

/// Size of the stack area the dynamic descriptor's slow path saves the vector state
/// in (`xsave`: CPUID leaf 0xD's size for the enabled features; `fxsave`: 512), and
/// whether `xsave` is used. Set by [`tlsdesc_dynamic`] before any descriptor exists.
static XSAVE_SIZE: AtomicUsize = AtomicUsize::new(4096);
static USE_XSAVE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

fn init_state_save() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        let osxsave = __cpuid(1).ecx & (1 << 27) != 0;
        if osxsave {
            // Leaf 0xD exists when OSXSAVE is set.
            let size = __cpuid_count(0xd, 0).ebx as usize;
            XSAVE_SIZE.store(size.max(576), Ordering::Relaxed);
            USE_XSAVE.store(1, Ordering::Release);
        } else {
            XSAVE_SIZE.store(512, Ordering::Relaxed);
        }
        // The tail call of the fast path for system ids.
        system_tls_get_addr();
    });
}

// The entries custom code calls. `elf_loader_tls_get_addr_fast` is `__tls_get_addr`: the
// fast path finds the calling thread's block in its dtv (see the module docs); a miss
// on a system module id tail-calls the system's `__tls_get_addr`, any other miss
// realigns the stack (compilers may call __tls_get_addr with a misaligned stack; glibc
// realigns too) and enters Rust.
//
// The TLS descriptor functions (`R_X86_64_TLSDESC`, `-mtls-dialect=gnu2`) are called
// with %rax pointing at the descriptor {function, argument} and return in %rax the
// variable's offset from the thread pointer, preserving every other register, vector
// registers included: `return` (static TLS: the argument is the offset), `undefweak`
// (an undefined weak variable: address 0 + addend) and `dynamic` (the argument is a
// `TlsIndex`: the same fast path as `__tls_get_addr`; its slow path saves the general
// registers the C ABI lets a callee clobber and the whole extended state with `xsave`
// (`fxsave` without it) before entering Rust).
std::arch::global_asm!(
    ".text",
    // Placement: the fast path's two compare-and-branch pairs (at +0x10 and +0x1b)
    // must not cross or end on a 32-byte boundary (Skylake's jump erratum mitigation
    // makes such a branch several cycles slower); 8 bytes past a 32-byte boundary
    // keeps both inside one 32-byte block each.
    ".p2align 5",
    ".skip 16, 0xcc",
    ".globl elf_loader_tls_get_addr_fast",
    ".hidden elf_loader_tls_get_addr_fast",
    ".type elf_loader_tls_get_addr_fast, @function",
    "elf_loader_tls_get_addr_fast:",
    "mov rax, qword ptr [rdi]",
    "mov rcx, qword ptr [rip + elf_loader_tls_dtv@GOTTPOFF]",
    "mov edx, eax",
    "shl rdx, 4",
    "cmp rdx, qword ptr fs:[rcx + 8]",
    "jae 2f",
    "mov rcx, qword ptr fs:[rcx]",
    "cmp rax, qword ptr [rcx + rdx]",
    "jne 2f",
    "mov rax, qword ptr [rcx + rdx + 8]",
    "add rax, qword ptr [rdi + 8]",
    "ret",
    "2:",
    "test rax, rax",
    "js 3f",
    "mov rcx, qword ptr [rip + {sys}]",
    "test rcx, rcx",
    "jz 3f",
    "jmp rcx",
    "3:",
    "push rbp",
    "mov rbp, rsp",
    "and rsp, -16",
    "call {imp}",
    "mov rsp, rbp",
    "pop rbp",
    "ret",
    ".size elf_loader_tls_get_addr_fast, . - elf_loader_tls_get_addr_fast",
    "",
    ".p2align 4",
    ".globl elf_loader_tlsdesc_return",
    ".hidden elf_loader_tlsdesc_return",
    ".type elf_loader_tlsdesc_return, @function",
    "elf_loader_tlsdesc_return:",
    "mov rax, qword ptr [rax + 8]",
    "ret",
    ".size elf_loader_tlsdesc_return, . - elf_loader_tlsdesc_return",
    "",
    ".p2align 4",
    ".globl elf_loader_tlsdesc_undefweak",
    ".hidden elf_loader_tlsdesc_undefweak",
    ".type elf_loader_tlsdesc_undefweak, @function",
    "elf_loader_tlsdesc_undefweak:",
    "mov rax, qword ptr [rax + 8]",
    "sub rax, qword ptr fs:[0]",
    "ret",
    ".size elf_loader_tlsdesc_undefweak, . - elf_loader_tlsdesc_undefweak",
    "",
    ".p2align 4",
    ".globl elf_loader_tlsdesc_dynamic",
    ".hidden elf_loader_tlsdesc_dynamic",
    ".type elf_loader_tlsdesc_dynamic, @function",
    "elf_loader_tlsdesc_dynamic:",
    "push rsi",
    "push rdx",
    "mov rsi, qword ptr [rax + 8]",
    "mov rdx, qword ptr [rip + elf_loader_tls_dtv@GOTTPOFF]",
    "mov eax, dword ptr [rsi]",
    "shl rax, 4",
    "cmp rax, qword ptr fs:[rdx + 8]",
    "jae elf_loader_tlsdesc_slow_entry",
    "add rax, qword ptr fs:[rdx]",
    "mov rdx, qword ptr [rsi]",
    "cmp rdx, qword ptr [rax]",
    "jne elf_loader_tlsdesc_slow_entry",
    "mov rax, qword ptr [rax + 8]",
    "add rax, qword ptr [rsi + 8]",
    "sub rax, qword ptr fs:[0]",
    "pop rdx",
    "pop rsi",
    "ret",
    // The slow path, also entered from the copies in `near_entries`' pages: %rsi and
    // %rdx pushed (in that order), %rsi = the descriptor's TlsIndex.
    ".globl elf_loader_tlsdesc_slow_entry",
    ".hidden elf_loader_tlsdesc_slow_entry",
    "elf_loader_tlsdesc_slow_entry:",
    "push rcx",
    "push rdi",
    "push r8",
    "push r9",
    "push r10",
    "push r11",
    "push rbp",
    "mov rbp, rsp",
    "sub rsp, qword ptr [rip + {xsave_size}]",
    "and rsp, -64",
    "cmp byte ptr [rip + {use_xsave}], 0",
    "je 5f",
    // The XSAVE header must be zero where XSAVE does not write it (XRSTOR checks).
    "xor eax, eax",
    "mov qword ptr [rsp + 512], rax",
    "mov qword ptr [rsp + 520], rax",
    "mov qword ptr [rsp + 528], rax",
    "mov qword ptr [rsp + 536], rax",
    "mov qword ptr [rsp + 544], rax",
    "mov qword ptr [rsp + 552], rax",
    "mov qword ptr [rsp + 560], rax",
    "mov qword ptr [rsp + 568], rax",
    "mov eax, -1",
    "mov edx, -1",
    "xsave64 [rsp]",
    "jmp 6f",
    "5:",
    "fxsave64 [rsp]",
    "6:",
    "mov rdi, rsi",
    "call {slow}",
    "mov r11, rax",
    "cmp byte ptr [rip + {use_xsave}], 0",
    "je 7f",
    "mov eax, -1",
    "mov edx, -1",
    "xrstor64 [rsp]",
    "jmp 8f",
    "7:",
    "fxrstor64 [rsp]",
    "8:",
    "mov rax, r11",
    "sub rax, qword ptr fs:[0]",
    "mov rsp, rbp",
    "pop rbp",
    "pop r11",
    "pop r10",
    "pop r9",
    "pop r8",
    "pop rdi",
    "pop rcx",
    "pop rdx",
    "pop rsi",
    "ret",
    ".size elf_loader_tlsdesc_dynamic, . - elf_loader_tlsdesc_dynamic",
    imp = sym elf_loader_tls_get_addr_impl,
    slow = sym elf_loader_tlsdesc_slow,
    sys = sym SYS_TLS_GET_ADDR,
    xsave_size = sym XSAVE_SIZE,
    use_xsave = sym USE_XSAVE,
);

extern "C" {
    fn elf_loader_tls_get_addr_fast();
    fn elf_loader_tlsdesc_slow_entry();
    fn elf_loader_tlsdesc_return();
    fn elf_loader_tlsdesc_undefweak();
    fn elf_loader_tlsdesc_dynamic();
}

// The same fast paths as a position-independent template that `near_entries` copies
// into a page next to custom-loaded libraries. A call from a library's PLT (or a TLS
// descriptor call) to code more than 4 GiB away, in another 4 GiB-aligned region (the
// loader linked into a PIE executable at 0x55..., the libraries at 0x7f...), costs the
// CPU's branch prediction a few cycles on every call (measured: a three-instruction
// function in the executable took 1.1x glibc's whole `__tls_get_addr`, the same function
// in a library next to the caller 0.93x). The template reads its parameters from its own
// last words: the offset of `elf_loader_tls_dtv` from the thread pointer, and the
// loader's full entries, which a miss jumps to (they repeat the fast path, then take the
// slow one).
std::arch::global_asm!(
    ".text",
    ".p2align 6",
    ".globl elf_loader_tramp_start",
    ".hidden elf_loader_tramp_start",
    "elf_loader_tramp_start:",
    // +0: __tls_get_addr
    "mov rax, qword ptr [rdi]",
    "mov rcx, qword ptr [rip + .Ltramp_tpoff]",
    "mov edx, eax",
    "shl rdx, 4",
    "cmp rdx, qword ptr fs:[rcx + 8]",
    "jae 2f",
    "mov rcx, qword ptr fs:[rcx]",
    "cmp rax, qword ptr [rcx + rdx]",
    "jne 2f",
    "mov rax, qword ptr [rcx + rdx + 8]",
    "add rax, qword ptr [rdi + 8]",
    "ret",
    "2:",
    "jmp qword ptr [rip + .Ltramp_full_get]",
    ".p2align 5",
    ".globl elf_loader_tramp_desc_dynamic",
    ".hidden elf_loader_tramp_desc_dynamic",
    "elf_loader_tramp_desc_dynamic:",
    "push rsi",
    "push rdx",
    "mov rsi, qword ptr [rax + 8]",
    "mov rdx, qword ptr [rip + .Ltramp_tpoff]",
    "mov eax, dword ptr [rsi]",
    "shl rax, 4",
    "cmp rax, qword ptr fs:[rdx + 8]",
    "jae 3f",
    "add rax, qword ptr fs:[rdx]",
    "mov rdx, qword ptr [rsi]",
    "cmp rdx, qword ptr [rax]",
    "jne 3f",
    "mov rax, qword ptr [rax + 8]",
    "add rax, qword ptr [rsi + 8]",
    "sub rax, qword ptr fs:[0]",
    "pop rdx",
    "pop rsi",
    "ret",
    "3:",
    // The loader's slow path, in the state it expects (see elf_loader_tlsdesc_dynamic).
    "jmp qword ptr [rip + .Ltramp_full_desc]",
    ".p2align 4",
    ".globl elf_loader_tramp_desc_return",
    ".hidden elf_loader_tramp_desc_return",
    "elf_loader_tramp_desc_return:",
    "mov rax, qword ptr [rax + 8]",
    "ret",
    ".p2align 4",
    ".globl elf_loader_tramp_desc_undefweak",
    ".hidden elf_loader_tramp_desc_undefweak",
    "elf_loader_tramp_desc_undefweak:",
    "mov rax, qword ptr [rax + 8]",
    "sub rax, qword ptr fs:[0]",
    "ret",
    ".p2align 3",
    ".globl elf_loader_tramp_data",
    ".hidden elf_loader_tramp_data",
    "elf_loader_tramp_data:",
    ".Ltramp_tpoff:",
    ".quad 0",
    ".Ltramp_full_get:",
    ".quad 0",
    ".Ltramp_full_desc:",
    ".quad 0",
    ".globl elf_loader_tramp_end",
    ".hidden elf_loader_tramp_end",
    "elf_loader_tramp_end:",
);

extern "C" {
    static elf_loader_tramp_start: u8;
    static elf_loader_tramp_desc_dynamic: u8;
    static elf_loader_tramp_desc_return: u8;
    static elf_loader_tramp_desc_undefweak: u8;
    static elf_loader_tramp_data: u8;
    static elf_loader_tramp_end: u8;
}

/// The loader's TLS entries for code in one 4 GiB-aligned region of the address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entries {
    /// `__tls_get_addr`.
    pub tls_get_addr: usize,
    /// The TLS descriptor functions (see the assembly above).
    pub desc_dynamic: usize,
    pub desc_return: usize,
    pub desc_undefweak: usize,
}

/// The entries in the loader's own code (any caller, any distance).
fn global_entries() -> Entries {
    Entries {
        tls_get_addr: elf_loader_tls_get_addr_fast as *const () as usize,
        desc_dynamic: elf_loader_tlsdesc_dynamic as *const () as usize,
        desc_return: elf_loader_tlsdesc_return as *const () as usize,
        desc_undefweak: elf_loader_tlsdesc_undefweak as *const () as usize,
    }
}

/// This thread's offset of `elf_loader_tls_dtv` from the thread pointer (the same in
/// every thread: it is in the static TLS block).
fn dtv_tpoff() -> u64 {
    own_tpoff!("elf_loader_tls_dtv")
}

/// The TLS entries for a library mapped at `addr`: a copy of the template in a page of
/// the same 4 GiB-aligned region, made once per region and kept for the life of the
/// process (one page); the loader's own entries if the loader is in that region
/// already, or if no page could be placed there.
pub(crate) fn near_entries(addr: usize) -> Entries {
    static NEAR: Mutex<Vec<(usize, Entries)>> = Mutex::new(Vec::new());
    let region = addr >> 32;
    let global = global_entries();
    if global.tls_get_addr >> 32 == region {
        return global;
    }
    let mut near = NEAR.lock();
    if let Some(&(_, e)) = near.iter().find(|(r, _)| *r == region) {
        return e;
    }
    let e = make_near_page(addr).unwrap_or(global);
    near.push((region, e));
    e
}

/// Maps one page below `addr` in its 4 GiB region, copies the template into it with
/// its parameters, and makes it read-only and executable.
fn make_near_page(addr: usize) -> Option<Entries> {
    const PAGE: usize = 4096;
    let region = addr >> 32;
    let (start, end, data) = (
        &raw const elf_loader_tramp_start as usize,
        &raw const elf_loader_tramp_end as usize,
        &raw const elf_loader_tramp_data as usize,
    );
    let len = end - start;
    assert!(len <= PAGE, "the TLS trampoline template fits one page");
    let mut page = 0usize;
    // Below the library (mmap allocates top-down, so this is usually free), then
    // above its (at most 1 GiB) span.
    let below = (1..=64).map(|k| (addr & !(PAGE - 1)).wrapping_sub(k * 0x10_0000));
    let above = (1..=64).map(|k| (addr & !(PAGE - 1)).wrapping_add((1 << 30) + k * 0x10_0000));
    for hint in below.chain(above) {
        if hint >> 32 != region {
            continue;
        }
        // SAFETY: a new anonymous private mapping; MAP_FIXED_NOREPLACE never replaces
        // an existing one (an older kernel treats the address as a hint only, which the
        // region check below catches).
        let p = unsafe {
            libc::mmap(
                hint as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            continue;
        }
        if (p as usize) >> 32 == region {
            page = p as usize;
            break;
        }
        // SAFETY: the mapping just made, used by nothing.
        unsafe { libc::munmap(p, PAGE) };
    }
    if page == 0 {
        tracing::debug!(
            addr,
            "no page for TLS entries in this 4 GiB region; using the loader's own"
        );
        return None;
    }
    init_state_save();
    let global = global_entries();
    let params = [
        dtv_tpoff(),
        global.tls_get_addr as u64,
        elf_loader_tlsdesc_slow_entry as *const () as u64,
    ];
    // SAFETY: `page` is a fresh writable page of PAGE bytes; the template's `len <= PAGE`
    // bytes are readable code of the loader; the data words lie inside the copy.
    unsafe {
        std::ptr::copy_nonoverlapping(start as *const u8, page as *mut u8, len);
        let d = (page + (data - start)) as *mut u64;
        for (i, v) in params.into_iter().enumerate() {
            d.add(i).write_unaligned(v);
        }
    }
    // SAFETY: the page is ours; from now on it is only executed and read.
    if unsafe {
        libc::mprotect(
            page as *mut libc::c_void,
            PAGE,
            libc::PROT_READ | libc::PROT_EXEC,
        )
    } != 0
    {
        // SAFETY: as above.
        unsafe { libc::munmap(page as *mut libc::c_void, PAGE) };
        return None;
    }
    let at = |label: *const u8| page + (label as usize - start);
    Some(Entries {
        tls_get_addr: page,
        desc_dynamic: at(&raw const elf_loader_tramp_desc_dynamic),
        desc_return: at(&raw const elf_loader_tramp_desc_return),
        desc_undefweak: at(&raw const elf_loader_tramp_desc_undefweak),
    })
}

/// Address of the loader's `__tls_get_addr` entry.
pub(crate) fn tls_get_addr_entry() -> usize {
    elf_loader_tls_get_addr_fast as *const () as usize
}

/// A TLS descriptor (`struct tlsdesc`: function, argument) for a variable at
/// `tp_offset` from the thread pointer in every thread (the system's static TLS), with
/// the entries `e` (see [`near_entries`]).
pub(crate) fn tlsdesc_static(e: &Entries, tp_offset: u64) -> [u64; 2] {
    [e.desc_return as u64, tp_offset]
}

/// A TLS descriptor for an undefined weak variable: its address is the addend.
pub(crate) fn tlsdesc_undefweak(e: &Entries, addend: u64) -> [u64; 2] {
    [e.desc_undefweak as u64, addend]
}

/// A TLS descriptor for a variable in a dynamically allocated block (ours, or a
/// system module's): `ti` must stay valid as long as the descriptor is used (its image
/// owns it).
pub(crate) fn tlsdesc_dynamic(e: &Entries, ti: &TlsIndex) -> [u64; 2] {
    init_state_save();
    [e.desc_dynamic as u64, ti as *const TlsIndex as u64]
}

/// The address of `ti` in the calling thread: our modules' blocks, or the system's
/// `__tls_get_addr` for the system loader's modules (which allocates a dynamic module's
/// block on first use, as any access would). 0 for one of our ids that is not loaded.
///
/// Unlike the fast paths (which serve running code of a loaded library, the only code
/// that holds its module id), this checks that the module is still registered: a
/// thread's dtv keeps the entry of a module unloaded since (its block freed), which
/// only this module's id matches.
pub(crate) fn address_in_thread(ti: &TlsIndex) -> usize {
    if ti.module & OUR_MODULE != 0 {
        let slot = (ti.module & 0xffff_ffff) as usize;
        let registered =
            matches!(REGISTRY.read().slots.get(slot), Some(Some(m)) if m.id == ti.module);
        if !registered {
            return 0;
        }
        return block_for(ti.module).map_or(0, |b| b + ti.offset as usize);
    }
    // SAFETY: a system module id and offset, as __tls_get_addr takes them.
    unsafe { system_tls_get_addr()(ti) as usize }
}

/// For an address in the calling thread's TLS: its offset from the thread pointer if
/// it lies in the static TLS block (the same offset in every thread, what `TPOFF64`
/// stores), `None` for a dynamically allocated block. The static block's size comes
/// from the system loader (`_dl_get_tls_static_info`, as sanitizers read it).
pub(crate) fn static_tls_offset(addr: usize) -> Option<u64> {
    static SIZE: OnceLock<usize> = OnceLock::new();
    let size = *SIZE.get_or_init(|| {
        let Some(p) = crate::phdr::global_symbol(c"_dl_get_tls_static_info") else {
            // Not glibc's loader: a bound that no heap block is likely to fall under.
            return 1 << 20;
        };
        // SAFETY: glibc's `void _dl_get_tls_static_info(size_t *size, size_t *align)`.
        let f: unsafe extern "C" fn(*mut usize, *mut usize) = unsafe { std::mem::transmute(p) };
        let (mut size, mut align) = (0usize, 0usize);
        // SAFETY: two valid out-pointers.
        unsafe { f(&mut size, &mut align) };
        size
    });
    let tp = thread_pointer();
    (addr < tp && tp - addr <= size).then(|| addr.wrapping_sub(tp) as u64)
}

/// The thread pointer (`%fs:0`).
pub(crate) fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: on x86_64 Linux %fs:0 holds the TCB's self pointer.
    unsafe {
        std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_pool_parts_go_only_to_static_modules_that_fit() {
        let t = |filesz, memsz, align, static_tls| Template {
            image: 0,
            filesz,
            memsz,
            align,
            static_tls,
        };
        let refused = |t: Template, why: &str| {
            let err = static_part(&t).expect_err(why);
            assert!(err.contains(why), "{err}");
        };
        refused(t(0, 16, 8, false), "DF_STATIC_TLS");
        refused(t(0, 16, 128, true), "alignment 128");
        refused(t(0, STATIC_POOL_SIZE + 1, 8, true), "static pool has");
        let free = static_pool_free();
        let a = static_part(&t(0, 12, 8, true)).expect("a part");
        let b = static_part(&t(0, 8, 16, true)).expect("another");
        assert!(
            b >= a + 12 && b % 16 == static_pool_tpoff() % 16,
            "after a, aligned"
        );
        assert!(static_pool_free() <= free - 20, "parts are not given back");
        // In the static TLS block: below the thread pointer, at most its size away.
        assert!(static_tls_offset(thread_pointer().wrapping_add(a as usize)).is_some());
    }

    /// The pool's bytes in the init image (here: this test executable's, which links the
    /// loader) are what a thread started later finds in its own pool: the mechanism that
    /// gives initialised initial-exec modules their image in later threads. The last 8
    /// bytes of the pool, which no test hands out, carry a pattern and are cleared again.
    #[test]
    fn the_init_image_fills_the_pool_of_threads_started_later() {
        let template = pool_template().expect("the pool is in the loader's TLS init image");
        let last = STATIC_POOL_SIZE - 8;
        let pattern = 0x5eed_0f74_15aa_u64.to_ne_bytes();
        write_init_image(template, last, pattern.as_ptr() as usize, 8).unwrap();
        let read_own = move || {
            let p = thread_pointer().wrapping_add(static_pool_tpoff() as usize + last);
            // SAFETY: inside this thread's static pool.
            unsafe { std::ptr::read_unaligned(p as *const [u8; 8]) }
        };
        let later = std::thread::spawn(read_own).join().unwrap();
        write_init_image(template, last, [0u8; 8].as_ptr() as usize, 8).unwrap();
        let after = std::thread::spawn(read_own).join().unwrap();
        assert_eq!(later, pattern, "a thread started after the write");
        assert_eq!(after, [0; 8], "and after the clearing");
        assert_eq!(
            read_own(),
            [0; 8],
            "this thread's own copy was never written"
        );
    }

    #[test]
    fn blocks_are_per_thread_initialised_and_freed() {
        let image: [u8; 8] = *b"abcdefgh";
        let id = register(Template {
            image: image.as_ptr() as usize,
            filesz: 8,
            memsz: 64,
            align: 32,
            static_tls: false,
        });
        let before = live_blocks();
        let b1 = block_for(id).unwrap();
        assert_eq!(b1 % 32, 0);
        assert_eq!(
            block_for(id).unwrap(),
            b1,
            "fast path returns the same block"
        );
        // SAFETY: b1 is a live 64-byte block.
        let bytes = unsafe { std::slice::from_raw_parts(b1 as *const u8, 64) };
        assert_eq!(&bytes[..8], b"abcdefgh");
        assert!(bytes[8..].iter().all(|&b| b == 0));
        let other = std::thread::spawn(move || block_for(id).unwrap())
            .join()
            .unwrap();
        assert_ne!(other, b1);
        // The other thread exited: its block is freed once the kernel reports it gone
        // (join returns a moment before); ours remains.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while live_blocks() != before + 1 && std::time::Instant::now() < deadline {
            reap_exited_threads();
            std::thread::yield_now();
        }
        assert_eq!(live_blocks(), before + 1);
        unregister(id);
        assert_eq!(live_blocks(), before);
        // The slot is reused by the next module, under a new id: a fresh block.
        let id2 = register(Template {
            image: image.as_ptr() as usize,
            filesz: 4,
            memsz: 16,
            align: 8,
            static_tls: false,
        });
        assert_eq!(id2 & 0xffff_ffff, id & 0xffff_ffff, "slot reused");
        assert_ne!(id2, id);
        let b2 = block_for(id2).unwrap();
        // SAFETY: b2 is a live 16-byte block.
        let bytes = unsafe { std::slice::from_raw_parts(b2 as *const u8, 16) };
        assert_eq!(&bytes[..4], b"abcd");
        unregister(id2);
        assert_eq!(live_blocks(), before);
    }
}
