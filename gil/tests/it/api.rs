//! The API's contract, one behaviour per test: reentrant acquire, release only if
//! acquired, misuse errors naming the thread, ensure from foreign threads, hooks, switch
//! requests only while someone waits, the fair handoff, the convoy-effect fix and its
//! budget, thread death while holding, several GILs per thread.

use gil::{BlockReason, BorrowError, Config, Gil, GilCell, GilError, GilHooks, ThreadId};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::wait_until;

const BOUND: Duration = Duration::from_secs(30);

fn gil_with(interval_ms: u64) -> Gil {
    Gil::with_config(Config {
        switch_interval: Some(Duration::from_millis(interval_ms)),
        ..Config::default()
    })
    .unwrap()
}

/// Runs a check whose outcome depends on the scheduler (latencies, shares of the GIL)
/// once the other such checks of this binary are done (they would compete for the
/// machine's cores), up to three times: a loaded machine can starve a thread for
/// milliseconds once, but not three runs in a row. The check returns what it saw.
fn timing_sensitive(check: impl Fn() -> Result<(), String>) {
    static SERIAL: Mutex<()> = Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut seen = Vec::new();
    for _ in 0..3 {
        match check() {
            Ok(()) => return,
            Err(e) => seen.push(e),
        }
    }
    panic!("failed in 3 runs: {}", seen.join("; "));
}

#[test]
fn acquire_is_reentrant_and_release_only_if_acquired() {
    let gil = Gil::new();
    let h = gil.attach("main").unwrap();
    assert!(!h.holds_gil());
    let outer = h.acquire().unwrap();
    assert!(outer, "first acquire takes it");
    let inner = h.acquire().unwrap();
    assert!(!inner, "a holder gets false, not a deadlock");
    h.release(inner).unwrap();
    assert!(h.holds_gil(), "release(false) keeps the GIL");
    {
        let g = h.lock().unwrap();
        assert!(!g.acquired());
    }
    assert!(h.holds_gil(), "a nested guard does not release");
    h.release(outer).unwrap();
    assert!(!h.holds_gil());
    assert_eq!(gil.holder(), None);
}

#[test]
fn misuse_is_an_error_naming_the_thread() {
    let gil = Gil::with_config(Config {
        name: "interp-7".into(),
        ..Config::default()
    })
    .unwrap();
    let err = gil.acquire().unwrap_err();
    assert!(matches!(err, GilError::NotAttached { .. }), "{err}");
    assert!(err.to_string().contains("interp-7"), "{err}");
    // Releasing from a thread that is not attached is refused whatever `acquired` says
    // (`release(false)` was Ok there).
    for acquired in [false, true] {
        let err = gil.release(acquired).unwrap_err();
        assert!(matches!(err, GilError::NotAttached { .. }), "{err}");
    }

    let h = gil.attach("worker-a").unwrap();
    let err = gil.attach("again").unwrap_err();
    assert!(matches!(err, GilError::AlreadyAttached { .. }), "{err}");
    assert!(err.to_string().contains("worker-a"), "{err}");

    let err = h.release(true).unwrap_err();
    assert!(matches!(err, GilError::NotHolder { .. }), "{err}");
    assert!(
        err.to_string().contains("worker-a") && err.to_string().contains("nobody"),
        "{err}"
    );
    assert!(h.yield_now().is_err(), "yield requires holding the GIL");

    let err = gil.request_stop(ThreadId::from_u64(4242)).unwrap_err();
    assert!(
        matches!(err, GilError::UnknownThread { id: 4242, .. }),
        "{err}"
    );
}

#[test]
fn invalid_config_is_refused() {
    for (cfg, needle) in [
        (
            Config {
                switch_interval: Some(Duration::ZERO),
                ..Config::default()
            },
            "switch_interval",
        ),
        (
            Config {
                priority_share: 1.5,
                ..Config::default()
            },
            "1.5",
        ),
        (
            Config {
                priority_share: f64::NAN,
                ..Config::default()
            },
            "priority_share",
        ),
        (
            Config {
                spin: Duration::from_secs(1),
                ..Config::default()
            },
            "spin",
        ),
    ] {
        let err = Gil::with_config(cfg).unwrap_err();
        assert!(
            err.to_string().contains(needle),
            "{err} should mention {needle}"
        );
    }
}

#[test]
fn ensure_from_a_foreign_thread_attaches_and_detaches() {
    let gil = Gil::new();
    let g2 = gil.clone();
    std::thread::spawn(move || {
        assert!(g2.current().is_none());
        let outer = g2.ensure().unwrap();
        assert!(outer.state().attached && outer.state().acquired);
        assert!(outer.handle().holds_gil());
        {
            let inner = g2.ensure().unwrap();
            assert!(
                !inner.state().attached && !inner.state().acquired,
                "nested ensure is a no-op"
            );
        }
        assert!(outer.handle().holds_gil(), "inner release kept the GIL");
        assert_eq!(g2.threads().len(), 1);
        drop(outer);
        assert!(g2.current().is_none(), "ensure detached what it attached");
        assert!(g2.threads().is_empty());
        assert_eq!(g2.holder(), None);
    })
    .join()
    .unwrap();
}

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<(ThreadId, BlockReason, bool)>>,
}

impl GilHooks for Recorder {
    fn on_block(&self, thread: ThreadId, reason: BlockReason) {
        self.events.lock().unwrap().push((thread, reason, true));
    }
    fn on_unblock(&self, thread: ThreadId, reason: BlockReason) {
        self.events.lock().unwrap().push((thread, reason, false));
    }
}

#[test]
fn hooks_bracket_waiting_and_blocking_regions() {
    let gil = Gil::new();
    let rec = Arc::new(Recorder::default());
    gil.set_hooks(Some(rec.clone()));
    let main = gil.attach("main").unwrap();
    assert!(main.acquire().unwrap());
    let waiter = gil
        .spawn("waiter", |h| {
            let a = h.acquire().unwrap(); // blocks: main holds it
            h.release(a).unwrap();
            h.id()
        })
        .unwrap();
    wait_until("the waiter to queue", || gil.waiters() == 1);
    main.release(true).unwrap();
    let wid = waiter.join_timeout(BOUND).unwrap();
    assert!(main.acquire().unwrap());
    main.allow_threads(|| ()).unwrap();
    main.release(true).unwrap();

    let events = rec.events.lock().unwrap().clone();
    let of = |id: ThreadId| {
        events
            .iter()
            .filter(|e| e.0 == id)
            .map(|e| (e.1, e.2))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        of(wid),
        vec![
            (BlockReason::WaitingForGil, true),
            (BlockReason::WaitingForGil, false)
        ]
    );
    assert_eq!(
        of(main.id()),
        vec![
            (BlockReason::BlockingRegion, true),
            (BlockReason::BlockingRegion, false)
        ]
    );
    gil.set_hooks(None);
}

#[test]
fn switch_requests_only_while_someone_waits() {
    let gil = gil_with(2);
    let main = gil.attach("cpu").unwrap();
    assert!(main.acquire().unwrap());
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(30) {
        main.poll().unwrap();
    }
    assert_eq!(gil.stats().switch_requests, 0, "nobody waited: no request");

    let got_it = Arc::new(AtomicBool::new(false));
    let flag = got_it.clone();
    let waiter = gil
        .spawn("waiter", move |h| {
            let a = h.acquire().unwrap();
            flag.store(true, Ordering::SeqCst);
            h.release(a).unwrap();
        })
        .unwrap();
    // The holder never releases on its own: only the switch request at poll() can let
    // the waiter in.
    let start = Instant::now();
    while !got_it.load(Ordering::SeqCst) {
        assert!(start.elapsed() < BOUND, "the waiter never got the GIL");
        main.poll().unwrap();
        assert!(main.holds_gil(), "poll returns holding the GIL");
    }
    waiter.join_timeout(BOUND).unwrap();
    let stats = gil.stats();
    assert!(
        stats.switch_requests >= 1 && stats.handoffs >= 1,
        "{stats:?}"
    );
    main.release(true).unwrap();
}

#[test]
fn handoff_is_fair_the_releaser_cannot_take_it_back() {
    let gil = Gil::new();
    let order = Arc::new(Mutex::new(Vec::new()));
    let main = gil.attach("releaser").unwrap();
    assert!(main.acquire().unwrap());
    let o = order.clone();
    let waiter = gil
        .spawn("waiter", move |h| {
            let a = h.acquire().unwrap();
            o.lock().unwrap().push("waiter");
            h.release(a).unwrap();
        })
        .unwrap();
    wait_until("the waiter to queue", || gil.waiters() == 1);
    main.release(true).unwrap();
    // The GIL already belongs to the waiter: re-acquiring at once must queue behind it.
    assert!(main.acquire().unwrap());
    order.lock().unwrap().push("releaser");
    main.release(true).unwrap();
    waiter.join_timeout(BOUND).unwrap();
    assert_eq!(*order.lock().unwrap(), vec!["waiter", "releaser"]);
}

/// Median time for an I/O-like thread to get the GIL back after a short blocking
/// region, next to a CPU-bound thread that never releases on its own.
fn io_return_median(priority_share: f64) -> (Duration, gil::GilStats) {
    let gil = Gil::with_config(Config {
        switch_interval: Some(Duration::from_millis(40)),
        priority_share,
        ..Config::default()
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let cpu = gil
        .spawn("cpu", move |h| {
            let a = h.acquire().unwrap();
            while !s.load(Ordering::Relaxed) {
                h.poll().unwrap();
            }
            h.release(a).unwrap();
        })
        .unwrap();
    let io = gil.attach("io").unwrap();
    wait_until("the cpu thread to hold the GIL", || gil.holder().is_some());
    assert!(io.acquire().unwrap());
    let mut samples = Vec::new();
    for _ in 0..8 {
        let t = Instant::now();
        io.allow_threads(|| std::thread::sleep(Duration::from_micros(200)))
            .unwrap();
        samples.push(t.elapsed());
    }
    io.release(true).unwrap();
    stop.store(true, Ordering::Relaxed);
    cpu.join_timeout(BOUND).unwrap();
    samples.sort();
    (samples[samples.len() / 2], gil.stats())
}

#[test]
fn convoy_fix_returns_the_gil_long_before_the_interval() {
    timing_sensitive(|| {
        let (with_fix, stats) = io_return_median(0.1);
        assert!(stats.priority_grants >= 4, "{stats:?}");
        let (without, stats_off) = io_return_median(0.0);
        assert_eq!(stats_off.priority_grants, 0);
        // Without the fix the thread waits for a 40 ms interval to elapse each time.
        if without < Duration::from_millis(30) {
            return Err(format!("without the fix: {without:?}"));
        }
        if with_fix * 4 >= without {
            return Err(format!("with the fix {with_fix:?} vs without {without:?}"));
        }
        Ok(())
    });
}

#[test]
fn priority_budget_keeps_the_cpu_bound_share_fair() {
    timing_sensitive(|| {
        // A thread that computes 2 ms with the GIL then makes a tiny blocking call, forever,
        // next to a CPU-bound thread: without a budget it would preempt at every return.
        let gil = Gil::with_config(Config {
            switch_interval: Some(Duration::from_millis(5)),
            ..Config::default()
        })
        .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let cpu_ns = Arc::new(AtomicU64::new(0));
        let (s, c) = (stop.clone(), cpu_ns.clone());
        let cpu = gil
            .spawn("cpu", move |h| {
                let a = h.acquire().unwrap();
                let mut last = Instant::now();
                while !s.load(Ordering::Relaxed) {
                    let before = Instant::now();
                    h.poll().unwrap();
                    let now = Instant::now();
                    // Time between polls that did not switch counts as holding time.
                    if now - before < Duration::from_micros(50) {
                        c.fetch_add((now - last).as_nanos() as u64, Ordering::Relaxed);
                    }
                    last = now;
                }
                h.release(a).unwrap();
            })
            .unwrap();
        let s = stop.clone();
        let cycles = Arc::new(AtomicU64::new(0));
        let n = cycles.clone();
        let abuser = gil
            .spawn("abuser", move |h| {
                let a = h.acquire().unwrap();
                while !s.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_millis(2) {
                        h.poll().unwrap();
                    }
                    h.allow_threads(|| ()).unwrap();
                    n.fetch_add(1, Ordering::Relaxed);
                }
                h.release(a).unwrap();
            })
            .unwrap();
        // The window is 150 of the abuser's blocking calls (at least 300 ms), measured.
        let started = Instant::now();
        wait_until("150 blocking calls", || {
            cycles.load(Ordering::Relaxed) >= 150
        });
        stop.store(true, Ordering::Relaxed);
        let run = started.elapsed();
        cpu.join_timeout(BOUND).unwrap();
        abuser.join_timeout(BOUND).unwrap();
        let share = cpu_ns.load(Ordering::Relaxed) as f64 / run.as_nanos() as f64;
        if share > 0.2 {
            Ok(())
        } else {
            Err(format!(
                "the CPU-bound thread got only {:.0}% of the GIL",
                share * 100.0
            ))
        }
    });
}

#[test]
fn a_thread_dying_with_the_gil_releases_it() {
    let gil = Gil::new();
    let g2 = gil.clone();
    std::thread::spawn(move || {
        let h = g2.attach("dies holding").unwrap();
        assert!(h.acquire().unwrap());
        // exits without release or detach
    })
    .join()
    .unwrap();
    assert_eq!(gil.holder(), None, "released at thread exit");
    assert!(gil.threads().is_empty(), "detached at thread exit");
    let h = gil.attach("main").unwrap();
    assert!(h.acquire().unwrap());
    h.release(true).unwrap();
}

#[test]
fn a_thread_may_hold_several_gils() {
    let a = Gil::new();
    let b = Gil::new();
    let ha = a.attach("t").unwrap();
    let hb = b.attach("t").unwrap();
    assert!(ha.acquire().unwrap());
    assert!(hb.acquire().unwrap());
    assert!(a.acquire().is_ok_and(|took| !took));
    assert!(b.acquire().is_ok_and(|took| !took));
    ha.release(true).unwrap();
    assert!(hb.holds_gil() && !ha.holds_gil());
    hb.release(true).unwrap();
}

#[test]
fn stop_inside_a_region_keeps_the_value_and_the_gil_stays_free() {
    let gil = Gil::new();
    let entered = Arc::new(AtomicBool::new(false));
    let e = entered.clone();
    let (stopped, stop_seen) = std::sync::mpsc::channel::<()>();
    let t = gil
        .spawn("stopped", move |h| {
            assert!(h.acquire().unwrap());
            let r = h.allow_threads(|| {
                e.store(true, Ordering::SeqCst);
                // The region ends only once the stop was requested.
                stop_seen.recv().unwrap();
                42
            });
            let err = r.unwrap_err();
            assert!(matches!(err.error, GilError::Stopped { .. }), "{}", err);
            assert_eq!(err.value, Some(42), "the region's result is not lost");
            assert!(!h.holds_gil());
            assert!(h.acquire().is_err(), "a stopped thread cannot take the GIL");
        })
        .unwrap();
    wait_until("the region", || entered.load(Ordering::SeqCst));
    let id = gil
        .threads()
        .iter()
        .find(|t| t.name == "stopped")
        .unwrap()
        .id;
    gil.request_stop(id).unwrap();
    stopped.send(()).unwrap();
    t.join_timeout(BOUND).unwrap();
    let h = gil.attach("main").unwrap();
    assert!(h.acquire().unwrap());
    h.release(true).unwrap();
}

#[test]
fn a_panicking_region_retakes_the_gil() {
    let gil = Gil::new();
    let h = gil.attach("main").unwrap();
    assert!(h.acquire().unwrap());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = h.allow_threads(|| panic!("inside the region"));
    }));
    assert!(r.is_err());
    assert!(h.holds_gil(), "the GIL was re-taken while unwinding");
    h.release(true).unwrap();
}

/// Two nested guards dropped outer-first: the outer one's release waits for the inner
/// one, so a live guard always means the GIL is held (another thread stays queued).
#[test]
fn nested_guards_dropped_outer_first_keep_the_gil_until_the_last_one() {
    let gil = Gil::new();
    let h = gil.attach("main").unwrap();
    let outer = h.lock().unwrap();
    let inner = h.lock().unwrap();
    assert!(outer.acquired() && !inner.acquired());
    let took = Arc::new(AtomicBool::new(false));
    let t = {
        let took = took.clone();
        gil.spawn("other", move |h| {
            let g = h.lock().unwrap();
            took.store(true, Ordering::SeqCst);
            drop(g);
        })
        .unwrap()
    };
    wait_until("the other thread to queue", || gil.waiters() == 1);
    drop(outer);
    // A release hands the GIL to the queued thread at once (the lock word names it), so
    // these checks need no wait.
    assert!(
        h.holds_gil(),
        "the inner guard is alive: the GIL stays held"
    );
    assert_eq!(gil.holder(), Some(h.id()));
    assert_eq!(gil.waiters(), 1, "the other thread is still queued");
    assert!(!took.load(Ordering::SeqCst), "another thread took the GIL");
    drop(inner);
    t.join_timeout(BOUND).unwrap();
    assert!(took.load(Ordering::SeqCst));
    assert!(!h.holds_gil());
}

/// `release(true)` of a raw acquisition while a guard of the thread is alive waits for
/// that guard: the GIL is released when the guard goes.
#[test]
fn a_raw_release_under_a_live_guard_waits_for_the_guard() {
    let gil = Gil::new();
    let h = gil.attach("main").unwrap();
    let acquired = h.acquire().unwrap();
    let g = h.lock().unwrap();
    h.release(acquired).unwrap();
    assert!(h.holds_gil(), "the guard is alive: the GIL stays held");
    drop(g);
    assert!(!h.holds_gil(), "the last guard released it");
    assert_eq!(gil.holder(), None);
    // Guards in order still release at the outer one, and a nested ensure guard counts.
    let outer = h.lock().unwrap();
    let e = gil.ensure().unwrap();
    drop(outer);
    assert!(h.holds_gil(), "the ensure guard is alive");
    drop(e);
    assert!(!h.holds_gil());
}

/// Inside a blocking region the thread does not hold the GIL and is reported blocked
/// (a GC hook counts it as stopped): taking the GIL there, through any call, or opening
/// a second region, is refused with an error.
#[test]
fn taking_the_gil_inside_a_blocking_region_is_refused() {
    let gil = Gil::new();
    let h = gil.attach("main").unwrap();
    let (acquire, lock, ensure, nested, held) = h
        .allow_threads(|| {
            let acquire = h.acquire().map_err(|e| e.to_string());
            let lock = h.lock().map(|g| g.acquired()).map_err(|e| e.to_string());
            let ensure = gil.ensure().map(|_| ()).map_err(|e| e.to_string());
            let nested = h.allow_threads(|| ()).map_err(|e| e.error.to_string());
            (acquire, lock, ensure, nested, h.holds_gil())
        })
        .unwrap();
    for r in [acquire.map(|_| ()), lock.map(|_| ()), ensure, nested] {
        let e = r.unwrap_err();
        assert!(e.contains("inside a blocking region"), "{e}");
    }
    assert!(!held, "the region never held the GIL");
    assert!(!h.holds_gil());
    assert!(
        h.acquire().unwrap(),
        "after the region the GIL can be taken"
    );
    h.release(true).unwrap();
}

/// `GilCell`: threads serialised by the GIL update Rust data through their guards, with
/// no `unsafe`; the count and the per-thread log come out exact.
#[test]
fn gil_cell_protects_rust_data() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 500;
    let gil = Gil::new();
    let state = Arc::new(GilCell::new(&gil, (0u64, Vec::new())));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let state = state.clone();
            gil.spawn(&format!("cell-{t}"), move |h| {
                for i in 0..ROUNDS {
                    let g = h.lock().unwrap();
                    {
                        let mut s = state.borrow_mut(&g);
                        let c = s.0;
                        std::hint::black_box(&c);
                        s.0 = c + 1;
                        s.1.push(t);
                    }
                    h.poll().unwrap();
                    if i % 97 == 0 {
                        h.allow_threads(std::thread::yield_now).unwrap();
                    }
                }
            })
            .unwrap()
        })
        .collect();
    for w in workers {
        w.join_timeout(BOUND).unwrap();
    }
    let h = gil.attach("main").unwrap();
    let g = h.lock().unwrap();
    let s = state.borrow(&g);
    assert_eq!(s.0, (THREADS * ROUNDS) as u64);
    for t in 0..THREADS {
        assert_eq!(s.1.iter().filter(|&&x| x == t).count(), ROUNDS);
    }
}

/// Borrows are checked like `RefCell`'s (a second guard of the same thread cannot alias
/// a mutable borrow), and a guard proves the GIL only for its own GIL and while its
/// thread holds it.
#[test]
fn gil_cell_refuses_conflicting_borrows_and_foreign_guards() {
    let gil = Gil::new();
    let cell = GilCell::new(&gil, 1u32);
    let h = gil.attach("main").unwrap();
    let g1 = h.lock().unwrap();
    let g2 = h.lock().unwrap();
    {
        let a = cell.borrow(&g1);
        let b = cell.borrow(&g2);
        assert_eq!(*a + *b, 2, "shared borrows coexist");
        assert_eq!(cell.try_borrow_mut(&g2).unwrap_err(), BorrowError::Borrowed);
    }
    {
        let mut w = cell.borrow_mut(&g1);
        *w = 5;
        assert_eq!(cell.try_borrow(&g2).unwrap_err(), BorrowError::BorrowedMut);
        assert_eq!(
            cell.try_borrow_mut(&g2).unwrap_err(),
            BorrowError::BorrowedMut
        );
    }
    assert_eq!(*cell.borrow(&g2), 5, "free again once the borrows are gone");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _w = cell.borrow_mut(&g1);
        let _r = cell.borrow(&g2);
    }));
    assert!(panicked.is_err(), "borrow panics where try_borrow refuses");
    assert_eq!(*cell.borrow(&g1), 5, "a panic released the borrow");

    // A guard of another GIL proves nothing about this cell's.
    let other = Gil::new();
    let ho = other.attach("main").unwrap();
    let go = ho.lock().unwrap();
    assert!(matches!(
        cell.try_borrow(&go),
        Err(BorrowError::OtherGil { .. })
    ));
    assert!(!cell.is_protected_by(&other) && cell.is_protected_by(&gil));
    drop(go);

    // Detaching the thread under its guards ends their hold: borrows are refused.
    h.clone().detach();
    let e = cell.try_borrow(&g1).unwrap_err();
    assert!(matches!(e, BorrowError::NotHeld { .. }), "{e}");
    drop((g1, g2));
    let mut cell = cell;
    *cell.get_mut() += 1;
    assert_eq!(cell.into_inner(), 6);
}

/// A mutable borrow kept across a switch (`yield_now` hands the GIL to a waiter): the
/// other thread's borrow is refused instead of aliasing it.
#[test]
fn gil_cell_borrow_kept_across_a_switch_is_not_aliased() {
    let gil = Gil::new();
    let cell = Arc::new(GilCell::new(&gil, 0u32));
    let h = gil.attach("main").unwrap();
    let g = h.lock().unwrap();
    let mut w = cell.borrow_mut(&g);
    *w = 1;
    let t = {
        let cell = cell.clone();
        gil.spawn("other", move |h| {
            let g = h.lock().unwrap();
            let seen = cell.try_borrow(&g).map(|r| *r);
            drop(g);
            seen
        })
        .unwrap()
    };
    wait_until("the other thread to queue", || gil.waiters() == 1);
    h.yield_now().unwrap();
    assert!(h.holds_gil(), "the GIL came back");
    assert_eq!(
        t.join_timeout(BOUND).unwrap(),
        Err(BorrowError::BorrowedMut)
    );
    *w += 1;
    drop(w);
    assert_eq!(*cell.borrow(&g), 2);
}

/// A guard that goes inside a blocking region ends its hold there: the region does not
/// re-take the GIL for it (it used to, leaving the thread holding a GIL nobody would
/// release).
#[test]
fn a_guard_dropped_inside_a_region_is_not_retaken() {
    let gil = Gil::new();
    let h = gil.attach("main").unwrap();
    let g = h.lock().unwrap();
    h.allow_threads(move || drop(g)).unwrap();
    assert!(!h.holds_gil(), "nobody holds a guard: the GIL is free");
    assert_eq!(gil.holder(), None);
    // A guard that stays alive gets the GIL back after the region.
    let g = h.lock().unwrap();
    h.allow_threads(|| ()).unwrap();
    assert!(h.holds_gil());
    g.release().unwrap();
    assert!(!h.holds_gil());
}

/// The split-phase form of a blocking region: `enter_blocking` returns a token whose
/// `leave` re-takes the GIL (if it was held); a token left open (as the C layer's is)
/// is found again with `current_region`; dropping a token leaves the region.
#[test]
fn blocking_region_tokens() {
    let gil = Gil::new();
    let h = gil.attach("main").unwrap();
    assert!(h.acquire().unwrap());
    let region = h.enter_blocking().unwrap();
    assert!(region.held_gil() && !h.holds_gil());
    assert_eq!(
        gil.threads()[0].status,
        gil::ThreadStatus::Blocking,
        "reported blocked"
    );
    let e = h.enter_blocking().map(|_| ()).unwrap_err();
    assert!(matches!(e, GilError::InsideRegion { .. }), "{e}");
    region.leave().unwrap();
    assert!(h.holds_gil(), "re-taken at leave");

    h.enter_blocking().unwrap().keep_open();
    assert!(!h.holds_gil(), "still inside the region");
    let region = h.current_region().unwrap();
    assert!(region.held_gil());
    drop(region);
    assert!(h.holds_gil(), "dropping the token left the region");
    let e = h.current_region().map(|_| ()).unwrap_err();
    assert!(matches!(e, GilError::NotInRegion { .. }), "{e}");
    h.release(true).unwrap();

    let region = h.enter_blocking().unwrap();
    assert!(!region.held_gil(), "entered without the GIL");
    region.leave().unwrap();
    assert!(!h.holds_gil(), "not taken at leave either");
}

/// A hook (`on_block` / `on_unblock`) runs while its thread changes state: taking the
/// GIL from it is refused with [`GilError::InsideHook`], whichever entry asks
/// (`acquire`, `lock`, `ensure`), on the thread that attached first and on a spawned one,
/// and whether or not the lock word already names the thread (a waiter in `on_block` may
/// have been handed the GIL meanwhile: `lock`/`ensure` answered Ok there while `acquire`,
/// a moment earlier, was refused).
#[test]
fn gil_calls_from_hooks_get_one_answer_from_every_entry() {
    /// What one hook call saw: thread, reason, on_block?, and acquire/lock/ensure.
    type Seen = (ThreadId, BlockReason, bool, [Result<bool, String>; 3]);
    struct Probe {
        gil: Gil,
        seen: Mutex<Vec<Seen>>,
    }
    impl Probe {
        fn record(&self, thread: ThreadId, reason: BlockReason, block: bool) {
            let name = |e: GilError| match e {
                GilError::InsideHook { .. } => "InsideHook".to_string(),
                other => other.to_string(),
            };
            let acquire = self.gil.acquire().map_err(name);
            if let Ok(true) = acquire {
                self.gil.release(true).unwrap();
            }
            let lock = self
                .gil
                .current()
                .unwrap()
                .lock()
                .map(|g| g.acquired())
                .map_err(name);
            let ensure = self
                .gil
                .ensure()
                .map(|g| g.state().acquired || g.state().attached)
                .map_err(name);
            self.seen
                .lock()
                .unwrap()
                .push((thread, reason, block, [acquire, lock, ensure]));
        }
    }
    impl GilHooks for Probe {
        fn on_block(&self, thread: ThreadId, reason: BlockReason) {
            if reason == BlockReason::WaitingForGil {
                // The case that raced: the releaser hands the GIL over while the waiter
                // is still in its hook.
                wait_until("the handoff", || self.gil.holder() == Some(thread));
            }
            self.record(thread, reason, true);
        }
        fn on_unblock(&self, thread: ThreadId, reason: BlockReason) {
            self.record(thread, reason, false);
        }
    }
    let gil = Gil::new();
    let probe = Arc::new(Probe {
        gil: gil.clone(),
        seen: Mutex::new(Vec::new()),
    });
    gil.set_hooks(Some(probe.clone()));
    let main = gil.attach("main").unwrap();
    assert!(main.acquire().unwrap());
    main.allow_threads(|| ()).unwrap();
    let (queued_tx, queued_rx) = std::sync::mpsc::channel();
    let waiter = gil
        .spawn("waiter", move |h| {
            queued_tx.send(()).unwrap();
            let a = h.acquire().unwrap(); // waits: main holds it
            h.release(a).unwrap();
        })
        .unwrap();
    queued_rx.recv().unwrap();
    wait_until("the waiter to queue", || gil.waiters() == 1);
    main.release(true).unwrap();
    waiter.join_timeout(BOUND).unwrap();
    gil.set_hooks(None);
    let seen = probe.seen.lock().unwrap().clone();
    let refused: [Result<bool, String>; 3] = std::array::from_fn(|_| Err("InsideHook".to_string()));
    assert_eq!(seen.len(), 4, "{seen:?}");
    for (thread, reason, block, answers) in seen {
        assert_eq!(answers, refused, "{thread:?} {reason:?} block={block}");
    }
}
