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
//! Each object is preceded by a one-word header holding its type pointer and GC bits
//! (see [`object`]); an [`ObjRef`] points just past it. Objects up to
//! [`max_internal_obj_size`] bytes live in pools of 16 KiB pages of 55 size classes
//! ([`sizeclass`]); larger ones are external objects from the system allocator. Types are
//! themselves heap objects ([`TypeRef`]).
//!
//! # Weak references, finalizers, the reference queue
//! Between mark and sweep ([`weak`]): weak-reference objects
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

pub mod big;
pub mod callbacks;
pub mod capi;
mod collect;
pub mod error;
mod geom;
pub mod heap;
pub mod mark;
pub mod mutator;
pub mod object;
pub mod page;
pub mod pagetable;
mod par;
pub mod sizeclass;
pub mod stats;
pub mod task;
pub mod types;
pub mod weak;

pub use callbacks::{Callback, CallbackId, CallbackKind};
pub use error::GcError;
pub use heap::{Heap, HeapConfig, HeapId, Root};
pub use mark::Marker;
pub use mutator::{Mutator, MutatorShared};
pub use object::ObjRef;
pub use page::PageMeta;
pub use stats::{CollectionInfo, GcStats};
pub use task::Task;
pub use types::{
    CMarkFn, CSweepFn, ForeignTypeSpec, MarkFn, MarkProc, SweepFn, SweepProc, TypeKind, TypeRef,
};
pub use weak::{CFinalizerFn, CNotifyFn, FinalizerFn, ReferenceQueue, WeakRef};

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
