//! Shutdown with threads holding, waiting and blocked ends within its bound, accounts for
//! every thread, leaves no thread blocked forever, and refuses every later use.

use gil::{ActionTarget, Config, Gil, GilError, ThreadFate, ThreadStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use test_support::wait_until;

const BOUND: Duration = Duration::from_secs(30);

fn is_shutdown(e: &GilError) -> bool {
    matches!(e, GilError::ShutDown { .. })
}

#[test]
fn shutdown_with_holding_waiting_and_blocked_threads() {
    let gil = Gil::with_config(Config {
        switch_interval: None,
        ..Config::default()
    })
    .unwrap();
    // Holds the GIL and polls until told to leave.
    let holder = gil
        .spawn("holder", |h| {
            let _g = h.lock().unwrap();
            loop {
                if let Err(e) = h.poll() {
                    return e;
                }
            }
        })
        .unwrap();
    wait_until("holder", || gil.holder().is_some());
    // Two threads queued behind it.
    let waiters: Vec<_> = (0..2)
        .map(|i| {
            gil.spawn(&format!("waiter-{i}"), |h| h.acquire().unwrap_err())
                .unwrap()
        })
        .collect();
    // One in an interruptible blocking region (a condition-variable wait).
    let cv = Arc::new((Mutex::new(false), Condvar::new()));
    let c = cv.clone();
    let interruptible = gil
        .spawn("interruptible", move |h| {
            let c2 = c.clone();
            h.allow_threads_interruptible(
                move || {
                    *c2.0.lock().unwrap() = true;
                    c2.1.notify_all();
                },
                || {
                    let mut woken = c.0.lock().unwrap();
                    while !*woken {
                        woken = c.1.wait(woken).unwrap();
                    }
                },
            )
            .unwrap_err()
            .error
        })
        .unwrap();
    // One stuck in a region that ignores everything until the test lets it go (after
    // the shutdown returned).
    let (unstick, stuck_wait) = std::sync::mpsc::channel::<()>();
    let stuck = gil
        .spawn("stuck", move |h| {
            h.allow_threads(|| stuck_wait.recv().unwrap())
                .unwrap_err()
                .error
        })
        .unwrap();
    let main = gil.attach("main").unwrap();
    wait_until("everyone in place", || {
        let t = gil.threads();
        t.len() == 6
            && t.iter()
                .filter(|t| t.status == ThreadStatus::WaitingForGil)
                .count()
                == 2
            && t.iter()
                .filter(|t| t.status == ThreadStatus::Blocking)
                .count()
                == 2
    });

    let start = Instant::now();
    let report = gil.shutdown(Duration::from_millis(300)).unwrap();
    let took = start.elapsed();
    assert!(took < Duration::from_millis(1200), "shutdown took {took:?}");
    assert_eq!(
        report.threads.len(),
        6,
        "every thread accounted for: {report:?}"
    );
    let fate = |name: &str| {
        report
            .threads
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .fate
            .clone()
    };
    assert_eq!(fate("main"), ThreadFate::Caller);
    assert_eq!(
        fate("stuck"),
        ThreadFate::Stuck {
            status: ThreadStatus::Blocking,
            holds_gil: false
        }
    );
    for name in ["holder", "waiter-0", "waiter-1", "interruptible"] {
        assert!(
            matches!(fate(name), ThreadFate::Detached | ThreadFate::LeftWithError),
            "{name}: {:?}",
            fate(name)
        );
    }
    assert!(!report.is_clean());
    let err = report.into_result().unwrap_err();
    assert!(err.to_string().contains("stuck"), "{err}");

    unstick.send(()).unwrap();
    // Every join is bounded and every thread saw the shutdown as an error.
    assert!(is_shutdown(&holder.join_timeout(BOUND).unwrap()));
    for w in waiters {
        assert!(is_shutdown(&w.join_timeout(BOUND).unwrap()));
    }
    assert!(is_shutdown(&interruptible.join_timeout(BOUND).unwrap()));
    assert!(
        is_shutdown(&stuck.join_timeout(BOUND).unwrap()),
        "the stuck region ends with an error too"
    );

    // Everything afterwards is refused.
    assert!(is_shutdown(&main.acquire().unwrap_err()));
    assert!(is_shutdown(&main.poll().unwrap_err()));
    assert!(matches!(
        gil.submit(ActionTarget::AllThreads, |_| ()),
        Err(GilError::AlreadyShutDown { .. })
    ));
    let g2 = gil.clone();
    let attach = std::thread::spawn(move || g2.attach("late").unwrap_err())
        .join()
        .unwrap();
    assert!(is_shutdown(&attach), "{attach}");
    assert!(matches!(
        gil.shutdown(BOUND),
        Err(GilError::AlreadyShutDown { .. })
    ));
}

#[test]
fn clean_shutdown_releases_the_callers_gil() {
    let gil = Gil::new();
    let main = gil.attach("main").unwrap();
    assert!(main.acquire().unwrap());
    let (shut, shut_down) = std::sync::mpsc::channel::<()>();
    let idle = gil
        .spawn("idle", move |h| {
            shut_down.recv().unwrap();
            h.acquire().unwrap_err()
        })
        .unwrap();
    wait_until("idle attached", || gil.threads().len() == 2);
    let report = gil.shutdown(BOUND).unwrap().into_result().unwrap();
    shut.send(()).unwrap();
    assert!(report.elapsed < Duration::from_secs(5));
    assert_eq!(gil.holder(), None, "the caller's GIL was released");
    assert!(is_shutdown(&idle.join_timeout(BOUND).unwrap()));
    // The caller's own release after shutdown is harmless.
    main.release(true).unwrap();
}

#[test]
fn stop_request_unwinds_the_holder_and_frees_the_gil() {
    let gil = Gil::new();
    let polling = Arc::new(AtomicBool::new(false));
    let p = polling.clone();
    let victim = gil
        .spawn("victim", move |h| {
            let _g = h.lock().unwrap();
            p.store(true, Ordering::SeqCst);
            loop {
                if let Err(e) = h.poll() {
                    return e; // the guard releases the GIL on the way out
                }
            }
        })
        .unwrap();
    wait_until("victim polling", || polling.load(Ordering::SeqCst));
    let id = gil.threads()[0].id;
    gil.request_stop(id).unwrap();
    let err = victim.join_timeout(BOUND).unwrap();
    assert!(matches!(err, GilError::Stopped { .. }), "{err}");
    assert!(err.to_string().contains("victim"), "{err}");
    let main = gil.attach("main").unwrap();
    assert!(main.acquire().unwrap());
    main.release(true).unwrap();
}
