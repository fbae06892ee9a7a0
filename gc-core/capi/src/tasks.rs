//! Tasks from C: stacks registered with a heap (`gc_register_task`), their bounds and
//! saved stack pointers, and the calling thread's own task. A `gc_task_t *` is gc-core's
//! own C handle of a task (`Task::c_handle`), looked up in the heap where a call may
//! be given any pointer (`gc_unregister_task`) and trusted where a scanner was given it.

use crate::entry::{arg, entry, Checked};
use crate::heap::{gc_heap_t, heap_arg};
use gc_core::ffi::current_ptls;
use gc_core::{GcError, Task};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// A registered stack (opaque; the seed's `jl_task_t`).
#[repr(C)]
pub struct gc_task_t {
    _opaque: [u8; 0],
}

/// The C handle of a task.
pub(crate) fn task_ptr(t: &Arc<Task>) -> *mut gc_task_t {
    t.c_handle().cast()
}

/// A task pointer handed to a task scanner (`gc_task_t`) as the Rust task.
///
/// # Safety
/// `task` is non-null and a registered, live task (what a task scanner is given), for
/// as long as the returned reference is used.
pub unsafe fn task_from_ptr<'a>(task: *mut gc_task_t) -> &'a Task {
    // SAFETY: forwarded from the caller: gc_task_t pointers are tasks' C handles.
    unsafe { Task::from_c_handle(task as *const c_void) }
}

/// The task behind a non-NULL task pointer; refused (naming `what`) for NULL.
///
/// # Safety
/// `task` is null or a registered, live task.
pub(crate) unsafe fn task_arg<'a>(task: *mut gc_task_t, what: &str) -> Checked<&'a Task> {
    if task.is_null() {
        return Err(arg(format!("{what}: task is NULL")));
    }
    // SAFETY: a registered task per the caller.
    Ok(unsafe { task_from_ptr(task) })
}

/// Registers a stack `[lo, hi)` as a task. NULL on error (empty range, bad heap).
///
/// # Safety
/// `[lo, hi)` is readable memory for as long as the task stays registered
/// (conservative scanning reads it); `heap` any pointer (checked against the live
/// handles).
#[no_mangle]
pub unsafe extern "C" fn gc_register_task(
    heap: *mut gc_heap_t,
    lo: *mut c_void,
    hi: *mut c_void,
) -> *mut gc_task_t {
    entry("gc_register_task", || {
        let heap = heap_arg(heap, "gc_register_task")?;
        // SAFETY: the C contract of gc_register_task: [lo, hi) stays mapped while registered.
        Ok(task_ptr(&unsafe {
            heap.register_task(lo as usize, hi as usize)
        }?))
    })
}

/// Unregisters a task registered with `gc_register_task`. `RT_ERR_ARG` if unknown.
#[no_mangle]
pub extern "C" fn gc_unregister_task(heap: *mut gc_heap_t, task: *mut gc_task_t) -> c_int {
    entry("gc_unregister_task", || {
        let heap = heap_arg(heap, "gc_unregister_task")?;
        let t = heap.task_from_addr(task as usize).ok_or(GcError::BadTask {
            addr: task as usize,
            reason: "not a registered task of this heap",
        })?;
        heap.unregister_task(&t)?;
        Ok(0)
    })
}

/// Records the lowest stack address in use by a suspended task (0: unknown).
///
/// # Safety
/// `task` null or a registered task.
#[no_mangle]
pub unsafe extern "C" fn gc_task_set_sp(task: *mut gc_task_t, sp: *mut c_void) {
    entry("gc_task_set_sp", || {
        // SAFETY: null or a registered task per the caller.
        unsafe { task_arg(task, "gc_task_set_sp") }?.set_saved_sp(sp as usize);
        Ok(())
    })
}

/// The stack bounds of a task.
///
/// # Safety
/// `task` null or a registered task; `lo` and `hi` null or writable.
#[no_mangle]
pub unsafe extern "C" fn gc_task_stack(
    task: *mut gc_task_t,
    lo: *mut *mut c_void,
    hi: *mut *mut c_void,
) -> c_int {
    entry("gc_task_stack", || {
        // SAFETY: null or a registered task per the caller.
        let (l, h) = unsafe { task_arg(task, "gc_task_stack") }?.stack_bounds();
        // SAFETY: writable when non-null per the caller.
        unsafe {
            if !lo.is_null() {
                *lo = l as *mut c_void;
            }
            if !hi.is_null() {
                *hi = h as *mut c_void;
            }
        }
        Ok(0)
    })
}

/// The calling thread's own task (its stack), NULL if not attached.
#[no_mangle]
pub extern "C" fn gc_current_task() -> *mut gc_task_t {
    entry("gc_current_task", || {
        let m = current_ptls();
        if m.is_null() {
            return Err(GcError::NotAttached.into());
        }
        // SAFETY: the current thread's mutator is alive while attached.
        Ok(task_ptr(unsafe { &*m }.task()))
    })
}
