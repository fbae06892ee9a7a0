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

/// Live TLS blocks once the threads joined so far are gone: a thread's blocks outlive
/// its pthread key destructors and are freed once the kernel reports the thread exited,
/// a moment after `join` returns. Waits (up to 10 s) for the count to reach `expected`
/// and returns it as it then is.
fn settled_live_blocks(expected: usize) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        elf_loader::tls_reap_exited_threads();
        let n = elf_loader::tls_live_blocks();
        if n == expected || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::yield_now();
    }
}
