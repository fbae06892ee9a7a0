//! Weak references (objects and handles), finalizers, the reference queue and the
//! weak-processing hook: the semantics the README promises, one behaviour per test.
//! Compiled twice: by `tests/weak.rs` (eager sweeping, one collector thread, verify
//! mode) and by `tests/weak_parallel.rs` (lazy sweeping, two collector threads).

use gc_core::{
    Callback, CollectionKind, GcError, Heap, HeapConfig, Mutator, ObjRef, Root, TypeRef,
};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

/// Node: [left, right, id].
const NODE: usize = 24;

fn setup() -> (Heap, Mutator, TypeRef) {
    // Parallel: verify mode would mark on one thread, so it is off; the tests look at
    // cells after each collection, so `collect` completes the lazy sweep first.
    let heap = Heap::new(HeapConfig {
        verify: !super::PARALLEL,
        lazy_sweep: super::PARALLEL,
        mark_threads: if super::PARALLEL { 2 } else { 1 },
        parallel_threshold: 0,
        ..HeapConfig::default()
    })
    .unwrap();
    let m = heap.attach().unwrap();
    let node = heap.new_layout_type("Node", NODE, &[0, 8]).unwrap();
    (heap, m, node)
}

fn node(m: &mut Mutator, ty: TypeRef, id: usize) -> ObjRef {
    let o = m.alloc_typed(NODE, ty).unwrap();
    // SAFETY: a fresh node.
    unsafe { o.write_slot(16, id) };
    o
}

/// Whether the object's memory is still an allocated object (pool objects only).
fn allocated(o: ObjRef) -> bool {
    let page = gc_core::page_of(o.addr()).expect("a pool object");
    page.cell_layout().is_some() && page.is_allocated(o.addr())
}

fn id(o: ObjRef) -> usize {
    // SAFETY: callers pass live nodes.
    unsafe { o.read_slot(16) }
}

fn collect(m: &mut Mutator, kind: CollectionKind) {
    collect_info(m, kind);
}

/// Collects; with lazy sweeping, sweeps every page before returning, so that the memory
/// of the objects found dead is free as with eager sweeping.
fn collect_info(m: &mut Mutator, kind: CollectionKind) -> gc_core::CollectionInfo {
    let info = m
        .collect(kind)
        .unwrap()
        .expect("single thread: this call collects");
    if super::PARALLEL {
        m.heap().complete_sweep().unwrap();
    }
    info
}

fn no_verify_errors(heap: &Heap) {
    let errors = heap.verify_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn weak_handles_are_cleared_exactly_when_the_referent_dies() {
    let (heap, mut m, ty) = setup();
    let a = node(&mut m, ty, 1);
    let ra = heap.root(a);
    let b = node(&mut m, ty, 2);
    let wa = heap.new_weak_ref(a);
    let wb = heap.new_weak_ref(b);
    collect(&mut m, CollectionKind::Partial);
    assert_eq!(wa.get(), Some(a), "a rooted referent is kept");
    assert_eq!(wb.get(), None, "an unreachable young referent is cleared");
    assert!(!allocated(b), "and freed by the same collection");
    // a survives a second collection: old from now on.
    collect(&mut m, CollectionKind::Partial);
    drop(ra);
    collect(&mut m, CollectionKind::Partial);
    assert_eq!(wa.get(), Some(a), "old objects outlive partial collections");
    assert!(allocated(a));
    collect(&mut m, CollectionKind::Full);
    assert_eq!(
        wa.get(),
        None,
        "a full collection clears the dead old referent"
    );
    assert!(!allocated(a));
    assert_eq!(heap.stats().weak_refs_cleared, 2);
    no_verify_errors(&heap);
}

#[test]
fn weak_objects_live_in_the_heap_and_never_keep_their_referent() {
    let (heap, mut m, ty) = setup();
    let holder = node(&mut m, ty, 1);
    let rh = heap.root(holder);
    let target = node(&mut m, ty, 2);
    let rt = heap.root(target);
    let w = m.new_weak_object(Some(target)).unwrap();
    // SAFETY: live objects; the holder keeps the weak-reference object.
    unsafe { m.store_ref(holder, 0, Some(w)) };
    assert_eq!(heap.type_of_checked(w), heap.weak_ref_type());
    collect(&mut m, CollectionKind::Full);
    // SAFETY: w is reachable from the rooted holder.
    let w_now = unsafe { m.load_ref(rh.get(), 0) }.unwrap();
    assert_eq!(w_now, w);
    // SAFETY: live weak-reference object.
    assert_eq!(unsafe { heap.weak_object_get(w) }.unwrap(), Some(target));
    drop(rt);
    collect(&mut m, CollectionKind::Partial);
    // SAFETY: as above.
    assert_eq!(unsafe { heap.weak_object_get(w) }.unwrap(), None);
    assert!(!allocated(target));
    assert!(allocated(w), "the weak-reference object itself is alive");
    // A weak-reference object nobody holds is freed like any object.
    // SAFETY: live holder.
    unsafe { m.store_ref(holder, 0, None) };
    collect(&mut m, CollectionKind::Full);
    assert!(!allocated(w));
    no_verify_errors(&heap);
}

#[test]
fn an_old_weak_object_pointing_at_a_young_object_is_cleared_by_a_partial_collection() {
    let (heap, mut m, ty) = setup();
    let w = m.new_weak_object(None).unwrap();
    let rw = heap.root(w);
    collect(&mut m, CollectionKind::Partial);
    collect(&mut m, CollectionKind::Partial); // w is old now
    let y = node(&mut m, ty, 7);
    let ry = heap.root(y);
    // SAFETY: live objects of this heap; no write barrier is needed for weak slots.
    unsafe { m.weak_object_set(rw.get(), Some(y)) }.unwrap();
    collect(&mut m, CollectionKind::Partial);
    // SAFETY: w is rooted.
    assert_eq!(unsafe { heap.weak_object_get(rw.get()) }.unwrap(), Some(y));
    assert_eq!(id(y), 7);
    drop(ry);
    collect(&mut m, CollectionKind::Partial);
    // SAFETY: as above.
    assert_eq!(unsafe { heap.weak_object_get(rw.get()) }.unwrap(), None);
    assert!(
        !allocated(y),
        "the young referent was freed by the partial collection"
    );
    // Re-pointing twice leaves duplicates behind; a full collection removes them.
    let z = node(&mut m, ty, 8);
    let rz = heap.root(z);
    // SAFETY: live objects.
    unsafe {
        m.weak_object_set(rw.get(), Some(z)).unwrap();
        m.weak_object_set(rw.get(), Some(z)).unwrap();
    }
    collect(&mut m, CollectionKind::Full);
    drop(rz);
    collect(&mut m, CollectionKind::Full);
    // SAFETY: as above.
    assert_eq!(unsafe { heap.weak_object_get(rw.get()) }.unwrap(), None);
    no_verify_errors(&heap);
}

/// C may store into a weak-reference object's `value` directly (GAP's weakptr.c does
/// `wref->value = val; jl_gc_wb(wref, BAG_HEADER(val))`, as Julia allows): an old weak
/// reference with an old referent, re-pointed by a plain store at a young object that
/// then dies in a partial collection, reads null afterwards (Julia checks every weak
/// reference in every collection).
#[test]
fn a_direct_store_into_an_old_weak_object_is_cleared_when_its_young_referent_dies() {
    let (heap, mut m, ty) = setup();
    let target = node(&mut m, ty, 1);
    let _rt = heap.root(target);
    let w = m.new_weak_object(Some(target)).unwrap();
    let _rw = heap.root(w);
    collect(&mut m, CollectionKind::Full);
    collect(&mut m, CollectionKind::Full);
    // SAFETY: both rooted.
    assert!(!unsafe { w.is_young() } && !unsafe { target.is_young() });
    let y = node(&mut m, ty, 2);
    // SAFETY: `w` is a live weak-reference object, whose payload word is its referent: a
    // plain store, as C does (no `weak_object_set`, no barrier).
    unsafe { w.write_slot(0, y.addr()) };
    // SAFETY: live weak-reference object.
    assert_eq!(unsafe { heap.weak_object_get(w) }.unwrap(), Some(y));
    collect(&mut m, CollectionKind::Partial);
    // SAFETY: as above.
    let now = unsafe { heap.weak_object_get(w) }.unwrap();
    assert_eq!(
        now, None,
        "the young referent died: the weak reference dangles"
    );
    assert!(!allocated(y));
    // A young referent stored directly that lives stays, and is cleared when it dies.
    let z = node(&mut m, ty, 3);
    let rz = heap.root(z);
    // SAFETY: as above.
    unsafe { w.write_slot(0, z.addr()) };
    collect(&mut m, CollectionKind::Partial);
    // SAFETY: as above.
    assert_eq!(unsafe { heap.weak_object_get(w) }.unwrap(), Some(z));
    assert_eq!(id(z), 3);
    drop(rz);
    collect(&mut m, CollectionKind::Partial);
    // SAFETY: as above.
    assert_eq!(unsafe { heap.weak_object_get(w) }.unwrap(), None);
    assert!(!allocated(z));
    no_verify_errors(&heap);
}

#[test]
fn weak_reference_objects_are_refused_to_alloc_typed_and_checked_on_use() {
    let (heap, mut m, ty) = setup();
    let e = m.alloc_typed(8, heap.weak_ref_type()).unwrap_err();
    assert!(matches!(e, GcError::InvalidType { .. }), "{e}");
    assert!(e.to_string().contains("new_weak_object"), "{e}");
    let n = node(&mut m, ty, 1);
    let _r = heap.root(n);
    // SAFETY: a live object (of the wrong type).
    let e = unsafe { heap.weak_object_get(n) }.unwrap_err();
    assert_eq!(e, GcError::NotAWeakRef { addr: n.addr() });
    // SAFETY: as above.
    let e = unsafe { m.weak_object_set(n, None) }.unwrap_err();
    assert!(e.to_string().contains("not a weak-reference object"), "{e}");
}

#[test]
fn a_finalizer_runs_once_after_the_collection_and_its_object_graph_stays_intact() {
    let (heap, mut m, ty) = setup();
    let x = node(&mut m, ty, 42);
    let rx = heap.root(x);
    let child = node(&mut m, ty, 43);
    // SAFETY: live objects.
    unsafe { m.store_ref(rx.get(), 0, Some(child)) };
    let wx = Arc::new(heap.new_weak_ref(x));
    let wc = heap.new_weak_ref(child);
    let runs = Arc::new(AtomicUsize::new(0));
    let (r, w) = (runs.clone(), wx.clone());
    m.add_finalizer(x, move |m, obj| {
        assert_eq!(
            w.get(),
            None,
            "weak references are cleared before the finalizer runs"
        );
        assert_eq!(id(obj), 42);
        // SAFETY: the object and what it reaches are alive while its finalizer runs.
        let c = unsafe { m.load_ref(obj, 0) }.unwrap();
        assert_eq!(id(c), 43);
        r.fetch_add(1, Ordering::SeqCst);
    });
    assert_eq!(heap.registered_finalizers(), 1);
    collect(&mut m, CollectionKind::Full);
    assert_eq!(heap.pending_finalizers(), 0, "x is still rooted");
    drop(rx);
    let info = collect_info(&mut m, CollectionKind::Full);
    assert_eq!(info.finalizers_queued, 1);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "never inside the collection"
    );
    assert_eq!(heap.pending_finalizers(), 1);
    assert_eq!(wx.get(), None);
    assert_eq!(
        wc.get(),
        None,
        "reachable only through a finalizable object: cleared"
    );
    assert!(allocated(x) && allocated(child), "kept for the finalizer");
    assert_eq!(m.run_finalizers(), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(m.run_finalizers(), 0);
    collect(&mut m, CollectionKind::Full);
    assert!(
        !allocated(x) && !allocated(child),
        "freed by the next collection"
    );
    collect(&mut m, CollectionKind::Full);
    assert_eq!(m.run_finalizers(), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let s = heap.stats();
    assert_eq!((s.finalizers_queued, s.finalizers_run), (1, 1));
    no_verify_errors(&heap);
}

#[test]
fn a_resurrected_object_survives_and_its_finalizer_never_runs_again() {
    let (heap, mut m, ty) = setup();
    let x = node(&mut m, ty, 5);
    let runs = Arc::new(AtomicUsize::new(0));
    let keep: Arc<Mutex<Option<Root>>> = Arc::new(Mutex::new(None));
    let (r, k) = (runs.clone(), keep.clone());
    m.add_finalizer(x, move |m, obj| {
        r.fetch_add(1, Ordering::SeqCst);
        *k.lock() = Some(m.heap().root(obj));
    });
    let q = heap.new_reference_queue();
    q.register(x, 99);
    collect(&mut m, CollectionKind::Partial);
    assert_eq!(m.run_finalizers(), 1);
    assert!(
        q.is_empty(),
        "a pending finalizer keeps the object: not gone yet"
    );
    for kind in [CollectionKind::Partial, CollectionKind::Full] {
        collect(&mut m, kind);
        assert!(allocated(x), "resurrected");
        assert_eq!(id(keep.lock().as_ref().unwrap().get()), 5);
        assert!(q.is_empty());
    }
    keep.lock().take();
    collect(&mut m, CollectionKind::Full);
    assert!(!allocated(x));
    assert_eq!(
        q.drain(),
        vec![99],
        "the token comes when the object is finally gone"
    );
    assert_eq!(m.run_finalizers(), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[test]
fn finalize_runs_an_objects_finalizers_now_in_reverse_registration_order() {
    let (heap, mut m, ty) = setup();
    let x = node(&mut m, ty, 1);
    let rx = heap.root(x);
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in 0..3 {
        let o = order.clone();
        m.add_finalizer(x, move |_, obj| {
            assert_eq!(id(obj), 1);
            o.lock().push(i);
        });
    }
    assert_eq!(m.finalize(rx.get()), 3);
    assert_eq!(*order.lock(), vec![2, 1, 0]);
    assert_eq!(m.finalize(rx.get()), 0, "once");
    assert_eq!(heap.registered_finalizers(), 0);
    drop(rx);
    collect(&mut m, CollectionKind::Full);
    assert_eq!(m.run_finalizers(), 0);
    assert!(!allocated(x), "nothing keeps it any more");
    assert_eq!(order.lock().len(), 3);
}

#[test]
fn finalizers_never_run_reentrantly_on_one_thread() {
    let (heap, mut m, ty) = setup();
    let x = node(&mut m, ty, 1);
    let y = node(&mut m, ty, 2);
    // SAFETY: live objects: y is reachable from x only.
    unsafe { m.store_ref(x, 0, Some(y)) };
    let depth = Arc::new(AtomicUsize::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));
    let (d, l) = (depth.clone(), log.clone());
    m.add_finalizer(y, move |_, obj| {
        assert_eq!(
            d.load(Ordering::SeqCst),
            0,
            "nested inside another finalizer"
        );
        assert!(gc_core::in_finalizer());
        l.lock().push(id(obj));
    });
    let (d, l) = (depth.clone(), log.clone());
    m.add_finalizer(x, move |m, obj| {
        d.store(1, Ordering::SeqCst);
        // SAFETY: obj and what it reaches are alive while its finalizer runs.
        let y = unsafe { m.load_ref(obj, 0) }.unwrap();
        assert_eq!(m.finalize(y), 0, "deferred, not run inside this finalizer");
        assert_eq!(m.run_finalizers(), 0, "no nested draining");
        assert_eq!(m.heap().run_finalizers().unwrap(), 0);
        l.lock().push(id(obj));
        d.store(0, Ordering::SeqCst);
    });
    // x and y die in the same collection; x registered last, so it runs first (reverse
    // registration order); it asks for y, which runs right after it, not inside it.
    collect(&mut m, CollectionKind::Full);
    assert_eq!(heap.pending_finalizers(), 2);
    assert_eq!(m.run_finalizers(), 2);
    assert_eq!(*log.lock(), vec![1, 2]);
    assert!(!gc_core::in_finalizer());
}

#[test]
fn a_panicking_finalizer_is_caught_and_the_others_still_run() {
    let (heap, mut m, ty) = setup();
    let runs = Arc::new(AtomicUsize::new(0));
    for i in 0..3 {
        let o = node(&mut m, ty, i);
        let r = runs.clone();
        m.add_finalizer(o, move |_, _| {
            r.fetch_add(1, Ordering::SeqCst);
            if i == 1 {
                panic!("finalizer {i} fails on purpose");
            }
        });
    }
    collect(&mut m, CollectionKind::Full);
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let ran = m.run_finalizers();
    std::panic::set_hook(prev);
    assert_eq!(ran, 3);
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let s = heap.stats();
    assert_eq!((s.finalizers_run, s.finalizer_panics), (3, 1));
}

#[test]
fn c_finalizers_get_the_object_pointer() {
    static SEEN: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn fin(obj: *mut std::ffi::c_void) {
        // SAFETY: the object is alive while its finalizer runs; word 2 is its id.
        SEEN.store(unsafe { *(obj as *const usize).add(2) }, Ordering::SeqCst);
    }
    let (_heap, mut m, ty) = setup();
    let x = node(&mut m, ty, 77);
    // SAFETY: `fin` reads word 2 of a live node, which is what it is given.
    unsafe { m.add_c_finalizer(x, fin) };
    collect(&mut m, CollectionKind::Partial);
    assert_eq!(m.run_finalizers(), 1);
    assert_eq!(SEEN.load(Ordering::SeqCst), 77);
}

#[test]
fn the_reference_queue_yields_each_token_once_after_the_object_is_gone() {
    let (heap, mut m, ty) = setup();
    let q = heap.new_reference_queue();
    let kept = node(&mut m, ty, 1);
    let rk = heap.root(kept);
    let a = node(&mut m, ty, 2);
    q.register(kept, 10);
    q.register(a, 20);
    q.register(a, 21);
    assert_eq!(q.registered(), 3);
    let info = collect_info(&mut m, CollectionKind::Partial);
    assert_eq!(info.tokens_queued, 2);
    assert!(!allocated(a), "the object is gone when its token is queued");
    assert_eq!(q.len(), 2);
    // Tokens of one collection come in no particular order.
    let mut got = vec![q.poll().unwrap()];
    got.extend(q.drain());
    got.sort_unstable();
    assert_eq!(got, vec![20, 21]);
    assert!(q.is_empty());
    collect(&mut m, CollectionKind::Partial);
    collect(&mut m, CollectionKind::Partial);
    drop(rk);
    collect(&mut m, CollectionKind::Partial);
    assert!(
        q.is_empty(),
        "old objects are not collected by partial collections"
    );
    collect(&mut m, CollectionKind::Full);
    assert_eq!(q.drain(), vec![10]);
    assert_eq!(q.registered(), 0);
    assert_eq!(heap.stats().tokens_queued, 3);
}

#[test]
fn tokens_go_to_their_own_queue_and_a_dropped_queues_slot_is_reused_cleanly() {
    let (heap, mut m, ty) = setup();
    let q1 = heap.new_reference_queue();
    let q2 = heap.new_reference_queue();
    let a = node(&mut m, ty, 1);
    let b = node(&mut m, ty, 2);
    let c = node(&mut m, ty, 3);
    q1.register(a, 1);
    q2.register(b, 2);
    q2.register(c, 3);
    // The first queue goes with its registration; a new queue takes its slot.
    drop(q1);
    let q3 = heap.new_reference_queue();
    assert_eq!(
        q3.registered(),
        0,
        "the dropped queue's registrations are gone"
    );
    let d = node(&mut m, ty, 4);
    q3.register(d, 4);
    q3.register(a, 5);
    assert_eq!((q2.registered(), q3.registered()), (2, 2));
    let info = collect_info(&mut m, CollectionKind::Full);
    assert_eq!(
        info.tokens_queued, 4,
        "a's first registration ended with q1"
    );
    let mut t2 = q2.drain();
    t2.sort_unstable();
    let mut t3 = q3.drain();
    t3.sort_unstable();
    assert_eq!((t2, t3), (vec![2, 3], vec![4, 5]));
    assert_eq!((q2.registered(), q3.registered()), (0, 0));
}

#[test]
fn queue_notification_runs_after_the_world_resumes_and_draining_works_from_any_thread() {
    let (heap, mut m, ty) = setup();
    let q = Arc::new(heap.new_reference_queue());
    let notified = Arc::new(AtomicUsize::new(0));
    let (n, weak_q, h) = (notified.clone(), Arc::downgrade(&q), heap.clone());
    // A notification may run managed work: here it checks that finalizers can run (they
    // cannot inside a collection) and drains half of the tokens itself.
    q.set_notify(Some(Arc::new(move || {
        n.fetch_add(1, Ordering::SeqCst);
        assert!(h.run_finalizers().is_ok(), "not inside the collection");
        if let Some(q) = weak_q.upgrade() {
            q.poll();
        }
    })));
    for i in 0..10 {
        let o = node(&mut m, ty, i);
        q.register(o, i);
    }
    collect(&mut m, CollectionKind::Partial);
    assert_eq!(notified.load(Ordering::SeqCst), 1);
    assert_eq!(q.len(), 9);
    let q2 = q.clone();
    let drained = std::thread::spawn(move || q2.drain()).join().unwrap();
    assert_eq!(drained.len(), 9);
    collect(&mut m, CollectionKind::Partial);
    assert_eq!(
        notified.load(Ordering::SeqCst),
        1,
        "only when tokens were queued"
    );
    q.set_notify(None);
    drop(q);
    drop(heap);
}

#[test]
fn dropping_a_queue_ends_its_registrations() {
    let (heap, mut m, ty) = setup();
    let q1 = heap.new_reference_queue();
    let q2 = heap.new_reference_queue();
    let o = node(&mut m, ty, 1);
    q1.register(o, 1);
    q2.register(o, 2);
    drop(q2);
    collect(&mut m, CollectionKind::Full);
    assert_eq!(q1.drain(), vec![1]);
}

#[test]
fn the_weak_processing_hook_queries_marks_and_keeps_values_of_live_keys() {
    let (heap, mut m, ty) = setup();
    // An ephemeron table outside the heap: value i is kept alive while key i is. Key
    // i + 1 is value i, so keeping the chain alive takes several rounds of the hook.
    let table: Arc<Mutex<Vec<(ObjRef, ObjRef)>>> = Arc::new(Mutex::new(Vec::new()));
    let first = node(&mut m, ty, 0);
    let r0 = heap.root(first);
    let mut key = first;
    let mut values = Vec::new();
    for i in 1..=5 {
        let v = node(&mut m, ty, i);
        table.lock().push((key, v));
        values.push(v);
        key = v;
    }
    let orphan_key = node(&mut m, ty, 100);
    let orphan_value = node(&mut m, ty, 101);
    table.lock().push((orphan_key, orphan_value));
    // Reverse the table so that one round is not enough.
    table.lock().reverse();
    let rounds = Arc::new(AtomicUsize::new(0));
    let (t, r) = (table.clone(), rounds.clone());
    heap.add_callback(Callback::WeakProcessing(Arc::new(move |mk, _| {
        r.fetch_add(1, Ordering::SeqCst);
        for &(k, v) in t.lock().iter() {
            // SAFETY: the test runs one collection with this hook: every key and value
            // of the table is still allocated while it runs (dead ones are swept after).
            if unsafe { mk.is_marked(k) } {
                // SAFETY: as above.
                unsafe { mk.queue(v) };
            }
        }
    })))
    .unwrap();
    let w_last = heap.new_weak_ref(*values.last().unwrap());
    let w_orphan = heap.new_weak_ref(orphan_value);
    collect(&mut m, CollectionKind::Full);
    assert!(
        rounds.load(Ordering::SeqCst) >= 5,
        "ran until nothing new was marked"
    );
    for (i, v) in values.iter().enumerate() {
        assert!(allocated(*v), "value {i} kept by the hook");
        assert_eq!(id(*v), i + 1);
    }
    assert_eq!(
        w_last.get(),
        values.last().copied(),
        "kept by a hook: not cleared"
    );
    assert_eq!(w_orphan.get(), None);
    assert!(!allocated(orphan_key) && !allocated(orphan_value));
    drop(r0);
    table.lock().retain(|&(k, _)| k != orphan_key);
    collect(&mut m, CollectionKind::Full);
    assert!(values.iter().all(|v| !allocated(*v)));
    assert_eq!(w_last.get(), None);
}

#[test]
fn heap_drop_drops_unrun_finalizers_without_running_them() {
    struct Guard(Arc<AtomicUsize>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let (heap, mut m, ty) = setup();
    let dropped = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let live = node(&mut m, ty, 1);
    let _keep = heap.root(live);
    let dead = node(&mut m, ty, 2);
    for o in [live, dead] {
        let (g, r) = (Guard(dropped.clone()), ran.clone());
        m.add_finalizer(o, move |_, _| {
            let _g = g;
            r.fetch_add(1, Ordering::SeqCst);
        });
    }
    collect(&mut m, CollectionKind::Full);
    assert_eq!(heap.pending_finalizers(), 1);
    drop(_keep);
    drop(m);
    drop(heap);
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "finalizers do not run at heap drop"
    );
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        2,
        "their closures are dropped"
    );
}

#[test]
fn run_all_finalizers_runs_reachable_and_pending_ones_for_shutdown() {
    let (heap, mut m, ty) = setup();
    let ran = Arc::new(AtomicUsize::new(0));
    let live = node(&mut m, ty, 1);
    let _keep = heap.root(live);
    let dead = node(&mut m, ty, 2);
    for o in [live, dead] {
        let r = ran.clone();
        m.add_finalizer(o, move |_, _| {
            r.fetch_add(1, Ordering::SeqCst);
        });
    }
    collect(&mut m, CollectionKind::Full);
    assert_eq!(m.run_all_finalizers(), 2);
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    assert_eq!(heap.registered_finalizers() + heap.pending_finalizers(), 0);
}

#[test]
fn opted_in_threads_run_finalizers_at_their_safepoints() {
    let heap = Heap::default();
    let ty = heap.new_layout_type("Node", NODE, &[0, 8]).unwrap();
    let ran_on = Arc::new(Mutex::new(Vec::new()));
    let barrier = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let (h, b, d) = (heap.clone(), barrier.clone(), done.clone());
    let other = std::thread::spawn(move || {
        let mut m = h.attach().unwrap();
        m.set_finalizers_at_safepoints(true);
        b.wait();
        while !d.load(Ordering::SeqCst) {
            m.safepoint();
            std::hint::spin_loop();
        }
        std::thread::current().id()
    });
    let mut m = heap.attach().unwrap();
    barrier.wait();
    // The collecting thread has not opted in: the other thread, stopped at a safepoint
    // for this collection, runs the finalizer when it resumes.
    let x = node(&mut m, ty, 1);
    let r = ran_on.clone();
    m.add_finalizer(x, move |_, _| r.lock().push(std::thread::current().id()));
    collect(&mut m, CollectionKind::Full);
    let t0 = std::time::Instant::now();
    while ran_on.lock().is_empty() {
        assert!(
            t0.elapsed().as_secs() < 20,
            "the opted-in thread never ran it"
        );
        m.gc_safe(|| std::thread::sleep(std::time::Duration::from_millis(1)));
    }
    done.store(true, Ordering::SeqCst);
    let other_id = m.gc_safe(|| other.join().unwrap());
    assert_eq!(*ran_on.lock(), vec![other_id]);
    // Now this thread opts in: it runs them right after the collection it runs.
    m.set_finalizers_at_safepoints(true);
    let y = node(&mut m, ty, 2);
    let r = ran_on.clone();
    m.add_finalizer(y, move |_, _| r.lock().push(std::thread::current().id()));
    collect(&mut m, CollectionKind::Full);
    assert_eq!(ran_on.lock().len(), 2);
    assert_eq!(ran_on.lock()[1], std::thread::current().id());
}

#[test]
fn run_finalizers_from_an_unattached_thread_attaches_it_for_the_duration() {
    let (heap, mut m, ty) = setup();
    let x = node(&mut m, ty, 3);
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    m.add_finalizer(x, move |m, obj| {
        // Allocating in a finalizer works: the thread is attached.
        let o = m.alloc_typed(NODE, obj_type(m, obj)).unwrap();
        assert_ne!(o, obj);
        s.store(id(obj), Ordering::SeqCst);
    });
    collect(&mut m, CollectionKind::Full);
    let h = heap.clone();
    let n = m.gc_safe(|| {
        std::thread::spawn(move || h.run_finalizers().unwrap())
            .join()
            .unwrap()
    });
    assert_eq!(n, 1);
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    // A thread attached to another heap is refused.
    let other = Heap::default();
    let h = heap.clone();
    let e = std::thread::spawn(move || {
        let _m = other.attach().unwrap();
        h.run_finalizers().unwrap_err()
    })
    .join()
    .unwrap();
    assert_eq!(e, GcError::AttachedElsewhere);
}

fn obj_type(m: &Mutator, obj: ObjRef) -> TypeRef {
    // SAFETY: obj is alive (its finalizer is running).
    unsafe { m.heap().type_of(obj) }
}

trait TypeOfChecked {
    fn type_of_checked(&self, obj: ObjRef) -> TypeRef;
}

impl TypeOfChecked for Heap {
    fn type_of_checked(&self, obj: ObjRef) -> TypeRef {
        // SAFETY: tests pass live objects.
        unsafe { self.type_of(obj) }
    }
}

#[test]
fn finalize_inside_a_finalizer_runs_right_after_it() {
    let (heap, mut m, ty) = setup();
    let x = node(&mut m, ty, 1);
    let rx = heap.root(x);
    let y = node(&mut m, ty, 2);
    // SAFETY: live objects.
    unsafe { m.store_ref(x, 0, Some(y)) };
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    m.add_finalizer(y, move |_, obj| l.lock().push(id(obj)));
    let l = log.clone();
    m.add_finalizer(x, move |m, obj| {
        // SAFETY: alive while its finalizer runs.
        let y = unsafe { m.load_ref(obj, 0) }.unwrap();
        assert_eq!(m.run_finalizers(), 0);
        assert_eq!(m.finalize(y), 0);
        l.lock().push(id(obj));
    });
    assert_eq!(m.finalize(rx.get()), 2);
    assert_eq!(*log.lock(), vec![1, 2]);
    assert_eq!(heap.pending_finalizers(), 0);
}

/// The rule for collections a finalizer starts: an object whose finalizer is running
/// stays alive, with everything it reaches, until the finalizer returns, whatever
/// collections (partial or full) and allocations the finalizer makes, however the
/// finalizer was started (`run_finalizers`, `finalize`, a safepoint of a thread that
/// opted in), for an object that was young or old when it died; the finalizer may
/// resurrect it at the end. Its finalizer does not run again; after the root goes, the
/// object is freed.
#[test]
fn an_object_stays_alive_while_its_finalizer_runs_collections() {
    #[derive(Clone, Copy, Debug)]
    enum Start {
        RunFinalizers,
        Finalize,
        Safepoint,
    }
    for start in [Start::RunFinalizers, Start::Finalize, Start::Safepoint] {
        for old in [false, true] {
            let (heap, mut m, ty) = setup();
            let x = node(&mut m, ty, 7);
            let child = node(&mut m, ty, 8);
            // SAFETY: live objects.
            unsafe { m.store_ref(x, 0, Some(child)) };
            let rx = heap.root(x);
            if old {
                collect(&mut m, CollectionKind::Full);
                collect(&mut m, CollectionKind::Full);
            }
            let kept: Arc<Mutex<Option<Root>>> = Arc::new(Mutex::new(None));
            let runs = Arc::new(AtomicUsize::new(0));
            let (k, r) = (kept.clone(), runs.clone());
            m.add_finalizer(x, move |m, obj| {
                r.fetch_add(1, Ordering::SeqCst);
                for kind in [
                    CollectionKind::Partial,
                    CollectionKind::Full,
                    CollectionKind::Partial,
                ] {
                    for i in 0..200 {
                        node(m, ty, 1000 + i);
                    }
                    collect(m, kind);
                    assert!(allocated(obj), "{start:?} old={old}: freed by a {kind:?}");
                    m.heap().check_object(obj, "finalizer").unwrap();
                    // SAFETY: alive while its finalizer runs (what this test checks).
                    let c = unsafe { m.load_ref(obj, 0) }.unwrap();
                    assert!(allocated(c) && id(c) == 8, "{start:?} old={old}: child");
                }
                *k.lock() = Some(m.heap().root(obj));
            });
            drop(rx);
            match start {
                Start::RunFinalizers => {
                    collect(&mut m, CollectionKind::Full);
                    assert_eq!(m.run_finalizers(), 1);
                }
                Start::Finalize => assert_eq!(m.finalize(x), 1),
                Start::Safepoint => {
                    m.set_finalizers_at_safepoints(true);
                    collect(&mut m, CollectionKind::Full);
                    m.set_finalizers_at_safepoints(false);
                }
            }
            assert_eq!(runs.load(Ordering::SeqCst), 1, "{start:?} old={old}");
            let root = kept.lock().take().expect("resurrected");
            assert_eq!(id(root.get()), 7);
            collect(&mut m, CollectionKind::Full);
            assert!(allocated(x) && allocated(child), "kept by the root");
            drop(root);
            collect(&mut m, CollectionKind::Full);
            collect(&mut m, CollectionKind::Full);
            assert!(!allocated(x), "{start:?} old={old}: freed once unreachable");
            assert_eq!(m.run_finalizers(), 0);
            assert_eq!(runs.load(Ordering::SeqCst), 1, "it ran once");
            no_verify_errors(&heap);
        }
    }
}
