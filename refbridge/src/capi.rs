//! The C ABI: CPython's own names for the memory-management subset, and the bridge's
//! own functions (`rb_` prefix), declared by `include/refbridge_python.h`. Each function
//! converts its arguments, calls the crate's public Rust API (which acts on the bridge
//! entered on the calling thread) and converts the result: an `Err` becomes NULL / -1
//! and the pending error, read with `rb_last_error()`. This module imports only the
//! crate's public API and holds no logic of the bridge; what is C-specific here is the
//! conversion, `rb_init`'s thread-local [`Standalone`], the text buffer of
//! `rb_debug_report` and the panic guard of `rb_init`.
//!
//! The inline fast paths of `Py_INCREF`/`Py_DECREF` live in the header (CPython's add and
//! subtract on the untagged address, `_Py_Dealloc` at 0); `Py_IncRef` and `Py_DecRef` here
//! are the same out of line (CPython exports them too).

#![allow(non_snake_case)]

use crate::{
    clear_pending_error, deallocs, native_bytes, set_pending_error, set_pending_error_from,
    with_pending_error, Bridge, BridgeConfig, BridgeError, DefaultSlots, PyObject, PySsizeT,
    PyTypeObject, PyVarObject, Standalone,
};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::NonNull;

thread_local! {
    static STANDALONE: RefCell<Option<Standalone>> = const { RefCell::new(None) };
    static REPORT_TEXT: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// An `Err` as the pending error and NULL.
fn null_on_err<T>(r: Result<NonNull<T>, BridgeError>) -> *mut T {
    match r {
        Ok(p) => p.as_ptr(),
        Err(e) => {
            set_pending_error_from(&e);
            std::ptr::null_mut()
        }
    }
}

/// An `Err` as the pending error.
fn report(r: Result<(), BridgeError>) {
    if let Err(e) = r {
        set_pending_error_from(&e);
    }
}

// ---------------------------------------------------------------------------------------
// Reference counts.

/// CPython's `Py_IncRef` (accepts NULL): [`crate::incref`].
///
/// # Safety
/// `op` is NULL or a live object or stub.
#[no_mangle]
pub unsafe extern "C" fn Py_IncRef(op: *mut PyObject) {
    // SAFETY: forwarded (caller).
    unsafe { crate::incref(op) }
}

/// CPython's `Py_DecRef` (accepts NULL): [`crate::decref`].
///
/// # Safety
/// `op` is NULL or a live object or stub the caller owns a reference to.
#[no_mangle]
pub unsafe extern "C" fn Py_DecRef(op: *mut PyObject) {
    // SAFETY: forwarded (caller).
    unsafe { crate::decref(op) }
}

/// CPython's `_Py_Dealloc`, the one slow path of `Py_DECREF`: [`crate::dealloc`].
///
/// # Safety
/// `op` is a live native object or stub whose count is 0.
#[no_mangle]
pub unsafe extern "C" fn _Py_Dealloc(op: *mut PyObject) {
    // SAFETY: forwarded (caller).
    unsafe { crate::dealloc(op) }
}

// ---------------------------------------------------------------------------------------
// Memory.

/// `PyMem_Malloc`: [`crate::mem_alloc`].
#[no_mangle]
pub extern "C" fn PyMem_Malloc(size: usize) -> *mut c_void {
    null_on_err(crate::mem_alloc(size)) as *mut c_void
}

/// `PyMem_Realloc`: [`crate::mem_realloc`].
///
/// # Safety
/// `p` is NULL or a live block of these allocators.
#[no_mangle]
pub unsafe extern "C" fn PyMem_Realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded (caller).
    null_on_err(unsafe { crate::mem_realloc(p as *mut u8, size) }) as *mut c_void
}

/// `PyMem_Free`: [`crate::mem_free`].
///
/// # Safety
/// `p` is NULL or a live block of these allocators.
#[no_mangle]
pub unsafe extern "C" fn PyMem_Free(p: *mut c_void) {
    // SAFETY: forwarded (caller).
    unsafe { crate::mem_free(p as *mut u8) }
}

/// `PyObject_Malloc`: [`crate::mem_alloc`].
#[no_mangle]
pub extern "C" fn PyObject_Malloc(size: usize) -> *mut c_void {
    null_on_err(crate::mem_alloc(size)) as *mut c_void
}

/// `PyObject_Realloc`: [`crate::mem_realloc`].
///
/// # Safety
/// As `PyMem_Realloc`.
#[no_mangle]
pub unsafe extern "C" fn PyObject_Realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded (caller).
    null_on_err(unsafe { crate::mem_realloc(p as *mut u8, size) }) as *mut c_void
}

/// `PyObject_Free` (and `PyObject_Del`): [`crate::mem_free`].
///
/// # Safety
/// `p` is NULL or a live block of these allocators.
#[no_mangle]
pub unsafe extern "C" fn PyObject_Free(p: *mut c_void) {
    // SAFETY: forwarded (caller).
    unsafe { crate::mem_free(p as *mut u8) }
}

// ---------------------------------------------------------------------------------------
// Objects.

/// CPython's `_PyObject_GC_New` (behind `PyObject_GC_New(type, typeobj)`):
/// [`crate::gc_new`].
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn _PyObject_GC_New(tp: *mut PyTypeObject) -> *mut PyObject {
    // SAFETY: forwarded (caller).
    null_on_err(unsafe { crate::gc_new(tp) })
}

/// CPython's `_PyObject_GC_NewVar`: [`crate::gc_new_var`].
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn _PyObject_GC_NewVar(
    tp: *mut PyTypeObject,
    n: PySsizeT,
) -> *mut PyVarObject {
    // SAFETY: forwarded (caller).
    null_on_err(unsafe { crate::gc_new_var(tp, n) })
}

/// CPython's `_PyObject_New` (behind `PyObject_New(type, typeobj)`):
/// [`crate::object_new`].
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn _PyObject_New(tp: *mut PyTypeObject) -> *mut PyObject {
    // SAFETY: forwarded (caller).
    null_on_err(unsafe { crate::object_new(tp) })
}

/// `PyObject_GC_Track`: [`crate::gc_track`].
///
/// # Safety
/// `op` is a live object of a GC type made by `PyObject_GC_New(Var)`.
#[no_mangle]
pub unsafe extern "C" fn PyObject_GC_Track(op: *mut c_void) {
    // SAFETY: forwarded (caller).
    report(unsafe { crate::gc_track(op as *mut PyObject) })
}

/// `PyObject_GC_UnTrack`: [`crate::gc_untrack`].
///
/// # Safety
/// `op` is a live object of a GC type.
#[no_mangle]
pub unsafe extern "C" fn PyObject_GC_UnTrack(op: *mut c_void) {
    // SAFETY: forwarded (caller).
    report(unsafe { crate::gc_untrack(op as *mut PyObject) })
}

/// `PyObject_GC_Del`: [`crate::gc_del`].
///
/// # Safety
/// `op` is NULL or a live GC object nobody references any more.
#[no_mangle]
pub unsafe extern "C" fn PyObject_GC_Del(op: *mut c_void) {
    // SAFETY: forwarded (caller).
    report(unsafe { crate::gc_del(op as *mut PyObject) })
}

/// The `tp_dealloc` of types that define none: [`crate::default_dealloc`].
///
/// # Safety
/// `op` is a live object with count 0.
#[no_mangle]
pub unsafe extern "C" fn rb_default_dealloc(op: *mut PyObject) {
    // SAFETY: forwarded (caller).
    unsafe { crate::default_dealloc(op) }
}

/// The slots `PyType_Ready` fills in: this ABI's own functions, so that, as in CPython,
/// `tp_free` of a GC type is `PyObject_GC_Del` and of others `PyObject_Free`.
const C_SLOTS: DefaultSlots = DefaultSlots {
    dealloc: Some(rb_default_dealloc),
    free_gc: Some(PyObject_GC_Del),
    free: Some(PyObject_Free),
};

/// `PyType_Ready`: [`crate::type_ready_with`] and this ABI's default slots. 0 on
/// success, -1 with the pending error set.
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn PyType_Ready(tp: *mut PyTypeObject) -> c_int {
    // SAFETY: forwarded (caller).
    match unsafe { crate::type_ready_with(tp, &C_SLOTS) } {
        Ok(()) => 0,
        Err(e) => {
            set_pending_error_from(&e);
            -1
        }
    }
}

/// `PyGC_Collect`: [`crate::collect`]. Returns the number of native objects
/// deallocated, or -1 (pending error set).
#[no_mangle]
pub extern "C" fn PyGC_Collect() -> PySsizeT {
    match crate::collect() {
        Ok(n) => n as PySsizeT,
        Err(e) => {
            set_pending_error_from(&e);
            -1
        }
    }
}

// ---------------------------------------------------------------------------------------
// The bridge's own functions.

/// The pending error's message (CPython's error indicator), or NULL. Valid until the
/// error changes.
#[no_mangle]
pub extern "C" fn rb_last_error() -> *const c_char {
    with_pending_error(|e| e.map_or(std::ptr::null(), CStr::as_ptr))
}

/// Sets the pending error (NULL: "error").
///
/// # Safety
/// `msg` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rb_err_set(msg: *const c_char) {
    if msg.is_null() {
        set_pending_error("error");
    } else {
        // SAFETY: a C string (caller).
        set_pending_error(&unsafe { CStr::from_ptr(msg) }.to_string_lossy());
    }
}

/// Clears the pending error.
#[no_mangle]
pub extern "C" fn rb_err_clear() {
    clear_pending_error()
}

/// Counted native bytes in use (the entered bridge's, or those allocated with none).
#[no_mangle]
pub extern "C" fn rb_native_bytes() -> usize {
    native_bytes()
}

/// Objects tracked by the entered bridge's cycle collector (-1: none entered).
#[no_mangle]
pub extern "C" fn rb_tracked_objects() -> PySsizeT {
    Bridge::current().map_or(-1, |b| b.tracked() as PySsizeT)
}

/// Native objects deallocated on this thread so far.
#[no_mangle]
pub extern "C" fn rb_deallocs() -> u64 {
    deallocs()
}

/// The debug mode's reports so far (0 when off or no bridge is entered).
#[no_mangle]
pub extern "C" fn rb_debug_report_count() -> usize {
    Bridge::current().map_or(0, |b| b.debug_report_count())
}

/// Report `i` as text (kind, message, where the object was made and freed), or NULL.
/// Valid until the next call of this function on the thread.
#[no_mangle]
pub extern "C" fn rb_debug_report(i: usize) -> *const c_char {
    let Some(report) = Bridge::current().and_then(|b| b.debug_report(i)) else {
        return std::ptr::null();
    };
    let text = CString::new(report.to_string().replace('\0', "?")).expect("NULs replaced");
    REPORT_TEXT.with(|t| t.borrow_mut().insert(text).as_ptr())
}

/// Checks the debug mode's quarantine now; returns the number of new reports.
#[no_mangle]
pub extern "C" fn rb_debug_check() -> usize {
    Bridge::current().map_or(0, |b| b.debug_check().unwrap_or(0))
}

/// `rb_init` flag: debug mode.
pub const RB_DEBUG: c_int = 1;
/// `rb_init` flag: no automatic cycle collection.
pub const RB_NO_AUTO_COLLECT: c_int = 2;

/// For C programs without a Rust host: a [`Standalone`] (a heap, this thread attached,
/// a bridge entered) kept for the thread until `rb_fini` (`flags`: `RB_DEBUG`,
/// `RB_NO_AUTO_COLLECT`). 0 on success, -1 with `rb_last_error()` set.
#[no_mangle]
pub extern "C" fn rb_init(flags: c_int) -> c_int {
    if STANDALONE.with(|s| s.borrow().is_some()) {
        set_pending_error("rb_init: already initialised on this thread");
        return -1;
    }
    let config = BridgeConfig {
        debug: flags & RB_DEBUG != 0,
        cycle_threshold: if flags & RB_NO_AUTO_COLLECT != 0 {
            None
        } else {
            BridgeConfig::default().cycle_threshold
        },
        ..BridgeConfig::default()
    };
    match std::panic::catch_unwind(|| Standalone::new(config)) {
        Ok(Ok(s)) => {
            STANDALONE.with(|x| *x.borrow_mut() = Some(s));
            0
        }
        Ok(Err(e)) => {
            set_pending_error(&format!("rb_init: {e}"));
            -1
        }
        Err(_) => {
            set_pending_error("rb_init: internal error");
            -1
        }
    }
}

/// Ends what `rb_init` started ([`Standalone::finish`]: a full collection, then in debug
/// mode the leak check, whose reports are written to stderr). Returns the number of
/// leak reports, or -1 if `rb_init` was not called on this thread.
#[no_mangle]
pub extern "C" fn rb_fini() -> c_int {
    let Some(s) = STANDALONE.with(|x| x.borrow_mut().take()) else {
        set_pending_error("rb_fini: rb_init was not called on this thread");
        return -1;
    };
    let leaks = s.finish();
    for r in &leaks {
        eprint!("{r}");
    }
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
