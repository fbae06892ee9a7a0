//! Weak references, finalizers, the reference queue and the weak-processing hook: the
//! phase of a collection between mark and sweep.
//!
//! # What the phase does, in order
//! With the world stopped and marking from the roots finished (roots include the objects
//! of finalizers already queued to run, see below):
//!
//! 1. **Weak-processing hooks** ([`crate::Callback::WeakProcessing`]) run in rounds: each
//!    hook is called once per round with the [`Marker`]; it may ask
//!    [`Marker::is_marked`] and mark more objects ([`Marker::queue`]); the mark stack is
//!    drained after each hook. While a round marks anything new, another round runs, so
//!    ephemeron-like tables converge.
//! 2. **Weak references are cleared**: every weak reference (heap object or handle) whose
//!    referent is not marked now reads null. This happens before the finalizers of this
//!    collection are looked for, so a weak reference to an object with a finalizer is
//!    cleared in the collection that found the object unreachable, before its finalizer
//!    can run, and stays cleared even if the finalizer resurrects the object (the JVM's
//!    and Julia's order).
//! 3. **Finalizable objects are found and kept**: every registered finalizer whose object
//!    is not marked leaves the registrations and joins the run queue (within one
//!    collection, in reverse registration order, as Julia does). Then each of those
//!    objects is marked, and everything it reaches: they survive this collection and stay
//!    alive (the run queue is a root) until their finalizer has run.
//! 4. **Weak-reference objects that died are dropped from the lists**, and the
//!    **reference queue** registrations are checked: an object still unmarked now is
//!    gone for good (not reachable from roots, from hooks, or from any finalizer about to
//!    run); its token goes to its queue and the registration ends.
//!
//! After the world resumes, the collecting thread calls the notification callbacks of
//! the queues that received tokens, then (if it opted in) runs pending finalizers.
//!
//! # Generations
//! Every list is split in two: entries whose object (or referent) may be young, looked at
//! by every collection, and entries whose objects are all old, looked at only by full
//! collections (an old object cannot die in a partial one). New entries start young; an
//! entry moves to the old list once the collector sees its objects promoted. Setting a
//! weak-reference object (old) to a young referent puts it back on the young list
//! (duplicates are harmless and removed at the next full collection).
//!
//! One exception: the referents of weak-reference objects are checked on both lists by
//! every collection (as Julia checks every weak reference in every collection), because
//! C may store into a weak-reference object's `value` directly (Julia allows it; GAP's
//! weakptr.c does `wref->value = val` followed by a barrier that names another object),
//! and such a store records nothing. So an old weak reference pointing at a young object
//! is cleared by the partial collection that frees the object, however it was set and
//! without any write barrier. The lists still decide which weak-reference objects
//! themselves may have died (old ones only in full collections).
//!
//! # Conservative scanning
//! A weak reference is never a root: a weak-reference object's type has no reference
//! slots for the marker, and a [`WeakRef`] handle holds the index of a slot in a table
//! outside the heap, never the referent's address, so a stack word holding a handle or a
//! weak-reference object keeps only that handle or object alive.
//!
//! Layering: this module is the processing (`process`, between mark and sweep) and the
//! finalizer runner (after a collection, at safepoints, on request), over the heap's
//! state (`state.rs`: `WeakState`, `FinQueue`) and the tables of `weaktab.rs`; `collect`
//! and `mutator` call it. The public handles and the `Mutator`/`Heap` methods that
//! register things are `weakref.rs`, at the top.

use crate::callbacks::{Callback, CallbackKind};
use crate::marker::Marker;
use crate::object::ObjRef;
use crate::state::{FinEntry, FinFn, FinQueue, HeapInner, Mutator, MutatorShared, RUNNING};
use crate::weaktab::{is_old, QueueInner};
use crate::CollectionKind;
use std::cell::Cell;
use std::cmp::Reverse;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What the phase did, for statistics and for the work after the world resumes.
#[derive(Default)]
pub(crate) struct WeakOutcome {
    pub cleared: u64,
    pub finalizable: u64,
    pub tokens: u64,
    /// Queues that received tokens.
    pub notify: Vec<Arc<QueueInner>>,
}

/// The referent word of a weak-reference object.
///
/// # Safety
/// `wr` is an allocated weak-reference object.
#[inline]
pub(crate) unsafe fn value_word<'a>(wr: ObjRef) -> &'a AtomicUsize {
    // SAFETY: a weak-reference object's payload is one 16-aligned word.
    unsafe { &*(wr.as_ptr() as *const AtomicUsize) }
}

/// The phase between mark and sweep (see the module documentation). No lock is held
/// while hooks or mark functions run.
///
/// # Safety
/// The world is stopped, `m` is the running collection's marker, its stack drained and
/// no reference to it alive; the collecting thread's `marker` pointer is `m`.
pub(crate) unsafe fn process(
    heap: &HeapInner,
    m: *mut Marker<'_>,
    full: bool,
    _parity: usize,
) -> WeakOutcome {
    let mut out = WeakOutcome::default();
    if heap.callbacks.any(CallbackKind::WeakProcessing) {
        let kind = if full {
            CollectionKind::Full
        } else {
            CollectionKind::Partial
        };
        let hooks = heap.callbacks.snapshot(CallbackKind::WeakProcessing);
        let _span = tracing::trace_span!("gc_weak_hooks").entered();
        loop {
            // SAFETY: m is valid (caller); the borrow ends with the statement.
            let before = unsafe { (*m).objects_marked() };
            for (_, cb) in hooks.iter() {
                match &**cb {
                    // SAFETY: m is valid and unaliased during the call.
                    Callback::WeakProcessing(f) => f(unsafe { &mut *m }, kind),
                    // SAFETY: a C hook (`Callback::c_weak_processing`'s contract); it reaches the
                    // marker through its ptls.
                    Callback::CWeakProcessing(f) => unsafe { f(full as c_int) },
                    _ => {}
                }
                // SAFETY: as above.
                unsafe { Marker::drain(m) };
            }
            // SAFETY: as above.
            if unsafe { (*m).objects_marked() } == before {
                break;
            }
        }
    }
    let dead = |o: ObjRef| {
        // SAFETY: only allocated objects are asked about (see `is_old`).
        !unsafe { (*m).is_marked(o) }
    };
    let mut batch = Vec::new();
    {
        let mut ws = heap.weak.lock();
        if ws.is_empty() {
            return out;
        }
        let ws = &mut *ws;
        // Clear weak-reference objects (dead or alive: one may survive through a
        // finalizer marked below, and must not keep a dead referent). Both lists, in
        // every collection: C may store a young referent into an old weak-reference
        // object's value directly (Julia allows it; GAP's weakptr.c does it), which no
        // list records. In a partial collection an old referent reads marked, so only a
        // young dead one is cleared.
        for &wr in ws.objs_young.iter().chain(ws.objs_old.iter()) {
            // SAFETY: listed weak-reference objects are allocated until dropped below.
            let word = unsafe { value_word(wr) };
            if let Some(v) = ObjRef::from_addr(word.load(Ordering::Relaxed)) {
                if dead(v) {
                    word.store(0, Ordering::Release);
                    out.cleared += 1;
                }
            }
        }
        out.cleared += ws.handles.process(full, &dead);
        // Finalizable objects leave the registrations.
        sift(
            &mut ws.fin_young,
            &mut ws.fin_old,
            full,
            |e| e.obj,
            |e| dead(e.obj),
            |e| batch.push(e),
        );
    }
    if !batch.is_empty() {
        // Reverse registration order, as Julia runs them.
        batch.sort_unstable_by_key(|e| Reverse(e.seq));
        // What only finalizable objects reach is kept for this one collection: it is not
        // promoted, so that it dies young once the finalizers ran (otherwise a partial
        // collection could not free it and the old generation would fill with it).
        // SAFETY: m is valid and unaliased.
        unsafe { (*m).keep_young(true) };
        for e in &batch {
            // SAFETY: m is valid and unaliased; the object is allocated (unmarked).
            unsafe { (*m).queue(e.obj) };
        }
        // SAFETY: as above.
        unsafe {
            Marker::drain(m);
            (*m).keep_young(false);
        }
        out.finalizable = batch.len() as u64;
        let mut q = heap.fin.lock();
        q.pending.extend(batch);
        heap.fin_pending.store(q.pending.len(), Ordering::Release);
    }
    let mut ws = heap.weak.lock();
    let ws = &mut *ws;
    // Weak-reference objects: drop the dead, move the all-old ones to the old list.
    if full && std::mem::take(&mut ws.objs_dirty) {
        // Re-pointing may have listed an object twice (in either list).
        ws.objs_young.append(&mut ws.objs_old);
        ws.objs_young.sort_unstable();
        ws.objs_young.dedup();
    }
    sift(
        &mut ws.objs_young,
        &mut ws.objs_old,
        full,
        |&wr| {
            // SAFETY: listed weak-reference objects are allocated; an all-old entry is
            // one whose referent is old or null.
            let v = unsafe { value_word(wr) }.load(Ordering::Relaxed);
            match ObjRef::from_addr(v) {
                Some(v) if !is_old(v) => v,
                _ => wr,
            }
        },
        |&wr| dead(wr),
        |_| {},
    );
    // Reference queue: objects still unmarked are gone. Their tokens are gathered per
    // queue (by slot: the last queue's batch is found with one compare) and pushed under
    // one lock per queue (not one per token).
    let mut batches: Vec<(u32, Vec<usize>)> = Vec::new();
    let mut last = usize::MAX;
    sift(
        &mut ws.phantom_young,
        &mut ws.phantom_old,
        full,
        |e| e.obj,
        |e| dead(e.obj),
        |e| {
            out.tokens += 1;
            if last >= batches.len() || batches[last].0 != e.queue {
                last = match batches.iter().position(|(q, _)| *q == e.queue) {
                    Some(k) => k,
                    None => {
                        batches.push((e.queue, Vec::new()));
                        batches.len() - 1
                    }
                };
            }
            batches[last].1.push(e.token);
        },
    );
    for (slot, tokens) in batches {
        // (a registration's queue is alive: dropping a queue removes its registrations
        // under this lock)
        let q = ws.queues[slot as usize]
            .clone()
            .expect("registrations name live queues");
        q.push_all(tokens);
        out.notify.push(q);
    }
    out
}

/// Processes a young/old pair of lists in place: entries found dead go to `gone`;
/// young-list entries whose `key` object is old move to the old list. Old entries are
/// only looked at in full collections. Order within the lists is not kept (nothing
/// depends on it: finalizer batches are sorted by registration number).
fn sift<T>(
    young: &mut Vec<T>,
    old: &mut Vec<T>,
    full: bool,
    key: impl Fn(&T) -> ObjRef,
    dead: impl Fn(&T) -> bool,
    mut gone: impl FnMut(T),
) {
    if full {
        let mut i = 0;
        while i < old.len() {
            if dead(&old[i]) {
                gone(old.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }
    let mut i = 0;
    while i < young.len() {
        if dead(&young[i]) {
            gone(young.swap_remove(i));
        } else if is_old(key(&young[i])) {
            old.push(young.swap_remove(i));
        } else {
            i += 1;
        }
    }
}

/// Work after the world resumed, on the collecting thread: queue notifications, then the
/// thread's own pending finalizers if it opted in.
pub(crate) fn after_collection(me: &MutatorShared, notify: Vec<Arc<QueueInner>>) {
    for q in notify {
        q.notify();
    }
    after_resume(me);
}

/// At a safepoint where the thread stopped or collected: runs pending finalizers if the
/// thread opted in.
pub(crate) fn after_resume(me: &MutatorShared) {
    // SAFETY: called by the owning thread (safepoints and collections run on it).
    let opted_in = unsafe { &*me.local.get() }.fin_at_safepoints;
    if opted_in
        && me.heap().fin_pending.load(Ordering::Relaxed) != 0
        && !IN_FINALIZER.with(Cell::get)
        && !me.in_collection.load(Ordering::Relaxed)
        && me.state.load(Ordering::Relaxed) == RUNNING
    {
        // SAFETY: `me` is the calling thread's attached mutator.
        let mut m = unsafe { Mutator::borrowed(me) };
        run_pending(&mut m);
    }
}

thread_local! {
    /// The calling thread is running a finalizer: finalizers never run re-entrantly.
    static IN_FINALIZER: Cell<bool> = const { Cell::new(false) };
    /// Registration numbers of finalizers that `finalize` deferred while this thread ran
    /// a finalizer (they wait at the front of the pending queue, rooted there).
    pub(crate) static DEFERRED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether the calling thread is inside a finalizer.
pub fn in_finalizer() -> bool {
    IN_FINALIZER.with(Cell::get)
}

/// Removes the in-flight batch `id` when dropped (also on unwinding).
pub(crate) struct InFlight<'a> {
    heap: &'a HeapInner,
    id: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.heap
            .fin
            .lock()
            .in_flight
            .retain(|(i, _)| *i != self.id);
    }
}

/// Clears `IN_FINALIZER` when dropped.
struct FinalizerGuard;

impl FinalizerGuard {
    fn enter() -> FinalizerGuard {
        IN_FINALIZER.with(|c| c.set(true));
        FinalizerGuard
    }
}

impl Drop for FinalizerGuard {
    fn drop(&mut self) {
        IN_FINALIZER.with(|c| c.set(false));
    }
}

/// Registers `entries` as in flight (rooted) and returns the guard that unregisters them.
pub(crate) fn start_batch<'a>(
    heap: &'a HeapInner,
    q: &mut FinQueue,
    entries: &[FinEntry],
) -> InFlight<'a> {
    let id = q.next_batch;
    q.next_batch += 1;
    q.in_flight
        .push((id, entries.iter().map(|e| e.obj).collect()));
    InFlight { heap, id }
}

/// Runs `entries` in order on this thread, inside the re-entrancy guard; a panicking
/// Rust finalizer is reported and counted, and the others still run.
pub(crate) fn run_batch(m: &mut Mutator, entries: Vec<FinEntry>) -> usize {
    let heap = m.heap().clone();
    let _guard = FinalizerGuard::enter();
    let mut ran = 0;
    for e in entries {
        let obj = e.obj;
        match e.f {
            // SAFETY: a C finalizer (`Mutator::add_c_finalizer`'s contract), given its object,
            // which is alive (in flight, so rooted).
            FinFn::C(f) => unsafe { f(obj.as_ptr().cast()) },
            FinFn::Rust(f) => {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(m, obj)));
                if r.is_err() {
                    heap.0.fin_panics.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(
                        obj = format_args!("{:#x}", obj.addr()),
                        "a finalizer panicked; the panic was caught and the finalizer counts as run"
                    );
                }
            }
        }
        ran += 1;
        heap.0.fin_run.fetch_add(1, Ordering::Relaxed);
    }
    ran
}

/// Runs every pending finalizer on the calling thread (batch by batch, until none is
/// left); 0 inside a finalizer. Returns how many ran.
pub(crate) fn run_pending(m: &mut Mutator) -> usize {
    if in_finalizer() {
        return 0;
    }
    let heap = m.heap().0.clone();
    let mut ran = 0;
    loop {
        if heap.fin_pending.load(Ordering::Acquire) == 0 {
            break;
        }
        let (batch, in_flight) = {
            let mut q = heap.fin.lock();
            if q.pending.is_empty() {
                break;
            }
            let batch: Vec<FinEntry> = q.pending.drain(..).collect();
            heap.fin_pending.store(0, Ordering::Release);
            let guard = start_batch(&heap, &mut q, &batch);
            (batch, guard)
        };
        ran += run_batch(m, batch);
        drop(in_flight);
        // Deferred finalizers went to the pending queue: the next round takes them.
        DEFERRED.with(|d| d.borrow_mut().clear());
    }
    ran
}

/// Runs the finalizers that `finalize` deferred during the finalizers this thread just
/// ran (unless another thread's drain took them first).
pub(crate) fn run_deferred(m: &mut Mutator) -> usize {
    let heap = m.heap().0.clone();
    let mut ran = 0;
    loop {
        let seqs = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
        if seqs.is_empty() {
            return ran;
        }
        let (batch, in_flight) = {
            let mut q = heap.fin.lock();
            let mut batch = Vec::new();
            let all = std::mem::take(&mut q.pending);
            for e in all {
                if seqs.contains(&e.seq) {
                    batch.push(e);
                } else {
                    q.pending.push_back(e);
                }
            }
            heap.fin_pending.store(q.pending.len(), Ordering::Release);
            let guard = start_batch(&heap, &mut q, &batch);
            (batch, guard)
        };
        ran += run_batch(m, batch);
        drop(in_flight);
    }
}
