//! The part of gil's C ABI (`gil/include/gil.h`) the runtime calls, from the gil-capi
//! crate (linked into this library, so `gc_runtime_gil`'s `gil_t *` works with every
//! `gil.h` call).
//!
//! The runtime must hand C a `gil_t *` for its GIL, and gil's Rust API has no way to
//! turn a `Gil` into one, so the runtime makes and drives its GIL through these C
//! functions. They are gil-capi's own Rust items: the compiler checks every call.

pub use gil_capi::{
    gil_acquire, gil_attach, gil_blocking_enter, gil_blocking_leave, gil_delete, gil_detach,
    gil_holds, gil_last_error, gil_new, gil_poll, gil_release, gil_set_hooks, gil_t,
    GIL_ERR_SHUT_DOWN, GIL_ERR_STOPPED, GIL_OK,
};
