//! Counted native memory: every block that `PyMem_Malloc`, `PyObject_Malloc` and the
//! object allocators hand out is preceded by a 16-byte header holding its size and the
//! account it was charged to, so frees are credited exactly (GraalPy prepends the size
//! for the same reason). Accounts are per bridge (the bridge entered on the thread at
//! allocation time), or the process-wide [`GLOBAL`] account when none is entered.
//!
//! The pressure policy (trigger, growth, hard cap, retries) is the bridge's; this module
//! only counts.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes and blocks charged to one account.
#[derive(Debug, Default)]
pub struct MemAccount {
    bytes: AtomicUsize,
    peak: AtomicUsize,
    blocks: AtomicUsize,
    allocs: AtomicU64,
}

impl MemAccount {
    /// An empty account.
    pub const fn new() -> Self {
        MemAccount {
            bytes: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            blocks: AtomicUsize::new(0),
            allocs: AtomicU64::new(0),
        }
    }

    /// Bytes in use (payloads, headers excluded).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The most bytes ever in use at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Blocks in use.
    pub fn blocks(&self) -> usize {
        self.blocks.load(Ordering::Relaxed)
    }

    /// Blocks ever allocated.
    pub fn allocations(&self) -> u64 {
        self.allocs.load(Ordering::Relaxed)
    }

    /// Resets the peak to the current use.
    pub fn reset_peak(&self) {
        self.peak.store(self.bytes(), Ordering::Relaxed);
    }

    fn charge(&self, size: usize) {
        let now = self.bytes.fetch_add(size, Ordering::Relaxed) + size;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.blocks.fetch_add(1, Ordering::Relaxed);
        self.allocs.fetch_add(1, Ordering::Relaxed);
    }

    fn resize(&self, old: usize, new: usize) {
        if new >= old {
            let now = self.bytes.fetch_add(new - old, Ordering::Relaxed) + (new - old);
            self.peak.fetch_max(now, Ordering::Relaxed);
        } else {
            self.bytes.fetch_sub(old - new, Ordering::Relaxed);
        }
    }

    fn credit(&self, size: usize) {
        self.bytes.fetch_sub(size, Ordering::Relaxed);
        self.blocks.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The account of allocations made while no bridge is entered.
pub static GLOBAL: MemAccount = MemAccount::new();

/// The header in front of every counted block.
#[repr(C)]
struct BlockHeader {
    size: usize,
    account: *const MemAccount,
}

/// Size of the header; keeps the payload 16-byte aligned.
pub const HEADER: usize = 16;
const _: () = assert!(std::mem::size_of::<BlockHeader>() == HEADER);

/// Allocates `size` counted bytes charged to `account` (zeroed if `zero`); null when
/// the system is out of memory or `size` is absurd.
///
/// # Safety
/// `account` outlives the block (bridges keep theirs alive while blocks remain).
pub unsafe fn alloc(account: *const MemAccount, size: usize, zero: bool) -> *mut u8 {
    let Some(total) = size
        .checked_add(HEADER)
        .filter(|t| *t <= isize::MAX as usize)
    else {
        return std::ptr::null_mut();
    };
    // SAFETY: plain libc allocation of a non-zero size.
    let p = unsafe {
        if zero {
            libc::calloc(1, total)
        } else {
            libc::malloc(total)
        }
    } as *mut BlockHeader;
    if p.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: p is a fresh block of at least HEADER bytes; account is valid (caller).
    unsafe {
        p.write(BlockHeader { size, account });
        (*account).charge(size);
    }
    (p as usize + HEADER) as *mut u8
}

/// Frees a counted block and credits its account. Null is ignored.
///
/// # Safety
/// `p` is null or a live block returned by [`alloc`]/[`realloc`].
pub unsafe fn free(p: *mut u8) {
    if p.is_null() {
        return;
    }
    let h = (p as usize - HEADER) as *mut BlockHeader;
    // SAFETY: p came from alloc: a header precedes it; its account is alive.
    unsafe {
        (*(*h).account).credit((*h).size);
        libc::free(h as *mut libc::c_void);
    }
}

/// Blocks the debug mode keeps in quarantine: credited to their own account when
/// quarantined (the program freed them), charged here until really freed.
pub static QUARANTINED: MemAccount = MemAccount::new();

/// Moves a live block to the [`QUARANTINED`] account (the debug mode's deferred free).
///
/// # Safety
/// `p` is a live counted block.
pub unsafe fn quarantine(p: *mut u8) {
    let h = (p as usize - HEADER) as *mut BlockHeader;
    // SAFETY: a header precedes every counted block; its account is alive.
    unsafe {
        let size = (*h).size;
        (*(*h).account).credit(size);
        QUARANTINED.charge(size);
        (*h).account = &QUARANTINED;
    }
}

/// Resizes a counted block (null `p` allocates); null on failure, leaving `p` intact.
///
/// # Safety
/// `p` is null or a live counted block; `account` as for [`alloc`].
pub unsafe fn realloc(account: *const MemAccount, p: *mut u8, size: usize) -> *mut u8 {
    if p.is_null() {
        // SAFETY: forwarded.
        return unsafe { alloc(account, size, false) };
    }
    let Some(total) = size
        .checked_add(HEADER)
        .filter(|t| *t <= isize::MAX as usize)
    else {
        return std::ptr::null_mut();
    };
    let h = (p as usize - HEADER) as *mut BlockHeader;
    // SAFETY: p is a live counted block (caller).
    unsafe {
        let (old, acct) = ((*h).size, (*h).account);
        let n = libc::realloc(h as *mut libc::c_void, total) as *mut BlockHeader;
        if n.is_null() {
            return std::ptr::null_mut();
        }
        (*acct).resize(old, size);
        (*n).size = size;
        (n as usize + HEADER) as *mut u8
    }
}

/// The payload size of a counted block.
///
/// # Safety
/// `p` is a live counted block.
pub unsafe fn block_size(p: *const u8) -> usize {
    // SAFETY: a header precedes every counted block.
    unsafe { (*((p as usize - HEADER) as *const BlockHeader)).size }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_counted_exactly_and_credited_to_their_own_account() {
        let a = Box::new(MemAccount::new());
        let b = Box::new(MemAccount::new());
        // SAFETY: the accounts outlive the blocks.
        unsafe {
            let p = alloc(&*a, 100, true);
            assert!(!p.is_null());
            assert_eq!(p as usize % 16, 0);
            assert_eq!(std::slice::from_raw_parts(p, 100), &[0u8; 100][..]);
            let q = alloc(&*b, 7, false);
            assert_eq!((a.bytes(), b.bytes(), a.blocks()), (100, 7, 1));
            let p = realloc(&*b, p, 1000);
            assert_eq!(block_size(p), 1000);
            assert_eq!(
                (a.bytes(), b.bytes()),
                (1000, 7),
                "realloc keeps the account"
            );
            free(p);
            free(q);
            free(std::ptr::null_mut());
            assert_eq!((a.bytes(), b.bytes(), a.peak()), (0, 0, 1000));
            assert!(alloc(&*a, usize::MAX - 8, false).is_null());
            assert_eq!(a.allocations(), 1);
        }
    }
}
