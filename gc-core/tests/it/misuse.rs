//! Misuse that safe Rust code can commit (found by a user trial): each is a clear panic
//! or abort naming the problem, or is repaired, never memory corruption or a hang.

use gc_core::CollectionKind::Full;
use gc_core::{Callback, ForeignTypeSpec, Heap, HeapConfig, MarkProc, Marker, ObjRef, SweepProc};
use std::process::Command;
use std::sync::Arc;

fn leaf_type(heap: &Heap) -> gc_core::TypeRef {
    heap.new_foreign_type(ForeignTypeSpec {
        name: "Leaf",
        mark: MarkProc::None,
        sweep: SweepProc::None,
        has_pointers: false,
        large: false,
    })
    .unwrap()
}

/// An object of heap A rooted, weakly referenced, finalized or registered in heap B:
/// B's collections would mark (and flip the bits of) A's object, and A would then free
/// what it points to. Refused with a panic naming the call.
#[test]
fn objects_of_another_heap_or_no_object_are_refused() {
    let (a, b) = (
        Heap::new(HeapConfig::default()).unwrap(),
        Heap::new(HeapConfig::default()).unwrap(),
    );
    let ty = leaf_type(&a);
    let mut m = a.attach().unwrap();
    let obj = m.alloc_typed(16, ty).unwrap();
    let refused = |f: &dyn Fn()| {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
        err.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let msg = refused(&|| drop(b.root(obj)));
    assert!(
        msg.contains("Heap::root") && msg.contains("not an allocated object of this heap"),
        "{msg}"
    );
    let msg = refused(&|| drop(b.new_weak_ref(obj)));
    assert!(msg.contains("Heap::new_weak_ref"), "{msg}");
    let q = b.new_reference_queue();
    let msg = refused(&|| q.register(obj, 1));
    assert!(msg.contains("ReferenceQueue::register"), "{msg}");
    // Any address can be an ObjRef: one that is no object at all.
    let bogus = ObjRef::from_addr(0x1000).unwrap();
    let msg = refused(&|| drop(a.root(bogus)));
    assert!(msg.contains("0x1000"), "{msg}");
    let interior = ObjRef::from_addr(obj.addr() + 16).unwrap();
    let msg = refused(&|| drop(a.root(interior)));
    assert!(msg.contains("not an allocated object"), "{msg}");
    // The heap's own object is fine, and both heaps still collect.
    let r = a.root(obj);
    m.collect(Full).unwrap();
    drop(r);
    drop(m);
    let mut mb = b.attach().unwrap();
    mb.collect(Full).unwrap();
}

/// An object a collection found dead is refused while its page waits for the lazy sweep
/// too (rooting it would resurrect an object whose children may be freed already), and
/// the live object next to it is accepted.
#[test]
fn a_dead_object_on_a_page_waiting_for_its_sweep_is_refused() {
    let heap = Heap::new(HeapConfig {
        lazy_sweep: true,
        ..HeapConfig::default()
    })
    .unwrap();
    heap.hold_lazy_sweep(true);
    let ty = leaf_type(&heap);
    let mut m = heap.attach().unwrap();
    let dead = m.alloc_typed(16, ty).unwrap();
    let live = m.alloc_typed(16, ty).unwrap();
    let r = heap.root(live);
    m.collect(Full).unwrap();
    assert!(heap.hold_lazy_sweep(true) > 0, "pages wait for their sweep");
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(heap.root(dead))))
        .unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("not an allocated object"), "{msg}");
    let page = gc_core::page_of(dead.addr()).unwrap();
    assert!(!page.is_allocated(dead.addr()) && page.is_allocated(live.addr()));
    assert!(!gc_core::is_internal_object(heap.id(), dead.addr()));
    drop(heap.new_weak_ref(live));
    heap.complete_sweep().unwrap();
    assert!(!page.is_allocated(dead.addr()) && page.is_allocated(live.addr()));
    drop(r);
}

/// A thread that leaks its Mutator (`mem::forget`, safe) and exits is detached at exit:
/// later collections do not wait for it.
#[test]
fn a_thread_that_leaks_its_mutator_is_detached_when_it_exits() {
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let h = heap.clone();
    std::thread::spawn(move || std::mem::forget(h.attach().unwrap()))
        .join()
        .unwrap();
    assert_eq!(heap.attached_threads(), 0);
    let mut m = heap.attach().unwrap();
    m.collect(Full).unwrap();
}

fn panicking_mark(_: &mut Marker<'_>, _: ObjRef) -> usize {
    panic!("a mark function panicked on purpose")
}

/// Child mode of the test below: a root scanner or a mark function that panics.
fn child(which: &str) {
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let mut m = heap.attach().unwrap();
    match which {
        "mark" => {
            let ty = heap
                .new_foreign_type(ForeignTypeSpec {
                    name: "Panicky",
                    mark: MarkProc::Rust(panicking_mark),
                    sweep: SweepProc::None,
                    has_pointers: true,
                    large: false,
                })
                .unwrap();
            let o = m.alloc_typed(16, ty).unwrap();
            std::mem::forget(heap.root(o));
        }
        _ => {
            heap.add_callback(Callback::RootScanner(Arc::new(|_, _| {
                panic!("a root scanner panicked on purpose")
            })))
            .unwrap();
        }
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.collect(Full)));
    // Not reached: the collection aborts the process.
    println!("collection returned");
}

/// A callback that panics during a collection leaves the heap half marked with the world
/// stopped: the process aborts with a message naming it (every later collection and
/// attach used to wait forever).
#[test]
fn a_panic_inside_a_collection_aborts_with_a_message() {
    if let Ok(which) = std::env::var("GC_CORE_MISUSE_CHILD") {
        child(&which);
        return;
    }
    for which in ["mark", "root"] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "misuse::a_panic_inside_a_collection_aborts_with_a_message",
                "--nocapture",
            ])
            .env("GC_CORE_MISUSE_CHILD", which)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{which}: {stderr}");
        assert!(
            stderr.contains("gc-core: a callback panicked during a collection"),
            "{which}: {stderr}"
        );
        assert!(stderr.contains("on purpose"), "{which}: {stderr}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("collection returned"),
            "{which}"
        );
    }
}

/// `resident_reuse` is validated like the other policy numbers (NaN, negative and
/// infinite values were accepted).
#[test]
fn resident_reuse_out_of_range_is_refused() {
    for bad in [f64::NAN, -1.0, f64::INFINITY] {
        let Err(err) = Heap::new(HeapConfig {
            resident_reuse: bad,
            ..HeapConfig::default()
        }) else {
            panic!("resident_reuse {bad} accepted");
        };
        assert!(err.to_string().contains("resident_reuse"), "{err}");
    }
    assert!(Heap::new(HeapConfig {
        resident_reuse: 0.0,
        ..HeapConfig::default()
    })
    .is_ok());
}

/// `for_each_big_object` runs its closure under no lock of the heap: a closure that
/// allocates a big object finishes (it deadlocked on the big-object lock).
#[test]
fn for_each_big_object_may_allocate_in_its_closure() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let heap = gc_core::Heap::default();
        let mut m = heap.attach().unwrap();
        let blob = heap.new_layout_type("Blob", 8, &[]).unwrap();
        let first = m.alloc_typed(10_000, blob).unwrap();
        let keep = heap.root(first);
        let mut seen = 0;
        heap.for_each_big_object(|_, _| {
            seen += 1;
            m.alloc_typed(20_000, blob).unwrap();
        })
        .unwrap();
        drop(keep);
        tx.send(seen).unwrap();
    });
    let seen = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("for_each_big_object with an allocating closure did not finish");
    assert_eq!(
        seen, 1,
        "only the objects allocated before the call are visited"
    );
}

/// A collection that waits for a thread that never reaches a safepoint (blocked without a
/// GC-safe region, here sleeping as a `join` would) says which thread it waits for,
/// after 10 s, on standard error (it used to hang with no word).
#[test]
fn a_collection_waiting_for_a_blocked_thread_names_it() {
    if std::env::var("GC_CORE_MISUSE_BLOCKED").is_ok() {
        let heap = Heap::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let h2 = heap.clone();
        let blocked = std::thread::Builder::new()
            .name("sleeps-attached".into())
            .spawn(move || {
                let _m = h2.attach().unwrap();
                tx.send(()).unwrap();
                // Blocking while attached, outside any GC-safe region: the misuse.
                std::thread::sleep(std::time::Duration::from_secs(12));
            })
            .unwrap();
        rx.recv().unwrap();
        let mut m = heap.attach().unwrap();
        m.collect(Full).unwrap();
        blocked.join().unwrap();
        println!("collection finished");
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "misuse::a_collection_waiting_for_a_blocked_thread_names_it",
            "--nocapture",
        ])
        .env("GC_CORE_MISUSE_BLOCKED", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("has waited 10 s for thread 'sleeps-attached'"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("collection finished"));
}

/// A `TypeRef` outlives its heap (it is `Copy`): its accessors used to read the freed
/// descriptor (`name()` segfaulted) and, its object's memory recycled for the next heap,
/// it compared equal to that heap's type at the same address, so `alloc_typed` with it
/// succeeded with the wrong layout. Now it names its heap: the accessors panic saying
/// so, it equals no type of another heap, and allocating with it is an error.
#[test]
fn a_type_of_a_dropped_heap_is_refused() {
    let first = Heap::new(HeapConfig::default()).unwrap();
    let stale = first.new_layout_type("Pair", 16, &[0, 8]).unwrap();
    let stale_id = first.id();
    assert_eq!(stale.heap_id(), stale_id);
    assert_eq!(stale.name(), "Pair");
    drop(first);

    let panics = |f: &dyn Fn()| {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
        err.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let msg = panics(&|| drop(stale.name()));
    assert!(
        msg.contains("used after its heap") && msg.contains(&stale_id.to_string()),
        "{msg}"
    );
    for f in [
        &(|| {
            let _ = stale.kind();
        }) as &dyn Fn(),
        &|| {
            let _ = stale.has_pointers();
        },
        &|| {
            let _ = stale.is_large();
        },
        &|| drop(stale.ref_offsets()),
    ] {
        assert!(panics(f).contains("used after its heap"));
    }
    // Debug output never panics.
    assert!(format!("{stale:?}").contains("dropped heap"), "{stale:?}");

    // The next heap reuses the recycled pages: its types may sit at the same address.
    let second = Heap::new(HeapConfig::default()).unwrap();
    assert_ne!(second.id(), stale_id, "heap ids are never reused");
    let leaf = second.new_layout_type("Leaf", 64, &[]).unwrap();
    let fresh = second.new_layout_type("Pair", 16, &[0, 8]).unwrap();
    for t in [leaf, fresh, second.datatype(), second.weak_ref_type()] {
        assert_ne!(t, stale, "a stale type equals no type of another heap");
    }
    let mut m = second.attach().unwrap();
    let err = m.alloc_typed(16, stale).unwrap_err();
    assert!(
        matches!(err, gc_core::GcError::NotAType { addr } if addr == stale.as_obj().addr()),
        "{err}"
    );
    // Big sizes take the slow path: refused there too.
    assert!(m.alloc_typed(4096, stale).is_err());
    assert!(!second
        .type_from_addr(stale.as_obj().addr())
        .is_ok_and(|t| t == stale));
    // The heap's own types keep working.
    let obj = m.alloc_typed(16, fresh).unwrap();
    m.collect(Full).unwrap();
    // SAFETY: `obj` was just allocated by this heap; its type is read while it is live.
    assert_eq!(unsafe { second.type_of(obj) }.heap_id(), second.id());
}

/// A stale `ObjRef` (of a dropped heap, or a freed big object of this heap) is refused by
/// `root()` unless its address holds an allocated object of the heap right now (then it
/// is that object, which the check cannot tell from the one meant: an `ObjRef` is an
/// address). A freed big object's bookkeeping header still held its magic and heap id,
/// so rooting its stale address passed and the next collection read freed memory.
#[test]
fn stale_object_references_are_refused_by_root() {
    let first = Heap::new(HeapConfig::default()).unwrap();
    let ty = first.new_layout_type("Blob", 16, &[]).unwrap();
    let big_ty = first.new_layout_type("Big", 8192, &[]).unwrap();
    let (small, big) = {
        let mut m = first.attach().unwrap();
        let small = m.alloc_typed(16, ty).unwrap();
        let big = m.alloc_typed(8192, big_ty).unwrap();
        // Dead: the collection frees the big object.
        m.collect(Full).unwrap();
        (small, big)
    };
    let refused = |heap: &Heap, obj: ObjRef| {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(heap.root(obj))))
            .unwrap_err();
        err.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let msg = refused(&first, big);
    assert!(
        msg.contains("not an allocated object of this heap"),
        "{msg}"
    );
    drop(first);
    let second = Heap::new(HeapConfig::default()).unwrap();
    // The second heap allocated nothing yet: the first heap's small object's cell is
    // no object of it.
    let msg = refused(&second, small);
    assert!(
        msg.contains("not an allocated object of this heap"),
        "{msg}"
    );
    let msg = refused(&second, big);
    assert!(
        msg.contains("not an allocated object of this heap"),
        "{msg}"
    );
}

/// `MutatorShared::saved_registers` read the buffer the thread's GC-safe regions write
/// (a data race through a second handle from `current_mutator()` shared with another
/// thread). It now reads the task's copy, atomically: readers on other threads see the
/// registers of some stop of the thread, never a torn or racing read.
#[test]
fn saved_registers_may_be_read_from_another_thread() {
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let mut m = heap.attach().unwrap();
    let second = heap.current_mutator().unwrap();
    let (lo, hi) = m.task().stack_bounds();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let shared = second.shared();
        let reader = s.spawn(|| {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads == 0 {
                let sp = shared.saved_registers()[gc_core::SAVED_REGS - 1];
                assert!(sp == 0 || (lo..hi).contains(&sp), "{sp:#x}");
                reads += 1;
            }
            reads
        });
        for _ in 0..20_000 {
            m.gc_safe(|| std::hint::black_box(0));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    });
    let sp = m.shared().saved_registers()[gc_core::SAVED_REGS - 1];
    assert!(
        (lo..hi).contains(&sp),
        "the last region's stack pointer: {sp:#x}"
    );
}

/// `Root::set` checks its object as `Heap::root` does: a root naming no object (or an
/// object of another heap) would be marked by every collection (a SIGSEGV in the marker
/// before the check). The root keeps its old object.
#[test]
fn root_set_refuses_what_heap_root_refuses() {
    let (a, b) = (
        Heap::new(HeapConfig::default()).unwrap(),
        Heap::new(HeapConfig::default()).unwrap(),
    );
    let (ta, tb) = (leaf_type(&a), leaf_type(&b));
    let mut m = a.attach().unwrap();
    let obj = m.alloc_typed(16, ta).unwrap();
    let root = a.root(obj);
    let refused = |f: &dyn Fn()| {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
        err.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let msg = refused(&|| root.set(ObjRef::from_addr(0x1000).unwrap()));
    assert!(
        msg.contains("Root::set")
            && msg.contains("0x1000")
            && msg.contains("not an allocated object"),
        "{msg}"
    );
    let interior = ObjRef::from_addr(obj.addr() + 16).unwrap();
    let msg = refused(&|| root.set(interior));
    assert!(msg.contains("Root::set"), "{msg}");
    // An object of heap B, made (and rooted there) by a thread attached to B.
    let (other, _keep) = std::thread::scope(|s| {
        s.spawn(|| {
            let mut mb = b.attach().unwrap();
            let o = mb.alloc_typed(16, tb).unwrap();
            (o, b.root(o))
        })
        .join()
        .unwrap()
    });
    let msg = refused(&|| root.set(other));
    assert!(
        msg.contains("not an allocated object of this heap"),
        "{msg}"
    );
    assert_eq!(root.get(), obj, "a refused set leaves the root as it was");
    m.collect(Full).unwrap();
    m.collect(Full).unwrap();
    let obj2 = m.alloc_typed(16, ta).unwrap();
    root.set(obj2);
    assert_eq!(root.get(), obj2);
    m.collect(Full).unwrap();
    assert!(
        a.check_object(obj2, "test").is_ok(),
        "the new object is kept"
    );
}

/// Callbacks that call back into the heap (found looking for re-entrant calls from
/// callbacks): a pre-GC callback registering and removing callbacks and making a queue, a
/// root scanner making and dropping roots, a weak-processing hook making a weak handle,
/// and an external-free notification looking its object up. Each works or is refused
/// with an error (allocating or running finalizers during a collection); nothing
/// deadlocks, and the objects involved are kept or freed as the rules say.
#[test]
fn callbacks_may_call_back_into_the_heap() {
    use gc_core::CollectionKind;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let heap = Heap::default();
    let ty = leaf_type(&heap);
    let big_ty = heap
        .new_foreign_type(ForeignTypeSpec {
            name: "Big",
            mark: MarkProc::None,
            sweep: SweepProc::None,
            has_pointers: false,
            large: true,
        })
        .unwrap();
    let mut m = heap.attach().unwrap();
    let kept = m.alloc_typed(16, ty).unwrap();
    let kept_addr = kept.addr();
    let calls = Arc::new(AtomicUsize::new(0));
    let (h, c) = (heap.clone(), calls.clone());
    let pre = heap
        .add_callback(Callback::PreGc(Arc::new(move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            let id = h.add_callback(Callback::PostGc(Arc::new(|_| ()))).unwrap();
            h.remove_callback(id).unwrap();
            drop(h.new_reference_queue());
            assert!(matches!(
                h.run_finalizers(),
                Err(gc_core::GcError::DuringCollection { .. })
            ));
            assert!(
                h.current_mutator().is_err(),
                "no allocation during a collection"
            );
            // Both would wait for the collection this thread runs (a user trial
            // found them hanging): refused instead.
            assert!(matches!(
                h.new_layout_type("MadeInCallback", 16, &[]),
                Err(gc_core::GcError::DuringCollection { .. })
            ));
            assert!(matches!(
                h.complete_sweep(),
                Err(gc_core::GcError::DuringCollection { .. })
            ));
        })))
        .unwrap();
    // Registering an object during a collection (a root, a weak handle, ...) is
    // refused: the collection under way would not see it.
    let refused = |h: &Heap, obj: ObjRef| {
        matches!(
            h.check_object(obj, "registering"),
            Err(gc_core::GcError::DuringCollection { .. })
        )
    };
    let h = heap.clone();
    let scanner = heap
        .add_callback(Callback::RootScanner(Arc::new(move |mk, _| {
            let obj = ObjRef::from_addr(kept_addr).unwrap();
            assert!(refused(&h, obj), "a root made while roots are marked");
            // SAFETY: a live object of this heap (kept alive by this scanner).
            unsafe { mk.queue(obj) };
        })))
        .unwrap();
    let hook_ran = Arc::new(AtomicUsize::new(0));
    let (h, w) = (heap.clone(), hook_ran.clone());
    let hook = heap
        .add_callback(Callback::WeakProcessing(Arc::new(move |mk, _| {
            let obj = ObjRef::from_addr(kept_addr).unwrap();
            // SAFETY: an allocated object of this heap (the root scanner keeps it).
            assert!(unsafe { mk.is_marked(obj) });
            assert!(
                refused(&h, obj),
                "a weak handle made while weak references are processed"
            );
            w.fetch_add(1, Ordering::SeqCst);
        })))
        .unwrap();
    let freed_seen = Arc::new(AtomicUsize::new(0));
    let (h, f) = (heap.clone(), freed_seen.clone());
    let free_cb = heap
        .add_callback(Callback::ExternalFree(Arc::new(move |obj| {
            // The dying big object cannot be taken back (`Heap::root` would panic).
            assert!(refused(&h, obj));
            f.fetch_add(1, Ordering::SeqCst);
        })))
        .unwrap();
    m.alloc_typed(100_000, big_ty).unwrap();
    m.collect(CollectionKind::Full).unwrap();
    m.collect(CollectionKind::Partial).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        freed_seen.load(Ordering::SeqCst),
        1,
        "the big object was freed"
    );
    assert_eq!(hook_ran.load(Ordering::SeqCst), 2);
    // Outside the collection the same calls work: the root scanner kept the object.
    let weak = heap.new_weak_ref(kept);
    for id in [pre, scanner, hook, free_cb] {
        heap.remove_callback(id).unwrap();
    }
    m.collect(CollectionKind::Full).unwrap();
    assert_eq!(weak.get(), None, "unreachable once the scanner is gone");
}

/// A sweep function is given its dying object: taking it back (a root through a heap
/// the function reaches, here a static) is refused, not a root to freed memory.
#[test]
fn a_sweep_function_cannot_take_its_object_back() {
    static HEAP: std::sync::OnceLock<Heap> = std::sync::OnceLock::new();
    static SEEN: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    fn sweep(obj: ObjRef) {
        let r = HEAP.get().unwrap().check_object(obj, "Heap::root");
        *SEEN.lock().unwrap() = Some(format!("{r:?}"));
    }
    let heap = HEAP.get_or_init(Heap::default);
    let ty = heap
        .new_foreign_type(ForeignTypeSpec {
            name: "Swept",
            mark: MarkProc::None,
            sweep: SweepProc::Rust(sweep),
            has_pointers: false,
            large: false,
        })
        .unwrap();
    let mut m = heap.attach().unwrap();
    let o = m.alloc_typed(16, ty).unwrap();
    // SAFETY: a live object of this heap.
    unsafe { m.schedule_foreign_sweepfunc(o).unwrap() };
    m.collect(Full).unwrap();
    heap.complete_sweep().unwrap();
    let seen = SEEN.lock().unwrap().take().expect("the sweep function ran");
    assert!(seen.contains("DuringCollection"), "{seen}");
}

/// A callback id names one registration in the process: removing it through another
/// heap is an error, and that heap's own callbacks stay (a user trial found heap B
/// removing its own first callback when given heap A's first id).
#[test]
fn a_callback_id_of_another_heap_is_refused() {
    use gc_core::CallbackKind;
    let (a, b) = (Heap::default(), Heap::default());
    let id_a = a.add_callback(Callback::PreGc(Arc::new(|_| ()))).unwrap();
    let id_b = b.add_callback(Callback::PreGc(Arc::new(|_| ()))).unwrap();
    assert_ne!(id_a, id_b);
    assert!(matches!(
        b.remove_callback(id_a),
        Err(gc_core::GcError::CallbackNotRegistered { .. })
    ));
    assert_eq!(a.callback_count(CallbackKind::PreGc), 1);
    assert_eq!(b.callback_count(CallbackKind::PreGc), 1);
    b.remove_callback(id_b).unwrap();
    a.remove_callback(id_a).unwrap();
}

/// A borrowed handle (`current_mutator`) outliving the owning `Mutator`: the thread is
/// detached, and the handle says so (not "inside a GC-safe region").
#[test]
fn a_borrowed_mutator_after_detach_says_not_attached() {
    let heap = Heap::default();
    let ty = leaf_type(&heap);
    let owner = heap.attach().unwrap();
    let mut borrowed = heap.current_mutator().unwrap();
    drop(owner);
    assert_eq!(heap.attached_threads(), 0);
    assert!(matches!(
        borrowed.alloc_typed(16, ty),
        Err(gc_core::GcError::NotAttached)
    ));
    assert!(matches!(
        borrowed.collect(Full),
        Err(gc_core::GcError::NotAttached)
    ));
}

/// A panicking external-allocation callback unwinds out of the allocation (as its doc
/// says); the object it was told about is freed by the next collection and the heap
/// goes on working.
#[test]
fn a_panicking_external_alloc_callback_unwinds_and_the_heap_goes_on() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let heap = Heap::default();
    let big = heap.new_layout_type("Big", 4096, &[]).unwrap();
    let (allocs, frees) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let a = allocs.clone();
    heap.add_callback(Callback::ExternalAlloc(Arc::new(move |_, _| {
        if a.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("the user's callback panics");
        }
    })))
    .unwrap();
    let f = frees.clone();
    heap.add_callback(Callback::ExternalFree(Arc::new(move |_| {
        f.fetch_add(1, Ordering::SeqCst);
    })))
    .unwrap();
    let mut m = heap.attach().unwrap();
    let unwound =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.alloc_typed(4096, big)));
    assert!(unwound.is_err());
    let kept = m.alloc_typed(4096, big).unwrap();
    let root = heap.root(kept);
    m.collect(Full).unwrap();
    assert_eq!(
        frees.load(Ordering::SeqCst),
        1,
        "the first object was freed"
    );
    assert_eq!(root.get(), kept);
    assert_eq!(allocs.load(Ordering::SeqCst), 2);
}
