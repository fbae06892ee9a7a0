//! Pool pages: 16 KiB pages of equal-sized cells, grouped in 4 MiB chunks, with their
//! metadata kept outside the pages (so a page holds nothing but cells).
//!
//! A page's first cell header is at offset 8, so every payload is 16-aligned; the bytes
//! before it and after the last cell belong to no object. A page is either free (owned
//! by no size class) or in use by one heap for one size class. Allocation state lives
//! in the cell headers themselves (see `object.rs`); the metadata adds, per page, the
//! age bits of young objects and the "sweep function scheduled" bits, both indexed by
//! 16-byte granule so that no division is needed to find them.

use crate::object::{FREE_END, HEADER_SIZE};
use crate::pagetable;
use crate::sizeclass::{cells_per_page, div_magic, CELL_SIZES, FIRST_CELL, NUM_CLASSES, PAGE_SIZE};
use parking_lot::Mutex;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Pages per chunk.
pub const CHUNK_PAGES: usize = 256;
/// Bytes per chunk.
pub const CHUNK_SIZE: usize = CHUNK_PAGES * PAGE_SIZE;
const GRANULE_WORDS: usize = PAGE_SIZE / 16 / 64;

/// Metadata of one pool page. Lives for the whole process (see `pagetable.rs`).
#[repr(C, align(64))]
pub struct PageMeta {
    // The fields an interior-pointer lookup reads come first, so that a lookup touches
    // one or two cache lines of metadata and no object memory.
    base: usize,
    /// Id of the owning heap, 0 while the page is free.
    owner: AtomicUsize,
    /// Packed layout, readable without a lock: bits 0..16 cell size (0 while free),
    /// bits 16..24 size class.
    layout: AtomicU64,
    /// The page-table entry's copy of owner and layout (`pagetable::pack_info`).
    info: AtomicPtr<AtomicU64>,
    /// Allocation bits, by granule of the object address: set when a cell is handed out,
    /// rebuilt by each sweep of the page. Written only by the thread holding the page or
    /// by the collector, read by anyone (interior-pointer lookups), so lookups never touch
    /// object memory.
    alloc: [AtomicU64; GRANULE_WORDS],
    /// Collector and allocator state, guarded by the owning heap's page lock or by the
    /// stopped world (see `PageState`).
    state: UnsafeCell<PageState>,
    /// Age bits of young objects (set: survived one collection), by granule. Only the
    /// collector touches them, with the world stopped.
    ages: UnsafeCell<[u64; GRANULE_WORDS]>,
    /// "Sweep function scheduled" bits, by granule; set by any mutator thread.
    sched: [AtomicU64; GRANULE_WORDS],
}

// SAFETY: the UnsafeCell fields are only accessed under the owning heap's page lock or
// while the world is stopped for a collection (documented on each accessor); all other
// fields are atomics.
unsafe impl Sync for PageMeta {}
// SAFETY: same as Sync; a PageMeta holds no thread-bound data.
unsafe impl Send for PageMeta {}

/// Mutable page state, guarded by the owning heap's page lock (allocation slow path) or
/// the stopped world (collector).
#[derive(Debug)]
pub(crate) struct PageState {
    /// A mutator is allocating from this page.
    pub held: bool,
    /// The page may contain young objects (allocated since, or surviving young from, the
    /// last collection); partial collections sweep only such pages.
    pub has_young: bool,
    /// The page is on its class's list of pages with free cells.
    pub listed: bool,
    /// Every cell header of the page is zero (fresh or madvised), so bump allocation
    /// needs no free list and no zeroing.
    pub zeroed: bool,
    /// Free cells, as counted by the last sweep (or all of them for a new page).
    pub nfree: u32,
    /// The collection count when the page became free (for returning idle pages).
    pub idle_since: u32,
    /// Head of the page's free list (a cell header address) or `FREE_END`.
    pub free_head: usize,
}

impl PageMeta {
    fn new(base: usize) -> Self {
        PageMeta {
            base,
            owner: AtomicUsize::new(0),
            layout: AtomicU64::new(0),
            state: UnsafeCell::new(PageState {
                held: false,
                has_young: false,
                listed: false,
                zeroed: true,
                nfree: 0,
                idle_since: 0,
                free_head: FREE_END,
            }),
            ages: UnsafeCell::new([0; GRANULE_WORDS]),
            sched: [const { AtomicU64::new(0) }; GRANULE_WORDS],
            alloc: [const { AtomicU64::new(0) }; GRANULE_WORDS],
            info: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Address of the page.
    #[inline]
    pub fn base(&self) -> usize {
        self.base
    }

    /// Id of the heap that owns the page, or 0 if the page is free.
    #[inline]
    pub fn owner(&self) -> usize {
        self.owner.load(Ordering::Acquire)
    }

    /// Cell size (header included) and size class, or `None` while the page is free.
    #[inline]
    pub fn cell_layout(&self) -> Option<(usize, usize)> {
        let l = self.layout.load(Ordering::Acquire);
        let size = (l & 0xffff) as usize;
        (size != 0).then_some((size, ((l >> 16) & 0xff) as usize))
    }

    /// The cell index whose extent `[payload, payload + cell_size - 8]` (one past the end
    /// included) contains `addr`, given this page's cell size; `None` for the bytes before
    /// the first payload, after the last cell, or inside a header word past its first byte.
    #[inline]
    /// `addr` must lie in this page (as when the page came from looking `addr` up).
    pub fn cell_index(&self, addr: usize, cell_size: usize, class: usize) -> Option<usize> {
        debug_assert_eq!(
            addr & !(PAGE_SIZE - 1),
            self.base,
            "address outside the page"
        );
        // Pages are PAGE_SIZE-aligned: the page start comes from the address, not `base`.
        let first_obj = (addr & !(PAGE_SIZE - 1)) + FIRST_CELL + HEADER_SIZE;
        let off = addr.checked_sub(first_obj)?;
        let idx = ((off as u64 * DIV_MAGIC[class]) >> 32) as usize;
        let rem = off - idx * cell_size;
        if rem <= cell_size - HEADER_SIZE {
            // `rem == cell_size - 8` is one past the end of cell `idx`.
            (idx < CELLS_PER_PAGE[class] as usize).then_some(idx)
        } else {
            None
        }
    }

    /// Payload address of cell `idx`.
    #[inline]
    pub fn object_at(&self, idx: usize, cell_size: usize) -> usize {
        self.base + FIRST_CELL + idx * cell_size + HEADER_SIZE
    }

    /// Whether the cell whose payload is at `obj` (an address this page's layout yields)
    /// holds an allocated object right now.
    #[inline]
    pub fn is_allocated(&self, obj: usize) -> bool {
        debug_assert!(obj > self.base && obj < self.base + PAGE_SIZE);
        let (w, bit) = self.granule(obj);
        self.alloc[w].load(Ordering::Acquire) & bit != 0
    }

    /// Records that the cell whose payload is at `obj` was handed out.
    ///
    /// Called by the thread holding the page (or the collector, or under the page lock
    /// for permanent objects): one writer at a time, so a load and a store suffice.
    #[inline(always)]
    pub(crate) fn set_allocated(&self, obj: usize) {
        let (w, bit) = self.granule(obj);
        let word = &self.alloc[w];
        word.store(word.load(Ordering::Relaxed) | bit, Ordering::Release);
    }

    /// Replaces the allocation bitmap (after a sweep).
    ///
    /// # Safety
    /// Only the collector calls this, with the world stopped.
    pub(crate) unsafe fn store_allocated(&self, bits: &[u64; GRANULE_WORDS]) {
        for (w, &b) in self.alloc.iter().zip(bits.iter()) {
            w.store(b, Ordering::Release);
        }
    }

    /// The page's mutable state.
    ///
    /// # Safety
    /// The caller holds the owning heap's page lock, or the world is stopped and the
    /// caller is the collector; no other reference to the state is alive.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn state(&self) -> &mut PageState {
        // SAFETY: exclusive access is guaranteed by the caller.
        unsafe { &mut *self.state.get() }
    }

    #[inline(always)]
    fn granule(&self, obj: usize) -> (usize, u64) {
        // Pages are PAGE_SIZE-aligned: the offset needs no load of `base`.
        let g = (obj & (PAGE_SIZE - 1)) >> 4;
        (g >> 6, 1u64 << (g & 63))
    }

    /// The whole age bitmap, by granule.
    ///
    /// # Safety
    /// Only the collector calls this, with the world stopped.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn ages(&self) -> &mut [u64; GRANULE_WORDS] {
        // SAFETY: exclusive access per the caller's contract.
        unsafe { &mut *self.ages.get() }
    }

    /// Age bit of the object at `obj`.
    ///
    /// # Safety
    /// Only the collector calls this, with the world stopped.
    pub(crate) unsafe fn age(&self, obj: usize) -> bool {
        let (w, bit) = self.granule(obj);
        // SAFETY: the caller is the collector with the world stopped (exclusive access).
        unsafe { (*self.ages.get())[w] & bit != 0 }
    }

    /// Clears the age bit of the object at `obj` (it stays young after this collection).
    ///
    /// # Safety
    /// Only the collector calls this, with the world stopped.
    pub(crate) unsafe fn clear_age(&self, obj: usize) {
        let (w, bit) = self.granule(obj);
        // SAFETY: the caller is the collector with the world stopped (exclusive access).
        unsafe { (*self.ages.get())[w] &= !bit };
    }

    /// Marks the object at `obj` as having its sweep function scheduled; false if it
    /// already was.
    pub(crate) fn schedule_sweep(&self, obj: usize) -> bool {
        let (w, bit) = self.granule(obj);
        self.sched[w].fetch_or(bit, Ordering::AcqRel) & bit == 0
    }

    /// Clears the scheduled-sweep bit of the object at `obj`.
    pub(crate) fn clear_sweep(&self, obj: usize) {
        let (w, bit) = self.granule(obj);
        self.sched[w].fetch_and(!bit, Ordering::AcqRel);
    }

    /// Assigns a free page to `owner` for size class `class`.
    ///
    /// # Safety
    /// The caller holds `owner`'s page lock and the page is free and not referenced by
    /// any allocator.
    unsafe fn assign(&self, owner: usize, class: usize) {
        // SAFETY: exclusive per the caller's contract.
        let st = unsafe { self.state() };
        st.held = false;
        st.has_young = false;
        st.listed = false;
        // SAFETY: exclusive per the caller's contract.
        unsafe { *self.ages.get() = [0; GRANULE_WORDS] };
        for w in self.sched.iter().chain(self.alloc.iter()) {
            w.store(0, Ordering::Relaxed);
        }
        self.owner.store(owner, Ordering::Release);
        let layout = CELL_SIZES[class] as u64 | (class as u64) << 16;
        self.layout.store(layout, Ordering::Release);
        self.publish_info();
    }

    /// Copies owner and layout into the page-table entry.
    fn publish_info(&self) {
        let slot = self.info.load(Ordering::Acquire);
        // SAFETY: set at registration to the entry's info word, which is never freed.
        if let Some(slot) = unsafe { slot.as_ref() } {
            let info = pagetable::pack_info(self.owner(), self.layout.load(Ordering::Acquire));
            slot.store(info, Ordering::Release);
        }
    }

    /// Returns the page to the free state (no cell of it is allocated any more).
    ///
    /// # Safety
    /// As for `assign`, and no cell of the page holds a live object.
    unsafe fn release(&self) {
        self.layout.store(0, Ordering::Release);
        self.publish_info();
        // SAFETY: exclusive per the caller's contract.
        let st = unsafe { self.state() };
        st.held = false;
        st.listed = false;
        st.has_young = false;
        st.nfree = 0;
        st.free_head = FREE_END;
    }
}

static CELLS_PER_PAGE: [u16; NUM_CLASSES] = {
    let mut t = [0u16; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        t[i] = cells_per_page(i) as u16;
        i += 1;
    }
    t
};

static DIV_MAGIC: [u64; NUM_CLASSES] = {
    let mut t = [0u64; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        t[i] = div_magic(CELL_SIZES[i] as usize);
        i += 1;
    }
    t
};

/// A 4 MiB chunk of pages and their metadata, leaked for the process lifetime.
pub(crate) struct Chunk {
    base: usize,
    metas: Box<[PageMeta]>,
}

/// Chunks released by dropped heaps, ready for reuse (madvised, so zero and not resident).
static CHUNK_POOL: Mutex<Vec<&'static Chunk>> = Mutex::new(Vec::new());

impl Chunk {
    /// A chunk from the process-wide pool, or a newly mapped one.
    fn obtain() -> Result<&'static Chunk, std::io::Error> {
        if let Some(c) = CHUNK_POOL.lock().pop() {
            return Ok(c);
        }
        let base = map_aligned(CHUNK_SIZE, PAGE_SIZE)?;
        let metas: Box<[PageMeta]> = (0..CHUNK_PAGES)
            .map(|i| PageMeta::new(base + i * PAGE_SIZE))
            .collect();
        let chunk: &'static Chunk = Box::leak(Box::new(Chunk { base, metas }));
        for meta in chunk.metas.iter() {
            let slot = pagetable::register(meta.base, meta);
            meta.info.store(
                slot as *const AtomicU64 as *mut AtomicU64,
                Ordering::Release,
            );
        }
        Ok(chunk)
    }

    /// Returns every page's memory to the OS and the chunk to the process-wide pool.
    ///
    /// # Safety
    /// No object of the chunk is reachable any more and no allocator holds its pages.
    unsafe fn recycle(&'static self) {
        for meta in self.metas.iter() {
            // SAFETY: forwarded from the caller: nothing references the pages.
            unsafe { meta.release() };
            meta.owner.store(0, Ordering::Release);
            meta.publish_info();
            // SAFETY: exclusive per the caller's contract.
            unsafe { meta.state() }.zeroed = true;
        }
        // SAFETY: the chunk's range is a private anonymous mapping we own; after
        // MADV_DONTNEED it reads as zero, which is the state of a fresh chunk.
        unsafe {
            libc::madvise(
                self.base as *mut libc::c_void,
                CHUNK_SIZE,
                libc::MADV_DONTNEED,
            )
        };
        CHUNK_POOL.lock().push(self);
    }
}

/// Maps `size` bytes of zeroed, private, anonymous memory aligned to `align`.
fn map_aligned(size: usize, align: usize) -> Result<usize, std::io::Error> {
    let len = size + align;
    // SAFETY: an anonymous private mapping with no address hint has no preconditions.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let start = p as usize;
    let aligned = (start + align - 1) & !(align - 1);
    let head = aligned - start;
    let tail = len - head - size;
    // SAFETY: both ranges are parts of the mapping just created and used by nobody.
    unsafe {
        if head > 0 {
            libc::munmap(start as *mut libc::c_void, head);
        }
        if tail > 0 {
            libc::munmap((aligned + size) as *mut libc::c_void, tail);
        }
    }
    Ok(aligned)
}

/// A page handed to a mutator's pool for one size class.
pub(crate) struct Grant {
    pub page: &'static PageMeta,
    /// Free-list head (a cell header address) or `FREE_END`.
    pub free: usize,
    /// Bump range `[bump, bump_end)` of never-used, zeroed cells (headers addresses).
    pub bump: usize,
    pub bump_end: usize,
    /// Bytes of cells granted (for accounting).
    pub bytes: usize,
}

/// One heap's pages: chunks, free pages, pages with free cells per class.
pub(crate) struct PageAlloc {
    owner: usize,
    chunks: Vec<&'static Chunk>,
    free: Vec<&'static PageMeta>,
    partial: Vec<Vec<&'static PageMeta>>,
    /// Every page that holds cells of some class.
    pub(crate) in_use: Vec<&'static PageMeta>,
    /// Number of sweeps so far (`rebuild_lists` calls).
    epoch: u32,
}

impl PageAlloc {
    pub(crate) fn new(owner: usize) -> Self {
        PageAlloc {
            owner,
            chunks: Vec::new(),
            free: Vec::new(),
            partial: (0..NUM_CLASSES).map(|_| Vec::new()).collect(),
            in_use: Vec::new(),
            epoch: 0,
        }
    }

    /// Bytes of address space mapped for this heap's pages.
    pub(crate) fn mapped_bytes(&self) -> usize {
        self.chunks.len() * CHUNK_SIZE
    }

    /// Number of pages currently holding cells.
    pub(crate) fn pages_in_use(&self) -> usize {
        self.in_use.len()
    }

    /// A page with free cells of class `class` for a mutator to allocate from.
    pub(crate) fn grant(&mut self, class: usize) -> Result<Grant, std::io::Error> {
        let cell = CELL_SIZES[class] as usize;
        while let Some(page) = self.partial[class].pop() {
            // SAFETY: we hold the page lock (we are `&mut self` inside the heap's mutex).
            let st = unsafe { page.state() };
            st.listed = false;
            if st.nfree == 0 || st.free_head == FREE_END {
                continue;
            }
            st.held = true;
            st.has_young = true;
            let bytes = st.nfree as usize * cell;
            st.nfree = 0;
            let free = std::mem::replace(&mut st.free_head, FREE_END);
            return Ok(Grant {
                page,
                free,
                bump: 0,
                bump_end: 0,
                bytes,
            });
        }
        let page = match self.free.pop() {
            Some(p) => p,
            None => {
                let chunk = Chunk::obtain()?;
                self.chunks.push(chunk);
                // Hand out pages in address order.
                self.free.extend(chunk.metas.iter().rev());
                self.free.pop().expect("a new chunk has pages")
            }
        };
        // SAFETY: the page is free and we hold the page lock.
        unsafe { page.assign(self.owner, class) };
        self.in_use.push(page);
        // SAFETY: we hold the page lock.
        let st = unsafe { page.state() };
        st.held = true;
        st.has_young = true;
        let n = cells_per_page(class);
        let first = page.base + FIRST_CELL;
        let bytes = n * cell;
        if !st.zeroed {
            // A recycled page holds stale cells: zero it once, then bump-allocate from it
            // (which needs neither a free list nor zeroing per object).
            // SAFETY: the page is ours and free: nothing else reads or writes it.
            unsafe { std::ptr::write_bytes(page.base as *mut u8, 0, PAGE_SIZE) };
        }
        st.zeroed = false;
        Ok(Grant {
            page,
            free: FREE_END,
            bump: first,
            bump_end: first + n * cell,
            bytes,
        })
    }

    /// Takes back a page a mutator was allocating from; `free` is what is left of its
    /// free list and `[bump, bump_end)` of its bump range.
    pub(crate) fn give_back(
        &mut self,
        page: &'static PageMeta,
        class: usize,
        free: usize,
        bump: usize,
        bump_end: usize,
    ) {
        // SAFETY: we hold the page lock and the mutator has stopped using the page.
        let st = unsafe { page.state() };
        st.held = false;
        let cell = CELL_SIZES[class] as usize;
        // Fold the unused bump range into the free list (its headers are zero).
        let mut head = free;
        let mut n = count_list(free);
        let mut h = bump_end;
        while h > bump && h >= bump + cell {
            h -= cell;
            // SAFETY: `h` is an unused cell header of the page.
            unsafe { (*(h as *const AtomicUsize)).store(head, Ordering::Relaxed) };
            head = h;
            n += 1;
        }
        st.free_head = head;
        st.nfree = n as u32;
        if n > 0 && !st.listed {
            st.listed = true;
            self.partial[class].push(page);
        }
    }

    /// After a sweep: rebuilds the per-class lists of pages with free cells and returns
    /// pages without live cells to the free list. Returns the number of pages freed.
    ///
    /// # Safety
    /// The world is stopped, no page is held by a mutator, and every page's `nfree` and
    /// `free_head` are up to date.
    pub(crate) unsafe fn rebuild_lists(&mut self) -> usize {
        self.epoch = self.epoch.wrapping_add(1);
        for l in &mut self.partial {
            l.clear();
        }
        let mut freed = 0;
        let epoch = self.epoch;
        let mut in_use = std::mem::take(&mut self.in_use);
        in_use.retain(|&page| {
            let (_, class) = page.cell_layout().expect("page in use has a layout");
            // SAFETY: forwarded from the caller.
            let st = unsafe { page.state() };
            debug_assert!(!st.held);
            if st.nfree as usize == cells_per_page(class) {
                // SAFETY: no live cell remains and nobody holds the page.
                unsafe { page.release() };
                // SAFETY: as above.
                unsafe { page.state() }.idle_since = epoch;
                self.free.push(page);
                freed += 1;
                false
            } else {
                st.listed = st.nfree > 0;
                if st.listed {
                    self.partial[class].push(page);
                }
                true
            }
        });
        self.in_use = in_use;
        freed
    }

    /// Returns to the OS the memory of free pages that have been idle for at least
    /// `idle` sweeps, keeping `keep` of them mapped. Returns the number returned.
    pub(crate) fn trim(&mut self, keep: usize, idle: u32) -> usize {
        let epoch = self.epoch;
        let mut candidates: Vec<&'static PageMeta> = Vec::new();
        let mut dirty = 0usize;
        for &page in &self.free {
            // SAFETY: free pages are only touched under the page lock, which we hold.
            let st = unsafe { page.state() };
            if !st.zeroed {
                dirty += 1;
                if epoch.wrapping_sub(st.idle_since) >= idle {
                    candidates.push(page);
                }
            }
        }
        let n = candidates.len().min(dirty.saturating_sub(keep));
        candidates.sort_by_key(|p| p.base);
        candidates.truncate(n);
        // One madvise per run of adjacent pages, not per page.
        let mut i = 0;
        while i < candidates.len() {
            let start = candidates[i].base;
            let mut j = i + 1;
            while j < candidates.len() && candidates[j].base == start + (j - i) * PAGE_SIZE {
                j += 1;
            }
            // SAFETY: free pages of ours: nothing lives in them; after MADV_DONTNEED they
            // read as zero, which `zeroed` records.
            unsafe {
                libc::madvise(
                    start as *mut libc::c_void,
                    (j - i) * PAGE_SIZE,
                    libc::MADV_DONTNEED,
                )
            };
            for page in &candidates[i..j] {
                // SAFETY: free pages are only touched under the page lock, which we hold.
                unsafe { page.state() }.zeroed = true;
            }
            i = j;
        }
        n
    }

    /// Number of free (unassigned) pages.
    pub(crate) fn free_pages(&self) -> usize {
        self.free.len()
    }
}

impl Drop for PageAlloc {
    fn drop(&mut self) {
        for chunk in self.chunks.drain(..) {
            // SAFETY: the heap is being destroyed: no object or allocator remains.
            unsafe { chunk.recycle() };
        }
    }
}

/// Length of a free list.
fn count_list(mut head: usize) -> usize {
    let mut n = 0;
    while head != FREE_END {
        n += 1;
        // SAFETY: free-list links point at cell headers of pages that are never unmapped.
        head = unsafe { (*(head as *const AtomicUsize)).load(Ordering::Relaxed) };
    }
    n
}
