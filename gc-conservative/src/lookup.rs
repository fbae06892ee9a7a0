//! From an arbitrary word to the object it points into: O(1) for internal (pool)
//! objects (page table, offset arithmetic, the cell's allocation state), the ordered
//! index for external ones.

use crate::index;
use gc_core::object::HEADER_SIZE;
use gc_core::sizeclass::{FIRST_CELL, PAGE_SIZE};
use gc_core::{pagetable, ObjRef, PageMeta};

/// The internal object of heap `heap_id` that `p` points to the beginning, interior or
/// one past the end of; `None` for everything else (free or never-used cells, the bytes
/// of a page before its first object or after its last cell, header words past their
/// first byte, pages of other heaps, unmapped or foreign memory).
#[inline]
pub fn internal_obj_base_ptr(heap_id: usize, p: usize) -> Option<ObjRef> {
    let (info, page) = pagetable::lookup_with_info(p)?;
    in_page(heap_id, info, page, p)
}

/// The lookup proper, from the page-table entry's copy of owner and layout: it reads
/// that entry and one word of the page's allocation bitmap, nothing else.
#[inline(always)]
fn in_page(heap_id: usize, info: u64, page: &PageMeta, p: usize) -> Option<ObjRef> {
    if info >> pagetable::INFO_OWNER_SHIFT != heap_id as u64 {
        return None;
    }
    let cell = (info & 0xffff) as usize;
    if cell == 0 {
        return None;
    }
    let class = ((info >> 16) & 0xff) as usize;
    let idx = page.cell_index(p, cell, class)?;
    let obj = (p & !(PAGE_SIZE - 1)) + FIRST_CELL + idx * cell + HEADER_SIZE;
    if page.is_allocated(obj) {
        ObjRef::from_addr(obj)
    } else {
        None
    }
}

/// Like [`internal_obj_base_ptr`], and for external (big) objects of the heap too
/// (beginning, interior or one past the end of the payload).
#[inline]
pub fn base_ptr(heap_id: usize, p: usize) -> Option<ObjRef> {
    match pagetable::lookup_with_info(p) {
        // A pool page (ours or not, in use or not) never holds a big object.
        Some((info, page)) => in_page(heap_id, info, page, p),
        None => index::lookup(p, heap_id).and_then(ObjRef::from_addr),
    }
}

/// The seed's `jl_gc_is_internal_obj_alloc`: whether `p` is the start of a cell of a
/// pool page of the heap, i.e. an allocated internal object, or memory reserved for
/// one (a free cell, whose type field then never holds a valid type).
#[inline]
pub fn is_internal_obj_alloc(heap_id: usize, p: usize) -> bool {
    let Some(page) = pagetable::lookup(p) else {
        return false;
    };
    if page.owner() != heap_id {
        return false;
    }
    let Some((cell, class)) = page.cell_layout() else {
        return false;
    };
    page.cell_index(p, cell, class)
        .is_some_and(|i| page.object_at(i, cell) == p)
}
