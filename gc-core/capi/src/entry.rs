//! The one way into the C ABI: every `extern "C"` entry that can fail runs its body
//! through [`entry`] (ffi-support's panic guard, and a failure becomes the entry's error
//! return), and checks and converts its arguments with the helpers here and beside the
//! handle types ([`crate::heap::heap_arg`], [`crate::mutator::checked_mutator`],
//! [`checked_object`], [`registered`]). A helper that refuses an argument records the
//! failure (status and message naming the entry) as the thread's last error and returns
//! [`Recorded`]; `?` carries it to [`entry`], which returns the entry's error value.
//!
//! The handles C holds for heaps, roots, weak handles and reference queues live in
//! [`HANDLES`] (ffi-support's registry): a NULL, unknown, deleted or wrong-kind handle is
//! `RT_ERR_ARG` with a message naming the parameter and the kind expected, never a
//! dereference. Only the per-thread `ptls` (a mutator) stays a raw pointer, with its own
//! magic and owning-thread check (`checked_mutator`).

use ffi_support::{guard, Handle, HandleRegistry, Status};
use gc_core::{GcError, Heap, ObjRef};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;

/// The live C handles of this library (heaps, roots, weak handles, reference queues):
/// one registry shared by every library that links gc-core-capi (libgc_core,
/// libgc_conservative, libgc_runtime each have their own copy).
pub(crate) static HANDLES: HandleRegistry = HandleRegistry::new();

/// A failure already recorded as the thread's last error (status and message).
#[derive(Debug)]
pub(crate) struct Recorded;

/// An argument checked and converted, or the recorded reason it was refused.
pub(crate) type Checked<T> = Result<T, Recorded>;

impl From<GcError> for Recorded {
    /// Records a gc-core error with its shared status ([`status_of`]).
    fn from(e: GcError) -> Recorded {
        set_status(status_of(&e), &e);
        Recorded
    }
}

/// Records `err` as the thread's last error where no value carries it on (a setup step
/// whose failure the caller learns from `gc_last_error`).
pub(crate) fn record(err: GcError) {
    let _ = Recorded::from(err);
}

/// What an entry returns on failure: [`CReturn::PANIC`] after a caught panic,
/// [`CReturn::failed`] after a recorded failure.
pub(crate) trait CReturn: Sized {
    /// The value after a panic (the last error is then `RT_ERR_PANIC`).
    const PANIC: Self;
    /// The value after a recorded failure.
    fn failed() -> Self;
}

impl CReturn for c_int {
    const PANIC: c_int = Status::Panic.code();
    /// The recorded status's code (`RT_ERR_ARG` if, unexpectedly, none was recorded).
    fn failed() -> c_int {
        err_code()
    }
}

impl CReturn for i8 {
    const PANIC: i8 = -1;
    fn failed() -> i8 {
        -1
    }
}

impl CReturn for usize {
    const PANIC: usize = 0;
    fn failed() -> usize {
        0
    }
}

impl CReturn for () {
    const PANIC: () = ();
    fn failed() {}
}

impl<T> CReturn for *mut T {
    const PANIC: *mut T = std::ptr::null_mut();
    fn failed() -> *mut T {
        std::ptr::null_mut()
    }
}

impl<T> CReturn for *const T {
    const PANIC: *const T = std::ptr::null();
    fn failed() -> *const T {
        std::ptr::null()
    }
}

/// Runs the body of the C entry `name` in ffi-support's panic guard: its value, or the
/// entry's error return ([`CReturn`]) for a recorded failure or a panic.
#[inline(always)]
pub(crate) fn entry<T: CReturn>(name: &'static str, body: impl FnOnce() -> Checked<T>) -> T {
    guard(name, T::PANIC, || {
        body().unwrap_or_else(|Recorded| T::failed())
    })
}

/// The shared status of a [`GcError`] (`RT_ERR_*`, see `ffi_support::Status`).
pub fn status_of(e: &GcError) -> Status {
    match e {
        GcError::OutOfMemory { .. } => Status::Oom,
        GcError::AlreadyAttached => Status::AlreadyAttached,
        GcError::NotAttached => Status::NotAttached,
        GcError::InGcSafeRegion => Status::InsideRegion,
        GcError::DuringCollection { .. }
        | GcError::NotMarking { .. }
        | GcError::SweepAlreadyScheduled { .. }
        | GcError::CallbackAlreadyRegistered { .. }
        | GcError::FinalizersNotDisabled
        | GcError::AttachedElsewhere => Status::State,
        GcError::CallbackNotRegistered { .. } => Status::NotFound,
        _ => Status::Arg,
    }
}

/// Records `msg` as this thread's last C-API error with `status` (ffi-support's
/// thread-local last error: one per library, shared by every crate whose C ABI is linked
/// into it, so `gc_last_error` and `gil_last_error` see the same failure in
/// libgc_runtime).
pub fn set_status(status: Status, msg: impl std::fmt::Display) {
    ffi_support::set_error(status, &msg.to_string());
}

/// Records an argument error (`RT_ERR_ARG`): a NULL pointer, a bad kind, a bad value.
pub fn set_error(msg: impl std::fmt::Display) {
    set_status(Status::Arg, msg);
}

/// Records an argument error (`RT_ERR_ARG`) and returns it, for `Err(arg(..))`.
#[cold]
pub(crate) fn arg(msg: impl std::fmt::Display) -> Recorded {
    set_error(msg);
    Recorded
}

/// Records a failure with `status` and returns it.
#[cold]
pub(crate) fn failure(status: Status, msg: impl std::fmt::Display) -> Recorded {
    set_status(status, msg);
    Recorded
}

/// Records `err` with `what` (the entry) before its message, and returns it.
#[cold]
pub(crate) fn gc_failure(what: &str, err: GcError) -> Recorded {
    failure(status_of(&err), format!("{what}: {err}"))
}

/// The code an int-returning entry returns after a helper recorded its failure: the
/// recorded status (`RT_ERR_ARG` if, unexpectedly, none was).
pub(crate) fn err_code() -> c_int {
    match ffi_support::last_status() {
        Status::Ok => Status::Arg.code(),
        s => s.code(),
    }
}

/// The live handle `p` of kind `T` (an `Arc`: it stays alive for the call even if
/// another thread deletes it meanwhile); refused, with a message naming `what` and the
/// parameter `param`, if NULL, unknown, deleted or of another kind.
pub(crate) fn registered<T: Handle>(p: *const T, param: &str, what: &str) -> Checked<Arc<T>> {
    HANDLES
        .get(p)
        .map_err(|e| arg(format!("{what}: {}", e.for_param(param))))
}

/// Unregisters the handle `p` of kind `T` and returns the registry's reference (dropped
/// by the caller, or when the last call using it returns); refused as in
/// [`registered`] (a second delete is an unknown handle).
pub(crate) fn unregister<T: Handle>(p: *mut T, param: &str, what: &str) -> Checked<Arc<T>> {
    HANDLES
        .remove(p)
        .map_err(|e| arg(format!("{what}: {}", e.for_param(param))))
}

/// `obj` as an object reference; refused if NULL.
#[inline]
pub(crate) fn non_null_object(obj: *mut c_void, what: &str) -> Checked<ObjRef> {
    ObjRef::from_ptr(obj.cast()).ok_or_else(|| arg(format!("{what}: object is NULL")))
}

/// `obj` as an object of `heap`: refused if NULL or not an allocated object of it (the
/// check reads no object memory: `Heap::check_object`).
pub(crate) fn checked_object(heap: &Heap, obj: *mut c_void, what: &'static str) -> Checked<ObjRef> {
    let o = non_null_object(obj, what)?;
    heap.check_object(o, what)?;
    Ok(o)
}

/// A C string argument as UTF-8; refused if NULL or not UTF-8.
///
/// # Safety
/// `s` is null or NUL-terminated.
pub(crate) unsafe fn c_str<'a>(s: *const c_char, what: &str) -> Checked<&'a str> {
    if s.is_null() {
        return Err(arg(format!("{what}: name is NULL")));
    }
    // SAFETY: a NUL-terminated string per the caller's contract.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| arg(format!("{what}: name is not UTF-8")))
}

/// A count as a C `int` result (saturating).
pub(crate) fn count(n: usize) -> c_int {
    n.min(c_int::MAX as usize) as c_int
}

/// The message of the last failed call on this thread, or NULL if none failed since
/// the last `gc_clear_error` (gc-core's C users test it for NULL; the text is
/// ffi-support's thread-local message). Valid until the next failing call on this
/// thread.
#[no_mangle]
pub extern "C" fn gc_last_error() -> *const c_char {
    if ffi_support::last_status() == Status::Ok {
        return std::ptr::null();
    }
    ffi_support::last_error_ptr()
}

/// The status (`RT_ERR_*`, an `rt_status`) of the last failed call on this thread, or
/// `RT_OK` if none failed since the last `gc_clear_error`: what a NULL return meant.
#[no_mangle]
pub extern "C" fn gc_last_status() -> i32 {
    ffi_support::last_status().code()
}

/// Forgets the last error of this thread.
#[no_mangle]
pub extern "C" fn gc_clear_error() {
    ffi_support::clear_error();
}
