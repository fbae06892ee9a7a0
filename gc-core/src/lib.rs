//! `gc-core`: a garbage-collected heap with the Julia GC-extension API.
//!
//! Implements the seed `julia-gc-extensions.txt` ("Garbage collector extensions for
//! better foreign language support"): foreign types with their own mark and sweep
//! functions, root and task scanners, GC callbacks, generational collection with a
//! write barrier, and many mutator threads stopping at safepoints. A C ABI
//! (`include/gc_core.h`, and `include/julia_gcext_compat.h` with the seed's own names)
//! exposes the same API.
//!
//! # Quick start
//! ```
//! use gc_core::{CollectionKind, Heap, HeapConfig};
//!
//! let heap = Heap::new(HeapConfig::default()).unwrap();
//! let mut m = heap.attach().unwrap();
//! // A pair: 16 bytes, references at offsets 0 and 8.
//! let pair = heap.new_layout_type("Pair", 16, &[0, 8]).unwrap();
//! let a = m.alloc_typed(16, pair).unwrap();
//! let b = m.alloc_typed(16, pair).unwrap();
//! // SAFETY: `a` is a live Pair and `b` a live object of the same heap.
//! unsafe { m.store_ref(a, 0, Some(b)) };
//! let root = heap.root(a);
//! m.collect(CollectionKind::Full).unwrap();
//! // SAFETY: `a` is rooted, so alive.
//! assert_eq!(unsafe { m.load_ref(root.get(), 0) }, Some(b));
//! ```
//!
//! # Object model
//! Each object is preceded by a one-word header ([`HEADER_SIZE`] bytes) holding its type
//! pointer and GC bits; an [`ObjRef`] points just past it. Objects up to
//! [`max_internal_obj_size`] bytes live in pools of [`PAGE_SIZE`] pages of 55 size
//! classes ([`CELL_SIZES`]); larger ones are external objects from the system allocator.
//! Types are themselves heap objects ([`TypeRef`]); a [`TypeRef`] names its heap
//! ([`HeapId`]).
//!
//! # Lookups
//! From any address, on any thread, at any time: [`internal_object`] (the pool object
//! an address points into), [`is_internal_object`] / [`is_object`] (an object's start,
//! pool or big), [`is_internal_cell`] (the seed's `jl_gc_is_internal_obj_alloc`),
//! [`pool_object`] (for callers that index big objects themselves), [`page_of`].
//!
//! ```
//! use gc_core::{internal_object, is_object, Heap};
//!
//! let heap = Heap::default();
//! let mut m = heap.attach().unwrap();
//! let ty = heap.new_layout_type("Blob", 32, &[]).unwrap();
//! let obj = m.alloc_typed(32, ty).unwrap();
//! assert_eq!(internal_object(&heap, obj.addr() + 20), Some(obj));
//! assert!(is_object(&heap, obj.addr()) && !is_object(&heap, obj.addr() + 16));
//! ```
//!
//! # Weak references, finalizers, the reference queue
//! Between mark and sweep: weak-reference objects
//! ([`Mutator::new_weak_object`], Julia's `jl_gc_new_weakref`) and handles
//! ([`Heap::new_weak_ref`]) are cleared when their referent dies; finalizers
//! ([`Mutator::add_finalizer`], `jl_gc_add_ptr_finalizer`) run after the collection that
//! found their object unreachable, outside the stop-the-world; a [`ReferenceQueue`]
//! yields a token once a registered object is gone; weak-processing hooks
//! ([`Callback::WeakProcessing`]) see which objects are marked and may keep more.
//!
//! # Threads
//! A thread [`Heap::attach`]es to get a [`Mutator`]; any mutator can collect. The world
//! stops at safepoints (allocation, [`Mutator::safepoint`]); a thread inside
//! [`Mutator::gc_safe`] counts as stopped.
//!
//! # The C ABI
//! `include/gc_core.h` and `include/julia_gcext_compat.h` (the seed's names) are the
//! crate `gc-core-capi` (`capi/`), built as `libgc_core.so` by `capi/artifact/`; this
//! crate builds only its Rust library. The C layer uses this crate's public API only:
//! the handles, and for its per-object entry points the raw tier in [`ffi`] (the `ptls`
//! record [`MutatorShared`] and its `unsafe` fast paths, the barrier tests, the current
//! and helper `ptls`) with the `check_object` + `*_unchecked` pairs.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod big;
mod bigrun;
mod callbacks;
mod collect;
mod config;
mod error;
pub mod ffi;
mod geom;
mod heap;
mod heap_id;
mod lookup;
mod mark;
mod marker;
mod mutator;
mod object;
mod page;
mod pagemeta;
mod pagetable;
mod par;
mod sizeclass;
mod state;
mod stats;
mod task;
mod tlab;
mod tls;
mod types;
mod weak;
mod weakref;
mod weaktab;

pub use callbacks::{Callback, CallbackId, CallbackKind, RootScannerFn, TaskScannerFn, WeakHookFn};
pub use config::{HeapConfig, TaskScan};
pub use error::GcError;
pub use heap::Root;
pub use heap_id::HeapId;
pub use lookup::{
    internal_object, is_internal_cell, is_internal_object, is_object, page_of, pool_object,
    PoolLookup,
};
pub use mark::ARRAY_CHUNK;
pub use marker::Marker;
pub use mutator::{current_thread_task, GcSafe, SafeState};
pub use object::{ObjRef, HEADER_SIZE, OBJ_ALIGN};
pub use pagemeta::PageMeta;
pub use sizeclass::{CELL_SIZES, FIRST_CELL, PAGE_SIZE};
pub use state::{FinalizerFn, Heap, Mutator, MutatorShared};
pub use stats::{CollectionInfo, GcStats, PauseRecord, LONGEST_PAUSES};
pub use task::Task;
pub use tls::{save_registers, SAVED_REGS};
pub use types::{
    CMarkFn, CSweepFn, ForeignTypeSpec, MarkFn, MarkProc, SweepFn, SweepProc, TypeKind, TypeRef,
};
pub use weak::in_finalizer;
pub use weakref::{ReferenceQueue, WeakRef};
pub use weaktab::{CFinalizerFn, CNotifyFn, WEAK_OBJECT_SIZE};

/// Which collection to run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CollectionKind {
    /// Let the heap's policy choose between partial and full.
    Auto,
    /// Only the young generation (plus the remembered set).
    Partial,
    /// The whole heap.
    Full,
}

/// The largest payload allocated in a pool (`jl_gc_max_internal_obj_size`); larger
/// objects are external objects.
pub fn max_internal_obj_size() -> usize {
    sizeclass::MAX_INTERNAL_OBJ_SIZE
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
