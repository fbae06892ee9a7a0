//! Reference queues from C: `gc_refqueue_t` handles (in the registry,
//! [`crate::entry::HANDLES`]) with phantom semantics: a registered object's token is
//! queued by the collection that finds the object gone, which frees it.

use crate::entry::{arg, checked_object, entry, registered, unregister, HANDLES};
use crate::heap::{gc_heap_t, heap_arg};
use ffi_support::Handle;
use gc_core::ReferenceQueue;
use std::ffi::{c_int, c_void};

/// A reference queue (`gc_refqueue_new`): an opaque handle.
pub struct gc_refqueue_t {
    queue: ReferenceQueue,
}

impl Handle for gc_refqueue_t {
    const KIND: &'static str = "reference queue";
}

/// A reference queue's notification: `f(data)`, called after a collection queued tokens.
pub type gc_notify_t = Option<unsafe extern "C" fn(data: *mut c_void)>;

/// A new reference queue of `heap`. NULL on error (bad heap handle).
#[no_mangle]
pub extern "C" fn gc_refqueue_new(heap: *mut gc_heap_t) -> *mut gc_refqueue_t {
    entry("gc_refqueue_new", || {
        let queue = heap_arg(heap, "gc_refqueue_new")?.new_reference_queue();
        Ok(HANDLES.register(gc_refqueue_t { queue }))
    })
}

/// Registers `obj` with `token`. `RT_ERR_ARG` on error (bad queue handle, `obj` NULL or
/// not an allocated object of the queue's heap).
#[no_mangle]
pub extern "C" fn gc_refqueue_register(
    q: *mut gc_refqueue_t,
    obj: *mut c_void,
    token: usize,
) -> c_int {
    entry("gc_refqueue_register", || {
        let q = registered(q, "queue", "gc_refqueue_register")?;
        let o = checked_object(q.queue.heap(), obj, "gc_refqueue_register")?;
        // SAFETY: checked_object accepted it just above.
        unsafe { q.queue.register_unchecked(o, token) };
        Ok(0)
    })
}

/// Takes up to `cap` available tokens, oldest first, into `out`; returns how many (0
/// and an error for a bad queue handle). Any thread, outside collections.
///
/// # Safety
/// `out` writable for `cap` words (or NULL with 0); `q` any pointer (checked against the
/// live handles).
#[no_mangle]
pub unsafe extern "C" fn gc_refqueue_drain(
    q: *mut gc_refqueue_t,
    out: *mut usize,
    cap: usize,
) -> usize {
    entry("gc_refqueue_drain", || {
        let q = registered(q, "queue", "gc_refqueue_drain")?;
        if out.is_null() && cap > 0 {
            return Err(arg("gc_refqueue_drain: out is NULL"));
        }
        let tokens = q.queue.drain_up_to(cap);
        for (i, t) in tokens.iter().enumerate() {
            // SAFETY: i < tokens.len() <= cap; writable per the caller.
            unsafe { out.add(i).write(*t) };
        }
        Ok(tokens.len())
    })
}

/// Number of tokens available (the queue's own count needs no lock: a flag to poll); 0
/// and an error for a bad queue handle.
#[no_mangle]
pub extern "C" fn gc_refqueue_len(q: *mut gc_refqueue_t) -> usize {
    entry("gc_refqueue_len", || {
        Ok(registered(q, "queue", "gc_refqueue_len")?.queue.len())
    })
}

/// Sets (NULL `f`: removes) the function a collecting thread calls with `data`, after
/// the world resumes, when a collection queued tokens on `q`.
///
/// # Safety
/// `f` null or a function of the documented type that may be called with `data` from
/// any attached thread; `q` any pointer (checked against the live handles).
#[no_mangle]
pub unsafe extern "C" fn gc_refqueue_set_notify(
    q: *mut gc_refqueue_t,
    f: gc_notify_t,
    data: *mut c_void,
) -> c_int {
    entry("gc_refqueue_set_notify", || {
        let q = registered(q, "queue", "gc_refqueue_set_notify")?;
        // SAFETY: `f(data)` may be called from any attached thread (this function's
        // contract).
        unsafe { q.queue.set_c_notify(f, data) };
        Ok(0)
    })
}

/// Deletes a queue: its registrations end, tokens not drained are lost. `RT_OK`, or
/// `RT_ERR_ARG` for a NULL, unknown, already deleted or wrong-kind handle.
#[no_mangle]
pub extern "C" fn gc_refqueue_delete(q: *mut gc_refqueue_t) -> c_int {
    entry("gc_refqueue_delete", || {
        drop(unregister(q, "queue", "gc_refqueue_delete")?);
        Ok(0)
    })
}
