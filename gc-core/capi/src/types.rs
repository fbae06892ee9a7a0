//! Types from C: foreign types with C mark and sweep functions (`gc_new_foreign_type`,
//! the seed's `jl_new_foreign_type` over it) and precise layout types. A type is a heap
//! object; C gets its object pointer.

use crate::entry::{arg, c_str, entry, Checked};
use crate::heap::{gc_heap_t, heap_arg};
use crate::mutator::{gc_mutator_t, in_collection};
use gc_core::{CMarkFn, ForeignTypeSpec, GcError, Heap, MarkProc, SweepProc};
use std::ffi::{c_char, c_int, c_void};

/// Mark function: queue the children of `obj` with `gc_mark_queue_obj(m, child)` and
/// return how many of those calls returned non-zero (young children). It may run on any
/// collector thread (`mark_threads`) and concurrently with other mark functions: `m` is
/// the thread it runs on (queue through that one only); it must keep no unsynchronised
/// state of its own.
pub type gc_markfunc_t =
    Option<unsafe extern "C" fn(m: *mut gc_mutator_t, obj: *mut c_void) -> usize>;
/// Sweep function: called once when a sweep finds a scheduled object dead.
pub type gc_sweepfunc_t = Option<unsafe extern "C" fn(obj: *mut c_void)>;

/// Refused inside a collection (a callback, a mark or sweep function): creating a type
/// there would wait for the collection itself.
fn outside_collection() -> Checked<()> {
    if in_collection() {
        return Err(GcError::DuringCollection {
            what: "creating a type",
        }
        .into());
    }
    Ok(())
}

/// Creates a foreign type of `heap` with C mark and sweep functions; its object pointer.
///
/// # Safety
/// The functions, if given, have the documented signatures.
pub(crate) unsafe fn new_foreign_type(
    heap: &Heap,
    name: &str,
    markfunc: gc_markfunc_t,
    sweepfunc: gc_sweepfunc_t,
    haspointers: c_int,
    large: c_int,
) -> Checked<*mut c_void> {
    outside_collection()?;
    // SAFETY: the C mark signature differs from CMarkFn only in a pointer type: same
    // ABI, same representation.
    let markfunc = unsafe { std::mem::transmute::<gc_markfunc_t, Option<CMarkFn>>(markfunc) };
    let spec = ForeignTypeSpec {
        name,
        // SAFETY: the C caller's functions are the seed's mark and sweep functions
        // (this function's contract), called as `MarkProc::c`/`SweepProc::c` require.
        mark: markfunc.map_or(MarkProc::None, |f| unsafe { MarkProc::c(f) }),
        // SAFETY: as above.
        sweep: sweepfunc.map_or(SweepProc::None, |f| unsafe { SweepProc::c(f) }),
        has_pointers: haspointers != 0,
        large: large != 0,
    };
    Ok(heap.new_foreign_type(spec)?.as_obj().as_ptr().cast())
}

/// Creates a foreign type (`jl_new_foreign_type`). NULL on error (bad heap handle, NULL
/// name, pointers without a mark function, inside a collection).
///
/// # Safety
/// `name` null or NUL-terminated; the functions, if given, have the documented
/// signatures; `heap` any pointer (checked against the live handles).
#[no_mangle]
pub unsafe extern "C" fn gc_new_foreign_type(
    heap: *mut gc_heap_t,
    name: *const c_char,
    markfunc: gc_markfunc_t,
    sweepfunc: gc_sweepfunc_t,
    haspointers: c_int,
    large: c_int,
) -> *mut c_void {
    entry("gc_new_foreign_type", || {
        let heap = heap_arg(heap, "gc_new_foreign_type")?;
        // SAFETY: the name is null or NUL-terminated (this function's contract).
        let name = unsafe { c_str(name, "gc_new_foreign_type") }?;
        // SAFETY: the functions have the documented signatures (this function's contract).
        unsafe { new_foreign_type(&heap, name, markfunc, sweepfunc, haspointers, large) }
    })
}

/// Creates a precise type: objects of at least `size` bytes with references at the
/// `n` byte offsets `offsets`. NULL on error.
///
/// # Safety
/// `name` null or NUL-terminated; `offsets` readable for `n`; `heap` any pointer
/// (checked against the live handles).
#[no_mangle]
pub unsafe extern "C" fn gc_new_layout_type(
    heap: *mut gc_heap_t,
    name: *const c_char,
    size: usize,
    offsets: *const u32,
    n: usize,
) -> *mut c_void {
    entry("gc_new_layout_type", || {
        let heap = heap_arg(heap, "gc_new_layout_type")?;
        // SAFETY: the name is null or NUL-terminated (this function's contract).
        let name = unsafe { c_str(name, "gc_new_layout_type") }?;
        if n > 0 && offsets.is_null() {
            return Err(arg("gc_new_layout_type: offsets is NULL"));
        }
        outside_collection()?;
        let offs: &[u32] = if n == 0 {
            &[]
        } else {
            // SAFETY: readable for n per the caller.
            unsafe { std::slice::from_raw_parts(offsets, n) }
        };
        Ok(heap
            .new_layout_type(name, size, offs)?
            .as_obj()
            .as_ptr()
            .cast())
    })
}
