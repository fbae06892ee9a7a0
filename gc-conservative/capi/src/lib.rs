//! `gc-conservative-capi`: the C ABI of the `gc-conservative` crate:
//! `include/gc_conservative.h` (explicit heaps, generated from this file by cbindgen) and
//! the seed's three conservative-scanning names (declared in gc-core's
//! `julia_gcext_compat.h`) over gc-core's default heap, converting and forwarding to
//! gc-conservative's public Rust API and reaching gc-core's C ABI through gc-core-capi
//! (C handle types, their conversion, the shared last error). Errors go to the same
//! thread-local status and message as gc-core's (ffi-support's: `gc_last_error()`,
//! `gc_last_status()`); int-returning entries return the `RT_ERR_*` code. Every entry
//! but the per-word lookups (`gc_base_ptr`, `gc_internal_obj_base_ptr`,
//! `gc_is_internal_obj_alloc` and their `jl_` names, called for every stack word a
//! client scans) runs in ffi-support's panic guard; a panic in a lookup aborts (Rust's
//! rule for an `extern "C"` function), never unwinds into C.
//!
//! This crate is an rlib (gc-runtime links it, so that `libgc_runtime.so` carries
//! `gc_conservative.h`'s ABI too); `artifact/` builds it as `libgc_conservative.so`,
//! which also carries gc-core's whole C ABI. The header is checked against this file by
//! `tests/it/headers.rs`.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![allow(non_camel_case_types)]

use ffi_support::{guard, Status};
use gc_conservative::{
    base_ptr, enable_conservative_scanning, internal_obj_base_ptr, is_internal_obj_alloc,
};
use gc_core::SweepProc;
use gc_core_capi::{
    default_heap, gc_heap_t, gc_mutator_t, gc_sweepfunc_t, gc_task_t, heap_handle,
    heap_id_from_ptr, jl_value_t, set_error, set_gc_error, task_from_ptr, with_active_marker,
};
use std::ffi::{c_char, c_int, c_void, CStr};

/// Turns on conservative scanning of every attached thread's stack for `heap`
/// (idempotent, thread-safe). `RT_OK` (0) on success, an `RT_ERR_*` code on error
/// (`RT_ERR_ARG` for a NULL, unknown, deleted or wrong-kind heap handle).
///
/// # Safety
/// None beyond C's: `heap` may be any pointer (it is checked against the live handles).
#[no_mangle]
pub unsafe extern "C" fn gc_enable_conservative_scanning(heap: *mut gc_heap_t) -> c_int {
    guard(
        "gc_enable_conservative_scanning",
        Status::Panic.code(),
        || {
            let Some(h) = heap_handle(heap, "gc_enable_conservative_scanning") else {
                return Status::Arg.code();
            };
            match enable_conservative_scanning(&h) {
                Ok(()) => Status::Ok.code(),
                Err(e) => set_gc_error(&e),
            }
        },
    )
}

/// The object of `heap` (internal or external) that `p` points to the beginning,
/// interior or one past the end of; NULL otherwise (an object the last collection found
/// unreachable included, while its memory waits for the lazy sweep). Any `p` is
/// accepted.
///
/// # Safety
/// `heap` is null or a heap handle from this library (live or deleted: a deleted heap
/// holds no object); it is read with one load, not looked up (a per-word hot path).
#[no_mangle]
pub unsafe extern "C" fn gc_base_ptr(heap: *mut gc_heap_t, p: *mut c_void) -> *mut c_void {
    // SAFETY: forwarded from the caller.
    let Some(id) = (unsafe { heap_id_from_ptr(heap, "gc_base_ptr") }) else {
        return std::ptr::null_mut();
    };
    base_ptr(id, p as usize).map_or(std::ptr::null_mut(), |o| o.as_ptr().cast())
}

/// Like `gc_base_ptr`, for internal (pool) objects only.
///
/// # Safety
/// As for `gc_base_ptr`.
#[no_mangle]
pub unsafe extern "C" fn gc_internal_obj_base_ptr(
    heap: *mut gc_heap_t,
    p: *mut c_void,
) -> *mut c_void {
    // SAFETY: forwarded from the caller.
    unsafe { internal_base(heap, p, "gc_internal_obj_base_ptr") }
}

/// `gc_internal_obj_base_ptr`'s body, inlined into the `jl_` name too (a call between
/// two exported names of one library goes through the GOT).
///
/// # Safety
/// As for `gc_base_ptr`.
#[inline(always)]
unsafe fn internal_base(heap: *mut gc_heap_t, p: *mut c_void, what: &str) -> *mut c_void {
    // SAFETY: forwarded from the caller.
    let Some(id) = (unsafe { heap_id_from_ptr(heap, what) }) else {
        return std::ptr::null_mut();
    };
    internal_obj_base_ptr(id, p as usize).map_or(std::ptr::null_mut(), |o| o.as_ptr().cast())
}

/// Non-zero iff `p` is the start of an internal object of `heap` or of a cell reserved
/// for one (whose type field is then never a valid type). 0 for the cell of an object
/// the last collection found unreachable while it waits for the lazy sweep (its type
/// field still names the dead object's type).
///
/// # Safety
/// As for `gc_base_ptr`.
#[no_mangle]
pub unsafe extern "C" fn gc_is_internal_obj_alloc(heap: *mut gc_heap_t, p: *mut c_void) -> c_int {
    // SAFETY: forwarded from the caller.
    let Some(id) = (unsafe { heap_id_from_ptr(heap, "gc_is_internal_obj_alloc") }) else {
        return 0;
    };
    is_internal_obj_alloc(id, p as usize) as c_int
}

/// Scans `[lo, hi)` conservatively during marking (from a root scanner, task scanner or
/// mark function on the collecting thread). Returns the number of words that resolved
/// to objects; `RT_ERR_ARG` (-1) for a bad range, `RT_ERR_STATE` outside marking (or
/// `RT_ERR_ARG` for a ptls of another thread).
///
/// # Safety
/// `m` is null or a mutator pointer; the range is mapped and readable.
#[no_mangle]
pub unsafe extern "C" fn gc_scan_range(
    m: *mut gc_mutator_t,
    lo: *mut c_void,
    hi: *mut c_void,
) -> isize {
    guard("gc_scan_range", Status::Panic.code() as isize, || {
        if (hi as usize) < (lo as usize) {
            set_error(format!(
                "gc_scan_range: empty or inverted range [{lo:p}, {hi:p})"
            ));
            return Status::Arg.code() as isize;
        }
        let scan = |mk: &mut gc_core::Marker<'_>| {
            // SAFETY: the caller guarantees the range is readable.
            unsafe { gc_conservative::scan_range(mk, lo as usize, hi as usize) as isize }
        };
        // SAFETY: `m` is null or a ptls this library handed out (the caller's contract).
        unsafe { with_active_marker(m, "gc_scan_range", scan) }.unwrap_or_else(last_code)
    })
}

/// The code of the failure a gc-core helper just recorded (`RT_ERR_ARG` if none was).
fn last_code() -> isize {
    match ffi_support::last_status() {
        Status::Ok => Status::Arg.code() as isize,
        s => s.code() as isize,
    }
}

/// A filter for `gc_scan_task`: called with the object a stack word points into (its
/// base) and `data`; non-zero keeps (queues) it, zero ignores the word.
pub type gc_scan_filter_t =
    Option<unsafe extern "C" fn(data: *mut c_void, obj: *mut c_void) -> c_int>;

/// Scans the stack of `task` (and the registers its thread saved when it stopped)
/// conservatively, from a task scanner on the collecting thread, queueing only the
/// objects `filter` accepts (all of them if `filter` is NULL). For runtimes that install
/// their own task scanner instead of `gc_enable_conservative_scanning`'s, e.g. to accept
/// only words pointing at one type of object. Returns the words accepted (0 for a task
/// no longer registered with the heap being collected, whose stack is not read: a
/// look-up linear in the number of tasks), `RT_ERR_ARG` (-1) for a NULL task,
/// `RT_ERR_STATE` outside marking.
///
/// # Safety
/// `m` is null or a mutator pointer; `task` is null or the task handed to the task
/// scanner; `filter`, if given, is safe to call with `data` and any object.
#[no_mangle]
pub unsafe extern "C" fn gc_scan_task(
    m: *mut gc_mutator_t,
    task: *mut gc_task_t,
    filter: gc_scan_filter_t,
    data: *mut c_void,
) -> isize {
    guard("gc_scan_task", Status::Panic.code() as isize, || {
        if task.is_null() {
            set_error("gc_scan_task: task is NULL");
            return Status::Arg.code() as isize;
        }
        // SAFETY: a task handed to a task scanner is a registered, live task (caller).
        let task = unsafe { task_from_ptr(task) };
        let scan = |mk: &mut gc_core::Marker<'_>| match filter {
            None => gc_conservative::scan_task(mk, task) as isize,
            Some(f) => {
                // SAFETY: the caller guarantees the filter may be called with data and
                // any object.
                let mut keep = |obj: gc_core::ObjRef| unsafe { f(data, obj.as_ptr().cast()) } != 0;
                gc_conservative::scan_task_filtered(mk, task, &mut keep) as isize
            }
        };
        // SAFETY: `m` is null or a ptls this library handed out (the caller's contract).
        unsafe { with_active_marker(m, "gc_scan_task", scan) }.unwrap_or_else(last_code)
    })
}

/// A foreign type whose objects' payloads are scanned conservatively (no mark function
/// needed); `sweepfunc` may be NULL. NULL on error.
///
/// # Safety
/// `name` null or NUL-terminated; `sweepfunc` null or a sweep function of the
/// documented signature; `heap` any pointer (checked against the live handles).
#[no_mangle]
pub unsafe extern "C" fn gc_new_conservative_type(
    heap: *mut gc_heap_t,
    name: *const c_char,
    sweepfunc: gc_sweepfunc_t,
    large: c_int,
) -> *mut c_void {
    guard("gc_new_conservative_type", std::ptr::null_mut(), || {
        let Some(h) = heap_handle(heap, "gc_new_conservative_type") else {
            return std::ptr::null_mut();
        };
        if name.is_null() {
            set_error("gc_new_conservative_type: name is NULL");
            return std::ptr::null_mut();
        }
        // SAFETY: NUL-terminated per the caller.
        let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
            set_error("gc_new_conservative_type: name is not UTF-8");
            return std::ptr::null_mut();
        };
        match gc_conservative::new_conservative_type(
            &h,
            name,
            // SAFETY: the C caller's function is the seed's sweep function (this
            // function's contract), called as `SweepProc::c` requires.
            sweepfunc.map_or(SweepProc::None, |f| unsafe { SweepProc::c(f) }),
            large != 0,
        ) {
            Ok(t) => t.as_obj().as_ptr().cast(),
            Err(e) => {
                set_gc_error(&e);
                std::ptr::null_mut()
            }
        }
    })
}

/// The seed's `jl_gc_enable_conservative_scanning`, for the default heap (callable before
/// or after `jl_init`, from any thread, any number of times).
#[no_mangle]
pub extern "C" fn jl_gc_enable_conservative_scanning() {
    // SAFETY: the default heap lives for the whole process.
    unsafe { gc_enable_conservative_scanning(default_heap()) };
}

/// The seed's `jl_gc_internal_obj_base_ptr`, for the default heap.
#[no_mangle]
#[allow(clippy::not_unsafe_ptr_arg_deref)] // p is only looked up, never dereferenced.
pub extern "C" fn jl_gc_internal_obj_base_ptr(p: *mut c_void) -> *mut jl_value_t {
    // SAFETY: the default heap lives for the whole process; any p is accepted.
    unsafe { internal_base(default_heap(), p, "jl_gc_internal_obj_base_ptr").cast() }
}

/// The seed's `jl_gc_is_internal_obj_alloc`, for the default heap.
#[no_mangle]
#[allow(clippy::not_unsafe_ptr_arg_deref)] // p is only looked up, never dereferenced.
pub extern "C" fn jl_gc_is_internal_obj_alloc(p: *mut jl_value_t) -> c_int {
    // SAFETY: the default heap lives for the whole process; any p is accepted.
    unsafe { gc_is_internal_obj_alloc(default_heap(), p.cast()) }
}

/// Whether `jl_gc_enable_conservative_gc_support` was called.
static GC_SUPPORT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Julia's `jl_gc_enable_conservative_gc_support`: Julia needs it before
/// `jl_gc_internal_obj_base_ptr` may be used; here lookups always work, so it only
/// records the call. It does not turn on conservative stack scanning (clients that call
/// it, such as GAP, scan their stacks themselves; `jl_gc_enable_conservative_scanning`
/// does that). Returns whether it had been called before (0 the first time), as Julia.
#[no_mangle]
pub extern "C" fn jl_gc_enable_conservative_gc_support() -> c_int {
    GC_SUPPORT.swap(true, std::sync::atomic::Ordering::AcqRel) as c_int
}

/// Julia's `jl_gc_conservative_gc_support_enabled`: whether
/// `jl_gc_enable_conservative_gc_support` was called.
#[no_mangle]
pub extern "C" fn jl_gc_conservative_gc_support_enabled() -> c_int {
    GC_SUPPORT.load(std::sync::atomic::Ordering::Acquire) as c_int
}
