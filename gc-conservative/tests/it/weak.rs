//! Weak references under conservative scanning: a weak reference is never a root.
//!
//! The referent is made on a thread that then exits (its stack is no longer scanned), so
//! its address is on no scanned stack; the main thread keeps only a weak handle (on its
//! stack) and a rooted holder object whose slot holds a weak-reference object (in an
//! object whose body is scanned conservatively, too). A full collection with
//! conservative stack scanning must free the referent and clear both weak references,
//! while an object whose address sits in a stack variable is kept, with its weak handle.

use gc_conservative::{enable_conservative_scanning, new_conservative_type};
use gc_core::{CollectionKind, Heap, HeapConfig, ObjRef, SweepProc, WeakRef};

fn allocated(o: usize) -> bool {
    let page = gc_core::page_of(o).expect("a pool object");
    page.cell_layout().is_some() && page.is_allocated(o)
}

#[test]
fn weak_references_are_never_conservative_roots() {
    // Eager sweeping: the test looks at cells right after each collection.
    let heap = Heap::new(HeapConfig {
        lazy_sweep: false,
        ..HeapConfig::default()
    })
    .unwrap();
    enable_conservative_scanning(&heap).unwrap();
    let mut m = heap.attach().unwrap();
    // A holder scanned conservatively (every word of its body), rooted precisely.
    let holder_ty = new_conservative_type(&heap, "Holder", SweepProc::None, false).unwrap();
    let holder = m.alloc_typed(64, holder_ty).unwrap();
    let holder_root = heap.root(holder);
    let ty = heap.new_layout_type("Obj", 32, &[]).unwrap();

    let h = heap.clone();
    let holder_addr = holder.addr();
    let (handle, hidden_target): (WeakRef, usize) = m.gc_safe(move || {
        std::thread::spawn(move || {
            let mut m = h.attach().unwrap();
            let target = m.alloc_typed(32, ty).unwrap();
            let w = m.new_weak_object(Some(target)).unwrap();
            let holder = ObjRef::from_addr(holder_addr).unwrap();
            // SAFETY: the holder is rooted and 64 bytes long; a conservative type needs no
            // barrier information beyond wb_back.
            unsafe {
                holder.write_slot(0, w.addr());
                m.wb_back(holder);
            }
            // The address of the target, hidden from conservative scanning (inverted).
            (h.new_weak_ref(target), !target.addr())
        })
        .join()
        .unwrap()
    });
    // A kept object: its address lives in this stack frame. Another size class, so that
    // it cannot follow the target in its page (the address of a cell's header is "one
    // past the end" of the cell before, which conservative lookups map to that object).
    let kept = m.alloc_typed(200, ty).unwrap();
    let kept_handle = heap.new_weak_ref(kept);
    for _ in 0..2 {
        m.collect(CollectionKind::Full).unwrap();
    }
    assert_eq!(
        handle.get(),
        None,
        "the weak handle kept its referent alive"
    );
    let w = ObjRef::from_addr(
        // SAFETY: the holder is rooted.
        unsafe { holder_root.get().read_slot(0) },
    )
    .unwrap();
    // SAFETY: the weak-reference object is reachable from the holder.
    assert_eq!(unsafe { heap.weak_object_get(w) }.unwrap(), None);
    assert!(
        allocated(w.addr()),
        "the weak-reference object itself is kept"
    );
    // Un-hidden only now, after the collections.
    assert!(!allocated(!hidden_target), "the referent was freed");
    assert_eq!(kept_handle.get(), Some(std::hint::black_box(kept)));
    assert!(allocated(kept.addr()));
}
