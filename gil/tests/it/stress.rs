//! Stress: many threads taking the GIL many times, updating state that has no
//! synchronisation of its own; the result must be exact and every thread must finish.

use gil::{Config, Gil};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// State protected only by the GIL.
struct Unsynced {
    counter: UnsafeCell<u64>,
    log: UnsafeCell<Vec<u32>>,
}

// SAFETY: every access happens while holding the GIL, which is what this test checks;
// a broken GIL shows up as a wrong count or a corrupted log.
unsafe impl Sync for Unsynced {}

const BOUND: Duration = Duration::from_secs(60);

#[test]
fn threads_times_acquisitions_is_exact() {
    const THREADS: u32 = 6;
    const ROUNDS: u32 = 3000;
    let gil = Gil::with_config(Config {
        switch_interval: Some(Duration::from_micros(500)),
        ..Config::default()
    })
    .unwrap();
    let state = Arc::new(Unsynced {
        counter: UnsafeCell::new(0),
        log: UnsafeCell::new(Vec::new()),
    });
    let mut joins = Vec::new();
    for t in 0..THREADS {
        let state = state.clone();
        joins.push(
            gil.spawn(&format!("stress-{t}"), move |h| {
                for i in 0..ROUNDS {
                    let g = h.lock().unwrap();
                    // SAFETY: the GIL is held (the guard) for this read-modify-write.
                    unsafe {
                        let c = *state.counter.get();
                        std::hint::black_box(&c);
                        *state.counter.get() = c + 1;
                        (*state.log.get()).push(t);
                    }
                    // Safepoints and blocking regions between critical sections.
                    h.poll().unwrap();
                    if i % 97 == 0 {
                        h.allow_threads(std::thread::yield_now).unwrap();
                    }
                    drop(g);
                }
                ROUNDS
            })
            .unwrap(),
        );
    }
    let done: u32 = joins
        .into_iter()
        .map(|j| j.join_timeout(BOUND).expect("every thread completes"))
        .sum();
    assert_eq!(done, THREADS * ROUNDS);
    let h = gil.attach("main").unwrap();
    let _g = h.lock().unwrap();
    // SAFETY: the GIL is held and every other thread has finished.
    let (counter, log) = unsafe { (*state.counter.get(), &*state.log.get()) };
    assert_eq!(counter, u64::from(THREADS * ROUNDS));
    for t in 0..THREADS {
        assert_eq!(log.iter().filter(|&&x| x == t).count(), ROUNDS as usize);
    }
}

#[test]
fn cpu_bound_threads_share_without_starvation() {
    // Three threads that never release on their own, only poll: switch requests alone
    // must give each a share.
    let gil = Gil::with_config(Config {
        switch_interval: Some(Duration::from_millis(1)),
        ..Config::default()
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut joins = Vec::new();
    for t in 0..3 {
        let stop = stop.clone();
        joins.push(
            gil.spawn(&format!("cpu-{t}"), move |h| {
                let a = h.acquire().unwrap();
                let mut iterations = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Work "with the GIL": only the holder gets here.
                    assert!(h.holds_gil());
                    iterations += 1;
                    h.poll().unwrap();
                }
                h.release(a).unwrap();
                iterations
            })
            .unwrap(),
        );
    }
    // Until the GIL has switched 200 times (about 200 ms at a 1 ms interval, more on a
    // loaded machine): the shares below are of the work done meanwhile.
    test_support::wait_until("200 switch requests", || gil.stats().switch_requests >= 200);
    stop.store(true, Ordering::Relaxed);
    let work: Vec<u64> = joins
        .into_iter()
        .map(|j| j.join_timeout(BOUND).unwrap())
        .collect();
    // Each thread gets a real share of the work (a third each when fair; a starved
    // thread would be near zero).
    let total: u64 = work.iter().sum();
    for (t, n) in work.iter().enumerate() {
        assert!(
            *n as f64 >= 0.1 * total as f64,
            "thread {t} did {n} of {total} iterations: {work:?}"
        );
    }
    assert!(gil.stats().switch_requests >= 30, "{:?}", gil.stats());
}

#[test]
fn foreign_threads_with_ensure_are_exact() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 500;
    let gil = Gil::new();
    let state = Arc::new(Unsynced {
        counter: UnsafeCell::new(0),
        log: UnsafeCell::new(Vec::new()),
    });
    let joins: Vec<_> = (0..THREADS)
        .map(|_| {
            let gil = gil.clone();
            let state = state.clone();
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let outer = gil.ensure().unwrap();
                    let inner = gil.ensure().unwrap();
                    // SAFETY: the GIL is held by `outer`.
                    unsafe { *state.counter.get() += 1 };
                    drop(inner);
                    drop(outer);
                }
            })
        })
        .collect();
    for j in joins {
        j.join().unwrap();
    }
    let _g = gil.ensure().unwrap();
    // SAFETY: the GIL is held; the workers are done.
    assert_eq!(unsafe { *state.counter.get() }, (THREADS * ROUNDS) as u64);
    assert_eq!(
        gil.threads().len(),
        1,
        "each ensure detached what it attached"
    );
}
