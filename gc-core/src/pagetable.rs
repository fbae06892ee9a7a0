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
/// (owner and cell layout, see [`pack_info`]; the cell size with its division magic, see
/// [`pack_geom`]) so that a lookup reads this entry (one cache line: 32 bytes, aligned)
/// and then only the page's allocation bitmap, with no table of its own.
#[repr(C, align(32))]
pub struct Entry {
    info: AtomicU64,
    meta: AtomicPtr<PageMeta>,
    geom: AtomicU64,
}

impl Entry {
    /// Owner << [`INFO_OWNER_SHIFT`] | size class << 16 | cell size; 0 while the page is
    /// free and for an address no pool page was ever registered at.
    #[inline(always)]
    pub fn info(&self) -> u64 {
        self.info.load(Ordering::Acquire)
    }

    /// The page's metadata; `None` if no pool page was ever registered here.
    #[inline(always)]
    pub fn meta(&self) -> Option<&'static PageMeta> {
        // SAFETY: page metadata is leaked when registered and never freed.
        unsafe { self.meta.load(Ordering::Acquire).as_ref() }
    }

    /// The page's metadata, for an entry whose [`Entry::info`] named an owner (set only
    /// after the metadata pointer was).
    #[inline(always)]
    pub fn meta_of_owned(&self) -> &'static PageMeta {
        let m = self.meta.load(Ordering::Acquire);
        debug_assert!(!m.is_null(), "an owned page has metadata");
        // SAFETY: as in `meta`; an owner is published only after the pointer (register
        // stores it before the page can be assigned), and it is never reset.
        unsafe { &*m }
    }

    /// The cell geometry of the page's last layout ([`pack_geom`]): published before the
    /// info word, so a lookup that read an info word with a cell size reads a geometry
    /// at least that recent.
    #[inline(always)]
    pub fn geom(&self) -> u64 {
        self.geom.load(Ordering::Acquire)
    }

    pub(crate) fn publish(&self, info: u64, geom: Option<u64>) {
        if let Some(g) = geom {
            self.geom.store(g, Ordering::Release);
        }
        self.info.store(info, Ordering::Release);
    }
}

/// Packs a cell size (header included, below 2^16) with its division magic
/// ([`crate::sizeclass::div_magic`], below 2^32): magic in bits 0..32, cell size above.
pub fn pack_geom(cell: usize, magic: u64) -> u64 {
    debug_assert!(magic < 1 << 32 && cell < 1 << 16);
    magic | (cell as u64) << 32
}

type Leaf = [Entry; LEAF_ENTRIES];

/// Bits of `info` below the owner: cell size (16) and size class (8).
pub const INFO_OWNER_SHIFT: u32 = 24;

/// Packs a page's owner (heap id, below 2^40) and layout (cell size | class << 16, 0
/// while the page is free) into one word; 0 (no owner) while the page is free, so that
/// an info word naming a heap always describes a page in use.
pub fn pack_info(owner: usize, layout: u64) -> u64 {
    if layout & 0xffff == 0 {
        return 0;
    }
    ((owner as u64) << INFO_OWNER_SHIFT) | (layout & ((1 << INFO_OWNER_SHIFT) - 1))
}

/// The page-table entry of the page that would contain `addr`, if its GiB has a leaf:
/// every entry of a leaf exists, registered or not (all-zero then). The lookup with the
/// fewest instructions: one load of the top level; the caller reads the entry's words.
#[inline(always)]
pub fn entry(addr: usize) -> Option<&'static Entry> {
    let top = addr >> LEAF_SHIFT;
    if top >= TOP_ENTRIES {
        return None;
    }
    let leaf = TOP[top].load(Ordering::Acquire);
    // SAFETY: leaves are allocated by `register` and never freed.
    let leaf = unsafe { leaf.as_ref() }?;
    Some(&leaf[(addr >> PAGE_SHIFT) & (LEAF_ENTRIES - 1)])
}

static TOP: [AtomicPtr<Leaf>; TOP_ENTRIES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; TOP_ENTRIES];

/// The metadata of the pool page containing `addr`, if any page was ever registered
/// there. The page may be free or owned by any heap: callers check
/// [`PageMeta::owner`] and [`PageMeta::cell_layout`].
#[inline]
pub fn lookup(addr: usize) -> Option<&'static PageMeta> {
    entry(addr)?.meta()
}

/// Records that the page at `page_base` is described by `meta` (for the process's
/// lifetime). Called once per page, when its chunk is mapped. Returns the entry, whose
/// info and geometry words the page keeps up to date.
pub(crate) fn register(page_base: usize, meta: &'static PageMeta) -> &'static Entry {
    assert!(
        page_base >> ADDR_BITS == 0,
        "page above the 48-bit address space"
    );
    let slot = &TOP[page_base >> LEAF_SHIFT];
    let mut leaf = slot.load(Ordering::Acquire);
    if leaf.is_null() {
        // Mapped directly (2 MiB): fresh anonymous memory reads as zero and becomes
        // resident only where touched (an aligned allocation from the global allocator
        // would be memset, all of it resident). All-zero entries are null metadata
        // pointers and zero info and geometry words.
        let size = std::mem::size_of::<Leaf>();
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert!(
            p != libc::MAP_FAILED,
            "mapping a page-table leaf: {}",
            std::io::Error::last_os_error()
        );
        // Page-aligned, so every 32-byte entry lies in one cache line; Entry is three
        // atomics, for which all-zero bytes are valid values, so this is a valid Leaf.
        let fresh = p as *mut Leaf;
        match slot.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => leaf = fresh,
            Err(existing) => {
                // SAFETY: our own mapping, never shared.
                unsafe { libc::munmap(p, size) };
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
    entry
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
