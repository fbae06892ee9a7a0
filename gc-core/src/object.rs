//! Object references and the header word.
//!
//! Every object is preceded by one header word holding its type pointer and GC bits;
//! an [`ObjRef`] points just past the header, at the payload (Julia's `jl_value_t*`).
//! Payloads are 16-byte aligned, so the header word sits at an address that is 8 mod 16
//! and type pointers (which point at payloads of type objects) have their low four bits
//! clear. Those four bits hold the GC state:
//!
//! | bit | name | meaning | [`Header`] methods |
//! |---|---|---|---|
//! | 0 | `MARK` | old: marked iff it equals the heap's old-mark parity (flips at every full collection); young: see `AGE` | `is_marked_old`, `mark_flipped`, `promoted` |
//! | 1 | `OLD` | the object has been promoted to the old generation | `is_old`, `is_young`, `new_old`, `promoted` |
//! | 2 | `REMEMBERED` / `AGE` | old object: in the remembered set (the write barrier fired for it); young object: marked by some collection (survived it, or is surviving the current one) | `is_remembered`, `is_old_unremembered`, `with_remembered`, `without_remembered`; `has_age`, `is_young_marked`, `first_marked`, `marked_young` |
//! | 3 | `FREE` | never set in a live header: a free pool cell's header holds a free-list link, which is the address of another cell's header and therefore 8 mod 16, or the end marker [`FREE_END`] | `is_free`, `is_allocated` |
//!
//! A young object is marked in the current collection iff `AGE` is set and `MARK` equals
//! the heap's young parity, which flips at every collection: a survivor of the previous
//! collection (`AGE` set, `MARK` the old young parity) therefore reads unmarked without
//! any write to its header, and a new object (both clear) too. Marking a survivor a second
//! time promotes it then and there (`OLD`, marked for the old parity). So the only header
//! writes of a collection happen while marking, with the world stopped: a sweep reads
//! live headers and writes only dead cells, which is what lets it run lazily, next to
//! running mutators.
//!
//! A pool cell is therefore allocated iff its header is non-zero and has bit 3 clear:
//! never-used cells are zero, free cells carry bit 3. This is what makes the allocation
//! state of any cell an O(1) question.
//!
//! [`Header`] is the header word as a type, and the one place that packs and unpacks it:
//! its constructors build new objects' headers, its queries read the bits above
//! (allocated, free, type pointer, old, remembered, marked for a parity, dead after a
//! collection) and its transitions are the writes of marking, promotion and the write
//! barriers. Everything else handles a `Header`, never the bits; the bit constants stay
//! visible to the crate only for the C layer (`ffi.rs` exports them as `HDR_*`, which
//! `capi/tests/it/headers.rs` checks against the C header's `GC_HDR_*`). The word lives in
//! an `AtomicUsize` ([`ObjRef::header`]); its users load and store [`Header::raw`] with
//! the orderings of their own protocol.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Mark bit (see the module table).
pub(crate) const MARK: usize = 1;
/// Old-generation bit.
pub(crate) const OLD: usize = 2;
/// Remembered-set bit (old objects).
pub(crate) const REMEMBERED: usize = 4;
/// Survived-a-collection bit (young objects; same bit as `REMEMBERED`).
pub(crate) const AGE: usize = 4;
/// Free-cell bit: set in every free cell's header, never in an object's.
pub(crate) const FREE: usize = 8;
/// All bits that are not part of the type pointer.
pub(crate) const TAG_BITS: usize = 15;
/// Free-list end marker stored in the header of the last free cell of a list.
pub(crate) const FREE_END: usize = FREE;

/// Asks the CPU to start loading the line at `addr` early (an object's header before
/// the marker reads it, a free cell before the allocator hands it out). A hint: it
/// never faults, whatever the address; nothing on other architectures than x86-64.
#[inline(always)]
pub(crate) fn prefetch(addr: usize) {
    prefetch_into::<false>(addr)
}

/// As [`prefetch`], into the second-level cache only (lines wanted soon, but not so soon
/// that they should push the first level's out).
#[inline(always)]
pub(crate) fn prefetch_l2(addr: usize) {
    prefetch_into::<true>(addr)
}

#[inline(always)]
fn prefetch_into<const L2_ONLY: bool>(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        if L2_ONLY {
            _mm_prefetch::<_MM_HINT_T1>(addr as *const i8)
        } else {
            _mm_prefetch::<_MM_HINT_T0>(addr as *const i8)
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Size of the header word that precedes every object.
pub const HEADER_SIZE: usize = 8;
/// Alignment of every object payload.
pub const OBJ_ALIGN: usize = 16;

/// A reference to a heap object: the address of its payload, just past its header.
///
/// An `ObjRef` is only an address: holding one does not keep the object alive (roots
/// do), and reading the payload is the caller's business. It is `Send` and `Sync` for
/// the same reason a `usize` is.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct ObjRef(NonNull<u8>);

// SAFETY: an ObjRef is an address with no ownership; every dereference goes through
// unsafe code whose caller guarantees the object is alive and access is synchronised.
unsafe impl Send for ObjRef {}
// SAFETY: as above, sharing the address itself is harmless.
unsafe impl Sync for ObjRef {}

impl ObjRef {
    /// Wraps a payload address; `None` for null.
    pub fn from_ptr(ptr: *mut u8) -> Option<ObjRef> {
        NonNull::new(ptr).map(ObjRef)
    }

    /// Wraps a payload address given as an integer; `None` for 0.
    pub fn from_addr(addr: usize) -> Option<ObjRef> {
        Self::from_ptr(addr as *mut u8)
    }

    /// The payload address.
    pub fn as_ptr(self) -> *mut u8 {
        self.0.as_ptr()
    }

    /// The payload address as an integer.
    pub fn addr(self) -> usize {
        self.0.as_ptr() as usize
    }

    /// The header word in front of the payload.
    ///
    /// # Safety
    /// The object must be allocated (alive) in a heap.
    #[inline]
    pub(crate) unsafe fn header<'a>(self) -> &'a AtomicUsize {
        // SAFETY: the caller guarantees a live object, whose header word is the aligned
        // word just before the payload and lives as long as the object.
        unsafe { &*((self.addr() - HEADER_SIZE) as *const AtomicUsize) }
    }

    /// The header word, loaded with `Relaxed` ordering.
    ///
    /// # Safety
    /// The object must be allocated (alive) in a heap.
    #[inline]
    pub(crate) unsafe fn header_bits(self) -> Header {
        // SAFETY: forwarded from the caller.
        Header(unsafe { self.header() }.load(Ordering::Relaxed))
    }

    /// The type object's address in the header of a live object (Julia's
    /// `jl_typeof`), or null for a free or never-used pool cell, whose header holds a
    /// free-list link or 0, never a type.
    ///
    /// # Safety
    /// The object is allocated (alive) in a heap, or is a cell of a pool page.
    #[inline]
    pub unsafe fn type_ptr(self) -> *mut u8 {
        // SAFETY: forwarded from the caller.
        let h = unsafe { self.header_bits() };
        if h.is_free() {
            std::ptr::null_mut()
        } else {
            h.type_addr() as *mut u8
        }
    }

    /// Whether the object is young (not yet promoted to the old generation): what
    /// [`crate::Marker::queue`] returns for it, and what a foreign mark function counts.
    ///
    /// # Safety
    /// The object must be allocated (alive) in a heap.
    pub unsafe fn is_young(self) -> bool {
        // SAFETY: forwarded from the caller.
        (unsafe { self.header_bits() }).is_young()
    }

    /// Reads the pointer-sized slot at byte `offset` of the payload.
    ///
    /// # Safety
    /// The object must be alive and `offset..offset+8` inside its payload, 8-aligned.
    pub unsafe fn read_slot(self, offset: usize) -> usize {
        // SAFETY: forwarded from the caller; payloads are 16-aligned so an 8-aligned
        // offset gives an aligned word.
        unsafe { self.as_ptr().add(offset).cast::<usize>().read() }
    }

    /// Writes the pointer-sized slot at byte `offset` of the payload, without a write
    /// barrier (use [`crate::Mutator::store_ref`] for references).
    ///
    /// # Safety
    /// The object must be alive and `offset..offset+8` inside its payload, 8-aligned.
    pub unsafe fn write_slot(self, offset: usize, value: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { self.as_ptr().add(offset).cast::<usize>().write(value) }
    }
}

impl fmt::Debug for ObjRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjRef({:#x})", self.addr())
    }
}

/// A header word: an object's type pointer and GC bits, or a free cell's link (see the
/// module table). The one place that packs and unpacks header words: every reading of
/// the GC bits and every transition the collector or a barrier makes goes through a
/// method here. The word's layout is fixed (the C header's inline fast paths read it),
/// and `Header` is exactly that word (`repr(transparent)`); the atomic it lives in stays
/// an `AtomicUsize` ([`ObjRef::header`]), whose users load and store [`Header::raw`].
///
/// Two collection-wide values are bit sets of the same word and are passed along as
/// `usize`: an old-mark `parity` (0 or the mark bit: an old object is marked iff its
/// mark bit equals it; see [`Header::parity`]) and `young_marked` (the age and mark bits
/// of a young object marked in the current collection; see [`Header::young_marked`]).
#[derive(Copy, Clone, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct Header(usize);

impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Header({:#x})", self.0)
    }
}

impl Header {
    /// The header read from a header word.
    #[inline(always)]
    pub(crate) const fn from_raw(word: usize) -> Header {
        Header(word)
    }

    /// The word to store.
    #[inline(always)]
    pub(crate) const fn raw(self) -> usize {
        self.0
    }

    /// The header of a new young object of the type at `type_addr` (no GC bit set).
    #[inline(always)]
    pub(crate) fn new_young(type_addr: usize) -> Header {
        debug_assert!(type_addr & TAG_BITS == 0, "type pointers are 16-aligned");
        Header(type_addr)
    }

    /// The header of a new old object marked for `parity` (permanent objects).
    #[inline(always)]
    pub(crate) fn new_old(type_addr: usize, parity: usize) -> Header {
        debug_assert!(type_addr & TAG_BITS == 0, "type pointers are 16-aligned");
        Header(type_addr | OLD | parity)
    }

    /// The old-mark parity value: the mark bit if `set`, else 0.
    #[inline(always)]
    pub(crate) const fn parity(set: bool) -> usize {
        if set {
            MARK
        } else {
            0
        }
    }

    /// Whether old-mark `parity` (or the parity inside a `young_marked`) is the set one.
    #[inline(always)]
    pub(crate) const fn parity_is_set(parity: usize) -> bool {
        parity & MARK != 0
    }

    /// The other parity (what a collection switches to).
    #[inline(always)]
    pub(crate) const fn flip_parity(parity: usize) -> usize {
        parity ^ MARK
    }

    /// The bits of a young object marked in a collection with the young parity
    /// `young_parity`.
    #[inline(always)]
    pub(crate) const fn young_marked(young_parity: usize) -> usize {
        AGE | young_parity
    }

    /// Whether `parity` and `young_marked` are values of the kinds above.
    pub(crate) const fn valid_parities(parity: usize, young_marked: usize) -> bool {
        parity & !MARK == 0 && young_marked & !(AGE | MARK) == 0
    }

    /// The marker's old-mark test as `(mask, want)`: an old object counts as marked iff
    /// `header & mask == want` ([`Header::old_mark_is`]). In a full collection that is
    /// its mark bit equal to `parity`; in a partial one every old object counts as
    /// marked.
    #[inline]
    pub(crate) const fn old_mark_test(full: bool, parity: usize) -> (usize, usize) {
        if full {
            (MARK, parity)
        } else {
            (0, 0)
        }
    }

    /// Whether the word describes an allocated object (as opposed to a free or
    /// never-used pool cell).
    #[inline(always)]
    pub(crate) const fn is_allocated(self) -> bool {
        self.0 != 0 && self.0 & FREE == 0
    }

    /// Whether the word is a free cell's link (or the free-list end).
    #[inline(always)]
    pub(crate) const fn is_free(self) -> bool {
        self.0 & FREE != 0
    }

    /// The type object's address (of an allocated object).
    #[inline(always)]
    pub(crate) const fn type_addr(self) -> usize {
        self.0 & !TAG_BITS
    }

    /// Whether the object has been promoted to the old generation.
    #[inline(always)]
    pub(crate) const fn is_old(self) -> bool {
        self.0 & OLD != 0
    }

    /// Whether the object is young (not promoted).
    #[inline(always)]
    pub(crate) const fn is_young(self) -> bool {
        self.0 & OLD == 0
    }

    /// Whether the remembered bit is set (an old object in the remembered set).
    #[inline(always)]
    pub(crate) const fn is_remembered(self) -> bool {
        self.0 & REMEMBERED != 0
    }

    /// Old and not remembered: the write barrier's test on the parent, and what the
    /// marker checks before adding an object to the next remembered set.
    #[inline(always)]
    pub(crate) const fn is_old_unremembered(self) -> bool {
        self.0 & (OLD | REMEMBERED) == OLD
    }

    /// Old and remembered.
    #[inline(always)]
    pub(crate) const fn is_old_remembered(self) -> bool {
        self.0 & (OLD | REMEMBERED) == OLD | REMEMBERED
    }

    /// A young object's age bit: it was marked by some collection.
    #[inline(always)]
    pub(crate) const fn has_age(self) -> bool {
        self.0 & AGE != 0
    }

    /// A young object is marked in the current collection (`young_marked` as above).
    #[inline(always)]
    pub(crate) const fn is_young_marked(self, young_marked: usize) -> bool {
        self.0 & (AGE | MARK) == young_marked
    }

    /// An old object's mark bit equals `parity`.
    #[inline(always)]
    pub(crate) const fn is_marked_old(self, parity: usize) -> bool {
        self.0 & MARK == parity
    }

    /// An old object passes the marker's old-mark test ([`Header::old_mark_test`]).
    #[inline(always)]
    pub(crate) const fn old_mark_is(self, mask: usize, want: usize) -> bool {
        self.0 & mask == want
    }

    /// Whether the allocated object was left unmarked by a collection (`full`, with the
    /// old-mark `parity` and `young_marked`): an old object dies only in a full
    /// collection, when its mark bit differs from the parity; a young one unless it has
    /// exactly `young_marked`. The rule of the sweep (`page.rs` `sweep_page`), of the
    /// weak phase and of lookups on pages waiting for their sweep (`pagetable.rs`).
    #[inline(always)]
    pub(crate) const fn is_dead(self, full: bool, parity: usize, young_marked: usize) -> bool {
        if self.is_old() {
            full && !self.is_marked_old(parity)
        } else {
            !self.is_young_marked(young_marked)
        }
    }

    /// With the remembered bit set.
    #[inline(always)]
    pub(crate) const fn with_remembered(self) -> Header {
        Header(self.0 | REMEMBERED)
    }

    /// With the remembered bit clear.
    #[inline(always)]
    pub(crate) const fn without_remembered(self) -> Header {
        Header(self.0 & !REMEMBERED)
    }

    /// An old object marked: its mark bit flipped (to the parity, when the old-mark
    /// test failed).
    #[inline(always)]
    pub(crate) const fn mark_flipped(self) -> Header {
        Header(self.0 ^ MARK)
    }

    /// A young object never marked before (age and mark bits clear) marked now.
    #[inline(always)]
    pub(crate) const fn first_marked(self, young_marked: usize) -> Header {
        Header(self.0 | young_marked)
    }

    /// A young object marked, whatever its age and mark bits were (keep-young mode).
    #[inline(always)]
    pub(crate) const fn marked_young(self, young_marked: usize) -> Header {
        Header((self.0 & !(AGE | MARK)) | young_marked)
    }

    /// A young object promoted: old, marked for `parity`.
    #[inline(always)]
    pub(crate) const fn promoted(self, parity: usize) -> Header {
        Header((self.0 & !(AGE | MARK)) | OLD | parity)
    }

    /// With `type_addr` put in the type pointer, which must be clear (bootstrap of the
    /// type of types, which is its own type).
    #[inline]
    pub(crate) fn with_type_addr(self, type_addr: usize) -> Header {
        debug_assert!(self.type_addr() == 0 && type_addr & TAG_BITS == 0);
        Header(self.0 | type_addr)
    }
}

/// The write barrier's test, in one place (the Rust API's barrier and the C layer's
/// `gc_wb`/`jl_gc_wb`): storing a reference to `child` into `parent` must put `parent`
/// in the remembered set when `parent` is old and not remembered yet and `child` is
/// young. Returns `parent`'s header then.
///
/// # Safety
/// Both objects are allocated (alive) in a heap.
#[inline(always)]
pub(crate) unsafe fn barrier_fires(parent: ObjRef, child: ObjRef) -> Option<Header> {
    // SAFETY: live objects (caller).
    let h = unsafe { parent.header_bits() };
    // SAFETY: as above.
    (h.is_old_unremembered() && unsafe { child.header_bits() }.is_young()).then_some(h)
}

/// The backward barrier's test (after storing possibly young references into
/// `parent` in bulk): `parent` is old and not remembered yet. Returns its header then.
///
/// # Safety
/// The object is allocated (alive) in a heap.
#[inline(always)]
pub(crate) unsafe fn back_barrier_fires(parent: ObjRef) -> Option<Header> {
    // SAFETY: live object (caller).
    let h = unsafe { parent.header_bits() };
    h.is_old_unremembered().then_some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TY: usize = 0x7f00_1230;

    /// The life of a header through the transitions, against the module table.
    #[test]
    fn header_transitions_follow_the_table() {
        let (p0, p1) = (Header::parity(false), Header::parity(true));
        assert_eq!(Header::flip_parity(p0), p1);
        assert!(Header::parity_is_set(p1) && !Header::parity_is_set(p0));
        let ym = Header::young_marked(p1);
        assert!(Header::valid_parities(p0, ym));

        let new = Header::new_young(TY);
        assert_eq!(new.raw(), TY);
        assert!(new.is_allocated() && !new.is_free() && new.is_young() && !new.has_age());
        assert!(new.is_dead(false, p0, ym) && new.is_dead(true, p0, ym));

        // Marked as new, it survives this collection and reads unmarked in the next one
        // (the young parity flips) without a write.
        let marked = new.first_marked(ym);
        assert_eq!(marked.type_addr(), TY);
        assert!(marked.is_young_marked(ym) && marked.has_age() && !marked.is_dead(false, p0, ym));
        let ym2 = Header::young_marked(Header::flip_parity(p1));
        assert!(!marked.is_young_marked(ym2) && marked.is_dead(false, p0, ym2));
        assert_eq!(marked.marked_young(ym2).raw(), TY | ym2);

        // Marked again: promoted, marked for the old parity.
        let old = marked.promoted(p1);
        assert_eq!(old.raw(), Header::new_old(TY, p1).raw());
        assert!(old.is_old() && old.is_marked_old(p1) && !old.is_remembered());
        assert!(!old.is_dead(true, p1, ym2) && old.is_dead(true, p0, ym2));
        assert!(
            !old.is_dead(false, p0, ym2),
            "old objects die only in full collections"
        );
        let (mask, want) = Header::old_mark_test(true, p0);
        assert!(!old.old_mark_is(mask, want) && old.mark_flipped().old_mark_is(mask, want));
        let (mask, want) = Header::old_mark_test(false, p0);
        assert!(old.old_mark_is(mask, want));

        // The barrier's states.
        assert!(old.is_old_unremembered() && !old.is_old_remembered());
        let rem = old.with_remembered();
        assert!(rem.is_remembered() && rem.is_old_remembered() && !rem.is_old_unremembered());
        assert_eq!(rem.without_remembered(), old);
        assert!(
            !marked.is_old_unremembered(),
            "young objects are never remembered"
        );

        // Free and never-used cells.
        assert!(!Header::from_raw(0).is_allocated());
        assert!(Header::from_raw(FREE_END).is_free() && !Header::from_raw(FREE_END).is_allocated());
        let link = Header::from_raw(0x7f00_1238);
        assert!(link.is_free() && !link.is_allocated());

        assert_eq!(
            Header::new_old(0, p1).with_type_addr(TY),
            Header::new_old(TY, p1)
        );
    }
}
