//! Thread-local allocation state: a [`Pool`] per size class (the page a thread
//! allocates from, its free list and bump range; the heap's permanent pool too) and the
//! rest of a mutator's thread-owned state ([`Local`]). The fast path that takes cells
//! from a pool is `mutator.rs`.
//!
//! Depends on `object`, `pagemeta` and `sizeclass`.

use crate::geom::Geom;
use crate::object::{prefetch, prefetch_l2, Header, ObjRef, FREE_END, HEADER_SIZE};
use crate::pagemeta::{PageMeta, ALLOC_WORDS};
use crate::sizeclass::{cells_per_page, FIRST_CELL, NUM_CLASSES};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Allocation state of one size class on one thread (and of the heap's permanent
/// pool): the page held, its free list (threaded through the cell headers) and, on a
/// fresh page, a bump range of zeroed cells. [`Pool::take`] and [`Pool::commit`] are the
/// one way a cell is taken, by the allocation fast and slow paths and the permanent
/// pool alike.
///
/// `repr(C)`: a thread's pools are also read and written, on that thread only, by the
/// compat header's inline `jl_gc_alloc_typed` (`gc_alloc_pool_t`, its layout checked
/// against this one by the header tests). `page` and `bits` change together
/// ([`Pool::hold`], [`Pool::release`]).
#[repr(C)]
pub(crate) struct Pool {
    pub(crate) free: usize,
    pub(crate) bump: usize,
    pub(crate) bump_end: usize,
    /// The first word of the held page's allocation bitmap (none without a page).
    bits: Option<&'static AtomicU64>,
    /// Cell size of the pool's class, header included, and the magic that turns a
    /// payload's offset into its cell index (`geom::Geom`); 0 in the permanent pool,
    /// whose class varies.
    cell: u32,
    magic: u32,
    page: Option<&'static PageMeta>,
}

impl Pool {
    /// An empty pool (no page) for cells of size class `class`, or, with `None`, the
    /// heap's permanent pool.
    pub(crate) fn empty(class: Option<usize>) -> Pool {
        let (cell, magic) = class.map_or((0, 0), |c| {
            let g = Geom::of_class(c);
            (g.cell() as u32, g.magic())
        });
        Pool {
            free: FREE_END,
            bump: 0,
            bump_end: 0,
            bits: None,
            cell,
            magic,
            page: None,
        }
    }

    /// The page held, if any.
    pub(crate) fn page(&self) -> Option<&'static PageMeta> {
        self.page
    }

    /// Holds `page` (granted with its free list and bump range) from now on.
    pub(crate) fn hold(&mut self, page: &'static PageMeta, free: usize, bump: usize, end: usize) {
        self.page = Some(page);
        self.bits = Some(page.alloc_bits());
        self.free = free;
        self.bump = bump;
        self.bump_end = end;
        if free != FREE_END {
            prefetch_free_cells(page);
        }
    }

    /// Lets go of the page held, if any, for the caller to give back (with `free`,
    /// `bump` and `bump_end` as they are).
    pub(crate) fn release(&mut self) -> Option<&'static PageMeta> {
        self.bits = None;
        self.page.take()
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

/// Asks for the cache line of every free cell's header of `page` (a page just held,
/// whose allocation bitmap the sweep rebuilt: a clear bit is a free cell), into the
/// second-level cache. The free list is a chain of dependent loads, each a miss on a
/// page swept long ago, and the prefetch of the next cell in [`Pool::take`] runs only
/// one allocation ahead; these requests run in parallel (GAP's `smallgroups`, 4.15.1:
/// allocation's share of GAP's thread a fifth lower, `docs/perf/gap-real.md` attempt
/// 30).
fn prefetch_free_cells(page: &'static PageMeta) {
    let Some((cell, class)) = page.cell_layout() else {
        return;
    };
    let bits = page.alloc_bits() as *const AtomicU64;
    let mut words = [0u64; ALLOC_WORDS];
    for (w, word) in words.iter_mut().enumerate() {
        // SAFETY: the page's bitmap has `ALLOC_WORDS` words.
        *word = unsafe { &*bits.add(w) }.load(Ordering::Relaxed);
    }
    let first = page.base() + FIRST_CELL;
    free_cell_lines(&words, cells_per_page(class), first, cell, prefetch_l2);
}

/// Calls `f` with the address of each 64-byte line that holds the header of a free cell
/// (a clear bit among the first `n` of `bits`) of a page whose cell `i` has its header
/// at `first + i * cell`: each line once, in address order.
fn free_cell_lines(bits: &[u64], n: usize, first: usize, cell: usize, mut f: impl FnMut(usize)) {
    let mut last = usize::MAX;
    for (w, &word) in bits.iter().enumerate().take(n.div_ceil(64)) {
        let mut free = !word;
        if (w + 1) * 64 > n {
            free &= (1u64 << (n - w * 64)) - 1;
        }
        while free != 0 {
            let i = w * 64 + free.trailing_zeros() as usize;
            free &= free - 1;
            let line = (first + i * cell) & !63;
            if line != last {
                f(line);
                last = line;
            }
        }
    }
}

/// A type a thread allocated recently, with the sizes its pool objects may have: the
/// allocation fast paths take these without reading the type (`gc_alloc_type_t`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CachedType {
    pub(crate) addr: usize,
    pub(crate) min_size: usize,
    /// Sizes `1..=max_small` go to the pools (0: none, for large and internal types).
    pub(crate) max_small: usize,
}

impl CachedType {
    /// An empty entry (no type has address 0).
    pub(crate) const NONE: CachedType = CachedType {
        addr: 0,
        min_size: 0,
        max_small: 0,
    };
}

/// Thread-owned allocation state. Touched by the owning thread, and by the collector
/// only while the owning thread is stopped.
///
/// `repr(C)`: the fields up to `pools` are what the compat header's inline
/// `jl_gc_alloc_typed` reads and writes on the owning thread (`gc_alloc_fast_t`, checked
/// by the header tests), when the thread's `TlsHead::alloc` points here.
#[repr(C)]
pub(crate) struct Local {
    /// Allocations left before the stress mode collects (`u64::MAX` when off); 0 inside
    /// a GC-safe region, so that the allocation fast paths (which need it above 1)
    /// leave every allocation to the slow path, which refuses it.
    pub(crate) countdown: u64,
    pub(crate) objects: u64,
    pub(crate) bytes: u64,
    /// The heap's collection-requested flag (the fast paths take the slow path, which
    /// parks, while it is set).
    pub(crate) gc_flag: *const AtomicU32,
    /// `sizeclass`'s table from 16-byte granules to size classes.
    pub(crate) class_of: *const u8,
    /// Types recently validated by the C ABI (types live as long as the heap).
    pub(crate) type_cache: [CachedType; 4],
    pub(crate) pools: [Pool; NUM_CLASSES],
    pub(crate) remset: Vec<ObjRef>,
    pub(crate) sweep_list: Vec<ObjRef>,
    /// Write barriers that fired, big objects and their bytes, since the last
    /// collection (statistics).
    pub(crate) barrier_fires: u64,
    pub(crate) big_objects: u64,
    pub(crate) big_bytes: u64,
    /// `countdown` when the thread entered its GC-safe region, restored when it leaves.
    pub(crate) countdown_before_safe: u64,
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

/// The layout the compat header's inline `jl_gc_alloc_typed` reads through
/// `TlsHead::alloc`: `(C struct, field, byte offset)` of `gc_alloc_fast_t` (this
/// module's [`Local`]), `gc_alloc_type_t` ([`CachedType`]) and `gc_alloc_pool_t`
/// ([`Pool`]), then `(C struct, "sizeof", size)` of the two array elements.
pub(crate) fn alloc_fast_layout() -> Vec<(&'static str, &'static str, usize)> {
    use std::mem::{offset_of, size_of};
    vec![
        ("gc_alloc_fast_t", "countdown", offset_of!(Local, countdown)),
        ("gc_alloc_fast_t", "objects", offset_of!(Local, objects)),
        ("gc_alloc_fast_t", "bytes", offset_of!(Local, bytes)),
        ("gc_alloc_fast_t", "gc_flag", offset_of!(Local, gc_flag)),
        ("gc_alloc_fast_t", "class_of", offset_of!(Local, class_of)),
        ("gc_alloc_fast_t", "types", offset_of!(Local, type_cache)),
        ("gc_alloc_fast_t", "pools", offset_of!(Local, pools)),
        ("gc_alloc_type_t", "ty", offset_of!(CachedType, addr)),
        (
            "gc_alloc_type_t",
            "min_size",
            offset_of!(CachedType, min_size),
        ),
        (
            "gc_alloc_type_t",
            "max_small",
            offset_of!(CachedType, max_small),
        ),
        ("gc_alloc_type_t", "sizeof", size_of::<CachedType>()),
        ("gc_alloc_pool_t", "free", offset_of!(Pool, free)),
        ("gc_alloc_pool_t", "bump", offset_of!(Pool, bump)),
        ("gc_alloc_pool_t", "bump_end", offset_of!(Pool, bump_end)),
        ("gc_alloc_pool_t", "bits", offset_of!(Pool, bits)),
        ("gc_alloc_pool_t", "cell", offset_of!(Pool, cell)),
        ("gc_alloc_pool_t", "magic", offset_of!(Pool, magic)),
        ("gc_alloc_pool_t", "page", offset_of!(Pool, page)),
        ("gc_alloc_pool_t", "sizeof", size_of::<Pool>()),
    ]
}

#[cfg(test)]
mod tests {
    use super::free_cell_lines;

    fn lines(bits: &[u64], n: usize, first: usize, cell: usize) -> Vec<usize> {
        let mut v = Vec::new();
        free_cell_lines(bits, n, first, cell, |l| v.push(l));
        v
    }

    /// The lines of the free cells' headers, each once, and nothing past the last cell.
    #[test]
    fn free_cell_lines_name_each_line_of_a_free_header_once() {
        // 16-byte cells from offset 8 of a page at 0x10000: cell i's header at
        // 0x10008 + 16 i; cells 0-3 share the first line with the page's first 8 bytes.
        let mut bits = [u64::MAX; 16];
        bits[0] = !0b1011; // cells 0, 1 and 3 free: one line
        bits[1] = !(1 << 2); // cell 66: header 0x10428, line 0x10400
        assert_eq!(lines(&bits, 1023, 0x10008, 16), vec![0x10000, 0x10400]);
        // All allocated: nothing.
        assert!(lines(&[u64::MAX; 16], 1023, 0x10008, 16).is_empty());
        // Bits past the last cell (n = 3) are not cells, whatever they say: cells 0 and
        // 1 allocated, cell 2 free (its header at 0x10008 + 2 * 2032 = 0x10fe8).
        assert_eq!(lines(&[0b011], 3, 0x10008, 2032), vec![0x10fc0]);
        // Large cells: one line per free cell, in address order.
        assert_eq!(lines(&[!0b101], 8, 0x10008, 2032), vec![0x10000, 0x10fc0]);
    }
}
