//! Allocation and the per-object hot paths from C: `gc_alloc` (a fast path with no
//! panic guard and a guarded slow path), the write barriers, `gc_typeof`, `gc_is_young`,
//! and scheduling an object's sweep function. The hot paths take a raw `ptls` and raw
//! object pointers, checked as documented in their `# Safety` sections; a panic there
//! aborts (Rust's rule for an `extern "C"` function) instead of unwinding into C.

use crate::entry::{entry, non_null_object};
use crate::mutator::{checked_mutator, gc_mutator_t};
use gc_core::ffi::{back_barrier_fires, barrier_fires, thread_id, MUTATOR_MAGIC};
use gc_core::{GcError, MutatorShared, ObjRef};
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

/// Allocates a zeroed object (`jl_gc_alloc_typed`). NULL on error (size 0, size over the
/// limit of a small foreign type, not a type, wrong thread, inside a collection).
///
/// # Safety
/// `m` is null or a mutator pointer; `ty` anything (it is validated).
#[no_mangle]
pub unsafe extern "C" fn gc_alloc(
    m: *mut gc_mutator_t,
    size: usize,
    ty: *mut c_void,
) -> *mut c_void {
    // The fast path: the calling thread's own mutator (its magic and owning thread: one
    // load of the thread pointer), running managed code (not in a GC-safe region), no
    // checked mode, a type it allocated before (the cache), a free cell of its current
    // page. Everything else, errors included, in `gc_alloc_slow`.
    let ms = m as *const MutatorShared;
    if !ms.is_null()
        // SAFETY: a non-null ptls is, by the documented contract, a pointer this library
        // handed out; mutator memory is recycled, never freed, so it stays readable; its
        // head is only read.
        && unsafe {
            (*ms).head().magic.load(Ordering::Relaxed) == MUTATOR_MAGIC
                && (*ms).head().thread.load(Ordering::Relaxed) == thread_id()
                && !(*ms).head().checked.load(Ordering::Relaxed)
                && (*ms).is_running()
        }
    {
        // SAFETY: the calling thread's attached mutator (the contract above).
        let ms = unsafe { &*ms };
        // SAFETY: ms is the calling thread's mutator.
        if let Some(t) = unsafe { ms.cached_type(ty as usize) } {
            // SAFETY: as above.
            if let Some(obj) = unsafe { ms.alloc_fast::<false>(size, t) } {
                return obj.as_ptr().cast();
            }
        }
    }
    // SAFETY: forwarded.
    unsafe { gc_alloc_slow(m, size, ty) }
}

/// Everything `gc_alloc`'s fast path does not do: checks, type validation, the
/// mutator's slow path, errors.
///
/// # Safety
/// As for `gc_alloc`.
#[cold]
#[inline(never)]
unsafe fn gc_alloc_slow(m: *mut gc_mutator_t, size: usize, ty: *mut c_void) -> *mut c_void {
    // The panic guard is here, off the fast path (which has none: a panic there aborts,
    // Rust's rule for an `extern "C"` function, rather than unwinding into C).
    entry("gc_alloc", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { checked_mutator(m, "gc_alloc") }?;
        // SAFETY: ms is the calling thread's mutator.
        let t = unsafe { ms.type_at_cached(ty as usize) }?;
        if !ms.is_running() {
            // Checked before the thread's current page is used: a thread in a GC-safe region
            // counts as stopped, and a collection may be sweeping that page.
            return Err(GcError::InGcSafeRegion.into());
        }
        // SAFETY: ms is the calling thread's mutator.
        Ok(unsafe { ms.alloc(size, t) }?.as_ptr().cast())
    })
}

/// The write barrier: call after storing `child` into `parent` (either may be NULL).
///
/// # Safety
/// `m` null or a mutator pointer; `parent` and `child` null or live objects of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_wb(m: *mut gc_mutator_t, parent: *mut c_void, child: *mut c_void) {
    let (Some(p), Some(c)) = (
        ObjRef::from_ptr(parent.cast()),
        ObjRef::from_ptr(child.cast()),
    ) else {
        return;
    };
    // The common case (nothing to remember) needs no thread lookup at all.
    // SAFETY: live objects per the caller.
    if !unsafe { barrier_fires(p, c) } {
        return;
    }
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    if let Ok(ms) = unsafe { checked_mutator(m, "gc_wb") } {
        // SAFETY: calling thread's mutator; live objects.
        unsafe { ms.wb(p, c) };
    }
}

/// The backward barrier: call after storing possibly young references into `parent`.
///
/// # Safety
/// As for `gc_wb`.
#[no_mangle]
pub unsafe extern "C" fn gc_wb_back(m: *mut gc_mutator_t, parent: *mut c_void) {
    let Some(p) = ObjRef::from_ptr(parent.cast()) else {
        return;
    };
    // SAFETY: live object per the caller.
    if !unsafe { back_barrier_fires(p) } {
        return;
    }
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    if let Ok(ms) = unsafe { checked_mutator(m, "gc_wb_back") } {
        // SAFETY: as above.
        unsafe { ms.wb_back(p) };
    }
}

/// Schedules the sweep function of `obj` (once; a second call returns `RT_ERR_STATE`
/// and never causes a second sweep).
///
/// # Safety
/// `m` null or a mutator pointer; `obj` null or a live object of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_schedule_sweep(m: *mut gc_mutator_t, obj: *mut c_void) -> c_int {
    entry("gc_schedule_sweep", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { checked_mutator(m, "gc_schedule_sweep") }?;
        let o = non_null_object(obj, "gc_schedule_sweep")?;
        // SAFETY: calling thread's mutator; live object per the caller.
        unsafe { ms.schedule_sweep(o) }?;
        Ok(0)
    })
}

/// The type of a live object (`jl_typeof`); NULL for NULL, and for a free or
/// never-used pool cell (whose header holds a free-list link or 0, never a type), so
/// that the seed's validity check `base_ptr(jl_typeof(obj)) != NULL` rejects them.
///
/// # Safety
/// `obj` null or a live object (or a cell `is_internal_obj_alloc` reported).
#[no_mangle]
pub unsafe extern "C" fn gc_typeof(obj: *mut c_void) -> *mut c_void {
    match ObjRef::from_ptr(obj.cast()) {
        // SAFETY: a live object or a pool cell per the caller.
        Some(o) => unsafe { o.type_ptr() }.cast(),
        None => std::ptr::null_mut(),
    }
}

/// 1 if a live object is young (not yet promoted), 0 if it is old or NULL: the answer
/// `gc_mark_queue_obj` gives during marking, available at any time (for tests and
/// runtimes that want to know which generation an object is in).
///
/// # Safety
/// `obj` null or a live object.
#[no_mangle]
pub unsafe extern "C" fn gc_is_young(obj: *mut c_void) -> c_int {
    match ObjRef::from_ptr(obj.cast()) {
        // SAFETY: a live object per the caller.
        Some(o) => (unsafe { o.is_young() }) as c_int,
        None => 0,
    }
}
