//! The seed's GC-extension API (`jl_gc_*`, `jl_new_foreign_type`, `jl_typeof`, ...) over
//! the default heap: each name converts the seed's types and forwards to the native
//! entry of the same concern (`crate::alloc`, `crate::marking`, ...), keeping Julia's
//! signatures (errors are left for `jl_gc_last_error`). The hot paths
//! (`jl_get_ptls_states`, `jl_gc_alloc_typed`, the barriers, the mark-queue calls,
//! `jl_typeof`, `jl_gc_safepoint`) run without a panic guard, as their native entries.

use super::types::{
    jl_datatype_t, jl_gc_cb_notify_external_alloc_t, jl_gc_cb_notify_external_free_t,
    jl_gc_cb_post_gc_t, jl_gc_cb_pre_gc_t, jl_gc_cb_root_scanner_t, jl_gc_cb_task_scanner_t,
    jl_gc_collection_t, jl_markfunc_t, jl_module_t, jl_ptls_t, jl_sweepfunc_t, jl_sym_t, jl_task_t,
    jl_value_t, ptls, symbol_arg,
};
use crate::alloc::{gc_alloc, gc_schedule_sweep, gc_typeof, gc_wb, gc_wb_back};
use crate::callbacks::{
    set_callback, GC_CB_NOTIFY_EXTERNAL_ALLOC, GC_CB_NOTIFY_EXTERNAL_FREE, GC_CB_POST_GC,
    GC_CB_PRE_GC, GC_CB_ROOT_SCANNER, GC_CB_TASK_SCANNER,
};
use crate::entry::{arg, entry, set_status, Checked};
use crate::finalizers::{gc_add_finalizer, gc_finalize, gc_finalizer_t, gc_run_finalizers};
use crate::heap::{default_heap_ref, gc_default_heap};
use crate::marking::{gc_mark_queue_obj, gc_mark_queue_objarray};
use crate::mutator::{cur, current_mutator, gc_collect, gc_safepoint};
use crate::mutator::{gc_safe_enter, gc_safe_leave};
use crate::stats::gc_max_internal_obj_size;
use crate::tasks::{gc_current_task, gc_register_task, gc_unregister_task, task_arg};
use crate::types::{gc_markfunc_t, gc_sweepfunc_t, new_foreign_type};
use crate::weak::gc_weakref_new;
use crate::{gc_clear_error, gc_last_error, gc_last_status};
use ffi_support::Status;
use gc_core::ffi::{back_barrier_fires, barrier_fires};
use gc_core::{GcError, ObjRef};
use std::ffi::{c_char, c_int, c_void};

/// The calling thread's `ptls`: its attached mutator's, or, on one of a heap's collector
/// helper threads (a mark function or task scanner running there), that thread's own
/// record, as Julia's GC threads have a `ptls` of their own (GAP 4.15's task scanner
/// marks from `jl_get_ptls_states()` on whichever thread marks the task). NULL (and an
/// error) on any other thread.
#[no_mangle]
pub extern "C" fn jl_get_ptls_states() -> jl_ptls_t {
    let m = cur();
    if m.is_null() {
        set_status(Status::NotAttached, GcError::NotAttached);
    }
    m as jl_ptls_t
}

/// The last error on this thread, NULL if none.
#[no_mangle]
pub extern "C" fn jl_gc_last_error() -> *const c_char {
    gc_last_error()
}

/// The status of the last error on this thread (`gc_last_status`).
#[no_mangle]
pub extern "C" fn jl_gc_last_status() -> i32 {
    gc_last_status()
}

/// Forgets the last error.
#[no_mangle]
pub extern "C" fn jl_gc_clear_error() {
    gc_clear_error()
}

/// `jl_gc_max_internal_obj_size`.
#[no_mangle]
pub extern "C" fn jl_gc_max_internal_obj_size() -> usize {
    gc_max_internal_obj_size()
}

/// `jl_new_foreign_type`: module and super may be NULL (super, if given, must be a type
/// of the default heap). Neither is stored: this ABI has no call that reads a type's
/// module or supertype back (`jl_datatype_t` is opaque here).
///
/// # Safety
/// `name` null or from `jl_symbol` (it is checked); the functions have the seed's
/// signatures.
#[no_mangle]
pub unsafe extern "C" fn jl_new_foreign_type(
    name: *mut jl_sym_t,
    _module: *mut jl_module_t,
    super_: *mut jl_datatype_t,
    markfunc: jl_markfunc_t,
    sweepfunc: jl_sweepfunc_t,
    haspointers: c_int,
    large: c_int,
) -> *mut jl_datatype_t {
    entry("jl_new_foreign_type", || {
        // SAFETY: the seed's function types take pointers where ours take void pointers:
        // same ABI, same representation.
        let (markfunc, sweepfunc) = unsafe {
            (
                std::mem::transmute::<jl_markfunc_t, gc_markfunc_t>(markfunc),
                std::mem::transmute::<jl_sweepfunc_t, gc_sweepfunc_t>(sweepfunc),
            )
        };
        let name = symbol_arg(name, "jl_new_foreign_type")?;
        let name = name
            .name
            .to_str()
            .expect("symbols are UTF-8 (jl_symbol checked)");
        let heap = default_heap_ref();
        if !super_.is_null() {
            heap.type_from_addr(super_ as usize)
                .map_err(|_| GcError::NotAType {
                    addr: super_ as usize,
                })?;
        }
        // SAFETY: the functions have the seed's signatures (this function's contract).
        let ty = unsafe { new_foreign_type(heap, name, markfunc, sweepfunc, haspointers, large) }?;
        Ok(ty.cast())
    })
}

/// `jl_gc_alloc_typed`.
///
/// # Safety
/// As for `gc_alloc`.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_alloc_typed(
    ptls: jl_ptls_t,
    sz: usize,
    ty: *mut c_void,
) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { gc_alloc(self::ptls(ptls), sz, ty) }
}

/// `jl_gc_schedule_foreign_sweepfunc` (errors are reported by `jl_gc_last_error`).
///
/// # Safety
/// As for `gc_schedule_sweep`.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_schedule_foreign_sweepfunc(ptls: jl_ptls_t, obj: *mut jl_value_t) {
    // SAFETY: forwarded (guarded there).
    unsafe { gc_schedule_sweep(self::ptls(ptls), obj.cast()) };
}

/// `jl_gc_mark_queue_obj`.
///
/// # Safety
/// As for `gc_mark_queue_obj`.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_mark_queue_obj(ptls: jl_ptls_t, obj: *mut jl_value_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { gc_mark_queue_obj(self::ptls(ptls), obj.cast()) }
}

/// `jl_gc_mark_queue_objarray`.
///
/// # Safety
/// As for `gc_mark_queue_objarray`.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_mark_queue_objarray(
    ptls: jl_ptls_t,
    parent: *mut jl_value_t,
    objs: *mut *mut jl_value_t,
    nobjs: usize,
) {
    // SAFETY: forwarded.
    unsafe { gc_mark_queue_objarray(self::ptls(ptls), parent.cast(), objs.cast(), nobjs) }
}

macro_rules! set_cb {
    ($name:ident, $kind:expr, $ty:ty) => {
        /// The seed's callback setter: `enable` non-zero registers (at most once; a repeat
        /// is refused with an error), zero removes.
        #[no_mangle]
        pub extern "C" fn $name(cb: $ty, enable: c_int) {
            entry(stringify!($name), || {
                let f = cb.map_or(std::ptr::null_mut(), |f| f as *mut c_void);
                // SAFETY: f has the kind's signature (typed above).
                unsafe { set_callback(default_heap_ref(), $kind, f, enable, stringify!($name)) }?;
                Ok(())
            })
        }
    };
}

set_cb!(jl_gc_set_cb_pre_gc, GC_CB_PRE_GC, jl_gc_cb_pre_gc_t);
set_cb!(jl_gc_set_cb_post_gc, GC_CB_POST_GC, jl_gc_cb_post_gc_t);
set_cb!(
    jl_gc_set_cb_root_scanner,
    GC_CB_ROOT_SCANNER,
    jl_gc_cb_root_scanner_t
);
set_cb!(
    jl_gc_set_cb_task_scanner,
    GC_CB_TASK_SCANNER,
    jl_gc_cb_task_scanner_t
);
set_cb!(
    jl_gc_set_cb_notify_external_alloc,
    GC_CB_NOTIFY_EXTERNAL_ALLOC,
    jl_gc_cb_notify_external_alloc_t
);
set_cb!(
    jl_gc_set_cb_notify_external_free,
    GC_CB_NOTIFY_EXTERNAL_FREE,
    jl_gc_cb_notify_external_free_t
);

/// `jl_gc_collect(JL_GC_AUTO | JL_GC_FULL | JL_GC_INCREMENTAL)` on the calling thread.
#[no_mangle]
pub extern "C" fn jl_gc_collect(kind: jl_gc_collection_t) {
    let kind = kind.min(c_int::MAX as jl_gc_collection_t) as c_int;
    // SAFETY: gc_collect checks the mutator (and is guarded).
    unsafe { gc_collect(cur(), kind) };
}

/// `jl_gc_wb`: call after storing `ptr` into `parent`.
///
/// # Safety
/// As for `gc_wb`, on the calling thread.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_wb(parent: *mut c_void, ptr: *mut c_void) {
    let (Some(p), Some(c)) = (
        ObjRef::from_ptr(parent.cast()),
        ObjRef::from_ptr(ptr.cast()),
    ) else {
        return;
    };
    // The thread's mutator is looked up only when something must be remembered.
    // SAFETY: live objects per the caller.
    if !unsafe { barrier_fires(p, c) } {
        return;
    }
    // SAFETY: forwarded.
    unsafe { gc_wb(cur(), parent, ptr) }
}

/// `jl_gc_wb_back`.
///
/// # Safety
/// As for `gc_wb_back`, on the calling thread.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_wb_back(ptr: *mut c_void) {
    let Some(p) = ObjRef::from_ptr(ptr.cast()) else {
        return;
    };
    // SAFETY: live object per the caller.
    if !unsafe { back_barrier_fires(p) } {
        return;
    }
    // SAFETY: forwarded.
    unsafe { gc_wb_back(cur(), ptr) }
}

/// `jl_typeof`.
///
/// # Safety
/// As for `gc_typeof`.
#[no_mangle]
pub unsafe extern "C" fn jl_typeof(v: *mut jl_value_t) -> *mut jl_value_t {
    // SAFETY: forwarded.
    unsafe { gc_typeof(v.cast()).cast() }
}

/// `jl_gc_safepoint` on the calling thread.
#[no_mangle]
pub extern "C" fn jl_gc_safepoint() {
    // SAFETY: gc_safepoint checks the mutator.
    unsafe { gc_safepoint(cur()) }
}

/// Registers a task's stack `[lo, hi)` with the default heap.
///
/// # Safety
/// As for `gc_register_task`: the range stays mapped and readable while registered
/// (conservative scans read it).
#[no_mangle]
pub unsafe extern "C" fn jl_gc_register_task(lo: *mut c_void, hi: *mut c_void) -> *mut jl_task_t {
    // SAFETY: the range as the caller guarantees (guarded there).
    unsafe { gc_register_task(gc_default_heap(), lo, hi).cast() }
}

/// Unregisters a task of the default heap.
#[no_mangle]
pub extern "C" fn jl_gc_unregister_task(task: *mut jl_task_t) -> c_int {
    gc_unregister_task(gc_default_heap(), task.cast())
}

/// Julia's `jl_task_stack_buffer`: the task's stack start and size; `tid` gets -1.
///
/// # Safety
/// `task` null or registered; `size` and `tid` null or writable.
#[no_mangle]
pub unsafe extern "C" fn jl_task_stack_buffer(
    task: *mut jl_task_t,
    size: *mut usize,
    tid: *mut c_int,
) -> *mut c_void {
    entry("jl_task_stack_buffer", || {
        // SAFETY: null or a registered task per the caller.
        let (lo, hi) = unsafe { task_arg(task.cast(), "jl_task_stack_buffer") }?.stack_bounds();
        // SAFETY: writable when non-null.
        unsafe {
            if !size.is_null() {
                *size = hi - lo;
            }
            if !tid.is_null() {
                *tid = -1;
            }
        }
        Ok(lo as *mut c_void)
    })
}

/// `jl_gc_safe_enter`: as `gc_safe_enter` (it jumps there, so the caller's registers and
/// stack pointer are the ones saved).
///
/// # Safety
/// As for `gc_safe_enter`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn jl_gc_safe_enter(ptls: jl_ptls_t) -> i8 {
    std::arch::naked_asm!("jmp {target}", target = sym gc_safe_enter)
}

/// `jl_gc_safe_enter` (non-x86_64: registers are saved in the callee).
///
/// # Safety
/// As for `gc_safe_enter`.
///
/// cbindgen:ignore
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub unsafe extern "C" fn jl_gc_safe_enter(ptls: jl_ptls_t) -> i8 {
    // SAFETY: forwarded (the ptls is checked there).
    unsafe { gc_safe_enter(ptls as *mut crate::mutator::gc_mutator_t) }
}

/// `jl_gc_safe_leave`.
///
/// # Safety
/// As for `gc_safe_leave`.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_safe_leave(ptls: jl_ptls_t, state: i8) {
    // SAFETY: forwarded (guarded there).
    unsafe { gc_safe_leave(self::ptls(ptls), state) }
}

/// The task of the calling thread's own stack.
#[no_mangle]
pub extern "C" fn jl_gc_current_task() -> *mut jl_task_t {
    gc_current_task().cast()
}

/// `jl_weakref_t`: a weak-reference object; `value` reads the referent, NULL once
/// cleared (Julia reads `nothing`). C may store into `value` directly (no barrier
/// needed), as Julia allows.
#[repr(C)]
pub struct jl_weakref_t {
    /// The referent, NULL once cleared.
    pub value: *mut jl_value_t,
}

/// `jl_gc_new_weakref`: a weak-reference object on the calling thread. NULL on error.
///
/// # Safety
/// `value` null or a live object of the default heap.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_new_weakref(value: *mut jl_value_t) -> *mut jl_weakref_t {
    // SAFETY: forwarded; the mutator is checked (and the call guarded) there.
    unsafe { gc_weakref_new(cur(), value.cast()).cast() }
}

/// `jl_gc_add_ptr_finalizer`: `f` is a `void (*)(void *)` called once with `v` after a
/// collection found `v` unreachable (`v` and what it reaches stay alive until then).
///
/// # Safety
/// `v` anything (it is checked); `f` null or a function of that type.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_add_ptr_finalizer(
    ptls: jl_ptls_t,
    v: *mut jl_value_t,
    f: *mut c_void,
) {
    // SAFETY: a function pointer and a data pointer have the same size and
    // representation here; the caller passes a `void (*)(void *)` (or NULL).
    let f = unsafe { std::mem::transmute::<*mut c_void, gc_finalizer_t>(f) };
    // SAFETY: forwarded (guarded there).
    unsafe { gc_add_finalizer(self::ptls(ptls), v.cast(), f) };
}

/// `jl_finalize`: runs the finalizers of `o` now, once, on the calling thread.
///
/// # Safety
/// `o` null or a live object of the default heap.
#[no_mangle]
pub unsafe extern "C" fn jl_finalize(o: *mut jl_value_t) {
    // SAFETY: forwarded (guarded there).
    unsafe { gc_finalize(cur(), o.cast()) };
}

/// Checks that `ct` is NULL or the calling thread's own task.
fn own_task(ct: *mut jl_task_t, what: &str) -> Checked<()> {
    if ct.is_null() || ct.cast() == gc_current_task() {
        return Ok(());
    }
    Err(arg(format!(
        "{what}: task {ct:p} is not the calling thread's"
    )))
}

/// `jl_gc_run_pending_finalizers`: runs the pending finalizers on the calling thread
/// (`ct` NULL or its own task), unless inside a finalizer or while finalizers are
/// disabled on it with `jl_gc_enable_finalizers`.
#[no_mangle]
pub extern "C" fn jl_gc_run_pending_finalizers(ct: *mut jl_task_t) {
    entry("jl_gc_run_pending_finalizers", || {
        own_task(ct, "jl_gc_run_pending_finalizers")?;
        if current_mutator("jl_gc_run_pending_finalizers").is_ok_and(|m| m.finalizers_disabled()) {
            return Ok(());
        }
        // SAFETY: gc_run_finalizers checks the mutator.
        unsafe { gc_run_finalizers(cur()) };
        Ok(())
    })
}

/// `jl_gc_enable_finalizers`: `on == 0` disables running finalizers on the calling thread
/// (nesting: each disable needs an enable), `on != 0` re-enables them and runs those
/// pending. Enabling more often than disabling is refused with an error.
#[no_mangle]
pub extern "C" fn jl_gc_enable_finalizers(ct: *mut jl_task_t, on: c_int) {
    entry("jl_gc_enable_finalizers", || {
        own_task(ct, "jl_gc_enable_finalizers")?;
        let mut m = current_mutator("jl_gc_enable_finalizers")?;
        if on == 0 {
            m.disable_finalizers();
            return Ok(());
        }
        let run = m
            .enable_finalizers()
            .map_err(|e| arg(format!("jl_gc_enable_finalizers: {e}")))?;
        if run {
            // SAFETY: gc_run_finalizers checks the mutator (running, not collecting).
            unsafe { gc_run_finalizers(cur()) };
        }
        Ok(())
    })
}
