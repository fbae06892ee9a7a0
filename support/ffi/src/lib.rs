//! `ffi-support`: the workspace's one C convention, shared by every crate's C layer
//! (`gil/capi`, `refbridge/capi`, `elf-loader/capi`, and gc-core's and
//! gc-conservative's as they adopt it). Internal: a regular dependency of the C layers only, never of a Rust
//! API crate.
//!
//! - **Status codes**: [`Status`], one enum for every header (`RT_OK`, `RT_ERR_*`;
//!   0 = success, negative = failure). A crate's own names (`GIL_ERR_*`,
//!   `ELF_LOADER_ERR_*`) are aliases of these values. [`c_block`] is their C text,
//!   which every header carries verbatim between [`C_BLOCK_BEGIN`] and [`C_BLOCK_END`]
//!   (checked by `test_support::check_header_block`).
//! - **The last error**: a thread-local status and message, set by [`set_error`] /
//!   [`fail`], read by each library's `*_last_error()` through [`last_error_ptr`].
//! - **The panic guard**: every `extern "C"` entry runs its body through [`guard`] (or
//!   [`guard_with`]; [`or_abort`] where C has no error channel), so no panic crosses.
//! - **Handles**: a [`HandleRegistry`] owns the objects C holds opaque pointers to and
//!   checks every pointer it is given (NULL, unknown, deleted, wrong kind: a
//!   [`HandleError`], `RT_ERR_ARG` for C).
//!
//! An entry in this convention:
//!
//! ```
//! use ffi_support::{fail, guard, Handle, HandleRegistry, Status};
//!
//! pub struct counter_t { n: std::sync::atomic::AtomicU64 }
//! impl Handle for counter_t { const KIND: &'static str = "counter"; }
//! static HANDLES: HandleRegistry = HandleRegistry::new();
//!
//! /// Adds one; RT_OK, or RT_ERR_ARG for a bad handle.
//! pub extern "C" fn counter_bump(c: *const counter_t) -> i32 {
//!     guard("counter_bump", Status::Panic.code(), || match HANDLES.get(c) {
//!         Ok(c) => {
//!             c.n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//!             Status::Ok.code()
//!         }
//!         Err(e) => fail(e.status(), &format!("counter_bump: {e}")),
//!     })
//! }
//!
//! let c = HANDLES.register(counter_t { n: 0.into() });
//! assert_eq!(counter_bump(c), 0);
//! assert_eq!(counter_bump(std::ptr::null()), Status::Arg.code());
//! assert_eq!(ffi_support::last_message(), "counter_bump: the counter handle is NULL");
//! ```
//!
//! Each shared library (`libgil.so`, `librefbridge.so`, ...) links its own copy of this
//! crate, so each has its own last error and registry, read through its own names
//! (`gil_last_error`, `rb_last_error`): this crate exports no C symbol of its own. A Rust
//! program linking several C layers shares one copy: a thread's last error is then its
//! last failure in any of them.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![allow(non_camel_case_types)]

mod guard;
mod handle;
mod last_error;
mod status;

pub use guard::{guard, guard_with, or_abort, panic_message};
pub use handle::{Handle, HandleError, HandleRegistry};
pub use last_error::{clear_error, fail, last_error_ptr, last_message, last_status, set_error};
pub use status::{c_block, Status, C_BLOCK_BEGIN, C_BLOCK_END};
