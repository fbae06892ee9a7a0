//! The handle table: one entry per managed object that has a native stub, and the stubs
//! themselves.
//!
//! - Entry `i` owns stub slot `i`: stubs live in chunks of [`STUB_CHUNK`] 24-byte slots
//!   that never move, so a stub pointer stays valid while native code holds it and the
//!   entry of a stub is found from its `handle` field in O(1). Index 0 is never used
//!   (a handle of 0 in a stub means "not a stub of ours").
//! - The entry vector grows like GraalPy's `nativeStubLookup`: 16 slots, doubling up to
//!   262,144, then by 262,144 at a time.
//! - An entry is **strong** (its managed object is a root, marked by the bridge's root
//!   scanner) exactly while native references exist: while the count is above
//!   `MANAGED_REFCNT` ([`HandleTable::is_strong`]). Strength is a function of the count,
//!   so it switches exactly when the count crosses `MANAGED_REFCNT`, without any code
//!   running at the crossing: the root scanner reads the counts at each collection, the
//!   only moment strength is observed. (GraalPy flips a field in an out-of-line
//!   `Py_IncRef`/`Py_DecRef` at the crossing; here `Py_INCREF`/`Py_DECREF` stay
//!   CPython's inline add and subtract.) Exceptions: replicated entries
//!   ([`WEAK_LIMIT`]) are weak whatever the count, immortal ones strong.
//! - `by_obj` maps a managed object's address to its entry: the same managed object gets
//!   the same stub while it lives (pointer identity). An entry goes stale when the
//!   reference queue reports the object gone (the handle-table entry no longer names
//!   that address) and stale entries are removed in bulk ([`AddrMap`]).

use crate::abi::{PyObject, PyTypeObject, Stub, MANAGED_REFCNT, STUB_TAG};
use rustc_hash::FxHashMap as HashMap;
use std::cell::UnsafeCell;
use std::collections::BTreeMap;

/// Stubs per chunk.
pub const STUB_CHUNK: usize = 256;
const _: () = assert!(STUB_CHUNK.is_power_of_two());
/// The entry vector doubles up to this many slots, then grows by this many.
pub const DOUBLING_LIMIT: usize = 262_144;
/// Initial capacity of the entry vector.
pub const INITIAL_SLOTS: usize = 16;

/// Entry flag: the slot is in use.
pub const USED: u32 = 1;
/// Entry flag: weak although the count is above `MANAGED_REFCNT`: the native references
/// all come from a cycle the last cycle collection replicated ("weak to strong limit").
pub const WEAK_LIMIT: u32 = 4;
/// Entry flag: immortal (count `IMMORTAL_REFCNT`, strong for ever, never freed).
pub const IMMORTAL: u32 = 8;

/// One handle-table entry.
#[derive(Clone, Copy, Debug, Default)]
pub struct Entry {
    /// Address of the managed object; 0 once it died (or the slot is free).
    pub obj: usize,
    /// Flags ([`USED`], [`WEAK_LIMIT`], [`IMMORTAL`]; strength comes from the stub's count).
    pub flags: u32,
}

/// A fixed-size chunk: a slot is found with a shift and a mask, one bounds check (the
/// chunk vector's).
type Chunk = Box<[UnsafeCell<Stub>; STUB_CHUNK]>;

const EMPTY_STUB: Stub = Stub {
    ob_base: PyObject {
        ob_refcnt: 0,
        ob_type: std::ptr::null_mut(),
    },
    handle: 0,
    flags: 0,
};

/// The table (under the bridge's state lock).
pub struct HandleTable {
    pub(crate) entries: Vec<Entry>,
    chunks: Vec<Chunk>,
    /// Chunk base address -> chunk number, to check pointers in O(log n).
    chunk_at: BTreeMap<usize, usize>,
    free: Vec<u32>,
    /// Managed object address -> entry index (valid while the entry is used and names
    /// that address: [`HandleTable::lookup`]).
    pub(crate) by_obj: AddrMap,
    /// Entries in use (stubs allocated).
    pub(crate) used: usize,
    /// Debug mode: freed slots are not reused until this many are waiting.
    pub(crate) quarantine: usize,
}

// SAFETY: the table is only reached under the bridge's state mutex; the stubs it owns are
// plain memory that native code reads and writes on the bridge's thread.
unsafe impl Send for HandleTable {}

impl HandleTable {
    /// An empty table; `quarantine` freed slots wait before reuse (debug mode).
    pub fn new(quarantine: usize) -> Self {
        let mut entries = Vec::with_capacity(INITIAL_SLOTS);
        entries.push(Entry::default()); // index 0 is never used
        HandleTable {
            entries,
            chunks: Vec::new(),
            chunk_at: BTreeMap::new(),
            free: Vec::new(),
            by_obj: AddrMap::default(),
            used: 0,
            quarantine,
        }
    }

    /// The stub of entry `idx` (untagged).
    #[inline]
    pub fn stub(&self, idx: u32) -> *mut Stub {
        let i = idx as usize;
        self.chunks[i / STUB_CHUNK][i % STUB_CHUNK].get()
    }

    /// The tagged pointer native code gets for entry `idx`.
    #[inline]
    pub fn tagged(&self, idx: u32) -> *mut PyObject {
        (self.stub(idx) as usize | STUB_TAG) as *mut PyObject
    }

    /// The slot index of a tagged stub pointer, checked without reading memory: the
    /// pointer must be exactly a stub slot of this table (used or freed).
    pub fn slot_of(&self, op: *const PyObject) -> Option<u32> {
        let stub = (op as usize & !STUB_TAG) as *mut Stub;
        if stub.is_null() || stub as usize % 8 != 0 {
            return None;
        }
        let (&lo, &inside) = self.chunk_at.range(..=stub as usize).next_back()?;
        let off = stub as usize - lo;
        let size = std::mem::size_of::<Stub>();
        if off >= STUB_CHUNK * size || off % size != 0 {
            return None;
        }
        let idx = (inside * STUB_CHUNK + off / size) as u32;
        ((idx as usize) < self.entries.len()).then_some(idx)
    }

    /// The slot index of a tagged pointer that native code held a reference through
    /// (so its memory is readable): the handle stored in the stub, checked against the
    /// slot's address; [`HandleTable::slot_of`] if that does not match.
    ///
    /// # Safety
    /// `op` points to readable memory of at least a stub's size (untagged).
    #[inline]
    pub unsafe fn slot_of_held(&self, op: *const PyObject) -> Option<u32> {
        // SAFETY: readable memory (caller).
        let idx = unsafe { Self::index_fast(op) };
        if (idx as usize) < self.entries.len() && idx != 0 && std::ptr::eq(self.tagged(idx), op) {
            return Some(idx);
        }
        self.slot_of(op)
    }

    /// The entry index of a tagged stub pointer, checked: the pointer must be exactly
    /// the stub of a used entry of this table.
    pub fn index_of(&self, op: *const PyObject) -> Option<u32> {
        let idx = self.slot_of(op)?;
        (self.entries[idx as usize].flags & USED != 0).then_some(idx)
    }

    /// The entry index stored in a stub, trusted (fast path for pointers known to be
    /// stubs of this table).
    ///
    /// # Safety
    /// `op` is a tagged pointer to a live stub of this table.
    #[inline]
    pub unsafe fn index_fast(op: *const PyObject) -> u32 {
        // SAFETY: forwarded.
        unsafe { (*((op as usize & !STUB_TAG) as *const Stub)).handle }
    }

    /// Allocates an entry and its stub for managed object `obj`, count `MANAGED_REFCNT`.
    pub fn alloc(&mut self, obj: usize, ty: *mut PyTypeObject) -> u32 {
        let idx = if self.free.len() > self.quarantine {
            if self.quarantine == 0 {
                self.free.pop().expect("non-empty")
            } else {
                self.free.remove(0)
            }
        } else {
            let i = self.entries.len();
            if i == self.entries.capacity() {
                let cap = self.entries.capacity();
                let grow = if cap < DOUBLING_LIMIT {
                    cap.max(INITIAL_SLOTS)
                } else {
                    DOUBLING_LIMIT
                };
                self.entries.reserve_exact(grow);
            }
            self.entries.push(Entry::default());
            if i / STUB_CHUNK >= self.chunks.len() {
                let chunk: Chunk = Box::new([const { UnsafeCell::new(EMPTY_STUB) }; STUB_CHUNK]);
                self.chunk_at
                    .insert(chunk.as_ptr() as usize, self.chunks.len());
                self.chunks.push(chunk);
            }
            u32::try_from(i).expect("fewer than 2^32 stubs")
        };
        self.entries[idx as usize] = Entry { obj, flags: USED };
        let stub = self.stub(idx);
        // SAFETY: the slot belongs to the entry just taken; nobody else writes it now.
        unsafe {
            stub.write(Stub {
                ob_base: PyObject {
                    ob_refcnt: MANAGED_REFCNT,
                    ob_type: ty,
                },
                handle: idx,
                flags: 0,
            })
        };
        self.by_obj.insert(obj, idx);
        self.used += 1;
        idx
    }

    /// The entry of the stub of managed object `obj`, if it has one (the identity map,
    /// its stale entries skipped).
    #[inline]
    pub fn lookup(&self, obj: usize) -> Option<u32> {
        let idx = self.by_obj.get(obj)?;
        let e = self.entries[idx as usize];
        (e.flags & USED != 0 && e.obj == obj).then_some(idx)
    }

    /// Entry `idx`'s managed object died: the entry forgets it (and loses `WEAK_LIMIT`)
    /// and its identity-map entry is stale (removed in bulk later, see [`AddrMap`]).
    /// Returns the entry as it was.
    #[inline]
    pub fn forget_obj(&mut self, idx: u32) -> Entry {
        let ent = &mut self.entries[idx as usize];
        let e = *ent;
        ent.obj = 0;
        ent.flags &= !WEAK_LIMIT;
        self.by_obj.went_stale();
        e
    }

    /// Removes the stale identity-map entries if they are as many as the live ones.
    pub fn sweep_by_obj(&mut self) {
        let entries = &self.entries;
        self.by_obj.maybe_sweep(|addr, idx| {
            let e = entries[idx as usize];
            e.flags & USED != 0 && e.obj == addr
        });
    }

    /// Releases entry `idx` and its stub (count 0, managed object dead).
    #[cfg(test)]
    pub fn release(&mut self, idx: u32) {
        // SAFETY: the stub of entry `idx`.
        unsafe { self.release_stub(idx, self.stub(idx)) };
    }

    /// [`HandleTable::release`] with the stub's address at hand.
    ///
    /// # Safety
    /// `s` is `self.stub(idx)`.
    #[inline]
    pub unsafe fn release_stub(&mut self, idx: u32, s: *mut Stub) {
        debug_assert_eq!(s, self.stub(idx));
        self.entries[idx as usize] = Entry::default();
        // SAFETY: the stub's count is 0: no native reference remains.
        unsafe {
            if self.quarantine > 0 {
                // Debug mode: poisoned like a freed native object (count 1, handle
                // kept): a stale pointer's decref reaches `_Py_Dealloc`, which reports
                // it; an incref is found by the next check.
                (*s).ob_base.ob_refcnt = 1;
            } else {
                (*s).handle = 0;
                (*s).ob_base.ob_type = std::ptr::null_mut();
            }
        }
        self.free.push(idx);
        self.used -= 1;
    }

    /// Whether entry `idx` holds its managed object strongly: used, the object alive,
    /// and immortal, or native references exist (count above `MANAGED_REFCNT`) and the
    /// entry is not replicated.
    #[inline]
    pub fn is_strong(&self, idx: u32) -> bool {
        self.is_strong_entry(idx, &self.entries[idx as usize])
    }

    /// [`HandleTable::is_strong`] with the entry at hand (`e` is `entries[idx]`).
    #[inline]
    pub fn is_strong_entry(&self, idx: u32, e: &Entry) -> bool {
        e.flags & USED != 0
            && e.obj != 0
            && (e.flags & IMMORTAL != 0
                || (e.flags & WEAK_LIMIT == 0 && self.count(idx) > MANAGED_REFCNT))
    }

    /// The number of strong entries (a scan).
    pub fn strong_count(&self) -> usize {
        (1..self.entries.len() as u32)
            .filter(|&i| self.is_strong(i))
            .count()
    }

    /// The count of entry `idx`'s stub.
    #[inline]
    pub fn count(&self, idx: u32) -> isize {
        // SAFETY: the slot exists (idx < entries.len()).
        unsafe { (*self.stub(idx)).ob_base.ob_refcnt }
    }

    /// Capacity of the entry vector (for the growth policy's tests).
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Bytes the table uses: entries, stub chunks, map.
    pub fn footprint(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.chunks.len() * STUB_CHUNK * std::mem::size_of::<Stub>()
            + self.by_obj.footprint()
            + self.free.capacity() * 4
    }

    /// Freed slots waiting in the quarantine (debug mode) whose poisoned count changed:
    /// their index and count.
    pub fn stale_uses(&self) -> Vec<(u32, isize)> {
        self.free
            .iter()
            .filter(|&&i| self.count(i) != 1)
            .map(|&i| (i, self.count(i)))
            .collect()
    }

    /// Whether any stub is still referenced from native code or immortal.
    pub fn has_native_references(&self) -> bool {
        (1..self.entries.len() as u32)
            .any(|i| self.entries[i as usize].flags & USED != 0 && self.count(i) > 0)
    }
}

/// An address -> index map (a managed object's stub entry, a native object's mirror
/// record) whose entries are not removed one by one when their object dies: the owner
/// marks them stale (the record no longer names the address, which every lookup checks)
/// and counts them; once the stale entries are as many as the live ones (and at least
/// [`AddrMap::SWEEP_MIN`]), one pass removes them all (a clear when none is live). A
/// removal is then a few instructions, amortised, instead of a hash, a probe and an
/// erase per dying object; the map holds at most twice its live entries (plus
/// `SWEEP_MIN`).
#[derive(Default)]
pub struct AddrMap {
    map: HashMap<usize, u32>,
    stale: usize,
}

impl AddrMap {
    /// Stale entries tolerated whatever the live count (small maps are not swept at
    /// every death).
    pub const SWEEP_MIN: usize = 64;

    /// The index stored for `addr`, live or stale (the caller checks the record).
    #[inline]
    pub fn get(&self, addr: usize) -> Option<u32> {
        self.map.get(&addr).copied()
    }

    /// Maps `addr` to `idx`; `addr` has no live entry (a stale one is replaced).
    #[inline]
    pub fn insert(&mut self, addr: usize, idx: u32) {
        if self.map.insert(addr, idx).is_some() {
            self.stale -= 1;
        }
    }

    /// One live entry went stale (its record stopped naming its address).
    #[inline]
    pub fn went_stale(&mut self) {
        self.stale += 1;
    }

    /// Live entries.
    pub fn live(&self) -> usize {
        self.map.len() - self.stale
    }

    /// Stale entries waiting for the sweep.
    #[cfg(test)]
    pub fn stale(&self) -> usize {
        self.stale
    }

    /// Removes the stale entries (those for which `live(addr, idx)` is false) if they
    /// are at least as many as the live ones and [`AddrMap::SWEEP_MIN`].
    #[inline]
    pub fn maybe_sweep(&mut self, live: impl Fn(usize, u32) -> bool) {
        if self.stale < Self::SWEEP_MIN || self.stale < self.map.len() - self.stale {
            return;
        }
        self.sweep(live);
    }

    #[inline(never)]
    fn sweep(&mut self, live: impl Fn(usize, u32) -> bool) {
        debug_assert_eq!(
            self.stale,
            self.map.iter().filter(|(&a, &i)| !live(a, i)).count(),
            "stale entries counted"
        );
        if self.stale == self.map.len() {
            self.map.clear();
        } else {
            self.map.retain(|&a, &mut i| live(a, i));
        }
        self.stale = 0;
    }

    /// Bytes the map uses.
    pub fn footprint(&self) -> usize {
        self.map.capacity() * (std::mem::size_of::<(usize, u32)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_vector_doubles_to_the_limit_then_grows_linearly_and_index_0_is_unused() {
        let mut t = HandleTable::new(0);
        let mut caps = vec![t.capacity()];
        for i in 0..(DOUBLING_LIMIT + 10) {
            let idx = t.alloc(16 * (i + 1), std::ptr::null_mut());
            assert_ne!(idx, 0);
            if *caps.last().unwrap() != t.capacity() {
                caps.push(t.capacity());
            }
        }
        assert_eq!(caps[..3], [16, 32, 64]);
        assert_eq!(caps[caps.len() - 2], DOUBLING_LIMIT);
        assert_eq!(*caps.last().unwrap(), 2 * DOUBLING_LIMIT);
        let idx = t.lookup(16).unwrap();
        assert_eq!(idx, 1);
        assert_eq!(t.index_of(t.tagged(idx)), Some(1));
        // SAFETY: a live stub of this table.
        assert_eq!(unsafe { HandleTable::index_fast(t.tagged(7)) }, 7);
        assert_eq!(t.count(7), MANAGED_REFCNT);
        assert_eq!(
            t.index_of((t.tagged(7) as usize + 8) as *const PyObject),
            None
        );
        assert_eq!(t.index_of(16 as *const PyObject), None);
    }

    #[test]
    fn released_slots_are_reused_after_the_quarantine() {
        let mut t = HandleTable::new(2);
        let a = t.alloc(16, std::ptr::null_mut());
        let b = t.alloc(32, std::ptr::null_mut());
        let c = t.alloc(48, std::ptr::null_mut());
        for i in [a, b, c] {
            t.forget_obj(i);
            t.release(i);
        }
        assert_eq!(t.alloc(64, std::ptr::null_mut()), a, "oldest freed first");
        assert_eq!(t.alloc(80, std::ptr::null_mut()), 4, "two stay quarantined");
        assert_eq!(t.index_of(t.tagged(b)), None, "a freed slot is not a stub");
    }

    #[test]
    fn stale_address_entries_are_skipped_replaced_and_swept_in_bulk() {
        let mut t = HandleTable::new(0);
        let n = 2 * AddrMap::SWEEP_MIN;
        let idx: Vec<u32> = (0..n)
            .map(|i| t.alloc(16 * (i + 1), std::ptr::null_mut()))
            .collect();
        // Objects die: their entries go stale, lookups skip them, no sweep yet.
        for &i in &idx[..AddrMap::SWEEP_MIN - 1] {
            t.forget_obj(i);
            t.sweep_by_obj();
        }
        assert_eq!(t.lookup(16), None, "a dead object has no stub");
        assert_eq!(t.lookup(16 * n), Some(idx[n - 1]));
        assert_eq!(t.by_obj.stale(), AddrMap::SWEEP_MIN - 1);
        assert_eq!(t.by_obj.live(), n - AddrMap::SWEEP_MIN + 1);
        // A new object at a dead one's address replaces the stale entry.
        t.release(idx[0]);
        let again = t.alloc(16, std::ptr::null_mut());
        assert_eq!(t.lookup(16), Some(again));
        assert_eq!(t.by_obj.stale(), AddrMap::SWEEP_MIN - 2);
        // As many stale as live: one sweep removes exactly the stale ones.
        for &i in &idx[AddrMap::SWEEP_MIN - 1..AddrMap::SWEEP_MIN + 2] {
            t.forget_obj(i);
        }
        t.sweep_by_obj();
        assert_eq!(t.by_obj.stale(), 0);
        assert_eq!(t.by_obj.live(), n - AddrMap::SWEEP_MIN - 1);
        assert_eq!(t.lookup(16), Some(again));
        for (k, &i) in idx.iter().enumerate().skip(AddrMap::SWEEP_MIN + 2) {
            assert_eq!(t.lookup(16 * (k + 1)), Some(i));
        }
    }
}
