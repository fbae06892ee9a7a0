//! From an arbitrary word to the object it points into: O(1) for internal (pool)
//! objects (page table, offset arithmetic, the cell's allocation state), the ordered
//! index for external ones.

use crate::index;
use gc_core::{HeapId, ObjRef, PoolLookup};

/// The internal object of heap `heap` (a `&Heap` or its [`HeapId`]) that `p` points to the beginning, interior or
/// one past the end of; `None` for everything else (free or never-used cells, the bytes
/// of a page before its first object or after its last cell, header words past their
/// first byte, pages of other heaps, unmapped or foreign memory). gc-core's
/// [`gc_core::internal_object`], the one place that decides it.
#[inline]
pub fn internal_obj_base_ptr(heap: impl Into<HeapId>, p: usize) -> Option<ObjRef> {
    gc_core::internal_object(heap, p)
}

/// Like [`internal_obj_base_ptr`], and for external (big) objects of the heap too
/// (beginning, interior or one past the end of the payload).
///
/// Always inlined: the conservative scan's loop calls it once per word (called out of
/// line, the scan was 25% slower; the flag test for pages waiting for their sweep had
/// made it too big for the compiler's own choice).
#[inline(always)]
pub fn base_ptr(heap: impl Into<HeapId>, p: usize) -> Option<ObjRef> {
    let heap = heap.into();
    match gc_core::pool_object(heap, p) {
        PoolLookup::Object(obj) => Some(obj),
        // A pool page (of this heap, another or none) never holds a big object.
        PoolLookup::NoObject => None,
        // The big-object filter inline, its ordered map out of line.
        PoolLookup::OutsidePools if index::may_hold(p) => {
            index::search(p, heap).and_then(ObjRef::from_addr)
        }
        PoolLookup::OutsidePools => None,
    }
}

/// The seed's `jl_gc_is_internal_obj_alloc`: whether `p` is the start of a cell of a
/// pool page of the heap that holds an allocated internal object or is memory reserved
/// for one (a free cell, whose type field then never holds a valid type). A cell whose
/// object the last collection found dead, while its page waits for the lazy sweep, is
/// answered false (its type field still names the dead object's type). gc-core's
/// [`gc_core::is_internal_cell`].
#[inline]
pub fn is_internal_obj_alloc(heap: impl Into<HeapId>, p: usize) -> bool {
    gc_core::is_internal_cell(heap, p)
}
