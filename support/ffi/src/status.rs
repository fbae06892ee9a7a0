//! The status codes every C layer of the workspace returns ([`Status`]) and the C text
//! that declares them ([`c_block`]), which each crate's header carries verbatim.

use std::fmt;

/// A C entry's result: 0 for success, a negative code for a failure. One enum for every
/// header of the workspace (`RT_OK`, `RT_ERR_*`); a crate's own names (`GIL_ERR_*`,
/// `ELF_LOADER_ERR_*`, ...) are aliases of these values. The values are stable: a new
/// condition gets the next free negative value, none is ever reused.
///
/// `gil`'s codes kept their values when they became these (`GIL_ERR_UNKNOWN_THREAD` is
/// [`Status::NotFound`]).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// An invalid argument: a NULL pointer, an unknown, deleted or wrong-kind handle, a
    /// string that is not UTF-8, a value out of range.
    Arg = -1,
    /// The object (a GIL, a runtime) is shut down: the thread must leave.
    ShutDown = -2,
    /// The thread was asked to stop: it must unwind.
    Stopped = -3,
    /// The calling thread is not attached.
    NotAttached = -4,
    /// The calling thread is already attached.
    AlreadyAttached = -5,
    /// The thread released a lock it does not hold.
    NotHolder = -6,
    /// What was asked for (a thread id, a symbol) does not exist.
    NotFound = -7,
    /// A wait ran out of time.
    Timeout = -8,
    /// A panic inside the library was caught at the C boundary (the message names it).
    Panic = -9,
    /// A configuration value is out of range.
    Config = -10,
    /// Shutdown was already called.
    AlreadyShutDown = -11,
    /// The call is not allowed inside a safepoint action.
    InsideAction = -12,
    /// The call is not allowed inside a block/unblock hook.
    InsideHook = -13,
    /// The call is not allowed inside a blocking (or GC-safe) region.
    InsideRegion = -14,
    /// The call is not allowed in the current state (initialised twice, finished
    /// before it started, loaded twice, nothing entered on this thread).
    State = -15,
    /// Out of memory, or over a configured memory cap.
    Oom = -16,
    /// Loading foreign code failed (a malformed file, a missing dependency, an undefined
    /// symbol).
    Load = -17,
    /// A lower layer refused the call (a composed library forwarding to another one:
    /// gc-runtime over gc-core and gil); the message carries the lower layer's text.
    Refused = -18,
}

impl Status {
    /// Every status, in value order (0, -1, -2, ...).
    pub const ALL: [Status; 19] = [
        Status::Ok,
        Status::Arg,
        Status::ShutDown,
        Status::Stopped,
        Status::NotAttached,
        Status::AlreadyAttached,
        Status::NotHolder,
        Status::NotFound,
        Status::Timeout,
        Status::Panic,
        Status::Config,
        Status::AlreadyShutDown,
        Status::InsideAction,
        Status::InsideHook,
        Status::InsideRegion,
        Status::State,
        Status::Oom,
        Status::Load,
        Status::Refused,
    ];

    /// The value C sees.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The status with this value, if any.
    pub fn from_code(code: i32) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.code() == code)
    }

    /// The C name (`RT_OK`, `RT_ERR_ARG`, ...).
    pub const fn c_name(self) -> &'static str {
        match self {
            Status::Ok => "RT_OK",
            Status::Arg => "RT_ERR_ARG",
            Status::ShutDown => "RT_ERR_SHUT_DOWN",
            Status::Stopped => "RT_ERR_STOPPED",
            Status::NotAttached => "RT_ERR_NOT_ATTACHED",
            Status::AlreadyAttached => "RT_ERR_ALREADY_ATTACHED",
            Status::NotHolder => "RT_ERR_NOT_HOLDER",
            Status::NotFound => "RT_ERR_NOT_FOUND",
            Status::Timeout => "RT_ERR_TIMEOUT",
            Status::Panic => "RT_ERR_PANIC",
            Status::Config => "RT_ERR_CONFIG",
            Status::AlreadyShutDown => "RT_ERR_ALREADY_SHUT_DOWN",
            Status::InsideAction => "RT_ERR_INSIDE_ACTION",
            Status::InsideHook => "RT_ERR_INSIDE_HOOK",
            Status::InsideRegion => "RT_ERR_INSIDE_REGION",
            Status::State => "RT_ERR_STATE",
            Status::Oom => "RT_ERR_OOM",
            Status::Load => "RT_ERR_LOAD",
            Status::Refused => "RT_ERR_REFUSED",
        }
    }

    /// One line saying what the status means (the C block's comment).
    pub const fn meaning(self) -> &'static str {
        match self {
            Status::Ok => "success",
            Status::Arg => "a NULL pointer, a bad handle or string, a value out of range",
            Status::ShutDown => "shut down: the thread must leave",
            Status::Stopped => "the thread was asked to stop: unwind",
            Status::NotAttached => "the calling thread is not attached",
            Status::AlreadyAttached => "the calling thread is already attached",
            Status::NotHolder => "released a lock the thread does not hold",
            Status::NotFound => "no such thread id, symbol or entry",
            Status::Timeout => "a wait ran out of time",
            Status::Panic => "an internal panic, caught at the C boundary",
            Status::Config => "a configuration value is out of range",
            Status::AlreadyShutDown => "shutdown was already called",
            Status::InsideAction => "not allowed inside a safepoint action",
            Status::InsideHook => "not allowed inside a block/unblock hook",
            Status::InsideRegion => "not allowed inside a blocking region",
            Status::State => "not allowed in the current state",
            Status::Oom => "out of memory or over a memory cap",
            Status::Load => "loading foreign code failed",
            Status::Refused => "a lower layer refused: the message has its text",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.c_name(), self.meaning())
    }
}

impl From<Status> for i32 {
    fn from(s: Status) -> i32 {
        s.code()
    }
}

/// The first line of the shared block in a header.
pub const C_BLOCK_BEGIN: &str =
    "/* BEGIN rt_status: generated from support/ffi (ffi_support::c_block), the same in every header. */";
/// The last line of the shared block in a header.
pub const C_BLOCK_END: &str = "/* END rt_status */";

/// The C declaration of the status codes, from [`C_BLOCK_BEGIN`] to [`C_BLOCK_END`]
/// (both lines included, a newline after each line). Every header of the workspace
/// carries this text verbatim, after `#include <stdint.h>`; its include guard lets
/// several headers meet in one translation unit. The crates' header tests compare it
/// (`test_support::check_header_block`).
pub fn c_block() -> String {
    let width = Status::ALL
        .iter()
        .map(|s| s.c_name().len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    out.push_str(C_BLOCK_BEGIN);
    out.push('\n');
    out.push_str("#ifndef RT_STATUS_DEFINED\n#define RT_STATUS_DEFINED\n");
    out.push_str(
        "/* The workspace's one C convention: a function that can fail returns an rt_status\n \
         * (RT_OK, or a negative RT_ERR_* code; a crate's own names are aliases of these) or\n \
         * NULL, and leaves a message, per thread, for its library's *_last_error(). No\n \
         * panic crosses the boundary: it becomes RT_ERR_PANIC (or NULL) and a message. */\n",
    );
    out.push_str("typedef int32_t rt_status;\n");
    for s in Status::ALL {
        let value = if s.code() == 0 {
            "0".to_string()
        } else {
            format!("({})", s.code())
        };
        out.push_str(&format!(
            "#define {:width$} {:5} /* {} */\n",
            s.c_name(),
            value,
            s.meaning()
        ));
    }
    out.push_str("#endif\n");
    out.push_str(C_BLOCK_END);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_distinct_and_round_trip() {
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(s.code(), -(i as i32), "ALL is in value order: {s:?}");
            assert_eq!(Status::from_code(s.code()), Some(*s));
        }
        assert_eq!(Status::from_code(-1000), None);
        assert_eq!(Status::from_code(1), None);
    }

    #[test]
    fn the_c_block_defines_every_status() {
        let block = c_block();
        assert!(block.starts_with(C_BLOCK_BEGIN) && block.ends_with(&format!("{C_BLOCK_END}\n")));
        for s in Status::ALL {
            let value = if s.code() == 0 {
                "0".to_string()
            } else {
                format!("({})", s.code())
            };
            let line = block
                .lines()
                .find(|l| l.starts_with(&format!("#define {} ", s.c_name())))
                .unwrap_or_else(|| panic!("{} missing:\n{block}", s.c_name()));
            assert!(line.contains(&format!(" {value} ")), "{line}");
        }
    }
}
