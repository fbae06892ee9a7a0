//! The bridge's behaviour, one rule per test: stubs (count, tag, identity, strong/weak
//! switching), mirrors (count, map, death through the queue), the queue (batched
//! deallocation, pending error kept, re-entrancy), cycles on each side and across, the
//! trashcan, errors.

use crate::common::*;
use gc_core::CollectionKind;
use refbridge::{is_stub, untag, MANAGED_REFCNT, STUB_TAG};
use refbridge::{BridgeConfig, BridgeError};

fn env() -> Env {
    Env::new(BridgeConfig {
        cycle_threshold: None,
        ..BridgeConfig::default()
    })
}

#[test]
fn a_stub_starts_at_managed_refcnt_is_tagged_and_keeps_pointer_identity() {
    let mut e = env();
    let o = e.managed(1);
    let r = e.root(o);
    // SAFETY: rooted.
    let op = unsafe { e.bridge.to_native(r.get()).unwrap() };
    assert!(is_stub(op));
    assert_eq!(op as usize & STUB_TAG, STUB_TAG);
    assert_eq!(Env::count(op), MANAGED_REFCNT);
    // SAFETY: untagged stub memory.
    let handle = unsafe { (*(untag(op) as *mut refbridge::Stub)).handle };
    assert_ne!(handle, 0, "handle index 0 is never used");
    // SAFETY: rooted.
    assert_eq!(unsafe { e.bridge.to_native(r.get()).unwrap() }, op);
    // SAFETY: a live stub.
    assert_eq!(unsafe { e.bridge.to_managed(&mut e.m, op).unwrap() }, o);
    assert_eq!(
        e.bridge.is_strong(op),
        Some(false),
        "no native reference yet"
    );
    assert_eq!(e.bridge.stats().stubs_made, 1);
}

#[test]
fn the_entry_is_strong_exactly_while_native_references_exist() {
    let mut e = env();
    let o = e.managed(1);
    let w = e.heap.new_weak_ref(o);
    let r = e.root(o);
    // SAFETY: rooted.
    let op = unsafe { e.bridge.to_native(r.get()).unwrap() };
    incref(op);
    incref(op);
    assert_eq!(e.bridge.is_strong(op), Some(true));
    assert_eq!(e.bridge.stats().strong_entries, Some(1));
    drop(r);
    // Native references keep the managed object alive.
    e.m.collect(CollectionKind::Full).unwrap();
    assert!(!w.is_cleared());
    decref(op);
    assert_eq!(e.bridge.is_strong(op), Some(true), "12 -> 11: still strong");
    decref(op);
    assert_eq!(e.bridge.is_strong(op), Some(false), "11 -> 10: weak");
    e.m.collect(CollectionKind::Full).unwrap();
    assert!(w.is_cleared(), "no reference left: the managed object died");
    e.bridge.drain().unwrap();
    let s = e.bridge.stats();
    assert_eq!(
        (s.stubs_live, s.stubs_freed),
        (0, 1),
        "stub freed at count 0"
    );
    // A new object at the same address gets a new stub, not the old one.
    let o2 = e.managed(2);
    let r2 = e.root(o2);
    // SAFETY: rooted.
    let op2 = unsafe { e.bridge.to_native(r2.get()).unwrap() };
    // SAFETY: a live stub.
    assert_eq!(unsafe { e.bridge.to_managed(&mut e.m, op2).unwrap() }, o2);
}

#[test]
fn a_stub_outlives_its_managed_object_while_native_code_holds_it_after_a_weak_limit() {
    // A stub with native references whose managed object dies (a replicated cycle)
    // stays allocated until the last native reference goes, and using it is an error.
    let mut e = env();
    let n = e.native(1);
    let o = e.managed(2);
    let mirror = {
        // SAFETY: n is live.
        unsafe { e.bridge.to_managed(&mut e.m, n).unwrap() }
    };
    e.set_managed_slot(o, 0, Some(mirror));
    let r = e.root(o);
    // SAFETY: rooted.
    let s = unsafe { e.bridge.to_native(r.get()).unwrap() };
    e.set_native_slot(n, 0, s); // n -> stub(o): o -> mirror(n) -> ... a cross cycle
    decref(n); // only the mirror holds n now
    drop(r);
    let rep = e.collect();
    assert_eq!(take_freed(), vec![1], "the cross-boundary cycle was freed");
    assert!(rep.replicated >= 2, "{rep:?}");
    let st = e.bridge.stats();
    assert_eq!(
        (st.stubs_live, st.mirrors_live, st.tracked),
        (0, 0, 0),
        "{st:?}"
    );
}

#[test]
fn a_mirror_adds_managed_refcnt_and_its_death_gives_it_back() {
    let mut e = env();
    let n = e.native(7);
    // SAFETY: n is live and ours.
    let mirror = unsafe { e.bridge.to_managed(&mut e.m, n).unwrap() };
    assert_eq!(Env::count(n), 1 + MANAGED_REFCNT);
    assert!(e.bridge.has_mirror(n));
    // SAFETY: live mirror.
    unsafe {
        assert!(e.bridge.is_mirror(mirror));
        assert_eq!(e.bridge.native_of(mirror), Some(n));
        assert_eq!(
            e.bridge.to_managed(&mut e.m, n).unwrap(),
            mirror,
            "one mirror"
        );
    }
    let r = e.root(mirror);
    decref(n); // native code drops its reference: only the mirror holds it
    assert_eq!(Env::count(n), MANAGED_REFCNT);
    e.m.collect(CollectionKind::Full).unwrap();
    assert!(take_freed().is_empty(), "the mirror is rooted");
    drop(r);
    e.m.collect(CollectionKind::Full).unwrap();
    // drain_after_gc: the queue was drained right after the collection.
    assert_eq!(take_freed(), vec![7]);
    assert!(!e.bridge.has_mirror(n));
    assert_eq!(e.bridge.stats().queue_deallocs, 1);
}

#[test]
fn without_drain_after_gc_the_queue_is_drained_at_the_next_transition() {
    let mut e = Env::new(BridgeConfig {
        drain_after_gc: false,
        cycle_threshold: None,
        ..BridgeConfig::default()
    });
    let n = e.native(3);
    // SAFETY: live.
    unsafe { e.bridge.to_managed(&mut e.m, n).unwrap() };
    decref(n);
    e.m.collect(CollectionKind::Full).unwrap();
    assert!(take_freed().is_empty(), "not drained yet");
    let o = e.managed(4);
    let r = e.root(o);
    // SAFETY: rooted. A transition drains first.
    unsafe { e.bridge.to_native(r.get()).unwrap() };
    assert_eq!(take_freed(), vec![3]);
}

#[test]
fn queue_deallocations_keep_the_pending_error_and_drop_errors_they_raise() {
    let mut e = Env::new(BridgeConfig {
        drain_after_gc: false,
        cycle_threshold: None,
        debug: true,
        ..BridgeConfig::default()
    });
    let n = e.native(5);
    // SAFETY: live.
    unsafe { e.bridge.to_managed(&mut e.m, n).unwrap() };
    decref(n);
    e.m.collect(CollectionKind::Full).unwrap();
    e.bridge.set_error("ValueError: pending").unwrap();
    // The deallocator raises (a node whose id says so).
    crate::common::raise_in_dealloc(5);
    e.bridge.drain().unwrap();
    assert_eq!(take_freed(), vec![5]);
    assert_eq!(
        e.bridge.pending_error().as_deref(),
        Some("ValueError: pending")
    );
    assert_eq!(e.bridge.stats().unraisable, 1);
    assert!(e
        .bridge
        .debug_reports()
        .iter()
        .any(|r| r.kind == refbridge::ReportKind::UnraisableError));
    crate::common::raise_in_dealloc(0);
}

#[test]
fn to_managed_refuses_an_object_being_deallocated_and_dead_stubs_and_nulls() {
    let mut e = env();
    let n = e.native(9);
    // SAFETY: a live object whose count we set to 0 as tp_dealloc would see it.
    unsafe { (*n).ob_refcnt = 0 };
    // SAFETY: the object is allocated.
    let err = unsafe { e.bridge.to_managed(&mut e.m, n) }.unwrap_err();
    assert!(
        matches!(err, BridgeError::BeingDeallocated { count: 0, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("test.Node"), "{err}");
    // SAFETY: restore and release.
    unsafe { (*n).ob_refcnt = 1 };
    decref(n);
    assert_eq!(take_freed(), vec![9]);
    // SAFETY: null is refused.
    let err = unsafe { e.bridge.to_managed(&mut e.m, std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(err, BridgeError::Null { what: "to_managed" });
    // A tagged pointer that is no stub of ours.
    let fake = (0x1000usize | STUB_TAG) as *mut refbridge::PyObject;
    // SAFETY: checked without dereferencing.
    let err = unsafe { e.bridge.to_managed(&mut e.m, fake) }.unwrap_err();
    assert!(matches!(err, BridgeError::NotAStub { .. }), "{err}");
}

#[test]
fn the_bridge_serves_one_thread_and_unregistered_types_are_named() {
    let mut e = env();
    let b = e.bridge.clone();
    let err = std::thread::spawn(move || b.enter().err().unwrap())
        .join()
        .unwrap();
    assert_eq!(err, BridgeError::EnteredElsewhere);
    let other = e.heap.new_layout_type("Unregistered", 8, &[]).unwrap();
    let o = e.m.alloc_typed(8, other).unwrap();
    let _r = e.root(o);
    // SAFETY: rooted.
    let err = unsafe { e.bridge.to_native(o) }.unwrap_err();
    assert_eq!(
        err.to_string(),
        "managed type Unregistered has no native type: register it with Bridge::register_managed_type"
    );
    drop(e.guard.take());
    let err = e.bridge.drain().unwrap_err();
    assert_eq!(err, BridgeError::NotEntered);
}

#[test]
fn a_pure_native_cycle_is_freed_by_the_cycle_collector() {
    let mut e = env();
    let a = e.native(1);
    let b = e.native(2);
    let c = e.native(3);
    e.set_native_slot(a, 0, b);
    e.set_native_slot(b, 0, c);
    e.set_native_slot(c, 0, a);
    let keep = e.native(4);
    e.set_native_slot(keep, 0, keep); // self-cycle, but referenced from outside
    decref(a);
    decref(b);
    decref(c);
    assert!(take_freed().is_empty(), "counts stay at 1 in a cycle");
    let r = e.collect();
    let mut f = take_freed();
    f.sort();
    assert_eq!(f, vec![1, 2, 3]);
    assert_eq!(r.native_garbage, 3);
    assert_eq!(
        r.managed_collections, 1,
        "one full managed collection, nothing replicated"
    );
    assert_eq!(e.bridge.stats().tracked, 1);
    decref(keep);
    e.collect();
    assert_eq!(take_freed(), vec![4]);
}

#[test]
fn a_cycle_through_a_managed_root_survives_and_is_freed_once_unrooted() {
    let mut e = env();
    let n = e.native(1);
    let o = e.managed(10);
    let r = e.root(o);
    // SAFETY: live.
    let mirror = unsafe { e.bridge.to_managed(&mut e.m, n).unwrap() };
    e.set_managed_slot(r.get(), 0, Some(mirror));
    // SAFETY: rooted.
    let s = unsafe { e.bridge.to_native(r.get()).unwrap() };
    e.set_native_slot(n, 0, s);
    decref(n);
    let w = e.heap.new_weak_ref(o);
    e.collect();
    assert!(take_freed().is_empty());
    assert!(!w.is_cleared());
    e.collect();
    assert!(take_freed().is_empty(), "still rooted: nothing freed");
    drop(r);
    e.collect();
    assert_eq!(take_freed(), vec![1]);
    assert!(w.is_cleared());
    assert_eq!(e.bridge.stats().stubs_live, 0);
}

#[test]
fn a_replicated_object_native_code_takes_back_keeps_its_managed_side() {
    // root -> o(managed) -> mirror(n); n -> stub(o). Replication makes stub(o) weak.
    // Native code then takes a reference to stub(o) out of n (count unchanged: a move),
    // the root goes: the weak hook sees the stub referenced from outside the replicated
    // set and keeps o alive.
    let mut e = env();
    let n = e.native(1);
    let o = e.managed(10);
    let r = e.root(o);
    // SAFETY: live.
    let mirror = unsafe { e.bridge.to_managed(&mut e.m, n).unwrap() };
    e.set_managed_slot(r.get(), 0, Some(mirror));
    // SAFETY: rooted.
    let s = unsafe { e.bridge.to_native(r.get()).unwrap() };
    e.set_native_slot(n, 0, s);
    decref(n);
    let w = e.heap.new_weak_ref(o);
    let rep = e.collect();
    assert!(rep.replicated > 0, "{rep:?}");
    assert_eq!(e.bridge.is_strong(s), Some(false), "weak to strong limit");
    // Native code moves the reference out of n: n.slots[0] = NULL, held elsewhere.
    // SAFETY: n is alive (mirror rooted through o).
    let held = unsafe {
        let slot = &mut (*(n as *mut NodeObj)).slots[0];
        std::mem::replace(slot, std::ptr::null_mut())
    };
    assert_eq!(held, s);
    drop(r);
    e.m.collect(CollectionKind::Full).unwrap();
    assert!(!w.is_cleared(), "the hook kept the taken-back object");
    // SAFETY: the stub still has its managed object.
    assert_eq!(unsafe { e.bridge.to_managed(&mut e.m, s).unwrap() }, o);
    // The next cycle collection makes it strong again; released, all goes.
    e.collect();
    assert_eq!(e.bridge.is_strong(s), Some(true));
    decref(held);
    e.collect();
    assert!(w.is_cleared());
    assert_eq!(take_freed(), vec![1]);
}

#[test]
fn freeing_a_million_long_chain_does_not_overflow_the_stack() {
    let mut e = env();
    let head = e.native(0);
    let mut cur = head;
    for i in 1..1_000_000u64 {
        let n = e.native(i);
        e.set_native_slot(cur, 0, n);
        decref(n);
        cur = n;
    }
    decref(head);
    assert_eq!(take_freed().len(), 1_000_000);
    assert_eq!(e.bridge.stats().tracked, 0);
}

#[test]
fn immortal_stubs_stay_strong_and_are_never_freed() {
    let mut e = env();
    let o = e.managed(1);
    let w = e.heap.new_weak_ref(o);
    // SAFETY: o is alive (no allocation in between).
    let op = unsafe { e.bridge.make_immortal(o).unwrap() };
    assert_eq!(Env::count(op), refbridge::IMMORTAL_REFCNT);
    incref(op);
    decref(op);
    decref(op);
    incref(op);
    e.collect();
    assert!(!w.is_cleared());
    assert_eq!(e.bridge.is_strong(op), Some(true));
}

/// `to_managed` of another bridge's native object made a mirror in the second bridge
/// (whose queue would then lower a count the first bridge's list and collector own),
/// while `gc_track` and `gc_del` refused the same object (trial D7). Refused alike now.
#[test]
fn to_managed_refuses_another_bridges_native_object() {
    let mut e = env();
    let n = e.native(3);
    let other = refbridge::Bridge::new(&e.heap, BridgeConfig::default()).unwrap();
    {
        let _g = other.enter().unwrap();
        // SAFETY: a live object (of the first bridge) the test holds a reference to.
        let err = unsafe { other.to_managed(&mut e.m, n) }.unwrap_err();
        assert_eq!(
            err,
            BridgeError::OtherBridge {
                what: "to_managed",
                addr: n as usize,
                type_name: "test.Node".into()
            }
        );
        assert!(!other.has_mirror(n));
        // A native object of no bridge at all (its header is not a block's).
        // Words: a block header's two, a GC head's two, then the object.
        let fake = Box::leak(Box::new([0usize; 8]));
        fake[4] = 1; // ob_refcnt
                     // SAFETY: n is live: its type pointer is valid.
        fake[5] = unsafe { (*n).ob_type } as usize;
        let op = &mut fake[4] as *mut usize as *mut refbridge::PyObject;
        // SAFETY: a readable fake object of a valid GC type (the words before it, where
        // a block's header would be, are zero).
        let err = unsafe { other.to_managed(&mut e.m, op) }.unwrap_err();
        assert_eq!(
            err,
            BridgeError::NotABlock {
                what: "to_managed",
                addr: op as usize
            }
        );
    }
    // The owner still makes its mirror.
    // SAFETY: as above.
    assert!(unsafe { e.bridge.to_managed(&mut e.m, n) }.is_ok());
    decref(n);
}
