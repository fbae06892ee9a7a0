//! Per-operation costs of the bridge, for `cargo xtask bench refbridge` (build with
//! `--release`). Prints one JSON object:
//!
//! - `to_native_first_ns`: `to_native` of a managed object without a stub (stub and
//!   handle-table entry made, queue registration); `to_native_again_ns`: of one that has
//!   its stub (pointer identity lookup);
//! - `to_managed_first_ns`: `to_managed` of a native object without a mirror (a mirror
//!   allocated on gc-core, map entry, count raised, queue registration);
//!   `to_managed_again_ns`: with its mirror;
//! - `stub_native_bytes`: bytes of native memory per stub; `stub_total_bytes`: with the
//!   handle-table entry and the identity map, measured with 100,000 stubs;
//! - `queue_dealloc_ns`: per native object freed through the reference queue (mirror
//!   dead, count lowered to 0, `tp_dealloc` in the batch).
//!
//! `RB_BENCH_N` sets the number of objects per measurement (default 100,000).

mod common;

use gc_core::{CollectionKind, Heap, HeapConfig};
use refbridge::{BridgeError, PyObject, PyTypeObject, PY_TPFLAGS_DEFAULT, PY_TPFLAGS_HAVE_GC};
use std::ffi::{c_int, c_void};
use std::time::Instant;

#[repr(C)]
struct Node {
    ob_base: PyObject,
    next: *mut PyObject,
}

unsafe extern "C" fn traverse(
    op: *mut PyObject,
    visit: refbridge::VisitProc,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: a live node; Py_VISIT.
    unsafe {
        let n = (*(op as *mut Node)).next;
        if !n.is_null() {
            return visit.expect("visit")(n, arg);
        }
    }
    0
}

/// A failure as the pending error, as the C API reports it.
fn or_pending(r: Result<(), BridgeError>) {
    if let Err(e) = r {
        refbridge::set_pending_error_from(&e);
    }
}

unsafe extern "C" fn dealloc(op: *mut PyObject) {
    // SAFETY: a node whose count reached 0.
    unsafe {
        or_pending(refbridge::gc_untrack(op));
        let n = std::mem::replace(&mut (*(op as *mut Node)).next, std::ptr::null_mut());
        refbridge::decref(n);
        or_pending(refbridge::gc_del(op));
    }
}

fn main() {
    let n = common::env_usize("RB_BENCH_N", 100_000);
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let mut m = heap.attach().unwrap();
    let (bridge, mty) = common::bridge_with_managed_type(&heap);
    let _entered = bridge.enter().unwrap();
    let node_ty: &'static mut PyTypeObject = Box::leak(Box::new(PyTypeObject::new(
        c"bench.Node",
        std::mem::size_of::<Node>(),
        PY_TPFLAGS_DEFAULT | PY_TPFLAGS_HAVE_GC,
    )));
    node_ty.tp_traverse = Some(traverse);
    node_ty.tp_dealloc = Some(dealloc);
    // SAFETY: leaked type objects outlive the bridge.
    unsafe {
        refbridge::type_ready(node_ty).unwrap();
    }

    // Managed objects, rooted through one array object.
    let holder_ty = common::holder_type(&heap);
    let (_holder, objs) = common::rooted_objects(&heap, &mut m, holder_ty, mty, n);

    let table_before = bridge.handle_table_bytes();
    let t = Instant::now();
    let mut stubs = Vec::with_capacity(n);
    for &o in &objs {
        // SAFETY: rooted through the holder.
        stubs.push(unsafe { bridge.to_native(o).unwrap() });
    }
    let to_native_first = t.elapsed().as_nanos() as f64 / n as f64;
    let table_after = bridge.handle_table_bytes();
    let t = Instant::now();
    for &o in &objs {
        // SAFETY: as above.
        let p = unsafe { bridge.to_native(o).unwrap() };
        std::hint::black_box(p);
    }
    let to_native_again = t.elapsed().as_nanos() as f64 / n as f64;
    let stub_native = std::mem::size_of::<refbridge::Stub>() as f64;
    let stub_total = stub_native + (table_after - table_before) as f64 / n as f64;

    // Native objects: a chain, so that one reference keeps them all.
    let mut natives = Vec::with_capacity(n);
    for _ in 0..n {
        // SAFETY: a ready GC type.
        let p = unsafe { refbridge::gc_new(node_ty).unwrap().as_ptr() };
        // SAFETY: a fresh node.
        unsafe {
            (*(p as *mut Node)).next = std::ptr::null_mut();
            refbridge::gc_track(p).unwrap();
        }
        natives.push(p);
    }
    // Mirrors, kept alive by a managed holder.
    let mholder = m.alloc_typed(8 + 8 * n, holder_ty).unwrap();
    let mholder = heap.root(mholder);
    let t = Instant::now();
    for (i, &p) in natives.iter().enumerate() {
        // SAFETY: p is live (we hold its reference).
        let mirror = unsafe { bridge.to_managed(&mut m, p).unwrap() };
        // SAFETY: the holder has room; barrier for the store.
        unsafe {
            mholder.get().write_slot(8 + 8 * i, mirror.addr());
            mholder.get().write_slot(0, i + 1);
            m.wb(mholder.get(), mirror);
        }
    }
    let to_managed_first = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    for &p in &natives {
        // SAFETY: as above.
        let mirror = unsafe { bridge.to_managed(&mut m, p).unwrap() };
        std::hint::black_box(mirror);
    }
    let to_managed_again = t.elapsed().as_nanos() as f64 / n as f64;

    // Queue deallocation: drop our references (only the mirrors hold the natives), then
    // drop the mirrors' holder: one collection, then the drain frees them all.
    for &p in &natives {
        // SAFETY: our own reference.
        unsafe { refbridge::decref(p) };
    }
    drop(mholder);
    let before = refbridge::deallocs();
    let t = Instant::now();
    m.collect(CollectionKind::Full).unwrap();
    let gc_and_drain = t.elapsed().as_nanos() as f64;
    let freed = refbridge::deallocs() - before;
    assert_eq!(
        freed as usize, n,
        "every native object freed through the queue"
    );
    let queue_dealloc = gc_and_drain / n as f64;

    drop(stubs);
    println!(
        "{{\"to_native_first_ns\": {to_native_first:.1}, \"to_native_again_ns\": {to_native_again:.1}, \
\"to_managed_first_ns\": {to_managed_first:.1}, \"to_managed_again_ns\": {to_managed_again:.1}, \
\"stub_native_bytes\": {stub_native:.1}, \"stub_total_bytes\": {stub_total:.1}, \
\"queue_dealloc_ns\": {queue_dealloc:.1}, \"objects\": {n}}}"
    );
}
