//! Persistent roots from C: `gc_root_t` handles (in the registry,
//! [`crate::entry::HANDLES`]) that keep an object alive until `gc_root_delete`.

use crate::entry::HANDLES;
use crate::entry::{checked_object, entry, registered, unregister};
use crate::heap::{gc_heap_t, heap_arg};
use ffi_support::Handle;
use gc_core::Root;
use std::ffi::{c_int, c_void};

/// A persistent root (`gc_root_t`): an opaque handle from `gc_root_new`.
pub struct gc_root_t {
    root: Root,
}

impl Handle for gc_root_t {
    const KIND: &'static str = "root";
}

/// Roots `obj` until `gc_root_delete`. NULL on error (bad heap handle, `obj` NULL or not
/// an allocated object of the heap).
#[no_mangle]
pub extern "C" fn gc_root_new(heap: *mut gc_heap_t, obj: *mut c_void) -> *mut gc_root_t {
    entry("gc_root_new", || {
        let heap = heap_arg(heap, "gc_root_new")?;
        let o = checked_object(&heap, obj, "gc_root_new")?;
        // SAFETY: checked_object accepted it just above.
        let root = unsafe { heap.root_unchecked(o) };
        Ok(HANDLES.register(gc_root_t { root }))
    })
}

/// The object a root holds; NULL (and an error) for a NULL, unknown, deleted or
/// wrong-kind handle.
#[no_mangle]
pub extern "C" fn gc_root_get(root: *mut gc_root_t) -> *mut c_void {
    entry("gc_root_get", || {
        let r = registered(root, "root", "gc_root_get")?;
        Ok(r.root.get().as_ptr().cast())
    })
}

/// Unroots and frees a root: `RT_OK`, or `RT_ERR_ARG` for a NULL, unknown, already
/// deleted or wrong-kind handle.
#[no_mangle]
pub extern "C" fn gc_root_delete(root: *mut gc_root_t) -> c_int {
    entry("gc_root_delete", || {
        drop(unregister(root, "root", "gc_root_delete")?);
        Ok(0)
    })
}
