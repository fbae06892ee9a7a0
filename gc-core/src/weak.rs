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

use crate::callbacks::{Callback, CallbackKind};
use crate::error::GcError;
use crate::heap::{Heap, HeapInner};
use crate::marker::Marker;
use crate::mutator::{self, Mutator, MutatorShared, RUNNING};
use crate::object::{ObjRef, OLD};
use crate::types::{TypeKind, TypeRef};
use crate::CollectionKind;
use parking_lot::Mutex;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A finalizer written in Rust: called once with the thread's mutator and the object,
/// after a collection found the object unreachable. It may allocate, store references,
/// and resurrect the object (for example by rooting it).
pub type FinalizerFn = Box<dyn FnOnce(&mut Mutator, ObjRef) + Send + 'static>;

/// A finalizer with Julia's `jl_gc_add_ptr_finalizer` signature: `void f(void *obj)`.
pub type CFinalizerFn = unsafe extern "C" fn(*mut c_void);

/// A C notification function for a reference queue: `void f(void *data)`.
pub type CNotifyFn = unsafe extern "C" fn(*mut c_void);

/// Payload bytes of a weak-reference object: one word, the referent (null once cleared).
pub const WEAK_OBJECT_SIZE: usize = 8;

pub(crate) enum FinFn {
    Rust(FinalizerFn),
    C(CFinalizerFn),
}

/// One registered (or queued) finalizer.
pub(crate) struct FinEntry {
    pub obj: ObjRef,
    /// Registration order, heap-wide.
    pub seq: u64,
    pub f: FinFn,
}

/// One reference-queue registration. Its queue is named by its slot in
/// [`WeakState::queues`] (not a counted pointer): registering and finding an object gone
/// touch no reference count.
pub(crate) struct PhantomEntry {
    obj: ObjRef,
    token: usize,
    queue: u32,
}

/// Slots per chunk of the weak handle table.
const HANDLE_CHUNK: usize = 256;

/// The table behind [`WeakRef`] handles: slots holding a referent address (0 = free or
/// cleared). Chunks never move, so a handle keeps a pointer to its slot and reads it
/// without a lock.
#[derive(Default)]
pub(crate) struct HandleTable {
    /// Boxed so that a chunk never moves when the vector grows: handles point into it.
    #[allow(clippy::vec_box)]
    chunks: Vec<Box<[AtomicUsize; HANDLE_CHUNK]>>,
    /// Per slot: the slot is on `young`.
    listed: Vec<bool>,
    free: Vec<u32>,
    /// Slots whose referent may be young (plus stale ones, dropped when seen).
    young: Vec<u32>,
    live: usize,
}

impl HandleTable {
    fn slot(&self, idx: u32) -> &AtomicUsize {
        slot_in(&self.chunks, idx)
    }

    fn alloc(&mut self, obj: ObjRef) -> (u32, NonNull<AtomicUsize>) {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = self.listed.len();
                if i % HANDLE_CHUNK == 0 {
                    self.chunks
                        .push(Box::new(std::array::from_fn(|_| AtomicUsize::new(0))));
                }
                self.listed.push(false);
                u32::try_from(i).expect("fewer than 2^32 weak handles")
            }
        };
        let slot = self.slot(idx);
        slot.store(obj.addr(), Ordering::Release);
        let ptr = NonNull::from(slot);
        if !self.listed[idx as usize] {
            self.listed[idx as usize] = true;
            self.young.push(idx);
        }
        self.live += 1;
        (idx, ptr)
    }

    fn release(&mut self, idx: u32) {
        self.slot(idx).store(0, Ordering::Release);
        self.free.push(idx);
        self.live -= 1;
    }

    /// Clears the slots whose referent died; returns how many.
    fn process(&mut self, full: bool, dead: &impl Fn(ObjRef) -> bool) -> u64 {
        let mut cleared = 0;
        if full {
            self.young.clear();
            for i in 0..self.listed.len() {
                let idx = i as u32;
                let slot = slot_in(&self.chunks, idx);
                self.listed[i] = false;
                let Some(obj) = ObjRef::from_addr(slot.load(Ordering::Relaxed)) else {
                    continue;
                };
                if dead(obj) {
                    slot.store(0, Ordering::Release);
                    cleared += 1;
                } else if !is_old(obj) {
                    self.listed[i] = true;
                    self.young.push(idx);
                }
            }
        } else {
            let young = std::mem::take(&mut self.young);
            for idx in young {
                let slot = slot_in(&self.chunks, idx);
                let keep = match ObjRef::from_addr(slot.load(Ordering::Relaxed)) {
                    None => false,
                    Some(obj) if dead(obj) => {
                        slot.store(0, Ordering::Release);
                        cleared += 1;
                        false
                    }
                    Some(obj) => !is_old(obj),
                };
                if keep {
                    self.young.push(idx);
                } else {
                    self.listed[idx as usize] = false;
                }
            }
        }
        cleared
    }
}

#[allow(clippy::borrowed_box)]
fn slot_in(chunks: &[Box<[AtomicUsize; HANDLE_CHUNK]>], idx: u32) -> &AtomicUsize {
    let i = idx as usize;
    &chunks[i / HANDLE_CHUNK][i % HANDLE_CHUNK]
}

/// Registrations and weak references of a heap, under `HeapInner::weak`.
#[derive(Default)]
pub(crate) struct WeakState {
    /// Weak-reference objects whose referent or themselves may be young.
    pub objs_young: Vec<ObjRef>,
    /// Weak-reference objects that are old, with an old referent or none.
    pub objs_old: Vec<ObjRef>,
    /// A weak-reference object was re-pointed: the lists may hold duplicates.
    pub objs_dirty: bool,
    pub handles: HandleTable,
    pub fin_young: Vec<FinEntry>,
    pub fin_old: Vec<FinEntry>,
    pub fin_seq: u64,
    phantom_young: Vec<PhantomEntry>,
    phantom_old: Vec<PhantomEntry>,
    /// The live reference queues by slot (a dropped queue's slot is `None`, reused by
    /// the next queue: its registrations left with it).
    queues: Vec<Option<Arc<QueueInner>>>,
}

impl WeakState {
    fn is_empty(&self) -> bool {
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
    pub pending: VecDeque<FinEntry>,
    /// Objects of batches being run, by batch id.
    pub in_flight: Vec<(u64, Vec<ObjRef>)>,
    next_batch: u64,
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

#[derive(Clone)]
enum Notify {
    Rust(Arc<dyn Fn() + Send + Sync>),
    C(CNotifyFn, usize),
}

/// The shared part of a [`ReferenceQueue`].
pub(crate) struct QueueInner {
    ready: Mutex<VecDeque<usize>>,
    len: AtomicUsize,
    notify: Mutex<Option<Notify>>,
}

impl QueueInner {
    fn push_all(&self, tokens: Vec<usize>) {
        let mut r = self.ready.lock();
        if r.is_empty() {
            *r = VecDeque::from(tokens); // no copy
        } else {
            r.extend(tokens);
        }
        self.len.store(r.len(), Ordering::Release);
    }

    /// Calls the notification function, if any (outside the stop-the-world).
    pub(crate) fn notify(&self) {
        let n = self.notify.lock().clone();
        match n {
            None => {}
            Some(Notify::Rust(f)) => f(),
            // SAFETY: a C function registered with its data pointer for this purpose.
            Some(Notify::C(f, data)) => unsafe { f(data as *mut c_void) },
        }
    }
}

/// What the phase did, for statistics and for the work after the world resumes.
#[derive(Default)]
pub(crate) struct WeakOutcome {
    pub cleared: u64,
    pub finalizable: u64,
    pub tokens: u64,
    /// Queues that received tokens.
    pub notify: Vec<Arc<QueueInner>>,
}

#[inline]
fn is_old(obj: ObjRef) -> bool {
    // SAFETY: callers only pass objects that are allocated (registered objects and
    // referents stay allocated until a collection finds them dead and drops them).
    let h = unsafe { obj.header_bits() };
    h & OLD != 0
}

/// The referent word of a weak-reference object.
///
/// # Safety
/// `wr` is an allocated weak-reference object.
#[inline]
unsafe fn value_word<'a>(wr: ObjRef) -> &'a AtomicUsize {
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
                    // SAFETY: a C hook; it reaches the marker through its ptls.
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
    static DEFERRED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

thread_local! {
    /// [`Mutator::disable_finalizers`] nesting on this thread.
    static FIN_DISABLED: Cell<u32> = const { Cell::new(0) };
}

/// Whether the calling thread is inside a finalizer.
pub fn in_finalizer() -> bool {
    IN_FINALIZER.with(Cell::get)
}

/// Removes the in-flight batch `id` when dropped (also on unwinding).
struct InFlight<'a> {
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
fn start_batch<'a>(heap: &'a HeapInner, q: &mut FinQueue, entries: &[FinEntry]) -> InFlight<'a> {
    let id = q.next_batch;
    q.next_batch += 1;
    q.in_flight
        .push((id, entries.iter().map(|e| e.obj).collect()));
    InFlight { heap, id }
}

/// Runs `entries` in order on this thread, inside the re-entrancy guard; a panicking
/// Rust finalizer is reported and counted, and the others still run.
fn run_batch(m: &mut Mutator, entries: Vec<FinEntry>) -> usize {
    let heap = m.heap().clone();
    let _guard = FinalizerGuard::enter();
    let mut ran = 0;
    for e in entries {
        let obj = e.obj;
        match e.f {
            // SAFETY: a C finalizer of Julia's ptr-finalizer signature, given its object,
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
fn run_deferred(m: &mut Mutator) -> usize {
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
    /// runs once, as for [`Mutator::add_finalizer`].
    pub fn add_c_finalizer(&mut self, obj: ObjRef, f: CFinalizerFn) {
        self.push_finalizer(obj, FinFn::C(f));
    }

    /// [`Mutator::add_c_finalizer`] for an object already checked.
    pub(crate) fn add_c_finalizer_unchecked(&mut self, obj: ObjRef, f: CFinalizerFn) {
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
        if h & OLD != 0 && target.is_some_and(|t| unsafe { t.header_bits() } & OLD == 0) {
            // SAFETY: owning thread.
            let local = unsafe { &mut *self.shared().local.get() };
            local.weak_objs.push(wr);
            local.weak_dirty = true;
        }
        Ok(())
    }
}

fn check_weak_type(heap: &Heap, wr: ObjRef, h: usize) -> Result<(), GcError> {
    if crate::object::type_addr(h) != heap.weak_ref_type().as_obj().addr() {
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
        self.new_weak_ref_unchecked(obj)
    }

    /// [`Heap::new_weak_ref`] for an object already checked.
    pub(crate) fn new_weak_ref_unchecked(&self, obj: ObjRef) -> WeakRef {
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
        if ms.state.load(Ordering::Relaxed) != RUNNING {
            return Err(GcError::InGcSafeRegion);
        }
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
        self.register_unchecked(obj, token);
    }

    /// [`ReferenceQueue::register`] for an object already checked.
    pub(crate) fn register_unchecked(&self, obj: ObjRef, token: usize) {
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
    pub fn set_c_notify(&self, f: Option<CNotifyFn>, data: *mut c_void) {
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

impl TypeKind {
    /// Whether objects of this kind may only be made by the heap itself.
    pub(crate) fn is_internal(self) -> bool {
        matches!(self, TypeKind::DataType | TypeKind::WeakRef)
    }
}
