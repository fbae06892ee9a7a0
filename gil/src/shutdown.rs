//! Shutdown: invalidate every thread state, wake threads waiting for the GIL (they leave
//! with [`GilError::ShutDown`]), interrupt blocking regions, stop the holder at its next
//! poll, and wait, bounded, until every thread is out of the GIL, retrying the wake-ups
//! (GraalPy's bounded join retries). Every thread is accounted for in the report.

use crate::error::GilError;
use crate::gil::Gil;
use crate::primitive::{Arc, Ordering};
use crate::state::{ThreadState, F_INVALID, F_STOP, S_DETACHED};
use crate::thread::{ThreadId, ThreadStatus};
use std::time::{Duration, Instant};

/// What became of one thread during shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadFate {
    /// The thread that called `shutdown`.
    Caller,
    /// It detached (or exited).
    Detached,
    /// It got an error from the GIL and is no longer inside it.
    LeftWithError,
    /// It was attached but not inside the GIL (not holding, waiting or blocking); its
    /// next call fails.
    Idle,
    /// Still inside the GIL when the time ran out.
    Stuck {
        /// What it was doing.
        status: ThreadStatus,
        /// Whether it held the GIL.
        holds_gil: bool,
    },
}

/// One thread's line in the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadOutcome {
    /// Its id.
    pub id: ThreadId,
    /// Its name.
    pub name: String,
    /// What became of it.
    pub fate: ThreadFate,
}

/// The result of [`Gil::shutdown`]: every thread attached at the start, accounted for.
#[derive(Debug, Clone)]
pub struct ShutdownReport {
    /// The GIL's label.
    pub gil: String,
    /// One entry per thread attached when shutdown started.
    pub threads: Vec<ThreadOutcome>,
    /// How long shutdown took.
    pub elapsed: Duration,
}

impl ShutdownReport {
    /// Threads still inside the GIL when shutdown gave up.
    pub fn stuck(&self) -> impl Iterator<Item = &ThreadOutcome> {
        self.threads
            .iter()
            .filter(|t| matches!(t.fate, ThreadFate::Stuck { .. }))
    }

    /// Whether every thread left.
    pub fn is_clean(&self) -> bool {
        self.stuck().next().is_none()
    }

    /// `Ok(self)` if clean, else [`GilError::ShutdownIncomplete`] naming the stuck
    /// threads.
    pub fn into_result(self) -> Result<Self, GilError> {
        if self.is_clean() {
            return Ok(self);
        }
        let stuck = self
            .stuck()
            .map(|t| format!("#{} \"{}\" ({:?})", t.id.0, t.name, t.fate))
            .collect::<Vec<_>>()
            .join(", ");
        Err(GilError::ShutdownIncomplete {
            gil: self.gil,
            waited: self.elapsed,
            stuck,
        })
    }
}

/// How often shutdown re-wakes threads that have not left yet.
const RETRY: Duration = Duration::from_millis(10);

impl Gil {
    /// Shuts the GIL down, waiting at most `timeout` for threads to leave it. After this
    /// every call on this GIL fails ([`GilError::ShutDown`]) and no thread can attach.
    /// The caller (attached or not) is not waited for; if it held the GIL it is released
    /// (ending the hold of its live guards).
    ///
    /// ```
    /// use gil::{Gil, GilError};
    /// use std::time::Duration;
    ///
    /// let gil = Gil::new();
    /// let worker = gil.spawn("worker", |h| loop {
    ///     let _g = h.lock()?;
    ///     h.poll()?; // returns ShutDown once shutdown starts
    /// })?;
    /// while gil.threads().is_empty() {
    ///     std::thread::yield_now(); // until the worker is attached
    /// }
    /// let report = gil.shutdown(Duration::from_secs(5))?.into_result()?;
    /// assert!(report.is_clean());
    /// let left: Result<(), GilError> = worker.join_timeout(Duration::from_secs(5))?;
    /// assert!(matches!(left, Err(GilError::ShutDown { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shutdown(&self, timeout: Duration) -> Result<ShutdownReport, GilError> {
        let span = tracing::info_span!("gil shutdown", gil = %self.shared.label);
        let _enter = span.enter();
        let start = Instant::now();
        let caller = self.current_state();
        let caller_id = caller.as_ref().map(|c| c.id);
        let targets: Vec<Arc<ThreadState>> = {
            let st = self.shared.state.lock();
            if self.shared.shut_down.swap(true, Ordering::AcqRel) {
                return Err(GilError::AlreadyShutDown {
                    gil: self.shared.label.clone(),
                });
            }
            for t in &st.threads {
                let stop = if Some(t.id) == caller_id { 0 } else { F_STOP };
                t.flags.fetch_or(F_INVALID | stop, Ordering::SeqCst);
            }
            st.threads.clone()
        };
        let others: Vec<&Arc<ThreadState>> =
            targets.iter().filter(|t| Some(t.id) != caller_id).collect();
        tracing::info!(
            threads = others.len(),
            ?timeout,
            "shutting down: waking every thread"
        );
        for t in &others {
            self.shared.wake(t);
        }
        let deadline = start + timeout;
        let mut next_retry = start + RETRY;
        let mut retries = 0u32;
        loop {
            let inside = others.iter().filter(|t| self.inside(t)).count();
            if inside == 0 {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(inside, "shutdown timed out with threads inside the GIL");
                break;
            }
            if now >= next_retry {
                retries += 1;
                for t in others.iter().filter(|t| self.inside(t)) {
                    self.shared.wake(t);
                }
                next_retry = now + RETRY;
            }
            std::thread::sleep(Duration::from_micros(200).min(deadline - now));
        }
        if let Some(c) = &caller {
            if self.shared.holds(c) {
                let _ = self.shared.release_unchecked(c);
            }
        }
        let threads = targets
            .iter()
            .map(|t| ThreadOutcome {
                id: t.thread_id(),
                name: t.name.to_string(),
                fate: self.fate(t, caller_id),
            })
            .collect();
        let report = ShutdownReport {
            gil: self.shared.label.clone(),
            threads,
            elapsed: start.elapsed(),
        };
        tracing::info!(
            clean = report.is_clean(),
            retries,
            elapsed_us = report.elapsed.as_micros() as u64,
            "shutdown finished"
        );
        Ok(report)
    }

    /// Whether a thread is still inside the GIL: holding it, queued, or in a region.
    fn inside(&self, t: &ThreadState) -> bool {
        if t.status.load(Ordering::SeqCst) == S_DETACHED {
            return false;
        }
        if self.shared.holds(t) {
            return true;
        }
        !matches!(t.status(), ThreadStatus::Running)
    }

    fn fate(&self, t: &ThreadState, caller: Option<u64>) -> ThreadFate {
        if Some(t.id) == caller {
            return ThreadFate::Caller;
        }
        if t.status.load(Ordering::SeqCst) == S_DETACHED {
            return ThreadFate::Detached;
        }
        if self.inside(t) {
            return ThreadFate::Stuck {
                status: t.status(),
                holds_gil: self.shared.holds(t),
            };
        }
        if t.acknowledged.load(Ordering::Acquire) {
            ThreadFate::LeftWithError
        } else {
            ThreadFate::Idle
        }
    }
}
