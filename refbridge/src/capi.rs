//! The C ABI: CPython's own names for the memory-management subset, and the bridge's
//! own functions (`rb_` prefix), declared by `include/refbridge_python.h`. Each function
//! only converts and forwards to the bridge entered on the calling thread
//! ([`crate::Bridge::enter`]); panics never cross the boundary (the functions below do not
//! panic on any input they can check; failures return NULL / -1 and set the pending
//! error, read with `rb_last_error()`).
//!
//! The inline fast paths of `Py_INCREF`/`Py_DECREF` live in the header (CPython's add and
//! subtract on the untagged address, `_Py_Dealloc` at 0); `Py_IncRef` and `Py_DecRef` here
//! are the same out of line (CPython exports them too) and what Rust code uses.

#![allow(non_snake_case)]

use crate::abi::{
    from_gc_head, gc_head, is_stub, untag, PyGCHead, PyObject, PySsizeT, PyTypeObject, PyVarObject,
    GC_FLAGS, PY_TPFLAGS_HAVE_GC, PY_TPFLAGS_READY,
};
use crate::bridge::{current, Bridge, BridgeConfig, EnterGuard, Inner};
use crate::debug::{DebugReport, ReportKind};
use crate::mem;
use gc_core::{Heap, HeapConfig, Mutator};
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void, CStr, CString};

thread_local! {
    static DEALLOCS: Cell<u64> = const { Cell::new(0) };
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
    static STANDALONE: RefCell<Option<Standalone>> = const { RefCell::new(None) };
    static REPORT_TEXT: RefCell<Vec<CString>> = const { RefCell::new(Vec::new()) };
}

/// Native objects deallocated on this thread so far (for reports and tests).
pub fn deallocs() -> u64 {
    DEALLOCS.with(|d| d.get())
}

pub(crate) fn count_dealloc() {
    DEALLOCS.with(|d| d.set(d.get() + 1));
}

/// Sets the pending error: the entered bridge's, or this thread's when none is entered.
fn set_error(msg: &str) {
    match current() {
        Some(inner) => inner.set_error(msg),
        None => LAST_ERROR.with(|e| {
            *e.borrow_mut() = Some(CString::new(msg.replace('\0', "?")).expect("no NULs"))
        }),
    }
}

fn no_bridge(what: &str) {
    set_error(&format!(
        "{what}: no refbridge is entered on this thread (Bridge::enter or rb_init)"
    ));
}

// ---------------------------------------------------------------------------------------
// Reference counts.

/// CPython's `Py_IncRef` (accepts NULL): the header's `Py_INCREF` out of line, one add
/// (on the untagged address).
///
/// # Safety
/// `op` is NULL or a live object or stub.
#[no_mangle]
pub unsafe extern "C" fn Py_IncRef(op: *mut PyObject) {
    if !op.is_null() {
        // SAFETY: a live object (caller).
        unsafe { (*untag(op)).ob_refcnt += 1 };
    }
}

/// CPython's `Py_DecRef` (accepts NULL): the header's `Py_DECREF` out of line, one
/// subtract and `_Py_Dealloc` at 0.
///
/// # Safety
/// `op` is NULL or a live object or stub the caller owns a reference to.
#[no_mangle]
pub unsafe extern "C" fn Py_DecRef(op: *mut PyObject) {
    if op.is_null() {
        return;
    }
    // SAFETY: a live object (caller).
    let c = unsafe {
        let o = untag(op);
        (*o).ob_refcnt -= 1;
        (*o).ob_refcnt
    };
    if c == 0 {
        // SAFETY: forwarded.
        unsafe { _Py_Dealloc(op) };
    }
}

/// CPython's `_Py_Dealloc`, the one slow path of `Py_DECREF`: a count reached 0. A native
/// object is deallocated (its `tp_dealloc`, nested at most `TRASHCAN_DEPTH` deep); a
/// stub (tagged pointer) whose managed object died is freed; a stub whose managed object
/// lives was over-released by native code (reported, count repaired).
///
/// # Safety
/// `op` is a live native object or stub whose count is 0.
#[no_mangle]
pub unsafe extern "C" fn _Py_Dealloc(op: *mut PyObject) {
    match current() {
        // SAFETY: forwarded.
        Some(inner) => unsafe { inner.decref_slow(op) },
        None => {
            // SAFETY: a live object (caller).
            if is_stub(op) || unsafe { (*op).ob_refcnt } != 0 {
                return;
            }
            // SAFETY: as above.
            if unsafe { &*(*op).ob_type }.is_gc() {
                // GC objects belong to a bridge's list, which only a thread with that
                // bridge entered may change: deallocating here would leave the object
                // linked there, freed (deallocated again by that bridge's collector).
                // SAFETY: as above.
                let name = unsafe { &*(*op).ob_type }.name();
                let msg = format!(
                    "SystemError: Py_DECREF dropped the last reference to {:#x} of type {name} on a thread with no refbridge entered; GC objects are deallocated only with their bridge entered (left alone)",
                    op as usize
                );
                eprintln!("refbridge: {msg}");
                set_error(&msg);
                return;
            }
            // SAFETY: a native object at 0 is deallocated directly.
            unsafe { crate::bridge::call_dealloc(op) };
        }
    }
}

// ---------------------------------------------------------------------------------------
// Memory.

fn alloc(size: usize, zero: bool) -> *mut u8 {
    match current() {
        Some(inner) => inner.alloc_native(size, zero),
        None => {
            // SAFETY: the global account is static.
            let p = unsafe { mem::alloc(&mem::GLOBAL, size, zero) };
            if p.is_null() {
                set_error(&format!(
                    "MemoryError: out of memory allocating {size} bytes"
                ));
            }
            p
        }
    }
}

/// `PyMem_Malloc`: counted (and subject to the bridge's pressure policy).
#[no_mangle]
pub extern "C" fn PyMem_Malloc(size: usize) -> *mut c_void {
    alloc(size, false) as *mut c_void
}

/// `PyMem_Realloc`.
///
/// # Safety
/// `p` is NULL or a live block of these allocators.
#[no_mangle]
pub unsafe extern "C" fn PyMem_Realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return PyMem_Malloc(size);
    }
    // SAFETY: a counted block (caller).
    let old = unsafe { mem::block_size(p as *const u8) };
    if size > old {
        if let Some(inner) = current() {
            // Apply the pressure policy to the growth.
            let probe = inner.alloc_native(0, false);
            if probe.is_null() {
                return std::ptr::null_mut();
            }
            // SAFETY: the probe block was just allocated.
            unsafe { mem::free(probe) };
        }
    }
    let account = current().map_or(&mem::GLOBAL as *const _, |i| &*i.account as *const _);
    // SAFETY: forwarded; the account outlives its blocks.
    let n = unsafe { mem::realloc(account, p as *mut u8, size) };
    if n.is_null() {
        set_error(&format!(
            "MemoryError: out of memory reallocating to {size} bytes"
        ));
    }
    n as *mut c_void
}

/// `PyMem_Free`.
///
/// # Safety
/// `p` is NULL or a live block of these allocators.
#[no_mangle]
pub unsafe extern "C" fn PyMem_Free(p: *mut c_void) {
    // SAFETY: forwarded.
    unsafe { PyObject_Free(p) }
}

/// `PyObject_Malloc`.
#[no_mangle]
pub extern "C" fn PyObject_Malloc(size: usize) -> *mut c_void {
    PyMem_Malloc(size)
}

/// `PyObject_Realloc`.
///
/// # Safety
/// As `PyMem_Realloc`.
#[no_mangle]
pub unsafe extern "C" fn PyObject_Realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { PyMem_Realloc(p, size) }
}

/// `PyObject_Free` (and `PyObject_Del`): frees a block or a non-GC object. In debug
/// mode objects go to the quarantine and a second free is reported.
///
/// # Safety
/// `p` is NULL or a live block of these allocators.
#[no_mangle]
pub unsafe extern "C" fn PyObject_Free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    // Only a bridge in debug mode looks at frees: no thread-local lookup without one.
    let debug = crate::bridge::DEBUG_BRIDGES.load(std::sync::atomic::Ordering::Relaxed) != 0;
    if let Some(inner) = if debug { current() } else { None } {
        if let Some(d) = &inner.debug {
            let mut d = d.lock();
            let op = p as *mut PyObject;
            if d.is_freed(op) {
                d.use_after_free(op, "PyObject_Free");
                return;
            }
            if d.made_at(op).is_some() {
                // SAFETY: a live object in a counted block.
                if let Some(old) = unsafe { d.object_freed(op, p as *mut u8) } {
                    drop(d);
                    // SAFETY: a block leaving the quarantine.
                    unsafe { mem::free(old) };
                }
                return;
            }
        }
    }
    // SAFETY: a counted block (caller).
    unsafe { mem::free(p as *mut u8) };
}

// ---------------------------------------------------------------------------------------
// Objects.

/// Checks a type before allocating an instance.
///
/// # Safety
/// `tp` is NULL or a `PyTypeObject`.
unsafe fn check_type(tp: *mut PyTypeObject, gc: bool, what: &str) -> Result<(), ()> {
    if tp.is_null() {
        set_error(&format!("SystemError: {what}: NULL type"));
        return Err(());
    }
    // SAFETY: a type object (caller).
    let t = unsafe { &*tp };
    if t.tp_flags & PY_TPFLAGS_READY == 0 {
        set_error(&format!(
            "SystemError: {what}: type {} is not ready (call PyType_Ready)",
            t.name()
        ));
        return Err(());
    }
    if t.is_gc() != gc {
        set_error(&format!(
            "SystemError: {what}: type {} {} Py_TPFLAGS_HAVE_GC",
            t.name(),
            if gc { "lacks" } else { "has" }
        ));
        return Err(());
    }
    Ok(())
}

/// Allocates a GC object of `size` bytes (header included) and initialises its header.
///
/// # Safety
/// `tp` is a ready GC type.
unsafe fn gc_alloc(tp: *mut PyTypeObject, size: usize) -> *mut PyObject {
    let Some(inner) = current() else {
        no_bridge("PyObject_GC_New");
        return std::ptr::null_mut();
    };
    crate::cycle::maybe_auto_collect(inner);
    let Some(total) = size.checked_add(std::mem::size_of::<PyGCHead>()) else {
        set_error("MemoryError: object size overflow");
        return std::ptr::null_mut();
    };
    let g = inner.alloc_native(total, true) as *mut PyGCHead;
    if g.is_null() {
        return std::ptr::null_mut();
    }
    let op = from_gc_head(g);
    // SAFETY: a fresh zeroed block of `total` bytes.
    unsafe {
        (*op).ob_refcnt = 1;
        (*op).ob_type = tp;
    }
    let l = &inner.local.0;
    l.gc_allocs.set(l.gc_allocs.get() + 1);
    if let Some(d) = &inner.debug {
        // SAFETY: tp is a valid type (caller).
        d.lock().object_made(op, unsafe { (*tp).name() });
    }
    op
}

fn var_size(tp: &PyTypeObject, n: PySsizeT) -> Option<usize> {
    let items = usize::try_from(n)
        .ok()?
        .checked_mul(tp.tp_itemsize.max(0) as usize)?;
    let size = (tp.tp_basicsize as usize).checked_add(items)?;
    Some(size.checked_add(7)? & !7)
}

/// Checks an object handed to a GC entry point (`PyObject_GC_Track`, `_UnTrack`,
/// `_Del`): not NULL, not a stub, of a GC type, and allocated by the bridge entered on
/// this thread (its list and counts are that bridge's: unlinking an object of another
/// bridge, or of none, would corrupt both). On failure sets the error and returns
/// `None`: the caller then leaves the object alone (a leak, never corruption).
///
/// # Safety
/// `op` is NULL or points to an object.
unsafe fn gc_checked<'a>(op: *mut PyObject, what: &str) -> Option<&'a Inner> {
    if op.is_null() {
        set_error(&format!("SystemError: {what}: NULL object"));
        return None;
    }
    if is_stub(op) {
        set_error(&format!(
            "SystemError: {what}: {:#x} is a handle of a managed object, not a native GC object",
            op as usize
        ));
        return None;
    }
    // SAFETY: an object has a type (caller).
    let tp = unsafe { &*(*op).ob_type };
    if !tp.is_gc() {
        set_error(&format!(
            "SystemError: {what}: object {:#x} of type {} is not of a GC type (Py_TPFLAGS_HAVE_GC)",
            op as usize,
            tp.name()
        ));
        return None;
    }
    let Some(inner) = current() else {
        no_bridge(what);
        return None;
    };
    // SAFETY: a GC object's block starts at its head.
    let owner = unsafe { mem::block_account(gc_head(op) as *const u8) };
    if owner != std::sync::Arc::as_ptr(&inner.account) as usize {
        set_error(&format!(
            "SystemError: {what}: object {:#x} of type {} was allocated by another bridge than the one entered on this thread (left alone)",
            op as usize,
            tp.name()
        ));
        return None;
    }
    Some(inner)
}

/// CPython's `_PyObject_GC_New` (behind `PyObject_GC_New(type, typeobj)`): a new object
/// of GC type `tp`, count 1, not tracked yet.
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn _PyObject_GC_New(tp: *mut PyTypeObject) -> *mut PyObject {
    // SAFETY: forwarded.
    if unsafe { check_type(tp, true, "PyObject_GC_New") }.is_err() {
        return std::ptr::null_mut();
    }
    // SAFETY: a ready GC type.
    unsafe { gc_alloc(tp, (*tp).tp_basicsize as usize) }
}

/// CPython's `_PyObject_GC_NewVar`: a variable-size GC object with `n` items.
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn _PyObject_GC_NewVar(
    tp: *mut PyTypeObject,
    n: PySsizeT,
) -> *mut PyVarObject {
    // SAFETY: forwarded.
    if unsafe { check_type(tp, true, "PyObject_GC_NewVar") }.is_err() {
        return std::ptr::null_mut();
    }
    // SAFETY: a ready type.
    let Some(size) = var_size(unsafe { &*tp }, n) else {
        set_error(&format!(
            "SystemError: PyObject_GC_NewVar: bad item count {n}"
        ));
        return std::ptr::null_mut();
    };
    // SAFETY: a ready GC type.
    let op = unsafe { gc_alloc(tp, size) } as *mut PyVarObject;
    if !op.is_null() {
        // SAFETY: a fresh var object.
        unsafe { (*op).ob_size = n };
    }
    op
}

/// CPython's `_PyObject_New` (behind `PyObject_New(type, typeobj)`): a new object of
/// non-GC type `tp`, count 1.
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn _PyObject_New(tp: *mut PyTypeObject) -> *mut PyObject {
    // SAFETY: forwarded.
    if unsafe { check_type(tp, false, "PyObject_New") }.is_err() {
        return std::ptr::null_mut();
    }
    // SAFETY: a ready type.
    let size = unsafe { (*tp).tp_basicsize } as usize;
    let op = alloc(size, true) as *mut PyObject;
    if op.is_null() {
        return op;
    }
    // SAFETY: a fresh zeroed block.
    unsafe {
        (*op).ob_refcnt = 1;
        (*op).ob_type = tp;
    }
    if let Some(inner) = current() {
        if let Some(d) = &inner.debug {
            // SAFETY: a valid type.
            d.lock().object_made(op, unsafe { (*tp).name() });
        }
    }
    op
}

/// `PyObject_GC_Track`: the cycle collector considers the object from now on.
///
/// # Safety
/// `op` is a live object of a GC type made by `PyObject_GC_New(Var)`.
#[no_mangle]
pub unsafe extern "C" fn PyObject_GC_Track(op: *mut c_void) {
    let op = op as *mut PyObject;
    // SAFETY: forwarded (caller).
    let Some(inner) = (unsafe { gc_checked(op, "PyObject_GC_Track") }) else {
        return;
    };
    if let Some(d) = &inner.debug {
        let mut d = d.lock();
        if d.is_freed(op) {
            d.use_after_free(op, "PyObject_GC_Track");
            return;
        }
    }
    // SAFETY: a GC object has a head (caller).
    unsafe {
        let g = gc_head(op);
        if (*g).gc_next != 0 {
            if let Some(d) = &inner.debug {
                let mut d = d.lock();
                let made = d.made_at(op);
                d.report(DebugReport {
                    kind: ReportKind::DoubleTrack,
                    object: op as usize,
                    type_name: crate::debug::type_name_of(op),
                    message: format!(
                        "PyObject_GC_Track of {:#x}, already tracked by the garbage collector",
                        op as usize
                    ),
                    made_at: made,
                    freed_at: None,
                });
            }
            return;
        }
        let s = inner.local.0.gc_list;
        let last = ((*s).gc_prev & !GC_FLAGS) as *mut PyGCHead;
        (*g).gc_prev = last as usize | ((*g).gc_prev & GC_FLAGS);
        (*g).gc_next = s as usize;
        (*last).gc_next = g as usize;
        (*s).gc_prev = g as usize;
    }
    let l = &inner.local.0;
    l.tracked.set(l.tracked.get() + 1);
}

/// Unlinks a tracked object from the list.
///
/// # Safety
/// `g` is the head of a tracked object of `inner`'s list.
unsafe fn unlink(inner: &Inner, g: *mut PyGCHead) {
    // SAFETY: a tracked object's neighbours are list members (caller).
    unsafe {
        let prev = ((*g).gc_prev & !GC_FLAGS) as *mut PyGCHead;
        let next = (*g).gc_next as *mut PyGCHead;
        (*prev).gc_next = next as usize;
        (*next).gc_prev = prev as usize | ((*next).gc_prev & GC_FLAGS);
        (*g).gc_next = 0;
        (*g).gc_prev &= GC_FLAGS;
    }
    let l = &inner.local.0;
    l.tracked.set(l.tracked.get() - 1);
}

/// `PyObject_GC_UnTrack`: no longer considered by the cycle collector (no-op if not
/// tracked).
///
/// # Safety
/// `op` is a live object of a GC type.
#[no_mangle]
pub unsafe extern "C" fn PyObject_GC_UnTrack(op: *mut c_void) {
    // SAFETY: forwarded (caller).
    let Some(inner) = (unsafe { gc_checked(op as *mut PyObject, "PyObject_GC_UnTrack") }) else {
        return;
    };
    // SAFETY: a GC object has a head (caller).
    unsafe {
        let g = gc_head(op as *mut PyObject);
        if (*g).gc_next != 0 {
            unlink(inner, g);
        }
    }
}

/// `PyObject_GC_Del`: frees a GC object (untracking it first if needed).
///
/// # Safety
/// `op` is NULL or a live GC object nobody references any more.
#[no_mangle]
pub unsafe extern "C" fn PyObject_GC_Del(op: *mut c_void) {
    if op.is_null() {
        return;
    }
    let op = op as *mut PyObject;
    // SAFETY: a GC object has a head (caller).
    let g = unsafe { gc_head(op) };
    // SAFETY: forwarded (caller).
    let Some(inner) = (unsafe { gc_checked(op, "PyObject_GC_Del") }) else {
        return;
    };
    if let Some(d) = &inner.debug {
        let mut d = d.lock();
        if d.is_freed(op) {
            d.use_after_free(op, "PyObject_GC_Del");
            return;
        }
    }
    // SAFETY: as above.
    unsafe {
        if (*g).gc_next != 0 {
            unlink(inner, g);
        }
    }
    let l = &inner.local.0;
    l.gc_allocs.set(l.gc_allocs.get().saturating_sub(1));
    if let Some(d) = &inner.debug {
        // SAFETY: a live object in the counted block starting at its head.
        let old = unsafe { d.lock().object_freed(op, g as *mut u8) };
        if let Some(old) = old {
            // SAFETY: a block leaving the quarantine.
            unsafe { mem::free(old) };
        }
        return;
    }
    // SAFETY: the block starts at the head.
    unsafe { mem::free(g as *mut u8) };
}

/// The `tp_dealloc` of types that define none: untrack (GC types) and `tp_free`.
///
/// # Safety
/// `op` is a live object with count 0.
#[no_mangle]
pub unsafe extern "C" fn rb_default_dealloc(op: *mut PyObject) {
    // SAFETY: a live object (caller).
    unsafe {
        let tp = (*op).ob_type;
        if (*tp).is_gc() {
            PyObject_GC_UnTrack(op as *mut c_void);
        }
        match (*tp).tp_free {
            Some(f) => f(op as *mut c_void),
            None if (*tp).is_gc() => PyObject_GC_Del(op as *mut c_void),
            None => PyObject_Free(op as *mut c_void),
        }
    }
}

/// `PyType_Ready` for the supported fields: checks the type and fills in the defaults
/// (`tp_free`: `PyObject_GC_Del` or `PyObject_Free`; `tp_dealloc`: untrack and free).
/// 0 on success, -1 with the pending error set.
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn PyType_Ready(tp: *mut PyTypeObject) -> c_int {
    if tp.is_null() {
        set_error("SystemError: PyType_Ready(NULL)");
        return -1;
    }
    // SAFETY: a type object (caller).
    let t = unsafe { &mut *tp };
    if t.tp_flags & PY_TPFLAGS_READY != 0 {
        return 0;
    }
    if t.tp_name.is_null() {
        set_error("SystemError: PyType_Ready: type has no tp_name");
        return -1;
    }
    if (t.tp_basicsize as usize) < std::mem::size_of::<PyObject>() || t.tp_itemsize < 0 {
        set_error(&format!(
            "SystemError: PyType_Ready: type {} has tp_basicsize {} (at least {}) and tp_itemsize {}",
            t.name(),
            t.tp_basicsize,
            std::mem::size_of::<PyObject>(),
            t.tp_itemsize
        ));
        return -1;
    }
    if t.tp_flags & PY_TPFLAGS_HAVE_GC != 0 && t.tp_traverse.is_none() {
        set_error(&format!(
            "SystemError: PyType_Ready: type {} has Py_TPFLAGS_HAVE_GC but no tp_traverse",
            t.name()
        ));
        return -1;
    }
    if t.tp_free.is_none() {
        t.tp_free = Some(if t.is_gc() {
            PyObject_GC_Del
        } else {
            PyObject_Free
        });
    }
    if t.tp_dealloc.is_none() {
        t.tp_dealloc = Some(rb_default_dealloc);
    }
    t.tp_flags |= PY_TPFLAGS_READY;
    0
}

/// `PyGC_Collect`: a full collection of the entered bridge ([`Bridge::collect`]; only the
/// native cycle collection when the thread is not attached to the heap). Returns the
/// number of native objects deallocated, or -1 (pending error set).
#[no_mangle]
pub extern "C" fn PyGC_Collect() -> PySsizeT {
    let Some(inner) = current() else {
        no_bridge("PyGC_Collect");
        return -1;
    };
    match inner.heap.current_mutator() {
        Ok(mut m) => match inner.collect(&mut m) {
            Ok(r) => r.native_freed as PySsizeT,
            Err(e) => {
                inner.set_error(&format!("RuntimeError: PyGC_Collect: {e}"));
                -1
            }
        },
        Err(_) => {
            let before = deallocs();
            inner.drain();
            crate::cycle::collect_cycles(inner, None);
            inner.drain();
            (deallocs() - before) as PySsizeT
        }
    }
}

// ---------------------------------------------------------------------------------------
// The bridge's own functions.

/// The pending error's message (CPython's error indicator), or NULL. Valid until the
/// error changes.
#[no_mangle]
pub extern "C" fn rb_last_error() -> *const c_char {
    match current() {
        Some(inner) => inner
            .local
            .0
            .error
            .borrow()
            .as_ref()
            .map_or(std::ptr::null(), |c| c.as_ptr()),
        None => LAST_ERROR.with(|e| e.borrow().as_ref().map_or(std::ptr::null(), |c| c.as_ptr())),
    }
}

/// Sets the pending error (NULL: "error").
///
/// # Safety
/// `msg` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rb_err_set(msg: *const c_char) {
    let m = if msg.is_null() {
        "error".to_string()
    } else {
        // SAFETY: a C string (caller).
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    };
    set_error(&m);
}

/// Clears the pending error.
#[no_mangle]
pub extern "C" fn rb_err_clear() {
    match current() {
        Some(inner) => {
            inner.local.0.error.borrow_mut().take();
        }
        None => LAST_ERROR.with(|e| {
            e.borrow_mut().take();
        }),
    }
}

/// Counted native bytes in use (the entered bridge's, or those allocated with none).
#[no_mangle]
pub extern "C" fn rb_native_bytes() -> usize {
    current().map_or(mem::GLOBAL.bytes(), |i| i.account.bytes())
}

/// Objects tracked by the entered bridge's cycle collector (-1: none entered).
#[no_mangle]
pub extern "C" fn rb_tracked_objects() -> PySsizeT {
    current().map_or(-1, |i| i.local.0.tracked.get() as PySsizeT)
}

/// Native objects deallocated on this thread so far.
#[no_mangle]
pub extern "C" fn rb_deallocs() -> u64 {
    deallocs()
}

/// The debug mode's reports so far (0 when off or no bridge is entered).
#[no_mangle]
pub extern "C" fn rb_debug_report_count() -> usize {
    current()
        .and_then(|i| i.debug.as_ref().map(|d| d.lock().reports.len()))
        .unwrap_or(0)
}

/// Report `i` as text (kind, message, where the object was made and freed), or NULL.
/// Valid until the next call of this function on the thread.
#[no_mangle]
pub extern "C" fn rb_debug_report(i: usize) -> *const c_char {
    let Some(text) = current()
        .and_then(|inner| {
            inner
                .debug
                .as_ref()
                .and_then(|d| d.lock().reports.get(i).cloned())
        })
        .map(|r| r.to_string())
    else {
        return std::ptr::null();
    };
    REPORT_TEXT.with(|t| {
        let mut t = t.borrow_mut();
        t.clear();
        t.push(CString::new(text.replace('\0', "?")).expect("no NULs"));
        t[0].as_ptr()
    })
}

/// Checks the debug mode's quarantine now; returns the number of new reports.
#[no_mangle]
pub extern "C" fn rb_debug_check() -> usize {
    current()
        .and_then(|i| i.debug.as_ref().map(|d| d.lock().check_quarantine()))
        .unwrap_or(0)
}

/// `rb_init` flag: debug mode.
pub const RB_DEBUG: c_int = 1;
/// `rb_init` flag: no automatic cycle collection.
pub const RB_NO_AUTO_COLLECT: c_int = 2;

/// A heap, this thread's attachment and an entered bridge, for C programs.
struct Standalone {
    guard: Option<EnterGuard>,
    bridge: Bridge,
    mutator: Option<Mutator>,
    _heap: Heap,
}

/// For C programs without a Rust host: makes a heap, attaches this thread, makes a
/// bridge (`flags`: `RB_DEBUG`, `RB_NO_AUTO_COLLECT`) and enters it. 0 on success, -1
/// with `rb_last_error()` set.
#[no_mangle]
pub extern "C" fn rb_init(flags: c_int) -> c_int {
    if STANDALONE.with(|s| s.borrow().is_some()) {
        set_error("rb_init: already initialised on this thread");
        return -1;
    }
    let run = || -> Result<Standalone, String> {
        let heap = Heap::new(HeapConfig::default()).map_err(|e| e.to_string())?;
        let mutator = heap.attach().map_err(|e| e.to_string())?;
        let config = BridgeConfig {
            debug: flags & RB_DEBUG != 0,
            cycle_threshold: if flags & RB_NO_AUTO_COLLECT != 0 {
                None
            } else {
                Some(700)
            },
            ..BridgeConfig::default()
        };
        let bridge = Bridge::new(&heap, config).map_err(|e| e.to_string())?;
        let guard = bridge.enter().map_err(|e| e.to_string())?;
        Ok(Standalone {
            guard: Some(guard),
            bridge,
            mutator: Some(mutator),
            _heap: heap,
        })
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(s)) => {
            STANDALONE.with(|x| *x.borrow_mut() = Some(s));
            0
        }
        Ok(Err(e)) => {
            set_error(&format!("rb_init: {e}"));
            -1
        }
        Err(_) => {
            set_error("rb_init: internal error");
            -1
        }
    }
}

/// Ends what `rb_init` started: a full collection, then (debug mode) the leak check,
/// whose reports are written to stderr. Returns the number of leak reports, or -1 if
/// `rb_init` was not called on this thread.
#[no_mangle]
pub extern "C" fn rb_fini() -> c_int {
    let Some(mut s) = STANDALONE.with(|x| x.borrow_mut().take()) else {
        set_error("rb_fini: rb_init was not called on this thread");
        return -1;
    };
    let mut m = s.mutator.take().expect("set by rb_init");
    let leaks = s.bridge.shutdown(&mut m).unwrap_or_default();
    for r in &leaks {
        eprint!("{r}");
    }
    drop(s.guard.take());
    drop(s);
    drop(m);
    leaks.len() as c_int
}

/// Every function of the C ABI with its address, for loaders that resolve a C
/// extension's symbols themselves (elf-loader's `SymbolProvider`, a `dlopen` wrapper).
pub fn symbols() -> Vec<(&'static str, usize)> {
    macro_rules! syms {
        ($($f:ident),* $(,)?) => { vec![$((stringify!($f), $f as *const () as usize)),*] };
    }
    syms![
        Py_IncRef,
        Py_DecRef,
        _Py_Dealloc,
        PyMem_Malloc,
        PyMem_Realloc,
        PyMem_Free,
        PyObject_Malloc,
        PyObject_Realloc,
        PyObject_Free,
        _PyObject_GC_New,
        _PyObject_GC_NewVar,
        _PyObject_New,
        PyObject_GC_Track,
        PyObject_GC_UnTrack,
        PyObject_GC_Del,
        rb_default_dealloc,
        PyType_Ready,
        PyGC_Collect,
        rb_last_error,
        rb_err_set,
        rb_err_clear,
        rb_native_bytes,
        rb_tracked_objects,
        rb_deallocs,
        rb_debug_report_count,
        rb_debug_report,
        rb_debug_check,
        rb_init,
        rb_fini,
    ]
}
