//! Object references and the header word.
//!
//! Every object is preceded by one header word holding its type pointer and GC bits;
//! an [`ObjRef`] points just past the header, at the payload (Julia's `jl_value_t*`).
//! Payloads are 16-byte aligned, so the header word sits at an address that is 8 mod 16
//! and type pointers (which point at payloads of type objects) have their low four bits
//! clear. Those four bits hold the GC state:
//!
//! | bit | name | meaning |
//! |---|---|---|
//! | 0 | `MARK` | old: marked iff it equals the heap's old-mark parity (flips at every full collection); young: see `AGE` |
//! | 1 | `OLD` | the object has been promoted to the old generation |
//! | 2 | `REMEMBERED` / `AGE` | old object: in the remembered set (the write barrier fired for it); young object: marked by some collection (survived it, or is surviving the current one) |
//! | 3 | `FREE` | never set in a live header: a free pool cell's header holds a free-list link, which is the address of another cell's header and therefore 8 mod 16, or the end marker [`FREE_END`] |
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

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Mark bit (see the module table).
pub const MARK: usize = 1;
/// Old-generation bit.
pub const OLD: usize = 2;
/// Remembered-set bit (old objects).
pub const REMEMBERED: usize = 4;
/// Survived-a-collection bit (young objects; same bit as `REMEMBERED`).
pub const AGE: usize = 4;
/// Free-cell bit: set in every free cell's header, never in an object's.
pub const FREE: usize = 8;
/// All bits that are not part of the type pointer.
pub const TAG_BITS: usize = 15;
/// Free-list end marker stored in the header of the last free cell of a list.
pub const FREE_END: usize = FREE;
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

    /// The raw header word.
    ///
    /// # Safety
    /// The object must be allocated (alive) in a heap.
    #[inline]
    pub(crate) unsafe fn header_bits(self) -> usize {
        // SAFETY: forwarded from the caller.
        unsafe { self.header() }.load(Ordering::Relaxed)
    }

    /// Whether the object is young (not yet promoted to the old generation): what
    /// [`crate::Marker::queue`] returns for it, and what a foreign mark function counts.
    ///
    /// # Safety
    /// The object must be allocated (alive) in a heap.
    pub unsafe fn is_young(self) -> bool {
        // SAFETY: forwarded from the caller.
        (unsafe { self.header_bits() }) & OLD == 0
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

/// Whether a header word describes an allocated object (as opposed to a free or
/// never-used pool cell).
#[inline]
pub fn header_is_allocated(h: usize) -> bool {
    h != 0 && h & FREE == 0
}

/// The type object's address in header word `h` (of an allocated object).
#[inline(always)]
pub(crate) fn type_addr(h: usize) -> usize {
    h & !TAG_BITS
}

/// The write barrier's test, in one place (the Rust API's barrier and the C layer's
/// `gc_wb`/`jl_gc_wb`): storing a reference to `child` into `parent` must put `parent`
/// in the remembered set when `parent` is old and not remembered yet and `child` is
/// young. Returns `parent`'s header word then.
///
/// # Safety
/// Both objects are allocated (alive) in a heap.
#[inline(always)]
pub(crate) unsafe fn barrier_fires(parent: ObjRef, child: ObjRef) -> Option<usize> {
    // SAFETY: live objects (caller).
    let h = unsafe { parent.header_bits() };
    // SAFETY: as above.
    (h & (OLD | REMEMBERED) == OLD && unsafe { child.header_bits() } & OLD == 0).then_some(h)
}

/// The backward barrier's test (after storing possibly young references into
/// `parent` in bulk): `parent` is old and not remembered yet. Returns its header word
/// then.
///
/// # Safety
/// The object is allocated (alive) in a heap.
#[inline(always)]
pub(crate) unsafe fn back_barrier_fires(parent: ObjRef) -> Option<usize> {
    // SAFETY: live object (caller).
    let h = unsafe { parent.header_bits() };
    (h & (OLD | REMEMBERED) == OLD).then_some(h)
}

/// Whether the allocated object with header word `h` was left unmarked by a collection
/// (`full`, with the old-mark `parity` and `young_marked`, the `AGE | MARK` bits of a
/// marked young object): an old object dies only in a full collection, when its mark bit
/// differs from the parity; a young one unless it has exactly `young_marked`. The rule of
/// the sweep (`page.rs` `sweep_page`), of the weak phase and of lookups on pages waiting
/// for their sweep (`pagetable.rs`).
#[inline]
pub(crate) fn is_dead(h: usize, full: bool, parity: usize, young_marked: usize) -> bool {
    if h & OLD != 0 {
        full && h & MARK != parity
    } else {
        h & (AGE | MARK) != young_marked
    }
}
