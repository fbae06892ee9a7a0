//! `refbridge-capi`: refbridge's C ABI, declared by `refbridge/include/refbridge_python.h`:
//! CPython's own names for the memory-management subset, and the bridge's own functions
//! (`rb_` prefix). Each function converts its arguments, calls refbridge's public Rust
//! API (which acts on the bridge entered on the calling thread) and converts the result.
//! The conventions are the workspace's (`ffi-support`) where CPython's names leave room:
//!
//! - CPython's names keep CPython's returns (NULL / -1 / nothing) and report a failure
//!   as CPython does, in the pending error (CPython's error indicator, read with
//!   `rb_last_error()`);
//! - the `rb_*` functions that can fail (`rb_init`, `rb_fini`) return the shared status
//!   codes (`RB_OK` = `RT_OK`, `RB_ERR_*` = `RT_ERR_*`);
//! - every failure is also the shared thread-local last error (status and message), and
//!   every entry runs through the shared panic guard: a panic becomes the entry's error
//!   return, a `SystemError` pending error and `RT_ERR_PANIC`, never an unwind into C.
//!
//! This crate imports only refbridge's public API and holds no logic of the bridge;
//! what is C-specific here is the conversion, `rb_init`'s thread-local [`Standalone`],
//! the text buffer of `rb_debug_report`, and [`symbols`] (every function with its
//! address, for loaders). It is an rlib (integration-tests' C-extension host links it);
//! `artifact/` builds it as `librefbridge.so`.
//!
//! The inline fast paths of `Py_INCREF`/`Py_DECREF` live in the header (CPython's add and
//! subtract on the untagged address, `_Py_Dealloc` at 0); `Py_IncRef` and `Py_DecRef` here
//! are the same out of line (CPython exports them too).

#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![allow(non_snake_case)]

use ffi_support::{guard_with, set_error, Status};
use refbridge::{
    clear_pending_error, deallocs, native_bytes, set_pending_error, with_pending_error, Bridge,
    BridgeConfig, BridgeError, DefaultSlots, PyObject, PySsizeT, PyTypeObject, PyVarObject,
    Standalone,
};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::NonNull;

thread_local! {
    static STANDALONE: RefCell<Option<Standalone>> = const { RefCell::new(None) };
    static REPORT_TEXT: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// `rb_init` / `rb_fini`: success (`RT_OK`).
pub const RB_OK: c_int = Status::Ok.code();
/// Not allowed in the current state: `rb_init` twice on a thread, `rb_fini` without
/// `rb_init` (`RT_ERR_STATE`).
pub const RB_ERR_STATE: c_int = Status::State.code();
/// `rb_init` could not make the heap or the bridge (`RT_ERR_CONFIG`).
pub const RB_ERR_INIT: c_int = Status::Config.code();
/// A panic inside the library was caught at the boundary (`RT_ERR_PANIC`).
pub const RB_ERR_PANIC: c_int = Status::Panic.code();

/// The shared status of a [`BridgeError`].
fn status_of(e: &BridgeError) -> Status {
    match e {
        BridgeError::MemoryCap { .. } | BridgeError::OutOfMemory { .. } => Status::Oom,
        BridgeError::BadConfig(_) => Status::Config,
        BridgeError::NotEntered
        | BridgeError::EnteredElsewhere
        | BridgeError::NoneEntered { .. }
        | BridgeError::OtherBridge { .. }
        | BridgeError::WrongHeap { .. }
        | BridgeError::Heap(_) => Status::State,
        _ => Status::Arg,
    }
}

/// Reports a failure the way this layer does: the pending error (CPython's indicator,
/// `rb_last_error()`) and the shared last error, both with `msg`.
fn report_failure(status: Status, msg: &str) {
    set_error(status, msg);
    set_pending_error(msg);
}

/// Reports `e` as CPython's C API does (`"<exception>: <message>"`).
fn report_err(e: &BridgeError) {
    report_failure(status_of(e), &format!("{}: {e}", e.exception()));
}

/// An `Err` as the pending error and NULL.
fn null_on_err<T>(r: Result<NonNull<T>, BridgeError>) -> *mut T {
    match r {
        Ok(p) => p.as_ptr(),
        Err(e) => {
            report_err(&e);
            std::ptr::null_mut()
        }
    }
}

/// A memory function's error under the C name called (`mem_free` and `mem_realloc`
/// name `PyMem_Free` and `PyMem_Realloc`; `PyObject_Free` and `PyObject_Realloc` call
/// them too).
fn as_called<T>(r: Result<T, BridgeError>, name: &'static str) -> Result<T, BridgeError> {
    r.map_err(|e| match e {
        BridgeError::Freed { addr, .. } => BridgeError::Freed { what: name, addr },
        BridgeError::NotABlock { addr, .. } => BridgeError::NotABlock { what: name, addr },
        e => e,
    })
}

/// An `Err` as the pending error.
fn report(r: Result<(), BridgeError>) {
    if let Err(e) = r {
        report_err(&e);
    }
}

/// Runs the body of the C entry `name` under the shared panic guard: a panic returns
/// `on_panic` (the entry's error return) with a `SystemError` pending error and
/// `RT_ERR_PANIC` as the last error.
#[inline]
fn entry<T>(name: &str, on_panic: T, body: impl FnOnce() -> T) -> T {
    guard_with(
        name,
        on_panic,
        |msg| set_pending_error(&format!("SystemError: {msg}")),
        body,
    )
}

// ---------------------------------------------------------------------------------------
// Reference counts.

/// CPython's `Py_IncRef` (accepts NULL): [`refbridge::incref`].
///
/// # Safety
/// `op` is NULL or a live object or stub.
#[no_mangle]
pub unsafe extern "C" fn Py_IncRef(op: *mut PyObject) {
    entry("Py_IncRef", (), || {
        // SAFETY: forwarded (caller).
        unsafe { refbridge::incref(op) }
    })
}

/// CPython's `Py_DecRef` (accepts NULL): [`refbridge::decref`].
///
/// # Safety
/// `op` is NULL or a live object or stub the caller owns a reference to.
#[no_mangle]
pub unsafe extern "C" fn Py_DecRef(op: *mut PyObject) {
    entry("Py_DecRef", (), || {
        // SAFETY: forwarded (caller).
        unsafe { refbridge::decref(op) }
    })
}

/// CPython's `_Py_Dealloc`, the one slow path of `Py_DECREF`: [`refbridge::dealloc`].
///
/// # Safety
/// `op` is a live native object or stub whose count is 0.
#[no_mangle]
pub unsafe extern "C" fn _Py_Dealloc(op: *mut PyObject) {
    entry("_Py_Dealloc", (), || {
        // SAFETY: forwarded (caller).
        unsafe { refbridge::dealloc(op) }
    })
}

// ---------------------------------------------------------------------------------------
// Memory.

/// `PyMem_Malloc`: [`refbridge::mem_alloc`].
#[no_mangle]
pub extern "C" fn PyMem_Malloc(size: usize) -> *mut c_void {
    entry("PyMem_Malloc", std::ptr::null_mut(), || {
        null_on_err(refbridge::mem_alloc(size)) as *mut c_void
    })
}

/// `PyMem_Realloc`: [`refbridge::mem_realloc`].
///
/// # Safety
/// `p` is NULL or a live block of these allocators.
#[no_mangle]
pub unsafe extern "C" fn PyMem_Realloc(p: *mut c_void, size: usize) -> *mut c_void {
    entry("PyMem_Realloc", std::ptr::null_mut(), || {
        // SAFETY: forwarded (caller).
        null_on_err(unsafe { refbridge::mem_realloc(p as *mut u8, size) }) as *mut c_void
    })
}

/// `PyMem_Free`: [`refbridge::mem_free`]. A pointer that is not a live block of these
/// allocators (from `malloc`, or freed already) is left alone with a `SystemError`
/// pending.
///
/// # Safety
/// `p` is NULL or a live block of these allocators (or has 16 readable bytes before
/// it, as a `malloc`'d block has: refused).
#[no_mangle]
pub unsafe extern "C" fn PyMem_Free(p: *mut c_void) {
    entry("PyMem_Free", (), || {
        // SAFETY: forwarded (caller).
        report(unsafe { refbridge::mem_free(p as *mut u8) })
    })
}

/// `PyObject_Malloc`: [`refbridge::mem_alloc`].
#[no_mangle]
pub extern "C" fn PyObject_Malloc(size: usize) -> *mut c_void {
    entry("PyObject_Malloc", std::ptr::null_mut(), || {
        null_on_err(refbridge::mem_alloc(size)) as *mut c_void
    })
}

/// `PyObject_Realloc`: [`refbridge::mem_realloc`].
///
/// # Safety
/// As `PyMem_Realloc`.
#[no_mangle]
pub unsafe extern "C" fn PyObject_Realloc(p: *mut c_void, size: usize) -> *mut c_void {
    entry("PyObject_Realloc", std::ptr::null_mut(), || {
        // SAFETY: forwarded (caller).
        let r = unsafe { refbridge::mem_realloc(p as *mut u8, size) };
        null_on_err(as_called(r, "PyObject_Realloc")) as *mut c_void
    })
}

/// `PyObject_Free` (and `PyObject_Del`): [`refbridge::mem_free`], refusing as
/// `PyMem_Free` does.
///
/// # Safety
/// As `PyMem_Free`.
#[no_mangle]
pub unsafe extern "C" fn PyObject_Free(p: *mut c_void) {
    entry("PyObject_Free", (), || {
        // SAFETY: forwarded (caller).
        report(as_called(
            unsafe { refbridge::mem_free(p as *mut u8) },
            "PyObject_Free",
        ))
    })
}

// ---------------------------------------------------------------------------------------
// Objects.

/// CPython's `_PyObject_GC_New` (behind `PyObject_GC_New(type, typeobj)`):
/// [`refbridge::gc_new`].
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn _PyObject_GC_New(tp: *mut PyTypeObject) -> *mut PyObject {
    entry("_PyObject_GC_New", std::ptr::null_mut(), || {
        // SAFETY: forwarded (caller).
        null_on_err(unsafe { refbridge::gc_new(tp) })
    })
}

/// CPython's `_PyObject_GC_NewVar`: [`refbridge::gc_new_var`].
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn _PyObject_GC_NewVar(
    tp: *mut PyTypeObject,
    n: PySsizeT,
) -> *mut PyVarObject {
    entry("_PyObject_GC_NewVar", std::ptr::null_mut(), || {
        // SAFETY: forwarded (caller).
        null_on_err(unsafe { refbridge::gc_new_var(tp, n) })
    })
}

/// CPython's `_PyObject_New` (behind `PyObject_New(type, typeobj)`):
/// [`refbridge::object_new`].
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn _PyObject_New(tp: *mut PyTypeObject) -> *mut PyObject {
    entry("_PyObject_New", std::ptr::null_mut(), || {
        // SAFETY: forwarded (caller).
        null_on_err(unsafe { refbridge::object_new(tp) })
    })
}

/// `PyObject_GC_Track`: [`refbridge::gc_track`].
///
/// # Safety
/// `op` is a live object of a GC type made by `PyObject_GC_New(Var)`.
#[no_mangle]
pub unsafe extern "C" fn PyObject_GC_Track(op: *mut c_void) {
    entry("PyObject_GC_Track", (), || {
        // SAFETY: forwarded (caller).
        report(unsafe { refbridge::gc_track(op as *mut PyObject) })
    })
}

/// `PyObject_GC_UnTrack`: [`refbridge::gc_untrack`].
///
/// # Safety
/// `op` is a live object of a GC type.
#[no_mangle]
pub unsafe extern "C" fn PyObject_GC_UnTrack(op: *mut c_void) {
    entry("PyObject_GC_UnTrack", (), || {
        // SAFETY: forwarded (caller).
        report(unsafe { refbridge::gc_untrack(op as *mut PyObject) })
    })
}

/// `PyObject_GC_Del`: [`refbridge::gc_del`].
///
/// # Safety
/// `op` is NULL or a live GC object nobody references any more.
#[no_mangle]
pub unsafe extern "C" fn PyObject_GC_Del(op: *mut c_void) {
    entry("PyObject_GC_Del", (), || {
        // SAFETY: forwarded (caller).
        report(unsafe { refbridge::gc_del(op as *mut PyObject) })
    })
}

/// The `tp_dealloc` of types that define none: [`refbridge::default_dealloc`].
///
/// # Safety
/// `op` is a live object with count 0.
#[no_mangle]
pub unsafe extern "C" fn rb_default_dealloc(op: *mut PyObject) {
    entry("rb_default_dealloc", (), || {
        // SAFETY: forwarded (caller).
        unsafe { refbridge::default_dealloc(op) }
    })
}

/// The slots `PyType_Ready` fills in: this ABI's own functions, so that, as in CPython,
/// `tp_free` of a GC type is `PyObject_GC_Del` and of others `PyObject_Free`.
const C_SLOTS: DefaultSlots = DefaultSlots {
    dealloc: Some(rb_default_dealloc),
    free_gc: Some(PyObject_GC_Del),
    free: Some(PyObject_Free),
};

/// `PyType_Ready`: [`refbridge::type_ready_with`] and this ABI's default slots. 0 on
/// success, -1 with the pending error set.
///
/// # Safety
/// `tp` is NULL or a type object.
#[no_mangle]
pub unsafe extern "C" fn PyType_Ready(tp: *mut PyTypeObject) -> c_int {
    entry("PyType_Ready", -1, || {
        // SAFETY: forwarded (caller).
        match unsafe { refbridge::type_ready_with(tp, &C_SLOTS) } {
            Ok(()) => 0,
            Err(e) => {
                report_err(&e);
                -1
            }
        }
    })
}

/// `PyGC_Collect`: [`refbridge::collect`]. Returns the number of native objects
/// deallocated, or -1 (pending error set).
#[no_mangle]
pub extern "C" fn PyGC_Collect() -> PySsizeT {
    entry("PyGC_Collect", -1, || match refbridge::collect() {
        Ok(n) => n as PySsizeT,
        Err(e) => {
            report_err(&e);
            -1
        }
    })
}

// ---------------------------------------------------------------------------------------
// The bridge's own functions.

/// The pending error's message (CPython's error indicator), or NULL. Valid until the
/// error changes.
#[no_mangle]
pub extern "C" fn rb_last_error() -> *const c_char {
    entry("rb_last_error", std::ptr::null(), || {
        with_pending_error(|e| e.map_or(std::ptr::null(), CStr::as_ptr))
    })
}

/// Sets the pending error (NULL: "error").
///
/// # Safety
/// `msg` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rb_err_set(msg: *const c_char) {
    entry("rb_err_set", (), || {
        if msg.is_null() {
            set_pending_error("error");
        } else {
            // SAFETY: a C string (caller).
            set_pending_error(&unsafe { CStr::from_ptr(msg) }.to_string_lossy());
        }
    })
}

/// Clears the pending error (and the shared last error).
#[no_mangle]
pub extern "C" fn rb_err_clear() {
    entry("rb_err_clear", (), || {
        clear_pending_error();
        ffi_support::clear_error();
    })
}

/// Counted native bytes in use (the entered bridge's, or those allocated with none).
#[no_mangle]
pub extern "C" fn rb_native_bytes() -> usize {
    entry("rb_native_bytes", 0, native_bytes)
}

/// Objects tracked by the entered bridge's cycle collector (-1: none entered).
#[no_mangle]
pub extern "C" fn rb_tracked_objects() -> PySsizeT {
    entry("rb_tracked_objects", -1, || {
        Bridge::current().map_or(-1, |b| b.tracked() as PySsizeT)
    })
}

/// Native objects deallocated on this thread so far.
#[no_mangle]
pub extern "C" fn rb_deallocs() -> u64 {
    entry("rb_deallocs", 0, deallocs)
}

/// The debug mode's reports so far (0 when off or no bridge is entered).
#[no_mangle]
pub extern "C" fn rb_debug_report_count() -> usize {
    entry("rb_debug_report_count", 0, || {
        Bridge::current().map_or(0, |b| b.debug_report_count())
    })
}

/// Report `i` as text (kind, message, where the object was made and freed), or NULL.
/// Valid until the next call of this function on the thread.
#[no_mangle]
pub extern "C" fn rb_debug_report(i: usize) -> *const c_char {
    entry("rb_debug_report", std::ptr::null(), || {
        let Some(report) = Bridge::current().and_then(|b| b.debug_report(i)) else {
            return std::ptr::null();
        };
        let text = CString::new(report.to_string().replace('\0', "?")).expect("NULs replaced");
        REPORT_TEXT.with(|t| t.borrow_mut().insert(text).as_ptr())
    })
}

/// Checks the debug mode's quarantine now; returns the number of new reports.
#[no_mangle]
pub extern "C" fn rb_debug_check() -> usize {
    entry("rb_debug_check", 0, || {
        Bridge::current().map_or(0, |b| b.debug_check().unwrap_or(0))
    })
}

/// `rb_init` flag: debug mode.
pub const RB_DEBUG: c_int = 1;
/// `rb_init` flag: no automatic cycle collection.
pub const RB_NO_AUTO_COLLECT: c_int = 2;

/// For C programs without a Rust host: a [`Standalone`] (a heap, this thread attached,
/// a bridge entered) kept for the thread until `rb_fini` (`flags`: `RB_DEBUG`,
/// `RB_NO_AUTO_COLLECT`). `RB_OK` (0) on success; `RB_ERR_STATE` if the thread already
/// has one, `RB_ERR_INIT` if the heap or bridge could not be made, `RB_ERR_PANIC`, each
/// with `rb_last_error()` set.
#[no_mangle]
pub extern "C" fn rb_init(flags: c_int) -> c_int {
    entry("rb_init", RB_ERR_PANIC, || {
        if STANDALONE.with(|s| s.borrow().is_some()) {
            report_failure(Status::State, "rb_init: already initialised on this thread");
            return RB_ERR_STATE;
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
        match Standalone::new(config) {
            Ok(s) => {
                STANDALONE.with(|x| *x.borrow_mut() = Some(s));
                RB_OK
            }
            Err(e) => {
                report_failure(Status::Config, &format!("rb_init: {e}"));
                RB_ERR_INIT
            }
        }
    })
}

/// Ends what `rb_init` started ([`Standalone::finish`]: a full collection, then in debug
/// mode the leak check, whose reports are written to stderr). Returns the number of
/// leak reports (0 or more), or `RB_ERR_STATE` if `rb_init` was not called on this
/// thread (`RB_ERR_PANIC` for a caught panic).
#[no_mangle]
pub extern "C" fn rb_fini() -> c_int {
    entry("rb_fini", RB_ERR_PANIC, || {
        let Some(s) = STANDALONE.with(|x| x.borrow_mut().take()) else {
            report_failure(
                Status::State,
                "rb_fini: rb_init was not called on this thread",
            );
            return RB_ERR_STATE;
        };
        let leaks = s.finish();
        for r in &leaks {
            eprint!("{r}");
        }
        leaks.len() as c_int
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_an_entry_is_an_error_return_and_a_system_error() {
        std::panic::set_hook(Box::new(|_| {}));
        clear_pending_error();
        let p: *mut c_void = entry("PyMem_Malloc", std::ptr::null_mut(), || panic!("boom"));
        assert!(p.is_null());
        let pending = refbridge::pending_error().expect("a pending error");
        assert_eq!(
            pending,
            "SystemError: PyMem_Malloc: internal panic (caught at the C boundary): boom"
        );
        assert_eq!(ffi_support::last_status(), Status::Panic);
        assert_eq!(entry("rb_init", RB_ERR_PANIC, || panic!("x")), RB_ERR_PANIC);
        rb_err_clear();
        assert_eq!(refbridge::pending_error(), None);
        assert_eq!(ffi_support::last_status(), Status::Ok);
    }

    #[test]
    fn rb_fini_without_rb_init_is_a_state_error() {
        assert_eq!(rb_fini(), RB_ERR_STATE);
        assert_eq!(ffi_support::last_status(), Status::State);
        assert!(refbridge::pending_error().is_some_and(|e| e.contains("rb_init was not called")));
        assert_eq!(RB_ERR_STATE, -15);
    }
}
