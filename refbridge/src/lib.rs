//! `refbridge`: reference-counting native code (C extensions written against CPython's
//! C API) living with a tracing garbage collector ([`gc_core`]), GraalPy's design.
//!
//! - **Managed objects** are gc-core objects of types the embedder defines; native code
//!   sees them through **stubs** ([`Bridge::to_native`]): a [`PyObject`] header with a
//!   count starting at [`MANAGED_REFCNT`] and a handle-table index, behind a pointer
//!   tagged with bit 63 ([`STUB_TAG`], [`is_stub`], [`untag`]). The handle table holds
//!   the managed object strongly exactly while native references exist (the count is
//!   above `MANAGED_REFCNT`) and weakly otherwise; nothing runs when the count crosses.
//! - **Native objects** (made with [`gc_new`] / `PyObject_GC_New`, [`object_new`] /
//!   `PyObject_New`) are counted as in CPython; managed code sees them through
//!   **mirrors** ([`Bridge::to_managed`]) that add `MANAGED_REFCNT` to their count while
//!   they live.
//! - Deaths on the managed side arrive through gc-core's **reference queue**, drained at
//!   transitions and after collections ([`Bridge::drain`]); the counts go down by
//!   `MANAGED_REFCNT` and what reaches 0 is deallocated in a batch.
//! - **Cycles**: CPython's cycle collector for native objects, extended as GraalPy does:
//!   dead cycles that cross into the managed heap are replicated there so the tracing
//!   collector frees them ([`Bridge::collect`], [`collect`] / `PyGC_Collect`).
//! - **Memory pressure**: counted native allocations ([`mem_alloc`] / `PyMem_Malloc`)
//!   crossing [`BridgeConfig::native_trigger`] force a full collection; over
//!   [`BridgeConfig::native_cap`] an allocation fails with [`BridgeError::MemoryCap`].
//! - A **debug mode** ([`BridgeConfig::debug`]) reports use after free, counts below
//!   zero, dead stubs and leaks with backtraces ([`DebugReport`]).
//!
//! # Quick start
//!
//! A heap, a bridge entered on this thread, a managed type and how native code sees it:
//!
//! ```
//! use gc_core::{Heap, HeapConfig};
//! use refbridge::{Bridge, BridgeConfig, PyTypeObject, MANAGED_REFCNT};
//!
//! let heap = Heap::new(HeapConfig::default())?;
//! let mut m = heap.attach()?;
//! let bridge = Bridge::new(&heap, BridgeConfig::default())?;
//! let _entered = bridge.enter()?; // this thread runs native code for the bridge now
//!
//! let pair = heap.new_layout_type("Pair", 16, &[0, 8])?;
//! let native_pair = Box::leak(Box::new(PyTypeObject::new(c"Pair", 24, 0)));
//! // SAFETY: the type object is leaked, so it outlives the bridge; it has no functions.
//! unsafe {
//!     refbridge::type_ready(native_pair)?;
//!     bridge.register_managed_type(pair, native_pair)?;
//! }
//! let obj = m.alloc_typed(16, pair)?;
//! let root = heap.root(obj);
//! // SAFETY: obj is rooted; op is a live stub of the bridge while the root lives.
//! unsafe {
//!     let op = bridge.to_native(root.get())?; // a stub: tagged, count MANAGED_REFCNT
//!     assert_eq!((*refbridge::untag(op)).ob_refcnt, MANAGED_REFCNT);
//!     assert_eq!(bridge.to_native(root.get())?, op); // pointer identity
//!     refbridge::incref(op); // native code keeps it: the entry is strong now
//!     assert_eq!(bridge.is_strong(op), Some(true));
//!     refbridge::decref(op);
//!     assert_eq!(bridge.is_strong(op), Some(false));
//!     assert_eq!(bridge.to_managed(&mut m, op)?, root.get());
//! }
//! let report = bridge.collect(&mut m)?; // PyGC_Collect: every garbage object freed
//! assert_eq!(report.native_freed, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A native GC type written in Rust, its objects made, tracked and collected:
//!
//! ```
//! use refbridge::{BridgeConfig, PyObject, PyTypeObject, Standalone, VisitProc};
//! use refbridge::{PY_TPFLAGS_DEFAULT, PY_TPFLAGS_HAVE_GC};
//! use std::ffi::{c_int, c_void};
//!
//! #[repr(C)]
//! struct Cell { ob_base: PyObject, item: *mut PyObject }
//!
//! unsafe extern "C" fn traverse(op: *mut PyObject, visit: VisitProc, arg: *mut c_void) -> c_int {
//!     // SAFETY: a live cell (Py_VISIT).
//!     let item = unsafe { (*(op as *mut Cell)).item };
//!     // SAFETY: the collector's visit function and argument, a live reference.
//!     if item.is_null() { 0 } else { unsafe { visit.unwrap()(item, arg) } }
//! }
//! unsafe extern "C" fn clear(op: *mut PyObject) -> c_int {
//!     // SAFETY: a live cell (Py_CLEAR).
//!     unsafe { refbridge::decref(std::mem::replace(&mut (*(op as *mut Cell)).item, std::ptr::null_mut())) };
//!     0
//! }
//! unsafe extern "C" fn dealloc(op: *mut PyObject) {
//!     // SAFETY: a cell whose count reached 0, of the entered bridge (a failure would
//!     // be the C API's pending error: this example has none).
//!     unsafe {
//!         refbridge::gc_untrack(op).unwrap();
//!         clear(op);
//!         refbridge::gc_del(op).unwrap();
//!     }
//! }
//!
//! let s = Standalone::new(BridgeConfig::default())?; // a heap, this thread, a bridge entered
//! let ty = Box::leak(Box::new(PyTypeObject::new(
//!     c"demo.Cell", size_of::<Cell>(), PY_TPFLAGS_DEFAULT | PY_TPFLAGS_HAVE_GC)));
//! ty.tp_traverse = Some(traverse);
//! ty.tp_clear = Some(clear);
//! ty.tp_dealloc = Some(dealloc);
//! // SAFETY: a leaked type with sound functions; the cells are initialised (zeroed by
//! // gc_new, then linked) before they are tracked; the references are the test's own.
//! unsafe {
//!     refbridge::type_ready(ty)?; // checks it, fills in tp_free (gc_del)
//!     let a = refbridge::gc_new(ty)?.as_ptr();
//!     let b = refbridge::gc_new(ty)?.as_ptr();
//!     (*(a as *mut Cell)).item = b; // a -> b -> a, each holding a reference
//!     (*(b as *mut Cell)).item = a;
//!     refbridge::incref(a);
//!     refbridge::incref(b);
//!     refbridge::gc_track(a)?;
//!     refbridge::gc_track(b)?;
//!     refbridge::decref(a);
//!     refbridge::decref(b); // only the cycle holds them now
//! }
//! assert_eq!(refbridge::collect()?, 2); // PyGC_Collect(): both deallocated
//! assert!(s.finish().is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The API
//!
//! - [`Bridge`] ([`Bridge::new`] over a [`gc_core::Heap`], [`BridgeConfig`]): the
//!   transitions [`Bridge::to_native`] (a managed object's stub), [`Bridge::to_managed`]
//!   (a stub's managed object, a native object's mirror), [`Bridge::make_immortal`];
//!   [`Bridge::collect`], [`Bridge::collect_cycles`], [`Bridge::drain`],
//!   [`Bridge::shutdown`]; figures ([`Bridge::stats`], [`BridgeStats`],
//!   [`CollectReport`], [`CycleReport`], [`Bridge::memory`], [`MemAccount`]); the debug
//!   mode's [`DebugReport`]s.
//! - **Threads**: a bridge serves one thread at a time, as CPython's API serves the
//!   thread holding the GIL. [`Bridge::enter`] makes the calling thread its owner and
//!   the bridge the *current* one there ([`Bridge::current`]) while the [`EnterGuard`]
//!   lives. The functions below act on the current bridge.
//! - **CPython's operations, in Rust** (what the C names call): counts [`incref`],
//!   [`decref`], [`dealloc`]; types [`type_ready`], [`type_ready_with`]
//!   ([`DefaultSlots`]); GC objects [`gc_new`], [`gc_new_var`], [`gc_track`],
//!   [`gc_untrack`], [`gc_del`], [`default_dealloc`]; plain objects [`object_new`];
//!   memory [`mem_alloc`], [`mem_realloc`], [`mem_free`], [`native_bytes`]; [`collect`];
//!   the pending error ([`set_pending_error`], [`set_pending_error_from`],
//!   [`pending_error`], [`with_pending_error`], [`clear_pending_error`]); [`deallocs`].
//!   Failures are [`BridgeError`] values naming the function and the object.
//! - The layouts native code sees: [`PyObject`], [`PyVarObject`], [`PyTypeObject`],
//!   [`PyGCHead`], [`Stub`], the function types ([`VisitProc`], [`TraverseProc`],
//!   [`Inquiry`], [`Destructor`], [`FreeFunc`]), the constants and the tag helpers.
//! - [`Standalone`]: a heap, the thread attached and a bridge entered, in one value (what
//!   `rb_init` makes for C programs).
//!
//! # Safety
//!
//! Functions that read or write through a pointer they cannot check (an object, a
//! type, a block) are `unsafe` and say what the caller guarantees; safe functions check
//! what they are given (a stub pointer against the handle table, a mutator's heap, the
//! calling thread against the bridge's owner) and refuse with a [`BridgeError`]. Native
//! code run by the bridge (`tp_dealloc`, `tp_traverse`, `tp_clear`) was vouched for when
//! its type was made ready ([`type_ready_with`]'s `# Safety`).
//!
//! # C
//!
//! The C ABI declared by `include/refbridge_python.h` (through `include/compat/Python.h`:
//! `#include <Python.h>`) is the `refbridge-capi` crate (`capi/`), built as
//! `librefbridge.so` by `capi/artifact`: CPython's names, types and macro semantics for
//! the memory-management subset (`Py_INCREF`/`Py_DECREF` inline in the header,
//! `PyObject_GC_New`, `PyType_Ready`, `PyMem_Malloc`, `PyGC_Collect`, ...) plus `rb_*`
//! functions (`rb_init`/`rb_fini`, `rb_last_error`, ...). Each converts its arguments and
//! calls the API above; CPython's names fail with NULL / -1 and the pending error, the
//! `rb_*` ones with the workspace's shared status codes. A loader resolving a C
//! extension's symbols itself gets them from `refbridge_capi::symbols()`. This crate is
//! only the Rust library. The README has the C quick start, the guarantees, the limits
//! and the figures.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

// The modules, bottom to top: each uses only modules of the groups before its own (the
// layering `docs/design/refbridge.md` describes; the tidy test checks there is no module
// cycle).
// 1. leaves: layouts, errors, counted memory, the handle table, the debug mode's records,
//    the cycle collector's scratch
mod abi;
mod cycle_work;
mod debug;
mod error;
mod handles;
mod mem;
// 2. the bridge's state and the thread's entered bridges
mod state;
// 3. the pending error; the memory-pressure policy
mod pressure;
mod pyerr;
// 4. objects, types and memory (CPython's functions)
mod object;
// 5. reference counts, deallocation, the reference queue's drain
mod refcount;
// 6. the cycle collector
mod cycle;
// 7. the collections' drivers
mod collect;
// 8. the `Bridge` handle, conversions, the heap's callbacks
mod bridge;
// 9. a heap, a thread and an entered bridge in one
mod standalone;

pub use abi::{
    from_gc_head, gc_head, is_immortal_count, is_stub, untag, Destructor, FreeFunc, Inquiry,
    PyGCHead, PyObject, PySsizeT, PyTypeObject, PyVarObject, Stub, TraverseProc, VisitProc,
    IMMORTAL_MIN, IMMORTAL_REFCNT, MANAGED_REFCNT, PY_TPFLAGS_DEFAULT, PY_TPFLAGS_HAVE_GC,
    PY_TPFLAGS_READY, STUB_TAG,
};
pub use bridge::{Bridge, BridgeStats};
pub use collect::{collect, CollectReport};
pub use cycle::CycleReport;
pub use debug::{type_name_of, DebugReport, ReportKind, Site, QUARANTINE};
pub use error::BridgeError;
pub use mem::MemAccount;
pub use object::{
    deallocs, default_dealloc, gc_del, gc_new, gc_new_var, gc_track, gc_untrack, mem_alloc,
    mem_free, mem_realloc, native_bytes, object_new, type_ready, type_ready_with, DefaultSlots,
};
pub use pyerr::{
    clear_pending_error, pending_error, set_pending_error, set_pending_error_from,
    with_pending_error,
};
pub use refcount::{dealloc, decref, incref};
pub use standalone::Standalone;
pub use state::{BridgeConfig, EnterGuard, MAX_PRESSURE_RETRIES, TRASHCAN_DEPTH};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
