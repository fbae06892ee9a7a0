//! The process-wide page table: from any address to the metadata of the pool page that
//! contains it, in two dependent loads, without locks.
//!
//! Pool pages are 16 KiB and come in 4 MiB chunks that are never unmapped: a heap that
//! is dropped returns its chunks (madvised, so they hold no memory) to a process-wide
//! pool for the next heap. Page metadata therefore lives as long as the process, which
//! is what lets a lookup from any thread, at any time, with any address, read it
//! without a lock or an epoch: the worst a racing lookup can see is a page changing
//! owner, and every field it reads is atomic.
//!
//! Layout: the top level has one entry per GiB of the 48-bit address space (2^18
//! entries, 2 MiB of zero-initialised `.bss`, resident only where touched); each leaf
//! maps the 65,536 pages of one GiB. Leaves are allocated on first use and never freed.

use crate::page::PageMeta;
use crate::sizeclass::PAGE_SHIFT;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

const ADDR_BITS: usize = 48;
const LEAF_SHIFT: usize = 30;
const TOP_ENTRIES: usize = 1 << (ADDR_BITS - LEAF_SHIFT);
const LEAF_ENTRIES: usize = 1 << (LEAF_SHIFT - PAGE_SHIFT);

/// One page's entry: its metadata, and a copy of what an interior-pointer lookup needs
/// (owner and cell layout, see [`pack_info`]) so that a lookup reads this entry and then
/// only the page's allocation bitmap.
struct Entry {
    meta: AtomicPtr<PageMeta>,
    info: AtomicU64,
}

type Leaf = [Entry; LEAF_ENTRIES];

/// Bits of `info` below the owner: cell size (16) and size class (8).
pub const INFO_OWNER_SHIFT: u32 = 24;

/// Packs a page's owner (heap id, below 2^40) and layout (cell size | class << 16, 0
/// while the page is free) into one word.
pub fn pack_info(owner: usize, layout: u64) -> u64 {
    ((owner as u64) << INFO_OWNER_SHIFT) | (layout & ((1 << INFO_OWNER_SHIFT) - 1))
}

/// The page containing `addr` with its packed info (owner << 24 | class << 16 | cell
/// size): one load of the leaf entry's two words.
#[inline]
pub fn lookup_with_info(addr: usize) -> Option<(u64, &'static PageMeta)> {
    if addr >> ADDR_BITS != 0 {
        return None;
    }
    let leaf = TOP[addr >> LEAF_SHIFT].load(Ordering::Acquire);
    if leaf.is_null() {
        return None;
    }
    // SAFETY: leaves are allocated by `register` and never freed.
    let entry = &unsafe { &*leaf }[(addr >> PAGE_SHIFT) & (LEAF_ENTRIES - 1)];
    let info = entry.info.load(Ordering::Acquire);
    let meta = entry.meta.load(Ordering::Acquire);
    // SAFETY: page metadata is leaked when registered and never freed.
    unsafe { meta.as_ref() }.map(|m| (info, m))
}

static TOP: [AtomicPtr<Leaf>; TOP_ENTRIES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; TOP_ENTRIES];

/// The metadata of the pool page containing `addr`, if any page was ever registered
/// there. The page may be free or owned by any heap: callers check
/// [`PageMeta::owner`] and [`PageMeta::cell_layout`].
#[inline]
pub fn lookup(addr: usize) -> Option<&'static PageMeta> {
    if addr >> ADDR_BITS != 0 {
        return None;
    }
    let leaf = TOP[addr >> LEAF_SHIFT].load(Ordering::Acquire);
    if leaf.is_null() {
        return None;
    }
    // SAFETY: leaves are allocated by `register` and never freed.
    let leaf = unsafe { &*leaf };
    let meta = leaf[(addr >> PAGE_SHIFT) & (LEAF_ENTRIES - 1)]
        .meta
        .load(Ordering::Acquire);
    // SAFETY: page metadata is leaked when registered (see module docs) and never freed.
    unsafe { meta.as_ref() }
}

/// Records that the page at `page_base` is described by `meta` (for the process's
/// lifetime). Called once per page, when its chunk is mapped. Returns the entry's info
/// word, which the page keeps up to date.
pub(crate) fn register(page_base: usize, meta: &'static PageMeta) -> &'static AtomicU64 {
    assert!(
        page_base >> ADDR_BITS == 0,
        "page above the 48-bit address space"
    );
    let slot = &TOP[page_base >> LEAF_SHIFT];
    let mut leaf = slot.load(Ordering::Acquire);
    if leaf.is_null() {
        // Allocated zeroed on the heap (1 MiB: never built on the stack); all-zero
        // entries are null metadata pointers and zero info words.
        let layout = std::alloc::Layout::new::<Leaf>();
        // SAFETY: Leaf has non-zero size; Entry is two atomics, for which all-zero bytes
        // are valid values, so the zeroed allocation is a valid Leaf.
        let fresh = unsafe { std::alloc::alloc_zeroed(layout) } as *mut Leaf;
        if fresh.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        match slot.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => leaf = fresh,
            Err(existing) => {
                // SAFETY: `fresh` came from Box::into_raw above and was never shared.
                drop(unsafe { Box::from_raw(fresh) });
                leaf = existing;
            }
        }
    }
    // SAFETY: leaves are never freed once published.
    let leaf = unsafe { &*leaf };
    let entry = &leaf[(page_base >> PAGE_SHIFT) & (LEAF_ENTRIES - 1)];
    entry.info.store(0, Ordering::Release);
    entry
        .meta
        .store(meta as *const PageMeta as *mut PageMeta, Ordering::Release);
    &entry.info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unregistered_and_out_of_range_addresses_have_no_page() {
        assert!(lookup(0).is_none());
        assert!(lookup(usize::MAX).is_none());
        assert!(lookup(1 << 48).is_none());
        let local = 0u64;
        assert!(lookup(&local as *const u64 as usize).is_none());
    }
}
