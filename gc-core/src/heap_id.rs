//! `HeapId`, a heap's identity: a leaf type that the page table, big-object headers,
//! lookups and handles name without depending on the heap itself, and the set of heaps
//! alive (`with_live`). Depends on no other module of the crate.

use std::sync::atomic::{AtomicU64, Ordering};

/// A heap's identity: a serial number no other heap of the process has had or will
/// have (so a handle that names a dropped heap never matches a later one), nonzero and
/// below 2^40. It is also the owner id that page-table entries and big-object headers
/// record.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
#[repr(transparent)]
pub struct HeapId(u64);

impl HeapId {
    /// The serial number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The id as the machine word that page-table entries and big-object headers store.
    #[inline(always)]
    pub(crate) fn word(self) -> usize {
        self.0 as usize
    }

    /// The id a page-table entry's nonzero owner word names.
    #[inline(always)]
    pub(crate) fn from_owner(owner: u64) -> HeapId {
        debug_assert!(owner != 0);
        HeapId(owner)
    }

    /// A fresh id, never handed out before.
    pub(crate) fn next() -> HeapId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(id < 1 << 40, "heap ids exhausted");
        HeapId(id)
    }
}

impl std::fmt::Display for HeapId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "heap #{}", self.0)
    }
}

/// The ids of the heaps that are alive. A heap's drop removes its id (under the write
/// lock) before it frees anything its types own, so code holding the read lock with
/// the id present may read the heap's type objects.
pub(crate) static LIVE_HEAPS: parking_lot::RwLock<std::collections::BTreeSet<u64>> =
    parking_lot::RwLock::new(std::collections::BTreeSet::new());

/// Runs `f` while heap `id` cannot be dropped; `None` (without running `f`) if it has
/// been. `f` must not create or drop a heap.
pub(crate) fn with_live<R>(id: HeapId, f: impl FnOnce() -> R) -> Option<R> {
    let live = LIVE_HEAPS.read();
    live.contains(&id.get()).then(f)
}
