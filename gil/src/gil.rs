//! [`Gil`]: creating a GIL, attaching threads, the current-thread conveniences
//! (`acquire`, `release`, `poll`, `ensure`), action submission, stop requests,
//! introspection and hooks.

use crate::action::{Action, ActionContext, ActionInner, ActionTarget};
use crate::handle::{EnsureGuard, EnsureState, RegionError, ThreadHandle};
use crate::hooks::GilHooks;
use crate::primitive::{Arc, Ordering, StdArc};
use crate::state::{Shared, ThreadState, F_ACTION, F_STOP, S_BLOCKING, S_DETACHED, S_WAITING};
use crate::{Config, GilError};
use std::marker::PhantomData;

/// A thread's id within one GIL (never 0; not reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct ThreadId(pub(crate) u64);

impl ThreadId {
    /// The id as a number (what the C ABI uses).
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// The id from a number; any number is accepted, lookups report unknown ids.
    pub fn from_u64(id: u64) -> Self {
        ThreadId(id)
    }
}

impl std::fmt::Display for ThreadId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// What an attached thread is doing, as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadStatus {
    /// Running (with or without the GIL; see [`ThreadInfo::holds_gil`]).
    Running,
    /// Queued for the GIL.
    WaitingForGil,
    /// Inside a blocking region.
    Blocking,
    /// Detached.
    Detached,
}

/// A snapshot of one attached thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Its id.
    pub id: ThreadId,
    /// Its name.
    pub name: String,
    /// What it is doing.
    pub status: ThreadStatus,
    /// Whether it holds the GIL.
    pub holds_gil: bool,
}

/// Counters since the GIL was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GilStats {
    /// Direct handoffs from a releaser to a waiter.
    pub handoffs: u64,
    /// Switch (drop) requests made to holders, after an interval or with priority.
    pub switch_requests: u64,
    /// Acquisitions with priority after a blocking region (the convoy-effect fix).
    pub priority_grants: u64,
    /// Safepoint action runs.
    pub actions_run: u64,
}

/// A global interpreter lock. Cheap to clone (all clones are the same GIL). Several
/// GILs may exist in one process (one per interpreter); a thread may attach to several.
#[derive(Clone)]
pub struct Gil {
    pub(crate) shared: Arc<Shared>,
}

impl Default for Gil {
    fn default() -> Self {
        Gil::new()
    }
}

impl std::fmt::Debug for Gil {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gil")
            .field("name", &self.shared.label)
            .field("holder", &self.holder())
            .finish()
    }
}

pub(crate) fn status_of(ts: &ThreadState) -> ThreadStatus {
    match ts.status.load(Ordering::SeqCst) {
        S_WAITING => ThreadStatus::WaitingForGil,
        S_BLOCKING => ThreadStatus::Blocking,
        S_DETACHED => ThreadStatus::Detached,
        _ => ThreadStatus::Running,
    }
}

impl Gil {
    /// A GIL with the default configuration (5 ms switch interval, convoy fix on).
    pub fn new() -> Gil {
        Gil {
            shared: Arc::new(Shared::new(Config::default())),
        }
    }

    /// A GIL with `config` (checked: out-of-range values are an error).
    pub fn with_config(config: Config) -> Result<Gil, GilError> {
        config.validate()?;
        Ok(Gil {
            shared: Arc::new(Shared::new(config)),
        })
    }

    /// The GIL's label.
    pub fn name(&self) -> &str {
        &self.shared.label
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    fn handle(&self, ts: Arc<ThreadState>) -> ThreadHandle {
        ThreadHandle {
            gil: self.clone(),
            ts,
            _not_send: PhantomData,
        }
    }

    pub(crate) fn current_state(&self) -> Option<Arc<ThreadState>> {
        crate::tls::lookup(&self.shared)
    }

    fn not_attached(&self) -> GilError {
        let t = std::thread::current();
        GilError::NotAttached {
            gil: self.shared.label.clone(),
            thread: match t.name() {
                Some(n) => format!("\"{n}\""),
                None => format!("{:?}", t.id()),
            },
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

    /// [`ThreadHandle::release`] for the calling thread.
    pub fn release(&self, acquired: bool) -> Result<(), GilError> {
        if !acquired {
            return Ok(());
        }
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

    /// The thread holding the GIL, if any.
    pub fn holder(&self) -> Option<ThreadId> {
        match self.shared.owner() {
            0 => None,
            id => Some(ThreadId(id)),
        }
    }

    /// Every attached thread.
    pub fn threads(&self) -> Vec<ThreadInfo> {
        let st = self.shared.state.lock();
        st.threads
            .iter()
            .map(|t| ThreadInfo {
                id: t.thread_id(),
                name: t.name.to_string(),
                status: status_of(t),
                holds_gil: self.shared.holds(t),
            })
            .collect()
    }

    /// Number of threads queued for the GIL.
    pub fn waiters(&self) -> usize {
        self.shared.state.lock().waiters()
    }

    /// Counters since creation.
    pub fn stats(&self) -> GilStats {
        let s = &self.shared.stats;
        GilStats {
            handoffs: s.handoffs.get(),
            switch_requests: s.switch_requests.get(),
            priority_grants: s.priority_grants.get(),
            actions_run: s.actions_run.get(),
        }
    }

    /// Installs (or with `None` removes) the embedder's block/unblock hooks.
    ///
    /// ```
    /// use gil::{BlockReason, Gil, GilHooks, ThreadId};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// #[derive(Default)]
    /// struct Blocked(AtomicUsize); // what a GC would count as stopped
    /// impl GilHooks for Blocked {
    ///     fn on_block(&self, _: ThreadId, _: BlockReason) {
    ///         self.0.fetch_add(1, Ordering::SeqCst);
    ///     }
    ///     fn on_unblock(&self, _: ThreadId, _: BlockReason) {
    ///         self.0.fetch_sub(1, Ordering::SeqCst);
    ///     }
    /// }
    /// let gil = Gil::new();
    /// let blocked = Arc::new(Blocked::default());
    /// gil.set_hooks(Some(blocked.clone()));
    /// let h = gil.attach("main")?;
    /// h.allow_threads(|| assert_eq!(blocked.0.load(Ordering::SeqCst), 1))?;
    /// assert_eq!(blocked.0.load(Ordering::SeqCst), 0);
    /// # Ok::<(), gil::GilError>(())
    /// ```
    pub fn set_hooks(&self, hooks: Option<StdArc<dyn GilHooks>>) {
        self.shared.set_hooks(hooks);
    }

    /// Submits a safepoint action: `f` runs once on each target thread at its next
    /// safepoint. A thread holding the GIL runs it at its next `poll()`; a thread
    /// waiting for the GIL is woken and runs it without the GIL; a thread in a blocking
    /// region runs it when the region polls, when its interrupter makes it return, or at
    /// the latest when it leaves the region; an attached thread outside the GIL runs it
    /// when it next takes the GIL. A thread that detaches first skips it. Returns a
    /// handle to wait for it.
    ///
    /// ```
    /// use gil::{ActionTarget, Gil};
    /// use std::time::Duration;
    ///
    /// let gil = Gil::new();
    /// let h = gil.attach("main")?;
    /// let _g = h.lock()?;
    /// let action = gil.submit(ActionTarget::Thread(h.id()), |ctx| {
    ///     assert!(ctx.holds_gil); // the holder runs it at its poll
    /// })?;
    /// h.poll()?;
    /// assert_eq!(action.wait(Duration::from_secs(1))?.ran(), 1);
    /// # Ok::<(), gil::GilError>(())
    /// ```
    pub fn submit<F>(&self, target: ActionTarget, f: F) -> Result<Action, GilError>
    where
        F: Fn(&ActionContext<'_>) + Send + Sync + 'static,
    {
        let st = self.shared.state.lock();
        if self.shared.shut_down.load(Ordering::Acquire) {
            return Err(GilError::AlreadyShutDown {
                gil: self.shared.label.clone(),
            });
        }
        let targets: Vec<Arc<ThreadState>> = match target {
            ActionTarget::AllThreads => st.threads.clone(),
            ActionTarget::Thread(id) => match st.find(id.0) {
                Some(t) => vec![t.clone()],
                None => {
                    return Err(GilError::UnknownThread {
                        gil: self.shared.label.clone(),
                        id: id.0,
                    })
                }
            },
        };
        let mut st = st;
        let id = st.next_action_id;
        st.next_action_id += 1;
        let inner = Arc::new(ActionInner::new(
            id,
            &self.shared.label,
            Box::new(f),
            &targets,
        ));
        for t in &targets {
            t.actions.lock().push(inner.clone());
            t.flags.fetch_or(F_ACTION, Ordering::SeqCst);
        }
        drop(st);
        for t in &targets {
            self.shared.wake(t);
        }
        tracing::debug!(gil = %self.shared.label, action = id, targets = targets.len(), "safepoint action submitted");
        Ok(Action {
            inner,
            gil: self.clone(),
        })
    }

    /// Asks thread `id` to stop: its next `poll`, `acquire` or blocking-region exit
    /// returns [`GilError::Stopped`]; if it waits for the GIL it is woken and leaves the
    /// queue; if it is in an interruptible blocking region it is interrupted.
    pub fn request_stop(&self, id: ThreadId) -> Result<(), GilError> {
        let st = self.shared.state.lock();
        let Some(t) = st.find(id.0).cloned() else {
            return Err(GilError::UnknownThread {
                gil: self.shared.label.clone(),
                id: id.0,
            });
        };
        t.flags.fetch_or(F_STOP, Ordering::SeqCst);
        drop(st);
        self.shared.wake(&t);
        tracing::info!(gil = %self.shared.label, thread = %t.label(), "stop requested");
        Ok(())
    }
}
