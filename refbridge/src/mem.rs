//! Counted native memory: every block that `PyMem_Malloc`, `PyObject_Malloc` and the
//! object allocators hand out is preceded by a 16-byte header holding its size and the
//! account it was charged to, so frees are credited exactly (GraalPy prepends the size
//! for the same reason). Accounts are per bridge (the bridge entered on the thread at
//! allocation time), or the process-wide [`GLOBAL`] account when none is entered.
//!
//! The top 16 bits of the header's account word (an account's address leaves them 0)
//! say what the block is: [`LIVE`] while allocated, [`FREED`] once freed (until its
//! memory is reused, by the pool or the system allocator; a pooled block's free-list
//! link is kept in that word, marked, so freeing costs no extra store). A pointer handed to a free
//! is checked against them first (one compare): memory from `malloc` (whose chunk
//! header is no account word), a block freed already, or any other pointer is refused
//! with an error instead of crediting an account read from garbage ([`free_checked`]).
//!
//! The pressure policy (trigger, growth, hard cap, retries) is the bridge's; this module
//! only counts.

use parking_lot::Mutex;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Blocks up to this many bytes (header included) come from the account's pool.
pub const POOL_MAX: usize = 512;
/// Pool size classes: 16, 32, ..., 512 bytes.
const CLASSES: usize = POOL_MAX / 16;
/// Bytes the pool takes from the system at a time.
const ARENA: usize = 256 << 10;
/// Low bit of a header's account word: the block belongs to the account's pool.
const POOLED: usize = 1;
/// The top 16 bits of a header's account word.
const MARK: usize = 0xFFFF << 48;
/// [`MARK`] of a live block.
const LIVE: usize = 0xB10C << 48;
/// [`MARK`] of a freed block (until its memory is reused).
const FREED: usize = 0xF4EE << 48;

thread_local! {
    static THREAD_TOKEN: u8 = const { 0 };
}

/// A number identifying the calling thread while it lives.
pub(crate) fn thread_token() -> usize {
    THREAD_TOKEN.with(|t| t as *const u8 as usize)
}

/// Free lists of small blocks (pymalloc's idea: size classes carved from arenas), used
/// only by the account's owner thread.
struct Pool {
    free: [usize; CLASSES + 1],
    bump: usize,
    end: usize,
    arenas: Vec<usize>,
}

/// Bytes and blocks charged to one account, and the account's small-block pool.
///
/// The pool serves the thread that owns the account (the thread a bridge is entered on:
/// CPython's pymalloc also relies on the GIL): allocation and free there are a free-list
/// pop and push. A pooled block freed on another thread goes to a locked list the owner
/// takes back at its next allocation.
pub struct MemAccount {
    /// Bytes and blocks counted by threads other than the owner (atomic read-modify-write).
    bytes: AtomicUsize,
    peak: AtomicUsize,
    blocks: AtomicUsize,
    /// Bytes and blocks counted by the owner thread, which alone writes them (a load and a
    /// store: no locked instruction, which would stall the owner's allocation and free
    /// paths; as the pool, they rely on the owner discipline). The counts are the sums
    /// (wrapping: either part may go below 0 when the other thread counted the charge).
    own_bytes: AtomicUsize,
    own_blocks: AtomicUsize,
    owner: AtomicUsize,
    pool: UnsafeCell<Pool>,
    remote: Mutex<Vec<usize>>,
    remote_n: AtomicUsize,
}

// SAFETY: `pool` is only touched by the thread whose token is in `owner` (checked on
// every access); the rest is atomic or locked.
unsafe impl Sync for MemAccount {}
// SAFETY: as above; the arenas are plain memory.
unsafe impl Send for MemAccount {}

impl Default for MemAccount {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MemAccount({} bytes in {} blocks)",
            self.bytes(),
            self.blocks()
        )
    }
}

/// The owner's part plus the other threads' part of a count. The owner always reads a
/// sum at least 0 (a block it charged and another thread credited, or the reverse, was
/// handed over: the charge happened before the credit); a third thread may read the parts
/// at different moments, and a sum below 0 is such a mix: it reads 0.
#[inline]
fn sum(own: &AtomicUsize, other: &AtomicUsize) -> usize {
    let s = own
        .load(Ordering::Relaxed)
        .wrapping_add(other.load(Ordering::Relaxed));
    if (s as isize) < 0 {
        0
    } else {
        s
    }
}

impl MemAccount {
    /// An empty account (no owner: no pool until the bridge entered on a thread owns it).
    pub const fn new() -> Self {
        MemAccount {
            bytes: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            blocks: AtomicUsize::new(0),
            own_bytes: AtomicUsize::new(0),
            own_blocks: AtomicUsize::new(0),
            owner: AtomicUsize::new(0),
            pool: UnsafeCell::new(Pool {
                free: [0; CLASSES + 1],
                bump: 0,
                end: 0,
                arenas: Vec::new(),
            }),
            remote: parking_lot::const_mutex(Vec::new()),
            remote_n: AtomicUsize::new(0),
        }
    }

    /// Makes the calling thread the pool's user (`on`), or nobody.
    pub(crate) fn set_owner(&self, on: bool) {
        self.owner
            .store(if on { thread_token() } else { 0 }, Ordering::Release);
    }

    #[inline]
    fn owned_here(&self) -> bool {
        let o = self.owner.load(Ordering::Relaxed);
        o != 0 && o == thread_token()
    }

    /// Bytes in use (payloads, headers excluded).
    pub fn bytes(&self) -> usize {
        sum(&self.own_bytes, &self.bytes)
    }

    /// The most bytes ever in use at once (updated without synchronisation: a
    /// statistic).
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Blocks in use.
    pub fn blocks(&self) -> usize {
        sum(&self.own_blocks, &self.blocks)
    }

    /// Resets the peak to the current use.
    pub fn reset_peak(&self) {
        self.peak.store(self.bytes(), Ordering::Relaxed);
    }

    /// Adds `bytes` (wrapping) and `blocks` to the counts: the owner's part if `owned`
    /// (the calling thread owns the account), else the shared part.
    #[inline]
    fn count(&self, owned: bool, bytes: usize, blocks: usize) {
        if owned {
            // Only the owner writes these (owner discipline): load and store suffice.
            let b = self.own_bytes.load(Ordering::Relaxed).wrapping_add(bytes);
            self.own_bytes.store(b, Ordering::Relaxed);
            let n = self.own_blocks.load(Ordering::Relaxed).wrapping_add(blocks);
            self.own_blocks.store(n, Ordering::Relaxed);
        } else {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
            self.blocks.fetch_add(blocks, Ordering::Relaxed);
        }
    }

    /// Updates the peak after a charge.
    #[inline]
    fn note_peak(&self) {
        let now = self.bytes();
        if now > self.peak.load(Ordering::Relaxed) {
            self.peak.store(now, Ordering::Relaxed);
        }
    }

    #[inline]
    fn charge(&self, owned: bool, size: usize) {
        self.count(owned, size, 1);
        self.note_peak();
    }

    fn resize(&self, old: usize, new: usize) {
        self.count(self.owned_here(), new.wrapping_sub(old), 0);
        if new > old {
            self.note_peak();
        }
    }

    #[inline]
    fn credit(&self, owned: bool, size: usize) {
        self.count(owned, size.wrapping_neg(), usize::MAX);
    }

    /// A block of size class `class` from the pool (owner thread only); 0 if the system
    /// refuses an arena.
    ///
    /// # Safety
    /// The caller is the owner thread.
    #[inline]
    unsafe fn pool_take(&self, class: usize) -> usize {
        if self.remote_n.load(Ordering::Relaxed) != 0 {
            // SAFETY: owner thread (caller).
            unsafe { self.take_back_remote() };
        }
        // SAFETY: owner thread (caller): nobody else touches the pool.
        let pool = unsafe { &mut *self.pool.get() };
        let head = pool.free[class];
        if head != 0 {
            // SAFETY: a free block's account word holds the next free block's address
            // marked FREED (pool_put).
            pool.free[class] = unsafe { *((head + 8) as *const usize) } & !MARK;
            return head;
        }
        let bytes = class * 16;
        if pool.bump + bytes > pool.end {
            // SAFETY: plain allocation of an arena, 16-byte aligned by malloc.
            let a = unsafe { libc::malloc(ARENA) } as usize;
            if a == 0 {
                return 0;
            }
            pool.arenas.push(a);
            pool.bump = a;
            pool.end = a + ARENA;
        }
        let b = pool.bump;
        pool.bump += bytes;
        b
    }

    /// Puts a block back on its free list.
    ///
    /// # Safety
    /// Owner thread; `block` is a pooled block of this account of class `class`.
    #[inline]
    unsafe fn pool_put(&self, block: usize, class: usize) {
        // SAFETY: owner thread; the block is free memory of ours. The link goes in the
        // header's account word, marked FREED: a later free of the block is refused
        // (the size word stays, for take_back_remote).
        unsafe {
            let pool = &mut *self.pool.get();
            *((block + 8) as *mut usize) = pool.free[class] | FREED;
            pool.free[class] = block;
        }
    }

    /// Takes back pooled blocks freed on other threads.
    ///
    /// # Safety
    /// Owner thread.
    unsafe fn take_back_remote(&self) {
        let blocks = std::mem::take(&mut *self.remote.lock());
        self.remote_n.store(0, Ordering::Relaxed);
        for b in blocks {
            // SAFETY: remote blocks are pooled blocks of ours; the class is kept in the
            // header's size word until the block is reused.
            unsafe {
                let class = class_of((*(b as *const BlockHeader)).size + HEADER);
                self.pool_put(b, class);
            }
        }
    }
}

impl Drop for MemAccount {
    fn drop(&mut self) {
        for &a in &self.pool.get_mut().arenas {
            // SAFETY: arenas come from libc::malloc; the account (and so every block of
            // its pool) is gone.
            unsafe { libc::free(a as *mut libc::c_void) };
        }
    }
}

#[inline]
fn class_of(total: usize) -> usize {
    total.div_ceil(16)
}

/// The account of allocations made while no bridge is entered.
pub static GLOBAL: MemAccount = MemAccount::new();

/// The header in front of every counted block.
#[repr(C)]
struct BlockHeader {
    size: usize,
    /// The account's address, with [`POOLED`] set for pooled blocks.
    account: usize,
}

/// Size of the header; keeps the payload 16-byte aligned.
pub const HEADER: usize = 16;
const _: () = assert!(std::mem::size_of::<BlockHeader>() == HEADER);

/// What the header in front of `p` says `p` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockState {
    /// A live counted block charged to the account at this address.
    Live(usize),
    /// A counted block freed already (its memory not reused since).
    Freed,
    /// Not a counted block: memory of another allocator (`malloc`), a block freed whose
    /// memory the system allocator took back, or any other pointer.
    Foreign,
}

/// The address of the account a live counted block (starting at `p`) was charged to,
/// or a value no account has (its top bits set) if `p` is not a live counted block:
/// one load and one exclusive-or, for the checks on hot paths.
///
/// # Safety
/// The 16 bytes before `p` are readable (true of every counted block; a pointer of
/// another allocator has its chunk header there).
#[inline]
pub(crate) unsafe fn block_account(p: *const u8) -> usize {
    // SAFETY: readable (caller).
    let w = unsafe { (*((p as usize - HEADER) as *const BlockHeader)).account };
    (w & !POOLED) ^ LIVE
}

/// What `p` is: a live block (and its account), a freed one, or none of ours.
///
/// # Safety
/// As [`block_account`].
pub(crate) unsafe fn block_state(p: *const u8) -> BlockState {
    // SAFETY: readable (caller).
    let w = unsafe { (*((p as usize - HEADER) as *const BlockHeader)).account };
    match w & MARK {
        LIVE => BlockState::Live(w & !(MARK | POOLED)),
        FREED => BlockState::Freed,
        _ => BlockState::Foreign,
    }
}

fn account_of(h: &BlockHeader) -> &MemAccount {
    // SAFETY: headers of live blocks hold the address of a live account (accounts
    // outlive their blocks).
    unsafe { &*((h.account & !(MARK | POOLED)) as *const MemAccount) }
}

/// Allocates `size` counted bytes charged to `account` (zeroed if `zero`); null when
/// the system is out of memory or `size` is absurd. Small blocks come from the
/// account's pool when the calling thread owns it.
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
    // SAFETY: a live account (caller).
    let acct = unsafe { &*account };
    let owned = acct.owned_here();
    let (p, flag) = if total <= POOL_MAX && owned {
        // SAFETY: the owner thread.
        let b = unsafe { acct.pool_take(class_of(total)) };
        if b != 0 && zero {
            // SAFETY: a pooled block of at least `total` bytes.
            unsafe { std::ptr::write_bytes((b + HEADER) as *mut u8, 0, size) };
        }
        (b as *mut BlockHeader, POOLED)
    } else {
        // SAFETY: plain libc allocation of a non-zero size.
        let b = unsafe {
            if zero {
                libc::calloc(1, total)
            } else {
                libc::malloc(total)
            }
        };
        (b as *mut BlockHeader, 0)
    };
    if p.is_null() {
        return std::ptr::null_mut();
    }
    debug_assert_eq!(account as usize & MARK, 0, "an account's address");
    // SAFETY: p is a fresh block of at least HEADER bytes.
    unsafe {
        p.write(BlockHeader {
            size,
            account: account as usize | flag | LIVE,
        })
    };
    acct.charge(owned, size);
    (p as usize + HEADER) as *mut u8
}

/// Frees a pointer a program handed over as a counted block, if it is one: a live
/// block is freed as by [`free`]; otherwise nothing is touched and the error says why
/// ([`BlockState::Freed`] or [`BlockState::Foreign`]). Null is ignored.
///
/// # Safety
/// `p` is null, or the 16 bytes before it are readable and, if they are a live block's
/// header, it is a counted block that nobody uses any more.
#[inline(always)]
pub unsafe fn free_checked(p: *mut u8) -> Result<(), BlockState> {
    if p.is_null() {
        return Ok(());
    }
    let h = (p as usize - HEADER) as *mut BlockHeader;
    // SAFETY: readable (caller).
    let w = unsafe { (*h).account };
    if w & MARK != LIVE {
        // SAFETY: as above.
        return Err(unsafe { block_state(p) });
    }
    // SAFETY: a live counted block (just checked), unused (caller).
    unsafe { free_header(h, w) };
    Ok(())
}

/// Frees a counted block and credits its account; its header is marked [`FREED`]. Null
/// is ignored.
///
/// # Safety
/// `p` is null or a live block returned by [`alloc`]/[`realloc`].
#[inline]
pub unsafe fn free(p: *mut u8) {
    if p.is_null() {
        return;
    }
    let h = (p as usize - HEADER) as *mut BlockHeader;
    // SAFETY: p came from alloc: a header precedes it.
    unsafe {
        let w = (*h).account;
        debug_assert_eq!(w & MARK, LIVE, "a live block");
        free_header(h, w);
    }
}

/// [`free`] of the block whose header `h` holds the account word `w`.
///
/// # Safety
/// `h` is the header of a live counted block, `w` its account word.
#[inline(always)]
unsafe fn free_header(h: *mut BlockHeader, w: usize) {
    // SAFETY: a live block's account is alive (accounts outlive their blocks).
    let acct = unsafe { &*((w & !(MARK | POOLED)) as *const MemAccount) };
    // SAFETY: a live block's header (caller).
    let size = unsafe { (*h).size };
    let owned = acct.owned_here();
    acct.credit(owned, size);
    if w & POOLED != 0 && owned {
        // The common case, inline: a pooled block freed by the owner thread (the free
        // list's link marks it FREED).
        // SAFETY: the owner thread; a pooled block of this account.
        unsafe { acct.pool_put(h as usize, class_of(size + HEADER)) };
    } else {
        // SAFETY: a counted block of acct, credited.
        unsafe { free_other(h, acct, w) };
    }
}

/// The rest of [`free`]: a system block, or a pooled block freed on another thread
/// (handed back to the owner).
///
/// # Safety
/// `h` is the header of a counted block of `acct` being freed, already credited; `w`
/// its account word when it was live.
#[inline(never)]
unsafe fn free_other(h: *mut BlockHeader, acct: &MemAccount, w: usize) {
    // SAFETY: as for free.
    unsafe {
        // Marked until the memory is reused (the system allocator may write over it).
        (*h).account = w ^ (LIVE ^ FREED);
        if w & POOLED == 0 {
            libc::free(h as *mut libc::c_void);
        } else {
            acct.remote.lock().push(h as usize);
            acct.remote_n.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Blocks the debug mode keeps in quarantine: credited to their own account when
/// quarantined (the program freed them), charged here until really freed. (The debug
/// mode uses no pool, so these are system blocks.)
pub static QUARANTINED: MemAccount = MemAccount::new();

/// Moves a live block to the [`QUARANTINED`] account (the debug mode's deferred free).
///
/// # Safety
/// `p` is a live counted block that is not pooled.
pub unsafe fn quarantine(p: *mut u8) {
    let h = (p as usize - HEADER) as *mut BlockHeader;
    // SAFETY: a header precedes every counted block; its account is alive.
    unsafe {
        debug_assert!((*h).account & POOLED == 0, "debug mode uses no pool");
        let size = (*h).size;
        let acct = account_of(&*h);
        acct.credit(acct.owned_here(), size);
        QUARANTINED.charge(QUARANTINED.owned_here(), size);
        (*h).account = &QUARANTINED as *const MemAccount as usize | LIVE;
    }
}

/// Resizes a counted block (null `p` allocates); null on failure, leaving `p` intact.
///
/// # Safety
/// `p` is null or a live counted block (checked with [`block_state`] first if it comes
/// from a program); `account` as for [`alloc`].
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
        let old = (*h).size;
        debug_assert_eq!((*h).account & MARK, LIVE, "a live block");
        if (*h).account & POOLED != 0 {
            // A pooled block: a new block (pooled or not), the data copied over.
            let acct = (*h).account & !(MARK | POOLED);
            let n = alloc(acct as *const MemAccount, size, false);
            if n.is_null() {
                return n;
            }
            std::ptr::copy_nonoverlapping(p, n, old.min(size));
            free(p);
            return n;
        }
        let acct = account_of(&*h) as *const MemAccount;
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
        }
    }

    #[test]
    fn the_owner_thread_uses_the_pool_and_other_threads_give_blocks_back() {
        let a = std::sync::Arc::new(MemAccount::new());
        a.set_owner(true);
        // SAFETY: the account outlives the blocks.
        unsafe {
            let p = alloc(&*a, 40, true);
            assert_eq!(std::slice::from_raw_parts(p, 40), &[0u8; 40][..]);
            free(p);
            let q = alloc(&*a, 40, false);
            assert_eq!(p, q, "the freed block is reused first");
            // A pooled block grows into a system block, data kept.
            std::ptr::write_bytes(q, 7, 40);
            let r = realloc(&*a, q, 4000);
            assert_eq!(std::slice::from_raw_parts(r, 40), &[7u8; 40][..]);
            assert_eq!((a.bytes(), a.blocks()), (4000, 1));
            free(r);
            // Freed on another thread: back to the owner at its next allocation.
            let s = alloc(&*a, 100, false) as usize;
            let a2 = a.clone();
            std::thread::spawn(move || {
                free(s as *mut u8);
                assert_eq!(a2.bytes(), 0);
            })
            .join()
            .unwrap();
            assert_eq!(alloc(&*a, 100, false) as usize, s);
            free(s as *mut u8);
            // Charged on another thread, credited by the owner: the owner's part of the
            // counts goes below 0 and the sums stay exact.
            let a3 = a.clone();
            let t = std::thread::spawn(move || alloc(&*a3, 64, false) as usize)
                .join()
                .unwrap();
            assert_eq!((a.bytes(), a.blocks()), (64, 1));
            free(t as *mut u8);
        }
        assert_eq!((a.bytes(), a.blocks()), (0, 0));
        assert_eq!(a.peak(), 4040, "the realloc held both blocks at once");
    }
}
