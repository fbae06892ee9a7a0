//! The errors of every GIL operation, as values naming the thread and GIL involved.

use std::time::Duration;

/// What went wrong in a GIL operation. Every variant names the GIL (by its label) and the
/// thread (by its GIL thread id and name) involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GilError {
    /// The GIL was shut down: the thread's state is invalid and it must leave.
    #[error("GIL {gil} is shut down: thread {thread} can no longer use it")]
    ShutDown {
        /// The GIL's label.
        gil: String,
        /// The thread that tried to use it.
        thread: String,
    },
    /// The thread was asked to stop (a kill request) and must unwind.
    #[error("thread {thread} of GIL {gil} was asked to stop")]
    Stopped {
        /// The GIL's label.
        gil: String,
        /// The thread that was stopped.
        thread: String,
    },
    /// The calling thread is not attached to this GIL.
    #[error("thread {thread} is not attached to GIL {gil} (attach it first, or use ensure)")]
    NotAttached {
        /// The GIL's label.
        gil: String,
        /// The OS thread's name or id.
        thread: String,
    },
    /// The calling thread is already attached to this GIL.
    #[error("thread {thread} is already attached to GIL {gil}")]
    AlreadyAttached {
        /// The GIL's label.
        gil: String,
        /// The thread, as attached.
        thread: String,
    },
    /// A thread released a GIL it does not hold.
    #[error("thread {thread} released GIL {gil} but does not hold it (holder: {holder})")]
    NotHolder {
        /// The GIL's label.
        gil: String,
        /// The releasing thread.
        thread: String,
        /// Who holds it instead ("nobody" or a thread id).
        holder: String,
    },
    /// No attached thread has this id.
    #[error("GIL {gil} has no attached thread with id {id}")]
    UnknownThread {
        /// The GIL's label.
        gil: String,
        /// The id that was looked up.
        id: u64,
    },
    /// `shutdown` was called a second time.
    #[error("GIL {gil} was already shut down")]
    AlreadyShutDown {
        /// The GIL's label.
        gil: String,
    },
    /// A safepoint action did not run on all its target threads in time.
    #[error(
        "action {action} on GIL {gil} timed out after {waited:?}: \
         {pending} of {targets} target threads have not run it (pending: {pending_threads})"
    )]
    ActionTimeout {
        /// The GIL's label.
        gil: String,
        /// The action's sequence number.
        action: u64,
        /// How long the caller waited.
        waited: Duration,
        /// Target threads that have not run or skipped it yet.
        pending: usize,
        /// Number of target threads.
        targets: usize,
        /// The pending threads, as "id name" items.
        pending_threads: String,
    },
    /// Shutdown ended with threads still inside the GIL (holding it or in a blocking
    /// region that did not return).
    #[error("shutdown of GIL {gil} timed out after {waited:?}; threads still inside: {stuck}")]
    ShutdownIncomplete {
        /// The GIL's label.
        gil: String,
        /// How long shutdown waited.
        waited: Duration,
        /// The threads that did not leave, with their state.
        stuck: String,
    },
    /// A GIL call that cannot be made from inside a safepoint action (the thread may be
    /// queued for the GIL or in the middle of a poll): take, drop, yield or block.
    #[error("thread {thread} called {call} on GIL {gil} from inside a safepoint action")]
    InsideAction {
        /// The GIL's label.
        gil: String,
        /// The thread.
        thread: String,
        /// The call that was refused.
        call: &'static str,
    },
    /// A GIL call made from inside an embedder hook (`on_block` / `on_unblock`), which
    /// runs while the thread changes state: take, drop, yield or block.
    #[error("thread {thread} called {call} on GIL {gil} from inside an on_block/on_unblock hook")]
    InsideHook {
        /// The GIL's label.
        gil: String,
        /// The thread.
        thread: String,
        /// The call that was refused.
        call: &'static str,
    },
    /// A GIL call made inside a blocking region, where the thread does not hold the GIL
    /// and is reported blocked (a GC counts it as stopped): take the GIL or open a second
    /// region. Leave the region first.
    #[error("thread {thread} called {call} on GIL {gil} inside a blocking region")]
    InsideRegion {
        /// The GIL's label.
        gil: String,
        /// The thread.
        thread: String,
        /// The call that was refused.
        call: &'static str,
    },
    /// A blocking region was left (or looked up) on a thread that is not in one.
    #[error("thread {thread} is not in a blocking region of GIL {gil}")]
    NotInRegion {
        /// The GIL's label.
        gil: String,
        /// The thread.
        thread: String,
    },
    /// A configuration value is out of range.
    #[error("invalid GIL configuration: {what}")]
    InvalidConfig {
        /// What is wrong, with the offending value.
        what: String,
    },
}
