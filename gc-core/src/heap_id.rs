//! `HeapId`, a heap's identity: a leaf type that the page table, big-object headers,
//! lookups and handles name without depending on the heap itself.

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
