//! `gil`: a global interpreter lock with switch requests, safepoint actions, blocking
//! regions and clean shutdown, for runtimes that embed an interpreter whose threads must
//! not run managed code in parallel.
//!
//! It follows GraalPy's design (`acquire()` says whether it took the lock, `release`
//! only if so; waiting threads interruptible by safepoint actions; shutdown that kills
//! threads through actions with bounded joins) with CPython 3.11's GIL as the behaviour
//! to beat: the same 5 ms switch interval and "drop request only while someone waits"
//! rule, a fair handoff (the releaser cannot take the GIL straight back), and a fix for
//! CPython's convoy effect (bpo-7946): a thread coming back from a blocking call gets the
//! GIL at the holder's next poll instead of after a full interval, within a budget that
//! keeps CPU-bound threads' share fair.
//!
//! ```
//! use gil::{Gil, GilCell, ActionTarget};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let gil = Gil::new();
//! let counter = Arc::new(GilCell::new(&gil, 0u64)); // Rust data the GIL protects
//! let main = gil.attach("main")?;
//! let c = counter.clone();
//! let worker = gil.spawn("worker", move |h| {
//!     for _ in 0..1000 {
//!         let g = h.lock()?;          // hold the GIL while touching shared state
//!         *c.borrow_mut(&g) += 1;
//!         drop(g);
//!         h.poll()?;                   // a safepoint: switch requests, actions
//!     }
//!     // release the GIL around blocking work; re-taken (with priority) afterwards
//!     h.allow_threads(|| std::thread::sleep(Duration::from_millis(1)))?;
//!     Ok::<_, gil::GilError>(())
//! })?;
//! let action = gil.submit(ActionTarget::AllThreads, |ctx| {
//!     let _ = (ctx.thread, ctx.holds_gil);
//! })?;
//! action.wait(Duration::from_secs(5))?;
//! worker.join_timeout(Duration::from_secs(10)).unwrap()?;
//! let g = main.lock()?;
//! assert_eq!(*counter.borrow(&g), 1000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The API
//!
//! - [`Gil`]: one GIL (one per interpreter; several per process). [`Gil::attach`]
//!   registers the calling thread and returns its [`ThreadHandle`]; [`Gil::ensure`] does
//!   it for threads the runtime did not create (`PyGILState_Ensure`); [`Gil::spawn`]
//!   starts attached threads with a bounded join.
//! - Holding the GIL: [`ThreadHandle::acquire`] / [`release`](ThreadHandle::release)
//!   (GraalPy's `acquire() -> bool`), or a [`GilGuard`] from [`ThreadHandle::lock`]:
//!   while a guard of a thread is alive, that thread holds the GIL.
//! - Data the GIL protects: [`GilCell`], borrowed with a guard.
//! - Safepoints: [`ThreadHandle::poll`] (one relaxed load when nothing is pending) honours
//!   switch requests, runs safepoint actions ([`Gil::submit`]) and reports stop requests
//!   ([`Gil::request_stop`]) and shutdown.
//! - Blocking regions: [`ThreadHandle::allow_threads`] (a closure) or
//!   [`ThreadHandle::enter_blocking`] (a [`BlockingRegion`] token, the split-phase form).
//! - Embedder hooks ([`GilHooks`], [`Gil::set_hooks`]): told when a thread blocks and
//!   unblocks, so a GC can count it as stopped.
//! - [`Gil::shutdown`]: ends everything within a bound and accounts for every thread
//!   ([`ShutdownReport`]).
//! - Errors are [`GilError`] values naming the GIL and the thread.
//!
//! # C
//!
//! The C ABI declared in `include/gil.h` (`gil_new`, `gil_attach`, `gil_acquire`,
//! `gil_blocking_enter`, ...) is the `gil-capi` crate (`capi/`), built as `libgil.so` by
//! `capi/artifact`: each function converts its arguments, calls the API above on the
//! calling thread's attachment, and returns `GIL_OK` or a `GIL_ERR_*` code (the
//! workspace's shared status codes) with a message for `gil_last_error()`; no panic
//! crosses it. This crate is only the Rust library: a Rust program that also has C parts
//! calling `gil_*` links `gil-capi`.
//!
//! The README has the quick start and the C usage; `docs/design/gil.md` the state
//! machine and the rules for embedders; `docs/perf/gil.md` the measured figures.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

// The modules, bottom to top: each uses only modules listed before it (the layering
// ARCHITECTURE.md describes; the tidy test checks that there is no module cycle).
// 1. leaves: the sync shim, errors, thread ids and statuses
mod error;
mod primitive;
mod thread;
// 2. what the state machine is given: configuration, embedder hooks, action records
mod action;
mod config;
mod hooks;
// 3. the state machine and the calling thread's attachments to it (`tls` above `state`)
mod state;
mod tls;
// 4. the GIL as a whole (`Gil`, `Action`)
mod gil;
// 5. a thread's side (`ThreadHandle`, guards, regions, attach/ensure)
mod handle;
// 6. built on handles: `GilCell`, shutdown, spawned threads
mod cell;
mod shutdown;
mod spawn;

#[cfg(all(test, loom))]
mod loom_tests;

pub use action::{ActionContext, ActionOutcome, ActionReport, ActionTarget};
pub use cell::{BorrowError, GilCell, GilRef, GilRefMut};
pub use config::Config;
pub use error::GilError;
pub use gil::{Action, Gil, GilStats};
pub use handle::{BlockingRegion, EnsureGuard, EnsureState, GilGuard, RegionError, ThreadHandle};
pub use hooks::{BlockReason, GilHooks};
pub use shutdown::{ShutdownReport, ThreadFate, ThreadOutcome};
pub use spawn::{GilJoinHandle, JoinError};
pub use thread::{ThreadId, ThreadInfo, ThreadStatus};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
