//! External ("big") objects: larger than `max_internal_obj_size()`, or of a type declared
//! `large`. Each is one allocation from the system allocator with a 48-byte header in
//! front of the usual header word, so its payload is 16-aligned like a pool object's.

use crate::heap::HeapId;
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

const BIG_MAGIC: usize = 0x000B_160B_1EC7;
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

/// Whether `addr` is an allocated object of heap `heap_id`: the start of an allocated
/// cell of one of its pool pages, or, outside every pool page, a big object (its
/// bookkeeping header's magic and an allocated header word, read through the kernel so
/// that unmapped memory in front of `addr` is an answer, not a fault). For entry points
/// that take an object from C, where a malloc'd, static or interior pointer would
/// otherwise corrupt memory, and for the Rust API's safe functions that take an
/// `ObjRef` (any address can be one).
pub(crate) fn is_allocated_object(heap_id: HeapId, addr: usize) -> bool {
    if addr % crate::object::OBJ_ALIGN != 0 || addr < BIG_HEADER {
        return false;
    }
    if crate::pagetable::lookup(addr).is_some() {
        // A pool page (of this heap, another or none) holds no big object.
        return crate::pagetable::is_internal_object(heap_id, addr);
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
    magic == BIG_MAGIC && heap == heap_id.word() && crate::object::header_is_allocated(tag)
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

/// Frees a big object.
///
/// # Safety
/// `obj` was returned by `alloc`, is dead, and is freed once.
pub(crate) unsafe fn free(obj: ObjRef) {
    let p = (obj.addr() - BIG_HEADER) as *mut BigHeader;
    // SAFETY: forwarded from the caller: the header is ours until the dealloc below.
    let size = unsafe {
        debug_assert_eq!((*p).magic, BIG_MAGIC);
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
    match crate::pagetable::lookup(obj.addr()).and_then(|p| p.cell_layout()) {
        Some((cell, _)) => cell - HEADER_SIZE,
        // SAFETY: a live object outside the pools is a big object.
        None => unsafe { size(obj) },
    }
}

const _: () = assert!(HEADER_SIZE == 8);
