//! Marking from C: the mark-queue calls mark functions, scanners and the weak-processing
//! hook make (`gc_mark_queue_obj`, `gc_mark_queue_objarray`, `gc_is_marked`: hot paths,
//! no panic guard), which mark stack a `ptls` queues to ([`marking_head`]), and
//! `gc_marking_ptls` for the compat header's inline fast path.

use crate::entry::{arg, failure, Checked};
use crate::mutator::{checked_mutator, gc_mutator_t};
use ffi_support::Status;
use gc_core::ffi::{current_ptls, helper_ptls, thread_id, TlsHead, HELPER_MAGIC, MUTATOR_MAGIC};
use gc_core::{GcError, Marker, ObjRef};
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

/// The marker of the collection the calling thread marks for; refused (naming `what`)
/// outside marking or for a `ptls` that is not the calling thread's.
///
/// # Safety
/// `m` is null or a `ptls` this library handed out (a mutator or a collector thread's
/// record).
pub(crate) unsafe fn active_marker<'a>(
    m: *mut gc_mutator_t,
    what: &'static str,
) -> Checked<&'a mut Marker<'a>> {
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    let head = unsafe { marking_head(m, what) }?;
    let p = head.marker.load(Ordering::Acquire) as *mut Marker<'a>;
    if p.is_null() {
        return Err(failure(Status::State, GcError::NotMarking { what }));
    }
    // SAFETY: set by the collector on this thread for the mark phase; mark functions and
    // scanners run with no other reference to it alive.
    Ok(unsafe { &mut *p })
}

/// The `ptls` of a thread that may be marking: the calling thread's attached mutator, or
/// the calling collector helper thread's record.
///
/// # Safety
/// `m` is null or a `ptls` this library handed out.
#[inline]
unsafe fn marking_head<'a>(m: *mut gc_mutator_t, what: &'static str) -> Checked<&'a TlsHead> {
    let head = m as *const TlsHead;
    if !head.is_null() {
        // SAFETY: a non-null ptls is, by the documented contract, a pointer this library
        // handed out (mutator or helper record), which stays readable.
        let h = unsafe { &*head };
        let magic = h.magic.load(Ordering::Relaxed);
        if magic == MUTATOR_MAGIC || magic == HELPER_MAGIC {
            if h.thread.load(Ordering::Relaxed) == thread_id() {
                return Ok(h);
            }
            // A ptls of another thread. GAP keeps the collecting thread's ptls in a
            // global (set in its pre-GC callback) and passes that from its mark
            // functions, which here run on every collector thread: the reference goes
            // on the calling collector thread's own mark stack instead of racing for
            // another thread's.
            if let Some(own) = own_marking_head() {
                return Ok(own);
            }
        }
    }
    if helper_ptls().is_null() {
        // SAFETY: the ptls is null or one this library handed out (this function's
        // contract).
        let ms = unsafe { checked_mutator(m, what) }?;
        // SAFETY: the head is only read (here and by the callers of marking_head).
        Ok(unsafe { ms.head() })
    } else {
        Err(arg(format!(
            "{what}: ptls {m:p} is not the calling collector thread's ({:p})",
            helper_ptls()
        )))
    }
}

/// The calling thread's own record if it is marking now: a collector helper thread's,
/// or the collecting thread's while its marker is set.
fn own_marking_head<'a>() -> Option<&'a TlsHead> {
    let helper = helper_ptls();
    if !helper.is_null() {
        // SAFETY: a helper thread's record lives as long as the thread.
        return Some(unsafe { &*helper });
    }
    let cur = current_ptls();
    if cur.is_null() {
        return None;
    }
    // SAFETY: the calling thread's attached mutator is alive while attached; its head
    // is only read (here, and by C through `jl_gc_mark_ptls`-style callers).
    let head = unsafe { (*cur).head() };
    (!head.marker.load(Ordering::Acquire).is_null()).then_some(head)
}

/// The calling thread's own `ptls` while it marks (a collector helper thread's record,
/// or the collecting thread's mutator while its marker is set), NULL otherwise. The
/// compat header's inline `jl_gc_mark_queue_obj` caches it per thread, so that a
/// reference queued with another thread's `ptls` (GAP passes a saved one from mark
/// functions that run on every collector thread) needs no call out of line.
#[no_mangle]
pub extern "C" fn gc_marking_ptls() -> *mut c_void {
    own_marking_head().map_or(std::ptr::null_mut(), |h| h as *const TlsHead as *mut c_void)
}

/// Queues `obj` for marking (`jl_gc_mark_queue_obj`): 1 if it is young, 0 if old, NULL
/// or on error (outside the mark phase, wrong thread).
///
/// # Safety
/// `m` null or a mutator pointer; `obj` null or a live object of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_mark_queue_obj(m: *mut gc_mutator_t, obj: *mut c_void) -> c_int {
    let Some(o) = ObjRef::from_ptr(obj.cast()) else {
        return 0;
    };
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    match unsafe { active_marker(m, "gc_mark_queue_obj") } {
        // SAFETY: a live object of the marker's heap (the caller's contract).
        Ok(mk) => (unsafe { mk.queue(o) }) as c_int,
        Err(_) => 0,
    }
}

/// Queues the `n` references at `objs`, inside `parent`, with one mark-stack entry
/// (`jl_gc_mark_queue_objarray`).
///
/// # Safety
/// As for `gc_mark_queue_obj`; `objs` readable for `n` words inside `parent`.
#[no_mangle]
pub unsafe extern "C" fn gc_mark_queue_objarray(
    m: *mut gc_mutator_t,
    parent: *mut c_void,
    objs: *mut *mut c_void,
    n: usize,
) {
    let Some(p) = ObjRef::from_ptr(parent.cast()) else {
        arg("gc_mark_queue_objarray: parent is NULL");
        return;
    };
    if objs.is_null() && n > 0 {
        arg("gc_mark_queue_objarray: objs is NULL");
        return;
    }
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    if let Ok(mk) = unsafe { active_marker(m, "gc_mark_queue_objarray") } {
        // SAFETY: the caller guarantees the array is inside the parent.
        unsafe { mk.queue_array(p, objs as *const Option<ObjRef>, n) };
    }
}

/// In a weak-processing hook (or a mark function): 1 if `obj` is marked so far (it
/// survives this collection), 0 if not or on error (outside marking, wrong thread).
///
/// # Safety
/// `m` null or a mutator pointer; `obj` null or a live object of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_is_marked(m: *mut gc_mutator_t, obj: *mut c_void) -> c_int {
    let Some(o) = ObjRef::from_ptr(obj.cast()) else {
        return 0;
    };
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    match unsafe { active_marker(m, "gc_is_marked") } {
        // SAFETY: a live object of the marker's heap (the caller's contract).
        Ok(mk) => (unsafe { mk.is_marked(o) }) as c_int,
        Err(_) => 0,
    }
}
