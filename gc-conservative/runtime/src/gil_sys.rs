//! The part of gil's C ABI (`gil/include/gil.h`) the runtime calls.
//!
//! gil's `capi` module is private: its Rust API has no way to hand a `Gil` to C as a
//! `gil_t *`, and a runtime must hand out one (`gc_runtime_gil`) for `gil.h`'s calls to
//! work on its GIL. So the runtime makes and drives its GIL through `gil.h`'s functions,
//! declared here. The symbols come from the gil crate linked into this one; the
//! declarations are checked against `gil.h` by `tests/it/headers.rs` (cbindgen declares
//! them in C next to the header: a difference is a "conflicting types" error).
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};

/// An opaque GIL handle (`gil.h`'s `gil_t`; only pointers to it are used).
#[repr(C)]
pub struct gil_t {
    _opaque: [u8; 0],
}

/// A block/unblock hook (`gil.h`'s `gil_hook_fn`; NULL: none).
pub type gil_hook_fn = Option<unsafe extern "C" fn(data: *mut c_void, thread_id: u64, reason: i32)>;

/// `GIL_OK`.
pub const GIL_OK: i32 = 0;
/// `GIL_ERR_SHUT_DOWN`.
pub const GIL_ERR_SHUT_DOWN: i32 = -2;
/// `GIL_ERR_STOPPED`.
pub const GIL_ERR_STOPPED: i32 = -3;

extern "C" {
    pub fn gil_last_error() -> *const c_char;
    pub fn gil_new(name: *const c_char, switch_interval_us: u64, out: *mut *mut gil_t) -> i32;
    pub fn gil_delete(gil: *mut gil_t);
    pub fn gil_attach(gil: *mut gil_t, name: *const c_char, thread_id_out: *mut u64) -> i32;
    pub fn gil_detach(gil: *mut gil_t) -> i32;
    pub fn gil_acquire(gil: *mut gil_t, acquired_out: *mut i32) -> i32;
    pub fn gil_release(gil: *mut gil_t, acquired: i32) -> i32;
    pub fn gil_poll(gil: *mut gil_t) -> i32;
    pub fn gil_holds(gil: *const gil_t) -> i32;
    pub fn gil_blocking_enter(gil: *mut gil_t, token_out: *mut i32) -> i32;
    pub fn gil_blocking_leave(gil: *mut gil_t, token: i32) -> i32;
    pub fn gil_set_hooks(
        gil: *mut gil_t,
        on_block: gil_hook_fn,
        on_unblock: gil_hook_fn,
        data: *mut c_void,
    ) -> i32;
}
