//! The index of external (big) objects: address-ordered, fed by gc-core's
//! notify_external_alloc / notify_external_free callbacks, process-wide (addresses are
//! unique, each entry names its heap).
//!
//! A lookup first asks a coarse radix filter, one counter per 64 KiB of address space
//! in per-GiB leaves, which answers "no big object here" in one or two loads for the
//! vast majority of words a stack scan sees; only addresses in a 64 KiB region that
//! overlaps a big object go to the ordered map.

use gc_core::HeapId;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

const REGION_SHIFT: usize = 16;
const LEAF_SHIFT: usize = 30;
const ADDR_BITS: usize = 48;
const LEAF_ENTRIES: usize = 1 << (LEAF_SHIFT - REGION_SHIFT);

type Leaf = [AtomicU32; LEAF_ENTRIES];

static TOP: [AtomicPtr<Leaf>; 1 << (ADDR_BITS - LEAF_SHIFT)] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; 1 << (ADDR_BITS - LEAF_SHIFT)];

/// Start address -> (end address inclusive of one past the payload, heap id).
static MAP: RwLock<BTreeMap<usize, (usize, HeapId)>> = RwLock::new(BTreeMap::new());

#[inline(always)]
fn leaf(addr: usize, create: bool) -> Option<&'static Leaf> {
    let slot = &TOP[addr >> LEAF_SHIFT];
    let mut p = slot.load(Ordering::Acquire);
    if p.is_null() {
        if !create {
            return None;
        }
        let fresh = Box::into_raw(Box::new([const { AtomicU32::new(0) }; LEAF_ENTRIES]));
        match slot.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => p = fresh,
            Err(existing) => {
                // SAFETY: `fresh` was never shared.
                drop(unsafe { Box::from_raw(fresh) });
                p = existing;
            }
        }
    }
    // SAFETY: leaves are never freed once published.
    Some(unsafe { &*p })
}

fn adjust(start: usize, end: usize, delta: i32) {
    let mut r = start >> REGION_SHIFT;
    while r <= end >> REGION_SHIFT {
        let addr = r << REGION_SHIFT;
        if let Some(l) = leaf(addr, delta > 0) {
            let c = &l[(addr >> REGION_SHIFT) & (LEAF_ENTRIES - 1)];
            if delta > 0 {
                c.fetch_add(1, Ordering::AcqRel);
            } else {
                c.fetch_sub(1, Ordering::AcqRel);
            }
        }
        r += 1;
    }
}

/// Records a big object `[obj, obj + size]` (one past the end included) of heap `heap`.
pub(crate) fn insert(obj: usize, size: usize, heap: HeapId) {
    if obj >> ADDR_BITS != 0 || size == 0 {
        return;
    }
    let end = obj.saturating_add(size);
    let mut map = MAP.write();
    if map.insert(obj, (end, heap)).is_none() {
        adjust(obj, end, 1);
    }
}

/// Forgets the big object at `obj`.
pub(crate) fn remove(obj: usize) {
    let mut map = MAP.write();
    if let Some((end, _)) = map.remove(&obj) {
        adjust(obj, end, -1);
    }
}

/// The big object of heap `heap` whose extent `[start, end]` contains `p`.
#[inline]
#[cfg(test)]
pub(crate) fn lookup(p: usize, heap: HeapId) -> Option<usize> {
    if !may_hold(p) {
        return None;
    }
    search(p, heap)
}

/// The radix filter alone: false when no big object overlaps the 64 KiB region of `p`.
#[inline(always)]
pub(crate) fn may_hold(p: usize) -> bool {
    if p >> ADDR_BITS != 0 {
        return false;
    }
    leaf(p, false)
        .is_some_and(|l| l[(p >> REGION_SHIFT) & (LEAF_ENTRIES - 1)].load(Ordering::Acquire) != 0)
}

/// The ordered map's answer, for an address the filter let through.
#[cold]
#[inline(never)]
pub(crate) fn search(p: usize, heap: HeapId) -> Option<usize> {
    let map = MAP.read();
    let (&start, &(end, owner)) = map.range(..=p).next_back()?;
    (p <= end && owner == heap).then_some(start)
}

/// Number of big objects indexed for heap `heap`.
pub(crate) fn count(heap: HeapId) -> usize {
    MAP.read().values().filter(|(_, h)| *h == heap).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interior_and_end_found_outside_and_other_heap_not() {
        let (heap, other) = (gc_core::Heap::default(), gc_core::Heap::default());
        let (h, o) = (heap.id(), other.id());
        let base = 0x5555_0000_0000usize;
        insert(base, 100_000, h);
        assert_eq!(lookup(base, h), Some(base));
        assert_eq!(lookup(base + 99_999, h), Some(base));
        assert_eq!(lookup(base + 100_000, h), Some(base), "one past the end");
        assert_eq!(lookup(base + 100_001, h), None);
        assert_eq!(lookup(base - 1, h), None);
        assert_eq!(lookup(base + 10, o), None, "other heap");
        remove(base);
        assert_eq!(lookup(base + 10, h), None);
        assert_eq!(lookup(usize::MAX, h), None);
    }
}
