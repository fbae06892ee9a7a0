//! External ("big") objects: larger than `max_internal_obj_size()`, or of a type declared
//! `large`. Each is one allocation from the system allocator with a 48-byte header in
//! front of the usual header word, so its payload is 16-aligned like a pool object's.

use crate::heap_id::HeapId;
use crate::object::{ObjRef, HEADER_SIZE};
use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Bookkeeping in front of a big object. Its last field is the object's header word.
#[repr(C, align(16))]
pub(crate) struct BigHeader {
    /// Payload size as requested, rounded up to 16.
    pub size: usize,
    /// Sweep function scheduled.
    pub sched: AtomicBool,
    _pad: [u8; 7],
    pub magic: usize,
    /// The id of the heap that allocated it.
    pub heap_id: usize,
    _pad2: usize,
    /// The object's header word (type pointer + GC bits).
    pub tag: AtomicUsize,
}

pub(crate) const BIG_MAGIC: usize = 0x000B_160B_1EC7;
/// Bytes in front of the payload.
pub(crate) const BIG_HEADER: usize = std::mem::size_of::<BigHeader>();
const _: () = assert!(BIG_HEADER % 16 == 0 && BIG_HEADER == 48);
const _: () = assert!(
    std::mem::offset_of!(BigHeader, magic) == 16
        && std::mem::offset_of!(BigHeader, heap_id) == 24
        && std::mem::offset_of!(BigHeader, tag) == 40
);

impl BigHeader {
    /// The header of the big object `obj`.
    ///
    /// # Safety
    /// `obj` is a live big object.
    pub(crate) unsafe fn of<'a>(obj: ObjRef) -> &'a BigHeader {
        // SAFETY: forwarded; the payload directly follows the BigHeader.
        unsafe { &*((obj.addr() - BIG_HEADER) as *const BigHeader) }
    }

    fn layout(size: usize) -> Option<Layout> {
        Layout::from_size_align(BIG_HEADER.checked_add(size)?, 16).ok()
    }
}

/// Allocates a zeroed big object of `size` payload bytes with header word `tag`.
pub(crate) fn alloc(size: usize, tag: usize, heap_id: HeapId) -> Option<ObjRef> {
    let size = size.checked_add(15)? & !15;
    let layout = BigHeader::layout(size)?;
    // SAFETY: the layout has non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut BigHeader;
    if p.is_null() {
        return None;
    }
    // SAFETY: p is a fresh allocation large and aligned enough for a BigHeader.
    unsafe {
        (*p).size = size;
        (*p).magic = BIG_MAGIC;
        (*p).heap_id = heap_id.word();
        (*p).tag.store(tag, Ordering::Release);
    }
    ObjRef::from_addr(p as usize + BIG_HEADER)
}

/// Makes a dead big object no object for any lookup ([`crate::is_object`]) before it
/// is freed: the external-free listeners are told about it in between, and one that
/// tried to take it back (`Heap::root`) must be refused.
///
/// # Safety
/// `obj` was returned by `alloc`, is dead and not freed yet.
pub(crate) unsafe fn retire(obj: ObjRef) {
    let p = (obj.addr() - BIG_HEADER) as *mut BigHeader;
    // SAFETY: forwarded from the caller: the header is still ours.
    unsafe { (*p).magic = 0 };
}

/// Frees a big object.
///
/// # Safety
/// `obj` was returned by `alloc`, is dead, and is freed once.
pub(crate) unsafe fn free(obj: ObjRef) {
    let p = (obj.addr() - BIG_HEADER) as *mut BigHeader;
    // SAFETY: forwarded from the caller: the header is ours until the dealloc below.
    let size = unsafe {
        debug_assert!(
            (*p).magic == BIG_MAGIC || (*p).magic == 0,
            "a big object's header"
        );
        // A stale ObjRef of the freed object must not pass `is_allocated_object` while
        // the memory still holds the old header (the allocator does not clear it).
        (*p).magic = 0;
        (*p).size
    };
    let layout = BigHeader::layout(size).expect("layout was valid at allocation");
    // SAFETY: allocated by `alloc` with this layout.
    unsafe { std::alloc::dealloc((obj.addr() - BIG_HEADER) as *mut u8, layout) };
}

/// Payload size (rounded up to 16) of a live big object.
///
/// # Safety
/// `obj` is a live big object.
pub(crate) unsafe fn size(obj: ObjRef) -> usize {
    // SAFETY: forwarded.
    unsafe { BigHeader::of(obj) }.size
}

/// Bytes available in the payload of a live object: its cell size minus the header for
/// pool objects, the (16-rounded) requested size for big objects.
///
/// # Safety
/// `obj` is a live object of some heap.
pub(crate) unsafe fn object_capacity(obj: ObjRef) -> usize {
    match crate::pagetable::entry(obj.addr())
        .and_then(|e| e.meta())
        .and_then(|p| p.cell_layout())
    {
        Some((cell, _)) => cell - HEADER_SIZE,
        // SAFETY: a live object outside the pools is a big object.
        None => unsafe { size(obj) },
    }
}

const _: () = assert!(HEADER_SIZE == 8);
