//! Code extra: the PEP's per-code-object scratch space, for interpreters written in Rust.
//!
//! An interpreter owns one [`ExtraRegistry`]; every code object it creates embeds a
//! [`CodeExtras`] made by [`ExtraRegistry::new_extras`]. A user asks the registry for an
//! index with [`ExtraRegistry::request_code_extra_index`] (PEP 523's
//! `_PyEval_RequestCodeExtraIndex(freefunc)`), giving the function that frees its values;
//! the registry refuses past its capacity `N` with [`ExtraError::Exhausted`].
//!
//! Storage is an inline array of `N` atomic pointers in the code object, so
//! [`ExtraIndex::get`] is one bounds-free array index and one load. Values are boxed; the
//! free function runs when a value is replaced ([`ExtraIndex::replace`], which needs the
//! code object exclusively, so no reference handed out by `get` can be alive) and when the
//! code object is dropped. [`ExtraIndex::get_or_init`] sets a value on a shared code object
//! without ever replacing one, which is what a hook does on a code object's first call.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Errors of the code-extra registry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExtraError {
    /// Every index of the registry is taken.
    #[error("code extra indices exhausted: all {capacity} indices of this interpreter's registry are taken")]
    Exhausted {
        /// The registry's capacity.
        capacity: usize,
    },
}

type FreeFn = Box<dyn Fn(*mut ()) + Send + Sync>;

struct RegistryInner<const N: usize> {
    id: u64,
    used: AtomicUsize,
    /// One free function per requested index (set once, before the index is handed out).
    free: Mutex<Vec<Arc<FreeFn>>>,
    /// Snapshot of `free` readable without the lock when a code object drops.
    free_fast: [AtomicPtr<FreeFn>; N],
}

/// The interpreter-wide registry of code extra indices (one per interpreter, never per
/// thread: Pyjion's per-thread index was a bug, gh-72707).
pub struct ExtraRegistry<const N: usize = 8> {
    inner: Arc<RegistryInner<N>>,
}

impl<const N: usize> Default for ExtraRegistry<N> {
    fn default() -> Self {
        Self::new()
    }
}

static NEXT_REGISTRY: AtomicU64 = AtomicU64::new(1);

impl<const N: usize> ExtraRegistry<N> {
    /// A registry with `N` indices.
    pub fn new() -> Self {
        ExtraRegistry {
            inner: Arc::new(RegistryInner {
                id: NEXT_REGISTRY.fetch_add(1, Ordering::Relaxed),
                used: AtomicUsize::new(0),
                free: Mutex::new(Vec::new()),
                free_fast: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            }),
        }
    }

    /// How many indices this registry can hand out.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// How many indices have been handed out.
    pub fn used(&self) -> usize {
        self.inner.used.load(Ordering::Acquire)
    }

    /// The storage a new code object embeds.
    pub fn new_extras(&self) -> CodeExtras<N> {
        CodeExtras {
            slots: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            skip: SkipMarks::default(),
            registry: self.inner.clone(),
        }
    }

    /// Reserves an index for values of type `T`; `free_fn` receives each value when it is
    /// replaced or when its code object is dropped. Fails with [`ExtraError::Exhausted`]
    /// once all `N` indices are taken.
    pub fn request_code_extra_index<T: Send + Sync + 'static>(
        &self,
        free_fn: impl Fn(T) + Send + Sync + 'static,
    ) -> Result<ExtraIndex<T, N>, ExtraError> {
        let mut free = self.inner.free.lock().unwrap_or_else(|e| e.into_inner());
        let index = free.len();
        if index >= N {
            return Err(ExtraError::Exhausted { capacity: N });
        }
        let erased: FreeFn = Box::new(move |p: *mut ()| {
            // SAFETY: only pointers made by `Box::into_raw(Box<T>)` for this index reach
            // the free function (ExtraIndex<T> is the only writer of this slot).
            let value = unsafe { Box::from_raw(p.cast::<T>()) };
            free_fn(*value);
        });
        let erased = Arc::new(erased);
        self.inner.free_fast[index].store(Arc::as_ptr(&erased).cast_mut(), Ordering::Release);
        free.push(erased);
        self.inner.used.store(index + 1, Ordering::Release);
        Ok(ExtraIndex {
            index,
            registry: self.inner.id,
            _marker: PhantomData,
        })
    }
}

/// Per-hook skip marks of one code object (a bit per installed hook, see
/// [`crate::HookSlot`]).
#[derive(Default, Debug)]
pub struct SkipMarks(AtomicU64);

impl SkipMarks {
    /// Whether any of `bits` is marked.
    #[inline]
    pub fn contains(&self, bits: u64) -> bool {
        self.0.load(Ordering::Relaxed) & bits != 0
    }

    /// Marks `bits`.
    pub fn insert(&self, bits: u64) {
        self.0.fetch_or(bits, Ordering::Relaxed);
    }

    /// Clears `bits`.
    pub fn remove(&self, bits: u64) {
        self.0.fetch_and(!bits, Ordering::Relaxed);
    }
}

/// The scratch space embedded in one code object: `N` value slots and the hooks' skip
/// marks. Dropping it frees every value through its index's free function.
pub struct CodeExtras<const N: usize = 8> {
    slots: [AtomicPtr<()>; N],
    skip: SkipMarks,
    registry: Arc<RegistryInner<N>>,
}

impl<const N: usize> CodeExtras<N> {
    /// The skip marks of this code object.
    pub fn skip_marks(&self) -> &SkipMarks {
        &self.skip
    }
}

impl<const N: usize> std::fmt::Debug for CodeExtras<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self
            .slots
            .iter()
            .filter(|s| !s.load(Ordering::Relaxed).is_null())
            .count();
        f.debug_struct("CodeExtras")
            .field("values_set", &set)
            .field("registry", &self.registry.id)
            .finish()
    }
}

impl<const N: usize> Drop for CodeExtras<N> {
    fn drop(&mut self) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let p = *slot.get_mut();
            if p.is_null() {
                continue;
            }
            let free = self.registry.free_fast[i].load(Ordering::Acquire);
            // SAFETY: a non-null slot means its index was handed out, which published
            // `free_fast[i]` first; the registry (kept alive by our Arc) owns the FreeFn.
            unsafe { (*free)(p) };
        }
    }
}

/// A typed index into every code object's [`CodeExtras`] of one registry.
pub struct ExtraIndex<T, const N: usize = 8> {
    index: usize,
    registry: u64,
    _marker: PhantomData<fn(T) -> T>,
}

impl<T, const N: usize> Clone for ExtraIndex<T, N> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T, const N: usize> Copy for ExtraIndex<T, N> {}

impl<T, const N: usize> std::fmt::Debug for ExtraIndex<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ExtraIndex({})", self.index)
    }
}

impl<T: Send + Sync + 'static, const N: usize> ExtraIndex<T, N> {
    /// The raw index (the PEP's opaque `Py_ssize_t`).
    pub fn index(&self) -> usize {
        self.index
    }

    #[inline]
    fn slot<'c>(&self, extras: &'c CodeExtras<N>) -> &'c AtomicPtr<()> {
        assert_eq!(
            extras.registry.id, self.registry,
            "code extra index {} used with a code object of another interpreter's registry",
            self.index
        );
        // The index is < N by construction (checked at request time).
        &extras.slots[self.index]
    }

    /// The value stored for this index, if any: an array index and a load.
    #[inline]
    pub fn get<'c>(&self, extras: &'c CodeExtras<N>) -> Option<&'c T> {
        let p = self.slot(extras).load(Ordering::Acquire);
        // SAFETY: a non-null pointer in our slot is a live Box<T> that can only be freed
        // by `replace`/`take` (which borrow the extras mutably) or by dropping the
        // extras; both are excluded while `extras` is borrowed.
        unsafe { p.cast::<T>().as_ref() }
    }

    /// The stored value, or `init()` stored now. Never replaces a value: if another
    /// thread stored one first, `init`'s value is freed through the free function and
    /// the winner is returned.
    pub fn get_or_init<'c>(&self, extras: &'c CodeExtras<N>, init: impl FnOnce() -> T) -> &'c T {
        if let Some(v) = self.get(extras) {
            return v;
        }
        let fresh = Box::into_raw(Box::new(init())).cast::<()>();
        let slot = self.slot(extras);
        match slot.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: we just stored `fresh`, a live Box<T>; see `get` for its lifetime.
            Ok(_) => unsafe { &*fresh.cast::<T>() },
            Err(winner) => {
                self.free(extras, fresh);
                // SAFETY: as in `get`.
                unsafe { &*winner.cast::<T>() }
            }
        }
    }

    fn free(&self, extras: &CodeExtras<N>, p: *mut ()) {
        let free = extras.registry.free_fast[self.index].load(Ordering::Acquire);
        // SAFETY: the index was handed out, so its FreeFn is published and owned by the
        // registry; `p` is a Box<T> pointer of this index no one else holds.
        unsafe { (*free)(p) };
    }

    /// Stores `value`, running the free function on the value it replaces. Takes the
    /// code object's extras exclusively: no reference from [`get`](Self::get) can be alive.
    pub fn replace(&self, extras: &mut CodeExtras<N>, value: T) {
        let fresh = Box::into_raw(Box::new(value)).cast::<()>();
        let old = self.slot(extras).swap(fresh, Ordering::AcqRel);
        if !old.is_null() {
            self.free(extras, old);
        }
    }

    /// Removes and returns the value without running the free function.
    pub fn take(&self, extras: &mut CodeExtras<N>) -> Option<T> {
        let old = self
            .slot(extras)
            .swap(std::ptr::null_mut(), Ordering::AcqRel);
        if old.is_null() {
            return None;
        }
        // SAFETY: a non-null slot holds a Box<T> of this index; we own it now.
        Some(*unsafe { Box::from_raw(old.cast::<T>()) })
    }
}
