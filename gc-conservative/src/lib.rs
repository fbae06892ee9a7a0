//! `gc-conservative`: interior-pointer lookup and conservative stack scanning.
//!
//! Implements the "Conservative scanning" part of the seed `julia-gc-extensions.txt` on
//! top of `gc-core`: mapping an arbitrary machine word to the object it points into (or
//! to nothing), and scanning thread stacks and memory ranges conservatively so that a C
//! system with raw pointers in its stack frames (GAP) can use the collector.
//!
//! - [`internal_obj_base_ptr`] / [`is_internal_obj_alloc`]: the seed's lookups, O(1)
//!   through gc-core's page table ([`gc_core::internal_object`], the one place
//!   that decides); free cells are never reported, nor the cells of objects the last
//!   collection found dead while their page waits for its lazy sweep.
//! - [`base_ptr`]: the same for external (big) objects too, through an address-ordered
//!   index fed by gc-core's notify_external_alloc/free callbacks.
//! - [`scan_range`], [`scan_task`]: conservative scanning; [`scan_task_filtered`] keeps
//!   only the objects a filter accepts (GAP accepts only words pointing at master pointers).
//!   A task no longer registered with the heap being collected scans as nothing; a task
//!   scanner, handed registered tasks, skips that check with the `_unchecked` variants.
//! - [`enable_conservative_scanning`]: one call that makes every attached thread's stack
//!   (and saved registers) a root of every collection.
//! - [`new_conservative_type`]: a foreign type whose objects' bodies are scanned
//!   conservatively, for objects without a mark function of their own.
//!
//! # Quick start
//! ```
//! use gc_conservative::{base_ptr, enable_conservative_scanning, internal_obj_base_ptr};
//! use gc_core::{CollectionKind, Heap, HeapConfig};
//!
//! let heap = Heap::new(HeapConfig::default()).unwrap();
//! enable_conservative_scanning(&heap).unwrap(); // every attached thread's stack is a root
//! let mut m = heap.attach().unwrap();
//! let blob = heap.new_layout_type("Blob", 64, &[]).unwrap();
//! let obj = std::hint::black_box(m.alloc_typed(64, blob).unwrap()); // kept by this local
//! m.collect(CollectionKind::Full).unwrap();
//! // Any word inside the object (or one past its end) finds it.
//! assert_eq!(internal_obj_base_ptr(&heap, obj.addr() + 40), Some(obj));
//! assert_eq!(base_ptr(&heap, obj.addr()), Some(obj));
//! assert_eq!(base_ptr(&heap, 0x10), None);
//! ```
//!
//! The C ABI (`include/gc_conservative.h`, and the seed's `jl_gc_enable_conservative_scanning`,
//! `jl_gc_internal_obj_base_ptr`, `jl_gc_is_internal_obj_alloc` declared in gc-core's
//! `julia_gcext_compat.h`) is the crate `gc-conservative-capi` (`capi/`), over this
//! crate's public API; `capi/artifact/` builds it as `libgc_conservative.so`, which also
//! carries gc-core's whole C ABI, so a C client links one library and has one heap. This
//! crate builds only its Rust library.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod index;
mod lookup;
mod scan;
mod valgrind;

pub use lookup::{base_ptr, internal_obj_base_ptr, is_internal_obj_alloc};
pub use scan::{
    scan_range, scan_range_counting, scan_task, scan_task_filtered, scan_task_filtered_unchecked,
    scan_task_unchecked, ScanFilter,
};

use gc_core::{
    Callback, ForeignTypeSpec, GcError, Heap, HeapId, MarkProc, Marker, ObjRef, SweepProc, TypeRef,
};
use parking_lot::Mutex;
use std::sync::Arc;

/// Heaps (by serial number) whose stacks are scanned conservatively.
static ENABLED: Mutex<Vec<HeapId>> = Mutex::new(Vec::new());

/// Turns on conservative scanning for `heap`: from the next collection on, every
/// registered task's stack (attached threads' own stacks included, with the registers
/// they saved when they stopped) is scanned conservatively, and [`base_ptr`] answers for
/// the heap's external objects, including those allocated before this call.
///
/// Thread-safe and idempotent; callable before or after threads attach and allocate.
pub fn enable_conservative_scanning(heap: &Heap) -> Result<(), GcError> {
    let mut enabled = ENABLED.lock();
    if enabled.contains(&heap.id()) {
        return Ok(());
    }
    let id = heap.id();
    heap.add_callback(Callback::ExternalAlloc(Arc::new(move |obj, size| {
        index::insert(obj.addr(), size, id)
    })))?;
    heap.add_callback(Callback::ExternalFree(Arc::new(|obj| {
        index::remove(obj.addr())
    })))?;
    // Objects allocated before the callbacks existed (inserting twice is harmless).
    heap.for_each_big_object(|obj, size| index::insert(obj.addr(), size, id))?;
    heap.add_callback(Callback::TaskScanner(Arc::new(|m, task, _| {
        // SAFETY: the heap hands its task scanners its registered tasks.
        unsafe { scan_task_unchecked(m, task) };
    })))?;
    enabled.push(heap.id());
    tracing::debug!(heap = %id, "conservative scanning enabled");
    Ok(())
}

/// Whether [`enable_conservative_scanning`] was called for `heap`.
pub fn is_enabled(heap: &Heap) -> bool {
    ENABLED.lock().contains(&heap.id())
}

/// Number of external objects of `heap` in the index (for tests and diagnostics).
pub fn indexed_big_objects(heap: &Heap) -> usize {
    index::count(heap.id())
}

fn mark_body(m: &mut Marker<'_>, obj: ObjRef) -> usize {
    // SAFETY: the collector calls mark functions for live objects of the heap it collects.
    let cap = unsafe { m.object_capacity(obj) };
    // SAFETY: the payload of a live object is mapped and readable.
    unsafe { scan_range_counting(m, obj.addr(), obj.addr() + cap) }.1
}

/// A foreign type whose objects have no mark function of their own: every word of their
/// payload is scanned conservatively (and the young count reported as the seed asks).
/// `sweep` and `large` are as for [`Heap::new_foreign_type`].
pub fn new_conservative_type(
    heap: &Heap,
    name: &str,
    sweep: SweepProc,
    large: bool,
) -> Result<TypeRef, GcError> {
    heap.new_foreign_type(ForeignTypeSpec {
        name,
        mark: MarkProc::Rust(mark_body),
        sweep,
        has_pointers: true,
        large,
    })
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
