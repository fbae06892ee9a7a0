//! Panics stop at the C boundary. Every `extern "C"` entry that custom-loaded code calls
//! in place of glibc's (the `dlopen` family, `dl_iterate_phdr`, `__cxa_thread_atexit`,
//! `__tls_get_addr`) runs its body through [`guarded`], which turns a panic into the
//! entry's error return and a message naming the panic (for `dlerror`), or, where C has
//! no way to hear of an error, through [`or_abort`]. These are the loader's own entries,
//! not its C ABI: they report as glibc does, so they do not use ffi-support (a
//! dependency of C layers only); the C ABI (`capi/`, `elf-loader-capi`) runs through
//! ffi-support's guard.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The message a panic carried.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    let text = payload.downcast_ref::<&str>().copied();
    text.or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Runs the body `f` of the C entry `entry`. A panic is caught: `report` receives
/// "`entry`: internal panic (caught at the C boundary): `message`" and `on_panic` is
/// returned (the entry's documented error return).
pub(crate) fn guarded<T>(
    entry: &str,
    on_panic: T,
    report: impl FnOnce(String),
    f: impl FnOnce() -> T,
) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let msg = format!(
                "{entry}: internal panic (caught at the C boundary): {}",
                panic_message(&*payload)
            );
            tracing::error!(%msg, "panic at a C entry of elf-loader");
            report(msg);
            on_panic
        }
    }
}

/// Runs the body `f` of the C entry `entry`, which has no error return (glibc aborts when
/// these fail): a panic is printed, naming the entry and the panic, and the process
/// aborts instead of unwinding into C.
pub(crate) fn or_abort<T>(entry: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            eprintln!(
                "elf-loader: {entry}: internal panic: {}; aborting",
                panic_message(&*payload)
            );
            std::process::abort();
        }
    }
}
