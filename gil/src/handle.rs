//! The per-thread API: a [`ThreadHandle`] is what an attached thread uses to take, drop
//! and poll the GIL without a thread-local lookup, and the guards built on it; and the
//! [`Gil`] methods that act on the calling thread (attach, `ensure`, the thread-local
//! conveniences `acquire`, `release`, `poll`, `allow_threads`), which make or use them.

use crate::error::GilError;
use crate::gil::Gil;
use crate::primitive::{Arc, Ordering, StdArc};
use crate::state::{Interrupter, ThreadState, F_STOP};
use crate::thread::ThreadId;
use std::marker::PhantomData;

/// The calling thread's side of a [`Gil`].
impl Gil {
    fn handle(&self, ts: Arc<ThreadState>) -> ThreadHandle {
        ThreadHandle {
            gil: self.clone(),
            ts,
            _not_send: PhantomData,
        }
    }

    /// Attaches the calling thread under `name`. The thread does not hold the GIL yet.
    /// It stays attached until [`ThreadHandle::detach`] or its exit.
    pub fn attach(&self, name: &str) -> Result<ThreadHandle, GilError> {
        if let Some(ts) = self.current_state() {
            return Err(GilError::AlreadyAttached {
                gil: self.shared.label.clone(),
                thread: ts.label(),
            });
        }
        let ts = self.shared.attach(name.to_string())?;
        crate::tls::insert(&self.shared, &ts);
        Ok(self.handle(ts))
    }

    /// The calling thread's handle, if it is attached.
    pub fn current(&self) -> Option<ThreadHandle> {
        self.current_state().map(|ts| self.handle(ts))
    }

    /// [`ThreadHandle::acquire`] for the calling thread (which must be attached).
    pub fn acquire(&self) -> Result<bool, GilError> {
        let ts = self.current_state().ok_or_else(|| self.not_attached())?;
        self.shared.acquire(&ts)
    }

    /// [`ThreadHandle::release`] for the calling thread (which must be attached, whatever
    /// `acquired` says: [`GilError::NotAttached`] otherwise, as for
    /// [`Gil::acquire`]).
    pub fn release(&self, acquired: bool) -> Result<(), GilError> {
        let ts = self.current_state().ok_or_else(|| self.not_attached())?;
        self.shared.release(&ts, acquired)
    }

    /// [`ThreadHandle::poll`] for the calling thread (one thread-local lookup more).
    pub fn poll(&self) -> Result<(), GilError> {
        let ts = self.current_state().ok_or_else(|| self.not_attached())?;
        if ts.flags.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        self.shared.poll_slow(&ts)
    }

    /// [`ThreadHandle::allow_threads`] for the calling thread.
    pub fn allow_threads<R>(&self, f: impl FnOnce() -> R) -> Result<R, RegionError<R>> {
        match self.current() {
            Some(h) => h.allow_threads(f),
            None => Err(RegionError {
                error: self.not_attached(),
                value: None,
            }),
        }
    }

    /// Takes the GIL from any thread, attaching it first if needed (threads the runtime
    /// did not create, C threads): `PyGILState_Ensure`. Undo with
    /// [`ensure_release`](Self::ensure_release). Nested calls are fine.
    pub fn ensure_raw(&self) -> Result<EnsureState, GilError> {
        let (ts, attached) = match self.current_state() {
            Some(ts) => (ts, false),
            None => {
                let t = std::thread::current();
                let name = match t.name() {
                    Some(n) => n.to_string(),
                    None => format!("foreign {:?}", t.id()),
                };
                let ts = self.shared.attach(name)?;
                crate::tls::insert(&self.shared, &ts);
                (ts, true)
            }
        };
        match self.shared.acquire(&ts) {
            Ok(acquired) => Ok(EnsureState { acquired, attached }),
            Err(e) => {
                if attached {
                    crate::tls::remove(&self.shared);
                    self.shared.detach(&ts);
                }
                Err(e)
            }
        }
    }

    /// Undoes [`ensure_raw`](Self::ensure_raw): releases if it acquired, detaches if it
    /// attached.
    pub fn ensure_release(&self, state: EnsureState) -> Result<(), GilError> {
        let ts = self.current_state().ok_or_else(|| self.not_attached())?;
        let result = self.shared.release(&ts, state.acquired);
        if state.attached {
            crate::tls::remove(&self.shared);
            self.shared.detach(&ts);
        }
        result
    }

    /// [`ensure_raw`](Self::ensure_raw) as a guard (it counts as a guard of its thread,
    /// like [`GilGuard`](crate::GilGuard)).
    ///
    /// ```
    /// let gil = gil::Gil::new();
    /// let g = gil.clone();
    /// std::thread::spawn(move || {
    ///     // a thread the runtime did not create
    ///     let e = g.ensure().unwrap();
    ///     assert!(e.state().attached && e.handle().holds_gil());
    ///     e.release().unwrap(); // releases and detaches
    ///     assert!(g.current().is_none());
    /// })
    /// .join()
    /// .unwrap();
    /// ```
    pub fn ensure(&self) -> Result<EnsureGuard, GilError> {
        let state = self.ensure_raw()?;
        let ts = self
            .current_state()
            .expect("ensure_raw attached the calling thread");
        self.shared.guard_enter(&ts);
        Ok(EnsureGuard {
            handle: self.handle(ts),
            state,
            done: false,
        })
    }
}

/// An attached thread's access to the GIL. Obtained from [`Gil::attach`] or
/// [`Gil::current`]; cheap to clone; bound to its thread (not `Send`). Dropping handles
/// does not detach: [`ThreadHandle::detach`] or the thread's exit does.
#[derive(Clone)]
pub struct ThreadHandle {
    pub(crate) gil: Gil,
    pub(crate) ts: Arc<ThreadState>,
    pub(crate) _not_send: PhantomData<*const ()>,
}

impl ThreadHandle {
    /// This thread's id within its GIL.
    pub fn id(&self) -> ThreadId {
        self.ts.thread_id()
    }

    /// The name given at attach time.
    pub fn name(&self) -> &str {
        &self.ts.name
    }

    /// The GIL this handle belongs to.
    pub fn gil(&self) -> &Gil {
        &self.gil
    }

    /// Takes the GIL: `Ok(true)` if this call took it, `Ok(false)` if the thread already
    /// held it (never deadlocks on itself). Pass the result to [`release`](Self::release).
    /// Errors if the thread was stopped or the GIL shut down, inside a blocking
    /// region ([`GilError::InsideRegion`]) and inside an embedder hook
    /// ([`GilError::InsideHook`], even where the thread holds the GIL).
    ///
    /// ```
    /// let gil = gil::Gil::new();
    /// let h = gil.attach("main")?;
    /// let acquired = h.acquire()?; // true: this call took it
    /// let again = h.acquire()?; // false: the thread already held it
    /// h.release(again)?; // a no-op
    /// assert!(h.holds_gil());
    /// h.release(acquired)?;
    /// assert!(!h.holds_gil());
    /// # Ok::<(), gil::GilError>(())
    /// ```
    #[inline]
    pub fn acquire(&self) -> Result<bool, GilError> {
        self.gil.shared.acquire(&self.ts)
    }

    /// Releases the GIL if `acquired` (what [`acquire`](Self::acquire) returned); with
    /// waiters it goes straight to the next one. Releasing a GIL the thread does not hold
    /// is an error ([`GilError::NotHolder`]), except after a stop or shutdown took it.
    /// While a guard of the thread ([`lock`](Self::lock), [`Gil::ensure`]) is alive the
    /// release is deferred to the last guard, which releases the GIL when it goes.
    #[inline]
    pub fn release(&self, acquired: bool) -> Result<(), GilError> {
        self.gil.shared.release(&self.ts, acquired)
    }

    /// Takes the GIL for the guard's lifetime: while any guard of the thread is alive the
    /// thread holds the GIL. Guards may nest and go in any order: the GIL is released
    /// when the last of them goes (if one of them, or a raw [`acquire`](Self::acquire)
    /// whose [`release`](Self::release) came meanwhile, took it). Use
    /// [`GilGuard::release`] instead of dropping to see a release error.
    ///
    /// ```
    /// let gil = gil::Gil::new();
    /// let h = gil.attach("main")?;
    /// let outer = h.lock()?;
    /// let inner = h.lock()?;
    /// drop(outer); // the inner guard is alive: the GIL stays held
    /// assert!(h.holds_gil());
    /// inner.release()?; // the last guard releases it
    /// assert!(!h.holds_gil());
    /// # Ok::<(), gil::GilError>(())
    /// ```
    pub fn lock(&self) -> Result<GilGuard<'_>, GilError> {
        let acquired = self.acquire()?;
        self.gil.shared.guard_enter(&self.ts);
        Ok(GilGuard {
            handle: self,
            acquired,
            done: false,
        })
    }

    /// A safepoint: one relaxed load when nothing is pending. Otherwise runs pending
    /// actions, honours a switch request (hands the GIL to a waiter and queues for it
    /// again), and returns an error if the thread was asked to stop or the GIL shut down
    /// (the thread should then unwind and release what it holds).
    #[inline]
    pub fn poll(&self) -> Result<(), GilError> {
        if self.ts.flags.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        self.gil.shared.poll_slow(&self.ts)
    }

    /// Whether this thread holds the GIL now.
    pub fn holds_gil(&self) -> bool {
        self.gil.shared.holds(&self.ts)
    }

    /// A voluntary switch: if threads wait, hand the GIL to the next one and queue behind
    /// them; otherwise keep it. Requires holding the GIL.
    pub fn yield_now(&self) -> Result<(), GilError> {
        if !self.holds_gil() {
            return Err(GilError::NotHolder {
                gil: self.gil.shared.label.clone(),
                thread: self.ts.label(),
                holder: match self.gil.shared.owner() {
                    0 => "nobody".into(),
                    id => format!("#{id}"),
                },
            });
        }
        self.gil.shared.yield_gil(&self.ts)
    }

    /// Runs `f` in a blocking region: the GIL is released (if held) for its duration and
    /// re-taken after it, with priority over CPU-bound threads (the convoy-effect fix).
    /// Inside, `f` must not touch state the GIL protects; it may call
    /// [`poll`](Self::poll) to run pending actions. Actions still pending when `f`
    /// returns run before the GIL is re-taken. If `f` panics the GIL is re-taken before
    /// the panic continues. Inside, taking the GIL or a second region is refused
    /// ([`GilError::InsideRegion`]); a guard of the thread that goes inside ends its hold
    /// there (the GIL is then not re-taken for it).
    ///
    /// ```
    /// let gil = gil::Gil::new();
    /// let h = gil.attach("main")?;
    /// let _g = h.lock()?;
    /// let n = h.allow_threads(|| {
    ///     std::thread::sleep(std::time::Duration::from_millis(1)); // I/O, a lock, ...
    ///     42
    /// })?;
    /// assert!(n == 42 && h.holds_gil());
    /// # Ok::<(), gil::GilError>(())
    /// ```
    pub fn allow_threads<R>(&self, f: impl FnOnce() -> R) -> Result<R, RegionError<R>> {
        self.region(None, f)
    }

    /// Like [`allow_threads`](Self::allow_threads), with an interrupter: called (from
    /// another thread) when an action or a stop request is submitted for this thread
    /// while it is inside the region, so that `f` can return early (for example by
    /// writing to a pipe `f` polls, or signalling a condition variable it waits on).
    /// The interrupter runs on the submitting thread, may run more than once, and may
    /// run just after the region ended: it must be harmless then.
    pub fn allow_threads_interruptible<R>(
        &self,
        interrupt: impl Fn() + Send + Sync + 'static,
        f: impl FnOnce() -> R,
    ) -> Result<R, RegionError<R>> {
        self.region(Some(StdArc::new(interrupt)), f)
    }

    /// Enters a blocking region, the split-phase form of
    /// [`allow_threads`](Self::allow_threads): the GIL is released (if held) until the
    /// returned token's [`leave`](BlockingRegion::leave) (or drop) re-takes it, with
    /// priority. In between the thread is reported blocked (hooks: `on_block` now,
    /// `on_unblock` at leave) and must not touch what the GIL protects; taking the GIL
    /// or entering a second region is refused ([`GilError::InsideRegion`]).
    ///
    /// ```
    /// let gil = gil::Gil::new();
    /// let h = gil.attach("main")?;
    /// let g = h.lock()?;
    /// let region = h.enter_blocking()?; // Py_BEGIN_ALLOW_THREADS
    /// assert!(!h.holds_gil());
    /// std::thread::sleep(std::time::Duration::from_millis(1)); // blocking work
    /// region.leave()?; // Py_END_ALLOW_THREADS
    /// assert!(h.holds_gil());
    /// # drop(g);
    /// # Ok::<(), gil::GilError>(())
    /// ```
    pub fn enter_blocking(&self) -> Result<BlockingRegion<'_>, GilError> {
        self.enter(None)
    }

    /// [`enter_blocking`](Self::enter_blocking) with an interrupter, as in
    /// [`allow_threads_interruptible`](Self::allow_threads_interruptible).
    pub fn enter_blocking_interruptible(
        &self,
        interrupt: impl Fn() + Send + Sync + 'static,
    ) -> Result<BlockingRegion<'_>, GilError> {
        self.enter(Some(StdArc::new(interrupt)))
    }

    /// The blocking region this thread is in, as a token again: for a layer (a C ABI)
    /// whose region outlives the token it got from
    /// [`enter_blocking`](Self::enter_blocking) (see [`BlockingRegion::keep_open`]).
    /// [`GilError::NotInRegion`] if the thread is in none.
    pub fn current_region(&self) -> Result<BlockingRegion<'_>, GilError> {
        self.gil.shared.region_state(&self.ts)?;
        Ok(BlockingRegion {
            handle: self,
            done: false,
        })
    }

    fn enter(&self, interrupter: Option<Interrupter>) -> Result<BlockingRegion<'_>, GilError> {
        self.gil.shared.enter_blocking(&self.ts, interrupter)?;
        Ok(BlockingRegion {
            handle: self,
            done: false,
        })
    }

    fn region<R>(
        &self,
        interrupter: Option<Interrupter>,
        f: impl FnOnce() -> R,
    ) -> Result<R, RegionError<R>> {
        let region = self
            .enter(interrupter)
            .map_err(|error| RegionError { error, value: None })?;
        // If `f` unwinds, dropping the token re-takes the GIL.
        let value = f();
        match region.leave() {
            Ok(()) => Ok(value),
            Err(error) => Err(RegionError {
                error,
                value: Some(value),
            }),
        }
    }

    /// Whether a stop was requested for this thread (its next `poll` returns an error).
    pub fn is_stop_requested(&self) -> bool {
        self.ts.flags.load(Ordering::Relaxed) & F_STOP != 0
    }

    /// Detaches the thread: releases the GIL if held, skips its pending actions, and
    /// invalidates every handle of it.
    pub fn detach(self) {
        crate::tls::remove(&self.gil.shared);
        self.gil.shared.detach(&self.ts);
    }
}

impl std::fmt::Debug for ThreadHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadHandle")
            .field("gil", &self.gil.shared.label)
            .field("thread", &self.ts.label())
            .finish()
    }
}

/// A blocking region the thread is in ([`ThreadHandle::enter_blocking`]): leaving it
/// ([`leave`](Self::leave), or dropping the token, which logs an error it cannot return)
/// runs pending actions and re-takes the GIL if it was held at entry. Bound to its
/// thread. A guard of the thread that goes inside the region ends its hold there: the
/// region then does not re-take the GIL for it.
#[must_use = "dropping the token leaves the region at once"]
pub struct BlockingRegion<'a> {
    handle: &'a ThreadHandle,
    done: bool,
}

impl BlockingRegion<'_> {
    /// Whether leaving re-takes the GIL (it was held at entry and is still wanted).
    pub fn held_gil(&self) -> bool {
        self.handle
            .gil
            .shared
            .region_state(&self.handle.ts)
            .unwrap_or(false)
    }

    /// Leaves the region: runs the actions still pending (without the GIL), then re-takes
    /// the GIL if [`held_gil`](Self::held_gil). Errors if the thread was stopped or the
    /// GIL shut down meanwhile (the GIL is then not re-taken).
    pub fn leave(mut self) -> Result<(), GilError> {
        self.done = true;
        self.handle.gil.shared.leave_blocking(&self.handle.ts)
    }

    /// Ends this token without leaving: the thread stays in the region until a token
    /// from [`ThreadHandle::current_region`] leaves it. For a layer whose region spans
    /// calls (the C ABI's `gil_blocking_enter` / `gil_blocking_leave`).
    pub fn keep_open(mut self) {
        self.done = true;
    }
}

impl Drop for BlockingRegion<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Err(e) = self.handle.gil.shared.leave_blocking(&self.handle.ts) {
            if std::thread::panicking() {
                tracing::debug!(error = %e, "leaving a blocking region while unwinding");
            } else {
                tracing::error!(error = %e, "leaving a blocking region from its token's drop failed (use BlockingRegion::leave to see the error)");
            }
        }
    }
}

impl std::fmt::Debug for BlockingRegion<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingRegion")
            .field("thread", &self.handle.ts.label())
            .field("held_gil", &self.held_gil())
            .finish()
    }
}

/// A blocking region that could not be entered, or whose thread was stopped or shut down
/// while inside (the GIL was then not re-taken). `value` is `f`'s result if it ran.
#[derive(Debug)]
pub struct RegionError<R> {
    /// Why.
    pub error: GilError,
    /// The region's result, if the region ran.
    pub value: Option<R>,
}

impl<R> std::fmt::Display for RegionError<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.value {
            Some(_) => write!(f, "blocking region ran, GIL not re-taken: {}", self.error),
            None => write!(f, "blocking region not entered: {}", self.error),
        }
    }
}

impl<R: std::fmt::Debug> std::error::Error for RegionError<R> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<R> From<RegionError<R>> for GilError {
    fn from(e: RegionError<R>) -> Self {
        e.error
    }
}

/// Holds the GIL while alive ([`ThreadHandle::lock`]). Guards are bound to their thread
/// (neither `Send` nor `Sync`) and counted per thread: whatever order they go in, the
/// GIL is released when the thread's last guard goes, so a live guard means the thread
/// holds the GIL. Two exceptions, both on the thread itself: inside a blocking region
/// ([`ThreadHandle::allow_threads`]) and while a `poll` or `yield_now` has handed the GIL
/// to another thread; a [`GilCell`](crate::GilCell) borrow checks that its thread holds
/// the GIL. Detaching the thread (or shutting the GIL down from it) ends the hold of its
/// live guards.
pub struct GilGuard<'a> {
    handle: &'a ThreadHandle,
    acquired: bool,
    done: bool,
}

impl GilGuard<'_> {
    /// Whether the `lock` call that made this guard took the GIL (false if the thread
    /// already held it).
    pub fn acquired(&self) -> bool {
        self.acquired
    }

    /// The handle of the guard's thread.
    pub fn handle(&self) -> &ThreadHandle {
        self.handle
    }

    /// Drops the guard and reports what dropping would only log: releasing the GIL
    /// (when this is the thread's last guard and the GIL was taken by it or by an
    /// acquisition released meanwhile) can fail, e.g. with [`GilError::InsideAction`].
    pub fn release(mut self) -> Result<(), GilError> {
        self.done = true;
        self.handle
            .gil
            .shared
            .guard_exit(&self.handle.ts, self.acquired)
    }
}

impl Drop for GilGuard<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Err(e) = self
            .handle
            .gil
            .shared
            .guard_exit(&self.handle.ts, self.acquired)
        {
            tracing::error!(error = %e, "releasing the GIL from a guard failed (use GilGuard::release to see the error)");
        }
    }
}

/// What [`Gil::ensure_raw`] did, to undo it with [`Gil::ensure_release`]
/// (`PyGILState_STATE`'s counterpart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnsureState {
    /// The call took the GIL.
    pub acquired: bool,
    /// The call attached the thread.
    pub attached: bool,
}

/// Holds the GIL for a thread that may not have been attached before (`ensure`); on
/// drop, releases it and detaches the thread if `ensure` attached it. It counts as a
/// guard of its thread, like [`GilGuard`] (the GIL is released when the thread's last
/// guard goes).
pub struct EnsureGuard {
    pub(crate) handle: ThreadHandle,
    pub(crate) state: EnsureState,
    pub(crate) done: bool,
}

impl EnsureGuard {
    /// The handle of the (now attached) thread.
    pub fn handle(&self) -> &ThreadHandle {
        &self.handle
    }

    /// What `ensure` did.
    pub fn state(&self) -> EnsureState {
        self.state
    }

    /// Drops the guard and reports what dropping would only log (see
    /// [`GilGuard::release`]).
    pub fn release(mut self) -> Result<(), GilError> {
        self.done = true;
        self.finish()
    }

    fn finish(&self) -> Result<(), GilError> {
        let shared = &self.handle.gil.shared;
        let result = shared.guard_exit(&self.handle.ts, self.state.acquired);
        if self.state.attached {
            crate::tls::remove(shared);
            shared.detach(&self.handle.ts);
        }
        result
    }
}

impl Drop for EnsureGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Err(e) = self.finish() {
            tracing::error!(error = %e, "releasing an ensure guard failed (use EnsureGuard::release to see the error)");
        }
    }
}
