//! `interpool._native.WorkQueue`: the executor's work queue (in place of
//! `ThreadPoolExecutor`'s `queue.SimpleQueue`), with claims.
//!
//! A task whose result is waited for before any worker thread took it runs on the
//! waiting thread (`_Future.result` in `_executor.py`), which claims it first. A claimed
//! item is never handed to a worker thread: `get` drops it without taking the host's
//! GIL, so the worker thread woken by its `put` goes back to sleep without competing
//! with the waiting thread for the GIL (with `SimpleQueue` each such task cost the
//! waiting thread a GIL hand-off back from the worker, 15-20 us of a 35-55 us round
//! trip on this machine).

use pyo3::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const QUEUED: u8 = 0;
const CLAIMED: u8 = 1;
const TAKEN: u8 = 2;

/// Who gets a queued task: the thread waiting for its result (`take`) or a worker
/// thread (`WorkQueue.get`), whichever comes first.
#[pyclass(module = "interpool._native", frozen)]
pub(crate) struct Claim(Arc<AtomicU8>);

#[pymethods]
impl Claim {
    #[new]
    fn new() -> Self {
        Claim(Arc::new(AtomicU8::new(QUEUED)))
    }

    /// Claims the task for the calling thread: false if a worker thread took it (or it
    /// was claimed already).
    fn take(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

struct Entry {
    item: Py<PyAny>,
    claim: Option<Arc<AtomicU8>>,
}

/// A FIFO queue with `SimpleQueue`'s `put`, `get` and `get_nowait` (what
/// `concurrent.futures.thread` uses). An item whose `future` has a `_claim` ([`Claim`])
/// is skipped once claimed.
#[pyclass(module = "interpool._native", frozen)]
pub(crate) struct WorkQueue {
    items: Mutex<VecDeque<Entry>>,
    ready: Condvar,
    /// Claimable items queued that neither a worker took nor a waiting thread claimed.
    unclaimed: AtomicUsize,
}

impl WorkQueue {
    /// The first item no one claimed, marking it taken; claimed ones are moved to
    /// `dropped` (released later, under the GIL).
    fn pop(&self, items: &mut VecDeque<Entry>, dropped: &mut Vec<Py<PyAny>>) -> Option<Py<PyAny>> {
        while let Some(e) = items.pop_front() {
            let free = match &e.claim {
                None => true,
                Some(c) => {
                    let taken = c
                        .compare_exchange(QUEUED, TAKEN, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok();
                    if taken {
                        self.unclaimed.fetch_sub(1, Ordering::AcqRel);
                    }
                    taken
                }
            };
            if free {
                return Some(e.item);
            }
            dropped.push(e.item);
        }
        None
    }
}

#[pymethods]
impl WorkQueue {
    #[new]
    fn new() -> Self {
        WorkQueue {
            items: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            unclaimed: AtomicUsize::new(0),
        }
    }

    /// Appends `item` (never blocks; `block` and `timeout` as `SimpleQueue.put`'s).
    #[pyo3(signature = (item, block=true, timeout=None))]
    fn put(&self, item: Bound<'_, PyAny>, block: bool, timeout: Option<f64>) -> PyResult<()> {
        let _ = (block, timeout);
        let claim = if item.is_none() {
            None
        } else {
            match item.getattr("future").and_then(|f| f.getattr("_claim")) {
                Ok(c) => c.cast::<Claim>().ok().map(|c| c.get().0.clone()),
                Err(_) => None,
            }
        };
        if claim.is_some() {
            self.unclaimed.fetch_add(1, Ordering::AcqRel);
        }
        self.items
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(Entry {
                item: item.unbind(),
                claim,
            });
        self.ready.notify_one();
        Ok(())
    }

    /// The next item no one claimed; waits (without the GIL) when there is none, up to
    /// `timeout` seconds if given, unless `block` is false. Raises `queue.Empty` when
    /// there is none to give.
    #[pyo3(signature = (block=true, timeout=None))]
    fn get(&self, py: Python<'_>, block: bool, timeout: Option<f64>) -> PyResult<Py<PyAny>> {
        let mut dropped = Vec::new();
        let got = {
            let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
            self.pop(&mut items, &mut dropped)
        };
        let got = match got {
            Some(item) => Some(item),
            None if !block => None,
            None => {
                let deadline =
                    timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
                let (item, more) = py.detach(|| {
                    let mut more = Vec::new();
                    let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
                    loop {
                        if let Some(item) = self.pop(&mut items, &mut more) {
                            return (Some(item), more);
                        }
                        match deadline {
                            None => {
                                items = self.ready.wait(items).unwrap_or_else(|e| e.into_inner())
                            }
                            Some(d) => {
                                let now = Instant::now();
                                if now >= d {
                                    return (None, more);
                                }
                                items = self
                                    .ready
                                    .wait_timeout(items, d - now)
                                    .unwrap_or_else(|e| e.into_inner())
                                    .0;
                            }
                        }
                    }
                });
                dropped.extend(more);
                item
            }
        };
        drop(dropped);
        match got {
            Some(item) => Ok(item),
            None => Err(PyErr::from_value(
                py.import("queue")?.getattr("Empty")?.call0()?,
            )),
        }
    }

    /// `get(block=False)`.
    fn get_nowait(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.get(py, false, None)
    }

    /// Claims `claim`'s task (queued here) for the calling thread: false if a worker
    /// thread took it or it was claimed already (`Claim.take`, counted here).
    fn claim(&self, claim: &Claim) -> bool {
        let ok = claim.take();
        if ok {
            self.unclaimed.fetch_sub(1, Ordering::AcqRel);
        }
        ok
    }

    /// Queued tasks that no worker took and no waiting thread claimed.
    fn unclaimed(&self) -> usize {
        self.unclaimed.load(Ordering::Acquire)
    }

    /// Items queued, claimed ones included.
    fn qsize(&self) -> usize {
        self.items.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// No item queued (claimed ones included).
    fn empty(&self) -> bool {
        self.qsize() == 0
    }
}
