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
//! use gil::{Gil, ActionTarget};
//! use std::time::Duration;
//!
//! let gil = Gil::new();
//! let main = gil.attach("main").unwrap();
//! let worker = gil
//!     .spawn("worker", |h| {
//!         for _ in 0..1000 {
//!             let _g = h.lock().unwrap(); // hold the GIL while touching shared state
//!             h.poll().unwrap();          // a safepoint: switch requests, actions
//!         }
//!         h.allow_threads(|| std::thread::sleep(Duration::from_millis(1))).unwrap();
//!     })
//!     .unwrap();
//! let action = gil.submit(ActionTarget::AllThreads, |ctx| {
//!     let _ = (ctx.thread, ctx.holds_gil);
//! }).unwrap();
//! action.wait(Duration::from_secs(5)).unwrap();
//! worker.join_timeout(Duration::from_secs(10)).unwrap();
//! assert!(main.acquire().unwrap());
//! main.release(true).unwrap();
//! ```
//!
//! The README has the state machine, the rules for embedders and the C usage
//! (`include/gil.h`, the [`capi`] module).

mod action;
pub mod capi;
mod cell;
mod config;
mod error;
mod gil;
mod handle;
mod hooks;
mod primitive;
mod shutdown;
mod spawn;
mod state;
mod tls;

#[cfg(all(test, loom))]
mod loom_tests;

pub use action::{Action, ActionContext, ActionOutcome, ActionReport, ActionTarget};
pub use cell::{BorrowError, GilCell, GilRef, GilRefMut};
pub use config::Config;
pub use error::GilError;
pub use gil::{Gil, GilStats, ThreadId, ThreadInfo, ThreadStatus};
pub use handle::{BlockingRegion, EnsureGuard, EnsureState, GilGuard, RegionError, ThreadHandle};
pub use hooks::{BlockReason, GilHooks};
pub use shutdown::{ShutdownReport, ThreadFate, ThreadOutcome};
pub use spawn::{GilJoinHandle, JoinError};
