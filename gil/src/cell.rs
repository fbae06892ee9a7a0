//! [`GilCell`]: Rust data the GIL protects. Reaching it takes a [`GilGuard`] of the
//! cell's GIL, so only the thread holding the GIL touches it; a borrow flag (as in
//! `RefCell`) turns the cases where a guard cannot keep another borrow out (nested
//! guards, a borrow kept across a `poll` that handed the GIL over) into errors instead of
//! aliasing.

use crate::primitive::{AtomicUsize, Ordering};
use crate::{Gil, GilGuard};
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The borrow flag's value while the cell is borrowed mutably (below it: the number of
/// shared borrows).
const WRITER: usize = usize::MAX;

/// Why a [`GilCell`] borrow was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BorrowError {
    /// The cell is borrowed mutably (by this thread through another guard, or by a
    /// thread that kept the borrow across a switch).
    #[error("the GilCell is already borrowed mutably")]
    BorrowedMut,
    /// The cell is borrowed (shared), so it cannot be borrowed mutably.
    #[error("the GilCell is already borrowed")]
    Borrowed,
    /// The guard is one of another GIL than the cell's.
    #[error("the GilCell belongs to another GIL than the guard's (GIL {gil})")]
    OtherGil {
        /// The guard's GIL.
        gil: String,
    },
    /// The guard's thread does not hold the GIL now: it is inside a blocking region, or
    /// it was detached (or its GIL shut down) while the guard was alive.
    #[error(
        "thread {thread} does not hold GIL {gil} (inside a blocking region, detached or shut down)"
    )]
    NotHeld {
        /// The GIL.
        gil: String,
        /// The guard's thread.
        thread: String,
    },
}

/// A value the GIL protects: borrowing it takes a [`GilGuard`] of the cell's GIL, the
/// proof that the calling thread holds that GIL, and the borrow cannot outlive the guard.
/// It is what a user would otherwise write as an `UnsafeCell` with `unsafe impl Sync`.
///
/// Borrows are checked as in `RefCell`: any number of shared borrows or one mutable
/// one. With one guard at a time a thread never sees a conflict; the check matters for
/// a second (nested) guard of the same thread, and for a borrow kept across
/// [`ThreadHandle::poll`](crate::ThreadHandle::poll) or
/// [`yield_now`](crate::ThreadHandle::yield_now), which may hand the GIL to another
/// thread for a while: that thread's conflicting borrow fails instead of aliasing.
/// [`borrow`](Self::borrow) and [`borrow_mut`](Self::borrow_mut) panic on a refusal,
/// [`try_borrow`](Self::try_borrow) and [`try_borrow_mut`](Self::try_borrow_mut)
/// return it ([`BorrowError`]). Each borrow costs a compare-and-swap on the cell's flag.
///
/// ```
/// use gil::{Gil, GilCell};
///
/// let gil = Gil::new();
/// let log = GilCell::new(&gil, Vec::new());
/// std::thread::scope(|s| {
///     for i in 0..2 {
///         let (gil, log) = (&gil, &log);
///         s.spawn(move || {
///             let h = gil.attach(&format!("w{i}"))?;
///             for _ in 0..100 {
///                 let g = h.lock()?;
///                 log.borrow_mut(&g).push(i);
///                 drop(g);
///                 h.poll()?; // a safepoint; no borrow is alive here
///             }
///             h.detach();
///             Ok::<_, gil::GilError>(())
///         });
///     }
/// });
/// let h = gil.attach("main")?;
/// let g = h.lock()?;
/// assert_eq!(log.borrow(&g).len(), 200);
/// # Ok::<(), gil::GilError>(())
/// ```
///
/// Without a guard there is no way in: being attached is not enough.
///
/// ```compile_fail,E0308
/// let gil = gil::Gil::new();
/// let cell = gil::GilCell::new(&gil, 0u64);
/// let h = gil.attach("main").unwrap();
/// let n = *cell.borrow(&h); // a ThreadHandle is not a GilGuard
/// ```
///
/// A borrow cannot outlive its guard.
///
/// ```compile_fail,E0597
/// let gil = gil::Gil::new();
/// let cell = gil::GilCell::new(&gil, 0u64);
/// let h = gil.attach("main").unwrap();
/// let r = {
///     let g = h.lock().unwrap();
///     cell.borrow(&g)
/// }; // the guard is gone here, the borrow would live on
/// println!("{}", *r);
/// ```
///
/// Another thread cannot use this thread's guard or borrow: it needs a guard of its own.
///
/// ```compile_fail,E0277
/// let gil = gil::Gil::new();
/// let cell = gil::GilCell::new(&gil, 0u64);
/// let h = gil.attach("main").unwrap();
/// let g = h.lock().unwrap();
/// std::thread::scope(|s| {
///     s.spawn(|| *cell.borrow(&g)); // a GilGuard is not Sync
/// });
/// ```
///
/// ```compile_fail,E0277
/// let gil = gil::Gil::new();
/// let cell = gil::GilCell::new(&gil, 0u64);
/// let h = gil.attach("main").unwrap();
/// let g = h.lock().unwrap();
/// let r = cell.borrow(&g);
/// std::thread::scope(|s| {
///     s.spawn(move || *r); // a GilRef is not Send
/// });
/// ```
pub struct GilCell<T: ?Sized> {
    /// The id of the GIL that protects the value.
    gil: u64,
    /// 0: free; `WRITER`: borrowed mutably; else the number of shared borrows.
    borrows: AtomicUsize,
    value: UnsafeCell<T>,
}

// The cell hands `&T` to threads holding its GIL, and a shared borrow may stay alive on
// a thread that handed the GIL over while the next holder borrows too; `&mut T` goes to
// one thread at a time (the flag's compare-and-swap with Acquire, reset with Release).
// SAFETY: two threads with `&T` need `T: Sync`, `&mut T` passed between threads needs
// `T: Send`: the bounds of `RwLock<T>`.
unsafe impl<T: ?Sized + Send + Sync> Sync for GilCell<T> {}

impl<T> GilCell<T> {
    /// A cell holding `value`, protected by `gil`.
    pub fn new(gil: &Gil, value: T) -> Self {
        GilCell {
            gil: gil.shared.id,
            borrows: AtomicUsize::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// The value (the cell is owned: nobody can borrow it).
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: ?Sized> GilCell<T> {
    /// The value, through exclusive access to the cell (no GIL needed: nobody else can
    /// reach it).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// Whether `gil` is the GIL protecting this cell.
    pub fn is_protected_by(&self, gil: &Gil) -> bool {
        self.gil == gil.shared.id
    }

    /// The value, shared, while `guard` lives. Panics if the cell is borrowed mutably or
    /// the guard does not prove the GIL is held (see [`try_borrow`](Self::try_borrow)).
    #[track_caller]
    pub fn borrow<'g>(&'g self, guard: &'g GilGuard<'_>) -> GilRef<'g, T> {
        match self.try_borrow(guard) {
            Ok(r) => r,
            Err(e) => panic!("GilCell::borrow: {e}"),
        }
    }

    /// The value, exclusively, while `guard` lives. Panics if the cell is borrowed or
    /// the guard does not prove the GIL is held (see
    /// [`try_borrow_mut`](Self::try_borrow_mut)).
    #[track_caller]
    pub fn borrow_mut<'g>(&'g self, guard: &'g GilGuard<'_>) -> GilRefMut<'g, T> {
        match self.try_borrow_mut(guard) {
            Ok(r) => r,
            Err(e) => panic!("GilCell::borrow_mut: {e}"),
        }
    }

    /// [`borrow`](Self::borrow), with the refusal as a value: the guard is of another
    /// GIL, its thread does not hold the GIL now, or the cell is borrowed mutably.
    pub fn try_borrow<'g>(&'g self, guard: &'g GilGuard<'_>) -> Result<GilRef<'g, T>, BorrowError> {
        self.check(guard)?;
        let mut n = self.borrows.load(Ordering::Relaxed);
        loop {
            if n == WRITER {
                return Err(BorrowError::BorrowedMut);
            }
            assert!(n < WRITER - 1, "GilCell: too many shared borrows");
            match self
                .borrows
                .compare_exchange(n, n + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(seen) => n = seen,
            }
        }
        Ok(GilRef {
            // SAFETY: the pointer of the cell's own UnsafeCell, never null.
            value: unsafe { NonNull::new_unchecked(self.value.get()) },
            borrows: &self.borrows,
            _not_send: PhantomData,
        })
    }

    /// [`borrow_mut`](Self::borrow_mut), with the refusal as a value: the guard is of
    /// another GIL, its thread does not hold the GIL now, or the cell is borrowed.
    pub fn try_borrow_mut<'g>(
        &'g self,
        guard: &'g GilGuard<'_>,
    ) -> Result<GilRefMut<'g, T>, BorrowError> {
        self.check(guard)?;
        match self
            .borrows
            .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Ok(GilRefMut {
                // SAFETY: the pointer of the cell's own UnsafeCell, never null.
                value: unsafe { NonNull::new_unchecked(self.value.get()) },
                borrows: &self.borrows,
                _marker: PhantomData,
            }),
            Err(WRITER) => Err(BorrowError::BorrowedMut),
            Err(_) => Err(BorrowError::Borrowed),
        }
    }

    /// The guard is of this cell's GIL and its thread holds that GIL now.
    fn check(&self, guard: &GilGuard<'_>) -> Result<(), BorrowError> {
        let h = guard.handle();
        let shared = &h.gil.shared;
        if shared.id != self.gil {
            return Err(BorrowError::OtherGil {
                gil: shared.label.clone(),
            });
        }
        if !shared.holds(&h.ts) {
            return Err(BorrowError::NotHeld {
                gil: shared.label.clone(),
                thread: h.ts.label(),
            });
        }
        Ok(())
    }
}

impl<T: ?Sized> std::fmt::Debug for GilCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The value is only readable with a guard.
        f.debug_struct("GilCell").finish_non_exhaustive()
    }
}

/// A shared borrow of a [`GilCell`]'s value ([`GilCell::borrow`]); bound to its thread.
pub struct GilRef<'g, T: ?Sized> {
    value: NonNull<T>,
    borrows: &'g AtomicUsize,
    /// Not `Send` (the borrow stays with the thread whose guard allowed it); the value
    /// is borrowed for 'g.
    _not_send: PhantomData<(&'g T, *const ())>,
}

impl<T: ?Sized> Deref for GilRef<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the cell's flag counts this shared borrow, which keeps every mutable
        // borrow out until it is dropped; the value lives for 'g.
        unsafe { self.value.as_ref() }
    }
}

impl<T: ?Sized> Drop for GilRef<'_, T> {
    fn drop(&mut self) {
        self.borrows.fetch_sub(1, Ordering::Release);
    }
}

impl<T: ?Sized + std::fmt::Debug> std::fmt::Debug for GilRef<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// A mutable borrow of a [`GilCell`]'s value ([`GilCell::borrow_mut`]); bound to its
/// thread.
pub struct GilRefMut<'g, T: ?Sized> {
    value: NonNull<T>,
    borrows: &'g AtomicUsize,
    /// Not `Send`; the value is borrowed exclusively for 'g.
    _marker: PhantomData<(&'g mut T, *const ())>,
}

impl<T: ?Sized> Deref for GilRefMut<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the cell's flag is WRITER for this borrow alone until it is dropped.
        unsafe { self.value.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for GilRefMut<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference handed out.
        unsafe { self.value.as_mut() }
    }
}

impl<T: ?Sized> Drop for GilRefMut<'_, T> {
    fn drop(&mut self) {
        self.borrows.store(0, Ordering::Release);
    }
}

impl<T: ?Sized + std::fmt::Debug> std::fmt::Debug for GilRefMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}
