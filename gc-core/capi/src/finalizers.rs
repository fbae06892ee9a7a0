//! Finalizers from C: registering C finalizers (`gc_add_finalizer`, the seed's
//! `jl_gc_add_ptr_finalizer`), running them now (`gc_finalize`), running the pending
//! ones, and whether a thread runs them at its safepoints.

use crate::entry::{arg, checked_object, count, entry, non_null_object};
use crate::heap::{gc_heap_t, heap_arg};
use crate::mutator::{checked_mutator, gc_mutator_t, running_mutator};
use gc_core::Mutator;
use std::ffi::{c_int, c_void};

/// A finalizer: `f(obj)`, called once after a collection found `obj` unreachable.
pub type gc_finalizer_t = Option<unsafe extern "C" fn(obj: *mut c_void)>;

/// Registers finalizer `f` for `obj` (Julia's `jl_gc_add_ptr_finalizer`). An
/// `RT_ERR_*` code on error (NULL object or function, bad thread, during a collection).
///
/// # Safety
/// `m` null or a mutator pointer; `obj` anything (checked to be an allocated object of
/// the thread's heap); `f` null or a function of `gc_finalizer_t`'s type that may be
/// called once with `obj` (it must not free it).
#[no_mangle]
pub unsafe extern "C" fn gc_add_finalizer(
    m: *mut gc_mutator_t,
    obj: *mut c_void,
    f: gc_finalizer_t,
) -> c_int {
    entry("gc_add_finalizer", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { running_mutator(m, "gc_add_finalizer") }?;
        non_null_object(obj, "gc_add_finalizer")?;
        let f = f.ok_or_else(|| arg("gc_add_finalizer: finalizer function is NULL"))?;
        // SAFETY: the calling thread's attached mutator.
        let mut m = unsafe { Mutator::borrowed(ms) };
        let o = checked_object(m.heap(), obj, "gc_add_finalizer")?;
        // SAFETY: checked_object accepted it just above; `f` is a finalizer of Julia's
        // ptr-finalizer signature (this function's contract).
        unsafe { m.add_c_finalizer_unchecked(o, f) };
        Ok(0)
    })
}

/// Runs the finalizers of `obj` now (`jl_finalize`); returns how many ran (0 inside a
/// finalizer: they are queued to run after it), a negative `RT_ERR_*` code on error.
///
/// # Safety
/// `m` null or a mutator pointer; `obj` null or a live object of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_finalize(m: *mut gc_mutator_t, obj: *mut c_void) -> c_int {
    entry("gc_finalize", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { running_mutator(m, "gc_finalize") }?;
        let o = non_null_object(obj, "gc_finalize")?;
        // SAFETY: the calling thread's attached mutator.
        Ok(count(unsafe { Mutator::borrowed(ms) }.finalize(o)))
    })
}

/// Runs the pending finalizers on the calling thread; returns how many ran (0 inside a
/// finalizer), a negative `RT_ERR_*` code on error (bad thread, during a collection, in
/// a GC-safe region).
///
/// # Safety
/// `m` null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_run_finalizers(m: *mut gc_mutator_t) -> c_int {
    entry("gc_run_finalizers", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { running_mutator(m, "gc_run_finalizers") }?;
        // SAFETY: the calling thread's attached mutator.
        Ok(count(unsafe { Mutator::borrowed(ms) }.run_finalizers()))
    })
}

/// Runs every registered finalizer (reachable objects included) and the pending ones:
/// for shutdown, before `gc_heap_delete` (finalizers never run at heap deletion).
/// Returns how many ran, a negative `RT_ERR_*` code on error.
///
/// # Safety
/// `m` null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_run_all_finalizers(m: *mut gc_mutator_t) -> c_int {
    entry("gc_run_all_finalizers", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { running_mutator(m, "gc_run_all_finalizers") }?;
        // SAFETY: the calling thread's attached mutator.
        Ok(count(unsafe { Mutator::borrowed(ms) }.run_all_finalizers()))
    })
}

/// Opts the calling thread in (non-zero) or out of running pending finalizers at its
/// safepoints (after collections it runs or stops for, when leaving a GC-safe region).
/// Off for `gc_thread_attach`, on for `jl_init`/`jl_adopt_thread`. An `RT_ERR_*` code
/// on error.
///
/// # Safety
/// `m` null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_set_finalizers_at_safepoints(m: *mut gc_mutator_t, on: c_int) -> c_int {
    entry("gc_set_finalizers_at_safepoints", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { checked_mutator(m, "gc_set_finalizers_at_safepoints") }?;
        // SAFETY: the calling thread's attached mutator.
        unsafe { Mutator::borrowed(ms) }.set_finalizers_at_safepoints(on != 0);
        Ok(0)
    })
}

/// Number of finalizers waiting to run on `heap` (0 and an error for a bad heap handle).
#[no_mangle]
pub extern "C" fn gc_pending_finalizers(heap: *mut gc_heap_t) -> usize {
    entry("gc_pending_finalizers", || {
        Ok(heap_arg(heap, "gc_pending_finalizers")?.pending_finalizers())
    })
}
