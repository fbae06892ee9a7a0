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
//!
//! A leaf has, besides one [`Entry`] per page, each page's allocation bitmap
//! ([`AllocBits`], one bit per cell by cell index), in a second mapping found through a
//! second top-level table, at an address computed from the looked-up address alone, so
//! an interior-pointer lookup can start loading the bitmap in parallel with the entry
//! instead of after it (see [`Bitmaps::prefetch`]): the lookup then waits for
//! one cache miss, not two in a row.
//!
//! While a page waits for its lazy sweep, its bitmap still has the bits of the cells the
//! last collection found dead; its entry's geometry word says so ([`Geom::is_waiting`]) and
//! carries the sweep's parameters, and a lookup that finds a cell's bit set there decides
//! from the cell's header (`object_in_waiting_page`). [`internal_object`] and
//! [`is_internal_cell`] are the workspace's one answer to "is this address an object of
//! heap H".

use crate::geom::Geom;
use crate::heap_id::HeapId;
use crate::object::{Header, ObjRef, HEADER_SIZE};
use crate::pagemeta::{AllocBits, Entry, PageMeta, ALLOC_WORDS};
use crate::sizeclass::PAGE_SHIFT;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

const ADDR_BITS: usize = 48;
const LEAF_SHIFT: usize = 30;
const TOP_ENTRIES: usize = 1 << (ADDR_BITS - LEAF_SHIFT);
const LEAF_ENTRIES: usize = 1 << (LEAF_SHIFT - PAGE_SHIFT);

/// The entries of one GiB of pages (2 MiB).
#[repr(C)]
struct Entries([Entry; LEAF_ENTRIES]);

/// The allocation bitmaps of one GiB of pages (8 MiB), page after page: the bitmap of
/// the page of `addr` starts at word `(addr >> 10) & !15`.
type BitmapArray = [AtomicU64; LEAF_ENTRIES * ALLOC_WORDS];

/// The page table's leaf for one GiB: its pages' entries and their allocation bitmaps
/// ([`Leaf::bitmaps`]), each a mapping of its own, without reserve (only the parts of
/// registered pages become resident), found through two top-level tables loaded side
/// by side. Measured on the micro-benchmark, 10 interleaved processes each: bitmaps
/// after the entries in one mapping, hit median 4.96 ns (0.94x `GC_base`); two
/// mappings with the bitmaps' pointer loaded only once the owner matched, 5.15 ns;
/// two mappings loaded side by side (this), 3.97 ns (0.79x), misses 3.6 -> 4.0 ns.
#[derive(Clone, Copy)]
pub struct Leaf {
    entries: &'static Entries,
    bits: &'static BitmapArray,
}

impl Leaf {
    /// The entry of the page that contains `addr` (an address of this leaf's GiB; others
    /// wrap around inside it).
    #[inline(always)]
    pub fn entry(self, addr: usize) -> &'static Entry {
        &self.entries.0[(addr >> PAGE_SHIFT) & (LEAF_ENTRIES - 1)]
    }

    /// The allocation bitmaps of the leaf's pages.
    #[inline(always)]
    pub fn bitmaps(self) -> Bitmaps {
        Bitmaps(self.bits)
    }

    /// The object whose cell `p` points into (its payload's beginning, interior or one
    /// past its end), on the page of `entry` (`self.entry(p)`), for an entry whose owner
    /// word the caller has compared with its heap's id `heap_id` (so the page is in use: a
    /// free page's owner word is 0; the slow path compares it again at each look).
    /// `None` for a free or never-used cell, a cell whose object
    /// the last collection found dead while the page waits for its lazy sweep, the bytes
    /// of the page before its first payload or after its last cell, and header words
    /// past their first byte. What [`internal_object`] and gc-conservative's `base_ptr`
    /// answer.
    ///
    /// It reads the entry's geometry (the cache line of the owner word) and one word of
    /// the page's allocation bitmap, the bit of the cell index the geometry's division
    /// magic gives, nothing else. It first asks for the bitmap's first line (every
    /// cell's for classes of 32 bytes or more), whose address needs no load beyond the
    /// leaf's: issued under the prediction that the owner matched, that load overlaps
    /// the entry's instead of following it. An index past the page's last cell needs no
    /// check of its own: it never has an allocation bit.
    ///
    /// A page waiting for its sweep ([`Geom::is_waiting`], one compare on the geometry
    /// already loaded, the fast path's only addition for it) goes to
    /// `object_in_waiting_page`, which also reads the cell's header. The geometry is read
    /// again after the bit: a page flagged as waiting or given another layout between the
    /// two reads (a layout changes only on a page no live object of the heap's is on,
    /// while another thread sweeps and allocates) is looked at again
    /// (`object_in_changed_page`), so that a bit of the new state is never paired with a
    /// cell of the old.
    #[inline(always)]
    pub fn object_in_page(self, entry: &Entry, heap_id: HeapId, p: usize) -> Option<ObjRef> {
        let bits = self.bitmaps();
        bits.prefetch(p);
        let geom = entry.geom();
        if geom.is_waiting() {
            return object_in_waiting_page(heap_id, p);
        }
        let (idx, obj) = geom.locate_settled(p)?;
        if !bits.is_set(p, idx) {
            return None;
        }
        if entry.geom() != geom {
            // Given the cell's start rather than `p`, which is then dead after the
            // offset's computation: the fast path keeps no more registers than before.
            return object_in_changed_page(obj, geom);
        }
        ObjRef::from_addr(obj)
    }
}

/// [`Leaf::object_in_page`] when the geometry word changed between its two reads, given
/// the start `obj` of the cell the first one gave (for the address looked up) and that
/// geometry: `obj` and the geometry are all the fast path keeps (the heap's id would be
/// one more register to save there). With the same cell size (the page's heap flagged it
/// as waiting for its sweep, in a collection's pause), `obj` is in the same cell as the
/// address and is looked up anew, for the page's owner now. With another one, the page
/// was released meanwhile: the address pointed to no object then, the answer. (Like the
/// fast path's owner test before its geometry read, this trusts that the page did not
/// pass to another heap during the few instructions between the two reads: that takes
/// a sweep that releases it, an allocation that takes it and, here, a collection of the
/// other heap, all while the looking thread stalls.)
#[cold]
#[inline(never)]
fn object_in_changed_page(obj: usize, old: Geom) -> Option<ObjRef> {
    let entry = entry(obj)?;
    let owner = entry.owner();
    if !entry.geom().same_cell(old) {
        return None;
    }
    if owner == 0 {
        return None;
    }
    object_in_waiting_page(HeapId::from_owner(owner), obj)
}

/// [`Leaf::object_in_page`] for a page of heap `heap_id` waiting for its lazy sweep (or
/// whose geometry changed during a lookup, [`object_in_changed_page`]): a cell whose
/// allocation bit is set holds an object of the last collection, live or dead; the
/// cell's header (read with acquire ordering) and the sweep's parameters in the geometry
/// word decide, by the sweep's own rule. Then the geometry and the owner are read again:
/// if either changed (the page was swept meanwhile: its new bitmap is stored before the
/// flag is cleared, and only then can a cell of it be allocated again; or released), the
/// lookup starts over.
///
/// The header read is the one place a lookup reads object memory (the exception to
/// the invariant in ARCHITECTURE.md): a cell header of a pool page, which stays
/// mapped for the process's lifetime. Meanwhile the sweep may write a free-list link
/// into it (a free cell: dead, the right answer). A live object's header changes
/// only in the `REMEMBERED` bit (a write barrier) until the next collection marks,
/// and that collection first sweeps the page; a cell given out again after the
/// sweep holds a new object, and the geometry read after the header has changed.
#[cold]
#[inline(never)]
fn object_in_waiting_page(heap_id: HeapId, p: usize) -> Option<ObjRef> {
    // The caller found the leaf and its entry: found again.
    let leaf = leaf(p)?;
    let entry = leaf.entry(p);
    let bits = leaf.bitmaps();
    loop {
        // The owner first (the caller compared it too, but this may be a second look):
        // a geometry read after it is at least as recent as the heap's layout.
        if entry.owner() != heap_id.get() {
            return None;
        }
        let geom = entry.geom();
        let (idx, obj) = geom.locate(p)?;
        if !bits.is_set(p, idx) {
            return None;
        }
        let live = if geom.is_waiting() {
            let hp = obj - HEADER_SIZE;
            // gc-core writes header words atomically, except when it zeroes a recycled
            // free page for reuse (`PageAlloc::grant`, a memset after the page's new
            // geometry is published): a lookup meets that only if it stalls here from
            // before the page's sweep until the page was released and given out
            // again; whatever word it reads, the geometry it reads next is the new one
            // (x86-64 makes stores visible in order) and it looks again.
            // SAFETY: `locate` gave a cell of the page of `p` (at or below `p`), so `hp`
            // is a cell header inside that page, a pool page (its entry names an
            // owner), never unmapped.
            let h = unsafe { &*(hp as *const AtomicUsize) }.load(Ordering::Acquire);
            geom.live_while_waiting(Header::from_raw(h))
        } else {
            true
        };
        // A page swept meanwhile (or released: its owner word changes too) is looked at
        // again.
        if entry.geom() == geom && entry.owner() == heap_id.get() {
            return if live { ObjRef::from_addr(obj) } else { None };
        }
    }
}

/// The allocation bitmaps of one leaf's pages ([`Leaf::bitmaps`]).
#[derive(Clone, Copy)]
pub struct Bitmaps(&'static BitmapArray);

impl Bitmaps {
    /// The allocation-bitmap word that holds the bit of cell `idx` (bit `idx % 64`) of
    /// the page that contains `addr` (an address of this leaf's GiB): no load. Any
    /// address and index are accepted (a cell index is below 1,024; others wrap inside
    /// the page's bitmap, other addresses inside the leaf's).
    #[inline(always)]
    pub fn alloc_word(self, addr: usize, idx: usize) -> &'static AtomicU64 {
        &self.0
            [((addr >> 10) & ((LEAF_ENTRIES - 1) * ALLOC_WORDS)) | ((idx >> 6) & (ALLOC_WORDS - 1))]
    }

    /// Whether the allocation bit of cell `idx` of the page that contains `addr` is set.
    #[inline(always)]
    pub fn is_set(self, addr: usize, idx: usize) -> bool {
        self.alloc_word(addr, idx).load(Ordering::Acquire) >> (idx & 63) & 1 != 0
    }

    /// Asks the processor to start loading the first cache line of the allocation bitmap
    /// of the page that contains `addr` (no effect on other architectures than x86-64):
    /// the line of every cell of every class of 32 bytes or more, and of the first 512
    /// cells of the 16-byte class. A lookup that reads the bit of the cell containing
    /// `addr` after decoding the entry's geometry then finds that line arriving rather
    /// than starting a second cache miss only once the first is over.
    #[inline(always)]
    pub fn prefetch(self, addr: usize) {
        crate::object::prefetch(self.alloc_word(addr, 0) as *const AtomicU64 as usize);
    }

    fn page(self, page_base: usize) -> &'static AllocBits {
        let first = (page_base >> 10) & ((LEAF_ENTRIES - 1) * ALLOC_WORDS);
        (&self.0[first..first + ALLOC_WORDS])
            .try_into()
            .expect("a page's bitmap is ALLOC_WORDS words")
    }
}

/// The page-table entry of the page that would contain `addr`, if its GiB has a leaf:
/// every entry of a leaf exists, registered or not (all-zero then). The lookup with the
/// fewest instructions: one load of the top level; the caller reads the entry's words.
#[inline(always)]
pub fn entry(addr: usize) -> Option<&'static Entry> {
    Some(leaf(addr)?.entry(addr))
}

/// The leaf of the GiB that contains `addr`, if a pool page was ever registered in it:
/// for a lookup that reads both the entry and the allocation bitmap, whose addresses
/// then need no further load ([`Leaf::entry`], [`Bitmaps::alloc_word`]): two
/// independent loads of the two top-level tables.
#[inline(always)]
pub fn leaf(addr: usize) -> Option<Leaf> {
    let top = addr >> LEAF_SHIFT;
    if top >= TOP_ENTRIES {
        return None;
    }
    // SAFETY: entries are allocated by `register` and never freed.
    let entries = unsafe { TOP[top].load(Ordering::Acquire).as_ref() }?;
    // SAFETY: `register` publishes a GiB's bitmaps before its entries, and neither is
    // ever freed: the acquire load above makes the bitmaps' pointer visible here.
    let bits = unsafe { &*BITMAPS[top].load(Ordering::Relaxed) };
    Some(Leaf { entries, bits })
}

static TOP: [AtomicPtr<Entries>; TOP_ENTRIES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; TOP_ENTRIES];
static BITMAPS: [AtomicPtr<BitmapArray>; TOP_ENTRIES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; TOP_ENTRIES];

/// Maps `len` bytes of zeroed, private, anonymous memory without reserve (only the
/// pages touched become resident); page-aligned.
pub(crate) fn map_anonymous(len: usize) -> Result<*mut libc::c_void, std::io::Error> {
    // SAFETY: no fixed address.
    unsafe { map_anonymous_with(None, len, libc::PROT_READ | libc::PROT_WRITE) }
}

/// As [`map_anonymous`], with protection `prot` (`PROT_NONE` reserves address space
/// and commits nothing), at exactly `at` when given (`MAP_FIXED`: replacing what is
/// mapped there).
///
/// # Safety
/// With `at`, the caller owns `[at, at + len)` and nothing there is in use.
pub(crate) unsafe fn map_anonymous_with(
    at: Option<usize>,
    len: usize,
    prot: libc::c_int,
) -> Result<*mut libc::c_void, std::io::Error> {
    let fixed = if at.is_some() { libc::MAP_FIXED } else { 0 };
    // SAFETY: an anonymous private mapping; at a fixed address only over memory the
    // caller owns and does not use (the contract above).
    let p = unsafe {
        libc::mmap(
            at.unwrap_or(0) as *mut libc::c_void,
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | fixed,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p)
}

/// The value of `slot`, mapping a zeroed `T` (anonymous memory, without reserve: only
/// the pages touched become resident) and publishing it there if it was empty. A thread
/// that loses the race for the slot unmaps its own mapping.
fn get_or_map<T>(slot: &AtomicPtr<T>, what: &str) -> &'static T {
    let cur = slot.load(Ordering::Acquire);
    if !cur.is_null() {
        // SAFETY: published mappings are never unmapped.
        return unsafe { &*cur };
    }
    let size = std::mem::size_of::<T>();
    let p = map_anonymous(size).unwrap_or_else(|e| panic!("mapping {what}: {e}"));
    match slot.compare_exchange(
        std::ptr::null_mut(),
        p as *mut T,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: page-aligned fresh memory reads as zero, a valid T for the atomics and
        // plain integers used here; it is never unmapped once published.
        Ok(_) => unsafe { &*(p as *const T) },
        Err(existing) => {
            // SAFETY: our own mapping, never shared.
            unsafe { libc::munmap(p, size) };
            // SAFETY: as above.
            unsafe { &*existing }
        }
    }
}

/// Records that the page at `page_base` is described by `meta` (for the process's
/// lifetime). Called once per page, when its chunk is mapped. Returns the entry, whose
/// owner and geometry words the page keeps up to date, and the page's allocation bitmap
/// (all zero when first registered).
pub(crate) fn register(
    page_base: usize,
    meta: &'static PageMeta,
) -> (&'static Entry, &'static AllocBits) {
    assert!(
        page_base >> ADDR_BITS == 0,
        "page above the 48-bit address space"
    );
    let top = page_base >> LEAF_SHIFT;
    // The bitmaps first: a lookup that finds the entries finds the bitmaps (`leaf`).
    let bits = get_or_map(&BITMAPS[top], "a page-table leaf's bitmaps");
    let entries = get_or_map(&TOP[top], "a page-table leaf's entries");
    let leaf = Leaf { entries, bits };
    let entry = leaf.entry(page_base);
    entry.register(meta);
    (entry, leaf.bitmaps().page(page_base))
}
