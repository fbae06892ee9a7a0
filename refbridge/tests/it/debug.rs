//! The debug mode: each misuse is reported once, with the object's type and where it
//! was made (and freed), and the program goes on; with the mode off nothing is recorded.

use crate::common::*;
use refbridge::MANAGED_REFCNT;
use refbridge::{BridgeConfig, ReportKind};
use std::sync::atomic::{AtomicU32, Ordering};

fn env() -> Env {
    Env::new(BridgeConfig {
        debug: true,
        cycle_threshold: None,
        ..BridgeConfig::default()
    })
}

fn kinds(e: &Env) -> Vec<ReportKind> {
    e.bridge.debug_reports().iter().map(|r| r.kind).collect()
}

/// The line of `make_node_here`'s call into the bridge.
static MADE_LINE: AtomicU32 = AtomicU32::new(0);

/// Makes a node at a place the reports must name, in debug and release builds alike (a
/// backtrace of a release build may have lost this function: it was inlined).
fn make_node_here(e: &mut Env, id: u64) -> *mut refbridge::PyObject {
    let (op, line) = (e.native(id), line!());
    MADE_LINE.store(line, Ordering::Relaxed);
    op
}

/// `file:line:` of `make_node_here`'s call, as a report prints it.
fn made_here() -> String {
    format!(
        "made at: {}:{}:",
        file!(),
        MADE_LINE.load(Ordering::Relaxed)
    )
}

#[test]
fn a_decref_of_a_freed_object_is_reported_with_where_it_was_made_and_freed() {
    let mut e = env();
    let n = make_node_here(&mut e, 1);
    decref(n);
    assert_eq!(take_freed(), vec![1]);
    assert!(kinds(&e).is_empty());
    decref(n); // use after free
    assert_eq!(kinds(&e), vec![ReportKind::UseAfterFree]);
    let r = &e.bridge.debug_reports()[0];
    assert_eq!(r.type_name, "test.Node");
    assert!(
        r.message.contains("Py_DECREF of freed object"),
        "{}",
        r.message
    );
    let text = r.to_string();
    assert!(
        text.contains("made at:") && text.contains("freed at:"),
        "{text}"
    );
    assert!(text.contains(&made_here()), "{text}");
    // Freed by the type's deallocator (a C function: its call to PyObject_GC_Del).
    let freed = r.freed_at.as_ref().unwrap().location;
    assert!(freed.file().ends_with("tests/it/common/mod.rs"), "{text}");
    // The memory was kept (poisoned): the freed object's type is the marker type.
    // SAFETY: quarantined memory stays allocated.
    let name = unsafe { refbridge::type_name_of(n) };
    assert_eq!(name, "<refbridge: freed object>");
}

#[test]
fn an_incref_of_a_freed_object_is_found_by_the_next_check() {
    let mut e = env();
    let n = e.native(1);
    decref(n);
    incref(n); // use after free: the count moves
    assert!(kinds(&e).is_empty(), "an incref is not a slow path");
    assert_eq!(e.bridge.debug_check(), Ok(1));
    assert_eq!(kinds(&e), vec![ReportKind::UseAfterFree]);
    assert!(e.bridge.debug_reports()[0].message.contains("count 2"));
    // Collections check too; the poison was restored, so nothing new.
    e.collect();
    assert_eq!(kinds(&e).len(), 1);
}

#[test]
fn releasing_a_reference_to_a_stub_that_was_never_taken_is_reported_and_repaired() {
    let mut e = env();
    let o = e.managed(1);
    let r = e.root(o);
    // SAFETY: rooted.
    let s = unsafe { e.bridge.to_native(r.get()).unwrap() };
    decref(s); // borrowed reference released: 10 -> 9 (no call: found by the collector)
    assert!(kinds(&e).is_empty());
    e.m.collect(gc_core::CollectionKind::Partial).unwrap();
    assert_eq!(kinds(&e), vec![ReportKind::StubDecrefBelowManaged]);
    assert_eq!(Env::count(s), MANAGED_REFCNT, "count repaired");
    assert!(e.bridge.debug_reports()[0]
        .message
        .contains("released a reference it did not own"));
}

#[test]
fn a_stub_kept_without_a_reference_is_reported_when_used_after_its_object_died() {
    let mut e = env();
    let o = e.managed(1);
    let r = e.root(o);
    // SAFETY: rooted. Native code keeps the borrowed pointer without increfing it.
    let stale = unsafe { e.bridge.to_native(r.get()).unwrap() };
    drop(r);
    e.collect();
    assert_eq!(e.bridge.stats().stubs_live, 0, "the stub was freed");
    decref(stale); // the poison (count 1) reaches 0: reported at once
    incref(stale); // found by the next check
    assert_eq!(e.bridge.debug_check(), Ok(1));
    // SAFETY: the pointer is checked, not dereferenced blindly.
    let err = unsafe { e.bridge.to_managed(&mut e.m, stale) }.unwrap_err();
    assert!(
        matches!(err, refbridge::BridgeError::DeadStub { .. }),
        "{err}"
    );
    assert_eq!(
        kinds(&e),
        vec![
            ReportKind::DeadStubUse,
            ReportKind::DeadStubUse,
            ReportKind::DeadStubUse
        ]
    );
    assert!(e.bridge.debug_reports()[0]
        .message
        .contains("test.ManagedNode"));
    // The stub was made by this test's `to_native` call.
    let made = e.bridge.debug_reports()[0]
        .made_at
        .as_ref()
        .unwrap()
        .location;
    assert_eq!(made.file(), file!());
}

#[test]
fn tracking_twice_is_reported() {
    let mut e = env();
    let n = e.native(1);
    // SAFETY: a tracked node.
    unsafe { refbridge::gc_track(n).unwrap() };
    assert_eq!(kinds(&e), vec![ReportKind::DoubleTrack]);
    assert_eq!(e.bridge.stats().tracked, 1);
    decref(n);
}

#[test]
fn leaks_are_reported_at_shutdown() {
    let mut e = env();
    let _leaked = make_node_here(&mut e, 1);
    let o = e.managed(2);
    let r = e.root(o);
    // SAFETY: rooted.
    let s = unsafe { e.bridge.to_native(r.get()).unwrap() };
    incref(s); // a native reference never released
    drop(r);
    let _buf = refbridge::mem_alloc(100).unwrap();
    let leaks = e.bridge.shutdown(&mut e.m).unwrap();
    let msgs: Vec<&str> = leaks.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(leaks.len(), 3, "{msgs:?}");
    assert!(leaks.iter().all(|l| l.kind == ReportKind::Leak));
    assert!(
        msgs[0].contains("test.Node") && msgs[0].contains("never freed"),
        "{msgs:?}"
    );
    let text = leaks[0].to_string();
    assert!(text.contains(&made_here()), "{text}");
    assert!(msgs[1].contains("still has 1 native reference"), "{msgs:?}");
    // The node (72 bytes with its GC header) and the buffer.
    assert!(
        msgs[2].starts_with("172 bytes of native memory in 2 blocks"),
        "{msgs:?}"
    );
}

#[test]
fn gc_a_lot_collects_at_every_nth_transition() {
    let mut e = Env::new(BridgeConfig {
        debug: true,
        gc_a_lot: Some(2),
        cycle_threshold: None,
        ..BridgeConfig::default()
    });
    let o = e.managed(1);
    let r = e.root(o);
    let before = e.heap.stats().full_collections;
    for _ in 0..10 {
        // SAFETY: rooted.
        unsafe { e.bridge.to_native(r.get()).unwrap() };
    }
    assert_eq!(e.heap.stats().full_collections - before, 5);
}

#[test]
fn with_the_mode_off_nothing_is_recorded_and_freed_memory_is_returned() {
    let mut e = Env::new(BridgeConfig {
        cycle_threshold: None,
        ..BridgeConfig::default()
    });
    let n = e.native(1);
    let bytes = e.bridge.stats().native_bytes;
    assert!(bytes > 0);
    decref(n);
    assert_eq!(e.bridge.stats().native_bytes, 0);
    assert!(e.bridge.debug_reports().is_empty());
    assert!(e.bridge.shutdown(&mut e.m).unwrap().is_empty());
}

/// A second `gc_del` of an object in debug mode: its poisoned type is no GC type, so
/// the GC entry points refused it as "not of a GC type" and nothing was reported (trial
/// B10). Now each use is a use-after-free report and a `Freed` error, the quarantine
/// left as it was.
#[test]
fn a_second_gc_del_or_track_of_a_freed_object_is_reported() {
    let mut e = env();
    let n = e.native(1);
    // SAFETY: a node of the bridge; freed once, then used as the misuse under test (the
    // quarantine keeps its memory).
    unsafe {
        refbridge::gc_untrack(n).unwrap();
        refbridge::gc_del(n).unwrap();
        for (what, r) in [
            ("PyObject_GC_Del", refbridge::gc_del(n)),
            ("PyObject_GC_Track", refbridge::gc_track(n)),
            ("PyObject_GC_UnTrack", refbridge::gc_untrack(n)),
        ] {
            assert_eq!(
                r,
                Err(refbridge::BridgeError::Freed {
                    what,
                    addr: n as usize
                })
            );
        }
    }
    assert_eq!(kinds(&e), vec![ReportKind::UseAfterFree; 3]);
    let r = &e.bridge.debug_reports()[0];
    assert_eq!(r.type_name, "test.Node");
    assert!(
        r.message.starts_with("PyObject_GC_Del of freed object"),
        "{}",
        r.message
    );
    assert!(r.made_at.is_some() && r.freed_at.is_some());
    assert_eq!(e.bridge.debug_check(), Ok(0), "the poison is intact");
}
