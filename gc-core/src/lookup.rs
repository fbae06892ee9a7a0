//! Lookups: from an address to the object of a heap it belongs to, the workspace's one
//! answer to "object containing / object start / allocated" (gc-core's own object
//! checks, its C layer, and gc-conservative's lookups and scans all ask these).
//!
//! Pool pages: through the process-wide page table (`pagetable.rs`), O(1), without a
//! lock, from any thread, for any address (page metadata lives as long as the process).
//! Big objects: their bookkeeping header ([`is_object`]) or, for interior pointers, an
//! index of the caller's (gc-conservative's `base_ptr` keeps one, fed by the
//! external-allocation callbacks); [`pool_object`] says when an address lies outside
//! every pool page, so that such an index is asked only then.
//!
//! Object memory is never read, with one exception: on a page waiting for its lazy
//! sweep, an allocated cell is decided from its header by the sweep's rule (a cell the
//! last collection found dead is never an object).

use crate::big::{BIG_HEADER, BIG_MAGIC};
use crate::heap_id::HeapId;
use crate::object::{Header, ObjRef, OBJ_ALIGN};
use crate::pagemeta::PageMeta;
use crate::pagetable;

/// What [`pool_object`] found at an address.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PoolLookup {
    /// An object of the heap: the address points to its beginning, interior or one past
    /// its end.
    Object(ObjRef),
    /// The address is inside a pool page (the heap's, another heap's or a free one) but
    /// in no object of the heap. A pool page never holds a big object either.
    NoObject,
    /// The address is in no pool page: it may be inside a big (external) object.
    OutsidePools,
}

/// The pool object of heap `heap` that `p` points into ([`internal_object`]), and when
/// there is none, whether `p` lies in a pool page at all: one page-table lookup for a
/// caller that also knows the heap's big objects (gc-conservative's `base_ptr`, called
/// for every word of a conservative scan; always inlined for it).
///
/// ```
/// use gc_core::{pool_object, Heap, PoolLookup};
///
/// let heap = Heap::default();
/// let mut m = heap.attach().unwrap();
/// let ty = heap.new_layout_type("Blob", 64, &[]).unwrap();
/// let obj = m.alloc_typed(64, ty).unwrap();
/// assert_eq!(pool_object(heap.id(), obj.addr() + 63), PoolLookup::Object(obj));
/// assert_eq!(pool_object(heap.id(), 0x10), PoolLookup::OutsidePools);
/// ```
#[inline(always)]
pub fn pool_object(heap: HeapId, p: usize) -> PoolLookup {
    let Some(leaf) = pagetable::leaf(p) else {
        return PoolLookup::OutsidePools;
    };
    let entry = leaf.entry(p);
    if entry.owner() == heap.get() {
        return match leaf.object_in_page(entry, heap, p) {
            Some(obj) => PoolLookup::Object(obj),
            None => PoolLookup::NoObject,
        };
    }
    if entry.meta().is_some() {
        PoolLookup::NoObject
    } else {
        PoolLookup::OutsidePools
    }
}

/// The internal (pool) object of heap `heap` that `p` points to the beginning,
/// interior or one past the end of; `None` for everything else (free or never-used
/// cells, the bytes of a page before its first payload or after its last cell, header
/// words past their first byte, pages of other heaps or free ones, addresses no pool
/// page was ever registered at). Any `p` is accepted, from any thread, at any time,
/// without a lock.
///
/// The one answer to "is this an object of heap H" in the workspace: gc-conservative's
/// lookups and conservative scans and gc-core's own object checks
/// ([`is_internal_object`], `PageMeta::is_allocated`) all go through
/// `pagetable::Leaf::object_in_page`.
#[inline]
pub fn internal_object(heap: impl Into<HeapId>, p: usize) -> Option<ObjRef> {
    let heap_id = heap.into();
    let leaf = pagetable::leaf(p)?;
    let entry = leaf.entry(p);
    if entry.owner() != heap_id.get() {
        return None;
    }
    leaf.object_in_page(entry, heap_id, p)
}

/// Whether `addr` is the payload address of an allocated internal object of heap
/// `heap` (see [`internal_object`]).
#[inline]
pub fn is_internal_object(heap: impl Into<HeapId>, addr: usize) -> bool {
    let heap_id = heap.into();
    internal_object(heap_id, addr).is_some_and(|o| o.addr() == addr)
}

/// The seed's `jl_gc_is_internal_obj_alloc` for heap `heap`: whether `p` is the
/// payload address of a cell of one of the heap's pool pages that holds an allocated
/// object or is free (memory reserved for objects, whose header is a free-list link or
/// 0, never a valid type: the seed's guarantee, which its type check
/// `jl_gc_internal_obj_base_ptr(jl_typeof(p)) != NULL` relies on). A cell whose object
/// the last collection found dead while its page waits for the lazy sweep is neither:
/// its header still names the dead object's type, so it is answered false, as for
/// memory that is no pool object at all (the answer the seed's guarantee allows).
pub fn is_internal_cell(heap: impl Into<HeapId>, p: usize) -> bool {
    let heap_id = heap.into();
    let Some(leaf) = pagetable::leaf(p) else {
        return false;
    };
    let entry = leaf.entry(p);
    if entry.owner() != heap_id.get() {
        return false;
    }
    loop {
        let geom = entry.geom();
        let Some(idx) = geom.start_index(p) else {
            return false;
        };
        let allocated = leaf.bitmaps().is_set(p, idx);
        let answer = !allocated || leaf.object_in_page(entry, heap_id, p).is_some();
        // A page swept or laid out again meanwhile: look again.
        if entry.geom() == geom {
            return answer;
        }
    }
}

/// The metadata of the pool page containing `addr`, if any page was ever registered
/// there. The page may be free or owned by any heap: callers check
/// [`PageMeta::owner`] and [`PageMeta::cell_layout`].
#[inline]
pub fn page_of(addr: usize) -> Option<&'static PageMeta> {
    pagetable::entry(addr)?.meta()
}

/// Whether `addr` is (the payload address of) an allocated object of heap `heap`: the start of an allocated
/// cell of one of its pool pages, or, outside every pool page, a big object (its
/// bookkeeping header's magic and an allocated header word, read through the kernel so
/// that unmapped memory in front of `addr` is an answer, not a fault). For entry points
/// that take an object from C, where a malloc'd, static or interior pointer would
/// otherwise corrupt memory, and for the Rust API's safe functions that take an
/// `ObjRef` (any address can be one).
pub fn is_object(heap: impl Into<HeapId>, addr: usize) -> bool {
    let heap_id = heap.into();
    if addr % OBJ_ALIGN != 0 || addr < BIG_HEADER {
        return false;
    }
    if page_of(addr).is_some() {
        // A pool page (of this heap, another or none) holds no big object.
        return is_internal_object(heap_id, addr);
    }
    // The bookkeeping header in front of `addr`, copied by the kernel: memory that is not
    // mapped (or, under valgrind, not ours) is then a failed read, not a fault.
    let mut buf = [0usize; BIG_HEADER / 8];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: BIG_HEADER,
    };
    let remote = libc::iovec {
        iov_base: (addr - BIG_HEADER) as *mut libc::c_void,
        iov_len: BIG_HEADER,
    };
    // SAFETY: the kernel writes at most BIG_HEADER bytes into `buf`, which has that size;
    // the remote range is only read, and a bad one fails with EFAULT.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n != BIG_HEADER as isize {
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT) {
            return false;
        }
        // The call itself is not available (a seccomp filter): read directly, trusting
        // that the memory in front of an address handed to us as an object is mapped.
        // SAFETY: as stated; the words are plain integers.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (addr - BIG_HEADER) as *const usize,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
    }
    // The fields' positions in BigHeader (repr(C)): magic at 16, heap id at 24, tag at 40.
    let (magic, heap, tag) = (buf[2], buf[3], buf[5]);
    magic == BIG_MAGIC && heap == heap_id.word() && Header::from_raw(tag).is_allocated()
}

impl PageMeta {
    /// Whether `obj` is the payload address of a cell of this page that holds an
    /// allocated object right now; false while the page is free. The answer of
    /// [`crate::is_internal_object`] for the page's owner. (Defined here, with the
    /// lookups it forwards to, so that the page module stays below them.)
    #[inline]
    pub fn is_allocated(&self, obj: usize) -> bool {
        debug_assert!(obj > self.base() && obj < self.base() + crate::sizeclass::PAGE_SIZE);
        self.owner()
            .is_some_and(|owner| is_internal_object(owner, obj))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// Whether `obj` is an allocated cell of its pool page (the page's own answer).
    fn pool_allocated(heap: &crate::Heap, obj: ObjRef) -> bool {
        heap.complete_sweep().unwrap();
        let page = page_of(obj.addr()).expect("pool object");
        page.cell_layout().is_some() && page.is_allocated(obj.addr())
    }

    /// The allocation bit an interior-pointer lookup reads through the page-table leaf
    /// (`Bitmaps::alloc_word`, found from the address and the cell index alone) is the one the
    /// page's metadata keeps, for objects of every size class, before and after a
    /// collection frees some.
    #[test]
    fn the_leaf_bitmap_word_is_the_page_bitmap() {
        let heap = crate::Heap::new(crate::HeapConfig {
            min_interval: 1 << 30,
            max_interval: 1 << 30,
            ..crate::HeapConfig::default()
        })
        .unwrap();
        let mut m = heap.attach().unwrap();
        let ty = heap.new_layout_type("Blob", 8, &[]).unwrap();
        let mut kept = Vec::new();
        let mut dropped = Vec::new();
        for (i, size) in (8..=crate::max_internal_obj_size()).step_by(40).enumerate() {
            for j in 0..4 {
                let o = m.alloc_typed(size, ty).unwrap();
                if (i + j) % 2 == 0 {
                    kept.push((heap.root(o), o));
                } else {
                    dropped.push(o);
                }
            }
        }
        // The bit as base_ptr reads it: the leaf's word for the cell index of `a`.
        // A page the collection emptied is free: its whole bitmap must then be clear.
        let leaf_bit = |a: usize| {
            let page = page_of(a).expect("a pool page");
            let leaf = pagetable::leaf(a).expect("a pool page's GiB has a leaf");
            match page.cell_layout() {
                Some((cell, class)) => {
                    let idx = page.cell_index(a, cell, class).expect("inside a cell");
                    leaf.bitmaps().alloc_word(a, idx).load(Ordering::Acquire) >> (idx & 63) & 1 != 0
                }
                None => {
                    let clear = (0..crate::pagemeta::ALLOC_WORDS)
                        .all(|w| leaf.bitmaps().alloc_word(a, w * 64).load(Ordering::Acquire) == 0);
                    assert!(clear, "a free page's bitmap is clear");
                    false
                }
            }
        };
        for &o in kept.iter().map(|(_, o)| o).chain(&dropped) {
            assert!(leaf_bit(o.addr()), "{o:?} allocated");
            assert!(pool_allocated(&heap, o));
        }
        m.collect(crate::CollectionKind::Full).unwrap();
        heap.complete_sweep().unwrap();
        for &(_, o) in &kept {
            assert!(leaf_bit(o.addr()) && pool_allocated(&heap, o), "{o:?} kept");
        }
        for &o in &dropped {
            assert!(
                !leaf_bit(o.addr()) && !pool_allocated(&heap, o),
                "{o:?} freed"
            );
        }
    }

    #[test]
    fn unregistered_and_out_of_range_addresses_have_no_page() {
        assert!(page_of(0).is_none());
        assert!(page_of(usize::MAX).is_none());
        assert!(page_of(1 << 48).is_none());
        let local = 0u64;
        assert!(page_of(&local as *const u64 as usize).is_none());
    }
}
