//! elf-loader's integration tests that count process-wide state, one binary whose tests
//! run one at a time (each takes [`serial`]): no image left registered after a refused
//! load (`bad_input`), `/proc/self/maps` restored after 64 copies (`copies`) and after
//! four whole Python lives (`python_unload`), live TLS blocks after loads, thread exits
//! and unloads (`tls`, and the `tls_model` proptest). In `tests/it/`, the other
//! modules' tests would load libraries and allocate TLS blocks while these count.

use std::sync::{Mutex, MutexGuard};

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod copies;
mod python_unload;
mod tls;
mod tls_model;

/// Held by every test of this binary for its whole run.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    // A failed test poisons the lock; the next one runs all the same.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
