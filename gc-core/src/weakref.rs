//! The public face of weak references and finalizers: weak-reference objects and
//! finalizers registered through a [`Mutator`], [`WeakRef`] handles and
//! [`ReferenceQueue`]s made by a [`Heap`] (semantics: `weak.rs`, which processes the
//! registrations between mark and sweep and runs the finalizers).
//!
//! A top layer: depends on `heap` and `mutator` (the handles' own methods), `weak`,
//! `weaktab`, `state` and the data modules below them.

use crate::error::GcError;
use crate::mutator;
use crate::object::{Header, ObjRef};
use crate::state::{FinEntry, FinFn, Heap, Mutator};
use crate::types::TypeRef;
use crate::weak::{
    in_finalizer, run_batch, run_deferred, run_pending, start_batch, value_word, DEFERRED,
};
use crate::weaktab::{CFinalizerFn, CNotifyFn, Notify, PhantomEntry, QueueInner, WEAK_OBJECT_SIZE};
use parking_lot::Mutex;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
thread_local! {
    /// [`Mutator::disable_finalizers`] nesting on this thread.
    static FIN_DISABLED: Cell<u32> = const { Cell::new(0) };
}

/// Takes the entries of `obj` out of `list`.
fn extract(list: &mut Vec<FinEntry>, obj: ObjRef, out: &mut Vec<FinEntry>) {
    if !list.iter().any(|e| e.obj == obj) {
        return;
    }
    let all = std::mem::take(list);
    for e in all {
        if e.obj == obj {
            out.push(e);
        } else {
            list.push(e);
        }
    }
}

impl Mutator {
    /// Registers a finalizer for `obj` (Julia's `jl_gc_add_finalizer`, with a Rust
    /// closure): after the collection that finds `obj` unreachable, `f` runs once with a
    /// mutator of this thread and the object, outside the stop-the-world (see
    /// [`Mutator::run_finalizers`]). `obj` and everything it reaches stay alive until
    /// then. Several finalizers may be registered for one object.
    ///
    /// `f` should not capture a [`Heap`] handle (the heap would own a reference to
    /// itself and never be dropped); use `m.heap()` inside.
    pub fn add_finalizer(
        &mut self,
        obj: ObjRef,
        f: impl FnOnce(&mut Mutator, ObjRef) + Send + 'static,
    ) {
        self.push_finalizer(obj, FinFn::Rust(Box::new(f)));
    }

    /// Registers a C finalizer for `obj` (Julia's `jl_gc_add_ptr_finalizer`): `f(obj)`
    /// runs once, as for [`Mutator::add_finalizer`]. Panics if `obj` is not an allocated
    /// object of this heap.
    ///
    /// The heap calls `f` later with an argument of its own, so safe code cannot
    /// register one:
    ///
    /// ```compile_fail,E0133
    /// # let heap = gc_core::Heap::default();
    /// # let mut m = heap.attach().unwrap();
    /// # let ty = heap.new_layout_type("Leaf", 16, &[]).unwrap();
    /// # let obj = m.alloc_typed(16, ty).unwrap();
    /// extern "C" { fn free(p: *mut std::ffi::c_void); }
    /// m.add_c_finalizer(obj, free); // `free` would be given the object's address
    /// ```
    ///
    /// # Safety
    /// `f(obj)` is sound to call once, on whichever thread attached to this heap runs
    /// finalizers ([`Mutator::run_finalizers`], a safepoint of a thread that opted in,
    /// [`Mutator::finalize`]), with `obj` alive (its memory is the heap's: `f` must not
    /// free it), after the collection that finds `obj` unreachable or at
    /// [`Mutator::finalize`]/[`Mutator::run_all_finalizers`]; `f` must not unwind.
    #[track_caller]
    pub unsafe fn add_c_finalizer(&mut self, obj: ObjRef, f: CFinalizerFn) {
        self.push_finalizer(obj, FinFn::C(f));
    }

    /// [`Mutator::add_c_finalizer`] for an object already checked.
    ///
    /// # Safety
    /// `obj` is an object of this mutator's heap: [`Heap::check_object`] accepted it (or it comes
    /// from this mutator's heap's allocation and is alive); `f` as for
    /// [`Mutator::add_c_finalizer`].
    pub unsafe fn add_c_finalizer_unchecked(&mut self, obj: ObjRef, f: CFinalizerFn) {
        self.push_finalizer_unchecked(obj, FinFn::C(f));
    }

    #[track_caller]
    fn push_finalizer(&mut self, obj: ObjRef, f: FinFn) {
        self.heap().assert_object(obj, "Mutator::add_finalizer");
        self.push_finalizer_unchecked(obj, f);
    }

    fn push_finalizer_unchecked(&mut self, obj: ObjRef, f: FinFn) {
        let mut ws = self.heap().0.weak.lock();
        let seq = ws.fin_seq;
        ws.fin_seq += 1;
        ws.fin_young.push(FinEntry { obj, seq, f });
    }

    /// Runs the finalizers of `obj` now, on this thread (Julia's `jl_finalize`), in
    /// reverse registration order, and forgets them: they never run again. Returns how
    /// many ran (counting those they asked for in turn). Inside a finalizer, they are
    /// queued instead and run on this thread right after the outermost finalizer call
    /// (`finalize` or `run_finalizers`) returns from the finalizer that asked
    /// (finalizers never run re-entrantly); the result is then 0.
    pub fn finalize(&mut self, obj: ObjRef) -> usize {
        let heap = self.heap().0.clone();
        let mut found = Vec::new();
        {
            let mut ws = heap.weak.lock();
            extract(&mut ws.fin_young, obj, &mut found);
            extract(&mut ws.fin_old, obj, &mut found);
            let mut q = heap.fin.lock();
            if q.pending.iter().any(|e| e.obj == obj) {
                let all = std::mem::take(&mut q.pending);
                for e in all {
                    if e.obj == obj {
                        found.push(e);
                    } else {
                        q.pending.push_back(e);
                    }
                }
            }
            found.sort_unstable_by_key(|e| Reverse(e.seq));
            if in_finalizer() {
                DEFERRED.with(|d| d.borrow_mut().extend(found.iter().map(|e| e.seq)));
                for e in found.into_iter().rev() {
                    q.pending.push_front(e);
                }
                heap.fin_pending.store(q.pending.len(), Ordering::Release);
                return 0;
            }
            heap.fin_pending.store(q.pending.len(), Ordering::Release);
        }
        if found.is_empty() {
            return 0;
        }
        let in_flight = start_batch(&heap, &mut heap.fin.lock(), &found);
        let ran = run_batch(self, found);
        drop(in_flight);
        ran + run_deferred(self)
    }

    /// Runs the pending finalizers (those of objects found unreachable by past
    /// collections) on this thread and returns how many ran. Returns 0 inside a
    /// finalizer. Finalizers a concurrent call on another thread has taken are run there.
    pub fn run_finalizers(&mut self) -> usize {
        run_pending(self)
    }

    /// Runs every registered finalizer now, reachable objects included, then the pending
    /// ones (what Julia does at exit): for shutting a heap down, since finalizers that
    /// have not run when the heap is dropped never run. Returns how many ran.
    pub fn run_all_finalizers(&mut self) -> usize {
        if in_finalizer() {
            return 0;
        }
        let heap = self.heap().0.clone();
        {
            let mut ws = heap.weak.lock();
            let mut all: Vec<FinEntry> = ws.fin_young.drain(..).collect();
            all.append(&mut ws.fin_old);
            all.sort_unstable_by_key(|e| Reverse(e.seq));
            let mut q = heap.fin.lock();
            q.pending.extend(all);
            heap.fin_pending.store(q.pending.len(), Ordering::Release);
        }
        run_pending(self)
    }

    /// Disables running finalizers at this thread's safepoints (Julia's
    /// `jl_gc_enable_finalizers(ct, 0)`, for code that must not be interrupted by one, a
    /// lock held): nests, each call needs an [`Mutator::enable_finalizers`]; while
    /// disabled, [`Mutator::finalizers_disabled`] says so (the caller's own
    /// [`Mutator::run_finalizers`] calls still run them).
    pub fn disable_finalizers(&mut self) {
        FIN_DISABLED.with(|c| c.set(c.get() + 1));
        self.set_finalizers_at_safepoints(false);
    }

    /// Undoes one [`Mutator::disable_finalizers`]. Returns whether that was the last one:
    /// finalizers then run at this thread's safepoints again, and the caller should run
    /// those pending ([`Mutator::run_finalizers`], as Julia's
    /// `jl_gc_enable_finalizers(ct, 1)` does). Enabling more often than disabling is an
    /// error ([`GcError::FinalizersNotDisabled`]).
    pub fn enable_finalizers(&mut self) -> Result<bool, GcError> {
        let n = FIN_DISABLED.with(|c| {
            let n = c.get();
            c.set(n.saturating_sub(1));
            n
        });
        match n {
            0 => Err(GcError::FinalizersNotDisabled),
            1 => {
                self.set_finalizers_at_safepoints(true);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Whether [`Mutator::disable_finalizers`] is in effect on this thread.
    pub fn finalizers_disabled(&self) -> bool {
        FIN_DISABLED.with(Cell::get) > 0
    }

    /// Opts this thread in (or out) of running pending finalizers at its safepoints:
    /// when it resumes from a collection (the one it ran, or one it stopped for) and when
    /// it leaves a GC-safe region. Off by default for [`Heap::attach`]; on for threads
    /// attached by the Julia-compatible `jl_init`/`jl_adopt_thread`.
    pub fn set_finalizers_at_safepoints(&mut self, on: bool) {
        // SAFETY: a Mutator is !Send: we are the owning thread.
        unsafe { &mut *self.shared().local.get() }.fin_at_safepoints = on;
    }

    /// Allocates a weak-reference object (Julia's `jl_gc_new_weakref`): a heap object of
    /// type [`Heap::weak_ref_type`] whose one payload word is `target` until a collection
    /// finds `target` unreachable, null after. Being a heap object, it can be held by
    /// other objects (it is kept alive like any object; its referent is not).
    ///
    /// `target` must stay reachable across this call, which allocates (and may collect).
    #[track_caller]
    pub fn new_weak_object(&mut self, target: Option<ObjRef>) -> Result<ObjRef, GcError> {
        if let Some(t) = target {
            self.heap().assert_object(t, "Mutator::new_weak_object");
        }
        let ty = self.heap().weak_ref_type();
        // SAFETY: a Mutator is !Send: we are the owning thread.
        let wr = unsafe { self.shared().alloc_internal(WEAK_OBJECT_SIZE, ty)? };
        // SAFETY: a fresh weak-reference object.
        unsafe { value_word(wr) }.store(target.map_or(0, |t| t.addr()), Ordering::Release);
        // SAFETY: owning thread.
        unsafe { &mut *self.shared().local.get() }
            .weak_objs
            .push(wr);
        Ok(wr)
    }

    /// Points the weak-reference object `wr` at `target` (or at nothing). No write
    /// barrier is needed. (A plain store into the object's payload word, as C does
    /// through `jl_weakref_t::value`, is correct too: every collection checks every
    /// weak-reference object's referent.)
    ///
    /// # Safety
    /// `wr` is a live object of this heap; `target` is null or a live object of it.
    pub unsafe fn weak_object_set(
        &mut self,
        wr: ObjRef,
        target: Option<ObjRef>,
    ) -> Result<(), GcError> {
        // SAFETY: live object (caller).
        let h = unsafe { wr.header_bits() };
        check_weak_type(self.heap(), wr, h)?;
        // SAFETY: a live weak-reference object.
        unsafe { value_word(wr) }.store(target.map_or(0, |t| t.addr()), Ordering::Release);
        // SAFETY: live object (caller).
        if h.is_old() && target.is_some_and(|t| unsafe { t.header_bits() }.is_young()) {
            // SAFETY: owning thread.
            let local = unsafe { &mut *self.shared().local.get() };
            local.weak_objs.push(wr);
            local.weak_dirty = true;
        }
        Ok(())
    }
}

fn check_weak_type(heap: &Heap, wr: ObjRef, h: Header) -> Result<(), GcError> {
    if h.type_addr() != heap.weak_ref_type().as_obj().addr() {
        return Err(GcError::NotAWeakRef { addr: wr.addr() });
    }
    Ok(())
}

impl Heap {
    /// The built-in type of weak-reference objects (`jl_weakref_type`). Objects of it
    /// are made by [`Mutator::new_weak_object`] only.
    pub fn weak_ref_type(&self) -> TypeRef {
        self.0.weakref_type()
    }

    /// The referent of weak-reference object `wr`: `None` once cleared.
    ///
    /// # Safety
    /// `wr` is a live object of this heap.
    pub unsafe fn weak_object_get(&self, wr: ObjRef) -> Result<Option<ObjRef>, GcError> {
        // SAFETY: live object (caller).
        check_weak_type(self, wr, unsafe { wr.header_bits() })?;
        // SAFETY: a live weak-reference object.
        Ok(ObjRef::from_addr(
            unsafe { value_word(wr) }.load(Ordering::Acquire),
        ))
    }

    /// A weak handle to `obj` for the embedder: [`WeakRef::get`] returns `obj` until a
    /// collection finds it unreachable, `None` after. The handle lives outside the heap
    /// and is never a root (not even for conservative scanning). `obj` must be a live
    /// object of this heap (on a thread not attached to it: a rooted one, since a
    /// collection may run meanwhile); panics if it is not an allocated object of it.
    #[track_caller]
    pub fn new_weak_ref(&self, obj: ObjRef) -> WeakRef {
        self.assert_object(obj, "Heap::new_weak_ref");
        // SAFETY: checked just above.
        unsafe { self.new_weak_ref_unchecked(obj) }
    }

    /// [`Heap::new_weak_ref`] for an object already checked.
    ///
    /// # Safety
    /// `obj` is an object of this heap: [`Heap::check_object`] accepted it (or it comes
    /// from this heap's allocation and is alive).
    pub unsafe fn new_weak_ref_unchecked(&self, obj: ObjRef) -> WeakRef {
        let (idx, slot) = self.0.weak.lock().handles.alloc(obj);
        WeakRef {
            heap: self.clone(),
            idx,
            slot,
        }
    }

    /// A new reference queue (see [`ReferenceQueue`]).
    pub fn new_reference_queue(&self) -> ReferenceQueue {
        let inner = Arc::new(QueueInner {
            ready: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
            notify: Mutex::new(None),
        });
        let mut ws = self.0.weak.lock();
        let slot = match ws.queues.iter().position(Option::is_none) {
            Some(k) => {
                ws.queues[k] = Some(inner.clone());
                k
            }
            None => {
                ws.queues.push(Some(inner.clone()));
                ws.queues.len() - 1
            }
        };
        drop(ws);
        ReferenceQueue {
            heap: self.clone(),
            inner,
            slot: u32::try_from(slot).expect("fewer than 2^32 reference queues"),
        }
    }

    /// Number of finalizers waiting to run (found by past collections, not yet run).
    pub fn pending_finalizers(&self) -> usize {
        self.0.fin_pending.load(Ordering::Acquire)
    }

    /// Number of registered finalizers whose objects were not found unreachable yet.
    pub fn registered_finalizers(&self) -> usize {
        let ws = self.0.weak.lock();
        ws.fin_young.len() + ws.fin_old.len()
    }

    /// Runs the pending finalizers on the calling thread, from any thread: a thread
    /// attached to this heap runs them as itself; a thread attached nowhere is attached
    /// for the duration. Returns how many ran (0 inside a finalizer).
    pub fn run_finalizers(&self) -> Result<usize, GcError> {
        let cur = mutator::current();
        if cur.is_null() {
            if self.pending_finalizers() == 0 {
                return Ok(0);
            }
            let mut m = self.attach()?;
            return Ok(run_pending(&mut m));
        }
        // SAFETY: the current thread's mutator is alive while attached.
        let ms = unsafe { &*cur };
        if !std::ptr::eq(ms.heap(), Arc::as_ptr(&self.0)) {
            return Err(GcError::AttachedElsewhere);
        }
        if ms.in_collection.load(Ordering::Relaxed) {
            return Err(GcError::DuringCollection {
                what: "running finalizers",
            });
        }
        ms.check_running()?;
        // SAFETY: the calling thread's attached mutator, running managed code.
        let mut m = unsafe { Mutator::borrowed(ms) };
        Ok(run_pending(&mut m))
    }
}

/// A weak handle ([`Heap::new_weak_ref`]): reads its object until a collection finds the
/// object unreachable, `None` after. Dropping it releases its slot.
///
/// [`WeakRef::get`] takes no lock. On a thread attached to the heap, the object it
/// returns stays valid until the thread's next safepoint (root it to keep it longer); on
/// other threads a collection may free it at any moment.
pub struct WeakRef {
    heap: Heap,
    idx: u32,
    slot: NonNull<AtomicUsize>,
}

// SAFETY: the slot is an atomic inside a chunk owned by the heap, which the handle keeps
// alive; chunks never move or shrink.
unsafe impl Send for WeakRef {}
// SAFETY: as above; every access to the slot is atomic.
unsafe impl Sync for WeakRef {}

impl WeakRef {
    /// The object, or `None` once a collection found it unreachable.
    #[inline]
    pub fn get(&self) -> Option<ObjRef> {
        // SAFETY: the slot lives as long as the heap, which `self` keeps alive.
        ObjRef::from_addr(unsafe { self.slot.as_ref() }.load(Ordering::Acquire))
    }

    /// Whether the object was found unreachable.
    pub fn is_cleared(&self) -> bool {
        self.get().is_none()
    }

    /// The heap of this handle.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }
}

impl Drop for WeakRef {
    fn drop(&mut self) {
        self.heap.0.weak.lock().handles.release(self.idx);
    }
}

impl std::fmt::Debug for WeakRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WeakRef({:?})", self.get())
    }
}

/// A reference queue with phantom semantics: [`ReferenceQueue::register`] `(obj,
/// token)`; the collection that finds `obj` gone (unreachable from roots, from hooks and
/// from pending finalizers) puts `token` on the queue, once, and `obj` is freed by that
/// collection: it can never be reached again. Draining happens outside the
/// stop-the-world, from any thread ([`ReferenceQueue::drain`], [`ReferenceQueue::poll`]);
/// [`ReferenceQueue::len`] (a flag) and [`ReferenceQueue::set_notify`] (a callback run by
/// the collecting thread after the world resumes) tell that there is something to drain.
///
/// Dropping the queue ends its registrations; tokens not drained are lost.
pub struct ReferenceQueue {
    heap: Heap,
    inner: Arc<QueueInner>,
    /// This queue's slot in the heap's queue table (what registrations name).
    slot: u32,
}

impl ReferenceQueue {
    /// Registers `obj` (a live object of the queue's heap; on a thread not attached to it,
    /// a rooted one) with `token`. An object may be registered several times; each
    /// registration yields its token once. Panics if `obj` is not an allocated object of
    /// the queue's heap.
    #[track_caller]
    pub fn register(&self, obj: ObjRef, token: usize) {
        self.heap.assert_object(obj, "ReferenceQueue::register");
        // SAFETY: checked just above.
        unsafe { self.register_unchecked(obj, token) };
    }

    /// [`ReferenceQueue::register`] for an object already checked.
    ///
    /// # Safety
    /// `obj` is an object of the queue's heap: [`Heap::check_object`] accepted it (or it comes
    /// from the queue's heap's allocation and is alive).
    pub unsafe fn register_unchecked(&self, obj: ObjRef, token: usize) {
        self.heap.0.weak.lock().phantom_young.push(PhantomEntry {
            obj,
            token,
            queue: self.slot,
        });
    }

    /// Takes every token available now, oldest first.
    pub fn drain(&self) -> Vec<usize> {
        let mut out = Vec::new();
        self.drain_into(&mut out);
        out
    }

    /// Appends every token available now to `out`; returns how many.
    pub fn drain_into(&self, out: &mut Vec<usize>) -> usize {
        let mut r = self.inner.ready.lock();
        let n = r.len();
        if out.is_empty() {
            // Hand the buffer over (no copy when the ring starts at its front, as one
            // filled by a collection does).
            *out = Vec::from(std::mem::take(&mut *r));
        } else {
            let (a, b) = r.as_slices();
            out.reserve(n);
            out.extend_from_slice(a);
            out.extend_from_slice(b);
            r.clear();
        }
        self.inner.len.store(0, Ordering::Release);
        n
    }

    /// Takes at most `max` available tokens, oldest first.
    pub fn drain_up_to(&self, max: usize) -> Vec<usize> {
        let mut r = self.inner.ready.lock();
        let n = r.len().min(max);
        let out: Vec<usize> = r.drain(..n).collect();
        self.inner.len.store(r.len(), Ordering::Release);
        out
    }

    /// Takes the oldest available token.
    pub fn poll(&self) -> Option<usize> {
        let mut r = self.inner.ready.lock();
        let t = r.pop_front();
        self.inner.len.store(r.len(), Ordering::Release);
        t
    }

    /// Number of tokens available (no lock: a flag to poll).
    pub fn len(&self) -> usize {
        self.inner.len.load(Ordering::Acquire)
    }

    /// Whether no token is available.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of registrations whose object has not been found gone yet.
    pub fn registered(&self) -> usize {
        let ws = self.heap.0.weak.lock();
        ws.phantom_young
            .iter()
            .chain(ws.phantom_old.iter())
            .filter(|e| e.queue == self.slot)
            .count()
    }

    /// Sets (or removes) the function the collecting thread calls, after the world
    /// resumes, when a collection put tokens on this queue. It may drain the queue,
    /// allocate and run managed code (it runs on an attached thread, possibly inside the
    /// allocation that triggered the collection).
    pub fn set_notify(&self, f: Option<Arc<dyn Fn() + Send + Sync>>) {
        *self.inner.notify.lock() = f.map(Notify::Rust);
    }

    /// Sets (or removes, with `None`) a C notification function called with `data`.
    ///
    /// The heap calls `f` later, on a thread of its choosing, so safe code cannot set one:
    ///
    /// ```compile_fail,E0133
    /// # let heap = gc_core::Heap::default();
    /// let q = heap.new_reference_queue();
    /// extern "C" { fn free(p: *mut std::ffi::c_void); }
    /// q.set_c_notify(Some(free), 0x1234 as *mut _); // would free 0x1234
    /// ```
    ///
    /// # Safety
    /// Until it is replaced or the queue is dropped, `f(data)` is sound to call any
    /// number of times, from any thread attached to the queue's heap (the one that ran a
    /// collection that put tokens on this queue, after the world resumed); `f` must not
    /// unwind.
    pub unsafe fn set_c_notify(&self, f: Option<CNotifyFn>, data: *mut c_void) {
        *self.inner.notify.lock() = f.map(|f| Notify::C(f, data as usize));
    }

    /// The heap of this queue.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }
}

impl Drop for ReferenceQueue {
    fn drop(&mut self) {
        let mut ws = self.heap.0.weak.lock();
        let me = self.slot;
        ws.phantom_young.retain(|e| e.queue != me);
        ws.phantom_old.retain(|e| e.queue != me);
        // The slot is free for the next queue: no registration names it any more.
        ws.queues[me as usize] = None;
    }
}

impl std::fmt::Debug for ReferenceQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReferenceQueue({} ready)", self.len())
    }
}
