//! The heap: configuration, the registry of mutator threads, types, roots, tasks and
//! the state the collector keeps between collections.

use crate::callbacks::{Callback, CallbackId, CallbackKind, Callbacks};
use crate::error::GcError;
pub use crate::heap_id::HeapId;
use crate::mutator::{Mutator, MutatorShared, Pool};
use crate::object::{ObjRef, MARK, OLD};
use crate::page::PageAlloc;
use crate::sizeclass::{class_of, CELL_SIZES, MAX_INTERNAL_OBJ_SIZE};
use crate::stats::{GcStats, StatsAcc};
use crate::task::Task;
use crate::types::{ForeignTypeSpec, MarkProc, SweepProc, TypeDesc, TypeKind, TypeRef};
use crate::weak::{FinQueue, WeakState};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

impl From<&Heap> for HeapId {
    fn from(heap: &Heap) -> HeapId {
        heap.id()
    }
}

/// Tuning of a heap. All sizes in bytes.
#[derive(Clone, Debug)]
pub struct HeapConfig {
    /// The least number of bytes allocated (pool pages handed out plus big objects)
    /// between two collections while the heap holds fewer than `small_heap` live bytes
    /// (default 2 MiB); twice that from `small_heap` on. The first collection comes
    /// after half of it (1 MiB by default): a small program's peak stays near that of a
    /// collector with a small initial heap (Boehm's), and a program building something
    /// large learns so at its first collection.
    pub min_interval: usize,
    /// Live bytes (after a collection's sweep) from which the least interval between
    /// collections is `2 * min_interval` instead of `min_interval` (default 1 MiB; 0:
    /// always twice). A heap of a few hundred KB that collects every `min_interval`
    /// has its peak near `min_interval` above its live data (minigap's group orders:
    /// 168 KB live, 20 MB allocated); a heap with a large structure under construction
    /// needs the longer floor, or the structure survives two collections while it is
    /// built and is promoted, to be freed only by a full collection (GCBench's stretch
    /// tree at a 2 MiB floor: peak RSS 1.33x Boehm's). The live data is the figure of
    /// the completed sweep, so a structure under construction at the first collection
    /// sets the longer floor at once.
    pub small_heap: usize,
    /// After a collection the next one runs when `counted_live * growth + extra` more
    /// bytes have been allocated (but never fewer than `min_interval`, never more than
    /// `max_interval`), where `counted_live` is the old generation's live bytes plus
    /// `young_weight` times the young survivors' bytes, and `extra` comes from
    /// `headroom`.
    pub growth: f64,
    /// How much the young objects that survived the last collection count towards the
    /// next interval (0.0 to 1.0; default 0.0). Young survivors are often transient (a
    /// structure under construction, a value a stack slot still holds): counting them
    /// lets one burst of them inflate the next interval, and the peak heap with it
    /// (GCBench with `headroom` 32 MiB: peak RSS 37.6-38.0 MB at 0.0, 38.9-40.2 MB at
    /// 0.25, 43.6 MB at 0.5). Survivors that stay are promoted by the second collection
    /// they survive and then count in full, so the interval lags real growth by one or
    /// two collections at most.
    pub young_weight: f64,
    /// Extra room for small and middle-sized heaps, in bytes (0: none; default 32 MiB):
    /// the interval gets `extra = counted_live * headroom / (counted_live + headroom)`
    /// more bytes: nearly `counted_live` (one more `growth`) while the counted live data
    /// is well below `headroom`, never more than `headroom` however large the heap.
    /// Partial collections of a small heap are cheap but, at `growth` 1, twice as
    /// frequent as a non-generational collector's (GCBench: 71 collections against
    /// Boehm's 37 before, 43 with it); a 160 MB heap grows by at most 32 MB more
    /// (`bencharr`: +7% peak RSS), and below `min_interval` nothing changes.
    pub headroom: usize,
    /// Use of free memory the heap already holds (default 2.0; 1.0 or less: off): the
    /// interval from `growth` and `headroom` is lengthened to the free pool memory that
    /// is still resident (free cells of pages in use and free pages not yet returned to
    /// the OS), up to `resident_reuse` times the formula's. Allocating into memory that
    /// is already resident does not raise the peak; a heap that a transient structure
    /// once grew (GCBench's stretch tree) otherwise collects more often than it needs
    /// to afterwards (GCBench: 42-43 collections against Boehm's 37, which fills its
    /// heap before collecting; with it 32-33, see the README). The factor bounds what a
    /// large transient peak can do: pages beyond it stay idle and are returned to the OS.
    pub resident_reuse: f64,
    /// Upper bound of the interval between collections (default 32 MiB): the young
    /// generation's size. A `min_interval` above it wins (the interval is never below
    /// the floor). The formula above grows the interval with the old generation,
    /// which suits a small heap; on a large one it let the heap double between
    /// collections. Full collections come from the old generation's growth
    /// (`full_growth`), whatever this bound. Real GAP 4.12.1 (48 testinstall files): with
    /// 1 GiB, 13 partial collections and a peak RSS of 692 MB; with 32 MiB, 85 and
    /// 360-378 MB, in the same time (9.9-10.3 s against 11.1 s).
    pub max_interval: usize,
    /// An automatic collection is full when the old generation has grown by this factor
    /// since the last full collection (1.0 = doubled).
    pub full_growth: f64,
    /// Collect every N allocations on each thread (stress mode); `None` to disable.
    pub stress_every: Option<u64>,
    /// Verify mode: before each partial collection, check that no old object outside
    /// the remembered set references a young one, and validate every queued reference.
    pub verify: bool,
    /// Free pages kept mapped after a collection; the rest is returned to the OS.
    pub keep_free_pages: usize,
    /// Collector threads that mark in parallel: the collecting thread and
    /// `mark_threads - 1` helper threads of the heap, started at its first collection.
    /// 0 (the default) means one per core; 1 marks on the collecting thread alone. Mark
    /// functions then run on any of these threads, possibly at the same time. The verify
    /// mode always marks on one thread.
    pub mark_threads: usize,
    /// With several collector threads: objects each drain of a collection marks on the
    /// collecting thread alone before it wakes the helper threads (default 65536). Below
    /// that, sharing work costs more than it saves (minigap's array workload: its
    /// 50,000-130,000-object partial collections marked 1.3-2x slower with two threads).
    /// 0: wake them at once.
    pub parallel_threshold: usize,
    /// Sweep pool pages lazily, after the world resumes (by the helper threads, or by
    /// allocating threads when they need a page), instead of inside the pause. Sweep
    /// functions and external objects are still swept in the pause.
    pub lazy_sweep: bool,
}

impl Default for HeapConfig {
    fn default() -> Self {
        HeapConfig {
            min_interval: 2 << 20,
            small_heap: 1 << 20,
            growth: 1.0,
            young_weight: 0.0,
            headroom: 32 << 20,
            resident_reuse: 2.0,
            max_interval: 32 << 20,
            full_growth: 1.0,
            stress_every: None,
            verify: false,
            keep_free_pages: 64,
            mark_threads: 0,
            parallel_threshold: 1 << 16,
            lazy_sweep: true,
        }
    }
}

impl HeapConfig {
    fn validate(&self) -> Result<(), GcError> {
        if self.min_interval == 0 || self.max_interval == 0 {
            return Err(GcError::BadConfig(format!(
                "need min_interval ({}) and max_interval ({}) above 0",
                self.min_interval, self.max_interval
            )));
        }
        let positive = |x: f64| x > 0.0 && x.is_finite();
        if !positive(self.growth) || !positive(self.full_growth) {
            return Err(GcError::BadConfig(
                "growth and full_growth must be positive and finite".into(),
            ));
        }
        if !(self.resident_reuse >= 0.0 && self.resident_reuse.is_finite()) {
            return Err(GcError::BadConfig(format!(
                "resident_reuse ({}) must be finite and not negative",
                self.resident_reuse
            )));
        }
        if !(0.0..=1.0).contains(&self.young_weight) {
            return Err(GcError::BadConfig(format!(
                "young_weight ({}) must be between 0 and 1",
                self.young_weight
            )));
        }
        if self.mark_threads > 1024 {
            return Err(GcError::BadConfig(format!(
                "mark_threads ({}) must be at most 1024",
                self.mark_threads
            )));
        }
        if self.stress_every == Some(0) {
            return Err(GcError::BadConfig("stress_every must be at least 1".into()));
        }
        Ok(())
    }
}

impl HeapConfig {
    /// This configuration with the `GC_CORE_*` environment variables applied (what the
    /// C ABI's default heap uses): `GC_CORE_MARK_THREADS`, `GC_CORE_LAZY_SWEEP`,
    /// `GC_CORE_GROWTH`, `GC_CORE_YOUNG_WEIGHT`, `GC_CORE_HEADROOM`,
    /// `GC_CORE_RESIDENT_REUSE`, `GC_CORE_SMALL_HEAP`, `GC_CORE_FULL_GROWTH`,
    /// `GC_CORE_MAX_INTERVAL`, `GC_CORE_MIN_INTERVAL` (the fields of those names),
    /// `GC_CORE_STRESS` (`stress_every`) and `GC_CORE_VERIFY` (0 or 1). A value that does
    /// not parse or is out of range is reported on standard error and ignored.
    pub fn with_env(self) -> HeapConfig {
        let mut config = self;
        if let Some(n) = env_knob("GC_CORE_MARK_THREADS", "a number from 0 to 1024", |v| {
            v.parse::<usize>().ok().filter(|&n| n <= 1024)
        }) {
            config.mark_threads = n;
        }
        if let Some(on) = env_knob("GC_CORE_LAZY_SWEEP", "0 or 1", |v| match v {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        }) {
            config.lazy_sweep = on;
        }
        if let Some(g) = env_knob("GC_CORE_GROWTH", "a number from 0.1 to 100", |v| {
            v.parse::<f64>().ok().filter(|g| (0.1..=100.0).contains(g))
        }) {
            config.growth = g;
        }
        if let Some(w) = env_knob("GC_CORE_YOUNG_WEIGHT", "a number from 0 to 1", |v| {
            v.parse::<f64>().ok().filter(|w| (0.0..=1.0).contains(w))
        }) {
            config.young_weight = w;
        }
        if let Some(h) = env_knob("GC_CORE_HEADROOM", "a byte count up to 1 TiB", |v| {
            v.parse::<usize>().ok().filter(|h| *h <= 1 << 40)
        }) {
            config.headroom = h;
        }
        if let Some(r) = env_knob("GC_CORE_RESIDENT_REUSE", "a number from 0 to 100", |v| {
            v.parse::<f64>().ok().filter(|r| (0.0..=100.0).contains(r))
        }) {
            config.resident_reuse = r;
        }
        if let Some(s) = env_knob("GC_CORE_SMALL_HEAP", "a byte count up to 1 TiB", |v| {
            v.parse::<usize>().ok().filter(|s| *s <= 1 << 40)
        }) {
            config.small_heap = s;
        }
        if let Some(f) = env_knob("GC_CORE_FULL_GROWTH", "a number from 0.05 to 100", |v| {
            v.parse::<f64>().ok().filter(|f| (0.05..=100.0).contains(f))
        }) {
            config.full_growth = f;
        }
        if let Some(m) = env_knob(
            "GC_CORE_MAX_INTERVAL",
            "a byte count from 64 KiB to 1 TiB",
            |v| {
                v.parse::<usize>()
                    .ok()
                    .filter(|m| (64 << 10..=1 << 40).contains(m))
            },
        ) {
            config.max_interval = m;
        }
        if let Some(n) = env_knob("GC_CORE_STRESS", "an allocation count from 1", |v| {
            v.parse::<u64>().ok().filter(|n| *n >= 1)
        }) {
            config.stress_every = Some(n);
        }
        if let Some(on) = env_knob("GC_CORE_VERIFY", "0 or 1", |v| match v {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        }) {
            config.verify = on;
        }
        if let Some(m) = env_knob(
            "GC_CORE_MIN_INTERVAL",
            "a byte count from 64 KiB to 1 GiB",
            |v| {
                v.parse::<usize>()
                    .ok()
                    .filter(|m| (64 << 10..=1 << 30).contains(m))
            },
        ) {
            config.min_interval = m;
        }
        config
    }
}

/// The value of environment variable `name` parsed by `parse`; reported and ignored
/// when set but not `expected`.
fn env_knob<T>(name: &str, expected: &str, parse: impl Fn(&str) -> Option<T>) -> Option<T> {
    let v = std::env::var(name).ok()?;
    let parsed = parse(v.trim());
    if parsed.is_none() {
        eprintln!("gc-core: ignoring {name}={v:?}: expected {expected}");
    }
    parsed
}

/// Bytes allocated before a heap's first collection: half of `min_interval`.
pub(crate) fn first_interval(min_interval: usize) -> usize {
    (min_interval / 2).max(1)
}

/// Mutator threads and the collection handshake, under `HeapInner::world`.
pub(crate) struct World {
    pub mutators: Vec<Arc<MutatorShared>>,
    pub collecting: bool,
    /// Incremented at the end of every collection.
    pub epoch: u64,
    /// Kind of the last collection that ran.
    pub last_full: bool,
}

/// State the collector keeps between collections, under `HeapInner::gc`.
pub(crate) struct GcState {
    /// For old objects, the MARK value that means "marked" (flips at every full
    /// collection, which unmarks the whole old generation at once).
    pub parity: usize,
    /// For young objects, the MARK value that (with AGE) means "marked" (flips at every
    /// collection, which unmarks every young survivor at once).
    pub young_parity: usize,
    /// Old objects with young children (remembered set), from the last collection.
    pub remset: Vec<ObjRef>,
    /// Objects whose sweep function is scheduled (merged from threads).
    pub sweep_list: Vec<ObjRef>,
    /// Old generation bytes after the last full collection.
    pub old_after_full: usize,
    /// The last full collection's sweep was lazy: set `old_after_full` once it is done.
    pub full_pending: bool,
    pub stats: StatsAcc,
    /// Permanent (type) objects' pool.
    pub perm: Pool,
    /// Errors found by the verify mode, most recent last (bounded).
    pub verify_errors: Vec<String>,
}

/// The shared heap; `Heap` is an `Arc` of it.
pub(crate) struct HeapInner {
    /// Non-zero while a collection asks threads to stop (polled at safepoints).
    pub gc_flag: AtomicU32,
    pub pages: Mutex<PageAlloc>,
    pub world: Mutex<World>,
    pub cv_stopped: Condvar,
    pub cv_resume: Condvar,
    pub gc: Mutex<GcState>,
    /// The statistics as of the start of the running (or last) collection, for
    /// [`Heap::stats`] called from inside a collection (a callback, a mark or sweep
    /// function), where `gc` is held by the collection itself. Percentiles are those of
    /// the last `stats()` call outside a collection.
    pub published: Mutex<GcStats>,
    /// External (big) objects, young and old. Locked briefly by allocation and by the
    /// sweep.
    pub big: Mutex<BigLists>,
    pub callbacks: Callbacks,
    pub roots: Mutex<Roots>,
    pub types: Mutex<Vec<TypeRef>>,
    pub tasks: Mutex<Vec<Arc<Task>>>,
    pub config: Mutex<HeapConfig>,
    pub stress_every: AtomicU64,
    pub verify: AtomicBool,
    /// Bytes handed to allocators since the last collection, and the trigger.
    pub allocd: AtomicUsize,
    pub trigger: AtomicUsize,
    /// Allocation statistics of threads that have detached.
    pub detached_objects: AtomicU64,
    pub detached_bytes: AtomicU64,
    /// Weak references, finalizer and reference-queue registrations (`weak.rs`).
    pub weak: Mutex<WeakState>,
    /// Finalizers waiting to run and running (their objects are roots).
    pub fin: Mutex<FinQueue>,
    /// `fin.pending.len()`, readable without the lock.
    pub fin_pending: AtomicUsize,
    /// Finalizers run, and Rust finalizers that panicked.
    pub fin_run: AtomicU64,
    pub fin_panics: AtomicU64,
    datatype: AtomicUsize,
    weakref_type: AtomicUsize,
    /// The heap's identity, never reused.
    id: HeapId,
    /// Helper threads for parallel marking and lazy sweeping, started on first use.
    pub pool: Mutex<Option<crate::par::MarkPool>>,
}

/// The heap's external objects.
#[derive(Default)]
pub(crate) struct BigLists {
    pub young: Vec<ObjRef>,
    pub old: Vec<ObjRef>,
    /// Bytes (headers included) of the objects on the lists, and of the old ones.
    pub live: usize,
    pub old_bytes: usize,
}

/// Persistent roots: a slab of object references.
#[derive(Default)]
pub(crate) struct Roots {
    pub slots: Vec<Option<ObjRef>>,
    free: Vec<usize>,
}

/// A garbage-collected heap. Cloning gives another handle to the same heap.
#[derive(Clone)]
pub struct Heap(pub(crate) Arc<HeapInner>);

impl HeapInner {
    /// `s` (the collector's counters) completed with the page and big-object totals.
    /// With lazy sweeping, pages still waiting for the last collection's sweep are swept
    /// first, so that bytes freed and live are exact. The caller holds `gc`.
    fn complete_stats(&self, mut s: GcStats) -> GcStats {
        let mut pages = self.pages.lock();
        // SAFETY: the gc lock is held (by the caller), so no collection is marking;
        // waiting pages are never held by a thread.
        unsafe { pages.finish_sweep(&self.trigger) };
        let big = self.big.lock();
        s.live_bytes = (pages.totals.live + big.live) as u64;
        s.old_bytes = (pages.totals.old + big.old_bytes) as u64;
        s.bytes_freed += pages.totals.freed;
        s.pages_in_use = pages.pages_in_use() as u64;
        s.mapped_bytes = pages.mapped_bytes() as u64;
        s
    }

    /// Called by a collection holding `gc`, before any callback runs: publishes the
    /// statistics so far for `stats()` calls from inside it (cheap: no percentiles).
    pub(crate) fn publish_stats(&self, gc: &GcState) {
        let mut s = self.published.lock().clone();
        gc.stats.publish_counters(&mut s);
        let s = self.complete_stats(s);
        *self.published.lock() = s;
    }

    /// The finalizer and detached-thread counters, kept outside `gc`.
    fn add_outside_counters(&self, s: &mut GcStats) {
        s.finalizers_run = self.fin_run.load(Ordering::Relaxed);
        s.finalizer_panics = self.fin_panics.load(Ordering::Relaxed);
        s.objects_allocated += self.detached_objects.load(Ordering::Relaxed);
        s.bytes_allocated += self.detached_bytes.load(Ordering::Relaxed);
    }

    /// The heap's identity (see [`Heap::id`]).
    #[inline]
    pub(crate) fn id(&self) -> HeapId {
        self.id
    }

    pub(crate) fn datatype(&self) -> TypeRef {
        TypeRef::new(
            ObjRef::from_addr(self.datatype.load(Ordering::Acquire)).expect("heap has a meta type"),
            self.id,
        )
    }

    pub(crate) fn weakref_type(&self) -> TypeRef {
        TypeRef::new(
            ObjRef::from_addr(self.weakref_type.load(Ordering::Acquire))
                .expect("heap has a weak-reference type"),
            self.id,
        )
    }

    /// Waits until no collection runs and returns the world lock (for threads that are
    /// not running mutators, or mutators that are about to park anyway).
    pub(crate) fn quiescent_world(&self) -> MutexGuard<'_, World> {
        let mut w = self.world.lock();
        while w.collecting {
            self.cv_resume.wait(&mut w);
        }
        w
    }

    /// Allocates a permanent old object (a type) from the heap's own pool.
    ///
    /// # Safety
    /// The caller holds the world lock with no collection running (so the object is
    /// registered as a root before any collection can see it).
    unsafe fn alloc_permanent(&self, size: usize, tag: usize) -> Result<ObjRef, GcError> {
        assert!(size <= MAX_INTERNAL_OBJ_SIZE);
        let class = class_of(size);
        let cell_size = CELL_SIZES[class] as usize;
        let mut gc = self.gc.lock();
        let parity = gc.parity;
        let perm = &mut gc.perm;
        loop {
            let same_class = perm
                .page
                .is_some_and(|p| p.cell_layout().map(|l| l.1) == Some(class));
            let taken = if same_class {
                // SAFETY: the permanent pool, under the gc lock; its page is of `class`.
                unsafe { perm.take::<false>(cell_size) }
            } else {
                None
            };
            if let Some(cell) = taken {
                // SAFETY: just taken from the pool; permanent objects are old and marked.
                return Ok(unsafe { perm.commit(cell, tag | OLD | parity, class) });
            }
            let mut pages = self.pages.lock();
            if let Some(page) = perm.page.take() {
                let class_of_page = page.cell_layout().expect("held page").1;
                pages.give_back(page, class_of_page, perm.free, perm.bump, perm.bump_end);
            }
            let g = pages
                .grant(class, &self.trigger)
                .map_err(|e| GcError::OutOfMemory {
                    size,
                    reason: e.to_string(),
                })?;
            // Permanent objects are old: the page needs no young sweep for them.
            perm.page = Some(g.page);
            perm.free = g.free;
            perm.bump = g.bump;
            perm.bump_end = g.bump_end;
        }
    }

    fn new_type(&self, desc: TypeDesc) -> Result<TypeRef, GcError> {
        let meta = self.datatype.load(Ordering::Acquire);
        let mut types = self.types.lock();
        let _w = self.quiescent_world();
        // SAFETY: we hold the world lock with no collection running.
        let obj = unsafe { self.alloc_permanent(std::mem::size_of::<TypeDesc>(), meta)? };
        // SAFETY: the payload is ours, zeroed, 16-aligned and large enough.
        unsafe { (obj.as_ptr() as *mut TypeDesc).write(desc) };
        let t = TypeRef::new(obj, self.id);
        types.push(t);
        Ok(t)
    }
}

impl Heap {
    /// Creates a heap.
    pub fn new(config: HeapConfig) -> Result<Heap, GcError> {
        config.validate()?;
        let id = HeapId::next();
        let inner = Arc::new(HeapInner {
            gc_flag: AtomicU32::new(0),
            pages: Mutex::new(PageAlloc::new(id)),
            world: Mutex::new(World {
                mutators: Vec::new(),
                collecting: false,
                epoch: 0,
                last_full: false,
            }),
            cv_stopped: Condvar::new(),
            cv_resume: Condvar::new(),
            gc: Mutex::new(GcState {
                parity: MARK,
                young_parity: 0,
                remset: Vec::new(),
                sweep_list: Vec::new(),
                old_after_full: 0,
                full_pending: false,
                stats: StatsAcc::default(),
                perm: Pool::empty(),
                verify_errors: Vec::new(),
            }),
            big: Mutex::new(BigLists::default()),
            published: Mutex::new(GcStats::default()),
            callbacks: Callbacks::new(),
            roots: Mutex::new(Roots::default()),
            types: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            stress_every: AtomicU64::new(config.stress_every.unwrap_or(0)),
            verify: AtomicBool::new(config.verify),
            allocd: AtomicUsize::new(0),
            trigger: AtomicUsize::new(first_interval(config.min_interval)),
            config: Mutex::new(config),
            detached_objects: AtomicU64::new(0),
            detached_bytes: AtomicU64::new(0),
            weak: Mutex::new(WeakState::default()),
            fin: Mutex::new(FinQueue::default()),
            fin_pending: AtomicUsize::new(0),
            fin_run: AtomicU64::new(0),
            fin_panics: AtomicU64::new(0),
            datatype: AtomicUsize::new(0),
            weakref_type: AtomicUsize::new(0),
            id,
            pool: Mutex::new(None),
        });
        // The meta type: a type object whose type is itself.
        {
            let _w = inner.world.lock();
            // SAFETY: world lock held, no collection can run on a heap nobody else sees.
            let obj = unsafe { inner.alloc_permanent(std::mem::size_of::<TypeDesc>(), 0)? };
            let desc = TypeDesc::new(inner.id(), TypeKind::DataType, "DataType");
            // SAFETY: fresh zeroed payload of sufficient size.
            unsafe { (obj.as_ptr() as *mut TypeDesc).write(desc) };
            // SAFETY: obj is live; point its type at itself, keeping the GC bits.
            let hdr = unsafe { obj.header() };
            hdr.store(hdr.load(Ordering::Relaxed) | obj.addr(), Ordering::Release);
            inner.datatype.store(obj.addr(), Ordering::Release);
            inner.types.lock().push(TypeRef::new(obj, inner.id));
        }
        // The type of weak-reference objects: one word the marker does not trace.
        let mut desc = TypeDesc::new(inner.id(), TypeKind::WeakRef, "WeakRef");
        desc.min_size = crate::weak::WEAK_OBJECT_SIZE;
        let weakref = inner.new_type(desc)?;
        inner
            .weakref_type
            .store(weakref.as_obj().addr(), Ordering::Release);
        crate::heap_id::LIVE_HEAPS.write().insert(inner.id.get());
        tracing::debug!(heap = %inner.id, "heap created");
        Ok(Heap(inner))
    }

    /// Attaches the calling thread as a mutator of this heap. A thread is attached to at
    /// most one heap at a time; dropping the returned [`Mutator`] detaches it.
    pub fn attach(&self) -> Result<Mutator, GcError> {
        Mutator::attach(self)
    }

    /// A handle for the calling thread's existing attachment to this heap, for code that
    /// is reached from a place where the thread's [`Mutator`] is not at hand (a C entry
    /// point, a callback of a library): it may allocate and collect like the thread's own
    /// mutator. Dropping it does not detach the thread. Only one of the thread's handles
    /// may be used at a time (the calls nest, as a finalizer's handle does).
    ///
    /// Errors: the thread is not attached ([`GcError::NotAttached`]), is attached to
    /// another heap ([`GcError::AttachedElsewhere`]), is inside a GC-safe region
    /// ([`GcError::InGcSafeRegion`]) or is running a collection (a callback or sweep
    /// function: [`GcError::DuringCollection`]).
    pub fn current_mutator(&self) -> Result<Mutator, GcError> {
        let cur = crate::mutator::current();
        if cur.is_null() {
            return Err(GcError::NotAttached);
        }
        // SAFETY: the current thread's mutator is alive while attached.
        let ms = unsafe { &*cur };
        if !std::ptr::eq(ms.heap(), Arc::as_ptr(&self.0)) {
            return Err(GcError::AttachedElsewhere);
        }
        if ms.in_collection.load(Ordering::Relaxed) {
            return Err(GcError::DuringCollection {
                what: "borrowing the thread's mutator",
            });
        }
        if ms.state.load(Ordering::Relaxed) != crate::mutator::RUNNING {
            return Err(GcError::InGcSafeRegion);
        }
        // SAFETY: the calling thread's attached mutator, running managed code.
        Ok(unsafe { Mutator::borrowed(ms) })
    }

    /// The heap's identity: no other heap of this process has or will have it.
    pub fn id(&self) -> HeapId {
        self.0.id
    }

    /// The meta type: the type of every type object.
    pub fn datatype(&self) -> TypeRef {
        self.0.datatype()
    }

    /// The seed's `jl_new_foreign_type`.
    pub fn new_foreign_type(&self, spec: ForeignTypeSpec<'_>) -> Result<TypeRef, GcError> {
        if spec.name.is_empty() {
            return Err(GcError::InvalidType {
                name: String::new(),
                reason: "empty name".into(),
            });
        }
        if spec.has_pointers && matches!(spec.mark, MarkProc::None) {
            return Err(GcError::InvalidType {
                name: spec.name.into(),
                reason: "has_pointers is set but there is no mark function".into(),
            });
        }
        let mut desc = TypeDesc::new(self.0.id(), TypeKind::Foreign, spec.name);
        desc.mark = spec.mark;
        desc.sweep = spec.sweep;
        desc.has_pointers = spec.has_pointers;
        desc.large = spec.large;
        desc.max_small = if spec.large { 0 } else { MAX_INTERNAL_OBJ_SIZE };
        self.0.new_type(desc)
    }

    /// A precise type for objects of at least `size` bytes whose references sit at the
    /// byte offsets `ref_offsets` (8-aligned, within `size`). The collector traces those
    /// slots itself: no mark function needed. Objects above the pool limit are big
    /// objects automatically.
    pub fn new_layout_type(
        &self,
        name: &str,
        size: usize,
        ref_offsets: &[u32],
    ) -> Result<TypeRef, GcError> {
        if let Some(bad) = ref_offsets
            .iter()
            .find(|&&o| o % 8 != 0 || o as usize + 8 > size)
        {
            return Err(GcError::InvalidType {
                name: name.into(),
                reason: format!(
                    "reference offset {bad} is not 8-aligned or lies beyond the size {size}"
                ),
            });
        }
        let mut desc = TypeDesc::new(self.0.id(), TypeKind::Layout, name);
        desc.has_pointers = !ref_offsets.is_empty();
        desc.min_size = size;
        desc.max_small = MAX_INTERNAL_OBJ_SIZE;
        let offsets: Box<[u32]> = ref_offsets.into();
        desc.noffsets = offsets.len();
        desc.offsets = Box::into_raw(offsets) as *mut u32;
        self.0.new_type(desc)
    }

    /// Checks that `addr` is a type of this heap.
    pub fn type_from_addr(&self, addr: usize) -> Result<TypeRef, GcError> {
        let types = self.0.types.lock();
        types
            .iter()
            .copied()
            .find(|t| t.obj.addr() == addr)
            .ok_or(GcError::NotAType { addr })
    }

    /// The type of a live object.
    ///
    /// # Safety
    /// `obj` is a live object of this heap.
    pub unsafe fn type_of(&self, obj: ObjRef) -> TypeRef {
        // SAFETY: forwarded.
        let h = unsafe { obj.header_bits() };
        TypeRef::new(
            ObjRef::from_addr(crate::object::type_addr(h)).expect("live objects have a type"),
            self.0.id,
        )
    }

    /// Panics unless `obj` is an allocated object of this heap. The safe functions that
    /// keep an [`ObjRef`] for later (roots, weak handles, finalizers, queue
    /// registrations) check it: any address can be an `ObjRef`, and one of another heap,
    /// or no object at all, would otherwise be marked, swept or finalized as if it were
    /// this heap's (memory corruption). A freed cell reused by a new object passes (the
    /// check cannot know which object the caller meant).
    #[track_caller]
    pub(crate) fn assert_object(&self, obj: ObjRef, what: &'static str) {
        if let Err(e) = self.check_object(obj, what) {
            panic!("{e}");
        }
    }

    /// [`Heap::assert_object`]'s check as an error, for the C entry points.
    pub(crate) fn check_object(&self, obj: ObjRef, what: &'static str) -> Result<(), GcError> {
        if crate::lookup::is_object(self.id(), obj.addr()) {
            Ok(())
        } else {
            Err(GcError::NotAnObject {
                what,
                addr: obj.addr(),
            })
        }
    }

    /// Registers a persistent root: `obj` stays alive until the returned [`Root`] is
    /// dropped. Panics if `obj` is not an allocated object of this heap.
    #[track_caller]
    pub fn root(&self, obj: ObjRef) -> Root {
        self.assert_object(obj, "Heap::root");
        self.root_unchecked(obj)
    }

    /// [`Heap::root`] for an object already checked.
    pub(crate) fn root_unchecked(&self, obj: ObjRef) -> Root {
        let mut roots = self.0.roots.lock();
        let idx = match roots.free.pop() {
            Some(i) => {
                roots.slots[i] = Some(obj);
                i
            }
            None => {
                roots.slots.push(Some(obj));
                roots.slots.len() - 1
            }
        };
        Root {
            heap: self.clone(),
            idx,
        }
    }

    /// Registers a callback (any of the six kinds); returns its id for removal.
    pub fn add_callback(&self, cb: Callback) -> Result<CallbackId, GcError> {
        self.0.callbacks.add(cb)
    }

    /// Removes a callback registered with [`Heap::add_callback`].
    pub fn remove_callback(&self, id: CallbackId) -> Result<(), GcError> {
        self.0.callbacks.remove(id)
    }

    /// Removes the C callback at `addr` from the list of `kind`.
    pub fn remove_c_callback(&self, kind: CallbackKind, addr: usize) -> Result<(), GcError> {
        self.0.callbacks.remove_c(kind, addr)
    }

    /// Number of callbacks registered of `kind`.
    pub fn callback_count(&self, kind: CallbackKind) -> usize {
        self.0.callbacks.count(kind)
    }

    /// Registers a stack `[lo, hi)` (a coroutine's; attached threads' stacks are
    /// registered automatically) so that task scanners see it.
    ///
    /// # Safety
    /// `[lo, hi)` is readable memory for as long as the task stays registered (or until
    /// [`Task::set_stack_bounds`] moves it): conservative scanning (gc-conservative) reads
    /// every word of its live part at each collection, and bounds cannot be checked
    /// cheaply. An empty or reversed range is an error. Safe code cannot register
    /// arbitrary bounds:
    ///
    /// ```compile_fail,E0133
    /// let heap = gc_core::Heap::default();
    /// let _ = heap.register_task(0x1000, 0x2000);
    /// ```
    pub unsafe fn register_task(&self, lo: usize, hi: usize) -> Result<Arc<Task>, GcError> {
        if lo >= hi {
            return Err(GcError::BadStackBounds { lo, hi });
        }
        let task = Arc::new(Task::new(lo, hi, false));
        self.0.tasks.lock().push(task.clone());
        Ok(task)
    }

    /// Unregisters a task registered with [`Heap::register_task`].
    pub fn unregister_task(&self, task: &Task) -> Result<(), GcError> {
        let mut tasks = self.0.tasks.lock();
        let addr = task as *const Task as usize;
        match tasks.iter().position(|t| Arc::as_ptr(t) as usize == addr) {
            Some(i) if !tasks[i].is_thread_stack() => {
                tasks.swap_remove(i);
                Ok(())
            }
            Some(_) => Err(GcError::BadTask {
                addr,
                reason: "a thread's own stack is unregistered by detaching the thread",
            }),
            None => Err(GcError::BadTask {
                addr,
                reason: "not a registered task of this heap",
            }),
        }
    }

    /// The registered tasks (threads' stacks and coroutines).
    pub fn tasks(&self) -> Vec<Arc<Task>> {
        self.0.tasks.lock().clone()
    }

    /// Looks up a registered task by address (for the C ABI).
    pub fn task_from_addr(&self, addr: usize) -> Option<Arc<Task>> {
        self.0
            .tasks
            .lock()
            .iter()
            .find(|t| Arc::as_ptr(t) as usize == addr)
            .cloned()
    }

    /// Statistics so far.
    ///
    /// With lazy sweeping, pages still waiting for the last collection's sweep are swept
    /// first, so that bytes freed and live are exact.
    ///
    /// Called from inside a collection on a collector thread (a GC callback, a mark or
    /// sweep function, a root scanner), where the collection holds the state this
    /// needs, it returns the statistics as of the start of that collection instead of
    /// waiting for it to end (which would never happen); their `p50_pause` and
    /// `p99_pause` are those of the last call from outside a collection.
    pub fn stats(&self) -> GcStats {
        let gc = match self.0.gc.try_lock() {
            Some(gc) => gc,
            None if on_collector_thread() => {
                let mut s = self.0.published.lock().clone();
                self.0.add_outside_counters(&mut s);
                return s;
            }
            None => self.0.gc.lock(),
        };
        let s = self.0.complete_stats(gc.stats.snapshot());
        *self.0.published.lock() = s.clone();
        drop(gc);
        let mut s = s;
        self.0.add_outside_counters(&mut s);
        s
    }

    /// Sweeps now every pool page that the last collection left to the lazy sweep
    /// (`HeapConfig::lazy_sweep`), which the helper threads, allocating threads or the
    /// next collection would sweep otherwise; returns how many pages that was. Afterwards
    /// the memory of every object the last collection found dead is free.
    pub fn complete_sweep(&self) -> usize {
        let _gc = self.0.gc.lock();
        // SAFETY: the gc lock is held, so no collection is marking; waiting pages are
        // never held by a thread.
        unsafe { self.0.pages.lock().finish_sweep(&self.0.trigger) }
    }

    /// Test hook: while `hold` is on, the pool pages a collection leaves to the lazy
    /// sweep wait for it: the helper threads and allocating threads do not sweep them
    /// (allocation takes fresh pages instead); a collection, [`Heap::complete_sweep`] and
    /// [`Heap::stats`] still do. For tests of what the heap answers about the cells of a
    /// page waiting for its sweep. Returns the number of pages waiting now.
    #[doc(hidden)]
    pub fn hold_lazy_sweep(&self, hold: bool) -> usize {
        let mut pages = self.0.pages.lock();
        pages.hold = hold;
        pages.unswept_pages()
    }

    /// Turns the stress mode on (collect every `n` allocations per thread) or off.
    pub fn set_stress(&self, every: Option<u64>) -> Result<(), GcError> {
        if every == Some(0) {
            return Err(GcError::BadConfig(
                "stress interval must be at least 1".into(),
            ));
        }
        self.0
            .stress_every
            .store(every.unwrap_or(0), Ordering::Relaxed);
        self.0.config.lock().stress_every = every;
        Ok(())
    }

    /// Sets [`HeapConfig::mark_threads`] from the next collection on (0: one per core);
    /// at most 1024.
    pub fn set_mark_threads(&self, n: usize) -> Result<(), GcError> {
        if n > 1024 {
            return Err(GcError::BadConfig(format!(
                "mark_threads ({n}) must be at most 1024"
            )));
        }
        self.0.config.lock().mark_threads = n;
        Ok(())
    }

    /// Turns the verify mode on or off.
    pub fn set_verify(&self, on: bool) {
        self.0.verify.store(on, Ordering::Relaxed);
        self.0.config.lock().verify = on;
        for m in self.0.world.lock().mutators.iter() {
            m.head.checked.store(on, Ordering::Relaxed);
        }
    }

    /// Errors found by the verify mode (missing write barriers, invalid references).
    pub fn verify_errors(&self) -> Vec<String> {
        self.0.gc.lock().verify_errors.clone()
    }

    /// The heap's configuration.
    pub fn config(&self) -> HeapConfig {
        self.0.config.lock().clone()
    }

    /// Calls `f(object, payload_size)` for every external (big) object of the heap (those
    /// allocated before the call; `f` may allocate, and a collection it causes may free
    /// objects not yet visited: their `ObjRef`s are then only addresses). Refused from
    /// inside a collection on the collecting thread.
    pub fn for_each_big_object(&self, mut f: impl FnMut(ObjRef, usize)) -> Result<(), GcError> {
        let me = crate::mutator::current();
        // SAFETY: the current thread's mutator is alive while attached.
        if !me.is_null() && unsafe { &*me }.in_collection.load(Ordering::Relaxed) {
            return Err(GcError::DuringCollection {
                what: "for_each_big_object",
            });
        }
        // The list is copied first: `f` runs under no lock of the heap, so it may
        // allocate (a big object allocated inside used to deadlock on this lock).
        let objects: Vec<(ObjRef, usize)> = {
            let lists = self.0.big.lock();
            lists
                .young
                .iter()
                .chain(lists.old.iter())
                // SAFETY: objects on the big lists are allocated.
                .map(|&obj| (obj, unsafe { crate::big::size(obj) }))
                .collect()
        };
        for (obj, size) in objects {
            f(obj, size);
        }
        Ok(())
    }

    /// Bytes available in the payload of a live object: its cell size minus the header
    /// for pool objects, the (16-rounded) requested size for big objects.
    ///
    /// # Safety
    /// `obj` is a live object of this heap.
    pub unsafe fn object_capacity(&self, obj: ObjRef) -> usize {
        // SAFETY: forwarded from the caller.
        unsafe { crate::big::object_capacity(obj) }
    }

    /// Number of attached mutator threads.
    pub fn attached_threads(&self) -> usize {
        self.0.world.lock().mutators.len()
    }
}

impl Default for Heap {
    fn default() -> Self {
        Heap::new(HeapConfig::default()).expect("the default configuration is valid")
    }
}

impl std::fmt::Debug for Heap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Heap({})", self.0.id)
    }
}

/// A persistent root (see [`Heap::root`]); the object stays alive while this exists.
pub struct Root {
    heap: Heap,
    idx: usize,
}

impl Root {
    /// The rooted object.
    pub fn get(&self) -> ObjRef {
        self.heap.0.roots.lock().slots[self.idx]
            .expect("root slot is occupied while the Root lives")
    }

    /// Points the root at another object.
    pub fn set(&self, obj: ObjRef) {
        self.heap.0.roots.lock().slots[self.idx] = Some(obj);
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let mut roots = self.heap.0.roots.lock();
        roots.slots[self.idx] = None;
        roots.free.push(self.idx);
    }
}

impl std::fmt::Debug for Root {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Root({:?})", self.get())
    }
}

impl Drop for HeapInner {
    fn drop(&mut self) {
        // The helper threads first: background sweeping uses the rest of the heap.
        drop(self.pool.get_mut().take());
        // Every mutator handle holds an Arc, so none is attached any more. Run the
        // pending sweep functions of objects that die with the heap? No: the seed's sweep
        // functions run during a sweep only; a dropped heap frees its memory wholesale,
        // after telling external-free listeners about big objects.
        let lists = self.big.get_mut();
        let big: Vec<ObjRef> = lists.young.drain(..).chain(lists.old.drain(..)).collect();
        let notify = self
            .callbacks
            .any(CallbackKind::ExternalFree)
            .then(|| self.callbacks.snapshot(CallbackKind::ExternalFree));
        for obj in big {
            if let Some(list) = &notify {
                crate::collect::notify_free(list, obj);
            }
            // SAFETY: the heap is gone: nothing can reach its big objects.
            unsafe { crate::big::free(obj) };
        }
        // From here on no TypeRef of this heap reads its type object (the write lock
        // waits for readers that found the heap alive).
        crate::heap_id::LIVE_HEAPS.write().remove(&self.id.get());
        for t in self.types.get_mut().drain(..) {
            // SAFETY: type objects die with the heap; free what their descriptors own.
            unsafe { (*(t.obj.as_ptr() as *mut TypeDesc)).free_owned() };
        }
    }
}

impl SweepProc {
    /// Whether there is a sweep function.
    pub fn is_some(&self) -> bool {
        !matches!(self, SweepProc::None)
    }
}

/// Whether the calling thread is running a collection: the collecting mutator (callbacks,
/// root scanners, sweep functions) or a collector helper thread (mark functions).
fn on_collector_thread() -> bool {
    let me = crate::mutator::current();
    // SAFETY: the current thread's mutator is alive while attached.
    (!me.is_null() && unsafe { &*me }.in_collection.load(Ordering::Relaxed))
        || !crate::tls::helper_ptls().is_null()
}
