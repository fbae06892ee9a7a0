//! External ("big") objects: larger than `max_internal_obj_size()`, or of a type declared
//! `large`. Each has a 48-byte header in front of the usual header word, so its payload
//! is 16-aligned like a pool object's; it lives in a page run of its own when header and
//! payload take 3 to 16 pages (`bigrun.rs`), else in one allocation from the system
//! allocator.

use crate::bigrun;
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
    /// Pages of the object's page run (`bigrun.rs`); 0 when the system allocator's.
    run_pages: usize,
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
    let run = bigrun::pages_for(layout.size())
        .and_then(|pages| Some((pages, bigrun::take(pages, layout.size())?)));
    let p = match run {
        Some((_, base)) => base as *mut BigHeader,
        // SAFETY: the layout has non-zero size.
        None => (unsafe { std::alloc::alloc_zeroed(layout) }) as *mut BigHeader,
    };
    if p.is_null() {
        return None;
    }
    // SAFETY: p is a fresh allocation (or page run) large and aligned enough for a
    // BigHeader and the payload, zeroed.
    unsafe {
        (*p).size = size;
        (*p).run_pages = run.map_or(0, |(pages, _)| pages);
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

/// Frees a big object. Returns the bytes given back to the system allocator (0 for an
/// object in a page run).
///
/// # Safety
/// `obj` was returned by `alloc`, is dead, and is freed once.
pub(crate) unsafe fn free(obj: ObjRef) -> usize {
    let p = (obj.addr() - BIG_HEADER) as *mut BigHeader;
    // SAFETY: forwarded from the caller: the header is ours until the dealloc below.
    let (size, run_pages) = unsafe {
        debug_assert!(
            (*p).magic == BIG_MAGIC || (*p).magic == 0,
            "a big object's header"
        );
        // A stale ObjRef of the freed object must not pass `is_allocated_object` while
        // the memory still holds the old header (the allocator does not clear it).
        (*p).magic = 0;
        ((*p).size, (*p).run_pages)
    };
    if run_pages != 0 {
        // SAFETY: the object's page run, from `bigrun::take` with these pages; dead and
        // freed once (caller).
        unsafe { bigrun::give_back(p as usize, run_pages) };
        return 0;
    }
    let layout = BigHeader::layout(size).expect("layout was valid at allocation");
    // SAFETY: allocated by `alloc` with this layout.
    unsafe { std::alloc::dealloc((obj.addr() - BIG_HEADER) as *mut u8, layout) };
    layout.size()
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

/// Asks the system allocator to return to the OS the free memory inside its heap, not
/// only at its top (glibc's `malloc_trim(0)`, which releases the whole free pages of
/// every arena); nothing where there is no such call.
///
/// Why: big objects are the system allocator's, and a chunk it gets back stays resident
/// until it is reused or lies at the top of the heap. A full collection that frees many
/// big objects in the middle of the heap (GAP's testinstall: function bodies and large
/// lists of the files before) left them resident: at testinstall's peak, malloc's heap
/// held 258 MB where the live big objects needed about 160 MB.
pub(crate) fn trim_system_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` has no preconditions; it takes the arenas' locks itself.
    unsafe {
        libc::malloc_trim(0);
    }
}

pub(crate) use crate::bigrun::OS_PAGE;

/// Returns to the OS the whole pages at the end of `obj`'s payload that hold only zero
/// bytes (`MADV_DONTNEED`: they read as zero again, so the object's contents do not
/// change, and a later store just faults a page back in). Returns the bytes released.
///
/// Why: a client that shrinks a big object in place keeps its capacity here, and GAP
/// does so with every function body (`NewBag(T_BODY, 1024 * sizeof(Stat))`, 8 KB,
/// then `ResizeBag` to the size used: after GAP's start-up 17,848 such bodies held 149
/// MB, 134 MB of it zero tails, 62 MB of that in whole pages). GASMAN gives the tail back
/// at its next compaction; a collector that does not move objects can give back the
/// pages the tail covers, and only those whose contents are zero.
///
/// # Safety
/// `obj` is a live big object and nothing writes to it during the call (the world is
/// stopped).
pub(crate) unsafe fn release_zero_tail(obj: ObjRef) -> usize {
    // SAFETY: a live big object (caller).
    let h = unsafe { BigHeader::of(obj) };
    let start = obj.addr();
    let payload_end = start + h.size;
    // In a page run the bytes past the payload up to the run's end are nobody's, so the
    // last page goes too when the payload's part of it is zero.
    let end = match h.run_pages {
        0 => payload_end & !(OS_PAGE - 1),
        pages => start - BIG_HEADER + pages * OS_PAGE,
    };
    let first = (start + OS_PAGE - 1) & !(OS_PAGE - 1);
    if end <= first {
        return 0;
    }
    let mut cut = end;
    while cut > first {
        let page = cut - OS_PAGE;
        let upto = cut.min(payload_end);
        // SAFETY: `[page, upto)` lies inside the object's payload, which is readable
        // memory of ours (caller: live, and nothing writes to it meanwhile).
        let words = unsafe {
            std::slice::from_raw_parts(page as *const u64, upto.saturating_sub(page) / 8)
        };
        if words.iter().any(|&w| w != 0) {
            break;
        }
        cut = page;
    }
    if cut == end {
        return 0;
    }
    // In a page run the bytes past the payload are nobody's; the system allocator's own
    // data (chunk headers) lies outside the payload.
    // SAFETY: whole pages of ours whose payload bytes are all zero: after MADV_DONTNEED
    // they read as zero, which is what they hold.
    let r = unsafe { libc::madvise(cut as *mut libc::c_void, end - cut, libc::MADV_DONTNEED) };
    if r == 0 {
        end - cut
    } else {
        0
    }
}
