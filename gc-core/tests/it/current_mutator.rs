//! `Heap::current_mutator`: a borrowed handle for the calling thread's attachment, for
//! code reached without the thread's `Mutator` at hand (C entry points, libraries such as
//! refbridge). It allocates and collects as the thread; dropping it does not detach; it is
//! refused on unattached threads, other heaps' threads, in GC-safe regions and during a
//! collection.

use gc_core::{Callback, CollectionKind, GcError, Heap, HeapConfig};
use parking_lot::Mutex;
use std::sync::Arc;

#[test]
fn a_borrowed_handle_allocates_and_collects_as_the_thread_and_does_not_detach() {
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let mut m = heap.attach().unwrap();
    let pair = heap.new_layout_type("Pair", 16, &[0, 8]).unwrap();
    let a = m.alloc_typed(16, pair).unwrap();
    let root = heap.root(a);
    {
        let mut b = heap.current_mutator().unwrap();
        assert_eq!(b.ptls(), m.ptls(), "the same thread state");
        let child = b.alloc_typed(16, pair).unwrap();
        // SAFETY: `a` is rooted and `child` a fresh object of the same heap.
        unsafe { b.store_ref(root.get(), 0, Some(child)) };
        b.collect(CollectionKind::Full).unwrap().unwrap();
        // SAFETY: `a` is rooted, so alive.
        assert_eq!(unsafe { b.load_ref(root.get(), 0) }, Some(child));
    }
    // Dropping the borrowed handle left the thread attached.
    assert_eq!(heap.attached_threads(), 1);
    assert!(m.alloc_typed(16, pair).is_ok());
    assert_eq!(heap.stats().full_collections, 1);
}

#[test]
fn it_is_refused_where_the_thread_may_not_touch_the_heap() {
    let heap = Heap::new(HeapConfig::default()).unwrap();
    // Not attached.
    assert_eq!(heap.current_mutator().err().unwrap(), GcError::NotAttached);
    let mut m = heap.attach().unwrap();
    // Attached to another heap.
    let other = Heap::new(HeapConfig::default()).unwrap();
    assert_eq!(
        other.current_mutator().err().unwrap(),
        GcError::AttachedElsewhere
    );
    // Inside a GC-safe region.
    let h = heap.clone();
    let e = m.gc_safe(|| h.current_mutator().err().unwrap());
    assert_eq!(e, GcError::InGcSafeRegion);
    // During a collection (from a callback).
    let seen = Arc::new(Mutex::new(None));
    let (s, h) = (seen.clone(), heap.clone());
    let id = heap
        .add_callback(Callback::PreGc(Arc::new(move |_| {
            *s.lock() = Some(h.current_mutator().err());
        })))
        .unwrap();
    m.collect(CollectionKind::Full).unwrap();
    heap.remove_callback(id).unwrap();
    assert!(matches!(
        seen.lock().clone(),
        Some(Some(GcError::DuringCollection { .. }))
    ));
}
