//! `refbridge`: reference-counting native code (C extensions written against CPython's
//! C API) living with a tracing garbage collector (`gc-core`), GraalPy's design.
//!
//! - **Managed objects** are gc-core objects of types the embedder defines; native code
//!   sees them through **stubs** ([`Bridge::to_native`]): a `PyObject` header with a
//!   count starting at [`abi::MANAGED_REFCNT`] and a handle-table index, behind a pointer
//!   tagged with bit 63. The handle table holds the managed object strongly while native
//!   references exist and weakly otherwise, switching only when the count crosses
//!   `MANAGED_REFCNT`.
//! - **Native objects** (allocated by C with `PyObject_GC_New`, ...) are reference
//!   counted as in CPython; managed code sees them through **mirrors**
//!   ([`Bridge::to_managed`]) that add `MANAGED_REFCNT` to their count while they live.
//! - Deaths on the managed side arrive through gc-core's **reference queue**, drained at
//!   transitions and after collections; the counts go down by `MANAGED_REFCNT` and what
//!   reaches 0 is deallocated in a batch.
//! - **Cycles**: CPython's cycle collector for native objects, extended as GraalPy does:
//!   cycles that cross into the managed heap are replicated there so the tracing
//!   collector frees them ([`cycle`]).
//! - **Memory pressure** from native allocations forces collections ([`pressure`]).
//! - A **debug mode** reports use after free, counts below zero, dead stubs and leaks
//!   with backtraces ([`debug`]).
//! - The refcount and object operations are a Rust API ([`incref`], [`decref`],
//!   [`type_ready`], [`gc_new`], [`gc_track`], [`mem_alloc`], ...) acting on the bridge
//!   entered on the calling thread; the C API (`include/refbridge_python.h`, [`capi`])
//!   has CPython's names, types and macro semantics for the memory-management subset,
//!   with the count fast paths inline in the header, and each of its functions only
//!   converts and calls that Rust API.
//!
//! # Quick start
//! ```
//! use gc_core::{Heap, HeapConfig};
//! use refbridge::{abi::PyTypeObject, Bridge, BridgeConfig};
//!
//! let heap = Heap::new(HeapConfig::default()).unwrap();
//! let mut m = heap.attach().unwrap();
//! let bridge = Bridge::new(&heap, BridgeConfig::default()).unwrap();
//! let _entered = bridge.enter().unwrap();
//!
//! // A managed type and how its objects look to native code.
//! let pair = heap.new_layout_type("Pair", 16, &[0, 8]).unwrap();
//! let native_pair = Box::leak(Box::new(PyTypeObject::new(c"Pair", 24, 0)));
//! // SAFETY: the type object is leaked, so it outlives the bridge.
//! unsafe {
//!     refbridge::type_ready(native_pair).unwrap();
//!     bridge.register_managed_type(pair, native_pair).unwrap();
//! }
//! let obj = m.alloc_typed(16, pair).unwrap();
//! let root = heap.root(obj);
//! // SAFETY: obj is rooted; the stub is a live object of the bridge.
//! unsafe {
//!     let op = bridge.to_native(root.get()).unwrap();
//!     assert_eq!((*refbridge::abi::untag(op)).ob_refcnt, refbridge::abi::MANAGED_REFCNT);
//!     assert_eq!(bridge.to_native(root.get()).unwrap(), op); // pointer identity
//!     refbridge::incref(op); // native code keeps it: the entry is strong now
//!     assert_eq!(bridge.is_strong(op), Some(true));
//!     refbridge::decref(op);
//!     assert_eq!(bridge.is_strong(op), Some(false));
//!     assert_eq!(bridge.to_managed(&mut m, op).unwrap(), root.get());
//! }
//! ```

pub mod abi;
mod bridge;
pub mod capi;
mod cpython;
pub mod cycle;
pub mod debug;
pub mod error;
pub mod handles;
pub mod mem;
pub mod pressure;
mod standalone;

pub use bridge::{Bridge, BridgeConfig, BridgeStats, CollectReport, EnterGuard, TRASHCAN_DEPTH};
pub use cpython::{
    clear_pending_error, collect, dealloc, deallocs, decref, default_dealloc, gc_del, gc_new,
    gc_new_var, gc_track, gc_untrack, incref, mem_alloc, mem_free, mem_realloc, native_bytes,
    object_new, pending_error, set_pending_error, set_pending_error_from, type_ready,
    type_ready_with, with_pending_error, DefaultSlots,
};
pub use cycle::CycleReport;
pub use debug::{DebugReport, ReportKind};
pub use error::BridgeError;
pub use standalone::Standalone;
