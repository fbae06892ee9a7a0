//! The module registry (ids, templates, each module's blocks by thread), each thread's
//! dtv (the cache the fast paths read), allocating and freeing blocks, and retiring
//! exiting threads (their blocks kept until the kernel reports them gone); a module's
//! part of the static pool as the registry holds it (`static_offset`, `publish_static`).

use super::static_tls::{
    pool_template, static_part, static_pool_tpoff, thread_pointer, write_init_image, Template,
};
use parking_lot::{Mutex, RwLock};
use std::alloc::Layout;
use std::cell::{Cell, UnsafeCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Bit set in every module id this loader hands out.
pub const OUR_MODULE: u64 = 1 << 63;

pub(super) struct Module {
    pub(super) id: u64,
    pub(super) template: Template,
    /// Offset of the module's block from the thread pointer when it lives in the static
    /// pool (the same in every thread), or why it does not (its blocks are then per
    /// thread, and an initial-exec relocation against it is refused with that reason).
    static_off: Result<u64, String>,
    layout: Layout,
    /// Blocks by thread key.
    blocks: Mutex<HashMap<u64, usize>>,
}

pub(super) struct Registry {
    pub(super) slots: Vec<Option<Module>>,
    free: Vec<usize>,
}

pub(super) static REGISTRY: RwLock<Registry> = RwLock::new(Registry {
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
