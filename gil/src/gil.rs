//! [`Gil`]: creating a GIL, action submission (and the [`Action`] handle), stop
//! requests, introspection and hooks. What a thread does with the GIL (attaching,
//! `acquire`, `release`, `poll`, `ensure`, guards) is in `handle.rs`, above this module;
//! shutdown and spawning are in theirs.

use crate::action::{ActionContext, ActionInner, ActionReport, ActionTarget};
use crate::config::Config;
use crate::error::GilError;
use crate::hooks::GilHooks;
use crate::primitive::{Arc, Ordering, StdArc};
use crate::state::{Shared, ThreadState, F_ACTION, F_STOP};
use crate::thread::{ThreadId, ThreadInfo};
use std::time::Duration;

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
///
/// Its methods are in four files of the crate's source: `gil.rs` (creation, `submit`,
/// `request_stop`, introspection, hooks) and, in the modules above it, `handle.rs` (what
/// the calling thread does: `attach`, `current`, `acquire`, `release`, `poll`,
/// `allow_threads`, `ensure`), `shutdown.rs` (`shutdown`) and `spawn.rs` (`spawn`).
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

    pub(crate) fn current_state(&self) -> Option<Arc<ThreadState>> {
        crate::tls::lookup(&self.shared)
    }

    /// The error of a call that needs the calling thread attached.
    pub(crate) fn not_attached(&self) -> GilError {
        let t = std::thread::current();
        GilError::NotAttached {
            gil: self.shared.label.clone(),
            thread: match t.name() {
                Some(n) => format!("\"{n}\""),
                None => format!("{:?}", t.id()),
            },
        }
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
                status: t.status(),
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
            targets.iter().map(|t| (t.thread_id(), t.name.clone())),
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

/// A submitted action: wait for it, or look at its progress. Dropping it does not
/// cancel the action.
pub struct Action {
    inner: Arc<ActionInner>,
    /// The GIL, so `wait` can run the caller's own pending actions (the caller may be a
    /// target).
    gil: Gil,
}

impl Action {
    /// The action's sequence number.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Whether every target has run or skipped it.
    pub fn is_complete(&self) -> bool {
        self.inner.is_complete()
    }

    /// Progress so far.
    pub fn report(&self) -> ActionReport {
        self.inner.report()
    }

    /// Waits until every target has run (or skipped) the action, at most `timeout`. The
    /// waiting thread is itself at a safepoint: if it is attached and a target, it runs
    /// its pending actions first.
    pub fn wait(&self, timeout: Duration) -> Result<ActionReport, GilError> {
        if let Some(me) = self.gil.current_state() {
            if me.flags.load(Ordering::Acquire) & F_ACTION != 0 {
                let holds = self.gil.shared.holds(&me);
                self.gil.shared.run_actions(&me, holds);
            }
        }
        self.inner.wait(timeout)
    }
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Action")
            .field("id", &self.inner.id)
            .field("complete", &self.is_complete())
            .finish()
    }
}
