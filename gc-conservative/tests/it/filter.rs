//! `scan_task_filtered` / `gc_scan_task`: a task scanner of the runtime's own that keeps
//! only the objects a filter accepts (GAP accepts only words pointing at master
//! pointers). Objects referenced only from this thread's stack survive a full collection
//! exactly when the filter accepts them.

use gc_core::{
    Callback, CollectionKind, ForeignTypeSpec, Heap, HeapConfig, MarkProc, ObjRef, SweepProc,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

static SWEPT_A: AtomicUsize = AtomicUsize::new(0);
static SWEPT_B: AtomicUsize = AtomicUsize::new(0);

fn sweep_a(_: ObjRef) {
    SWEPT_A.fetch_add(1, Ordering::SeqCst);
}
fn sweep_b(_: ObjRef) {
    SWEPT_B.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn filtered_task_scan_keeps_only_accepted_objects() {
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let mut m = heap.attach().unwrap();
    let spec = |name, sweep| ForeignTypeSpec {
        name,
        mark: MarkProc::None,
        sweep,
        has_pointers: false,
        large: false,
    };
    let ta = heap
        .new_foreign_type(spec("A", SweepProc::Rust(sweep_a)))
        .unwrap();
    let tb = heap
        .new_foreign_type(spec("B", SweepProc::Rust(sweep_b)))
        .unwrap();
    let tb_addr = tb.as_obj().addr();
    let heap_id = heap.id();
    heap.add_callback(Callback::TaskScanner(Arc::new(move |mk, task, _| {
        assert_eq!(mk.heap_id(), heap_id);
        let mut keep = |obj: ObjRef| {
            // SAFETY: the scan hands the filter live objects of the heap being collected.
            let ty = unsafe { obj.as_ptr().sub(8).cast::<usize>().read() } & !15;
            ty == tb_addr
        };
        gc_conservative::scan_task_filtered(mk, task, &mut keep);
    })))
    .unwrap();
    let mut held = Vec::new();
    for _ in 0..8 {
        let a = m.alloc_typed(32, ta).unwrap();
        let b = m.alloc_typed(32, tb).unwrap();
        // SAFETY: a and b are live objects just allocated on this heap.
        unsafe {
            m.schedule_foreign_sweepfunc(a).unwrap();
            m.schedule_foreign_sweepfunc(b).unwrap();
        }
        held.push(a);
        held.push(b);
    }
    // The only references are in `held`'s buffer (heap memory, not scanned) and copies on
    // this stack: keep one copy of each in a stack array the scan sees.
    let on_stack: [usize; 16] = std::array::from_fn(|i| held[i].addr());
    drop(held);
    m.collect(CollectionKind::Full).unwrap();
    std::hint::black_box(&on_stack);
    assert_eq!(
        SWEPT_A.load(Ordering::SeqCst),
        8,
        "rejected objects must die"
    );
    assert_eq!(
        SWEPT_B.load(Ordering::SeqCst),
        0,
        "accepted objects must survive"
    );
}
