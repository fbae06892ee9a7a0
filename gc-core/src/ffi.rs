//! For crates that extend gc-core's C ABI (gc-conservative-capi, whose
//! `libgc_conservative` carries gc-core's C ABI and adds its own names; gc-runtime): the
//! C handle types, their conversion to the Rust API, and the thread's last C error (what
//! `gc_last_error()` returns).
//!
//! Also the layouts the compat header's inline fast paths read (`gc_tls_head_t`,
//! `gc_mark_fast_t` and the `ptls` magics), for the tests that check the header against
//! them.
//!
//! A Rust program needs none of this: the crate root is the Rust API.
//!
//! ```
//! use gc_core::ffi;
//!
//! // A C entry point of an extension reports its failures the way gc-core's do.
//! ffi::set_error("my_extension: bad argument");
//! assert_eq!(ffi::gc_last_status(), -1); // RT_ERR_ARG
//! // SAFETY: gc_default_heap() returns the process's default heap, which never dies.
//! let heap = unsafe { ffi::heap_from_ptr(ffi::default_heap(), "my_extension") }.unwrap();
//! let _ = heap.id();
//! ```

use crate::capi;
use crate::heap_id::HeapId;
use crate::marker::Marker;
use crate::state::Heap;

pub use crate::capi::{gc_heap_t, gc_mutator_t, gc_sweepfunc_t, gc_task_t, jl_value_t};

/// gc-core's C functions a composing C library calls itself (gc-runtime: a heap, thread
/// attach and detach, GC-safe regions around its GIL's blocking sections), as Rust items
/// so that the compiler checks every call; their contracts are `gc_core.h`'s.
pub use crate::capi::{
    gc_config_t, gc_current_mutator, gc_current_task, gc_heap_delete, gc_heap_new, gc_last_error,
    gc_last_status, gc_safe_enter, gc_safe_enter_sp, gc_safe_leave, gc_thread_attach,
    gc_thread_detach,
};
pub use crate::marker::MarkFast;
pub use crate::tls::{TlsHead, HELPER_MAGIC, MUTATOR_MAGIC};

/// The GC bits of an object's header word, as the compat header's inline fast paths
/// test them (`GC_HDR_*` in `julia_gcext_compat.h`, checked against these by the header
/// tests): mark, old generation, remembered (old objects) / survived a collection
/// (young objects, `HDR_AGE`), free cell, and the mask of all four.
pub const HDR_MARK: usize = crate::object::MARK;
/// See [`HDR_MARK`].
pub const HDR_OLD: usize = crate::object::OLD;
/// See [`HDR_MARK`].
pub const HDR_REMEMBERED: usize = crate::object::REMEMBERED;
/// See [`HDR_MARK`].
pub const HDR_AGE: usize = crate::object::AGE;
/// See [`HDR_MARK`].
pub const HDR_FREE: usize = crate::object::FREE;
/// See [`HDR_MARK`].
pub const HDR_TAG_BITS: usize = crate::object::TAG_BITS;

/// Records `msg` as the calling thread's last C-API error, an argument error
/// (`RT_ERR_ARG`): ffi-support's thread-local last error, one per library and shared by
/// every crate whose C ABI is linked into it, so `gc_last_error` sees them all.
pub fn set_error(msg: impl std::fmt::Display) {
    capi::set_error(msg)
}

/// Records `msg` as the calling thread's last C-API error with `status`.
pub fn set_status(status: ffi_support::Status, msg: impl std::fmt::Display) {
    capi::set_status(status, msg)
}

/// Records a [`GcError`](crate::GcError) with its status ([`status_of`]) and returns
/// the status's code (`RT_ERR_*`).
pub fn set_gc_error(err: &crate::GcError) -> i32 {
    let status = status_of(err);
    capi::set_status(status, err);
    status.code()
}

/// The shared status (`RT_ERR_*`) gc-core's C ABI reports a [`GcError`](crate::GcError)
/// as: `NotAttached`, `AlreadyAttached`, `OutOfMemory` (`RT_ERR_OOM`), `InGcSafeRegion`
/// (`RT_ERR_INSIDE_REGION`), the wrong-state errors (`RT_ERR_STATE`), an unregistered
/// callback (`RT_ERR_NOT_FOUND`), everything else `RT_ERR_ARG`.
pub fn status_of(err: &crate::GcError) -> ffi_support::Status {
    capi::status_of(err)
}

/// The process's default heap (`gc_default_heap`, what the seed's `jl_*` names use),
/// made on first use from the `GC_CORE_*` environment variables.
pub fn default_heap() -> *mut gc_heap_t {
    capi::gc_default_heap()
}

/// The Rust heap behind a C heap pointer; `None` (and the last error set, naming
/// `what`) for NULL.
///
/// # Safety
/// `p` is null or from `gc_heap_new`/`gc_default_heap` and not deleted while the
/// returned reference is used.
#[inline(always)]
pub unsafe fn heap_from_ptr<'a>(p: *mut gc_heap_t, what: &str) -> Option<&'a Heap> {
    // SAFETY: forwarded from the caller.
    unsafe { capi::heap_ref(p, what) }
}

/// The id of the heap behind a C heap pointer (one load); `None` (and the last error
/// set) for NULL.
///
/// # Safety
/// As for [`heap_from_ptr`].
#[inline(always)]
pub unsafe fn heap_id_from_ptr(p: *mut gc_heap_t, what: &str) -> Option<HeapId> {
    // SAFETY: forwarded from the caller.
    unsafe { gc_heap_t::id_from_ptr(p, what) }
}

/// Runs `f` with the marker of the collection the calling thread is marking for, if `m`
/// is the `ptls` of the calling thread (or of the collector thread it runs on) and it is
/// marking; otherwise sets the last error (naming `what`) and returns `None`.
///
/// # Safety
/// `m` is null or a `ptls` this library handed out (a mutator or a collector thread's
/// record; their memory stays readable for the process's lifetime).
pub unsafe fn with_active_marker<R>(
    m: *mut gc_mutator_t,
    what: &'static str,
    f: impl FnOnce(&mut Marker<'_>) -> R,
) -> Option<R> {
    // SAFETY: forwarded from the caller.
    unsafe { capi::active_marker(m, what) }.map(f)
}

/// A task pointer handed to a task scanner (`gc_task_t`) as the Rust task.
///
/// # Safety
/// `task` is non-null and a registered, live task (what a task scanner is given), for
/// as long as the returned reference is used.
pub unsafe fn task_from_ptr<'a>(task: *mut gc_task_t) -> &'a crate::Task {
    // SAFETY: forwarded from the caller: gc_task_t pointers are `Arc<Task>` payloads.
    unsafe { &*(task as *const crate::Task) }
}
