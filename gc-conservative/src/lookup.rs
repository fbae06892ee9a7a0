//! From an arbitrary word to the object it points into: O(1) for internal (pool)
//! objects (page table, offset arithmetic, the cell's allocation state), the ordered
//! index for external ones.

use crate::index;
use gc_core::object::HEADER_SIZE;
use gc_core::sizeclass::{FIRST_CELL, PAGE_SIZE};
use gc_core::{pagetable, ObjRef};
use std::sync::atomic::Ordering;

/// The internal object of heap `heap_id` that `p` points to the beginning, interior or
/// one past the end of; `None` for everything else (free or never-used cells, the bytes
/// of a page before its first object or after its last cell, header words past their
/// first byte, pages of other heaps, unmapped or foreign memory).
#[inline]
pub fn internal_obj_base_ptr(heap_id: usize, p: usize) -> Option<ObjRef> {
    let leaf = pagetable::leaf(p)?;
    let entry = leaf.entry(p);
    if entry.owner() != heap_id as u64 {
        return None;
    }
    in_page(leaf, entry, p)
}

/// The lookup proper, for a page-table entry that names the heap as the page's owner
/// (so the page is in use: a free page's owner word is 0): it reads that entry's
/// geometry (the cache line of the owner word) and one word of the page's allocation
/// bitmap, the bit of the cell index the geometry's division magic gives, nothing else.
/// It first asks for the bitmap's first line (every cell's for classes of 32 bytes or
/// more), whose address needs no load beyond the leaf's: issued under the prediction that the owner
/// matched, that load overlaps the entry's instead of following it. An index past the
/// page's last cell needs no check of its own: it never has an allocation bit.
///
/// The geometry is read again after the bit: a page released and given another layout
/// between the two reads (possible only for an address that no live object of the
/// heap's contains, while another thread sweeps and allocates) would pair a bit of the
/// new layout with a cell of the old one, and is answered "no object" instead.
#[inline(always)]
fn in_page(leaf: pagetable::Leaf, entry: &pagetable::Entry, p: usize) -> Option<ObjRef> {
    let bits = leaf.bitmaps();
    bits.prefetch(p);
    let geom = entry.geom();
    let cell = (geom >> 32) as usize;
    let magic = geom & 0xffff_ffff;
    let first = (p & !(PAGE_SIZE - 1)) + FIRST_CELL + HEADER_SIZE;
    let off = p.checked_sub(first)?;
    let idx = ((off as u64 * magic) >> 32) as usize;
    let start = idx * cell;
    // `off - start == cell - 8` is one past the end of cell `idx`; above, p is in the
    // header word of the next cell.
    if off - start > cell.wrapping_sub(HEADER_SIZE) {
        return None;
    }
    let allocated = bits.alloc_word(p, idx).load(Ordering::Acquire) >> (idx & 63) & 1 != 0;
    if !allocated || entry.geom() != geom {
        return None;
    }
    ObjRef::from_addr(first + start)
}

/// Like [`internal_obj_base_ptr`], and for external (big) objects of the heap too
/// (beginning, interior or one past the end of the payload).
#[inline]
pub fn base_ptr(heap_id: usize, p: usize) -> Option<ObjRef> {
    let entry = match pagetable::leaf(p) {
        Some(leaf) => {
            let entry = leaf.entry(p);
            if entry.owner() == heap_id as u64 {
                return in_page(leaf, entry, p);
            }
            Some(entry)
        }
        None => None,
    };
    match entry {
        // A pool page (of another heap or free) never holds a big object.
        Some(entry) if entry.meta().is_some() => None,
        // The big-object filter inline, its ordered map out of line.
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
