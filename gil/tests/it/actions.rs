//! Safepoint actions reach every kind of thread: the holder at its poll, a thread waiting
//! for the GIL (without taking it), a thread in a blocking region (through its
//! interrupter or its own poll), an idle thread at its next acquire; all-thread actions
//! complete; panics, detached targets and timeouts are reported.

use gil::{ActionOutcome, ActionTarget, Config, Gil, GilError, ThreadId};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use test_support::wait_until;

const BOUND: Duration = Duration::from_secs(30);

fn id_of(gil: &Gil, name: &str) -> ThreadId {
    wait_until(name, || gil.threads().iter().any(|t| t.name == name));
    gil.threads().iter().find(|t| t.name == name).unwrap().id
}

/// A gil with no switch requests, so only the test decides who holds it.
fn quiet_gil() -> Gil {
    Gil::with_config(Config {
        switch_interval: None,
        ..Config::default()
    })
    .unwrap()
}

#[test]
fn action_reaches_the_holder_at_its_poll() {
    let gil = quiet_gil();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let holder = gil
        .spawn("holder", move |h| {
            let _g = h.lock().unwrap();
            while !s.load(Ordering::Relaxed) {
                h.poll().unwrap();
            }
        })
        .unwrap();
    let id = id_of(&gil, "holder");
    wait_until("holder", || gil.holder() == Some(id));
    let action = gil
        .submit(ActionTarget::Thread(id), |ctx| {
            assert!(ctx.holds_gil);
            assert_eq!(ctx.thread_name, "holder");
        })
        .unwrap();
    let report = action.wait(BOUND).unwrap();
    assert_eq!(
        report.outcomes,
        vec![(id, ActionOutcome::Ran { held_gil: true })]
    );
    stop.store(true, Ordering::Relaxed);
    holder.join_timeout(BOUND).unwrap();
}

#[test]
fn action_reaches_a_waiter_without_the_gil() {
    let gil = quiet_gil();
    let main = gil.attach("main").unwrap();
    assert!(main.acquire().unwrap());
    let waiter = gil
        .spawn("waiter", |h| {
            let a = h.acquire().unwrap();
            h.release(a).unwrap();
        })
        .unwrap();
    let id = id_of(&gil, "waiter");
    wait_until("waiter queued", || gil.waiters() == 1);
    let action = gil.submit(ActionTarget::Thread(id), |_| ()).unwrap();
    // main holds the GIL and never polls: the waiter must run it on its own.
    let report = action.wait(BOUND).unwrap();
    assert_eq!(
        report.outcomes,
        vec![(id, ActionOutcome::Ran { held_gil: false })]
    );
    assert!(main.holds_gil());
    assert_eq!(gil.waiters(), 1, "the waiter went back to waiting");
    main.release(true).unwrap();
    waiter.join_timeout(BOUND).unwrap();
}

#[test]
fn action_interrupts_a_blocking_region() {
    let gil = quiet_gil();
    // The region waits on a condition variable that only the interrupter signals.
    let wake = Arc::new((Mutex::new(false), Condvar::new()));
    let ran_inside = Arc::new(AtomicBool::new(false));
    let (w, r) = (wake.clone(), ran_inside.clone());
    let t = gil
        .spawn("sleeper", move |h| {
            assert!(h.acquire().unwrap());
            let w2 = w.clone();
            h.allow_threads_interruptible(
                move || {
                    *w2.0.lock().unwrap() = true;
                    w2.1.notify_all();
                },
                || {
                    let mut woken = w.0.lock().unwrap();
                    while !*woken {
                        woken = w.1.wait(woken).unwrap();
                    }
                    drop(woken);
                    // Inside the region: poll runs the action without the GIL.
                    h.poll().unwrap();
                    r.store(true, Ordering::SeqCst);
                },
            )
            .unwrap();
            assert!(h.holds_gil());
            h.release(true).unwrap();
        })
        .unwrap();
    let id = id_of(&gil, "sleeper");
    wait_until("the region", || {
        gil.threads()
            .iter()
            .any(|t| t.id == id && t.status == gil::ThreadStatus::Blocking)
    });
    let action = gil.submit(ActionTarget::Thread(id), |_| ()).unwrap();
    let report = action.wait(BOUND).unwrap();
    assert_eq!(
        report.outcomes,
        vec![(id, ActionOutcome::Ran { held_gil: false })]
    );
    t.join_timeout(BOUND).unwrap();
    assert!(ran_inside.load(Ordering::SeqCst));
}

#[test]
fn all_threads_action_reaches_every_kind_of_thread() {
    let gil = quiet_gil();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let holder = gil
        .spawn("holder", move |h| {
            let _g = h.lock().unwrap();
            while !s.load(Ordering::Relaxed) {
                h.poll().unwrap();
            }
        })
        .unwrap();
    let hid = id_of(&gil, "holder");
    wait_until("holder", || gil.holder() == Some(hid));
    let waiter = gil
        .spawn("waiter", |h| {
            let a = h.acquire().unwrap();
            h.release(a).unwrap();
        })
        .unwrap();
    let (region_stop, region_stopped) = std::sync::mpsc::channel::<()>();
    let region = gil
        .spawn("region", move |h| {
            h.allow_threads(|| {
                // A region that polls between waits for its work (here: the end).
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    region_stopped.recv_timeout(Duration::from_micros(100))
                {
                    h.poll().unwrap();
                }
            })
            .unwrap();
        })
        .unwrap();
    let (go, gone) = std::sync::mpsc::channel::<()>();
    let idle = gil
        .spawn("idle", move |h| {
            // Attached, outside the GIL, not in a region: runs it at its next acquire.
            gone.recv().unwrap();
            let a = h.acquire().unwrap();
            h.release(a).unwrap();
        })
        .unwrap();
    let main = gil.attach("submitter").unwrap();
    wait_until("all five attached, waiter queued", || {
        gil.threads().len() == 5 && gil.waiters() == 1
    });
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let action = gil
        .submit(ActionTarget::AllThreads, move |_| {
            r.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    // Holder, waiter and region run it on their own; the idle thread once it takes the
    // GIL, the submitter in `wait`.
    wait_until("three runs", || runs.load(Ordering::SeqCst) >= 3);
    go.send(()).unwrap();
    let report = action.wait(BOUND).unwrap(); // runs the submitter's share too
    assert_eq!(report.ran(), 5, "{report:?}");
    assert!(report.pending.is_empty());
    let held: Vec<_> = report
        .outcomes
        .iter()
        .filter(|(_, o)| *o == ActionOutcome::Ran { held_gil: true })
        .map(|(t, _)| *t)
        .collect();
    assert!(
        held.contains(&hid),
        "the holder ran it with the GIL: {report:?}"
    );
    stop.store(true, Ordering::Relaxed);
    region_stop.send(()).unwrap();
    for j in [holder, waiter, region, idle] {
        j.join_timeout(BOUND).unwrap();
    }
    drop(main);
}

#[test]
fn panics_detached_targets_and_timeouts_are_reported() {
    let gil = quiet_gil();
    let main = gil.attach("main").unwrap();
    // A panicking action: caught, reported, and the thread goes on.
    let action = gil
        .submit(ActionTarget::Thread(main.id()), |_| {
            panic!("boom in action")
        })
        .unwrap();
    main.poll().unwrap();
    let report = action.wait(BOUND).unwrap();
    assert_eq!(report.panicked(), 1);
    assert!(
        matches!(&report.outcomes[0].1, ActionOutcome::Panicked { message } if message.contains("boom"))
    );

    // A target that detaches before its next safepoint: skipped, not waited for forever.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let t = gil
        .spawn("leaver", move |_h| {
            rx.recv().unwrap();
        })
        .unwrap();
    let id = id_of(&gil, "leaver");
    let action = gil.submit(ActionTarget::Thread(id), |_| ()).unwrap();
    // Not run yet: the thread is idle. A short wait times out naming it.
    let err = action.wait(Duration::from_millis(20)).unwrap_err();
    assert!(
        matches!(err, GilError::ActionTimeout { pending: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("leaver"), "{err}");
    tx.send(()).unwrap();
    t.join_timeout(BOUND).unwrap();
    let report = action.wait(BOUND).unwrap();
    assert_eq!(report.skipped(), 1);
    assert_eq!(report.outcomes, vec![(id, ActionOutcome::Skipped)]);

    let err = gil.submit(ActionTarget::Thread(id), |_| ()).unwrap_err();
    assert!(matches!(err, GilError::UnknownThread { .. }), "{err}");
}

#[test]
fn gil_calls_inside_an_action_are_refused() {
    let gil = quiet_gil();
    let main = gil.attach("main").unwrap();
    let _g = main.lock().unwrap();
    let results = Arc::new(Mutex::new(Vec::new()));
    let r = results.clone();
    let g2 = gil.clone();
    let action = gil
        .submit(ActionTarget::Thread(main.id()), move |_| {
            let h = g2.current().unwrap();
            let mut r = r.lock().unwrap();
            r.push(format!("{:?}", h.release(true).map_err(|e| e.to_string())));
            r.push(format!("{:?}", h.yield_now().map_err(|e| e.to_string())));
            r.push(format!(
                "{:?}",
                h.allow_threads(|| ()).map_err(|e| e.error.to_string())
            ));
            r.push(format!("{:?}", h.poll())); // a no-op inside an action
        })
        .unwrap();
    main.poll().unwrap();
    action.wait(BOUND).unwrap();
    let results = results.lock().unwrap();
    for refused in &results[..3] {
        assert!(
            refused.contains("from inside a safepoint action"),
            "{results:?}"
        );
    }
    assert_eq!(results[3], "Ok(())");
    assert!(main.holds_gil(), "still held after the action");
}
