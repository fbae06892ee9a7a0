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

/// The whole pages at the end of big objects' payloads that hold only zero bytes, found
/// in one pause and returned to the OS together ([`ZeroTails::release`]): they read as
/// zero again after `MADV_DONTNEED`, so the objects' contents do not change, and a
/// later store just faults a page back in.
///
/// Why: a client that shrinks a big object in place keeps its capacity here, and GAP
/// does so with every function body (`NewBag(T_BODY, 1024 * sizeof(Stat))`, 8 KB,
/// then `ResizeBag` to the size used: after GAP's start-up 17,848 such bodies held 149
/// MB, 134 MB of it zero tails, 62 MB of that in whole pages). GASMAN gives the tail back
/// at its next compaction; a collector that does not move objects can give back the
/// pages the tail covers, and only those whose contents are zero.
///
/// Why together: one `madvise` per object cost GAP 4.15.1's start-up 9-11 ms of each
/// late partial collection's pause (5,500 objects of two tail pages each per
/// collection; each call also flushes the other core's TLB). `process_madvise` on the
/// calling process (`PIDFD_SELF`, Linux 6.13 and later) takes up to 1,024 ranges per
/// call and flushes once; older kernels refuse it and get one `madvise` per range.
#[derive(Default)]
pub(crate) struct ZeroTails {
    ranges: Vec<libc::iovec>,
}

/// `PIDFD_SELF` (`<linux/pidfd.h>`): the calling thread, here its process's memory.
const PIDFD_SELF: libc::c_int = -10000;
/// Ranges per `process_madvise` call (`UIO_MAXIOV`).
const RANGES_PER_CALL: usize = 1024;
/// Whether `process_madvise` on the calling process works here (cleared at its first
/// failure).
static VECTORED_MADVISE: AtomicBool = AtomicBool::new(true);

impl ZeroTails {
    /// Finds the zero pages at the end of `obj`'s payload (and, in a page run, up to the
    /// run's end), to be released by [`ZeroTails::release`].
    ///
    /// # Safety
    /// `obj` is a live big object, nothing writes to it until `release` returns (the
    /// world is stopped), and it is not freed before.
    pub(crate) unsafe fn add(&mut self, obj: ObjRef) {
        // SAFETY: a live big object (caller).
        let h = unsafe { BigHeader::of(obj) };
        let start = obj.addr();
        let payload_end = start + h.size;
        // In a page run the bytes past the payload up to the run's end are nobody's, so
        // the last page goes too when the payload's part of it is zero; the system
        // allocator's own data (chunk headers) lies outside the payload.
        let end = match h.run_pages {
            0 => payload_end & !(OS_PAGE - 1),
            pages => start - BIG_HEADER + pages * OS_PAGE,
        };
        let first = (start + OS_PAGE - 1) & !(OS_PAGE - 1);
        let mut cut = end;
        while cut > first {
            let page = cut - OS_PAGE;
            let upto = cut.min(payload_end);
            // SAFETY: `[page, upto)` lies inside the object's payload, which is readable
            // memory of ours (caller: live, and nothing writes to it meanwhile).
            let words = unsafe {
                std::slice::from_raw_parts(page as *const u64, upto.saturating_sub(page) / 8)
            };
            if !all_zero(words) {
                break;
            }
            cut = page;
        }
        if cut < end {
            self.ranges.push(libc::iovec {
                iov_base: cut as *mut libc::c_void,
                iov_len: end - cut,
            });
        }
    }

    /// Gives the pages found back to the OS. Returns the bytes released.
    ///
    /// # Safety
    /// Every object passed to [`ZeroTails::add`] is still live and unchanged since.
    pub(crate) unsafe fn release(self) -> usize {
        // SAFETY: forwarded: the ranges are zero pages of live objects nobody writes.
        unsafe { give_back(&self.ranges, &VECTORED_MADVISE) }
    }
}

/// `MADV_DONTNEED` over `ranges`, with `process_madvise` while `vectored` holds (cleared
/// at its first failure), else one `madvise` each. Returns the bytes given back.
///
/// # Safety
/// The ranges are whole pages of ours whose bytes are all zero and stay so (nothing
/// writes to them) until this returns.
unsafe fn give_back(ranges: &[libc::iovec], vectored: &AtomicBool) -> usize {
    let mut released = 0;
    for batch in ranges.chunks(RANGES_PER_CALL) {
        let total: usize = batch.iter().map(|r| r.iov_len).sum();
        if vectored.load(Ordering::Relaxed) {
            // SAFETY: as the caller promises, after MADV_DONTNEED the pages read as zero,
            // which is what they hold. The iovec array is valid for `batch.len()`
            // entries.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_process_madvise,
                    PIDFD_SELF,
                    batch.as_ptr(),
                    batch.len(),
                    libc::MADV_DONTNEED,
                    0u32,
                )
            };
            if r >= 0 && r as usize == total {
                released += total;
                continue;
            }
            if r < 0 {
                vectored.store(false, Ordering::Relaxed);
            }
            // Refused or stopped short: each range on its own (advising a range again
            // is harmless: it is zero and nothing writes to it).
        }
        for r in batch {
            // SAFETY: as above, one range.
            if unsafe { libc::madvise(r.iov_base, r.iov_len, libc::MADV_DONTNEED) } == 0 {
                released += r.iov_len;
            }
        }
    }
    released
}

/// Whether every word is zero, 64 bytes at a time (a loop the compiler vectorizes).
fn all_zero(words: &[u64]) -> bool {
    let chunks = words.chunks_exact(8);
    let rest = chunks.remainder().iter().fold(0, |a, &w| a | w);
    rest == 0
        && chunks
            .into_iter()
            .all(|c| c.iter().fold(0, |a, &w| a | w) == 0)
}

#[cfg(test)]
mod tests {
    use super::{all_zero, give_back, OS_PAGE};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Which pages of `[addr, addr + pages * OS_PAGE)` are resident.
    fn resident(addr: usize, pages: usize) -> Vec<bool> {
        let mut v = vec![0u8; pages];
        // SAFETY: the range is mapped; mincore writes one byte per page into `v`.
        let r =
            unsafe { libc::mincore(addr as *mut libc::c_void, pages * OS_PAGE, v.as_mut_ptr()) };
        assert_eq!(r, 0);
        v.iter().map(|b| b & 1 == 1).collect()
    }

    /// Both ways of giving pages back (one call for many ranges, or one call each, as
    /// on kernels without `process_madvise` for the calling process) release exactly
    /// the ranges given, in batches of at most 1,024.
    #[test]
    fn zero_ranges_go_back_in_one_call_or_one_each() {
        for vectored in [true, false] {
            let pages = 2 * 1100;
            let base = crate::pagetable::map_anonymous(pages * OS_PAGE).unwrap() as usize;
            // SAFETY: our fresh mapping; every page resident afterwards.
            unsafe { std::ptr::write_bytes(base as *mut u8, 0, pages * OS_PAGE) };
            // Every second page, 1,100 ranges of one page.
            let ranges: Vec<libc::iovec> = (0..pages / 2)
                .map(|i| libc::iovec {
                    iov_base: (base + (2 * i + 1) * OS_PAGE) as *mut libc::c_void,
                    iov_len: OS_PAGE,
                })
                .collect();
            let flag = AtomicBool::new(vectored);
            // SAFETY: zero pages of our own mapping, which nothing else touches.
            let released = unsafe { give_back(&ranges, &flag) };
            assert_eq!(released, pages / 2 * OS_PAGE, "vectored {vectored}");
            let r = resident(base, pages);
            assert!(r.iter().step_by(2).all(|&x| x), "vectored {vectored}");
            assert!(
                r.iter().skip(1).step_by(2).all(|&x| !x),
                "vectored {vectored}"
            );
            if !vectored {
                assert!(!flag.load(Ordering::Relaxed));
            }
            // SAFETY: our mapping, unmapped once.
            unsafe { libc::munmap(base as *mut libc::c_void, pages * OS_PAGE) };
        }
    }

    #[test]
    fn all_zero_finds_a_set_word_anywhere() {
        for len in [0, 1, 7, 8, 9, 63, 64, 65, 512] {
            let mut words = vec![0u64; len];
            assert!(all_zero(&words), "{len} zero words");
            for at in 0..len {
                words[at] = 1 << (at % 64);
                assert!(!all_zero(&words), "word {at} of {len}");
                words[at] = 0;
            }
        }
    }
}
