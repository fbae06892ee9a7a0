//! The weak-reference tables a heap keeps (under `HeapInner::weak`, `state.rs`): the
//! table behind `WeakRef` handles, reference-queue registrations and the shared part of
//! a `ReferenceQueue`, with the C function types they call. The processing between mark
//! and sweep that clears and queues them is `weak.rs`; the public handles `weakref.rs`.
//!
//! Depends only on `object`.

use crate::object::ObjRef;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A finalizer with Julia's `jl_gc_add_ptr_finalizer` signature: `void f(void *obj)`.
pub type CFinalizerFn = unsafe extern "C" fn(*mut c_void);

/// A C notification function for a reference queue: `void f(void *data)`.
pub type CNotifyFn = unsafe extern "C" fn(*mut c_void);

/// Payload bytes of a weak-reference object: one word, the referent (null once cleared).
pub const WEAK_OBJECT_SIZE: usize = 8;

/// One reference-queue registration. Its queue is named by its slot in
/// [`WeakState::queues`] (not a counted pointer): registering and finding an object gone
/// touch no reference count.
pub(crate) struct PhantomEntry {
    pub(crate) obj: ObjRef,
    pub(crate) token: usize,
    pub(crate) queue: u32,
}

/// Slots per chunk of the weak handle table.
const HANDLE_CHUNK: usize = 256;

/// The table behind [`WeakRef`] handles: slots holding a referent address (0 = free or
/// cleared). Chunks never move, so a handle keeps a pointer to its slot and reads it
/// without a lock.
#[derive(Default)]
pub(crate) struct HandleTable {
    /// Boxed so that a chunk never moves when the vector grows: handles point into it.
    #[allow(clippy::vec_box)]
    pub(crate) chunks: Vec<Box<[AtomicUsize; HANDLE_CHUNK]>>,
    /// Per slot: the slot is on `young`.
    pub(crate) listed: Vec<bool>,
    pub(crate) free: Vec<u32>,
    /// Slots whose referent may be young (plus stale ones, dropped when seen).
    pub(crate) young: Vec<u32>,
    pub(crate) live: usize,
}

impl HandleTable {
    pub(crate) fn slot(&self, idx: u32) -> &AtomicUsize {
        slot_in(&self.chunks, idx)
    }

    pub(crate) fn alloc(&mut self, obj: ObjRef) -> (u32, NonNull<AtomicUsize>) {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = self.listed.len();
                if i % HANDLE_CHUNK == 0 {
                    self.chunks
                        .push(Box::new(std::array::from_fn(|_| AtomicUsize::new(0))));
                }
                self.listed.push(false);
                u32::try_from(i).expect("fewer than 2^32 weak handles")
            }
        };
        let slot = self.slot(idx);
        slot.store(obj.addr(), Ordering::Release);
        let ptr = NonNull::from(slot);
        if !self.listed[idx as usize] {
            self.listed[idx as usize] = true;
            self.young.push(idx);
        }
        self.live += 1;
        (idx, ptr)
    }

    pub(crate) fn release(&mut self, idx: u32) {
        self.slot(idx).store(0, Ordering::Release);
        self.free.push(idx);
        self.live -= 1;
    }

    /// Clears the slots whose referent died; returns how many.
    pub(crate) fn process(&mut self, full: bool, dead: &impl Fn(ObjRef) -> bool) -> u64 {
        let mut cleared = 0;
        if full {
            self.young.clear();
            for i in 0..self.listed.len() {
                let idx = i as u32;
                let slot = slot_in(&self.chunks, idx);
                self.listed[i] = false;
                let Some(obj) = ObjRef::from_addr(slot.load(Ordering::Relaxed)) else {
                    continue;
                };
                if dead(obj) {
                    slot.store(0, Ordering::Release);
                    cleared += 1;
                } else if !is_old(obj) {
                    self.listed[i] = true;
                    self.young.push(idx);
                }
            }
        } else {
            let young = std::mem::take(&mut self.young);
            for idx in young {
                let slot = slot_in(&self.chunks, idx);
                let keep = match ObjRef::from_addr(slot.load(Ordering::Relaxed)) {
                    None => false,
                    Some(obj) if dead(obj) => {
                        slot.store(0, Ordering::Release);
                        cleared += 1;
                        false
                    }
                    Some(obj) => !is_old(obj),
                };
                if keep {
                    self.young.push(idx);
                } else {
                    self.listed[idx as usize] = false;
                }
            }
        }
        cleared
    }
}

#[allow(clippy::borrowed_box)]
fn slot_in(chunks: &[Box<[AtomicUsize; HANDLE_CHUNK]>], idx: u32) -> &AtomicUsize {
    let i = idx as usize;
    &chunks[i / HANDLE_CHUNK][i % HANDLE_CHUNK]
}

#[derive(Clone)]
pub(crate) enum Notify {
    Rust(Arc<dyn Fn() + Send + Sync>),
    C(CNotifyFn, usize),
}

/// The shared part of a [`ReferenceQueue`].
pub(crate) struct QueueInner {
    pub(crate) ready: Mutex<VecDeque<usize>>,
    pub(crate) len: AtomicUsize,
    pub(crate) notify: Mutex<Option<Notify>>,
}

impl QueueInner {
    pub(crate) fn push_all(&self, tokens: Vec<usize>) {
        let mut r = self.ready.lock();
        if r.is_empty() {
            *r = VecDeque::from(tokens); // no copy
        } else {
            r.extend(tokens);
        }
        self.len.store(r.len(), Ordering::Release);
    }

    /// Calls the notification function, if any (outside the stop-the-world).
    pub(crate) fn notify(&self) {
        let n = self.notify.lock().clone();
        match n {
            None => {}
            Some(Notify::Rust(f)) => f(),
            // SAFETY: `set_c_notify`'s caller promised that `f(data)` may be called here.
            Some(Notify::C(f, data)) => unsafe { f(data as *mut c_void) },
        }
    }
}

#[inline]
pub(crate) fn is_old(obj: ObjRef) -> bool {
    // SAFETY: callers only pass objects that are allocated (registered objects and
    // referents stay allocated until a collection finds them dead and drops them).
    unsafe { obj.header_bits() }.is_old()
}
