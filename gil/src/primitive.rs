//! Synchronisation primitives behind one interface: `std` atomics and `parking_lot`
//! locks in normal builds, `loom`'s model-checked versions under `cfg(loom)`.
//!
//! Everything in the crate that is shared between threads goes through this module (no
//! other file names `std::sync`), so the loom models in `loom_tests` exercise the real
//! acquire/release, handoff, region, hook and action-delivery code. Under loom, timed
//! waits ignore their deadline (loom has no clock): models configure no switch interval
//! and no spinning. Three things stay `std` under loom, on purpose: [`StdArc`] (values
//! the public API takes or gives: hooks, interrupters, and immutable thread names),
//! [`Counter`] (statistics nobody synchronises on) and [`next_gil_id`] (a process-wide
//! id counter).

use std::time::Instant;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU8, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU8, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;

pub(crate) use std::sync::atomic::Ordering;

/// `std::sync::Arc` in every build: for what the public API takes or hands out (hooks,
/// interrupters) and immutable shared data (thread names). Sharing these is no part of
/// the protocol the models check; the GIL's own shared state uses [`Arc`].
pub(crate) use std::sync::Arc as StdArc;

/// A statistics counter (relaxed adds and loads): never read by the protocol, so it is
/// `std` under loom too, where it adds no interleavings.
#[derive(Default)]
pub(crate) struct Counter(std::sync::atomic::AtomicU64);

impl Counter {
    /// Adds one.
    #[inline]
    pub(crate) fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// The count.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A process-unique GIL id (never 0): keys the per-thread registry and ties a
/// `GilCell` to its GIL.
pub(crate) fn next_gil_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A mutex whose `lock` never fails (poisoning is not meaningful for the GIL's short
/// critical sections, which never run user code).
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

/// The guard returned by [`Mutex::lock`].
#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
/// The guard returned by [`Mutex::lock`].
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    /// A new unlocked mutex holding `value`.
    pub(crate) fn new(value: T) -> Self {
        Mutex {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    /// Locks the mutex, blocking until it is free.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(not(loom))]
        {
            self.inner.lock()
        }
        #[cfg(loom)]
        {
            self.inner.lock().unwrap_or_else(|e| e.into_inner())
        }
    }
}

/// A condition variable paired with [`Mutex`].
pub(crate) struct Condvar {
    #[cfg(not(loom))]
    inner: parking_lot::Condvar,
    #[cfg(loom)]
    inner: loom::sync::Condvar,
}

impl Condvar {
    /// A new condition variable.
    pub(crate) fn new() -> Self {
        Condvar {
            #[cfg(not(loom))]
            inner: parking_lot::Condvar::new(),
            #[cfg(loom)]
            inner: loom::sync::Condvar::new(),
        }
    }

    /// Waits for a notification or until `deadline` (ignored under loom); may wake
    /// spuriously, so callers re-check their condition.
    pub(crate) fn wait_until<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Option<Instant>,
    ) -> MutexGuard<'a, T> {
        #[cfg(not(loom))]
        {
            let mut guard = guard;
            match deadline {
                Some(d) => {
                    self.inner.wait_until(&mut guard, d);
                }
                None => self.inner.wait(&mut guard),
            }
            guard
        }
        #[cfg(loom)]
        {
            let _ = deadline;
            self.inner.wait(guard).unwrap_or_else(|e| e.into_inner())
        }
    }

    /// Wakes every waiter.
    pub(crate) fn notify_all(&self) {
        self.inner.notify_all();
    }

    /// Wakes one waiter.
    pub(crate) fn notify_one(&self) {
        self.inner.notify_one();
    }
}

/// A one-thread parking spot: `park` returns after an `unpark` (a token that is
/// consumed), at the deadline, or spuriously.
pub(crate) struct Parker {
    notified: Mutex<bool>,
    cv: Condvar,
}

impl Parker {
    /// A parker with no pending token.
    pub(crate) fn new() -> Self {
        Parker {
            notified: Mutex::new(false),
            cv: Condvar::new(),
        }
    }

    /// Blocks until unparked or until `deadline`; consumes the token.
    pub(crate) fn park(&self, deadline: Option<Instant>) {
        let mut notified = self.notified.lock();
        if !*notified {
            if let Some(d) = deadline {
                if Instant::now() >= d {
                    return;
                }
            }
            notified = self.cv.wait_until(notified, deadline);
        }
        *notified = false;
    }

    /// Leaves a token and wakes the parked thread, if any.
    pub(crate) fn unpark(&self) {
        let mut notified = self.notified.lock();
        *notified = true;
        drop(notified);
        self.cv.notify_one();
    }
}

/// A hint inside a spin loop (a `thread::yield_now` under loom, which needs a yield
/// point to make progress).
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Gives the core to another runnable thread, if any.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(not(loom))]
    std::thread::yield_now();
    #[cfg(loom)]
    loom::thread::yield_now();
}
