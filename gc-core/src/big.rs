//! External ("big") objects: larger than `max_internal_obj_size()`, or of a type declared
//! `large`. Each is one allocation from the system allocator with a 48-byte header in
//! front of the usual header word, so its payload is 16-aligned like a pool object's.

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
    _pad2: [usize; 2],
    /// The object's header word (type pointer + GC bits).
    pub tag: AtomicUsize,
}

const BIG_MAGIC: usize = 0x000B_160B_1EC7;
/// Bytes in front of the payload.
pub(crate) const BIG_HEADER: usize = std::mem::size_of::<BigHeader>();
const _: () = assert!(BIG_HEADER % 16 == 0 && BIG_HEADER == 48);

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

/// Whether `addr` is an allocated object of heap `heap_id`: the start of an allocated
/// cell of one of its pool pages, or, outside every pool page, a big object (its
/// bookkeeping header's magic and an allocated header word; the memory in front of
/// `addr` is read only if it is mapped). For entry points that take an object from C,
/// where a malloc'd, static or interior pointer would otherwise corrupt memory. A big
/// object of another heap passes: big objects do not record their heap.
pub(crate) fn is_allocated_object(heap_id: usize, addr: usize) -> bool {
    if addr % crate::object::OBJ_ALIGN != 0 || addr < BIG_HEADER {
        return false;
    }
    if let Some(page) = crate::pagetable::lookup(addr) {
        return match page.cell_layout() {
            Some((cell, class)) if page.owner() == heap_id => {
                page.cell_index(addr, cell, class)
                    .is_some_and(|i| page.object_at(i, cell) == addr)
                    && page.is_allocated(addr)
            }
            _ => false,
        };
    }
    if !mapped(addr - BIG_HEADER, BIG_HEADER) {
        return false;
    }
    // SAFETY: the BIG_HEADER bytes in front of addr are mapped (checked above) and
    // readable (anonymous or file memory a program hands as an object is); the fields
    // are plain words.
    let (magic, tag) = unsafe {
        let h = (addr - BIG_HEADER) as *const BigHeader;
        (
            std::ptr::addr_of!((*h).magic).read_volatile(),
            (*h).tag.load(Ordering::Relaxed),
        )
    };
    magic == BIG_MAGIC && crate::object::header_is_allocated(tag)
}

/// Whether every page of `[addr, addr + len)` is mapped (`mincore` fails with ENOMEM on
/// an unmapped page).
fn mapped(addr: usize, len: usize) -> bool {
    const PAGE: usize = 4096;
    let lo = addr & !(PAGE - 1);
    let hi = (addr + len).div_ceil(PAGE) * PAGE;
    let mut vec = [0u8; 2];
    // SAFETY: mincore writes one byte per page of the range into `vec`; the range
    // spans at most two pages (len <= PAGE).
    unsafe { libc::mincore(lo as *mut libc::c_void, hi - lo, vec.as_mut_ptr()) == 0 }
}

/// Allocates a zeroed big object of `size` payload bytes with header word `tag`.
pub(crate) fn alloc(size: usize, tag: usize) -> Option<ObjRef> {
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
        (*p).tag.store(tag, Ordering::Release);
    }
    ObjRef::from_addr(p as usize + BIG_HEADER)
}

/// Frees a big object.
///
/// # Safety
/// `obj` was returned by `alloc`, is dead, and is freed once.
pub(crate) unsafe fn free(obj: ObjRef) {
    // SAFETY: forwarded from the caller.
    let h = unsafe { BigHeader::of(obj) };
    debug_assert_eq!(h.magic, BIG_MAGIC);
    let layout = BigHeader::layout(h.size).expect("layout was valid at allocation");
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
    match crate::pagetable::lookup(obj.addr()).and_then(|p| p.cell_layout()) {
        Some((cell, _)) => cell - HEADER_SIZE,
        // SAFETY: a live object outside the pools is a big object.
        None => unsafe { size(obj) },
    }
}

const _: () = assert!(HEADER_SIZE == 8);
