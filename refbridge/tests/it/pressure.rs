//! Native memory pressure: small managed objects that own big native buffers (through a
//! mirror of a native leaf holding a `PyMem_Malloc` buffer). The managed heap alone
//! never sees the buffers; the bridge's counted allocator forces collections when the
//! trigger is crossed, so usage stays under the cap; the trigger grows while live data
//! stays above it; an allocation that cannot fit under the cap fails with a clear error
//! after the configured number of collections, never an abort.

use crate::common::*;
use gc_core::Root;
use refbridge::{Bridge, BridgeConfig, BridgeError, MAX_PRESSURE_RETRIES};

const MIB: usize = 1 << 20;

/// Makes `n` managed objects, each owning a 1 MiB native buffer, keeping only the last
/// `window` alive. Returns the bridge's peak counted bytes.
fn churn(e: &mut Env, n: u64, window: usize) -> Result<usize, String> {
    let mut live: std::collections::VecDeque<Root> = std::collections::VecDeque::new();
    e.bridge.memory().reset_peak();
    for i in 0..n {
        let leaf = e.leaf(i + 1, MIB);
        if leaf.is_null() {
            return Err(e.bridge.pending_error().unwrap_or_default());
        }
        let owner = e.managed(i + 1);
        let r = e.root(owner);
        // SAFETY: the leaf is live and ours.
        let mirror = unsafe { e.bridge.to_managed(&mut e.m, leaf).unwrap() };
        e.set_managed_slot(r.get(), 0, Some(mirror));
        decref(leaf); // the managed owner holds it through the mirror only
        live.push_back(r);
        if live.len() > window {
            live.pop_front();
        }
    }
    Ok(e.bridge.memory().peak())
}

#[test]
fn small_managed_owners_of_big_buffers_stay_under_the_cap() {
    let mut e = Env::new(BridgeConfig {
        native_trigger: 16 * MIB,
        native_trigger_max: 32 * MIB,
        native_cap: 64 * MIB,
        cycle_threshold: None,
        ..BridgeConfig::default()
    });
    let peak = churn(&mut e, 1000, 4).unwrap();
    let s = e.bridge.stats();
    assert!(peak <= 64 * MIB, "peak {peak}");
    assert!(
        peak <= 17 * MIB + 4096,
        "peak {peak} stays near the 16 MiB trigger"
    );
    assert!(s.pressure_collections >= 50, "{s:?}");
    assert_eq!(
        s.native_trigger,
        16 * MIB,
        "usage drops after each collection"
    );
    assert!(take_freed().len() >= 990);
}

#[test]
fn without_the_trigger_nothing_frees_them() {
    // The same program with the trigger out of reach: the managed heap sees only
    // small objects and never collects; the buffers pile up (counted, never touched).
    let mut e = Env::new(BridgeConfig {
        native_trigger: 1 << 40,
        native_trigger_max: 1 << 40,
        cycle_threshold: None,
        ..BridgeConfig::default()
    });
    let peak = churn(&mut e, 300, 4).unwrap();
    assert!(peak >= 299 * MIB, "peak {peak}");
    assert_eq!(e.heap.stats().full_collections, 0);
    assert!(take_freed().is_empty());
    e.collect();
    assert_eq!(
        take_freed().len(),
        300,
        "an explicit collection frees them all"
    );
}

#[test]
fn the_trigger_doubles_while_live_data_stays_above_it() {
    let mut e = Env::new(BridgeConfig {
        native_trigger: 8 * MIB,
        native_trigger_max: 64 * MIB,
        cycle_threshold: None,
        ..BridgeConfig::default()
    });
    churn(&mut e, 40, 40).unwrap(); // 40 MiB all live
    let t = e.bridge.stats().native_trigger;
    assert!(t > 40 * MIB && t <= 64 * MIB, "trigger {t}");
    assert_eq!(t.count_ones(), 1, "doubled from 8 MiB: {t}");
}

#[test]
fn an_allocation_over_the_cap_fails_with_a_clear_error_after_the_retries() {
    let mut e = Env::new(BridgeConfig {
        native_trigger: 8 * MIB,
        native_trigger_max: 8 * MIB,
        native_cap: 20 * MIB,
        pressure_retries: 3,
        cycle_threshold: None,
        ..BridgeConfig::default()
    });
    let before = e.heap.stats().full_collections;
    let err = churn(&mut e, 100, 100).unwrap_err(); // everything stays alive
    assert!(
        err.starts_with("MemoryError: native memory cap exceeded: 1048576 bytes requested"),
        "{err}"
    );
    assert!(
        err.contains("cap 20971520 bytes (3 collections tried)"),
        "{err}"
    );
    assert!(e.heap.stats().full_collections - before >= 3);
    assert!(e.bridge.memory().bytes() <= 20 * MIB);
    // The program goes on: freeing makes room again.
    e.bridge.clear_error().unwrap();
    let leaf = e.leaf(1000, 1024);
    assert!(!leaf.is_null());
    decref(leaf);
}

/// `pressure_retries` was not validated: `u32::MAX` made an allocation over the cap run
/// collections for hours (trial D6). Above [`MAX_PRESSURE_RETRIES`] it is a bad
/// configuration, as the other fields' bad values are.
#[test]
fn pressure_retries_above_the_bound_is_a_bad_config() {
    let heap = gc_core::Heap::new(gc_core::HeapConfig::default()).unwrap();
    for retries in [MAX_PRESSURE_RETRIES + 1, u32::MAX] {
        let cfg = BridgeConfig {
            pressure_retries: retries,
            native_cap: MIB,
            ..BridgeConfig::default()
        };
        let err = Bridge::new(&heap, cfg).err().expect("refused");
        assert_eq!(
            err,
            BridgeError::BadConfig(format!(
                "pressure_retries ({retries}) must be at most {MAX_PRESSURE_RETRIES}"
            ))
        );
    }
    let cfg = BridgeConfig {
        pressure_retries: MAX_PRESSURE_RETRIES,
        ..BridgeConfig::default()
    };
    assert!(Bridge::new(&heap, cfg).is_ok());
}

/// A request larger than the cap itself, which no collection can make room for, ran
/// every retry first (10,000 collections, 88 ms, in the trial): it fails at once.
#[test]
fn a_request_larger_than_the_cap_fails_at_once() {
    let mut e = Env::new(BridgeConfig {
        native_cap: MIB,
        pressure_retries: MAX_PRESSURE_RETRIES,
        cycle_threshold: None,
        ..BridgeConfig::default()
    });
    let before = e.heap.stats().full_collections;
    let err = refbridge::mem_alloc(2 * MIB).unwrap_err();
    assert_eq!(
        err,
        BridgeError::MemoryCap {
            requested: 2 * MIB,
            in_use: 0,
            cap: MIB,
            collections: 0
        }
    );
    assert_eq!(e.heap.stats().full_collections, before, "no collection run");
    assert_eq!(e.bridge.stats().pressure_collections, 0);
    // Up to the cap is still possible.
    let p = refbridge::mem_alloc(MIB).unwrap();
    // SAFETY: a block of mem_alloc, freed once.
    unsafe { refbridge::mem_free(p.as_ptr()).unwrap() };
    let _ = &mut e;
}
