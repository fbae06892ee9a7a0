//! gc-core's C ABI on heaps made and used from Rust too: the seed's barrier from a
//! Rust callback, the C and Rust answers to "is it young", GC-safe regions entered
//! through C, and the C status codes.

use gc_core::{Callback, CollectionKind, Heap, HeapConfig, ObjRef};
use gc_core_capi::{gc_is_young, jl_gc_wb_back};
use parking_lot::Mutex;
use std::ffi::c_void;
use std::sync::Arc;

fn heap() -> Heap {
    Heap::new(HeapConfig {
        min_interval: 1 << 30,
        max_interval: 1 << 30,
        ..HeapConfig::default()
    })
    .unwrap()
}

/// Whether `obj` is still an allocated pool object (once the last collection's lazy
/// sweep is complete).
fn pool_allocated(heap: &Heap, obj: ObjRef) -> bool {
    heap.complete_sweep().unwrap();
    let page = gc_core::page_of(obj.addr()).expect("pool object");
    page.cell_layout().is_some() && page.is_allocated(obj.addr())
}

/// GAP's PreGCHook: GAP stores into its current local-variables bag without barriers and
/// calls `CHANGED_BAG` (`jl_gc_wb_back`) on it from its pre-GC callback. Julia runs the
/// pre-GC callbacks before it merges the threads' remembered sets, so that barrier counts
/// for the collection the callback runs in: a young child stored into an old object
/// without a barrier survives the partial collection.
#[test]
fn a_backward_barrier_from_a_pre_gc_callback_counts_for_that_collection() {
    let heap = Heap::new(HeapConfig {
        min_interval: 1 << 30,
        max_interval: 1 << 30,
        lazy_sweep: false,
        mark_threads: 1,
        ..HeapConfig::default()
    })
    .unwrap();
    let mut m = heap.attach().unwrap();
    let node = heap.new_layout_type("Node", 16, &[0]).unwrap();
    let lvars = m.alloc_typed(16, node).unwrap();
    let _root = heap.root(lvars);
    m.collect(CollectionKind::Full).unwrap();
    m.collect(CollectionKind::Full).unwrap();
    // SAFETY: rooted, so alive.
    assert!(!unsafe { lvars.is_young() }, "two collections promote it");
    let kinds = Arc::new(Mutex::new(Vec::new()));
    let (k, addr) = (kinds.clone(), lvars.addr());
    let id = heap
        .add_callback(Callback::PreGc(Arc::new(move |kind| {
            k.lock().push(kind);
            // SAFETY: `lvars` is rooted, so alive; the callback runs on the collecting
            // thread, which is attached to the heap.
            unsafe { jl_gc_wb_back(addr as *mut c_void) };
        })))
        .unwrap();
    let child = m.alloc_typed(16, node).unwrap();
    // SAFETY: a live Node; the store deliberately skips the barrier (the callback's comes
    // later).
    unsafe { lvars.write_slot(0, child.addr()) };
    m.collect(CollectionKind::Partial).unwrap();
    assert_eq!(*kinds.lock(), [CollectionKind::Partial]);
    assert!(
        pool_allocated(&heap, child),
        "the young child of a bag the pre-GC callback remembered was freed"
    );
    // SAFETY: `child` is allocated (just checked), so its header is its own.
    assert_eq!(unsafe { heap.type_of(child) }, node);
    // The child stays alive in later partial collections (the remembered set keeps it
    // until it is promoted) and its type is intact.
    heap.remove_callback(id).unwrap();
    for _ in 0..3 {
        m.collect(CollectionKind::Partial).unwrap();
        assert!(pool_allocated(&heap, child));
    }
    // SAFETY: rooted.
    assert_eq!(unsafe { m.load_ref(lvars, 0) }, Some(child));
}

#[test]
fn is_young_tells_the_generation_until_promotion() {
    let heap = heap();
    let mut m = heap.attach().unwrap();
    let node = heap.new_layout_type("Node", 16, &[0]).unwrap();
    let obj = m.alloc_typed(16, node).unwrap();
    let root = heap.root(obj);
    let young = |o: ObjRef| {
        // SAFETY: o is rooted, so alive, whenever this is called.
        let (rust, c) = unsafe { (o.is_young(), gc_is_young(o.as_ptr().cast())) };
        assert_eq!(rust, c == 1);
        rust
    };
    assert!(young(obj));
    m.collect(CollectionKind::Partial).unwrap();
    assert!(young(obj), "promoted after one collection");
    m.collect(CollectionKind::Partial).unwrap();
    assert!(!young(obj), "not promoted after two collections");
    // SAFETY: NULL is accepted.
    let null = unsafe { gc_is_young(std::ptr::null_mut()) };
    assert_eq!(null, 0);
    drop(root);
}

#[test]
fn gc_safe_enter_sp_records_a_live_frame_and_lets_others_collect() {
    use std::ffi::{c_int, c_void};
    // The C declarations a C client compiles against (`void *` for the handles).
    extern "C" {
        fn gc_heap_new(config: *const c_void) -> *mut c_void;
        fn gc_thread_attach(heap: *mut c_void) -> *mut c_void;
        fn gc_thread_detach() -> c_int;
        fn gc_safe_enter_sp(m: *mut c_void, sp: *mut c_void) -> i8;
        fn gc_safe_leave(m: *mut c_void, state: i8);
        fn gc_collect(m: *mut c_void, kind: c_int) -> c_int;
    }
    const GC_COLLECT_FULL: c_int = 1;
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
        // SAFETY: this thread attached through the C ABI.
        unsafe { gc_thread_detach() };
    });
    rx.recv().unwrap();
    // SAFETY: a live heap; this thread attaches, collects (the other thread counts as
    // stopped, so this does not wait for it) and detaches.
    unsafe {
        let m = gc_thread_attach(heap as *mut _);
        assert_eq!(gc_collect(m, GC_COLLECT_FULL), 1);
    }
    // SAFETY: this thread attached through the C ABI.
    unsafe { gc_thread_detach() };
    done_tx.send(()).unwrap();
    blocked.join().unwrap();
}

/// `gc_safe_enter` with a pointer that is no mutator: an error, and nothing written
/// through it (its assembly used to store the caller's registers there before the
/// pointer was checked).
#[test]
fn gc_safe_enter_checks_its_argument_before_writing() {
    use std::ffi::c_void;
    extern "C" {
        fn gc_safe_enter(m: *mut c_void) -> i8;
        fn jl_gc_safe_enter(m: *mut c_void) -> i8;
    }
    let mut not_a_mutator = [0x5a5a_5a5a_5a5a_5a5au64; 16];
    let p = not_a_mutator.as_mut_ptr().cast::<c_void>();
    // SAFETY: the function checks its argument (what this test shows).
    assert_eq!(unsafe { gc_safe_enter(p) }, -1);
    // SAFETY: as above.
    assert_eq!(unsafe { jl_gc_safe_enter(p) }, -1);
    assert!(not_a_mutator.iter().all(|&w| w == 0x5a5a_5a5a_5a5a_5a5a));
}

/// The C ABI's failures carry the workspace's shared status codes (ffi-support's
/// `RT_ERR_*`): int-returning functions return them, `gc_last_status` reports them after
/// a NULL return, and `gc_last_error` keeps the message.
#[test]
fn c_failures_report_shared_status_codes() {
    use gc_core_capi::{gc_heap_delete, gc_heap_new, gc_last_error, gc_last_status};
    use gc_core_capi::{gc_thread_attach, gc_thread_detach};
    use std::ffi::CStr;
    let message = || {
        // SAFETY: gc_last_error returns NULL or the thread's NUL-terminated message.
        let p = gc_last_error();
        assert!(!p.is_null(), "a failure leaves a message");
        // SAFETY: non-null, as above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    std::thread::spawn(move || {
        // NULL is refused, never dereferenced.
        assert_eq!(gc_heap_delete(std::ptr::null_mut()), -1); // RT_ERR_ARG
        assert_eq!(gc_last_status(), -1);
        assert!(message().contains("heap is NULL"));
        assert_eq!(gc_thread_detach(), -4, "RT_ERR_NOT_ATTACHED"); // not attached
        assert_eq!(gc_last_status(), -4);
        // SAFETY: NULL asks for the default configuration.
        let heap = unsafe { gc_heap_new(std::ptr::null()) };
        assert!(!heap.is_null());
        assert!(!gc_thread_attach(heap).is_null());
        // Refused while this thread is attached.
        assert_eq!(gc_heap_delete(heap), -15, "RT_ERR_STATE");
        assert!(message().contains("still attached"), "{}", message());
        assert_eq!(gc_thread_detach(), 0);
        // A live heap with no thread attached.
        assert_eq!(gc_heap_delete(heap), 0);
    })
    .join()
    .unwrap();
}
