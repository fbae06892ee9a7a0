//! Embedder hooks: told when a thread stops running managed code (it waits for the GIL
//! or enters a blocking region) and when it runs again, so that a garbage collector can
//! count such threads as stopped without waiting for them to reach a safepoint.

use crate::ThreadId;

/// Why a thread is blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub enum BlockReason {
    /// Queued for the GIL.
    WaitingForGil = 1,
    /// Inside a blocking region (`allow_threads`); it re-takes the GIL on the way out
    /// without a second `on_block`.
    BlockingRegion = 2,
}

/// Callbacks the GIL makes on the thread that changes state. Both run without any GIL
/// lock held; `on_unblock` runs after the thread holds the GIL again (for a region
/// entered without the GIL: when the region ends). Hooks may block (for example until a
/// collection in progress ends); a panicking hook is logged and ignored.
pub trait GilHooks: Send + Sync {
    /// `thread` stops running managed code for `reason`.
    fn on_block(&self, thread: ThreadId, reason: BlockReason) {
        let _ = (thread, reason);
    }
    /// `thread` runs managed code again; `reason` is the one given to `on_block`.
    fn on_unblock(&self, thread: ThreadId, reason: BlockReason) {
        let _ = (thread, reason);
    }
}
