//! The raw layouts of gc-core that a C layer reads: what the C header's inline fast
//! paths read (`gc_tls_head_t`, `gc_mark_fast_t`, the `ptls` magics, the header word's
//! bits), and the low-level entry points the C layer (the `gc-core-capi` crate, built as
//! `libgc_core.so`) forwards to. Each item is a documented contract of this crate; the
//! C layer reads nothing else of gc-core.
//!
//! A Rust program needs none of this: the crate root is the Rust API. C handle types
//! (`gc_heap_t`, ...), the C functions and the shared last error live in `gc-core-capi`.

pub use crate::marker::MarkFast;
pub use crate::tls::{TlsHead, HELPER_MAGIC, MUTATOR_MAGIC};

/// The GC bits of an object's header word, as the compat header's inline fast paths
/// test them (`GC_HDR_*` in `julia_gcext_compat.h`, checked against these by the header
/// tests): mark, old generation, remembered (old objects) / survived a collection
/// (young objects, `HDR_AGE`), free cell, and the mask of all four.
pub const HDR_MARK: usize = crate::object::MARK;
/// See [`HDR_MARK`].
pub const HDR_OLD: usize = crate::object::OLD;
/// See [`HDR_MARK`].
pub const HDR_REMEMBERED: usize = crate::object::REMEMBERED;
/// See [`HDR_MARK`].
pub const HDR_AGE: usize = crate::object::AGE;
/// See [`HDR_MARK`].
pub const HDR_FREE: usize = crate::object::FREE;
/// See [`HDR_MARK`].
pub const HDR_TAG_BITS: usize = crate::object::TAG_BITS;

/// The layout of the allocation state the compat header's inline `jl_gc_alloc_typed`
/// reads and writes through [`TlsHead::alloc`] on the owning thread: `(C struct, field,
/// byte offset)` for `gc_alloc_fast_t`, `gc_alloc_type_t` and `gc_alloc_pool_t`, and
/// `(C struct, "sizeof", size)` for the two array elements. The header tests assert the
/// C header against it.
pub fn alloc_fast_layout() -> Vec<(&'static str, &'static str, usize)> {
    crate::tlab::alloc_fast_layout()
}

/// The constants of the inline allocation path: `(C macro, value)`. Pool pages are
/// `GC_PAGE_SIZE`-aligned; a page's first payload lies `GC_FIRST_PAYLOAD` bytes into it;
/// a free list ends with `GC_HDR_FREE`; there are `GC_NUM_CLASSES` pools.
pub fn alloc_fast_constants() -> [(&'static str, usize); 4] {
    [
        ("GC_PAGE_SIZE", crate::sizeclass::PAGE_SIZE),
        (
            "GC_FIRST_PAYLOAD",
            crate::sizeclass::FIRST_CELL + crate::object::HEADER_SIZE,
        ),
        ("GC_HDR_FREE", crate::object::FREE_END),
        ("GC_NUM_CLASSES", crate::sizeclass::NUM_CLASSES),
    ]
}

/// The calling thread's attached mutator record (its `ptls`, what
/// `jl_get_ptls_states` returns), or null if the thread is not attached. The record
/// stays readable after the thread detaches (records are recycled, never freed), but its
/// methods' contracts hold only while the calling thread owns it.
#[inline]
pub fn current_ptls() -> *const crate::MutatorShared {
    crate::mutator::current()
}

/// The `ptls` record of the calling thread if it is one of a heap's collector helper
/// threads (parallel marking; [`TlsHead::magic`] is [`HELPER_MAGIC`]), else null. It
/// lives as long as the thread.
#[inline]
pub fn helper_ptls() -> *const TlsHead {
    crate::tls::helper_ptls()
}

/// The calling thread's id as [`TlsHead::thread`] stores it (`pthread_self()`): a
/// `ptls` whose magic is [`MUTATOR_MAGIC`] and whose thread is this one is the calling
/// thread's attached mutator, checked without a thread-local lookup.
#[inline]
pub fn thread_id() -> usize {
    crate::tls::thread_id()
}

/// The write barrier's test alone (`gc_wb`'s fast path): whether storing a reference to
/// `child` into `parent` must remember `parent` (old, not remembered yet, and `child`
/// young). It needs no mutator, so a C layer looks its thread up only when it is true,
/// then calls [`MutatorShared::wb`](crate::MutatorShared::wb).
///
/// # Safety
/// Both objects are allocated (alive) in a heap.
#[inline(always)]
pub unsafe fn barrier_fires(parent: crate::ObjRef, child: crate::ObjRef) -> bool {
    // SAFETY: forwarded from the caller.
    unsafe { crate::object::barrier_fires(parent, child) }.is_some()
}

/// The backward barrier's test alone (`gc_wb_back`'s fast path): `parent` is old and
/// not remembered yet; then [`MutatorShared::wb_back`](crate::MutatorShared::wb_back).
///
/// # Safety
/// The object is allocated (alive) in a heap.
#[inline(always)]
pub unsafe fn back_barrier_fires(parent: crate::ObjRef) -> bool {
    // SAFETY: forwarded from the caller.
    unsafe { crate::object::back_barrier_fires(parent) }.is_some()
}
