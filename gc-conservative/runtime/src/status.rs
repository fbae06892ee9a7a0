//! The runtime's status codes (`GC_RUNTIME_*` in `gc_runtime.h`), below both the
//! runtime and its C entry points.

/// Success.
pub const GC_RUNTIME_OK: i32 = 0;
/// A NULL or invalid argument (a handle that is not a live runtime, a bad configuration).
pub const GC_RUNTIME_ERR_INVALID_ARGUMENT: i32 = -1;
/// The calling thread is not attached to this runtime.
pub const GC_RUNTIME_ERR_NOT_ATTACHED: i32 = -2;
/// The calling thread is already attached to a runtime (a thread attached to the heap or
/// the GIL by other means gets `GC_RUNTIME_ERR_GC` / `GC_RUNTIME_ERR_GIL`).
pub const GC_RUNTIME_ERR_ALREADY_ATTACHED: i32 = -3;
/// The call does not fit the thread's state (enter while inside, leave while outside,
/// end without begin, detach while inside, delete with threads attached).
pub const GC_RUNTIME_ERR_STATE: i32 = -4;
/// gc-core refused (the message has `gc_last_error()`'s text).
pub const GC_RUNTIME_ERR_GC: i32 = -5;
/// The GIL refused (the message has `gil_last_error()`'s text and code).
pub const GC_RUNTIME_ERR_GIL: i32 = -6;
/// The GIL asked this thread to stop (`gil_request_stop`): unwind and leave.
pub const GC_RUNTIME_ERR_STOPPED: i32 = -7;
/// The GIL is shut down (`gil_shutdown`): unwind and detach.
pub const GC_RUNTIME_ERR_SHUT_DOWN: i32 = -8;
/// A panic inside the library was caught at the boundary.
pub const GC_RUNTIME_ERR_PANIC: i32 = -9;
