//! Page runs for big objects of a few pages: an object whose header and payload take
//! [`MIN_PAGES`] to [`MAX_PAGES`] of the OS's 4 KiB pages gets a slot of that many whole
//! pages of its own, carved from 4 MiB chunks of the pools' address-space reservation
//! (`page::map_chunk`), instead of a chunk of the system allocator's heap. Larger
//! objects stay with the system allocator (which maps them separately), smaller ones
//! too: a slot wastes the rest of its last page, up to half of a two-page object (on
//! GAP 4.15.1's testinstall, 2,409 live objects of two pages took 19 MB resident for 10
//! MB of contents; the whole run's RSS was 4 MB lower without two-page slots).
//!
//! Why: a slot starts at a page boundary and shares no page with anything else, so the
//! pages an object never writes are never resident, and the zero pages at its end can
//! be given back up to the slot's end (`big::ZeroTails`). In the
//! system allocator's heap the next chunk's header lands in the object's last page and
//! the object's own header in the page before its first: GAP's function bodies
//! (allocated with 8 KiB, then shrunk to about 2 KiB by `ResizeBag`, which only changes
//! GAP's header) kept 6.1 KiB resident each there, one page here.
//!
//! Freed slots are reused first (zeroed by `memset`). After each collection's pause,
//! [`age_and_release`] keeps as many of the slots that collection freed as objects of
//! their size took during the phase before (the demand it expects), gives the memory of
//! the others back (`MADV_DONTNEED`, coalesced over adjacent slots), and gives back the
//! kept ones of the collection before that no object took meanwhile; slots given back
//! are reused later without a `memset`, as fresh ones are. Not only at full
//! collections: slots serve one size only, and a client whose sizes move on (GAP's hash
//! tables growing by doubling in `objmap.tst`) left 300 MB of freed slots of sizes no
//! longer asked for. Slots never go back to being address space for the pools: the chunks stay
//! (not resident when free).

use crate::page::CHUNK_SIZE;
use parking_lot::Mutex;

/// The OS's page size (x86_64 and aarch64 Linux's smallest): the unit of page runs and
/// of the zero tails given back (`big::ZeroTails`).
pub(crate) const OS_PAGE: usize = 4096;

/// Fewest pages of a slot.
pub(crate) const MIN_PAGES: usize = 3;
/// Most pages of a slot.
pub(crate) const MAX_PAGES: usize = 16;
const CLASSES: usize = MAX_PAGES - MIN_PAGES + 1;

/// The slots of one page count.
struct Class {
    /// Slots freed by the latest collection, still holding their last object's bytes.
    dirty: Vec<usize>,
    /// Slots kept for reuse by the collection before (see [`age_and_release`]).
    aging: Vec<usize>,
    /// Slots taken since the last [`age_and_release`].
    taken: usize,
    /// Freed slots whose memory was given back (zero, not resident).
    clean: Vec<usize>,
    /// Never-used slots `[bump, end)` of the newest chunk of this page count.
    bump: usize,
    end: usize,
}

static CLASSES_BY_PAGES: Mutex<[Class; CLASSES]> = Mutex::new(
    [const {
        Class {
            dirty: Vec::new(),
            aging: Vec::new(),
            taken: 0,
            clean: Vec::new(),
            bump: 0,
            end: 0,
        }
    }; CLASSES],
);

/// The pages of the slot for an object of `total` bytes (big-object header included),
/// or `None` when objects of that size do not go into page runs.
pub(crate) fn pages_for(total: usize) -> Option<usize> {
    let pages = total.div_ceil(OS_PAGE);
    (MIN_PAGES..=MAX_PAGES).contains(&pages).then_some(pages)
}

/// The base of a slot of `pages` pages whose first `len` bytes are zero, or `None` when
/// no chunk could be mapped for it (the caller falls back to the system allocator).
pub(crate) fn take(pages: usize, len: usize) -> Option<usize> {
    debug_assert!((MIN_PAGES..=MAX_PAGES).contains(&pages) && len <= pages * OS_PAGE);
    let mut classes = CLASSES_BY_PAGES.lock();
    let class = &mut classes[pages - MIN_PAGES];
    class.taken += 1;
    if let Some(base) = class.dirty.pop().or_else(|| class.aging.pop()) {
        drop(classes);
        // SAFETY: a freed slot: `pages` pages of ours, mapped read-write, which nobody
        // else uses (it left the free list under the lock).
        unsafe { std::ptr::write_bytes(base as *mut u8, 0, len) };
        return Some(base);
    }
    if let Some(base) = class.clean.pop() {
        return Some(base);
    }
    let bytes = pages * OS_PAGE;
    if class.end - class.bump < bytes {
        let base = crate::page::map_chunk().ok()?;
        class.bump = base;
        class.end = base + CHUNK_SIZE;
    }
    let base = class.bump;
    class.bump += bytes;
    Some(base)
}

/// Takes back the slot at `base` of `pages` pages.
///
/// # Safety
/// The slot came from [`take`] with the same `pages`, its object is dead, and it is
/// given back once.
pub(crate) unsafe fn give_back(base: usize, pages: usize) {
    CLASSES_BY_PAGES.lock()[pages - MIN_PAGES].dirty.push(base);
}

/// Whether freed slots wait for [`age_and_release`].
pub(crate) fn any_freed() -> bool {
    CLASSES_BY_PAGES
        .lock()
        .iter()
        .any(|c| !c.dirty.is_empty() || !c.aging.is_empty())
}

/// Called once after each collection (outside its pause): of the slots it freed, keeps
/// for reuse as many as were taken since the call before, and gives the memory of the
/// rest back to the OS, with that of the slots kept last time and not taken since (with
/// `all`, of every freed slot: the heap is gone). Returns the bytes given back.
pub(crate) fn age_and_release(all: bool) -> usize {
    let mut taken: Vec<(usize, Vec<usize>)> = {
        let mut classes = CLASSES_BY_PAGES.lock();
        classes
            .iter_mut()
            .enumerate()
            .filter_map(|(i, c)| {
                let mut dirty = std::mem::take(&mut c.dirty);
                let keep = if all { 0 } else { c.taken.min(dirty.len()) };
                c.taken = 0;
                let kept = dirty.split_off(dirty.len() - keep);
                let mut old = std::mem::replace(&mut c.aging, kept);
                old.append(&mut dirty);
                (!old.is_empty()).then_some(((i + MIN_PAGES) * OS_PAGE, old))
            })
            .collect()
    };
    let mut released = 0;
    let mut failed: Vec<(usize, Vec<usize>)> = Vec::new();
    for (bytes, slots) in taken.iter_mut() {
        slots.sort_unstable();
        // SAFETY: freed slots of ours (they left the dirty list under the lock and are on
        // no list until pushed back below): private anonymous memory nobody uses; after
        // MADV_DONTNEED it reads as zero.
        let (bytes_released, kept_dirty) = unsafe { crate::page::release_ranges(slots, *bytes) };
        released += bytes_released;
        if !kept_dirty.is_empty() {
            // Still ours and intact, but not zero: they go back to the dirty list.
            slots.retain(|s| kept_dirty.binary_search(s).is_err());
            failed.push((*bytes, kept_dirty));
        }
    }
    let mut classes = CLASSES_BY_PAGES.lock();
    for (bytes, slots) in taken {
        classes[bytes / OS_PAGE - MIN_PAGES].clean.extend(slots);
    }
    for (bytes, slots) in failed {
        classes[bytes / OS_PAGE - MIN_PAGES].dirty.extend(slots);
    }
    released
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_of_three_to_sixteen_pages_get_runs() {
        assert_eq!(pages_for(2 * OS_PAGE), None);
        assert_eq!(pages_for(2 * OS_PAGE + 1), Some(3));
        assert_eq!(pages_for(8192 + 16 + 48), Some(3), "GAP's function bodies");
        assert_eq!(pages_for(16 * OS_PAGE), Some(16));
        assert_eq!(pages_for(16 * OS_PAGE + 1), None);
    }
}
