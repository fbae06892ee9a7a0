//! Memory allocated once by the embedding program and exposed without copies to any
//! number of interpreters as buffer-protocol objects (`memoryview`, `numpy.frombuffer`).
//!
//! Lifetime: a [`SharedBuffer`] is reference-counted. Each Python object exposing it
//! holds one count, given back by the object's deallocator; whatever an interpreter
//! still holds when it is dropped is given back after it has been finalised and
//! unloaded (when no Python object of it can exist any more). So the memory outlives
//! every view, whatever order interpreters and handles are dropped in.
//!
//! Concurrency: the bytes are plain shared memory. Interpreters writing the same bytes
//! at once race as two processes sharing memory would; the Rust side reads and writes
//! through relaxed atomic byte accesses, so its accesses are never undefined behaviour.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// Alignment of the allocation (a cache line; enough for any numpy dtype).
const ALIGN: usize = 64;

static LIVE: AtomicUsize = AtomicUsize::new(0);

pub(crate) struct Block {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the block is raw memory only ever accessed through atomics on the Rust side
// and as shared memory by Python; the pointer itself is immutable.
unsafe impl Send for Block {}
// SAFETY: as above.
unsafe impl Sync for Block {}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated in SharedBuffer::new with this layout; the last reference
        // is gone, so no view can use it any more.
        unsafe { dealloc(self.ptr, layout(self.len)) };
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

fn layout(len: usize) -> Layout {
    Layout::from_size_align(len.max(1), ALIGN).expect("buffer size overflows a Layout")
}

/// A zero-initialised block of memory shareable with interpreters.
#[derive(Clone)]
pub struct SharedBuffer {
    pub(crate) block: Arc<Block>,
}

impl SharedBuffer {
    /// A zeroed buffer of `len` bytes, 64-byte aligned.
    pub fn new(len: usize) -> SharedBuffer {
        let l = layout(len);
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(l) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(l);
        }
        LIVE.fetch_add(1, Ordering::Relaxed);
        SharedBuffer {
            block: Arc::new(Block { ptr, len }),
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.block.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.block.len == 0
    }

    /// The address of its first byte (what every interpreter's views point at).
    pub fn as_ptr(&self) -> *const u8 {
        self.block.ptr
    }

    fn bytes(&self) -> &[AtomicU8] {
        // SAFETY: ptr..ptr+len is allocated for the block's lifetime; AtomicU8 has the
        // size and alignment of u8, and all Rust accesses go through these atomics.
        unsafe { std::slice::from_raw_parts(self.block.ptr.cast::<AtomicU8>(), self.block.len) }
    }

    /// A copy of the current bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes()
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }

    /// Copies `data` in at `offset`; panics if it does not fit.
    pub fn write(&self, offset: usize, data: &[u8]) {
        let dst = &self.bytes()[offset..offset + data.len()];
        for (d, s) in dst.iter().zip(data) {
            d.store(*s, Ordering::Relaxed);
        }
    }

    /// Number of handles and Python views holding this buffer.
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.block)
    }

    /// Number of shared buffers whose memory is still allocated in this process.
    pub fn live_count() -> usize {
        LIVE.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for SharedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBuffer")
            .field("len", &self.block.len)
            .field("holders", &self.holders())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_freed_with_the_last_holder() {
        let before = SharedBuffer::live_count();
        let b = SharedBuffer::new(100);
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        assert!(b.to_vec().iter().all(|&x| x == 0));
        b.write(10, &[1, 2, 3]);
        let c = b.clone();
        assert_eq!(c.to_vec()[10..13], [1, 2, 3]);
        assert_eq!(b.holders(), 2);
        drop(b);
        assert_eq!(SharedBuffer::live_count(), before + 1);
        drop(c);
        assert_eq!(SharedBuffer::live_count(), before);
    }
}
