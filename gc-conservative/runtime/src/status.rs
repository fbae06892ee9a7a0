//! The runtime's status codes (`GC_RUNTIME_*` in `gc_runtime.h`), below both the
//! runtime and its C entry points: aliases of the workspace's shared codes
//! (`ffi_support::Status`, `RT_OK` / `RT_ERR_*`), so that a code from gc-core, gil or
//! the runtime means the same in one program. `gc_runtime.h` declares each as
//! `#define GC_RUNTIME_X RT_ERR_Y` (generated from this file by the header test).

use ffi_support::Status;

/// Success.
pub const GC_RUNTIME_OK: i32 = Status::Ok.code();
/// A NULL or invalid argument (a handle that is not a live runtime, a bad configuration).
pub const GC_RUNTIME_ERR_INVALID_ARGUMENT: i32 = Status::Arg.code();
/// The calling thread is not attached to this runtime.
pub const GC_RUNTIME_ERR_NOT_ATTACHED: i32 = Status::NotAttached.code();
/// The calling thread is already attached to a runtime (a thread attached to the heap or
/// the GIL by other means gets `GC_RUNTIME_ERR_GC` / `GC_RUNTIME_ERR_GIL`).
pub const GC_RUNTIME_ERR_ALREADY_ATTACHED: i32 = Status::AlreadyAttached.code();
/// The call does not fit the thread's state (enter while inside, leave while outside,
/// end without begin, detach while inside, delete with threads attached).
pub const GC_RUNTIME_ERR_STATE: i32 = Status::State.code();
/// gc-core refused (the message has `gc_last_error()`'s text): `RT_ERR_REFUSED`, as
/// `GC_RUNTIME_ERR_GIL` (the message says which layer).
pub const GC_RUNTIME_ERR_GC: i32 = Status::Refused.code();
/// The GIL refused (the message has `gil_last_error()`'s text and code):
/// `RT_ERR_REFUSED`.
pub const GC_RUNTIME_ERR_GIL: i32 = Status::Refused.code();
/// The GIL asked this thread to stop (`gil_request_stop`): unwind and leave.
pub const GC_RUNTIME_ERR_STOPPED: i32 = Status::Stopped.code();
/// The GIL is shut down (`gil_shutdown`): unwind and detach.
pub const GC_RUNTIME_ERR_SHUT_DOWN: i32 = Status::ShutDown.code();
/// A panic inside the library was caught at the boundary.
pub const GC_RUNTIME_ERR_PANIC: i32 = Status::Panic.code();
