//! The values that describe an attached thread from outside: its id, its status and a
//! snapshot of both. A leaf module: the state machine, the hooks and actions below
//! [`Gil`](crate::Gil) name threads by these.

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
