//! Loom models of the GIL's concurrency protocol, run by `cargo xtask test` as
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=4 cargo test -p gil --release --lib
//! --target-dir target/loom loom` (3 preemptions when the variable is unset). The real code runs on loom's atomics, mutexes and condition
//! variables through the `primitive` shim; models use no switch interval and no
//! spinning (loom has no clock).

use crate::primitive::Ordering;
use crate::state::WaitKind;
use crate::{ActionTarget, Config, Gil, GilError};
use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use std::time::Duration;

fn model_gil(priority: bool) -> Gil {
    Gil::with_config(Config {
        name: "loom".into(),
        switch_interval: None,
        priority_share: if priority { 1.0 } else { 0.0 },
        priority_burst: Duration::from_secs(3600),
        spin: Duration::ZERO,
    })
    .expect("valid config")
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// Whatever the interleaving, two threads never hold the GIL together, both finish, and
/// the GIL ends free with no waiter bit left behind.
#[test]
fn loom_acquire_release_is_exclusive() {
    model(|| {
        let gil = model_gil(false);
        let inside = Arc::new(AtomicUsize::new(0));
        let spawn = |name: &'static str| {
            let gil = gil.clone();
            let inside = inside.clone();
            thread::spawn(move || {
                let h = gil.attach(name).unwrap();
                let acquired = h.acquire().unwrap();
                assert!(acquired);
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                inside.fetch_sub(1, Ordering::SeqCst);
                h.release(acquired).unwrap();
                h.detach();
            })
        };
        let a = spawn("a");
        let b = spawn("b");
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(gil.shared.lock.load(Ordering::SeqCst), 0);
        assert_eq!(gil.waiters(), 0);
    });
}

/// A thread coming back from a blocking region asks the holder to drop; the holder
/// honours it at its next poll, the GIL goes to the waiter (never straight back to the
/// releaser), and comes back to the polling thread afterwards.
#[test]
fn loom_drop_request_and_handoff() {
    model(|| {
        let gil = model_gil(true);
        let main = gil.attach("holder").unwrap();
        assert!(main.acquire().unwrap());
        let done = Arc::new(AtomicBool::new(false));
        let t = {
            let gil = gil.clone();
            let done = done.clone();
            thread::spawn(move || {
                let h = gil.attach("returning").unwrap();
                // As at the end of a blocking region entered with the GIL.
                gil.shared
                    .acquire_slow(&h.ts, WaitKind::Priority, false)
                    .unwrap();
                assert!(h.holds_gil());
                done.store(true, Ordering::SeqCst);
                h.release(true).unwrap();
                h.detach();
            })
        };
        while !done.load(Ordering::SeqCst) {
            main.poll().unwrap();
            assert!(main.holds_gil(), "poll returns with the GIL");
            thread::yield_now();
        }
        t.join().unwrap();
        assert!(main.holds_gil());
        main.release(true).unwrap();
        assert_eq!(gil.shared.lock.load(Ordering::SeqCst), 0);
    });
}

/// An action submitted for a thread blocked waiting for the GIL runs on that thread
/// without the GIL, while the submitter keeps holding it.
#[test]
fn loom_action_reaches_blocked_waiter() {
    model(|| {
        let gil = model_gil(false);
        let main = gil.attach("holder").unwrap();
        assert!(main.acquire().unwrap());
        let id = Arc::new(AtomicUsize::new(0));
        let t = {
            let gil = gil.clone();
            let id = id.clone();
            thread::spawn(move || {
                let h = gil.attach("waiter").unwrap();
                id.store(h.id().as_u64() as usize, Ordering::SeqCst);
                let acquired = h.acquire().unwrap();
                h.release(acquired).unwrap();
                h.detach();
            })
        };
        let target = loop {
            match id.load(Ordering::SeqCst) {
                0 => thread::yield_now(),
                n => break crate::ThreadId(n as u64),
            }
        };
        let ran_without_gil = Arc::new(AtomicBool::new(false));
        let flag = ran_without_gil.clone();
        let action = gil
            .submit(ActionTarget::Thread(target), move |ctx| {
                flag.store(!ctx.holds_gil, Ordering::SeqCst);
            })
            .unwrap();
        let report = action.wait(Duration::from_secs(3600)).unwrap();
        assert_eq!(report.ran(), 1);
        assert!(ran_without_gil.load(Ordering::SeqCst));
        assert!(main.holds_gil(), "the submitter kept the GIL");
        main.release(true).unwrap();
        t.join().unwrap();
    });
}

/// A stop request wakes a waiter, which leaves the queue with an error; the waiter bit
/// is cleared and the GIL stays usable.
#[test]
fn loom_stop_wakes_waiter() {
    model(|| {
        let gil = model_gil(false);
        let main = gil.attach("holder").unwrap();
        assert!(main.acquire().unwrap());
        let id = Arc::new(AtomicUsize::new(0));
        let t = {
            let gil = gil.clone();
            let id = id.clone();
            thread::spawn(move || {
                let h = gil.attach("waiter").unwrap();
                id.store(h.id().as_u64() as usize, Ordering::SeqCst);
                let r = h.acquire();
                assert!(matches!(r, Err(GilError::Stopped { .. })), "{r:?}");
                assert!(!h.holds_gil());
                h.detach();
            })
        };
        let target = loop {
            match id.load(Ordering::SeqCst) {
                0 => thread::yield_now(),
                n => break crate::ThreadId(n as u64),
            }
        };
        gil.request_stop(target).unwrap();
        t.join().unwrap();
        main.release(true).unwrap();
        assert_eq!(gil.shared.lock.load(Ordering::SeqCst), 0);
        assert!(main.acquire().unwrap());
        main.release(true).unwrap();
    });
}

/// A holder releasing while a thread is queued hands the GIL over directly: the waiter
/// always wakes up holding it (no lost wake-up between queueing and parking).
#[test]
fn loom_release_hands_off_to_queued_waiter() {
    model(|| {
        let gil = model_gil(false);
        let main = gil.attach("holder").unwrap();
        assert!(main.acquire().unwrap());
        let t = {
            let gil = gil.clone();
            thread::spawn(move || {
                let h = gil.attach("waiter").unwrap();
                let acquired = h.acquire().unwrap();
                h.release(acquired).unwrap();
                h.detach();
            })
        };
        thread::yield_now();
        main.release(true).unwrap();
        t.join().unwrap();
    });
}

/// An action for a thread inside a blocking region runs on that thread, without the
/// GIL, at the latest when the region ends; the thread then re-takes the GIL.
#[test]
fn loom_action_reaches_blocking_region() {
    model(|| {
        let gil = model_gil(false);
        let main = gil.attach("submitter").unwrap();
        let id = Arc::new(AtomicUsize::new(0));
        let submitted = Arc::new(AtomicBool::new(false));
        let t = {
            let gil = gil.clone();
            let id = id.clone();
            let submitted = submitted.clone();
            thread::spawn(move || {
                let h = gil.attach("blocked").unwrap();
                assert!(h.acquire().unwrap());
                h.allow_threads(|| {
                    id.store(h.id().as_u64() as usize, Ordering::SeqCst);
                    while !submitted.load(Ordering::SeqCst) {
                        thread::yield_now();
                    }
                })
                .unwrap();
                assert!(h.holds_gil(), "re-taken after the region");
                h.release(true).unwrap();
                h.detach();
            })
        };
        let target = loop {
            match id.load(Ordering::SeqCst) {
                0 => thread::yield_now(),
                n => break crate::ThreadId(n as u64),
            }
        };
        let action = gil
            .submit(ActionTarget::Thread(target), |ctx| {
                assert!(!ctx.holds_gil, "runs without the GIL");
            })
            .unwrap();
        submitted.store(true, Ordering::SeqCst);
        let report = action.wait(Duration::from_secs(3600)).unwrap();
        assert_eq!(report.ran(), 1);
        assert_eq!(report.panicked(), 0);
        t.join().unwrap();
        drop(main);
    });
}

/// Two nested guards dropped outer-first: while the inner one is alive no other thread
/// holds the GIL; the other thread gets it once the inner one goes.
#[test]
fn loom_nested_guards_dropped_outer_first() {
    model(|| {
        let gil = model_gil(false);
        let main = gil.attach("main").unwrap();
        let outer = main.lock().unwrap();
        let inner = main.lock().unwrap();
        let inner_alive = Arc::new(AtomicBool::new(true));
        let t = {
            let gil = gil.clone();
            let inner_alive = inner_alive.clone();
            thread::spawn(move || {
                let h = gil.attach("other").unwrap();
                let g = h.lock().unwrap();
                assert!(
                    !inner_alive.load(Ordering::SeqCst),
                    "took the GIL while another thread's guard was alive"
                );
                drop(g);
                h.detach();
            })
        };
        drop(outer);
        thread::yield_now();
        assert!(main.holds_gil(), "a live guard means the GIL is held");
        inner_alive.store(false, Ordering::SeqCst);
        drop(inner);
        t.join().unwrap();
        assert_eq!(gil.shared.lock.load(Ordering::SeqCst), 0);
    });
}

/// An action for a thread entering an interruptible region (the split-phase form):
/// submitted before the region's status says "blocking" it runs at the region's start,
/// after it the interrupter (behind the thread state's mutex) is called and the region
/// polls; either way the blocking call ends and the action runs once, without the GIL.
#[test]
fn loom_action_reaches_interruptible_region() {
    model(|| {
        let gil = model_gil(false);
        let main = gil.attach("submitter").unwrap();
        let id = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        let t = {
            let gil = gil.clone();
            let id = id.clone();
            let ran = ran.clone();
            thread::spawn(move || {
                let h = gil.attach("region").unwrap();
                id.store(h.id().as_u64() as usize, Ordering::SeqCst);
                // The blocking call waits on a condition variable the interrupter
                // signals (or returns at once if the action already ran at the region's
                // start, when there was nothing to interrupt).
                let wakeup = Arc::new((Mutex::new(false), Condvar::new()));
                let signal = wakeup.clone();
                let region = h
                    .enter_blocking_interruptible(move || {
                        *signal.0.lock().unwrap() = true;
                        signal.1.notify_all();
                    })
                    .unwrap();
                let mut interrupted = wakeup.0.lock().unwrap();
                while !*interrupted && ran.load(Ordering::SeqCst) == 0 {
                    interrupted = wakeup.1.wait(interrupted).unwrap();
                }
                drop(interrupted);
                h.poll().unwrap();
                region.leave().unwrap();
                h.detach();
            })
        };
        let target = loop {
            match id.load(Ordering::SeqCst) {
                0 => thread::yield_now(),
                n => break crate::ThreadId(n as u64),
            }
        };
        let counter = ran.clone();
        let action = gil
            .submit(ActionTarget::Thread(target), move |ctx| {
                assert!(!ctx.holds_gil, "runs without the GIL");
                counter.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        let report = action.wait(Duration::from_secs(3600)).unwrap();
        assert_eq!(report.ran(), 1);
        t.join().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        drop(main);
    });
}
