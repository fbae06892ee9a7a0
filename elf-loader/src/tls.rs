//! Thread-local storage for custom-loaded libraries.
//!
//! Each custom-loaded library with a `PT_TLS` segment is a *module* with an id of our own:
//! bit 63 set (system module ids are small integers), a slot number in the low 32 bits
//! and a never-reused sequence number in bits 32..63. `DTPMOD64` relocations store that
//! id; the loader's own `__tls_get_addr` (which custom libraries are bound to) serves our
//! ids and forwards every other id to the system's `__tls_get_addr`.
//!
//! A thread's block for a module is allocated on its first access (so threads created
//! before and after the load are alike), initialised from the relocated init image plus
//! zeroed tbss. Fast path: one thread-local vector indexed by slot, one comparison with
//! the full id. Blocks are owned by the module's registry entry: they are freed when the
//! thread exits (a thread-local destructor) or when the module is unloaded, whichever
//! comes first; a stale cache entry never matches because ids are never reused.

use parking_lot::{Mutex, RwLock};
use std::alloc::Layout;
use std::cell::{Cell, UnsafeCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
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
}

struct Module {
    id: u64,
    template: Template,
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
    /// destructor frees the thread's blocks.
    static CACHE: ThreadCache = const { ThreadCache { entries: UnsafeCell::new(Vec::new()) } };
    /// The fast path's view of CACHE (pointer, length): a destructor-free `const`
    /// thread-local, so reading it is a single %fs-relative load with no lazy
    /// registration check. Reset to empty when CACHE is destroyed.
    static FAST: Cell<(*const (u64, usize), usize)> = const { Cell::new((std::ptr::null(), 0)) };
}

struct ThreadCache {
    entries: UnsafeCell<Vec<(u64, usize)>>,
}

impl Drop for ThreadCache {
    fn drop(&mut self) {
        let key = THREAD_KEY.with(|k| k.get());
        let _ = FAST.try_with(|f| f.set((std::ptr::null(), 0)));
        let entries = std::mem::take(self.entries.get_mut());
        if key == 0 || entries.is_empty() {
            return;
        }
        let reg = REGISTRY.read();
        for (slot, (id, block)) in entries.into_iter().enumerate() {
            if block == 0 {
                continue;
            }
            if let Some(Some(m)) = reg.slots.get(slot) {
                if m.id == id && m.blocks.lock().remove(&key) == Some(block) {
                    free_block(block, m.layout);
                }
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
    reg.slots[slot] = Some(Module {
        id,
        template,
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

/// Number of TLS blocks currently allocated for custom-loaded modules (all threads).
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
    let (ptr, len) = FAST.with(Cell::get);
    if slot < len {
        // SAFETY: (ptr, len) describes CACHE's live buffer of this thread (updated
        // whenever the buffer changes, reset when it is destroyed).
        let (mid, block) = unsafe { *ptr.add(slot) };
        if mid == id {
            return Some(block);
        }
    }
    slow_block_for(id, slot)
}

/// The calling thread's block for module `id` if it has one already (no allocation).
pub(crate) fn allocated_block(id: u64) -> Option<usize> {
    let slot = (id & 0xffff_ffff) as usize;
    let (ptr, len) = FAST.with(Cell::get);
    if slot < len {
        // SAFETY: as in `block_for`.
        let (mid, block) = unsafe { *ptr.add(slot) };
        if mid == id {
            return Some(block);
        }
    }
    let key = THREAD_KEY.with(Cell::get);
    if key == 0 {
        return None;
    }
    let reg = REGISTRY.read();
    let m = reg.slots.get(slot)?.as_ref().filter(|m| m.id == id)?;
    let b = m.blocks.lock().get(&key).copied();
    b
}

#[cold]
fn slow_block_for(id: u64, slot: usize) -> Option<usize> {
    let key = thread_key();
    let block = {
        let reg = REGISTRY.read();
        let m = reg.slots.get(slot)?.as_ref().filter(|m| m.id == id)?;
        let mut blocks = m.blocks.lock();
        *blocks.entry(key).or_insert_with(|| new_block(m))
    };
    // Cache it, unless this thread's cache is already destroyed (thread exit): then the
    // block stays owned by the module and is freed at unload.
    let _ = CACHE.try_with(|c| {
        // SAFETY: as in `block_for`: this thread only, not re-entrant.
        let v = unsafe { &mut *c.entries.get() };
        if v.len() <= slot {
            v.resize(slot + 1, (0, 0));
        }
        v[slot] = (id, block);
        FAST.with(|f| f.set((v.as_ptr(), v.len())));
    });
    Some(block)
}

type SysTlsGetAddr = unsafe extern "C" fn(*const TlsIndex) -> *mut u8;

fn system_tls_get_addr() -> SysTlsGetAddr {
    static SYS: OnceLock<usize> = OnceLock::new();
    let addr = *SYS.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; the result is checked for null.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__tls_get_addr".as_ptr()) };
        assert!(!p.is_null(), "the system loader exports no __tls_get_addr");
        p as usize
    });
    // SAFETY: the address is glibc's __tls_get_addr, which has exactly this signature.
    unsafe { std::mem::transmute::<usize, SysTlsGetAddr>(addr) }
}

/// `__tls_get_addr` for custom-loaded code (reached through an aligning asm entry).
///
/// # Safety
/// `ti` must point to a valid `tls_index`.
unsafe extern "C" fn elf_loader_tls_get_addr_impl(ti: *const TlsIndex) -> *mut u8 {
    crate::boundary::or_abort("__tls_get_addr", || {
        // SAFETY: the caller passes a valid tls_index (the ABI contract of __tls_get_addr).
        let ti = unsafe { *ti };
        if ti.module & OUR_MODULE == 0 {
            // SAFETY: forwarding the same valid argument to the system implementation.
            return unsafe { system_tls_get_addr()(&ti) };
        }
        match block_for(ti.module) {
            Some(b) => (b + ti.offset as usize) as *mut u8,
            None => {
                // A module id that is not (or no longer) registered: code of an unloaded
                // library is running. There is no address to give; fail loudly rather than
                // hand out memory that belongs to something else.
                eprintln!(
                    "elf-loader: __tls_get_addr for module {:#x}, which is not loaded; aborting",
                    ti.module
                );
                std::process::abort();
            }
        }
    })
}

// The entry custom code calls. Compilers may call __tls_get_addr with a misaligned
// stack (glibc realigns too), so realign before entering Rust code.
std::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl elf_loader_tls_get_addr",
    ".hidden elf_loader_tls_get_addr",
    "elf_loader_tls_get_addr:",
    "push rbp",
    "mov rbp, rsp",
    "and rsp, -16",
    "call {imp}",
    "mov rsp, rbp",
    "pop rbp",
    "ret",
    imp = sym elf_loader_tls_get_addr_impl,
);

extern "C" {
    fn elf_loader_tls_get_addr();
}

/// Address of the loader's `__tls_get_addr` entry.
pub(crate) fn tls_get_addr_entry() -> usize {
    elf_loader_tls_get_addr as *const () as usize
}

/// The address of `ti` in the calling thread: our modules' blocks, or the system's
/// `__tls_get_addr` for the system loader's modules (which allocates a dynamic module's
/// block on first use, as any access would). 0 for one of our ids that is not loaded.
pub(crate) fn address_in_thread(ti: &TlsIndex) -> usize {
    if ti.module & OUR_MODULE != 0 {
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
        // SAFETY: dlsym with a NUL-terminated name; the result is checked for null.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_get_tls_static_info".as_ptr()) };
        if p.is_null() {
            // Not glibc's loader: a bound that no heap block is likely to fall under.
            return 1 << 20;
        }
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
    fn blocks_are_per_thread_initialised_and_freed() {
        let image: [u8; 8] = *b"abcdefgh";
        let id = register(Template {
            image: image.as_ptr() as usize,
            filesz: 8,
            memsz: 64,
            align: 32,
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
        // The other thread exited: its block is freed; ours remains.
        assert_eq!(live_blocks(), before + 1);
        unregister(id);
        assert_eq!(live_blocks(), before);
        // The slot is reused by the next module, under a new id: a fresh block.
        let id2 = register(Template {
            image: image.as_ptr() as usize,
            filesz: 4,
            memsz: 16,
            align: 8,
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
