//! Task scanners at the roots (`TaskScan::AtRoots`, the seed's way) and as mark work on
//! every collector thread (`TaskScan::WhileMarking`, Julia 1.10's, which the
//! Julia-compatibility prefix gives a 1.10 client); the verify mode with several
//! collector threads.

use gc_core::{
    Callback, CollectionKind, ForeignTypeSpec, Heap, HeapConfig, MarkProc, Marker, ObjRef,
    SweepProc, Task, TaskScan,
};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TASKS: usize = 6;
const LIST: usize = 20_000;

/// What the task scanner saw.
#[derive(Default)]
struct Seen {
    threads: Mutex<HashSet<std::thread::ThreadId>>,
    calls: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// Runs collections with `TASKS` coroutine tasks, each of which alone holds a list of
/// `LIST` objects (its scanner queues it), under `task_scan`, until two scanners were
/// seen at once or the time is up; returns what was seen, checks the lists.
fn scan_tasks(task_scan: TaskScan, mark_threads: usize, want_parallel: bool) -> Arc<Seen> {
    let heap = Heap::new(HeapConfig {
        mark_threads,
        parallel_threshold: 0,
        task_scan,
        min_interval: 1 << 30,
        max_interval: 1 << 30,
        ..HeapConfig::default()
    })
    .unwrap();
    let mut m = heap.attach().unwrap();
    let node = heap.new_layout_type("Node", 16, &[0]).unwrap();
    let stacks: Vec<Vec<u8>> = (0..TASKS).map(|_| vec![0u8; 16 << 10]).collect();
    let mut tasks: Vec<Arc<Task>> = Vec::new();
    let mut heads: Vec<ObjRef> = Vec::new();
    for s in &stacks {
        let lo = s.as_ptr() as usize;
        // SAFETY: the buffer stays alive (and readable) until the end of the test.
        let t = unsafe { heap.register_task(lo, lo + s.len()) }.unwrap();
        let head = m.alloc_typed(16, node).unwrap();
        let root = heap.root(head);
        let mut cur = head;
        for i in 1..LIST {
            let next = m.alloc_typed(16, node).unwrap();
            // SAFETY: live Nodes; the list is reachable from the root while it grows.
            unsafe {
                m.store_ref(cur, 0, Some(next));
                next.write_slot(8, i);
            }
            cur = next;
        }
        drop(root);
        t.set_user_data(head.as_ptr().cast());
        tasks.push(t);
        heads.push(head);
    }
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    heap.add_callback(Callback::TaskScanner(Arc::new(
        move |mk: &mut Marker<'_>, task: &Task, _| {
            let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            s.max_in_flight.fetch_max(now, Ordering::SeqCst);
            s.calls.fetch_add(1, Ordering::SeqCst);
            s.threads
                .lock()
                .unwrap()
                .insert(std::thread::current().id());
            if let Some(head) = ObjRef::from_ptr(task.user_data().cast()) {
                // SAFETY: a list head this test keeps alive through this scanner.
                unsafe { mk.queue(head) };
            }
            // Stay a moment, so that a scanner running at the same time is seen.
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_micros(200) {}
            s.in_flight.fetch_sub(1, Ordering::SeqCst);
        },
    )))
    .unwrap();
    let t0 = Instant::now();
    let mut rounds = 0;
    loop {
        let kind = if rounds % 2 == 0 {
            CollectionKind::Full
        } else {
            CollectionKind::Partial
        };
        m.collect(kind).unwrap();
        rounds += 1;
        let both = seen.max_in_flight.load(Ordering::SeqCst) >= 2;
        if rounds >= 4 && (!want_parallel || both || t0.elapsed() > Duration::from_secs(20)) {
            break;
        }
    }
    // Every registered task and the thread's own, once per collection.
    assert_eq!(seen.calls.load(Ordering::SeqCst), rounds * (TASKS + 1));
    for head in heads {
        let mut n = Some(head);
        for i in 0..LIST {
            let cur = n.expect("the list is whole");
            // SAFETY: kept alive by its task's scanner (checked here).
            unsafe {
                assert_eq!(heap.type_of(cur), node);
                if i > 0 {
                    assert_eq!(cur.read_slot(8), i);
                }
                n = ObjRef::from_addr(cur.read_slot(0));
            }
        }
    }
    drop(tasks);
    drop(stacks);
    seen
}

/// The seed's way: on the collecting thread alone, one at a time, even with helpers.
#[test]
fn task_scanners_at_the_roots_run_on_the_collecting_thread() {
    let seen = scan_tasks(TaskScan::AtRoots, 2, false);
    assert_eq!(seen.threads.lock().unwrap().len(), 1);
    assert_eq!(seen.max_in_flight.load(Ordering::SeqCst), 1);
}

/// Julia's way: tasks are mark work that any collector thread takes; with two threads,
/// two scanners run at once, each with its own thread's marker; what only tasks hold
/// survives.
#[test]
fn task_scanners_while_marking_run_on_several_threads_at_once() {
    let seen = scan_tasks(TaskScan::WhileMarking, 2, true);
    assert_eq!(seen.threads.lock().unwrap().len(), 2);
    assert_eq!(seen.max_in_flight.load(Ordering::SeqCst), 2);
    let one = scan_tasks(TaskScan::WhileMarking, 1, false);
    assert_eq!(one.max_in_flight.load(Ordering::SeqCst), 1);
}

/// A mark function that queues the children in slots 0 and 2 and, when slot 1 is set,
/// an address that is no object (one word into the first child).
fn mark_sloppy(m: &mut Marker<'_>, obj: ObjRef) -> usize {
    let mut young = 0;
    // SAFETY: objects of this type hold references or 0 in slots 0 and 2, a flag in 1.
    let (a, flag, b) = unsafe { (obj.read_slot(0), obj.read_slot(8), obj.read_slot(16)) };
    for child in [a, b] {
        if let Some(c) = ObjRef::from_addr(child) {
            // SAFETY: a reference held by a live object.
            young += unsafe { m.queue(c) } as usize;
        }
    }
    if let (Some(c), true) = (ObjRef::from_addr(a), flag != 0) {
        // SAFETY: not an object: the verify mode validates every queued reference and
        // refuses this one (what the test checks); it is never dereferenced.
        unsafe { m.queue(ObjRef::from_addr(c.addr() + 8).unwrap()) };
    }
    young
}

/// The verify mode marks on every collector thread too: references queued by mark
/// functions on the helper are validated there, and the errors of every thread are
/// reported; marking was parallel.
#[test]
fn verify_mode_validates_on_every_collector_thread() {
    let heap = Heap::new(HeapConfig {
        verify: true,
        mark_threads: 2,
        parallel_threshold: 0,
        min_interval: 1 << 30,
        max_interval: 1 << 30,
        ..HeapConfig::default()
    })
    .unwrap();
    let mut m = heap.attach().unwrap();
    // The first collection starts the helper threads (it marks alone).
    m.collect(CollectionKind::Full).unwrap();
    let sloppy = heap
        .new_foreign_type(ForeignTypeSpec {
            name: "Sloppy",
            mark: MarkProc::Rust(mark_sloppy),
            sweep: SweepProc::None,
            has_pointers: true,
            large: false,
        })
        .unwrap();
    // A complete binary tree of Sloppy objects, built top-down from a root; every
    // 1000th inner node carries a bogus reference.
    const N: usize = 100_000;
    let mut all: Vec<ObjRef> = Vec::with_capacity(N);
    let head = m.alloc_typed(32, sloppy).unwrap();
    let root = heap.root(head);
    all.push(head);
    for i in 1..N {
        let o = m.alloc_typed(32, sloppy).unwrap();
        let slot = if i % 2 == 1 { 0 } else { 16 };
        // SAFETY: live objects of the type (reachable from the root); slots 0 and 2 hold
        // the children.
        unsafe { m.store_ref(all[(i - 1) / 2], slot, Some(o)) };
        all.push(o);
    }
    let mut bogus = 0;
    for i in (0..N / 2).step_by(1000) {
        // SAFETY: a live inner node (it has a first child); slot 1 is the flag.
        unsafe { all[i].write_slot(8, 1) };
        bogus += 1;
    }
    let before = heap.stats().parallel_drains;
    m.collect(CollectionKind::Full).unwrap();
    let errors = heap.verify_errors();
    assert_eq!(
        errors.len(),
        bogus,
        "one error per bogus reference: {errors:?}"
    );
    assert!(errors.iter().all(|e| e.contains("invalid reference")));
    assert!(
        heap.stats().parallel_drains > before,
        "marking was parallel"
    );
    drop(root);
}
