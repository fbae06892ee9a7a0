//! Several mutator threads allocate, publish immutable lists into a shared table under a
//! lock (waiting for the lock inside a GC-safe region), verify lists published by the
//! others, sleep in GC-safe regions, trigger collections of every kind, and attach and
//! detach. Nothing may be lost and the run must end (a watchdog aborts after a bound).

use gc_core::{CollectionKind, Heap, HeapConfig, Mutator, ObjRef, Root, TypeRef};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TABLE_SLOTS: usize = 256;

/// List node: [next, value]; the head also carries [len, sum] in a second node kind.
struct Types {
    node: TypeRef,
    head: TypeRef,
    table: TypeRef,
}

fn make_list(m: &mut Mutator, t: &Types, seed: u64, len: usize) -> ObjRef {
    let heap = m.heap().clone();
    let head = m.alloc_typed(32, t.head).unwrap();
    let root = heap.root(head);
    let mut sum = 0u64;
    for i in 0..len {
        let v = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(i as u64);
        sum = sum.wrapping_add(v);
        let n = m.alloc_typed(16, t.node).unwrap();
        let h = root.get();
        // SAFETY: live objects; node = [next, value], head = [first, len, sum, _].
        unsafe {
            n.write_slot(8, v as usize);
            let first = m.load_ref(h, 0);
            m.store_ref(n, 0, first);
            m.store_ref(h, 0, Some(n));
        }
    }
    let h = root.get();
    // SAFETY: live head object.
    unsafe {
        h.write_slot(8, len);
        h.write_slot(16, sum as usize);
    }
    h
}

fn check_list(m: &Mutator, h: ObjRef) -> usize {
    // SAFETY: reachable lists are alive; layout as in make_list.
    unsafe {
        let len = h.read_slot(8);
        let sum = h.read_slot(16) as u64;
        let mut n = m.load_ref(h, 0);
        let mut count = 0;
        let mut s = 0u64;
        while let Some(node) = n {
            s = s.wrapping_add(node.read_slot(8) as u64);
            count += 1;
            n = m.load_ref(node, 0);
        }
        assert_eq!(count, len, "list {h:?} lost nodes");
        assert_eq!(s, sum, "list {h:?} corrupted");
        len
    }
}

/// Aborts the process if `done` is not set within 120 s (a deadlock would hang the test).
fn watchdog(done: Arc<AtomicBool>, what: &'static str) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let start = Instant::now();
        while !done.load(Ordering::SeqCst) {
            if start.elapsed() > Duration::from_secs(120) {
                eprintln!("watchdog: {what} did not finish within 120 s (deadlock?)");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

#[test]
fn threads_allocate_share_and_collect_without_loss_or_deadlock() {
    let heap = Heap::new(HeapConfig {
        min_interval: 128 << 10,
        max_interval: 512 << 10,
        ..HeapConfig::default()
    })
    .unwrap();
    let types = Arc::new(Types {
        node: heap.new_layout_type("Node", 16, &[0]).unwrap(),
        head: heap.new_layout_type("Head", 32, &[0]).unwrap(),
        table: heap
            .new_layout_type(
                "Table",
                8 * TABLE_SLOTS,
                &(0..TABLE_SLOTS as u32).map(|i| i * 8).collect::<Vec<_>>(),
            )
            .unwrap(),
    });
    let table_root = {
        let mut m = heap.attach().unwrap();
        let t = m.alloc_typed(8 * TABLE_SLOTS, types.table).unwrap();
        heap.root(t)
    };
    let table = table_root.get();
    let table_lock = Arc::new(Mutex::new(()));
    let done = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));

    let watchdog = watchdog(done.clone(), "threads");

    let threads: Vec<_> = (0..4u64)
        .map(|tid| {
            let heap = heap.clone();
            let types = types.clone();
            let lock = table_lock.clone();
            let checked = checked.clone();
            std::thread::spawn(move || {
                // Each thread attaches and detaches a few times.
                for round in 0..3u64 {
                    let mut m = heap.attach().unwrap();
                    let mut rng = tid * 1000 + round + 1;
                    for it in 0..1500u64 {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let len = 1 + (rng % 400) as usize;
                        let list = make_list(&mut m, &types, rng, len);
                        let mine = heap.root(list);
                        // Publish into the shared table; wait for the lock GC-safe.
                        let slot = (rng >> 8) as usize % TABLE_SLOTS;
                        let other = (rng >> 20) as usize % TABLE_SLOTS;
                        let guard = m.gc_safe(|| lock.lock());
                        // SAFETY: the table is rooted; `list` is rooted.
                        unsafe { m.store_ref(table, slot * 8, Some(mine.get())) };
                        // SAFETY: the table is rooted.
                        let theirs = unsafe { m.load_ref(table, other * 8) };
                        drop(guard);
                        if let Some(l) = theirs {
                            // Others may replace the slot (and the list become garbage)
                            // after we read it: root it before anything can collect.
                            let r = heap.root(l);
                            check_list(&m, r.get());
                            checked.fetch_add(1, Ordering::Relaxed);
                        }
                        check_list(&m, mine.get());
                        match it % 37 {
                            0 => drop(m.collect(CollectionKind::Full).unwrap()),
                            11 => drop(m.collect(CollectionKind::Partial).unwrap()),
                            23 => m.gc_safe(|| std::thread::sleep(Duration::from_micros(200))),
                            _ => m.safepoint(),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("mutator thread panicked");
    }
    done.store(true, Ordering::SeqCst);
    watchdog.join().unwrap();

    let mut m = heap.attach().unwrap();
    m.collect(CollectionKind::Full).unwrap();
    let mut lists = 0;
    for slot in 0..TABLE_SLOTS {
        // SAFETY: rooted table.
        if let Some(l) = unsafe { m.load_ref(table, slot * 8) } {
            check_list(&m, l);
            lists += 1;
        }
    }
    assert!(lists > TABLE_SLOTS / 2, "only {lists} lists published");
    assert!(checked.load(Ordering::Relaxed) > 100);
    let s = heap.stats();
    assert!(s.full_collections > 0 && s.partial_collections > 0, "{s:?}");
    drop(table_root);
}

/// Mutators allocate objects with finalizers, queue registrations and weak handles while
/// other threads run the finalizers (an attached finalizer thread, and a mutator that
/// opted in to running them at its safepoints) and drain the reference queue (a thread
/// attached to no heap). Every finalizer runs exactly once, while its object is intact
/// and before its token is queued; every token is drained exactly once; a weak handle to
/// a rooted object is never cleared.
#[test]
fn finalizers_and_queue_draining_on_other_threads_while_mutators_allocate() {
    const THREADS: u64 = 3;
    const PER_THREAD: usize = 10_000;
    const TOTAL: usize = THREADS as usize * PER_THREAD;
    let heap = Heap::new(HeapConfig {
        min_interval: 128 << 10,
        max_interval: 512 << 10,
        ..HeapConfig::default()
    })
    .unwrap();
    let node = heap.new_layout_type("Obj", 24, &[0]).unwrap();
    let queue = Arc::new(heap.new_reference_queue());
    let ran: Arc<Vec<AtomicU64>> = Arc::new((0..TOTAL).map(|_| AtomicU64::new(0)).collect());
    let drained: Arc<Vec<AtomicU64>> = Arc::new((0..TOTAL).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let fin_threads = Arc::new(Mutex::new(std::collections::HashSet::new()));

    let watchdog = watchdog(done.clone(), "finalizer/queue threads");
    let drainer = {
        let (q, drained, done) = (queue.clone(), drained.clone(), done.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !done.load(Ordering::SeqCst) {
                if q.is_empty() {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                for t in q.drain() {
                    assert_eq!(
                        drained[t].fetch_add(1, Ordering::SeqCst),
                        0,
                        "token {t} twice"
                    );
                    n += 1;
                }
            }
            n
        })
    };
    let finalizer_thread = {
        let (heap, done) = (heap.clone(), done.clone());
        std::thread::spawn(move || {
            let mut m = heap.attach().unwrap();
            let mut n = 0;
            while !done.load(Ordering::SeqCst) {
                n += m.run_finalizers();
                m.gc_safe(|| std::thread::sleep(Duration::from_micros(300)));
            }
            n
        })
    };
    let mutators: Vec<_> = (0..THREADS)
        .map(|tid| {
            let (heap, q, ran, drained, fin_threads) = (
                heap.clone(),
                queue.clone(),
                ran.clone(),
                drained.clone(),
                fin_threads.clone(),
            );
            std::thread::spawn(move || {
                let mut m = heap.attach().unwrap();
                m.set_finalizers_at_safepoints(tid == 0);
                let mut window: std::collections::VecDeque<(Root, gc_core::WeakRef)> =
                    Default::default();
                for i in 0..PER_THREAD {
                    let id = tid as usize * PER_THREAD + i;
                    let o = m.alloc_typed(24, node).unwrap();
                    // SAFETY: a fresh object: [ref, id, id ^ magic].
                    unsafe {
                        o.write_slot(8, id);
                        o.write_slot(16, id ^ 0x5A5A);
                    }
                    let (ran, drained, fin_threads) =
                        (ran.clone(), drained.clone(), fin_threads.clone());
                    m.add_finalizer(o, move |_, obj| {
                        // SAFETY: the object is alive while its finalizer runs.
                        let (a, b) = unsafe { (obj.read_slot(8), obj.read_slot(16)) };
                        assert_eq!((a, b), (id, id ^ 0x5A5A), "object intact");
                        assert_eq!(
                            drained[id].load(Ordering::SeqCst),
                            0,
                            "token before finalizer"
                        );
                        assert_eq!(ran[id].fetch_add(1, Ordering::SeqCst), 0, "finalizer twice");
                        fin_threads.lock().insert(std::thread::current().id());
                    });
                    q.register(o, id);
                    let w = heap.new_weak_ref(o);
                    window.push_back((heap.root(o), w));
                    if window.len() > 64 {
                        window.pop_front();
                    }
                    if i % 97 == 0 {
                        for (r, w) in &window {
                            assert_eq!(
                                w.get(),
                                Some(r.get()),
                                "a rooted object's weak handle was cleared"
                            );
                        }
                    }
                    match i % 500 {
                        0 => drop(m.collect(CollectionKind::Full).unwrap()),
                        250 => drop(m.collect(CollectionKind::Partial).unwrap()),
                        _ => m.safepoint(),
                    }
                }
            })
        })
        .collect();
    for t in mutators {
        t.join().expect("mutator thread panicked");
    }
    // Some finalizers ran and some tokens were drained while the mutators allocated.
    let ran_meanwhile = heap.stats().finalizers_run;
    let drained_meanwhile = drained
        .iter()
        .filter(|d| d.load(Ordering::SeqCst) > 0)
        .count();
    assert!(
        ran_meanwhile > 0 && drained_meanwhile > 0,
        "nothing ran concurrently: {ran_meanwhile} finalizers, {drained_meanwhile} tokens"
    );
    // Everything is garbage now: collect, run what is left, collect again.
    let mut m = heap.attach().unwrap();
    for _ in 0..3 {
        m.collect(CollectionKind::Full).unwrap();
        m.run_finalizers();
    }
    m.collect(CollectionKind::Full).unwrap();
    let t0 = Instant::now();
    while !queue.is_empty() && t0.elapsed() < Duration::from_secs(30) {
        m.gc_safe(|| std::thread::sleep(Duration::from_millis(1)));
    }
    done.store(true, Ordering::SeqCst);
    let by_thread = m.gc_safe(|| finalizer_thread.join().expect("finalizer thread panicked"));
    let drained_n = drainer.join().expect("drain thread panicked");
    watchdog.join().unwrap();
    for id in 0..TOTAL {
        assert_eq!(ran[id].load(Ordering::SeqCst), 1, "finalizer of {id}");
        assert_eq!(drained[id].load(Ordering::SeqCst), 1, "token of {id}");
    }
    assert_eq!(drained_n, TOTAL);
    assert!(by_thread > 0, "the finalizer thread ran none");
    assert!(
        fin_threads.lock().len() >= 2,
        "finalizers ran on one thread only"
    );
    let s = heap.stats();
    assert_eq!(s.finalizers_run, TOTAL as u64);
    assert_eq!(s.tokens_queued, TOTAL as u64);
    assert!(s.full_collections > 0 && s.partial_collections > 0, "{s:?}");
}

/// The split-phase GC-safe region: while `enter_gc_safe`'s guard lives, another thread
/// collects without waiting for this one; dropping it leaves. The objects the frame
/// holds survive (conservative roots aside, they are rooted here).
#[test]
fn a_gc_safe_guard_lets_others_collect_until_dropped() {
    use gc_core::{CollectionKind, Heap, HeapConfig, SafeState};
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let ty = heap.new_layout_type("Blob", 16, &[]).unwrap();
    let mut m = heap.attach().unwrap();
    let kept = heap.root(m.alloc_typed(16, ty).unwrap());
    let region = m.enter_gc_safe();
    let h = heap.clone();
    let collections = std::thread::spawn(move || {
        let mut other = h.attach().unwrap();
        for _ in 0..3 {
            other.collect(CollectionKind::Full).unwrap();
        }
        h.stats().full_collections
    })
    .join()
    .unwrap();
    assert!(collections >= 3, "collected while this thread was GC-safe");
    drop(region);
    // Running again: allocation and collection work, the rooted object survived.
    m.alloc_typed(16, ty).unwrap();
    m.collect(CollectionKind::Full).unwrap();
    assert!(gc_core::is_object(&heap, kept.get().addr()));
    assert_eq!(SafeState::from_raw(0), Some(SafeState::Running));
    assert_eq!(SafeState::from_raw(7), None);
}

/// A guard that is forgotten (`mem::forget` is safe) leaves the thread in its region:
/// the mutator may then not allocate (the fast path, which does not look at the
/// thread's state, used to hand out cells while collections ran) nor collect; both are
/// `InGcSafeRegion` errors.
#[test]
fn a_forgotten_gc_safe_guard_refuses_allocation() {
    use gc_core::{CollectionKind, GcError, Heap, HeapConfig};
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let ty = heap.new_layout_type("Blob", 16, &[]).unwrap();
    let mut m = heap.attach().unwrap();
    // A page with free cells: the fast path would serve the next allocation.
    m.alloc_typed(16, ty).unwrap();
    std::mem::forget(m.enter_gc_safe());
    assert_eq!(m.alloc_typed(16, ty), Err(GcError::InGcSafeRegion));
    assert_eq!(m.alloc_typed(5000, ty), Err(GcError::InGcSafeRegion));
    assert_eq!(
        m.collect(CollectionKind::Full).unwrap_err(),
        GcError::InGcSafeRegion
    );
    assert_eq!(heap.current_mutator().err(), Some(GcError::InGcSafeRegion));
    // Others still collect (the thread counts as stopped), and it detaches cleanly.
    let h = heap.clone();
    std::thread::spawn(move || {
        h.attach().unwrap().collect(CollectionKind::Full).unwrap();
    })
    .join()
    .unwrap();
    drop(m);
}
