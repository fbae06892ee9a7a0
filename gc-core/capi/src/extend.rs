//! Items for the crates that extend this C ABI with their own names
//! (gc-conservative-capi, gc-runtime): the heap behind a C heap handle
//! ([`heap_handle`]; [`crate::heap::heap_id_from_ptr`] for per-word lookups), the
//! marker of the calling thread's collection ([`with_active_marker`]), recording a
//! gc-core error with its shared status ([`set_gc_error`]) and the default heap.

use crate::entry::{set_status, status_of};
use crate::heap::{gc_default_heap, gc_heap_t, heap_arg};
use crate::marking::active_marker;
use crate::mutator::gc_mutator_t;
use gc_core::{GcError, Heap, Marker};

/// Records a [`GcError`] with its status ([`status_of`]) and returns the status's code
/// (`RT_ERR_*`).
pub fn set_gc_error(err: &GcError) -> i32 {
    let status = status_of(err);
    set_status(status, err);
    status.code()
}

/// The process's default heap (`gc_default_heap`, what the seed's `jl_*` names use),
/// made on first use from the `GC_CORE_*` environment variables. Once made, one load.
#[inline]
pub fn default_heap() -> *mut gc_heap_t {
    crate::heap::made_default_heap().unwrap_or_else(|| gc_default_heap())
}

/// The Rust heap behind a C heap handle (a clone: it stays alive while the caller holds
/// it, even if another thread deletes the handle); `None`, and the last error set
/// (`RT_ERR_ARG`, naming `what` and the kind expected), for a NULL, unknown, deleted or
/// wrong-kind handle. Any pointer may be passed: it is looked up, never dereferenced
/// unless it is a live heap handle.
pub fn heap_handle(p: *mut gc_heap_t, what: &str) -> Option<Heap> {
    heap_arg(p, what).ok()
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
    unsafe { active_marker(m, what) }.ok().map(f)
}
