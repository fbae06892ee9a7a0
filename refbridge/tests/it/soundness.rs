//! Ways safe Rust crashed or raced through the bridge's API (issue 26's review of every
//! safe function that takes an address, a bound or a handle), each now a test: the call
//! is checked and refused with a clear error, or the function is `unsafe` (shown by a
//! `compile_fail` doctest on it: `PyTypeObject::name`, `EnterGuard` not `Send`).

use crate::common::*;
use gc_core::{Heap, HeapConfig};
use refbridge::{Bridge, BridgeConfig, BridgeError};

fn config() -> BridgeConfig {
    BridgeConfig {
        cycle_threshold: None,
        ..BridgeConfig::default()
    }
}

/// Guards dropped out of order: the first guard's drop used to restore "no bridge"
/// while the second was alive, and the second's drop then restored the first bridge,
/// freed by then: the next C API call on the thread read freed memory (SIGILL here).
/// Now the current bridge is always the innermost live guard's, and a guard keeps its
/// bridge alive.
#[test]
fn guards_dropped_out_of_order_leave_the_innermost_live_one_current() {
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let _m = heap.attach().unwrap();
    let a = Bridge::new(&heap, config()).unwrap();
    let b = Bridge::new(&heap, config()).unwrap();
    let ga = a.enter().unwrap();
    let gb = b.enter().unwrap();
    drop(ga);
    let p = refbridge::mem_alloc(16).unwrap();
    assert_eq!(
        (a.memory().bytes(), b.memory().bytes()),
        (0, 16),
        "b is still current"
    );
    // SAFETY: a block of mem_alloc, freed once.
    unsafe { refbridge::mem_free(p.as_ptr()).unwrap() };
    assert!(a.drain().is_err(), "a is no longer entered");
    drop(a); // its last handle: freed
    let _junk: Vec<Vec<u8>> = (0..1000).map(|_| vec![0xAB; 512]).collect();
    drop(gb);
    assert!(Bridge::current().is_none());
    let p = refbridge::mem_alloc(16).unwrap(); // no bridge: the process's account
                                               // SAFETY: as above.
    unsafe { refbridge::mem_free(p.as_ptr()).unwrap() };
    assert!(b.drain().is_err());
}

/// A guard outliving its `Bridge` handle keeps the bridge alive and entered.
#[test]
fn a_guard_keeps_its_bridge_alive() {
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let _m = heap.attach().unwrap();
    let bridge = Bridge::new(&heap, config()).unwrap();
    let g = bridge.enter().unwrap();
    drop(bridge);
    let current = Bridge::current().expect("still entered");
    assert!(current.drain().is_ok());
    drop(current);
    drop(g);
    assert!(Bridge::current().is_none());
}

/// A mutator of another heap: `collect` ran that heap's collection while the cycle
/// collection allocated the bridge's mirrors (objects of the bridge's types) there and
/// registered them with the bridge's reference queue, whose heap never marks them (their
/// native objects then lose their mirror's count while the mirror lives). Now refused
/// before anything happens.
#[test]
fn a_mutator_of_another_heap_is_refused() {
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let bridge = Bridge::new(&heap, config()).unwrap();
    let _g = bridge.enter().unwrap();
    let other = Heap::new(HeapConfig::default()).unwrap();
    let mut m2 = other.attach().unwrap(); // this thread is attached to the other heap
    let n = native_node(7);
    for err in [
        bridge.collect(&mut m2).unwrap_err(),
        bridge.collect_cycles(&mut m2).unwrap_err(),
        bridge.shutdown(&mut m2).unwrap_err(),
        // SAFETY: a live native object the test holds a reference to.
        unsafe { bridge.to_managed(&mut m2, n) }.unwrap_err(),
    ] {
        assert_eq!(
            err,
            BridgeError::WrongHeap {
                what: match err {
                    BridgeError::WrongHeap { what, .. } => what,
                    _ => unreachable!(),
                },
                mutator_heap: other.id().get(),
                bridge_heap: heap.id().get(),
            }
        );
    }
    assert!(!bridge.has_mirror(n), "nothing was made on the wrong heap");
    decref(n);
    assert_eq!(take_freed(), vec![7]);
}

/// `is_strong` and `stats()` read stub counts, which the owner thread's native code
/// writes without a lock: from another thread that was a data race in safe code. Now
/// they do not read counts there (`None`), and `debug_check` is refused.
#[test]
fn counts_are_not_read_from_a_thread_that_has_not_entered_the_bridge() {
    let mut e = Env::new(BridgeConfig {
        debug: true,
        ..config()
    });
    let o = e.managed(1);
    let r = e.root(o);
    // SAFETY: rooted.
    let op = unsafe { e.bridge.to_native(r.get()).unwrap() };
    incref(op);
    assert_eq!(e.bridge.is_strong(op), Some(true));
    assert_eq!(e.bridge.stats().strong_entries, Some(1));
    assert_eq!(e.bridge.debug_check(), Ok(0));
    let bridge = e.bridge.clone();
    let addr = op as usize;
    std::thread::spawn(move || {
        assert_eq!(bridge.is_strong(addr as *const _), None);
        let s = bridge.stats();
        assert_eq!(s.strong_entries, None);
        assert_eq!(s.stubs_live, 1, "what the lock protects is read");
        assert_eq!(s.tracked, 0);
        assert_eq!(bridge.debug_check(), Err(BridgeError::NotEntered));
    })
    .join()
    .unwrap();
    decref(op);
}

/// Pointers that are no stub of this bridge (NULL, an untagged address, inside a stub,
/// past the stub chunks) are refused by `is_strong` and `has_mirror` without reading
/// through them.
#[test]
fn is_strong_checks_the_pointer_before_reading_through_it() {
    let mut e = Env::new(config());
    let o = e.managed(1);
    let r = e.root(o);
    // SAFETY: rooted.
    let op = unsafe { e.bridge.to_native(r.get()).unwrap() };
    assert_eq!(e.bridge.is_strong(op), Some(false));
    for bogus in [
        std::ptr::null(),
        0x10 as *const _,
        (1usize << 63 | 0x10) as *const _,
        (op as usize + 8) as *const _,
        (op as usize + 24 * 300) as *const _,
    ] {
        assert_eq!(e.bridge.is_strong(bogus), None, "{bogus:?}");
        assert!(!e.bridge.has_mirror(bogus));
    }
}
