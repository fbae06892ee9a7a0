//! Pool pages: 16 KiB pages of equal-sized cells, grouped in 4 MiB chunks, with their
//! metadata kept outside the pages (so a page holds nothing but cells).
//!
//! A page's first cell header is at offset 8, so every payload is 16-aligned; the bytes
//! before it and after the last cell belong to no object. A page is either free (owned
//! by no size class) or in use by one heap for one size class. Allocation state lives
//! in the cell headers themselves (see `object.rs`); the metadata adds, per page, the
//! age bits of young objects and the "sweep function scheduled" bits, both indexed by
//! 16-byte granule so that no division is needed to find them.
//!
//! The per-page metadata ([`PageMeta`]) is `pagemeta.rs`, below both this module and the
//! page table (`pagetable.rs`), which registers each page of a chunk mapped here.

use crate::heap_id::HeapId;
use crate::object::FREE_END;
use crate::pagemeta::{PageMeta, SweepParams, ALLOC_WORDS};
use crate::pagetable;
use crate::sizeclass::{cells_per_page, CELL_SIZES, FIRST_CELL, NUM_CLASSES, PAGE_SIZE};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Pages per chunk.
pub const CHUNK_PAGES: usize = 256;
/// Bytes per chunk.
pub const CHUNK_SIZE: usize = CHUNK_PAGES * PAGE_SIZE;

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
        let base = map_chunk()?;
        let metas: Box<[PageMeta]> = (0..CHUNK_PAGES)
            .map(|i| PageMeta::new(base + i * PAGE_SIZE))
            .collect();
        let chunk: &'static Chunk = Box::leak(Box::new(Chunk { base, metas }));
        for meta in chunk.metas.iter() {
            let (slot, bits) = pagetable::register(meta.base(), meta);
            meta.attach(slot, bits);
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
            meta.clear_owner();
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

/// Address space reserved once per process (inaccessible, committing nothing) from
/// which chunks are mapped in increasing address order, so that pages mapped later lie
/// above those mapped earlier, as in a workspace that grows upward (GASMAN's, or a
/// `brk` heap). Separate mappings would come top-down (Linux places each new one below
/// the last), so a heap that grew would hold its newer objects below its older ones.
///
/// Why it matters: C clients written for a growing workspace order objects by address
/// and keep state on the lower one. GAP's `AND_FLAGS` caches its results on the flags
/// object whose master pointer has the lower address; with chunks mapped top-down the
/// flags made later had the lower addresses, so most flags got a cache of their own (a
/// 101-slot list): after GAP 4.15.1's start-up 37,330 caches (30 MB) and 115,000 lists
/// and 47,000 flags alive, against GASMAN's 82,275 lists and 26,877 flags. With the
/// chunks in address order: 4,497 caches, 82,222 lists and 26,874 flags.
///
/// Under an address-space limit the reservation is at most a quarter of it; when none
/// can be made, or it is used up, chunks are mapped one by one.
struct Reservation {
    next: usize,
    end: usize,
}

/// Bytes of address space reserved for chunks: 64 GiB (16,384 chunks).
const RESERVATION_BYTES: usize = 64 << 30;

/// The reservation: `None` until the first chunk is asked for; an empty range once the
/// reservation failed or was used up.
static RESERVATION: Mutex<Option<Reservation>> = Mutex::new(None);

impl Reservation {
    /// The base of a new chunk mapped from the reservation (zeroed, private,
    /// read-write), or `None` when the reservation is not available.
    fn next_chunk() -> Option<usize> {
        let mut guard = RESERVATION.lock();
        let r = guard.get_or_insert_with(Reservation::make);
        if r.end - r.next < CHUNK_SIZE {
            return None;
        }
        let base = r.next;
        // SAFETY: `[base, base + CHUNK_SIZE)` lies inside our own inaccessible
        // reservation and no chunk was mapped there yet (`next` only grows).
        let mapped = unsafe {
            pagetable::map_anonymous_with(
                Some(base),
                CHUNK_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        // Out of memory for the mapping: the caller's fallback reports it.
        mapped.ok()?;
        r.next += CHUNK_SIZE;
        Some(base)
    }

    /// Reserves the range (chunk-aligned); an empty one if that fails. Under an
    /// address-space limit (`RLIMIT_AS`, `ulimit -v`) it takes at most a quarter of the
    /// limit, so that the rest of the process keeps most of it.
    fn make() -> Reservation {
        let bytes = reservation_bytes(address_space_limit());
        if bytes == 0 {
            return Reservation { next: 0, end: 0 };
        }
        // SAFETY: no fixed address.
        let reserved =
            unsafe { pagetable::map_anonymous_with(None, bytes + CHUNK_SIZE, libc::PROT_NONE) };
        let Ok(p) = reserved else {
            tracing::debug!(
                "cannot reserve {bytes} bytes of address space for the pools; chunks are mapped one by one"
            );
            return Reservation { next: 0, end: 0 };
        };
        let start = (p as usize + CHUNK_SIZE - 1) & !(CHUNK_SIZE - 1);
        Reservation {
            next: start,
            end: start + bytes,
        }
    }
}

/// The process's address-space limit (`RLIMIT_AS`), if it has one.
fn address_space_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// Bytes to reserve under the address-space limit `limit`: [`RESERVATION_BYTES`], or a
/// quarter of the limit if that is less (whole chunks), or none when that would be fewer
/// than 16 chunks.
fn reservation_bytes(limit: Option<u64>) -> usize {
    let cap = limit.map_or(RESERVATION_BYTES, |l| {
        usize::try_from(l / 4).unwrap_or(usize::MAX)
    });
    let bytes = RESERVATION_BYTES.min(cap) & !(CHUNK_SIZE - 1);
    if bytes < 16 * CHUNK_SIZE {
        0
    } else {
        bytes
    }
}

/// A new chunk's memory ([`CHUNK_SIZE`] bytes, zeroed, private, read-write): the next
/// one of the reservation, or a mapping of its own when there is none. Pool chunks and
/// the page runs of big objects (`bigrun.rs`) both come from here.
pub(crate) fn map_chunk() -> Result<usize, std::io::Error> {
    match Reservation::next_chunk() {
        Some(base) => Ok(base),
        None => map_aligned(CHUNK_SIZE, PAGE_SIZE),
    }
}

/// Maps `size` bytes of zeroed, private, anonymous memory aligned to `align`.
fn map_aligned(size: usize, align: usize) -> Result<usize, std::io::Error> {
    let len = size + align;
    let p = pagetable::map_anonymous(len)?;
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

/// What sweeping pool pages found, cumulative.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PoolTotals {
    /// Bytes of live cells (as of each page's last sweep).
    pub live: usize,
    /// Bytes of live old cells.
    pub old: usize,
    /// Bytes freed by sweeps since the heap was created.
    pub freed: u64,
    /// Of those, bytes of old cells (freed after full collections).
    pub old_freed: u64,
}

/// Who swept a pool page (for the statistics: where the sweeping time goes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sweeper {
    /// An allocating thread that needed a page (`grant`), reached the trigger with the
    /// sweep unfinished, or asked for a collection: time the mutator pays.
    Allocation = 0,
    /// A helper thread after the world resumed.
    Background = 1,
    /// A collection, inside its pause (leftovers before marking; eager sweeping).
    Pause = 2,
    /// Anything else (`Heap::stats`, `Heap::complete_sweep`).
    Other = 3,
}

/// Counters of the page allocator: pages swept by whom and how long it took, pages
/// handed out by kind, pages returned to the OS, cells handed out per size class. Kept
/// under the page lock, so they cost the allocation fast path nothing: cells are counted
/// a page at a time, when a page is granted and given back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageCounters {
    /// Pages swept, by [`Sweeper`].
    pub swept: [u64; 4],
    /// Nanoseconds spent sweeping them, by [`Sweeper`].
    pub sweep_ns: [u64; 4],
    /// Pages granted that were zero already (never used, or returned to the OS).
    pub fresh: u64,
    /// Pages granted that were used before and zeroed with `memset` at the grant.
    pub zeroed: u64,
    /// Pages granted with a free list (partly used).
    pub with_free_cells: u64,
    /// Pages whose memory was returned to the OS (`madvise`).
    pub returned: u64,
    /// Times an allocating thread that needed a page found the page lock taken.
    pub lock_waits: u64,
    /// Nanoseconds those threads waited for it.
    pub lock_wait_ns: u64,
    /// Cells handed out per size class (granted minus given back unused).
    pub cells: [u64; NUM_CLASSES],
    /// Calls of the system allocator's trim ([`crate::big::trim_system_heap`]).
    pub malloc_trims: u64,
    /// Nanoseconds they took.
    pub malloc_trim_ns: u64,
    /// Bytes of freed big-object page runs returned to the OS after collections.
    pub big_slots_released: u64,
    /// Nanoseconds that took.
    pub big_slot_release_ns: u64,
}

impl Default for PageCounters {
    fn default() -> Self {
        PageCounters {
            swept: [0; 4],
            sweep_ns: [0; 4],
            fresh: 0,
            zeroed: 0,
            with_free_cells: 0,
            returned: 0,
            lock_waits: 0,
            lock_wait_ns: 0,
            cells: [0; NUM_CLASSES],
            malloc_trims: 0,
            malloc_trim_ns: 0,
            big_slots_released: 0,
            big_slot_release_ns: 0,
        }
    }
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
    /// The most bytes the interval may be for `HeapConfig::young_pause_goal` (never
    /// below the floor).
    pub cap: usize,
}

/// A heap holding at least `HeapConfig::small_heap` live bytes waits at least this many
/// times `min_interval` between collections.
pub(crate) const LARGE_HEAP_FLOOR: usize = 2;

/// Free pages unused for this many collections are returned to the OS (madvise, after
/// the pause): a page freed by one collection is usually needed again before the next,
/// or not soon. One, as for the page runs of big objects (`bigrun.rs`): on GAP 4.15.1's
/// testinstall, peak RSS 449 and 450 MB with four, 443 and 440 MB with one (alternated
/// runs, 2026-11-29).
pub(crate) const IDLE_COLLECTIONS: u32 = 1;

/// Pages a thread sweeping outside the page lock takes at once (`take_waiting`).
pub(crate) const SWEEP_BATCH: usize = 16;

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
        // The floor wins over `max` and the pause goal's cap where a configuration puts
        // it higher.
        interval
            .min(self.max as f64)
            .min(self.cap as f64)
            .max(floor as f64) as usize
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
    /// Pages a helper thread took off `unswept` and sweeps outside the page lock
    /// (`take_waiting`, `sweep_taken`, `place_taken`).
    taken: usize,
    params: SweepParams,
    pub(crate) totals: PoolTotals,
    /// Set the heap's trigger with this plan once the sweep is complete.
    plan: Option<TriggerPlan>,
    /// Number of collections that swept (`begin_sweep` calls).
    epoch: u32,
    /// Free pages [`PageAlloc::trim`] took off `free` to go back to the OS after the
    /// pause ([`PageAlloc::take_trimmed`], [`release_pages`], [`PageAlloc::put_back`]).
    trimmed: Vec<&'static PageMeta>,
    /// Test hook (`Heap::hold_lazy_sweep`): waiting pages are swept only by
    /// `HeapInner::finish_sweep` (collections, `Heap::complete_sweep`, `Heap::stats`), not by the
    /// helper threads or allocating threads.
    pub(crate) hold: bool,
    /// Statistics ([`PageCounters`]).
    pub(crate) counters: PageCounters,
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
            taken: 0,
            params: SweepParams {
                full: false,
                parity: 0,
                young_marked: 0,
            },
            totals: PoolTotals::default(),
            plan: None,
            epoch: 0,
            trimmed: Vec::new(),
            hold: false,
            counters: PageCounters::default(),
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

    /// Pages whose sweep for the last collection is not complete: waiting, or being
    /// swept by a helper thread outside the page lock.
    pub(crate) fn unswept_pages(&self) -> usize {
        self.n_unswept + self.taken
    }

    /// Pages a helper thread is sweeping outside the page lock: `finish_sweep`'s callers
    /// wait for them (`HeapInner::finish_sweep`).
    pub(crate) fn taken_pages(&self) -> usize {
        self.taken
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
                self.counters.with_free_cells += 1;
                self.counters.cells[class] += st.nfree as u64;
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
                    unsafe { self.sweep_and_place(page, trigger, Sweeper::Allocation) };
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
                unsafe { self.sweep_and_place(page, trigger, Sweeper::Allocation) };
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
        let first = page.base() + FIRST_CELL;
        let bytes = n * cell;
        self.counters.cells[class] += n as u64;
        if st.zeroed {
            self.counters.fresh += 1;
        } else {
            self.counters.zeroed += 1;
            // A recycled page holds stale cells: zero it once, then bump-allocate from it
            // (which needs neither a free list nor zeroing per object).
            // SAFETY: the page is ours and free: nothing else reads or writes it.
            unsafe { std::ptr::write_bytes(page.base() as *mut u8, 0, PAGE_SIZE) };
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
        self.counters.cells[class] = self.counters.cells[class].saturating_sub(n as u64);
        if n > 0 && !st.listed && !st.unswept {
            st.listed = true;
            self.partial[class].push(page);
        }
    }

    /// After marking: every page that may hold garbage (all pages in a full collection,
    /// pages with young objects in a partial one) waits for its sweep from now on, with
    /// `params`; allocation no longer uses their free cells until they are swept. Pages
    /// left from an earlier sweep must have been swept (`HeapInner::finish_sweep`) first.
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

    /// Sweeps every page still waiting; returns how many there were. `who` says for
    /// the statistics on whose time.
    ///
    /// # Safety
    /// No thread holds a page that waits for its sweep (true by construction: such
    /// pages are never granted) and no collection is marking.
    pub(crate) unsafe fn sweep_waiting(&mut self, trigger: &AtomicUsize, who: Sweeper) -> usize {
        let n = self.n_unswept;
        while let Some(page) = self.pop_unswept() {
            // SAFETY: forwarded.
            unsafe { self.sweep_and_place(page, trigger, who) };
        }
        n
    }

    /// Takes up to `max` waiting pages off their lists for a helper thread to sweep
    /// outside the page lock (`sweep_taken`), so that allocating threads do not wait
    /// for the page lock while it sweeps; each one goes back with `place_taken`. Returns
    /// the parameters to sweep them with. Takes none while `hold` is on.
    pub(crate) fn take_waiting(
        &mut self,
        max: usize,
        out: &mut Vec<&'static PageMeta>,
    ) -> SweepParams {
        while out.len() < max && !self.hold {
            let Some(page) = self.pop_unswept() else {
                break;
            };
            self.taken += 1;
            out.push(page);
        }
        self.params
    }

    /// Files a page swept by `sweep_taken` (see `place`), its time counted for `who`.
    pub(crate) fn place_taken(&mut self, swept: Swept, trigger: &AtomicUsize, who: Sweeper) {
        self.taken -= 1;
        self.place(swept, trigger, who);
    }

    /// Sweeps one waiting page and files it (`place`).
    ///
    /// # Safety
    /// As for `sweep_waiting`; the page was taken off the waiting lists.
    unsafe fn sweep_and_place(
        &mut self,
        page: &'static PageMeta,
        trigger: &AtomicUsize,
        who: Sweeper,
    ) {
        // SAFETY: forwarded.
        let swept = unsafe { sweep_taken(page, self.params) };
        self.place(swept, trigger, who);
    }

    /// Files a swept page: released if empty, listed if it has free cells. Sets the
    /// heap's trigger when it was the last one.
    fn place(&mut self, swept: Swept, trigger: &AtomicUsize, who: Sweeper) {
        let Swept {
            page,
            r,
            prev_live,
            prev_old,
            ns,
        } = swept;
        let (cell, class) = page
            .cell_layout()
            .expect("a page waiting for its sweep is in use");
        // SAFETY: we hold the page lock and the page is on no list: nobody else touches
        // its state.
        let st = unsafe { page.state() };
        st.unswept = false;
        let t = &mut self.totals;
        t.live = t.live + r.live as usize * cell - prev_live * cell;
        t.old = t.old + r.old as usize * cell - prev_old * cell;
        t.freed += r.freed as u64 * cell as u64;
        t.old_freed += r.old_freed as u64 * cell as u64;
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
        self.counters.swept[who as usize] += 1;
        self.counters.sweep_ns[who as usize] += ns;
        if self.unswept_pages() == 0 {
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

    /// Takes off the free list the free pages that have been idle for at least `idle`
    /// sweeps, keeping `keep` dirty ones, for their memory to go back to the OS after the
    /// pause ([`PageAlloc::take_trimmed`], [`release_pages`], [`PageAlloc::put_back`]):
    /// `madvise` in the pause made GCBench's longest pause 0.52x -> 0.80x Boehm's once
    /// pages went back after one idle collection. Returns the number taken.
    pub(crate) fn trim(&mut self, keep: usize, idle: u32) -> usize {
        // Pages taken by the last call and not given back yet stay free, still dirty.
        let left = std::mem::take(&mut self.trimmed);
        self.free.splice(0..0, left);
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
        candidates.sort_by_key(|p| p.base());
        candidates.truncate(n);
        if n > 0 {
            self.free.retain(|p| {
                candidates
                    .binary_search_by_key(&p.base(), |c| c.base())
                    .is_err()
            });
        }
        self.trimmed = candidates;
        n
    }

    /// Whether [`PageAlloc::trim`] took pages that wait to go back to the OS.
    pub(crate) fn has_trimmed(&self) -> bool {
        !self.trimmed.is_empty()
    }

    /// The pages [`PageAlloc::trim`] took, for [`release_pages`] outside the lock.
    pub(crate) fn take_trimmed(&mut self) -> Vec<&'static PageMeta> {
        std::mem::take(&mut self.trimmed)
    }

    /// Puts pages [`release_pages`] took back on the free list: those it gave back as
    /// zero pages, below the dirty ones (those are reused first: they are resident
    /// already), and those it could not give back as they were.
    pub(crate) fn put_back(
        &mut self,
        released: Vec<&'static PageMeta>,
        kept: Vec<&'static PageMeta>,
    ) {
        for page in &released {
            // SAFETY: free pages are only touched under the page lock, which we hold.
            unsafe { page.state() }.zeroed = true;
        }
        self.counters.returned += released.len() as u64;
        self.free.splice(0..0, released);
        self.free.extend(kept);
    }
}

/// Returns the memory of free pages to the OS, one call per run of adjacent pages;
/// `pages` is sorted by address and nobody else uses them (taken off the free list by
/// [`PageAlloc::trim`]). Runs without the page lock, after the pause. Returns the pages
/// given back and those kept (a failed call: still dirty).
pub(crate) fn release_pages(
    pages: Vec<&'static PageMeta>,
) -> (Vec<&'static PageMeta>, Vec<&'static PageMeta>) {
    let bases: Vec<usize> = pages.iter().map(|p| p.base()).collect();
    // SAFETY: free pages of ours, on no list: nothing lives in them; after
    // MADV_DONTNEED they read as zero, which `put_back` records.
    let (_, failed) = unsafe { release_ranges(&bases, PAGE_SIZE) };
    if failed.is_empty() {
        return (pages, Vec::new());
    }
    pages
        .into_iter()
        .partition(|p| failed.binary_search(&p.base()).is_err())
}

/// Gives the memory of the ranges `[base, base + len)` of `bases` back to the OS
/// (`MADV_DONTNEED`), one call per run of adjacent ranges. Returns the bytes given back
/// and the bases of the ranges a failed call left as they were (in order).
///
/// # Safety
/// `bases` is sorted; each range is private anonymous memory of ours that nothing uses
/// and that may read as zero afterwards.
pub(crate) unsafe fn release_ranges(bases: &[usize], len: usize) -> (usize, Vec<usize>) {
    let mut released = 0;
    let mut failed = Vec::new();
    let mut i = 0;
    while i < bases.len() {
        let start = bases[i];
        let mut j = i + 1;
        while j < bases.len() && bases[j] == start + (j - i) * len {
            j += 1;
        }
        let bytes = (j - i) * len;
        // SAFETY: the caller's: ranges of ours nothing uses.
        let r = unsafe { libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_DONTNEED) };
        if r == 0 {
            released += bytes;
        } else {
            tracing::debug!(
                "madvise of {bytes} free bytes failed: {}",
                std::io::Error::last_os_error()
            );
            failed.extend_from_slice(&bases[i..j]);
        }
        i = j;
    }
    (released, failed)
}

/// A page swept and not yet filed (`PageAlloc::place`).
pub(crate) struct Swept {
    page: &'static PageMeta,
    r: PageSweep,
    /// The page's live and old cells before the sweep (for the totals).
    prev_live: usize,
    prev_old: usize,
    ns: u64,
}

/// Sweeps a page taken off the waiting lists (`PageAlloc::take_waiting`, or under the
/// page lock by `sweep_and_place`), without needing the page lock: the page is on no
/// list, so no other thread reads or writes its state or its free cells until it is
/// filed with `place_taken`/`place`.
///
/// # Safety
/// The page was taken off the waiting lists and is not yet filed, and no collection
/// marks until it is (collections wait for taken pages: `HeapInner::finish_sweep`).
pub(crate) unsafe fn sweep_taken(page: &'static PageMeta, params: SweepParams) -> Swept {
    let t0 = Instant::now();
    // SAFETY: the caller's contract: this thread alone touches the page's state.
    let st = unsafe { page.state() };
    let (prev_live, prev_old) = (st.live_cells as usize, st.old_cells as usize);
    // SAFETY: as above.
    let r = unsafe { sweep_page(page, params) };
    // The new allocation bitmap is stored: lookups may read it alone again.
    page.publish_info();
    Swept {
        page,
        r,
        prev_live,
        prev_old,
        ns: t0.elapsed().as_nanos() as u64,
    }
}

/// What sweeping one page found, in cells.
struct PageSweep {
    live: u32,
    old: u32,
    freed: u32,
    /// Of `freed`, old cells.
    old_freed: u32,
}

/// Sweeps one pool page: dead cells join the page's free list (in address order); live
/// cells are only read. Rebuilds the page's allocation bitmap and counts.
///
/// # Safety
/// The page is in use, held by no thread, and nobody else sweeps or allocates in it.
/// Mutators may run meanwhile: they never touch dead cells, and the sweep never writes a
/// live one.
unsafe fn sweep_page(page: &'static PageMeta, p: SweepParams) -> PageSweep {
    use crate::object::Header;
    let (cell, class) = page.cell_layout().expect("in-use page");
    let n = cells_per_page(class);
    let first = page.base() + FIRST_CELL;
    // Free cells found, by index (a page has at most 1023 cells).
    let mut free_bits = [0u64; 16];
    // The new allocation bitmap: set for every cell that stays allocated, by index.
    let mut new_alloc = [0u64; ALLOC_WORDS];
    let mut nfree = 0u32;
    let mut live = 0u32;
    let mut old = 0u32;
    let mut freed = 0u32;
    let mut old_freed = 0u32;
    let mut has_young = false;
    for i in 0..n {
        let hp = first + i * cell;
        // SAFETY: a cell header inside the page (always mapped).
        let h = Header::from_raw(unsafe { &*(hp as *const AtomicUsize) }.load(Ordering::Relaxed));
        let free = if !h.is_allocated() {
            true
        } else if h.is_old() {
            if p.full && !h.is_marked_old(p.parity) {
                old_freed += 1;
                true
            } else {
                old += 1;
                false
            }
        } else if h.is_young_marked(p.young_marked) {
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
    PageSweep {
        live,
        old,
        freed: freed + old_freed,
        old_freed,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks come from the reservation in increasing address order, each aligned to
    /// its size, whatever else the process maps in between.
    #[test]
    fn chunks_are_mapped_upward() {
        let a = Reservation::next_chunk().expect("a chunk from the reservation");
        let _other = map_aligned(CHUNK_SIZE, PAGE_SIZE).expect("a separate mapping");
        let b = Reservation::next_chunk().expect("a chunk from the reservation");
        assert!(b > a, "{b:#x} above {a:#x}");
        assert_eq!(a % CHUNK_SIZE, 0);
        assert_eq!(b % CHUNK_SIZE, 0);
        // SAFETY: a fresh, private, read-write mapping of ours that nothing else uses.
        unsafe {
            *(b as *mut u64) = 1;
            assert_eq!(*((b + CHUNK_SIZE - 8) as *const u64), 0);
        }
    }
    /// Under an address-space limit the reservation takes a quarter of it at most, and
    /// none when that is under 16 chunks (64 MiB).
    #[test]
    fn the_reservation_leaves_most_of_an_address_space_limit() {
        assert_eq!(reservation_bytes(None), RESERVATION_BYTES);
        assert_eq!(reservation_bytes(Some(1 << 40)), RESERVATION_BYTES);
        assert_eq!(reservation_bytes(Some(16 << 30)), 4 << 30);
        assert_eq!(reservation_bytes(Some((1 << 30) + 12345)), 256 << 20);
        assert_eq!(reservation_bytes(Some(200 << 20)), 0);
    }
}
