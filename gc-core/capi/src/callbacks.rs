//! The seed's callbacks from C: `GC_CB_*` kinds, `gc_set_callback` (register or remove a
//! C function, the seed's set/remove-by-pointer semantics) and `gc_callback_count`.

use crate::entry::{arg, entry, Checked};
use crate::heap::{gc_heap_t, heap_arg};
use gc_core::{Callback, CallbackKind, Heap};
use std::ffi::{c_int, c_void};

/// `gc_set_callback` kinds. pre_gc, `void (*)(int full)`: called once per collection on
/// the collecting thread with the world stopped, once the collection is decided full or
/// partial (`full`) and before anything is marked. The threads' remembered sets are
/// merged after the pre-GC callbacks (Julia's order), so a write barrier one issues
/// counts for the collection it runs in: `gc_wb_back` on an old object the program
/// stored young references into without barriers (GAP's PreGCHook does this for its
/// current local-variables bag) keeps them alive in that partial collection.
pub const GC_CB_PRE_GC: c_int = 0;
/// post_gc.
pub const GC_CB_POST_GC: c_int = 1;
/// root_scanner.
pub const GC_CB_ROOT_SCANNER: c_int = 2;
/// task_scanner.
pub const GC_CB_TASK_SCANNER: c_int = 3;
/// notify_external_alloc.
pub const GC_CB_NOTIFY_EXTERNAL_ALLOC: c_int = 4;
/// notify_external_free.
pub const GC_CB_NOTIFY_EXTERNAL_FREE: c_int = 5;
/// The weak-processing hook, `void (*)(int full)`: called between mark and sweep, before
/// weak references are cleared; it asks `gc_is_marked` and may keep objects alive with
/// `gc_mark_queue_obj`, through the collecting thread's mutator (`gc_current_mutator`).
pub const GC_CB_WEAK_PROCESSING: c_int = 6;

/// Per-kind C callback registrations, for the seed's set/remove-by-pointer semantics.
///
/// # Safety
/// `f` is a function of the kind's documented signature.
unsafe fn callback_of(kind: c_int, f: *mut c_void) -> Option<Callback> {
    // SAFETY: the caller passes a function of the kind's documented signature, to be
    // called as the seed documents the kind (the `Callback::c_*` constructors' contract);
    // a function pointer and a data pointer have the same size and representation here.
    unsafe {
        Some(match kind {
            GC_CB_PRE_GC => Callback::c_pre_gc(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(c_int),
            >(f)),
            GC_CB_POST_GC => Callback::c_post_gc(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(c_int),
            >(f)),
            GC_CB_ROOT_SCANNER => Callback::c_root_scanner(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(c_int),
            >(f)),
            GC_CB_TASK_SCANNER => Callback::c_task_scanner(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut c_void, c_int),
            >(f)),
            GC_CB_NOTIFY_EXTERNAL_ALLOC => Callback::c_external_alloc(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut c_void, usize),
            >(f)),
            GC_CB_NOTIFY_EXTERNAL_FREE => Callback::c_external_free(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut c_void),
            >(f)),
            GC_CB_WEAK_PROCESSING => Callback::c_weak_processing(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(c_int),
            >(f)),
            _ => return None,
        })
    }
}

/// Registers (`enable` non-zero) or removes the C callback `f` of `kind` on `heap`;
/// refused (naming `what`) if `f` is NULL, already registered, or (on removal) not
/// registered.
///
/// # Safety
/// `f` null or a function of the kind's signature.
pub(crate) unsafe fn set_callback(
    heap: &Heap,
    kind: c_int,
    f: *mut c_void,
    enable: c_int,
    what: &str,
) -> Checked<c_int> {
    if f.is_null() {
        return Err(arg(format!("{what}: callback is NULL")));
    }
    // SAFETY: a function of the kind's signature (this function's contract).
    let Some(cb) = (unsafe { callback_of(kind, f) }) else {
        return Err(arg(format!("{what}: unknown callback kind {kind}")));
    };
    if enable != 0 {
        heap.add_callback(cb)?;
    } else {
        heap.remove_c_callback(cb.kind(), f as usize)?;
    }
    Ok(0)
}

/// Registers (`enable` non-zero) or removes a C callback of `kind` (`GC_CB_*`). An
/// `RT_ERR_*` code if the heap handle is bad, the function is NULL, already registered,
/// or (on removal) not registered.
///
/// # Safety
/// `f` null or a function of the kind's signature; `heap` any pointer (checked against
/// the live handles).
#[no_mangle]
pub unsafe extern "C" fn gc_set_callback(
    heap: *mut gc_heap_t,
    kind: c_int,
    f: *mut c_void,
    enable: c_int,
) -> c_int {
    entry("gc_set_callback", || {
        let heap = heap_arg(heap, "gc_set_callback")?;
        // SAFETY: forwarded (this function's contract).
        unsafe { set_callback(&heap, kind, f, enable, "gc_set_callback") }
    })
}

/// Number of callbacks of `kind` registered on `heap` (a negative `RT_ERR_*` code on
/// error).
#[no_mangle]
pub extern "C" fn gc_callback_count(heap: *mut gc_heap_t, kind: c_int) -> c_int {
    entry("gc_callback_count", || {
        let heap = heap_arg(heap, "gc_callback_count")?;
        let k = match kind {
            GC_CB_PRE_GC => CallbackKind::PreGc,
            GC_CB_POST_GC => CallbackKind::PostGc,
            GC_CB_ROOT_SCANNER => CallbackKind::RootScanner,
            GC_CB_TASK_SCANNER => CallbackKind::TaskScanner,
            GC_CB_NOTIFY_EXTERNAL_ALLOC => CallbackKind::ExternalAlloc,
            GC_CB_NOTIFY_EXTERNAL_FREE => CallbackKind::ExternalFree,
            GC_CB_WEAK_PROCESSING => CallbackKind::WeakProcessing,
            _ => {
                return Err(arg(format!(
                    "gc_callback_count: unknown callback kind {kind}"
                )))
            }
        };
        Ok(heap.callback_count(k) as c_int)
    })
}
