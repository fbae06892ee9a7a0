//! Weak references from C: weak-reference objects in the heap (`gc_weakref_t`, the
//! seed's `jl_weakref_t`) and weak handles for the embedder outside it
//! (`gc_weak_handle_t`, in the registry, [`crate::entry::HANDLES`]).

use crate::entry::{arg, checked_object, entry, registered, unregister, HANDLES};
use crate::heap::{gc_heap_t, heap_arg};
use crate::mutator::{checked_mutator, gc_mutator_t};
use ffi_support::Handle;
use gc_core::{Mutator, ObjRef, WeakRef};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

/// A weak-reference object (`gc_weakref_new`): a heap object whose one field reads the
/// referent, and reads NULL once a collection found the referent unreachable. Never a
/// root. C code reads `value` directly and may store a live object of the heap (or NULL)
/// into it directly, from the thread that owns the object, with no barrier needed (Julia
/// allows it; GAP's weakptr.c does it): every collection checks the referent of every
/// weak-reference object. `gc_weakref_set` does the same store after checking `wr`'s
/// type.
#[repr(C)]
pub struct gc_weakref_t {
    /// The referent, NULL once cleared.
    pub value: *mut c_void,
}

/// A weak handle for the embedder (`gc_weak_handle_new`), outside the heap: an opaque
/// handle.
pub struct gc_weak_handle_t {
    weak: WeakRef,
}

impl Handle for gc_weak_handle_t {
    const KIND: &'static str = "weak";
}

/// Allocates a weak-reference object pointing at `obj` (NULL allowed: a cleared one).
/// NULL on error. A safepoint: `obj` must be reachable across the call.
///
/// # Safety
/// `m` null or a mutator pointer; `obj` null or a live object of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_weakref_new(
    m: *mut gc_mutator_t,
    obj: *mut c_void,
) -> *mut gc_weakref_t {
    entry("gc_weakref_new", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { checked_mutator(m, "gc_weakref_new") }?;
        // SAFETY: the calling thread's attached mutator.
        let mut mu = unsafe { Mutator::borrowed(ms) };
        Ok(mu
            .new_weak_object(ObjRef::from_ptr(obj.cast()))?
            .as_ptr()
            .cast())
    })
}

/// The referent of a weak-reference object, NULL once cleared (or for NULL `wr`).
///
/// # Safety
/// `wr` null or a live weak-reference object.
#[no_mangle]
pub unsafe extern "C" fn gc_weakref_get(wr: *mut gc_weakref_t) -> *mut c_void {
    entry("gc_weakref_get", || {
        if wr.is_null() {
            return Err(arg("gc_weakref_get: weak reference is NULL"));
        }
        // SAFETY: a live weak-reference object: its first word is the referent, which the
        // collector writes atomically.
        Ok(unsafe { (*(wr as *const AtomicPtr<c_void>)).load(Ordering::Acquire) })
    })
}

/// Points a weak-reference object at `obj` (NULL: at nothing). `RT_ERR_ARG` if `wr` is
/// not a weak-reference object or on a bad thread.
///
/// # Safety
/// `m` null or a mutator pointer; `wr` and `obj` anything (both are checked to be
/// allocated objects of the thread's heap before either is read).
#[no_mangle]
pub unsafe extern "C" fn gc_weakref_set(
    m: *mut gc_mutator_t,
    wr: *mut gc_weakref_t,
    obj: *mut c_void,
) -> c_int {
    entry("gc_weakref_set", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { checked_mutator(m, "gc_weakref_set") }?;
        if wr.is_null() {
            return Err(arg("gc_weakref_set: weak reference is NULL"));
        }
        // SAFETY: the calling thread's attached mutator.
        let mut mu = unsafe { Mutator::borrowed(ms) };
        let w = checked_object(mu.heap(), wr.cast(), "gc_weakref_set")?;
        let target = match obj.is_null() {
            true => None,
            false => Some(checked_object(mu.heap(), obj, "gc_weakref_set")?),
        };
        // SAFETY: both checked to be allocated objects of this heap just above.
        unsafe { mu.weak_object_set(w, target) }?;
        Ok(0)
    })
}

/// The type of weak-reference objects of `heap` (what `gc_typeof` returns for them).
#[no_mangle]
pub extern "C" fn gc_weakref_type(heap: *mut gc_heap_t) -> *mut c_void {
    entry("gc_weakref_type", || {
        let heap = heap_arg(heap, "gc_weakref_type")?;
        Ok(heap.weak_ref_type().as_obj().as_ptr().cast())
    })
}

/// A weak handle to `obj` for the embedder (lives outside the heap, never a root). NULL
/// on error (bad heap handle, `obj` NULL or not an allocated object of the heap).
#[no_mangle]
pub extern "C" fn gc_weak_handle_new(
    heap: *mut gc_heap_t,
    obj: *mut c_void,
) -> *mut gc_weak_handle_t {
    entry("gc_weak_handle_new", || {
        let heap = heap_arg(heap, "gc_weak_handle_new")?;
        let o = checked_object(&heap, obj, "gc_weak_handle_new")?;
        // SAFETY: check_object accepted it just above.
        let weak = unsafe { heap.new_weak_ref_unchecked(o) };
        Ok(HANDLES.register(gc_weak_handle_t { weak }))
    })
}

/// The object of a weak handle, NULL once a collection found it unreachable (and NULL
/// with an error for a NULL, unknown, deleted or wrong-kind handle).
#[no_mangle]
pub extern "C" fn gc_weak_handle_get(h: *mut gc_weak_handle_t) -> *mut c_void {
    entry("gc_weak_handle_get", || {
        let h = registered(h, "weak handle", "gc_weak_handle_get")?;
        Ok(h.weak
            .get()
            .map_or(std::ptr::null_mut(), |o| o.as_ptr().cast()))
    })
}

/// Releases a weak handle: `RT_OK`, or `RT_ERR_ARG` for a NULL, unknown, already
/// deleted or wrong-kind handle.
#[no_mangle]
pub extern "C" fn gc_weak_handle_delete(h: *mut gc_weak_handle_t) -> c_int {
    entry("gc_weak_handle_delete", || {
        drop(unregister(h, "weak handle", "gc_weak_handle_delete")?);
        Ok(0)
    })
}
