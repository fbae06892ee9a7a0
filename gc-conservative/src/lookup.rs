//! From an arbitrary word to the object it points into: O(1) for internal (pool)
//! objects (page table, offset arithmetic, the cell's allocation state), the ordered
//! index for external ones.

use crate::index;
use gc_core::object::HEADER_SIZE;
use gc_core::sizeclass::{FIRST_CELL, PAGE_SIZE};
use gc_core::{pagetable, ObjRef};

/// The internal object of heap `heap_id` that `p` points to the beginning, interior or
/// one past the end of; `None` for everything else (free or never-used cells, the bytes
/// of a page before its first object or after its last cell, header words past their
/// first byte, pages of other heaps, unmapped or foreign memory).
#[inline]
pub fn internal_obj_base_ptr(heap_id: usize, p: usize) -> Option<ObjRef> {
    let entry = pagetable::entry(p)?;
    if entry.info() >> pagetable::INFO_OWNER_SHIFT != heap_id as u64 {
        return None;
    }
    in_page(entry, p)
}

/// The lookup proper, for a page-table entry that names the heap as the page's owner
/// (so the page is in use: a free page's info word is 0): it reads that entry (info word, geometry, metadata pointer: one cache line) and one
/// word of the page's allocation bitmap, nothing else. The cell index comes from the
/// geometry's division magic; an index past the page's last cell needs no check of its
/// own, since it never has an allocation bit (those are set at cell starts only).
#[inline(always)]
fn in_page(entry: &pagetable::Entry, p: usize) -> Option<ObjRef> {
    let geom = entry.geom();
    let cell = (geom >> 32) as usize;
    let magic = geom & 0xffff_ffff;
    let first = (p & !(PAGE_SIZE - 1)) + FIRST_CELL + HEADER_SIZE;
    let off = p.checked_sub(first)?;
    let idx = ((off as u64 * magic) >> 32) as usize;
    let rem = off.wrapping_sub(idx * cell);
    // `rem == cell - 8` is one past the end of cell `idx`; above, p is in the header
    // word of the next cell. (A geometry newer than the info word read gives a
    // consistent answer for the newer layout, whose bitmap is what is read below.)
    if rem > cell.wrapping_sub(HEADER_SIZE) {
        return None;
    }
    let obj = first + idx * cell;
    entry
        .meta_of_owned()
        .is_allocated(obj)
        .then(|| ObjRef::from_addr(obj))
        .flatten()
}

/// Like [`internal_obj_base_ptr`], and for external (big) objects of the heap too
/// (beginning, interior or one past the end of the payload).
#[inline]
pub fn base_ptr(heap_id: usize, p: usize) -> Option<ObjRef> {
    match pagetable::entry(p) {
        Some(entry) if entry.info() >> pagetable::INFO_OWNER_SHIFT == heap_id as u64 => {
            in_page(entry, p)
        }
        // A pool page (of another heap or free) never holds a big object.
        Some(entry) if entry.meta().is_some() => None,
        // The big-object filter inline, its ordered map out of line (so that the pool
        // lookup needs no stack frame).
        _ if index::may_hold(p) => index::search(p, heap_id).and_then(ObjRef::from_addr),
        _ => None,
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
