//! Pool pages: 16 KiB pages of equal-sized cells, grouped in 4 MiB chunks, with their
//! metadata kept outside the pages (so a page holds nothing but cells).
//!
//! A page's first cell header is at offset 8, so every payload is 16-aligned; the bytes
//! before it and after the last cell belong to no object. A page is either free (owned
//! by no size class) or in use by one heap for one size class. Allocation state lives
//! in the cell headers themselves (see `object.rs`); the metadata adds, per page, the
//! age bits of young objects and the "sweep function scheduled" bits, both indexed by
//! 16-byte granule so that no division is needed to find them.

use crate::geom::{self, Geom};
use crate::heap_id::HeapId;
use crate::object::{FREE_END, HEADER_SIZE};
use crate::pagetable;
use crate::sizeclass::{cells_per_page, CELL_SIZES, FIRST_CELL, NUM_CLASSES, PAGE_SIZE};
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
    /// The page's page-table entry, which keeps a copy of the owner and the geometry
    /// (`geom::Geom`).
    entry: AtomicPtr<pagetable::Entry>,
    /// Allocation bits, by cell index (`pagetable::AllocBits`): set when a cell is handed out,
    /// rebuilt by each sweep of the page. Written only by the thread holding the page or
    /// by the collector, read by anyone (interior-pointer lookups), so lookups touch no
    /// object memory (except a cell's header while the page waits for its sweep: its bits
    /// still include the cells the last collection found dead, see
    /// `Geom::is_waiting`). They live in the page table's leaf (`pagetable::AllocBits`), where
    /// a lookup finds them without this metadata; set at registration.
    alloc: AtomicPtr<pagetable::AllocBits>,
    /// Padding, chosen by measurement only (issue 14, fifth pass in the README). The
    /// metadata's size and the offset of the fields below move `bencharr`'s one-thread
    /// full mark and `base_ptr`'s hit time, though neither reads these fields: with 3, 7,
    /// 11, 15, 19 and 31 words here, the mark took 44, 38, 45, 51, 43 and 38 ms and
    /// `base_ptr` was 1.0x, 1.0x, 0.78x, 0.77x, ~0.9x and ~1.0x `GC_base` (interleaved
    /// builds, a few processes each). The sixth pass found `base_ptr`'s speed drawn per
    /// process, with odds that the build's layout and the machine's state move (README),
    /// so this choice rests on thin evidence; the mechanism was not found. Re-measure
    /// both, over many processes, after changing this struct, the page table's mappings
    /// or the chunk allocation.
    _pad: [AtomicU64; 11],
    /// Collector and allocator state, guarded by the owning heap's page lock or by the
    /// stopped world (see `PageState`).
    state: UnsafeCell<PageState>,
    /// "Sweep function scheduled" bits, by granule; set by any mutator thread.
    sched: [AtomicU64; GRANULE_WORDS],
}

// SAFETY: the UnsafeCell fields are only accessed under the owning heap's page lock or
// while the world is stopped for a collection (documented on each accessor); all other
// fields are atomics.
unsafe impl Sync for PageMeta {}
// SAFETY: same as Sync; a PageMeta holds no thread-bound data.
unsafe impl Send for PageMeta {}

const _: () = assert!(std::mem::size_of::<PageMeta>() == 320);

/// Mutable page state, guarded by the owning heap's page lock (allocation slow path) or
/// the stopped world (collector).
#[derive(Debug)]
pub(crate) struct PageState {
    /// A mutator is allocating from this page.
    pub held: bool,
    /// The page may contain young objects (allocated since, or surviving young from, the
    /// last collection); partial collections sweep only such pages (an old object
    /// cannot die in a partial collection).
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
    /// Live cells and old live cells, as counted by the last sweep.
    pub live_cells: u32,
    pub old_cells: u32,
    /// The page waits for the sweep of the last collection (lazy sweeping).
    pub unswept: bool,
    /// The page is on `PageAlloc::in_use` (possibly a stale entry of a released page).
    pub on_in_use: bool,
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
                live_cells: 0,
                old_cells: 0,
                unswept: false,
                on_in_use: false,
            }),
            sched: [const { AtomicU64::new(0) }; GRANULE_WORDS],
            alloc: AtomicPtr::new(std::ptr::null_mut()),
            _pad: [const { AtomicU64::new(0) }; 11],
            entry: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Address of the page.
    #[inline]
    pub fn base(&self) -> usize {
        self.base
    }

    /// The heap that owns the page; `None` while the page is free.
    #[inline]
    pub fn owner(&self) -> Option<HeapId> {
        match self.owner.load(Ordering::Acquire) {
            0 => None,
            w => Some(HeapId::from_owner(w as u64)),
        }
    }

    /// Whether the page is in use by heap `id`.
    #[inline]
    pub fn is_owned_by(&self, id: HeapId) -> bool {
        self.owner.load(Ordering::Acquire) == id.word()
    }

    /// Cell size (header included) and size class, or `None` while the page is free.
    #[inline]
    pub fn cell_layout(&self) -> Option<(usize, usize)> {
        geom::from_layout_word(self.layout.load(Ordering::Acquire))
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
        debug_assert_eq!(cell_size, Geom::of_class(class).cell());
        // Pages are PAGE_SIZE-aligned: the page start comes from the address, not `base`.
        let (idx, _) = Geom::of_class(class).locate(addr)?;
        (idx < geom::cells_in_page(class)).then_some(idx)
    }

    /// Payload address of cell `idx`.
    #[inline]
    pub fn object_at(&self, idx: usize, cell_size: usize) -> usize {
        self.base + FIRST_CELL + idx * cell_size + HEADER_SIZE
    }

    /// The page's allocation bitmap.
    #[inline(always)]
    fn alloc(&self) -> &'static pagetable::AllocBits {
        let p = self.alloc.load(Ordering::Relaxed);
        debug_assert!(!p.is_null(), "a page in use is registered");
        // SAFETY: set when the chunk was registered, before the page could be used or
        // looked up (its entry had no metadata before), and page-table leaves are never
        // freed.
        unsafe { &*p }
    }

    /// The bitmap word and bit of the cell whose payload is at `obj`, in a page of size
    /// class `class`.
    #[inline(always)]
    fn alloc_bit(&self, obj: usize, class: usize) -> (&'static AtomicU64, u64) {
        let idx = Geom::of_class(class).index_of_payload(obj);
        (&self.alloc()[idx >> 6], 1u64 << (idx & 63))
    }

    /// Records that the cell whose payload is at `obj` was handed out; `class` is the
    /// page's size class.
    ///
    /// Called by the thread holding the page (or the collector, or under the page lock
    /// for permanent objects): one writer at a time, so a load and a store suffice.
    #[inline(always)]
    pub(crate) fn set_allocated(&self, obj: usize, class: usize) {
        let (word, bit) = self.alloc_bit(obj, class);
        word.store(word.load(Ordering::Relaxed) | bit, Ordering::Release);
    }

    /// Replaces the allocation bitmap (after a sweep): bit `i` for cell `i`.
    ///
    /// # Safety
    /// Only the thread sweeping the page calls this (nobody allocates in it meanwhile).
    pub(crate) unsafe fn store_allocated(&self, bits: &[u64; pagetable::ALLOC_WORDS]) {
        for (w, &b) in self.alloc().iter().zip(bits.iter()) {
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
    unsafe fn assign(&self, owner: HeapId, class: usize) {
        // SAFETY: exclusive per the caller's contract.
        let st = unsafe { self.state() };
        st.held = false;
        st.has_young = false;
        st.listed = false;
        for w in self.sched.iter().chain(self.alloc().iter()) {
            w.store(0, Ordering::Relaxed);
        }
        self.owner.store(owner.word(), Ordering::Release);
        self.layout
            .store(geom::layout_word(class), Ordering::Release);
        self.publish_info();
    }

    /// Copies owner and geometry into the page-table entry (the geometry first, see
    /// `pagetable::Entry::geom`); a free page's entry names no owner.
    fn publish_info(&self) {
        let slot = self.entry.load(Ordering::Acquire);
        // SAFETY: set at registration to the page's entry, which is never freed.
        if let Some(slot) = unsafe { slot.as_ref() } {
            let layout = self.cell_layout();
            slot.publish(
                self.owner()
                    .and_then(|owner| layout.map(|(_, class)| (owner, Geom::of_class(class)))),
            );
        }
    }

    /// Marks the page's page-table entry as waiting for the lazy sweep of the collection
    /// `params` describes (number `epoch`): lookups then decide a cell whose allocation
    /// bit is set from its header (`Geom::is_waiting`). `publish_info` clears it.
    fn publish_waiting(&self, params: SweepParams, epoch: u32) {
        let slot = self.entry.load(Ordering::Acquire);
        // SAFETY: set at registration to the page's entry, which is never freed.
        if let (Some(slot), Some((_, class))) = (unsafe { slot.as_ref() }, self.cell_layout()) {
            slot.set_geom(Geom::of_class(class).waiting(
                params.full,
                params.parity,
                params.young_marked,
                epoch,
            ));
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
        st.live_cells = 0;
        st.old_cells = 0;
        st.unswept = false;
    }
}

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
            let (slot, bits) = pagetable::register(meta.base, meta);
            meta.alloc.store(
                bits as *const pagetable::AllocBits as *mut pagetable::AllocBits,
                Ordering::Release,
            );
            meta.entry.store(
                slot as *const pagetable::Entry as *mut pagetable::Entry,
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
            let st = unsafe { meta.state() };
            st.zeroed = true;
            st.on_in_use = false;
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

/// Maps `len` bytes of zeroed, private, anonymous memory without reserve (only the
/// pages touched become resident); page-aligned.
pub(crate) fn map_anonymous(len: usize) -> Result<*mut libc::c_void, std::io::Error> {
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
    Ok(p)
}

/// Maps `size` bytes of zeroed, private, anonymous memory aligned to `align`.
fn map_aligned(size: usize, align: usize) -> Result<usize, std::io::Error> {
    let len = size + align;
    let p = map_anonymous(len)?;
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

/// What the sweep of the last collection needs to tell live cells from dead ones.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SweepParams {
    pub full: bool,
    /// Old objects are marked iff `MARK == parity`.
    pub parity: usize,
    /// Young objects are marked iff `header & (AGE | MARK) == young_marked`.
    pub young_marked: usize,
}

/// What sweeping pool pages found, cumulative.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PoolTotals {
    /// Bytes of live cells (as of each page's last sweep).
    pub live: usize,
    /// Bytes of live old cells.
    pub old: usize,
    /// Bytes freed by sweeps since the heap was created.
    pub freed: u64,
}

/// What to do once the lazy sweep of a collection is complete: set the next trigger.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TriggerPlan {
    /// Live bytes outside the pools (external objects), known at the pause.
    pub other_live: usize,
    /// Old bytes outside the pools.
    pub other_old: usize,
    /// How much a young survivor's byte counts (`HeapConfig::young_weight`).
    pub young_weight: f64,
    /// Bytes not to count (kept only for finalizers).
    pub discount: usize,
    pub growth: f64,
    /// `HeapConfig::headroom`.
    pub headroom: f64,
    /// `HeapConfig::min_interval`: the floor while the live data is under `small_heap`.
    pub min: usize,
    /// `HeapConfig::small_heap`: from this many live bytes on, the floor is
    /// `LARGE_HEAP_FLOOR * min`.
    pub small_heap: usize,
    pub max: usize,
    /// `HeapConfig::resident_reuse`.
    pub reuse: f64,
}

/// A heap holding at least `HeapConfig::small_heap` live bytes waits at least this many
/// times `min_interval` between collections.
pub(crate) const LARGE_HEAP_FLOOR: usize = 2;

/// Free pages unused for this many collections are returned to the OS (madvise): a page
/// freed by one collection is usually needed again before the next.
pub(crate) const IDLE_COLLECTIONS: u32 = 4;

impl TriggerPlan {
    /// The bytes to allocate before the next collection, from the pools' live and old
    /// bytes once swept and the free pool memory that is still resident
    /// (`resident_free`, see [`PageAlloc::resident_free_bytes`]).
    ///
    /// The formula's interval (`counted * growth + extra`) is lengthened to use free
    /// memory the heap already holds, up to `reuse` times the formula's: allocating into
    /// it does not raise the peak, and collecting while it lies unused is the "twice as
    /// often as it should" of a generational heap after a transient peak (a
    /// non-generational collector such as Boehm's fills its heap before collecting).
    pub(crate) fn interval(
        &self,
        pool_live: usize,
        pool_old: usize,
        resident_free: usize,
    ) -> usize {
        let live = (pool_live + self.other_live).saturating_sub(self.discount);
        let old = (pool_old + self.other_old).min(live);
        let counted = old as f64 + (live - old) as f64 * self.young_weight;
        let extra = if self.headroom > 0.0 {
            counted * self.headroom / (counted + self.headroom)
        } else {
            0.0
        };
        let formula = counted * self.growth + extra;
        let interval = if self.reuse > 1.0 {
            formula.max((resident_free as f64).min(formula * self.reuse))
        } else {
            formula
        };
        let floor = if live < self.small_heap {
            self.min
        } else {
            self.min.saturating_mul(LARGE_HEAP_FLOOR)
        };
        // The floor wins over `max` where a configuration puts it higher.
        interval.min(self.max as f64).max(floor as f64) as usize
    }
}

/// One heap's pages: chunks, free pages, pages with free cells per class, pages waiting
/// for their sweep.
pub(crate) struct PageAlloc {
    owner: HeapId,
    chunks: Vec<&'static Chunk>,
    free: Vec<&'static PageMeta>,
    partial: Vec<Vec<&'static PageMeta>>,
    /// Every page that holds cells of some class (plus stale entries of released pages,
    /// dropped at the next `begin_sweep`).
    pub(crate) in_use: Vec<&'static PageMeta>,
    n_in_use: usize,
    /// Pages waiting for the sweep of the last collection, by class.
    unswept: Vec<Vec<&'static PageMeta>>,
    n_unswept: usize,
    params: SweepParams,
    pub(crate) totals: PoolTotals,
    /// Set the heap's trigger with this plan once the sweep is complete.
    plan: Option<TriggerPlan>,
    /// Number of collections that swept (`begin_sweep` calls).
    epoch: u32,
    /// Test hook (`Heap::hold_lazy_sweep`): waiting pages are swept only by
    /// `finish_sweep` (collections, `Heap::complete_sweep`, `Heap::stats`), not by the
    /// helper threads or allocating threads.
    pub(crate) hold: bool,
}

impl PageAlloc {
    pub(crate) fn new(owner: HeapId) -> Self {
        PageAlloc {
            owner,
            chunks: Vec::new(),
            free: Vec::new(),
            partial: (0..NUM_CLASSES).map(|_| Vec::new()).collect(),
            in_use: Vec::new(),
            n_in_use: 0,
            unswept: (0..NUM_CLASSES).map(|_| Vec::new()).collect(),
            n_unswept: 0,
            params: SweepParams {
                full: false,
                parity: 0,
                young_marked: 0,
            },
            totals: PoolTotals::default(),
            plan: None,
            epoch: 0,
            hold: false,
        }
    }

    /// Bytes of address space mapped for this heap's pages.
    pub(crate) fn mapped_bytes(&self) -> usize {
        self.chunks.len() * CHUNK_SIZE
    }

    /// Free pool memory that is resident, in bytes: the free cells of pages in use (the
    /// sweep counted them as neither live nor old) plus free pages that were used and
    /// have not been returned to the OS, counting only those `trim` will keep (idle for
    /// fewer than [`IDLE_COLLECTIONS`] sweeps). Precise only once the sweep is complete.
    pub(crate) fn resident_free_bytes(&self) -> usize {
        let epoch = self.epoch;
        let dirty = self
            .free
            .iter()
            .filter(|page| {
                // SAFETY: free pages are only touched under the page lock, which the
                // caller holds (`&self` of the page allocator, kept behind it).
                let st = unsafe { page.state() };
                !st.zeroed && epoch.wrapping_sub(st.idle_since) < IDLE_COLLECTIONS
            })
            .count();
        (self.n_in_use * PAGE_SIZE).saturating_sub(self.totals.live) + dirty * PAGE_SIZE
    }

    /// Number of pages currently holding cells.
    pub(crate) fn pages_in_use(&self) -> usize {
        self.n_in_use
    }

    /// Pages still waiting for the last collection's sweep.
    pub(crate) fn unswept_pages(&self) -> usize {
        self.n_unswept
    }

    /// A page with free cells of class `class` for a mutator to allocate from.
    /// `trigger` is the heap's trigger, set once a lazy sweep completes.
    pub(crate) fn grant(
        &mut self,
        class: usize,
        trigger: &AtomicUsize,
    ) -> Result<Grant, std::io::Error> {
        let cell = CELL_SIZES[class] as usize;
        loop {
            while let Some(page) = self.partial[class].pop() {
                // SAFETY: we hold the page lock (we are `&mut self` inside the heap's mutex).
                let st = unsafe { page.state() };
                st.listed = false;
                if st.nfree == 0 || st.free_head == FREE_END || st.unswept {
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
            // Lazy sweeping: sweep this class's waiting pages until one has free cells.
            if self.hold {
                break;
            }
            match self.unswept[class].pop() {
                Some(page) => {
                    self.n_unswept -= 1;
                    // SAFETY: we hold the page lock; the page waits for its sweep and no
                    // thread holds it.
                    unsafe { self.sweep_and_place(page, trigger) };
                }
                None => break,
            }
        }
        if self.free.is_empty() && self.n_unswept > 0 && !self.hold {
            // Pages of other classes may be empty: sweep them before mapping more.
            while self.free.is_empty() {
                let Some(page) = self.pop_unswept() else {
                    break;
                };
                // SAFETY: as above.
                unsafe { self.sweep_and_place(page, trigger) };
            }
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
        self.n_in_use += 1;
        // SAFETY: we hold the page lock.
        let st = unsafe { page.state() };
        if !st.on_in_use {
            st.on_in_use = true;
            self.in_use.push(page);
        }
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

    fn pop_unswept(&mut self) -> Option<&'static PageMeta> {
        let class = self.unswept.iter().rposition(|l| !l.is_empty())?;
        self.n_unswept -= 1;
        self.unswept[class].pop()
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
        if n > 0 && !st.listed && !st.unswept {
            st.listed = true;
            self.partial[class].push(page);
        }
    }

    /// After marking: every page that may hold garbage (all pages in a full collection,
    /// pages with young objects in a partial one) waits for its sweep from now on, with
    /// `params`; allocation no longer uses their free cells until they are swept. Pages
    /// left from an earlier sweep must have been swept (`finish_sweep`) first.
    ///
    /// # Safety
    /// The world is stopped and no page is held by a mutator.
    pub(crate) unsafe fn begin_sweep(&mut self, params: SweepParams, plan: TriggerPlan) {
        debug_assert_eq!(self.n_unswept, 0);
        self.epoch = self.epoch.wrapping_add(1);
        self.params = params;
        self.plan = Some(plan);
        let mut in_use = std::mem::take(&mut self.in_use);
        in_use.retain(|&page| {
            // SAFETY: forwarded from the caller.
            let st = unsafe { page.state() };
            debug_assert!(!st.held);
            match page.cell_layout() {
                None => {
                    st.on_in_use = false;
                    false
                }
                Some((_, class)) => {
                    if params.full || st.has_young {
                        st.unswept = true;
                        self.unswept[class].push(page);
                        self.n_unswept += 1;
                        // Lookups must not take the cells this collection found dead
                        // for objects while the page waits.
                        page.publish_waiting(params, self.epoch);
                    }
                    true
                }
            }
        });
        self.in_use = in_use;
        for l in &mut self.partial {
            l.retain(|&p| {
                // SAFETY: forwarded from the caller.
                let st = unsafe { p.state() };
                if st.unswept {
                    st.listed = false;
                }
                !st.unswept
            });
        }
    }

    /// Sweeps every page still waiting; returns how many there were.
    ///
    /// # Safety
    /// No thread holds a page that waits for its sweep (true by construction: such
    /// pages are never granted) and no collection is marking.
    pub(crate) unsafe fn finish_sweep(&mut self, trigger: &AtomicUsize) -> usize {
        let n = self.n_unswept;
        while let Some(page) = self.pop_unswept() {
            // SAFETY: forwarded.
            unsafe { self.sweep_and_place(page, trigger) };
        }
        n
    }

    /// Sweeps up to `max` waiting pages (background sweeping); returns how many.
    ///
    /// # Safety
    /// As for `finish_sweep`.
    pub(crate) unsafe fn sweep_some(&mut self, max: usize, trigger: &AtomicUsize) -> usize {
        let mut n = 0;
        while n < max && !self.hold {
            let Some(page) = self.pop_unswept() else {
                break;
            };
            // SAFETY: forwarded.
            unsafe { self.sweep_and_place(page, trigger) };
            n += 1;
        }
        n
    }

    /// Sweeps one waiting page and files it: released if empty, listed if it has free
    /// cells. Sets the heap's trigger when it was the last one.
    ///
    /// # Safety
    /// As for `finish_sweep`; the page was taken off the waiting lists.
    unsafe fn sweep_and_place(&mut self, page: &'static PageMeta, trigger: &AtomicUsize) {
        let (cell, class) = page
            .cell_layout()
            .expect("a page waiting for its sweep is in use");
        // SAFETY: forwarded: nobody else touches the page's state or free cells.
        let st = unsafe { page.state() };
        let (prev_live, prev_old) = (st.live_cells as usize, st.old_cells as usize);
        // SAFETY: as above.
        let r = unsafe { sweep_page(page, self.params) };
        // The new allocation bitmap is stored: lookups may read it alone again.
        page.publish_info();
        // SAFETY: as above.
        let st = unsafe { page.state() };
        st.unswept = false;
        let t = &mut self.totals;
        t.live = t.live + r.live as usize * cell - prev_live * cell;
        t.old = t.old + r.old as usize * cell - prev_old * cell;
        t.freed += r.freed as u64 * cell as u64;
        if r.live == 0 {
            // SAFETY: no live cell remains and nobody holds the page.
            unsafe { page.release() };
            // SAFETY: as above.
            unsafe { page.state() }.idle_since = self.epoch;
            self.free.push(page);
            self.n_in_use -= 1;
        } else if st.nfree > 0 && !st.listed {
            st.listed = true;
            self.partial[class].push(page);
        }
        if self.n_unswept == 0 {
            if let Some(plan) = self.plan.take() {
                trigger.store(
                    plan.interval(
                        self.totals.live,
                        self.totals.old,
                        self.resident_free_bytes(),
                    ),
                    Ordering::Relaxed,
                );
            }
        }
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
}

/// What sweeping one page found, in cells.
struct PageSweep {
    live: u32,
    old: u32,
    freed: u32,
}

/// Sweeps one pool page: dead cells join the page's free list (in address order); live
/// cells are only read. Rebuilds the page's allocation bitmap and counts.
///
/// # Safety
/// The page is in use, held by no thread, and nobody else sweeps or allocates in it.
/// Mutators may run meanwhile: they never touch dead cells, and the sweep never writes a
/// live one.
unsafe fn sweep_page(page: &'static PageMeta, p: SweepParams) -> PageSweep {
    use crate::object::{header_is_allocated, AGE, MARK, OLD};
    let (cell, class) = page.cell_layout().expect("in-use page");
    let n = cells_per_page(class);
    let first = page.base() + FIRST_CELL;
    // Free cells found, by index (a page has at most 1023 cells).
    let mut free_bits = [0u64; 16];
    // The new allocation bitmap: set for every cell that stays allocated, by index.
    let mut new_alloc = [0u64; pagetable::ALLOC_WORDS];
    let mut nfree = 0u32;
    let mut live = 0u32;
    let mut old = 0u32;
    let mut freed = 0u32;
    let mut has_young = false;
    for i in 0..n {
        let hp = first + i * cell;
        // SAFETY: a cell header inside the page (always mapped).
        let h = unsafe { &*(hp as *const AtomicUsize) }.load(Ordering::Relaxed);
        let free = if !header_is_allocated(h) {
            true
        } else if h & OLD != 0 {
            if p.full && h & MARK != p.parity {
                freed += 1;
                true
            } else {
                old += 1;
                false
            }
        } else if h & (AGE | MARK) == p.young_marked {
            has_young = true;
            false
        } else {
            freed += 1;
            true
        };
        if free {
            nfree += 1;
            free_bits[i >> 6] |= 1 << (i & 63);
        } else {
            live += 1;
            new_alloc[i >> 6] |= 1 << (i & 63);
        }
    }
    // SAFETY: the page's bitmap; only this sweep writes it now.
    unsafe { page.store_allocated(&new_alloc) };
    // Scheduled sweep bits of dead objects were cleared when their sweep functions ran.
    let mut head = FREE_END;
    if live > 0 {
        // Thread the free cells in address order (a page left empty is released as a
        // whole, so its cells need no links).
        let mut last: *const AtomicUsize = std::ptr::null();
        for (w, &bits) in free_bits.iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let hp = first + i * cell;
                if last.is_null() {
                    head = hp;
                } else {
                    // SAFETY: `last` is the header of the previous free cell of this page.
                    unsafe { (*last).store(hp, Ordering::Relaxed) };
                }
                last = hp as *const AtomicUsize;
            }
        }
        if !last.is_null() {
            // SAFETY: as above.
            unsafe { (*last).store(FREE_END, Ordering::Relaxed) };
        }
    }
    // SAFETY: caller's contract.
    let st = unsafe { page.state() };
    st.nfree = nfree;
    st.free_head = head;
    st.has_young = has_young;
    st.live_cells = live;
    st.old_cells = old;
    PageSweep { live, old, freed }
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
