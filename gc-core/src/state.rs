//! The heap's state: the data types that refer to each other and so sit together at
//! the centre of the crate. A [`Heap`] is an `Arc` of a [`HeapInner`]; the heap's
//! [`World`] lists its mutators' [`MutatorShared`] records, each of which points back
//! to its `HeapInner`; a [`Mutator`] handle holds both; and a registered finalizer (a
//! [`FinEntry`] of the heap's [`WeakState`] or [`FinQueue`]) is a closure taking a
//! `&mut Mutator`. Besides the types, only what every layer above needs to reach the
//! state: accessors, the stop-the-world handshake of one thread ([`MutatorShared::park`])
//! and the statistics a collection publishes.
//!
//! Depends on the data modules below it (pages, types, callbacks, tasks, the per-thread
//! allocation state, the weak tables, the helper pool, configuration, statistics), never
//! on the algorithms above it: `mark`, `weak`, `collect`, `mutator`, `heap`, `weakref`.

use crate::callbacks::Callbacks;
use crate::config::HeapConfig;
use crate::heap_id::HeapId;
use crate::object::ObjRef;
use crate::page::{PageAlloc, Sweeper};
use crate::par::MarkPool;
use crate::stats::{GcStats, StatsAcc};
use crate::task::Task;
use crate::tlab::{Local, Pool};
use crate::tls::{save_registers, TlsHead};
use crate::types::TypeRef;
use crate::weaktab::{CFinalizerFn, HandleTable, PhantomEntry, QueueInner};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// Mutator threads and the collection handshake, under `HeapInner::world`.
pub(crate) struct World {
    pub(crate) mutators: Vec<Arc<MutatorShared>>,
    pub(crate) collecting: bool,
    /// Incremented at the end of every collection.
    pub(crate) epoch: u64,
    /// Kind of the last collection that ran.
    pub(crate) last_full: bool,
}

/// State the collector keeps between collections, under `HeapInner::gc`.
pub(crate) struct GcState {
    /// For old objects, the MARK value that means "marked" (flips at every full
    /// collection, which unmarks the whole old generation at once).
    pub(crate) parity: usize,
    /// For young objects, the MARK value that (with AGE) means "marked" (flips at every
    /// collection, which unmarks every young survivor at once).
    pub(crate) young_parity: usize,
    /// Old objects with young children (remembered set), from the last collection.
    pub(crate) remset: Vec<ObjRef>,
    /// Objects whose sweep function is scheduled (merged from threads).
    pub(crate) sweep_list: Vec<ObjRef>,
    /// Old generation bytes after the last full collection.
    pub(crate) old_after_full: usize,
    /// The last full collection's sweep was lazy: set `old_after_full` once it is done.
    pub(crate) full_pending: bool,
    /// What the last full collection is judged by once its sweep is done
    /// ([`crate::collect`]'s `learn_yield`): the old generation's growth since the full
    /// collection before, and the old bytes freed by full collections until it began.
    pub(crate) full_growth: usize,
    pub(crate) old_freed_before_full: u64,
    /// How many times `HeapConfig::full_allowance` the old generation may grow before
    /// the next automatic full collection (1.0 up to `HeapConfig::full_defer`): the
    /// inverse of the last full collection's yield.
    pub(crate) full_defer: f64,
    /// Where the room before the next full collection is measured from: the old
    /// generation after the last full collection, or the last point at which one was
    /// put off.
    pub(crate) chain_base: usize,
    /// The most bytes allocated between two collections that keeps partial collections
    /// within `HeapConfig::young_pause_goal` at the survivors' density and marking
    /// rate last seen (`usize::MAX`: no bound).
    pub(crate) young_cap: usize,
    /// Seconds of marking per object marked in the last full collection: what a partial
    /// collection's survivors are taken to cost, the rest of its pause being roots and
    /// the remembered set, which a smaller young generation does not shorten.
    pub(crate) mark_rate: Option<f64>,
    pub(crate) stats: StatsAcc,
    /// Permanent (type) objects' pool.
    pub(crate) perm: Pool,
    /// Errors found by the verify mode, most recent last (bounded).
    pub(crate) verify_errors: Vec<String>,
    /// The mark stacks' storage the last collection's markers left, reused by the next
    /// one's (`collect::keep_mark_stacks` bounds what is kept).
    pub(crate) mark_stacks: Vec<Vec<usize>>,
}

/// The shared heap; `Heap` is an `Arc` of it.
pub(crate) struct HeapInner {
    /// Non-zero while a collection asks threads to stop (polled at safepoints).
    pub(crate) gc_flag: AtomicU32,
    pub(crate) pages: Mutex<PageAlloc>,
    pub(crate) world: Mutex<World>,
    pub(crate) cv_stopped: Condvar,
    pub(crate) cv_resume: Condvar,
    pub(crate) gc: Mutex<GcState>,
    /// The statistics as of the start of the running (or last) collection, for
    /// [`Heap::stats`] called from inside a collection (a callback, a mark or sweep
    /// function), where `gc` is held by the collection itself. Percentiles are those of
    /// the last `stats()` call outside a collection.
    pub(crate) published: Mutex<GcStats>,
    /// External (big) objects, young and old. Locked briefly by allocation and by the
    /// sweep.
    pub(crate) big: Mutex<BigLists>,
    pub(crate) callbacks: Callbacks,
    pub(crate) roots: Mutex<Roots>,
    pub(crate) types: Mutex<Vec<TypeRef>>,
    pub(crate) tasks: Mutex<Vec<Arc<Task>>>,
    pub(crate) config: Mutex<HeapConfig>,
    pub(crate) stress_every: AtomicU64,
    pub(crate) verify: AtomicBool,
    /// Bytes handed to allocators since the last collection, and the trigger.
    pub(crate) allocd: AtomicUsize,
    pub(crate) trigger: AtomicUsize,
    /// Allocation statistics of threads that have detached.
    pub(crate) detached_objects: AtomicU64,
    pub(crate) detached_bytes: AtomicU64,
    /// Weak references, finalizer and reference-queue registrations (`weak.rs`).
    pub(crate) weak: Mutex<WeakState>,
    /// Finalizers waiting to run and running (their objects are roots).
    pub(crate) fin: Mutex<FinQueue>,
    /// `fin.pending.len()`, readable without the lock.
    pub(crate) fin_pending: AtomicUsize,
    /// Finalizers run, and Rust finalizers that panicked.
    pub(crate) fin_run: AtomicU64,
    pub(crate) fin_panics: AtomicU64,
    pub(crate) datatype: AtomicUsize,
    pub(crate) weakref_type: AtomicUsize,
    /// The heap's identity, never reused.
    pub(crate) id: HeapId,
    /// Helper threads for parallel marking and lazy sweeping, started on first use.
    pub(crate) pool: Mutex<Option<MarkPool>>,
}

/// The heap's external objects.
#[derive(Default)]
pub(crate) struct BigLists {
    pub(crate) young: Vec<ObjRef>,
    pub(crate) old: Vec<ObjRef>,
    /// Bytes (headers included) of the objects on the lists, and of the old ones.
    pub(crate) live: usize,
    pub(crate) old_bytes: usize,
    /// Bytes of big objects given back to the system allocator (partial collections
    /// included) since it was last asked to trim its heap (`collect::return_memory`).
    pub(crate) freed_since_trim: usize,
    /// Bytes of old objects freed by full collections since the heap was created.
    pub(crate) old_freed: u64,
}

/// Persistent roots: a slab of object references.
#[derive(Default)]
pub(crate) struct Roots {
    pub(crate) slots: Vec<Option<ObjRef>>,
    pub(crate) free: Vec<usize>,
}

/// A garbage-collected heap. Cloning gives another handle to the same heap.
///
/// Defined here with the types it refers to; its methods live in two files, by concern:
/// - `heap.rs`: creating a heap, attaching threads (`attach`, `current_mutator`), types
///   (`new_foreign_type`, `new_layout_type`, `type_from_addr`, `type_of`), object checks
///   (`check_object`), roots (`root`, `root_unchecked`; [`Root`] itself), callbacks,
///   tasks, statistics, lazy sweeping, the stress, verify and mark-thread settings,
///   external objects, `attached_threads`;
/// - `weakref.rs`: weak references and finalizers on the heap's side (`weak_ref_type`,
///   `weak_object_get`, `new_weak_ref`, `new_reference_queue`, `pending_finalizers`,
///   `registered_finalizers`, `run_finalizers`).
///
/// [`Root`]: crate::Root
#[derive(Clone)]
pub struct Heap(pub(crate) Arc<HeapInner>);

impl HeapInner {
    /// Completes the last collection's sweep with the page lock `pages`: sweeps the
    /// pages still waiting on this thread (their time counted for `who`) and waits for
    /// those a helper thread is sweeping outside the lock. Returns the lock and the
    /// number of pages this thread swept.
    ///
    /// The pages are swept a batch at a time outside the lock, as the helper thread
    /// sweeps them, so that a helper sweeping in the background goes on beside this
    /// thread rather than waiting for the lock (GAP's back-to-back forced collections on
    /// a 2 GB heap: ~100 ms of the previous one's sweep before each, on one thread).
    ///
    /// # Safety
    /// No collection is marking (the caller holds `gc`, is the collector before marking,
    /// or runs managed code, which a collection stops first).
    pub(crate) unsafe fn finish_sweep<'a>(
        &'a self,
        mut pages: MutexGuard<'a, PageAlloc>,
        who: Sweeper,
    ) -> (MutexGuard<'a, PageAlloc>, usize) {
        let mut n = 0;
        loop {
            let k = self.sweep_batch(&mut pages, who);
            if k == 0 {
                break;
            }
            n += k;
        }
        // What `take_waiting` leaves (all of it while the test hook `hold` is on).
        // SAFETY: forwarded; pages waiting for their sweep are never held by a thread.
        n += unsafe { pages.sweep_waiting(&self.trigger, who) };
        while pages.taken_pages() > 0 {
            // A helper thread files its pages under this lock, a few microseconds'
            // sweep after taking them.
            MutexGuard::unlocked(&mut pages, std::thread::yield_now);
            // SAFETY: as above (nothing new waits: no collection ran meanwhile).
            n += unsafe { pages.sweep_waiting(&self.trigger, who) };
        }
        (pages, n)
    }

    /// Takes up to `SWEEP_BATCH` waiting pages under the page lock `pages`, sweeps them
    /// with the lock released (allocating threads need it for every new page) and files
    /// them under it again, their time counted for `who`. Returns how many; 0 when none
    /// waits (or the test hook `hold` is on). The background helper's step, and
    /// `finish_sweep`'s.
    pub(crate) fn sweep_batch<'a>(
        &'a self,
        pages: &mut MutexGuard<'a, PageAlloc>,
        who: Sweeper,
    ) -> usize {
        let mut batch = Vec::with_capacity(crate::page::SWEEP_BATCH);
        let params = pages.take_waiting(crate::page::SWEEP_BATCH, &mut batch);
        let n = batch.len();
        if n == 0 {
            return 0;
        }
        let swept: Vec<_> = MutexGuard::unlocked(pages, || {
            batch
                .into_iter()
                // SAFETY: taken off the waiting lists above, so this thread alone
                // touches them; no collection marks until they are filed (collections
                // wait for taken pages: `finish_sweep`).
                .map(|page| unsafe { crate::page::sweep_taken(page, params) })
                .collect()
        });
        for s in swept {
            pages.place_taken(s, &self.trigger, who);
        }
        n
    }

    /// `s` (the collector's counters) completed with the page and big-object totals.
    /// With lazy sweeping, pages still waiting for the last collection's sweep are swept
    /// first, so that bytes freed and live are exact. The caller holds `gc`.
    pub(crate) fn complete_stats(&self, mut s: GcStats) -> GcStats {
        // SAFETY: the gc lock is held (by the caller), so no collection is marking;
        // waiting pages are never held by a thread.
        let (pages, _) = unsafe { self.finish_sweep(self.pages.lock(), Sweeper::Other) };
        let big = self.big.lock();
        s.live_bytes = (pages.totals.live + big.live) as u64;
        s.old_bytes = (pages.totals.old + big.old_bytes) as u64;
        s.bytes_freed += pages.totals.freed;
        s.pages_in_use = pages.pages_in_use() as u64;
        s.mapped_bytes = pages.mapped_bytes() as u64;
        let c = &pages.counters;
        let ns = |i: usize| std::time::Duration::from_nanos(c.sweep_ns[i]);
        s.pages_swept_by_allocation = c.swept[Sweeper::Allocation as usize];
        s.allocation_sweep_time = ns(Sweeper::Allocation as usize);
        s.pages_swept_in_background = c.swept[Sweeper::Background as usize];
        s.background_sweep_time = ns(Sweeper::Background as usize);
        s.pages_swept_in_pause = c.swept[Sweeper::Pause as usize];
        s.pages_granted_fresh = c.fresh;
        s.pages_granted_zeroed = c.zeroed;
        s.pages_granted_with_free_cells = c.with_free_cells;
        s.pages_returned = c.returned;
        s.page_lock_waits = c.lock_waits;
        s.page_lock_wait_time = std::time::Duration::from_nanos(c.lock_wait_ns);
        s.cells_by_class = c.cells.to_vec();
        s.malloc_trims = c.malloc_trims;
        s.malloc_trim_time = std::time::Duration::from_nanos(c.malloc_trim_ns);
        s.big_slot_bytes_released = c.big_slots_released;
        s.big_slot_release_time = std::time::Duration::from_nanos(c.big_slot_release_ns);
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
    pub(crate) fn add_outside_counters(&self, s: &mut GcStats) {
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
}

/// Running managed code (may touch the heap).
pub(crate) const RUNNING: u8 = 0;
/// Stopped at a safepoint or inside a GC-safe region (counts as stopped).
pub(crate) const SAFE: u8 = 1;
/// Detached from the heap.
pub(crate) const DETACHED: u8 = 2;

/// A thread attached to a heap: the object behind the C API's `jl_ptls_t`.
///
/// Defined here with the types it refers to; its methods live in two files:
/// - `state.rs` (here): the heap accessor, `record_stop` and `park` (a thread's half of
///   the stop-the-world handshake);
/// - `mutator.rs`: the raw tier C layers use (`head`, `is_running`, `in_collection`,
///   `task`, the safepoint and its slow path, GC-safe regions `enter_gc_safe`,
///   `enter_gc_safe_at`, `leave_gc_safe`, the per-thread type cache `cached_type` and
///   `type_at_cached`, allocation `alloc`/`alloc_fast`/`alloc_internal`, the write
///   barriers `wb`/`wb_back`/`remember`, `schedule_sweep`).
#[repr(C)]
pub struct MutatorShared {
    /// First field, the part C code reads (`gc_tls_head_t`): saved registers (at offset
    /// 0, where assembly finds them), magic (`MUTATOR_MAGIC` while attached,
    /// `MUTATOR_DEAD` after: lets the C ABI check a `ptls` without a thread-local lookup;
    /// memory of detached mutators is recycled for later ones, never freed, so a stale
    /// `ptls` still reads as a mutator), owning thread, and the marker of the collection
    /// this thread is running (for C mark functions).
    pub(crate) head: TlsHead,
    pub(crate) heap: *const HeapInner,
    pub(crate) state: AtomicU8,
    pub(crate) local: UnsafeCell<Local>,
    pub(crate) task: Arc<Task>,
    pub(crate) in_collection: AtomicBool,
    /// The attaching thread's name and OS thread id, for diagnostics.
    pub(crate) name: String,
}

// SAFETY: the UnsafeCell fields are accessed by the owning thread, or by the collector
// while the owning thread is stopped (state SAFE observed under the world handshake),
// which orders the accesses; all other fields are atomics or immutable.
unsafe impl Sync for MutatorShared {}
// SAFETY: as above.
unsafe impl Send for MutatorShared {}

impl MutatorShared {
    #[inline(always)]
    pub(crate) fn heap(&self) -> &HeapInner {
        // SAFETY: the heap outlives its mutators (the Mutator handle holds an Arc).
        unsafe { &*self.heap }
    }

    /// Copies the registers the calling thread (this mutator's) saved into its buffer
    /// to its task, where other threads read them.
    pub(crate) fn record_stop(&self) {
        // SAFETY: the buffer belongs to this thread's mutator; we are that thread (the
        // callers' contract: every caller runs on the mutator's own thread).
        let regs = unsafe { &*self.head.regs.get() };
        self.task.record_stop(regs);
    }

    /// Parks at a safepoint until the running collection ends. Called with the world
    /// lock held and a collection running.
    #[inline(never)]
    pub(crate) fn park(&self, w: &mut MutexGuard<'_, World>) {
        // SAFETY: the calling thread's own register buffer; nothing reads it while the
        // thread runs.
        save_registers(unsafe { &mut *self.head.regs.get() });
        self.record_stop();
        let heap = self.heap();
        self.state.store(SAFE, Ordering::SeqCst);
        heap.cv_stopped.notify_all();
        while w.collecting {
            heap.cv_resume.wait(w);
        }
        self.state.store(RUNNING, Ordering::SeqCst);
    }
}

/// A thread attached to a heap. Not `Send`: it stands for the thread that attached.
/// Dropping it detaches the thread; its objects stay alive as long as they are reachable.
///
/// Defined here with the types it refers to; its methods live in three files:
/// - `state.rs` (here): `borrowed` (a handle that does not detach) and `heap`;
/// - `mutator.rs`: attaching and detaching (`attach`, `Drop`), `ptls`, `shared`,
///   allocation (`alloc_typed`), collections, safepoints and GC-safe regions
///   (`collect`, `safepoint`, `gc_safe`, `enter_gc_safe`), barriers and reference
///   stores (`wb`, `wb_back`, `store_ref`, `load_ref`), `schedule_foreign_sweepfunc`,
///   `task`;
/// - `weakref.rs`: finalizers (`add_finalizer`, `add_c_finalizer`, `finalize`,
///   `run_finalizers`, `run_all_finalizers`, `disable_finalizers`,
///   `enable_finalizers`, `set_finalizers_at_safepoints`) and weak-reference objects
///   (`new_weak_object`, `weak_object_set`).
pub struct Mutator {
    pub(crate) shared: Arc<MutatorShared>,
    pub(crate) heap: Heap,
    /// Dropping it detaches the thread (false for the handles the heap lends to
    /// finalizers run at safepoints).
    pub(crate) owned: bool,
    pub(crate) _not_send: PhantomData<*mut ()>,
}

impl Mutator {
    /// A handle for the calling thread's existing attachment `shared`, which dropping
    /// does not detach (for running finalizers where only the shared state is at hand).
    ///
    /// # Safety
    /// `shared` is the calling thread's attached mutator (it lives in an `Arc`, as does
    /// its heap).
    pub unsafe fn borrowed(shared: &MutatorShared) -> Mutator {
        let p: *const MutatorShared = shared;
        let h: *const HeapInner = shared.heap;
        // SAFETY: both pointers come from `Arc::as_ptr` of live Arcs (attach); adding a
        // strong count first makes `from_raw` produce an extra owner.
        unsafe {
            Arc::increment_strong_count(p);
            Arc::increment_strong_count(h);
            Mutator {
                shared: Arc::from_raw(p),
                heap: Heap(Arc::from_raw(h)),
                owned: false,
                _not_send: PhantomData,
            }
        }
    }

    /// The heap this thread is attached to.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }
}

/// A finalizer written in Rust: called once with the thread's mutator and the object,
/// after a collection found the object unreachable. It may allocate, store references,
/// and resurrect the object (for example by rooting it).
pub type FinalizerFn = Box<dyn FnOnce(&mut Mutator, ObjRef) + Send + 'static>;

pub(crate) enum FinFn {
    Rust(FinalizerFn),
    C(CFinalizerFn),
}

/// One registered (or queued) finalizer.
pub(crate) struct FinEntry {
    pub(crate) obj: ObjRef,
    /// Registration order, heap-wide.
    pub(crate) seq: u64,
    pub(crate) f: FinFn,
}

/// Registrations and weak references of a heap, under `HeapInner::weak`.
#[derive(Default)]
pub(crate) struct WeakState {
    /// Weak-reference objects whose referent or themselves may be young.
    pub(crate) objs_young: Vec<ObjRef>,
    /// Weak-reference objects that are old, with an old referent or none.
    pub(crate) objs_old: Vec<ObjRef>,
    /// A weak-reference object was re-pointed: the lists may hold duplicates.
    pub(crate) objs_dirty: bool,
    pub(crate) handles: HandleTable,
    pub(crate) fin_young: Vec<FinEntry>,
    pub(crate) fin_old: Vec<FinEntry>,
    pub(crate) fin_seq: u64,
    pub(crate) phantom_young: Vec<PhantomEntry>,
    pub(crate) phantom_old: Vec<PhantomEntry>,
    /// The live reference queues by slot (a dropped queue's slot is `None`, reused by
    /// the next queue: its registrations left with it).
    pub(crate) queues: Vec<Option<Arc<QueueInner>>>,
}

impl WeakState {
    pub(crate) fn is_empty(&self) -> bool {
        self.objs_young.is_empty()
            && self.objs_old.is_empty()
            && self.handles.live == 0
            && self.handles.young.is_empty()
            && self.fin_young.is_empty()
            && self.fin_old.is_empty()
            && self.phantom_young.is_empty()
            && self.phantom_old.is_empty()
    }
}

/// Finalizers found dead and waiting to run, and those running now; every object here
/// is a root. Under `HeapInner::fin`.
#[derive(Default)]
pub(crate) struct FinQueue {
    /// In the order they will run.
    pub(crate) pending: VecDeque<FinEntry>,
    /// Objects of batches being run, by batch id.
    pub(crate) in_flight: Vec<(u64, Vec<ObjRef>)>,
    pub(crate) next_batch: u64,
}

impl FinQueue {
    /// Every object the queue keeps alive.
    pub(crate) fn roots(&self) -> impl Iterator<Item = ObjRef> + '_ {
        self.pending.iter().map(|e| e.obj).chain(
            self.in_flight
                .iter()
                .flat_map(|(_, objs)| objs.iter().copied()),
        )
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.in_flight.is_empty()
    }
}
