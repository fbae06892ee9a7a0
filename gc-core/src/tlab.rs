//! Thread-local allocation state: a [`Pool`] per size class (the page a thread
//! allocates from, its free list and bump range; the heap's permanent pool too) and the
//! rest of a mutator's thread-owned state ([`Local`]). The fast path that takes cells
//! from a pool is `mutator.rs`.
//!
//! Depends on `object`, `pagemeta` and `sizeclass`.

use crate::object::{prefetch, Header, ObjRef, FREE_END, HEADER_SIZE};
use crate::pagemeta::PageMeta;
use crate::sizeclass::NUM_CLASSES;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Allocation state of one size class on one thread (and of the heap's permanent
/// pool): the page held, its free list (threaded through the cell headers) and, on a
/// fresh page, a bump range of zeroed cells. [`Pool::take`] and [`Pool::commit`] are the
/// one way a cell is taken, by the allocation fast and slow paths and the permanent
/// pool alike.
pub(crate) struct Pool {
    pub(crate) free: usize,
    pub(crate) bump: usize,
    pub(crate) bump_end: usize,
    pub(crate) page: Option<&'static PageMeta>,
}

impl Pool {
    /// An empty pool (no page).
    pub(crate) const fn empty() -> Pool {
        Pool {
            free: FREE_END,
            bump: 0,
            bump_end: 0,
            page: None,
        }
    }

    /// Takes a cell of `cell_size` bytes (the pool's class): the head of the free list,
    /// its payload zeroed, or else the next cell of the bump range (zero already).
    /// Returns the cell's header address; `None` when both are exhausted, or, with
    /// `INLINE`, when a free-list cell is larger than the fast path zeroes itself (with
    /// word stores, no call: `INLINE_ZERO_MAX`), which the slow path then takes.
    ///
    /// # Safety
    /// The pool is the caller's (its owning thread's, or the permanent pool under the
    /// heap's `gc` lock) and `cell_size` is the cell size of its page's class.
    #[inline(always)]
    pub(crate) unsafe fn take<const INLINE: bool>(&mut self, cell_size: usize) -> Option<usize> {
        let cell = self.free;
        if cell != FREE_END {
            if INLINE && cell_size > INLINE_ZERO_MAX {
                // Zeroed by memset on the slow path (a call here would cost every
                // allocation a stack frame).
                return None;
            }
            // SAFETY: `cell` is a free cell of a page this pool holds (caller): its
            // header holds the next link and its payload is ours to zero.
            unsafe {
                let next = (*(cell as *const AtomicUsize)).load(Ordering::Relaxed);
                self.free = next;
                // The next allocation's cell: its line arrives while the caller
                // initialises this object, rather than as a miss at the next call.
                prefetch(next);
                if INLINE {
                    zero_words_inline(cell + HEADER_SIZE, cell_size - HEADER_SIZE);
                } else {
                    zero_words(cell + HEADER_SIZE, cell_size - HEADER_SIZE);
                }
            }
            Some(cell)
        } else if self.bump < self.bump_end {
            let c = self.bump;
            self.bump = c + cell_size;
            Some(c)
        } else {
            None
        }
    }

    /// Makes the cell `take` returned (header at `cell`, size class `class`) an object
    /// with header word `tag`: stores the header and sets the cell's allocation bit.
    /// Returns the object.
    ///
    /// # Safety
    /// `cell` was just taken from this pool.
    #[inline(always)]
    pub(crate) unsafe fn commit(&self, cell: usize, header: Header, class: usize) -> ObjRef {
        // SAFETY: the header word of the cell the caller just took.
        unsafe { (*(cell as *const AtomicUsize)).store(header.raw(), Ordering::Release) };
        // SAFETY: a pool that hands out cells holds their page.
        unsafe { self.page.unwrap_unchecked() }.set_allocated(cell + HEADER_SIZE, class);
        // SAFETY: a cell address is not null.
        unsafe { ObjRef::from_addr(cell + HEADER_SIZE).unwrap_unchecked() }
    }
}

/// Thread-owned allocation state. Touched by the owning thread, and by the collector
/// only while the owning thread is stopped.
pub(crate) struct Local {
    pub(crate) pools: [Pool; NUM_CLASSES],
    pub(crate) remset: Vec<ObjRef>,
    pub(crate) sweep_list: Vec<ObjRef>,
    pub(crate) objects: u64,
    pub(crate) bytes: u64,
    /// Write barriers that fired, big objects and their bytes, since the last
    /// collection (statistics).
    pub(crate) barrier_fires: u64,
    pub(crate) big_objects: u64,
    pub(crate) big_bytes: u64,
    /// Allocations left before the stress mode collects (`u64::MAX` when off); 0 inside
    /// a GC-safe region, so that the allocation fast path (which needs it above 1)
    /// leaves every allocation to the slow path, which refuses it.
    pub(crate) countdown: u64,
    /// `countdown` when the thread entered its GC-safe region, restored when it leaves.
    pub(crate) countdown_before_safe: u64,
    /// Types recently validated by the C ABI (types live as long as the heap).
    pub(crate) type_cache: [usize; 4],
    /// Weak-reference objects made (or re-pointed to a young referent) since the last
    /// collection.
    pub(crate) weak_objs: Vec<ObjRef>,
    /// `weak_objs` may repeat objects already listed by the heap.
    pub(crate) weak_dirty: bool,
    /// Run pending finalizers at safepoints (see `Mutator::set_finalizers_at_safepoints`).
    pub(crate) fin_at_safepoints: bool,
}

/// Largest cell (header included) whose payload the allocation fast path zeroes
/// itself, with word stores.
const INLINE_ZERO_MAX: usize = 256;

/// Zeroes `bytes` (a multiple of 8, at most `INLINE_ZERO_MAX`) at `addr` with word
/// stores, not a call to memset: the stores are volatile so that the compiler does not
/// turn the loop back into that call.
///
/// # Safety
/// `[addr, addr + bytes)` is writable memory of the caller's.
#[inline(always)]
unsafe fn zero_words_inline(addr: usize, bytes: usize) {
    let mut p = addr as *mut u64;
    let end = (addr + bytes) as *mut u64;
    while p < end {
        // SAFETY: within the range the caller gave.
        unsafe {
            p.write_volatile(0);
            p = p.add(1);
        }
    }
}

/// Zeroes `bytes` (a multiple of 8) at `addr`.
///
/// # Safety
/// The range is writable and 8-aligned.
#[inline(always)]
unsafe fn zero_words(addr: usize, bytes: usize) {
    // SAFETY: forwarded.
    unsafe { std::ptr::write_bytes(addr as *mut u64, 0, bytes / 8) };
}
