//! The heap's public handle: [`Heap`]'s methods (creation, attaching threads, types,
//! roots, callbacks, tasks, statistics and settings), [`Root`], and the heap's teardown
//! (`Drop for HeapInner`). The heap's data (`HeapInner`, the world, the collector's
//! state) is `state.rs`, its tuning `config.rs`.
//!
//! A top layer: may depend on every module but `ffi` and
//! `weakref`; `mutator` and `collect` are below it.

use crate::callbacks::{Callback, CallbackId, CallbackKind, Callbacks};
use crate::config::{first_interval, HeapConfig};
use crate::error::GcError;
use crate::heap_id::HeapId;
use crate::mutator::on_collector_thread;
use crate::object::{Header, ObjRef};
use crate::page::{PageAlloc, Sweeper};
use crate::sizeclass::{class_of, CELL_SIZES, MAX_INTERNAL_OBJ_SIZE};
use crate::state::{
    BigLists, FinQueue, GcState, Heap, HeapInner, Mutator, Roots, WeakState, World,
};
use crate::stats::{GcStats, StatsAcc};
use crate::task::Task;
use crate::tlab::Pool;
use crate::types::{ForeignTypeSpec, MarkProc, TypeDesc, TypeKind, TypeRef};
use crate::weaktab::WEAK_OBJECT_SIZE;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

impl From<&Heap> for HeapId {
    fn from(heap: &Heap) -> HeapId {
        heap.id()
    }
}

impl HeapInner {
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
                .page()
                .is_some_and(|p| p.cell_layout().map(|l| l.1) == Some(class));
            let taken = if same_class {
                // SAFETY: the permanent pool, under the gc lock; its page is of `class`.
                unsafe { perm.take::<false>(cell_size) }
            } else {
                None
            };
            if let Some(cell) = taken {
                // SAFETY: just taken from the pool; permanent objects are old and marked.
                return Ok(unsafe { perm.commit(cell, Header::new_old(tag, parity), class) });
            }
            let mut pages = self.pages.lock();
            if let Some(page) = perm.release() {
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
            perm.hold(g.page, g.free, g.bump, g.bump_end);
        }
    }

    fn new_type(&self, desc: TypeDesc) -> Result<TypeRef, GcError> {
        if on_collector_thread() {
            // The world lock waits for the collection this thread is running.
            return Err(GcError::DuringCollection {
                what: "creating a type",
            });
        }
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
                parity: Header::parity(true),
                young_parity: 0,
                remset: Vec::new(),
                sweep_list: Vec::new(),
                old_after_full: 0,
                full_pending: false,
                full_growth: 0,
                old_freed_before_full: 0,
                full_defer: 1.0,
                chain_base: 0,
                young_cap: usize::MAX,
                mark_rate: None,
                stats: StatsAcc::default(),
                perm: Pool::empty(None),
                verify_errors: Vec::new(),
                mark_stacks: Vec::new(),
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
            hdr.store(
                Header::from_raw(hdr.load(Ordering::Relaxed))
                    .with_type_addr(obj.addr())
                    .raw(),
                Ordering::Release,
            );
            inner.datatype.store(obj.addr(), Ordering::Release);
            inner.types.lock().push(TypeRef::new(obj, inner.id));
        }
        // The type of weak-reference objects: one word the marker does not trace.
        let mut desc = TypeDesc::new(inner.id(), TypeKind::WeakRef, "WeakRef");
        desc.min_size = WEAK_OBJECT_SIZE;
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
        ms.check_running()?;
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
            ObjRef::from_addr(h.type_addr()).expect("live objects have a type"),
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

    /// Whether `obj` is the start of a live object of this heap: the check that
    /// [`Heap::root`], [`Heap::new_weak_ref`] and the other methods taking an
    /// untrusted [`ObjRef`] make (and panic on), as an error naming `what`. With
    /// the `*_unchecked` methods it splits such a call in two, for a C layer that
    /// reports errors instead of panicking.
    ///
    /// On a thread running a collection (in a callback, a root or task scanner, a mark or
    /// sweep function) every object is refused with [`GcError::DuringCollection`]: what
    /// these calls register (a root, a weak handle, a finalizer, a queue registration)
    /// would not be seen by the collection under way, whose sweep may free the object
    /// (a sweep function's own dying object passes the lookup until its cell is freed).
    pub fn check_object(&self, obj: ObjRef, what: &'static str) -> Result<(), GcError> {
        if on_collector_thread() {
            return Err(GcError::DuringCollection { what });
        }
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
        // SAFETY: checked just above.
        unsafe { self.root_unchecked(obj) }
    }

    /// [`Heap::root`] for an object already checked.
    ///
    /// # Safety
    /// `obj` is an object of this heap: [`Heap::check_object`] accepted it (or it comes
    /// from this heap's allocation and is alive).
    pub unsafe fn root_unchecked(&self, obj: ObjRef) -> Root {
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

    /// Looks up a registered task by the address C code knows it by
    /// ([`Task::c_handle`]; for the C ABI).
    pub fn task_from_addr(&self, addr: usize) -> Option<Arc<Task>> {
        self.0
            .tasks
            .lock()
            .iter()
            .find(|t| t.c_handle() as usize == addr)
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
    ///
    /// Refused ([`GcError::DuringCollection`]) from inside a collection (a callback, a
    /// mark or sweep function), which would otherwise wait for itself.
    pub fn complete_sweep(&self) -> Result<usize, GcError> {
        if on_collector_thread() {
            return Err(GcError::DuringCollection {
                what: "complete_sweep",
            });
        }
        let _gc = self.0.gc.lock();
        // SAFETY: the gc lock is held, so no collection is marking; waiting pages are
        // never held by a thread.
        Ok(unsafe { self.0.finish_sweep(self.0.pages.lock(), Sweeper::Other) }.1)
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

    /// Sets when the task scanners run ([`crate::TaskScan`]), from the next collection on.
    pub fn set_task_scan(&self, mode: crate::TaskScan) {
        self.0.config.lock().task_scan = mode;
    }

    /// The number of threads that mark in a collection (the collecting thread and its
    /// helpers): `mark_threads` with 0 read as one per core.
    pub fn mark_threads(&self) -> usize {
        crate::collect::mark_threads(self.0.config.lock().mark_threads)
    }

    /// Turns the verify mode on or off.
    pub fn set_verify(&self, on: bool) {
        self.0.verify.store(on, Ordering::Relaxed);
        self.0.config.lock().verify = on;
        for m in self.0.world.lock().mutators.iter() {
            m.head.checked.store(on, Ordering::Relaxed);
            m.publish_alloc_state();
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

    /// Points the root at another object. Panics if `obj` is not an allocated object of
    /// the root's heap (the check [`Heap::root`] makes: a root is marked by every
    /// collection, so it must name an object).
    #[track_caller]
    pub fn set(&self, obj: ObjRef) {
        self.heap.assert_object(obj, "Root::set");
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
            // SAFETY: the heap is gone: nothing can reach its big objects; not freed yet.
            unsafe { crate::big::retire(obj) };
            if let Some(list) = &notify {
                crate::collect::notify_free(list, obj);
            }
            // SAFETY: the heap is gone: nothing can reach its big objects.
            unsafe { crate::big::free(obj) };
        }
        // Their page runs are free now: give their memory back, as the pool pages' is.
        crate::bigrun::age_and_release(true);
        // From here on no TypeRef of this heap reads its type object (the write lock
        // waits for readers that found the heap alive).
        crate::heap_id::LIVE_HEAPS.write().remove(&self.id.get());
        for t in self.types.get_mut().drain(..) {
            // SAFETY: type objects die with the heap; free what their descriptors own.
            unsafe { (*(t.obj.as_ptr() as *mut TypeDesc)).free_owned() };
        }
    }
}
