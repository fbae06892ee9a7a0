//! Safepoint actions: closures run on one thread or on every attached thread at their
//! next safepoint. A thread holding the GIL runs them at its next `poll()`; a thread
//! waiting for the GIL is woken and runs them without taking the GIL; a thread inside a
//! blocking region runs them when the region calls `poll()`, when its interrupter makes
//! it return, or at the latest when it leaves the region (before re-taking the GIL).
//!
//! This module holds what the state machine needs (the action record a target runs or
//! skips, and the values describing it); [`Gil::submit`](crate::Gil::submit) and the
//! [`Action`](crate::Action) handle it returns are in `gil.rs`, above the state machine.

use crate::error::GilError;
use crate::primitive::{Condvar, Mutex, StdArc};
use crate::thread::ThreadId;
use std::time::{Duration, Instant};

/// Which threads an action runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionTarget {
    /// One attached thread.
    Thread(ThreadId),
    /// Every thread attached when the action is submitted (the submitter included, if
    /// attached: it runs the action at its next safepoint, e.g. [`Action::wait`](crate::Action::wait)).
    AllThreads,
}

/// What an action learns about the thread it runs on.
#[derive(Debug, Clone)]
pub struct ActionContext<'a> {
    /// The thread running the action.
    pub thread: ThreadId,
    /// Its name.
    pub thread_name: &'a str,
    /// Whether it holds the GIL while running the action (false for threads that were
    /// waiting for the GIL or inside a blocking region).
    pub holds_gil: bool,
}

/// The closure type of an action.
pub(crate) type ActionFn = Box<dyn Fn(&ActionContext<'_>) + Send + Sync>;

/// Outcome of an action on one target thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionOutcome {
    /// Ran to completion.
    Ran {
        /// Whether the thread held the GIL while running it.
        held_gil: bool,
    },
    /// The closure panicked (the panic was caught; the thread went on).
    Panicked {
        /// The panic message, if it was a string.
        message: String,
    },
    /// The thread detached (or was invalidated) before reaching a safepoint.
    Skipped,
}

/// Progress of an action over its targets.
#[derive(Debug, Clone)]
pub struct ActionReport {
    /// The action's sequence number within its GIL.
    pub action: u64,
    /// One entry per target thread that has finished with the action.
    pub outcomes: Vec<(ThreadId, ActionOutcome)>,
    /// Target threads still to reach a safepoint.
    pub pending: Vec<ThreadId>,
}

impl ActionReport {
    /// How many targets ran the action (including those where it panicked).
    pub fn ran(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|(_, o)| !matches!(o, ActionOutcome::Skipped))
            .count()
    }

    /// How many targets detached before running it.
    pub fn skipped(&self) -> usize {
        self.outcomes.len() - self.ran()
    }

    /// How many runs panicked.
    pub fn panicked(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|(_, o)| matches!(o, ActionOutcome::Panicked { .. }))
            .count()
    }
}

struct Progress {
    outcomes: Vec<(ThreadId, ActionOutcome)>,
    /// Target id and name (the label is only built for a timeout message).
    pending: Vec<(ThreadId, StdArc<str>)>,
}

/// The shared part of an action: the closure and its progress.
pub(crate) struct ActionInner {
    pub(crate) id: u64,
    gil: String,
    f: ActionFn,
    progress: Mutex<Progress>,
    done: Condvar,
    submitted: Instant,
}

impl ActionInner {
    /// An action for `targets` (each thread's id and name).
    pub(crate) fn new(
        id: u64,
        gil: &str,
        f: ActionFn,
        targets: impl IntoIterator<Item = (ThreadId, StdArc<str>)>,
    ) -> Self {
        ActionInner {
            id,
            gil: gil.to_string(),
            f,
            progress: Mutex::new(Progress {
                outcomes: Vec::new(),
                pending: targets.into_iter().collect(),
            }),
            done: Condvar::new(),
            submitted: Instant::now(),
        }
    }

    /// Runs the closure on the calling thread, which is thread `thread` (named `name`).
    pub(crate) fn run_on(&self, thread: ThreadId, name: &str, holds_gil: bool) {
        let ctx = ActionContext {
            thread,
            thread_name: name,
            holds_gil,
        };
        let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (self.f)(&ctx)
        })) {
            Ok(()) => ActionOutcome::Ran {
                held_gil: holds_gil,
            },
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(non-string panic payload)".into());
                let label = format!("{thread} \"{name}\"");
                tracing::error!(gil = %self.gil, action = self.id, thread = %label, %message, "safepoint action panicked");
                ActionOutcome::Panicked { message }
            }
        };
        tracing::trace!(gil = %self.gil, action = self.id, thread = thread.as_u64(), holds_gil,
            latency_us = self.submitted.elapsed().as_secs_f64() * 1e6, "safepoint action ran");
        self.finish(thread, outcome);
    }

    /// Target `thread` detached before running it.
    pub(crate) fn skip(&self, thread: ThreadId) {
        self.finish(thread, ActionOutcome::Skipped);
    }

    fn finish(&self, thread: ThreadId, outcome: ActionOutcome) {
        let mut p = self.progress.lock();
        if let Some(i) = p.pending.iter().position(|(t, _)| *t == thread) {
            p.pending.swap_remove(i);
            p.outcomes.push((thread, outcome));
        }
        let complete = p.pending.is_empty();
        drop(p);
        if complete {
            self.done.notify_all();
        }
    }

    pub(crate) fn report(&self) -> ActionReport {
        let p = self.progress.lock();
        ActionReport {
            action: self.id,
            outcomes: p.outcomes.clone(),
            pending: p.pending.iter().map(|(t, _)| *t).collect(),
        }
    }

    /// Whether every target has run or skipped it.
    pub(crate) fn is_complete(&self) -> bool {
        self.progress.lock().pending.is_empty()
    }

    /// Waits until every target has run or skipped the action, at most `timeout`.
    pub(crate) fn wait(&self, timeout: Duration) -> Result<ActionReport, GilError> {
        let deadline = Instant::now() + timeout;
        let mut p = self.progress.lock();
        while !p.pending.is_empty() {
            if Instant::now() >= deadline {
                return Err(GilError::ActionTimeout {
                    gil: self.gil.clone(),
                    action: self.id,
                    waited: timeout,
                    pending: p.pending.len(),
                    targets: p.pending.len() + p.outcomes.len(),
                    pending_threads: p
                        .pending
                        .iter()
                        .map(|(id, name)| format!("#{} \"{name}\"", id.as_u64()))
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            p = self.done.wait_until(p, Some(deadline));
        }
        drop(p);
        Ok(self.report())
    }
}
