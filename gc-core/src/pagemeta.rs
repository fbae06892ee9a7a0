//! Page metadata and page-table entries: the per-page records that the pool pages
//! (`page.rs`) and the page table (`pagetable.rs`) share, and which point at each other
//! (a [`PageMeta`] knows its page-table [`Entry`] and allocation bitmap; an [`Entry`]
//! knows its page's [`PageMeta`]).
//!
//! Below both `page` and `pagetable`: depends only on `geom`, `heap_id`, `object` and
//! `sizeclass`. Pages are grouped into chunks and swept in `page.rs`; the process-wide
//! tables that find an [`Entry`] from an address are in `pagetable.rs`.

use crate::geom::{self, Geom};
use crate::heap_id::HeapId;
use crate::object::{FREE_END, HEADER_SIZE};
use crate::sizeclass::{FIRST_CELL, PAGE_SIZE};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Words of a page's allocation bitmap: one bit per cell (a page has at most 1,023
/// cells, of 16 bytes).
pub const ALLOC_WORDS: usize = 16;

/// A page's allocation bitmap: bit `i % 64` of word `i / 64` is set while cell `i` holds
/// an allocated object (see `PageMeta::is_allocated`). 128 bytes, two cache lines; for
/// every class of 32 bytes or more (at most 511 cells) only the first is used.
pub type AllocBits = [AtomicU64; ALLOC_WORDS];

/// One page's entry: its metadata, and a copy of what an interior-pointer lookup needs
/// (the owner while the page is in use; the cell size with its division magic, see
/// [`Geom`]) so that a lookup reads this entry (one cache line: 32 bytes, aligned)
/// and then only the page's allocation bitmap, with no table of its own.
#[repr(C, align(32))]
pub struct Entry {
    owner: AtomicU64,
    meta: AtomicPtr<PageMeta>,
    geom: AtomicU64,
}

impl Entry {
    /// The id of the heap the page is in use by; 0 while the page is free and for an
    /// address no pool page was ever registered at. (A lookup compares it with its heap's
    /// id: one instruction with a memory operand.)
    #[inline(always)]
    pub fn owner(&self) -> u64 {
        self.owner.load(Ordering::Acquire)
    }

    /// The page's metadata; `None` if no pool page was ever registered here.
    #[inline(always)]
    pub fn meta(&self) -> Option<&'static PageMeta> {
        // SAFETY: page metadata is leaked when registered and never freed.
        unsafe { self.meta.load(Ordering::Acquire).as_ref() }
    }

    /// The cell geometry of the page's last layout: published before the owner word, so
    /// a lookup that read a heap's id as the owner reads a geometry at least as recent as
    /// that heap's layout of the page.
    #[inline(always)]
    pub(crate) fn geom(&self) -> Geom {
        Geom::from_word(self.geom.load(Ordering::Acquire))
    }

    /// Replaces the geometry word alone (the page waits for its sweep: [`Geom::waiting`]).
    pub(crate) fn set_geom(&self, geom: Geom) {
        self.geom.store(geom.word(), Ordering::Release);
    }

    /// Makes this (free) entry describe the page `meta` (at registration: the page
    /// table's `register`).
    pub(crate) fn register(&self, meta: &'static PageMeta) {
        self.owner.store(0, Ordering::Release);
        self.meta
            .store(meta as *const PageMeta as *mut PageMeta, Ordering::Release);
    }

    /// Publishes the page's state: `Some((owner, geometry))` while in use by a heap,
    /// `None` while free. The geometry is stored before the owner (see [`Entry::geom`]);
    /// a free page keeps its last geometry.
    pub(crate) fn publish(&self, in_use: Option<(HeapId, Geom)>) {
        match in_use {
            Some((owner, geom)) => {
                self.geom.store(geom.word(), Ordering::Release);
                self.owner.store(owner.get(), Ordering::Release);
            }
            None => self.owner.store(0, Ordering::Release),
        }
    }
}

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
    entry: AtomicPtr<Entry>,
    /// Allocation bits, by cell index (`AllocBits`): set when a cell is handed out,
    /// rebuilt by each sweep of the page. Written only by the thread holding the page or
    /// by the collector, read by anyone (interior-pointer lookups), so lookups touch no
    /// object memory (except a cell's header while the page waits for its sweep: its bits
    /// still include the cells the last collection found dead, see
    /// `Geom::is_waiting`). They live in the page table's leaf (`AllocBits`), where
    /// a lookup finds them without this metadata; set at registration.
    alloc: AtomicPtr<AllocBits>,
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
    pub(crate) fn new(base: usize) -> Self {
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

    /// The first word of the page's allocation bitmap, for a pool that holds the page
    /// (`tlab::Pool`, whose inline C fast path sets the bits itself).
    pub(crate) fn alloc_bits(&self) -> &'static AtomicU64 {
        &self.alloc()[0]
    }

    /// The page's allocation bitmap.
    #[inline(always)]
    fn alloc(&self) -> &'static AllocBits {
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
    pub(crate) unsafe fn store_allocated(&self, bits: &[u64; ALLOC_WORDS]) {
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
    pub(crate) unsafe fn assign(&self, owner: HeapId, class: usize) {
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
    /// `Entry::geom`); a free page's entry names no owner.
    pub(crate) fn publish_info(&self) {
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
    pub(crate) fn publish_waiting(&self, params: SweepParams, epoch: u32) {
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

    /// Records the page's page-table entry and allocation bitmap (once, when its chunk is
    /// registered: `page::Chunk`).
    pub(crate) fn attach(&self, slot: &'static Entry, bits: &'static AllocBits) {
        self.alloc.store(
            bits as *const AllocBits as *mut AllocBits,
            Ordering::Release,
        );
        self.entry
            .store(slot as *const Entry as *mut Entry, Ordering::Release);
    }

    /// Clears the owner word (a recycled chunk's page; see `page::Chunk`).
    pub(crate) fn clear_owner(&self) {
        self.owner.store(0, Ordering::Release);
    }

    /// Returns the page to the free state (no cell of it is allocated any more).
    ///
    /// # Safety
    /// As for `assign`, and no cell of the page holds a live object.
    pub(crate) unsafe fn release(&self) {
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

/// What the sweep of the last collection needs to tell live cells from dead ones.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SweepParams {
    pub full: bool,
    /// Old objects are marked iff their mark bit equals `parity`
    /// (`object::Header::is_marked_old`).
    pub parity: usize,
    /// Young objects are marked iff `header & (AGE | MARK) == young_marked`
    /// (`object::Header::is_young_marked`).
    pub young_marked: usize,
}
