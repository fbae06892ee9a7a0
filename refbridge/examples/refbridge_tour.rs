//! A tour of the bridge: a managed type and how native code sees it (a stub), a native
//! container type written in Rust against the crate's API for CPython's operations (what
//! the C names `Py_DECREF`, `PyObject_GC_New`, ... call), objects referring to each other across the
//! boundary, a cycle through both sides freed by one collection, and the debug mode
//! catching a use after free. `RUST_LOG=refbridge=debug` shows the collections.
//!
//! `cargo run -p refbridge --example refbridge_tour`

use gc_core::{Heap, HeapConfig};
use refbridge::{decref, incref};
use refbridge::{
    is_stub, untag, Bridge, BridgeConfig, PyObject, PyTypeObject, PY_TPFLAGS_DEFAULT,
    PY_TPFLAGS_HAVE_GC,
};
use std::ffi::{c_int, c_void};

/// A native container with one reference, as a C extension would define it.
#[repr(C)]
struct Cell {
    ob_base: PyObject,
    item: *mut PyObject,
    name: &'static str,
}

unsafe extern "C" fn cell_traverse(
    op: *mut PyObject,
    visit: refbridge::VisitProc,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: a live cell (Py_VISIT).
    unsafe {
        let item = (*(op as *mut Cell)).item;
        if item.is_null() {
            0
        } else {
            visit.expect("visit")(item, arg)
        }
    }
}

unsafe extern "C" fn cell_clear(op: *mut PyObject) -> c_int {
    // SAFETY: a live cell (Py_CLEAR).
    unsafe {
        let item = std::mem::replace(&mut (*(op as *mut Cell)).item, std::ptr::null_mut());
        decref(item);
    }
    0
}

unsafe extern "C" fn cell_dealloc(op: *mut PyObject) {
    // SAFETY: a cell whose count reached 0.
    unsafe {
        println!("  tp_dealloc({})", (*(op as *mut Cell)).name);
        refbridge::gc_untrack(op).expect("a cell of the entered bridge");
        cell_clear(op);
        refbridge::gc_del(op).expect("a cell of the entered bridge");
    }
}

/// A new cell holding a new reference to `item` (may be null).
fn new_cell(ty: *mut PyTypeObject, name: &'static str, item: *mut PyObject) -> *mut PyObject {
    // SAFETY: a ready GC type; the fresh object is initialised before it is tracked.
    unsafe {
        let op = refbridge::gc_new(ty).expect("PyObject_GC_New").as_ptr();
        incref(item);
        let c = op as *mut Cell;
        std::ptr::addr_of_mut!((*c).item).write(item);
        std::ptr::addr_of_mut!((*c).name).write(name);
        refbridge::gc_track(op).expect("PyObject_GC_Track");
        op
    }
}

fn count(op: *mut PyObject) -> isize {
    // SAFETY: the tour passes live objects.
    unsafe { (*untag(op)).ob_refcnt }
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();

    let heap = Heap::new(HeapConfig::default()).expect("heap");
    let mut m = heap.attach().expect("attach");
    let bridge = Bridge::new(
        &heap,
        BridgeConfig {
            debug: true,
            cycle_threshold: None,
            ..BridgeConfig::default()
        },
    )
    .expect("bridge");
    let _entered = bridge.enter().expect("enter");

    // The managed type: one reference slot; native code sees its objects as `tour.Box`.
    let boxty = heap.new_layout_type("Box", 8, &[0]).expect("type");
    let native_box = Box::leak(Box::new(PyTypeObject::new(
        c"tour.Box",
        std::mem::size_of::<PyObject>(),
        PY_TPFLAGS_DEFAULT,
    )));
    let cellty = Box::leak(Box::new(PyTypeObject::new(
        c"tour.Cell",
        std::mem::size_of::<Cell>(),
        PY_TPFLAGS_DEFAULT | PY_TPFLAGS_HAVE_GC,
    )));
    cellty.tp_traverse = Some(cell_traverse);
    cellty.tp_clear = Some(cell_clear);
    cellty.tp_dealloc = Some(cell_dealloc);
    // SAFETY: leaked type objects outlive the bridge.
    unsafe {
        refbridge::type_ready(native_box).expect("PyType_Ready");
        refbridge::type_ready(cellty).expect("PyType_Ready");
        bridge
            .register_managed_type(boxty, native_box)
            .expect("register");
    }

    println!("1. A managed object handed to native code becomes a stub");
    let b = m.alloc_typed(8, boxty).expect("alloc");
    let root = heap.root(b);
    // SAFETY: rooted.
    let stub = unsafe { bridge.to_native(root.get()).expect("to_native") };
    println!(
        "  tagged: {}, count {}, type {}, same stub again: {}",
        is_stub(stub),
        count(stub),
        // SAFETY: a live stub.
        unsafe { refbridge::type_name_of(untag(stub)) },
        // SAFETY: rooted.
        unsafe { bridge.to_native(root.get()).expect("to_native") } == stub
    );
    println!(
        "  entry strong: {:?} (no native reference yet)",
        bridge.is_strong(stub)
    );

    println!("2. A native cell takes a reference to it: the entry becomes strong");
    let cell = new_cell(cellty, "cell", stub);
    println!(
        "  stub count {}, entry strong: {:?}",
        count(stub),
        bridge.is_strong(stub)
    );

    println!("3. The managed object refers back to the cell (through its mirror)");
    // SAFETY: the cell is live (we hold its reference).
    let mirror = unsafe { bridge.to_managed(&mut m, cell).expect("to_managed") };
    // SAFETY: the box is rooted, the mirror fresh; store through the barrier.
    unsafe { m.store_ref(root.get(), 0, Some(mirror)) };
    println!(
        "  cell count {} (1 ours + MANAGED_REFCNT for the mirror)",
        count(cell)
    );

    println!("4. Everything dropped: a cycle box -> mirror(cell) -> cell -> stub(box)");
    // SAFETY: our reference.
    unsafe { decref(cell) };
    drop(root);
    let weak = heap.new_weak_ref(b);
    let r = bridge.collect(&mut m).expect("collect");
    println!(
        "  collected: box freed {}, {} objects replicated, {} managed collections, stubs left {}",
        weak.is_cleared(),
        r.replicated,
        r.managed_collections,
        bridge.stats().stubs_live
    );

    println!("5. A pure native cycle: two cells referring to each other");
    let a = new_cell(cellty, "a", std::ptr::null_mut());
    let c = new_cell(cellty, "c", a);
    // SAFETY: a is live; a <- c, then a -> c.
    unsafe {
        incref(c);
        (*(a as *mut Cell)).item = c;
        decref(a);
        decref(c);
    }
    let r = bridge.collect(&mut m).expect("collect");
    println!("  native garbage: {}", r.native_garbage);

    println!("6. The debug mode: a decref of a freed object");
    let x = new_cell(cellty, "x", std::ptr::null_mut());
    // SAFETY: our reference, then a use after free (the debug mode keeps the memory).
    unsafe {
        decref(x);
        decref(x);
    }
    for report in bridge.debug_reports() {
        println!("  {:?}: {}", report.kind, report.message);
    }
    let leaks = bridge.shutdown(&mut m).expect("shutdown");
    println!("7. Shutdown: {} leaks", leaks.len());
}
