//! The refcount and object operations as a Rust API (`refbridge::incref`, `gc_new`,
//! `type_ready`, `mem_alloc`, the pending error, `Standalone`, ...): what the C ABI's
//! names forward to, used here without any C name. One rule per test; each failure is an
//! `Err` naming the function and the object, and leaves the pending error alone.

use refbridge::{
    is_stub, PyObject, PyTypeObject, PyVarObject, PY_TPFLAGS_DEFAULT, PY_TPFLAGS_HAVE_GC,
    PY_TPFLAGS_READY,
};
use refbridge::{Bridge, BridgeConfig, BridgeError, DefaultSlots, Standalone};
use std::cell::Cell;
use std::ffi::{c_int, c_void};

/// A GC container with one reference, written in Rust against the Rust API.
#[repr(C)]
struct Cell1 {
    ob_base: PyObject,
    item: *mut PyObject,
}

thread_local! {
    static DEALLOCATED: Cell<u32> = const { Cell::new(0) };
}

unsafe extern "C" fn cell_traverse(
    op: *mut PyObject,
    visit: refbridge::VisitProc,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: a live cell (Py_VISIT).
    unsafe {
        let item = (*(op as *mut Cell1)).item;
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
        let item = std::mem::replace(&mut (*(op as *mut Cell1)).item, std::ptr::null_mut());
        refbridge::decref(item);
    }
    0
}

unsafe extern "C" fn cell_dealloc(op: *mut PyObject) {
    DEALLOCATED.with(|d| d.set(d.get() + 1));
    // SAFETY: a cell whose count reached 0: untrack, drop its reference, free.
    unsafe {
        refbridge::gc_untrack(op).unwrap();
        cell_clear(op);
        refbridge::gc_del(op).unwrap();
    }
}

/// A ready GC container type (leaked: it outlives every bridge of the test).
fn cell_type() -> *mut PyTypeObject {
    let t = Box::leak(Box::new(PyTypeObject::new(
        c"api.Cell",
        std::mem::size_of::<Cell1>(),
        PY_TPFLAGS_DEFAULT | PY_TPFLAGS_HAVE_GC,
    )));
    t.tp_traverse = Some(cell_traverse);
    t.tp_clear = Some(cell_clear);
    t.tp_dealloc = Some(cell_dealloc);
    // SAFETY: a leaked type object with sound functions.
    unsafe { refbridge::type_ready(t).unwrap() };
    t
}

/// A ready plain (non-GC) type with the default slots.
fn plain_type(itemsize: isize) -> *mut PyTypeObject {
    let t = Box::leak(Box::new(PyTypeObject::new(
        c"api.Plain",
        std::mem::size_of::<PyObject>(),
        PY_TPFLAGS_DEFAULT,
    )));
    t.tp_itemsize = itemsize;
    // SAFETY: a leaked type object.
    unsafe { refbridge::type_ready(t).unwrap() };
    t
}

fn standalone() -> Standalone {
    Standalone::new(BridgeConfig {
        cycle_threshold: None,
        ..BridgeConfig::default()
    })
    .unwrap()
}

fn deallocated() -> u32 {
    DEALLOCATED.with(|d| d.replace(0))
}

#[test]
fn type_ready_checks_the_type_fills_in_the_default_slots_and_is_idempotent() {
    let t = Box::leak(Box::new(PyTypeObject::new(
        c"api.T",
        std::mem::size_of::<PyObject>(),
        0,
    )));
    // SAFETY: leaked type objects.
    unsafe {
        refbridge::type_ready(t).unwrap();
        assert_ne!(t.tp_flags & PY_TPFLAGS_READY, 0);
        let addr = |f: Option<unsafe extern "C" fn(*mut c_void)>| f.map(|f| f as usize);
        assert_eq!(
            t.tp_dealloc.map(|f| f as usize),
            DefaultSlots::RUST.dealloc.map(|f| f as usize)
        );
        assert_eq!(addr(t.tp_free), addr(DefaultSlots::RUST.free));
        refbridge::type_ready(t).unwrap();

        let gc = Box::leak(Box::new(PyTypeObject::new(
            c"api.NoTraverse",
            32,
            PY_TPFLAGS_HAVE_GC,
        )));
        let err = refbridge::type_ready(gc).unwrap_err();
        assert_eq!(
            err.to_string(),
            "PyType_Ready: type api.NoTraverse has Py_TPFLAGS_HAVE_GC but no tp_traverse"
        );
        assert_eq!(
            gc.tp_flags & PY_TPFLAGS_READY,
            0,
            "not ready after a failure"
        );
        let small = Box::leak(Box::new(PyTypeObject::new(c"api.Small", 8, 0)));
        assert!(matches!(
            refbridge::type_ready(small),
            Err(BridgeError::InvalidType { .. })
        ));
        assert_eq!(
            refbridge::type_ready(std::ptr::null_mut()),
            Err(BridgeError::NullType {
                what: "PyType_Ready"
            })
        );
        // Slots of one's own (the C ABI's PyType_Ready passes its C names).
        unsafe extern "C" fn my_free(p: *mut c_void) {
            // SAFETY: forwarded.
            unsafe { refbridge::mem_free(p as *mut u8).unwrap() }
        }
        let mine = Box::leak(Box::new(PyTypeObject::new(c"api.Mine", 16, 0)));
        let slots = DefaultSlots {
            free: Some(my_free),
            ..DefaultSlots::RUST
        };
        refbridge::type_ready_with(mine, &slots).unwrap();
        assert_eq!(addr(mine.tp_free), addr(Some(my_free)));
    }
    assert_eq!(
        refbridge::pending_error(),
        None,
        "errors are returned, not pending"
    );
}

/// A negative `tp_basicsize` (-16, or -8 for a GC type) passed the size check as a huge
/// unsigned number; the allocations then failed with "out of memory allocating
/// 18446744073709551600 bytes" (trial B9).
#[test]
fn type_ready_refuses_a_negative_basicsize() {
    for (name, size, flags) in [
        (c"api.Neg", -16, 0),
        (c"api.NegGc", -8, PY_TPFLAGS_DEFAULT | PY_TPFLAGS_HAVE_GC),
    ] {
        let t = Box::leak(Box::new(PyTypeObject::new(name, 0, flags)));
        t.tp_basicsize = size;
        t.tp_traverse = Some(cell_traverse);
        // SAFETY: a leaked type object with sound functions.
        let err = unsafe { refbridge::type_ready(t) }.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "PyType_Ready: type {} has tp_basicsize {size} (at least 16) and tp_itemsize 0",
                name.to_str().unwrap()
            )
        );
        assert_eq!(
            t.tp_flags & PY_TPFLAGS_READY,
            0,
            "not ready after a failure"
        );
    }
}

#[test]
fn a_gc_object_is_made_tracked_counted_and_freed_through_the_rust_api() {
    let s = standalone();
    let ty = cell_type();
    let before = refbridge::deallocs();
    // SAFETY: a ready GC type; the object is initialised (zeroed) before tracking.
    unsafe {
        let op = refbridge::gc_new(ty).unwrap().as_ptr();
        assert_eq!((*op).ob_refcnt, 1);
        assert_eq!(s.bridge().tracked(), 0, "not tracked yet");
        refbridge::gc_track(op).unwrap();
        refbridge::gc_track(op).unwrap(); // twice: ignored (reported in debug mode)
        assert_eq!(s.bridge().tracked(), 1);
        assert!(refbridge::native_bytes() > 0);
        refbridge::incref(op);
        refbridge::decref(op);
        assert_eq!(deallocated(), 0);
        refbridge::decref(op); // 0: tp_dealloc untracks and frees it
    }
    assert_eq!(deallocated(), 1);
    assert_eq!(refbridge::deallocs() - before, 1);
    assert_eq!(s.bridge().tracked(), 0);
    assert_eq!(refbridge::native_bytes(), 0);
    assert!(s.finish().is_empty());
}

#[test]
fn collect_frees_a_native_cycle_and_returns_the_deallocations() {
    let s = standalone();
    let ty = cell_type();
    // SAFETY: a ready GC type; each cell's item is initialised before tracking.
    unsafe {
        let a = refbridge::gc_new(ty).unwrap().as_ptr();
        let b = refbridge::gc_new(ty).unwrap().as_ptr();
        (*(a as *mut Cell1)).item = b;
        (*(b as *mut Cell1)).item = a;
        refbridge::incref(a);
        refbridge::incref(b);
        refbridge::gc_track(a).unwrap();
        refbridge::gc_track(b).unwrap();
        refbridge::decref(a);
        refbridge::decref(b);
    }
    assert_eq!(deallocated(), 0, "the cycle keeps both");
    assert_eq!(refbridge::collect(), Ok(2));
    assert_eq!(deallocated(), 2);
    assert_eq!(s.bridge().tracked(), 0);
    drop(s);
    assert_eq!(
        refbridge::collect(),
        Err(BridgeError::NoneEntered {
            what: "PyGC_Collect"
        })
    );
}

#[test]
fn variable_size_and_plain_objects() {
    let s = standalone();
    let var = Box::leak(Box::new(PyTypeObject::new(
        c"api.Var",
        std::mem::size_of::<PyVarObject>(),
        PY_TPFLAGS_HAVE_GC,
    )));
    var.tp_itemsize = 8;
    var.tp_traverse = Some(cell_traverse);
    let plain = plain_type(0);
    // SAFETY: ready types; objects freed once.
    unsafe {
        refbridge::type_ready(var).unwrap();
        let v = refbridge::gc_new_var(var, 5).unwrap().as_ptr();
        assert_eq!((*v).ob_size, 5);
        assert_eq!(
            refbridge::gc_new_var(var, -1),
            Err(BridgeError::BadItemCount {
                what: "PyObject_GC_NewVar",
                count: -1
            })
        );
        refbridge::gc_del(v as *mut PyObject).unwrap();
        let p = refbridge::object_new(plain).unwrap().as_ptr();
        assert_eq!((*p).ob_refcnt, 1);
        assert!(matches!(
            refbridge::object_new(var),
            Err(BridgeError::InvalidType { .. })
        ));
        assert!(
            matches!(refbridge::gc_new(plain), Err(BridgeError::InvalidType { ref reason, .. }) if reason == "lacks Py_TPFLAGS_HAVE_GC")
        );
        refbridge::decref(p); // the default tp_dealloc: tp_free = mem_free
    }
    assert_eq!(refbridge::native_bytes(), 0);
    assert!(s.finish().is_empty());
}

#[test]
fn an_unready_type_is_refused_with_its_name() {
    let _s = standalone();
    let t = Box::leak(Box::new(PyTypeObject::new(
        c"api.Unready",
        32,
        PY_TPFLAGS_HAVE_GC,
    )));
    // SAFETY: a type object.
    let err = unsafe { refbridge::gc_new(t) }.unwrap_err();
    assert_eq!(
        err.to_string(),
        "PyObject_GC_New: type api.Unready is not ready (call PyType_Ready)"
    );
    assert_eq!(err.exception(), "SystemError");
}

#[test]
fn gc_entry_points_refuse_what_is_not_their_bridges_gc_object() {
    let ty = cell_type();
    let plain = plain_type(0);
    let s = standalone();
    // SAFETY: live objects of ready types, or NULL.
    unsafe {
        assert_eq!(
            refbridge::gc_track(std::ptr::null_mut()),
            Err(BridgeError::NullObject {
                what: "PyObject_GC_Track"
            })
        );
        let p = refbridge::object_new(plain).unwrap().as_ptr();
        assert!(matches!(
            refbridge::gc_untrack(p),
            Err(BridgeError::NotGcObject { .. })
        ));
        refbridge::decref(p);
        let stub = (1usize << 63 | 0x1000) as *mut PyObject;
        assert!(is_stub(stub));
        assert!(matches!(
            refbridge::gc_del(stub),
            Err(BridgeError::StubNotAllowed { .. })
        ));
        // An object of this bridge, handed to another one.
        let op = refbridge::gc_new(ty).unwrap().as_ptr();
        let other = Bridge::new(s.heap(), BridgeConfig::default()).unwrap();
        let g = other.enter().unwrap();
        assert!(matches!(
            refbridge::gc_track(op),
            Err(BridgeError::OtherBridge { .. })
        ));
        drop(g);
        refbridge::gc_del(op).unwrap();
    }
    drop(s);
    let op = Box::leak(Box::new(Cell1 {
        ob_base: PyObject {
            ob_refcnt: 1,
            ob_type: ty,
        },
        item: std::ptr::null_mut(),
    })) as *mut Cell1 as *mut PyObject;
    // SAFETY: a live object of a GC type (not made by a bridge: refused before its
    // header is looked at).
    let err = unsafe { refbridge::gc_track(op) }.unwrap_err();
    assert_eq!(
        err,
        BridgeError::NoneEntered {
            what: "PyObject_GC_Track"
        }
    );
}

#[test]
fn memory_is_counted_to_the_entered_bridge_or_the_process() {
    let with_none = refbridge::native_bytes();
    let p = refbridge::mem_alloc(100).unwrap();
    assert_eq!(p.as_ptr() as usize % 16, 0);
    assert_eq!(refbridge::native_bytes(), with_none + 100);
    let s = standalone();
    let q = refbridge::mem_alloc(40).unwrap();
    assert_eq!(refbridge::native_bytes(), 40, "the bridge's own account");
    // SAFETY: blocks of these allocators, freed once.
    unsafe {
        let q = refbridge::mem_realloc(q.as_ptr(), 4000).unwrap();
        assert_eq!(s.bridge().memory().bytes(), 4000);
        refbridge::mem_free(q.as_ptr()).unwrap();
        refbridge::mem_free(p.as_ptr()).unwrap(); // credited to the account it was charged to
        refbridge::mem_free(std::ptr::null_mut()).unwrap();
    }
    assert_eq!(refbridge::native_bytes(), 0);
    drop(s);
    assert_eq!(refbridge::native_bytes(), with_none);
}

#[test]
fn an_allocation_over_the_cap_is_an_error_value_and_not_pending() {
    let s = Standalone::new(BridgeConfig {
        native_cap: 1 << 20,
        pressure_retries: 1,
        ..BridgeConfig::default()
    })
    .unwrap();
    let err = refbridge::mem_alloc(2 << 20).unwrap_err();
    // Larger than the cap itself: refused at once, no collection.
    assert!(
        matches!(err, BridgeError::MemoryCap { collections: 0, .. }),
        "{err}"
    );
    assert_eq!(err.exception(), "MemoryError");
    assert_eq!(refbridge::pending_error(), None);
    // What the C API does with it.
    refbridge::set_pending_error_from(&err);
    assert!(refbridge::pending_error()
        .unwrap()
        .starts_with("MemoryError: native memory cap exceeded"));
    drop(s);
}

#[test]
fn the_pending_error_is_the_entered_bridges_or_the_threads_own() {
    refbridge::set_pending_error("ValueError: the thread's");
    let s = standalone();
    assert_eq!(refbridge::pending_error(), None, "the bridge's is separate");
    refbridge::set_pending_error("TypeError: the bridge's");
    assert_eq!(
        s.bridge().pending_error().as_deref(),
        Some("TypeError: the bridge's")
    );
    // The string stays where it is until the error changes.
    let p1 = refbridge::with_pending_error(|e| e.unwrap().as_ptr());
    let p2 = refbridge::with_pending_error(|e| e.unwrap().as_ptr());
    assert_eq!(p1, p2);
    refbridge::clear_pending_error();
    assert_eq!(refbridge::pending_error(), None);
    drop(s);
    assert_eq!(
        refbridge::pending_error().as_deref(),
        Some("ValueError: the thread's")
    );
    refbridge::clear_pending_error();
    assert_eq!(refbridge::pending_error(), None);
}

#[test]
fn a_gc_objects_last_reference_dropped_with_no_bridge_entered_is_left_alone() {
    let ty = cell_type();
    let mut s = standalone();
    // SAFETY: a ready GC type.
    let op = unsafe { refbridge::gc_new(ty).unwrap().as_ptr() };
    // SAFETY: initialised (zeroed) cell.
    unsafe { refbridge::gc_track(op).unwrap() };
    let addr = op as usize;
    std::thread::spawn(move || {
        // SAFETY: the test owns the reference it drops here (the misuse under test).
        unsafe { refbridge::decref(addr as *mut PyObject) };
        let e = refbridge::pending_error().unwrap();
        assert!(e.contains("no refbridge entered"), "{e}");
    })
    .join()
    .unwrap();
    assert_eq!(deallocated(), 0, "left alone");
    // Its bridge's collector frees it (count 0, tracked, unreachable).
    let bridge = s.bridge().clone();
    bridge.collect(s.mutator()).unwrap();
    drop(bridge);
    assert_eq!(deallocated(), 1);
    assert!(s.finish().is_empty());
}

#[test]
fn current_is_the_bridge_entered_on_this_thread() {
    assert!(Bridge::current().is_none());
    let s = standalone();
    let c = Bridge::current().unwrap();
    assert!(
        std::ptr::eq(c.memory(), s.bridge().memory()),
        "the same bridge"
    );
    assert_eq!(c.config().cycle_threshold, None);
    drop(c);
    assert!(s.finish().is_empty());
    assert!(Bridge::current().is_none());
}

#[test]
fn standalone_finish_returns_the_leak_reports() {
    let ty = cell_type();
    let s = Standalone::new(BridgeConfig {
        debug: true,
        cycle_threshold: None,
        ..BridgeConfig::default()
    })
    .unwrap();
    // SAFETY: a ready GC type; the object is leaked on purpose (count 1).
    let op = unsafe { refbridge::gc_new(ty).unwrap().as_ptr() };
    let leaks = s.finish();
    assert!(
        leaks
            .iter()
            .any(|r| r.object == op as usize && r.type_name == "api.Cell"),
        "{leaks:?}"
    );
}

/// `mem_free` of a `malloc`'d block read an account address from `malloc`'s chunk header
/// and crashed (trial D5); a second free put a pooled block on its free list twice, so
/// that two later allocations shared it. Both are refused now, the block left alone.
#[test]
fn mem_free_and_realloc_refuse_what_is_not_a_live_block() {
    let s = standalone();
    // SAFETY: a malloc'd block (16 readable bytes before it: its chunk header), refused
    // without being touched, then freed with free().
    unsafe {
        let m = libc::malloc(64) as *mut u8;
        assert_eq!(
            refbridge::mem_free(m),
            Err(BridgeError::NotABlock {
                what: "PyMem_Free",
                addr: m as usize
            })
        );
        let err = refbridge::mem_realloc(m, 128).unwrap_err();
        assert_eq!(
            err,
            BridgeError::NotABlock {
                what: "PyMem_Realloc",
                addr: m as usize
            }
        );
        assert!(
            err.to_string()
                .contains("memory from malloc goes to free()"),
            "{err}"
        );
        assert_eq!(err.exception(), "SystemError");
        libc::free(m as *mut c_void);
    }
    assert_eq!(s.bridge().memory().bytes(), 0);
    // SAFETY: a block of mem_alloc, freed once, then handed back again (its memory stays
    // in the bridge's pool, readable).
    unsafe {
        let p = refbridge::mem_alloc(40).unwrap().as_ptr();
        refbridge::mem_free(p).unwrap();
        assert_eq!(
            refbridge::mem_free(p),
            Err(BridgeError::Freed {
                what: "PyMem_Free",
                addr: p as usize
            })
        );
        assert!(matches!(
            refbridge::mem_realloc(p, 80),
            Err(BridgeError::Freed { .. })
        ));
        let a = refbridge::mem_alloc(40).unwrap().as_ptr();
        let b = refbridge::mem_alloc(40).unwrap().as_ptr();
        assert_ne!(a, b, "the pool was not corrupted");
        refbridge::mem_free(a).unwrap();
        refbridge::mem_free(b).unwrap();
    }
    assert_eq!(s.bridge().memory().bytes(), 0);
}

/// A second `gc_del` without the debug mode was accepted silently: the object's pooled
/// block went on its free list twice (trial D8). The mark the first free leaves in the
/// block's header refuses it while the memory is not reused.
#[test]
fn a_second_gc_del_is_refused() {
    let ty = cell_type();
    let s = standalone();
    // SAFETY: an object of the bridge, freed once, then handed back again (its memory
    // stays in the bridge's pool, readable).
    unsafe {
        let op = refbridge::gc_new(ty).unwrap().as_ptr();
        refbridge::gc_del(op).unwrap();
        let bytes = s.bridge().memory().bytes();
        assert_eq!(
            refbridge::gc_del(op),
            Err(BridgeError::Freed {
                what: "PyObject_GC_Del",
                addr: op as usize
            })
        );
        assert!(matches!(
            refbridge::gc_track(op),
            Err(BridgeError::Freed { .. })
        ));
        assert_eq!(s.bridge().memory().bytes(), bytes, "not credited twice");
        let a = refbridge::gc_new(ty).unwrap().as_ptr();
        let b = refbridge::gc_new(ty).unwrap().as_ptr();
        assert_ne!(a, b, "the pool was not corrupted");
        refbridge::gc_del(a).unwrap();
        refbridge::gc_del(b).unwrap();
    }
    assert_eq!(s.bridge().memory().bytes(), 0);
}
