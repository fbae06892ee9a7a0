//! Threads started by a namespace's code: custom code's `pthread_create` is the
//! loader's, which records a thread whose start routine is the namespace's code. The
//! end of the namespace waits for such threads: the namespace stays mapped while one
//! runs (unmapping its code under it would crash the process), and is unloaded by the
//! loader's next load or unload once the thread has exited.

use crate::common;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

fn mapped(path: &std::path::Path) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .any(|l| l.ends_with(path.to_str().unwrap()))
}

/// Waits (up to 10 s) for `cond`, calling `poke` between tries.
fn eventually(mut cond: impl FnMut() -> bool, mut poke: impl FnMut()) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        poke();
        std::thread::sleep(Duration::from_millis(2));
    }
    cond()
}

#[test]
fn a_namespace_whose_thread_runs_stays_mapped_until_the_thread_ends() {
    // A copy of its own (the tests of this binary run at once; maps are checked by path).
    let lib = common::build_so("thread_owner", &["thread_owner.c"], &["-pthread"]);
    let path = common::out_dir().join("libthread_owner_ns_end.so");
    std::fs::copy(&lib, &path).unwrap();
    let ns = elf_loader::Namespace::new("thread-owner");
    // SAFETY: the fixture's initialisers are trivial.
    let l = unsafe { ns.load(&path) }.unwrap();
    // SAFETY: signatures as in thread_owner.c.
    let (start, stop, running) = unsafe {
        (
            l.get::<extern "C" fn() -> i32>("start_worker")
                .unwrap()
                .into_raw(),
            l.get::<extern "C" fn() -> *const AtomicI32>("stop_flag_address")
                .unwrap()
                .into_raw()(),
            l.get::<extern "C" fn() -> *const AtomicI32>("running_address")
                .unwrap()
                .into_raw()(),
        )
    };
    assert_eq!(start(), 0);
    // SAFETY: the library stays mapped while its thread runs (what this test checks),
    // so these atomics stay valid until the thread has stopped.
    let (stop, running) = unsafe { (&*stop, &*running) };
    assert!(eventually(|| running.load(Ordering::SeqCst) == 1, || {}));
    drop(l);
    drop(ns);
    // The end of a namespace unloads synchronously when nothing pins it: still mapped
    // here means kept for the thread.
    assert!(mapped(&path), "kept mapped while its thread runs");
    assert_eq!(
        running.load(Ordering::SeqCst),
        1,
        "and the thread still runs its code"
    );
    stop.store(1, Ordering::SeqCst);
    // The next load or unload reaps it once the thread has exited.
    let counter = common::build_so("counter", &["counter.c"], &[]);
    let reaped = eventually(
        || !mapped(&path),
        || {
            let other = elf_loader::Namespace::new("thread-owner-poke");
            // SAFETY: the counter fixture's initialisers are trivial.
            drop(unsafe { other.load(&counter) });
        },
    );
    assert!(reaped, "unloaded after the thread ended");
}
