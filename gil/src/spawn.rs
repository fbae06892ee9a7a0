//! Threads started attached to a GIL, with a bounded join: the embedder never blocks
//! forever on a thread that does not finish. (The threads are `std` threads: the loom
//! models do not spawn through here.)

use crate::primitive::{Arc, Condvar, Mutex};
use crate::{Gil, GilError, ThreadHandle};
use std::time::{Duration, Instant};

/// Why a join did not produce the thread's result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The thread had not finished within the bound; it keeps running, unjoined.
    #[error("thread \"{thread}\" did not finish within {waited:?}")]
    Timeout {
        /// The thread's name.
        thread: String,
        /// How long the join waited.
        waited: Duration,
    },
    /// The thread's closure panicked.
    #[error("thread \"{thread}\" panicked: {message}")]
    Panicked {
        /// The thread's name.
        thread: String,
        /// The panic message.
        message: String,
    },
    /// The thread could not be attached (or started).
    #[error("thread \"{thread}\" could not start: {message}")]
    NotStarted {
        /// The thread's name.
        thread: String,
        /// Why.
        message: String,
    },
}

/// A thread started with [`Gil::spawn`].
pub struct GilJoinHandle<T> {
    name: String,
    handle: std::thread::JoinHandle<Result<T, GilError>>,
    done: Arc<(Mutex<bool>, Condvar)>,
}

struct SignalOnDrop(Arc<(Mutex<bool>, Condvar)>);

impl Drop for SignalOnDrop {
    fn drop(&mut self) {
        let (m, cv) = &*self.0;
        *m.lock() = true;
        cv.notify_all();
    }
}

impl<T> GilJoinHandle<T> {
    /// The thread's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the thread has finished.
    pub fn is_finished(&self) -> bool {
        *self.done.0.lock()
    }

    /// Waits at most `timeout` for the thread to finish; true if it did.
    pub fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.done;
        let mut done = m.lock();
        while !*done {
            if Instant::now() >= deadline {
                return false;
            }
            done = cv.wait_until(done, Some(deadline));
        }
        true
    }

    /// Joins, waiting at most `timeout`. On timeout the thread is left running.
    pub fn join_timeout(self, timeout: Duration) -> Result<T, JoinError> {
        if !self.wait(timeout) {
            return Err(JoinError::Timeout {
                thread: self.name,
                waited: timeout,
            });
        }
        self.join()
    }

    /// Joins without a bound.
    pub fn join(self) -> Result<T, JoinError> {
        match self.handle.join() {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(JoinError::NotStarted {
                thread: self.name,
                message: e.to_string(),
            }),
            Err(payload) => Err(JoinError::Panicked {
                thread: self.name,
                message: payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(non-string panic payload)".into()),
            }),
        }
    }
}

impl Gil {
    /// Starts a thread named `name`, attached to this GIL, running `f` with its handle
    /// (without the GIL: `f` takes it as it needs). The thread detaches when `f` returns
    /// or panics.
    pub fn spawn<F, T>(&self, name: &str, f: F) -> Result<GilJoinHandle<T>, JoinError>
    where
        F: FnOnce(&ThreadHandle) -> T + Send + 'static,
        T: Send + 'static,
    {
        let gil = self.clone();
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let signal = SignalOnDrop(done.clone());
        let thread_name = name.to_string();
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _signal = signal;
                let h = gil.attach(&thread_name)?;
                // Detach even if `f` panics.
                struct Detach(Option<ThreadHandle>);
                impl Drop for Detach {
                    fn drop(&mut self) {
                        if let Some(h) = self.0.take() {
                            h.detach();
                        }
                    }
                }
                let guard = Detach(Some(h.clone()));
                let value = f(&h);
                drop(guard);
                Ok(value)
            })
            .map_err(|e| JoinError::NotStarted {
                thread: name.to_string(),
                message: e.to_string(),
            })?;
        Ok(GilJoinHandle {
            name: name.to_string(),
            handle,
            done,
        })
    }
}
