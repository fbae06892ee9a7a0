//! Several mutator threads allocate, publish immutable lists into a shared table under a
//! lock (waiting for the lock inside a GC-safe region), verify lists published by the
//! others, sleep in GC-safe regions, trigger collections of every kind, and attach and
//! detach. Nothing may be lost and the run must end (a watchdog aborts after a bound).

use gc_core::{CollectionKind, Heap, HeapConfig, Mutator, ObjRef, TypeRef};
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

    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !done.load(Ordering::SeqCst) {
                if start.elapsed() > Duration::from_secs(120) {
                    eprintln!("watchdog: threads did not finish within 120 s (deadlock?)");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

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

#[test]
fn gc_safe_enter_sp_records_a_live_frame_and_lets_others_collect() {
    use gc_core::capi::{
        gc_collect, gc_heap_new, gc_safe_enter_sp, gc_safe_leave, gc_thread_attach,
        gc_thread_detach, GC_COLLECT_FULL,
    };
    // SAFETY: NULL config means the defaults.
    let heap = unsafe { gc_heap_new(std::ptr::null()) } as usize;
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let blocked = std::thread::spawn(move || {
        // SAFETY: a live heap.
        let m = unsafe { gc_thread_attach(heap as *mut _) };
        let frame = [0usize; 4];
        let sp = frame.as_ptr() as *mut std::ffi::c_void;
        // SAFETY: m is this thread's mutator; `frame` lives until gc_safe_leave.
        let bad = unsafe { gc_safe_enter_sp(m, 16 as *mut _) };
        assert_eq!(bad, -1, "an address outside the stack is refused");
        // SAFETY: as above.
        let st = unsafe { gc_safe_enter_sp(m, sp) };
        assert_eq!(st, 0);
        tx.send(()).unwrap();
        done_rx.recv().unwrap();
        // SAFETY: leaving the region entered above.
        unsafe { gc_safe_leave(m, st) };
        std::hint::black_box(&frame);
        gc_thread_detach();
    });
    rx.recv().unwrap();
    // SAFETY: a live heap; this thread attaches, collects (the other thread counts as
    // stopped, so this does not wait for it) and detaches.
    unsafe {
        let m = gc_thread_attach(heap as *mut _);
        assert_eq!(gc_collect(m, GC_COLLECT_FULL), 1);
    }
    gc_thread_detach();
    done_tx.send(()).unwrap();
    blocked.join().unwrap();
}
