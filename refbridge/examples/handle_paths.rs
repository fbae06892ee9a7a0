//! The handle table's read paths and what `crossbeam-epoch` would change on them (issue
//! 26, item 7: "crossbeam-epoch for read-mostly shared structures read on hot paths").
//! Build with `--release`. Prints one JSON object of per-operation medians (ns) over
//! interleaved rounds:
//!
//! - the bridge's paths that read the handle table under the bridge's state lock:
//!   `to_native_again_ns` (identity lookup of a managed object that has its stub),
//!   `to_managed_stub_ns` (a stub's managed object: the pointer checked against the stub
//!   chunks), `is_strong_ns` (a stub's entry and count);
//! - a model of the table's read (an entry by index, 100,000 entries, the same
//!   access pattern): `model_lock_ns` under a `parking_lot::Mutex` (today's), `model_epoch_ns`
//!   through a `crossbeam_epoch::Atomic` pinned per read (what an epoch-published table
//!   costs a reader), `model_bare_ns` with no synchronisation at all (the floor).
//!
//! The owner thread is the table's only reader while it runs (the collector's root
//! scanner reads it while the owner is stopped), so the lock is never contended on these
//! paths: an epoch-published table can only win if pinning costs less than an
//! uncontended lock and unlock.
//!
//! `RB_BENCH_N` sets the number of objects (default 100,000), `RB_BENCH_ROUNDS` the
//! rounds (default 7).

mod common;

use crossbeam_epoch::{self as epoch, Atomic, Owned};
use gc_core::{Heap, HeapConfig};
use parking_lot::Mutex;
use refbridge::PyObject;
use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// A handle-table entry, as in `handles.rs`.
#[derive(Clone, Copy, Default)]
struct Entry {
    obj: usize,
    flags: u32,
}

/// Nanoseconds per item of `f` run over `n` items.
fn per_op(n: usize, mut f: impl FnMut(usize)) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        f(i);
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

fn main() {
    let n = common::env_usize("RB_BENCH_N", 100_000);
    let rounds = common::env_usize("RB_BENCH_ROUNDS", 7);
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let mut m = heap.attach().unwrap();
    let (bridge, mty) = common::bridge_with_managed_type(&heap);
    let _entered = bridge.enter().unwrap();

    // Managed objects, rooted through one array object.
    let holder_ty = common::holder_type(&heap);
    let (_holder, objs) = common::rooted_objects(&heap, &mut m, holder_ty, mty, n);
    let stubs: Vec<*mut PyObject> = objs
        .iter()
        // SAFETY: rooted through the holder.
        .map(|&o| unsafe { bridge.to_native(o).unwrap() })
        .collect();

    // The model tables: the same entries, three ways.
    let entries: Vec<Entry> = (0..n)
        .map(|i| Entry {
            obj: objs[i].addr(),
            flags: 1,
        })
        .collect();
    let locked = Mutex::new(entries.clone());
    let published: Atomic<Vec<Entry>> = Atomic::new(entries.clone());
    let bare = entries;

    let mut r = [(); 6].map(|_| Vec::with_capacity(rounds));
    for _ in 0..rounds {
        r[0].push(per_op(n, |i| {
            // SAFETY: rooted through the holder.
            black_box(unsafe { bridge.to_native(objs[i]).unwrap() });
        }));
        r[1].push(per_op(n, |i| {
            // SAFETY: a live stub of the bridge, referenced from its entry.
            black_box(unsafe { bridge.to_managed(&mut m, stubs[i]).unwrap() });
        }));
        r[2].push(per_op(n, |i| {
            black_box(bridge.is_strong(stubs[i]));
        }));
        r[3].push(per_op(n, |i| {
            let e = locked.lock()[i];
            black_box(e.obj | e.flags as usize);
        }));
        r[4].push(per_op(n, |i| {
            let guard = epoch::pin();
            let table = published.load(Ordering::Acquire, &guard);
            // SAFETY: the table was published above and is only replaced (never while
            // readers run here) with its old value deferred past their epochs.
            let e = unsafe { table.deref() }[i];
            black_box(e.obj | e.flags as usize);
        }));
        r[5].push(per_op(n, |i| {
            let e = bare[i];
            black_box(e.obj | e.flags as usize);
        }));
    }
    // Growth as an epoch-published table would do it (copy, publish, defer the old):
    // exercised once, so the model's reads above are what such a table's readers pay.
    {
        let guard = epoch::pin();
        // SAFETY: as above.
        let mut grown = unsafe { published.load(Ordering::Acquire, &guard).deref() }.clone();
        grown.reserve_exact(grown.len());
        let old = published.swap(Owned::new(grown), Ordering::AcqRel, &guard);
        // SAFETY: `old` is unreachable from `published` now; readers pinned before the
        // swap finish before the deferred drop runs.
        unsafe { guard.defer_destroy(old) };
    }
    // SAFETY: no reader is left; the last table is dropped with its owner.
    drop(unsafe { published.into_owned() });
    let [to_native, to_managed, is_strong, lock, ep, bare] = r.map(median);
    println!(
        "{{\"to_native_again_ns\": {to_native:.1}, \"to_managed_stub_ns\": {to_managed:.1}, \
\"is_strong_ns\": {is_strong:.1}, \"model_lock_ns\": {lock:.1}, \"model_epoch_ns\": {ep:.1}, \
\"model_bare_ns\": {bare:.1}, \"objects\": {n}, \"rounds\": {rounds}}}"
    );
}
