//! The Rust side of `cargo xtask bench gil`: measures the GIL and its Rust peers
//! (parking_lot) in one process and prints one JSON object of named figures on stdout.
//! CPython's figures come from the Python scripts in `gil/bench/`, run by the same xtask
//! suite. Run alone with `cargo run --release -p gil --example gil_bench`.

use gil::{ActionTarget, Config, Gil};
use parking_lot::{Condvar, Mutex};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    percentile(&v, 0.5)
}

/// Best of `trials` runs of `f` (each returns ns per operation).
fn best(trials: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..trials).map(|_| f()).fold(f64::INFINITY, f64::min)
}

fn acquire_release_ns() -> (f64, f64, f64, f64) {
    const N: u64 = 5_000_000;
    let gil = Gil::new();
    let h = gil.attach("bench").unwrap();
    let handle = best(5, || {
        let t = Instant::now();
        for _ in 0..N {
            let a = h.acquire().unwrap();
            black_box(&a);
            h.release(a).unwrap();
        }
        t.elapsed().as_nanos() as f64 / N as f64
    });
    let tls = best(5, || {
        let t = Instant::now();
        for _ in 0..N {
            let a = gil.acquire().unwrap();
            black_box(&a);
            gil.release(a).unwrap();
        }
        t.elapsed().as_nanos() as f64 / N as f64
    });
    let m = Mutex::new(0u64);
    let pl = best(5, || {
        let t = Instant::now();
        for _ in 0..N {
            let mut g = m.lock();
            *g += 1;
            drop(g);
        }
        t.elapsed().as_nanos() as f64 / N as f64
    });
    let _g = h.lock().unwrap();
    let poll = best(5, || {
        let t = Instant::now();
        for _ in 0..N * 4 {
            h.poll().unwrap();
            black_box(());
        }
        t.elapsed().as_nanos() as f64 / (N * 4) as f64
    });
    (handle, tls, pl, poll)
}

/// Two threads handing the GIL back and forth: round trip in microseconds.
fn pingpong_gil(rounds: u64) -> f64 {
    let gil = Gil::new();
    let turn = Arc::new(AtomicU64::new(0)); // protected by the GIL; atomic only for Sync
    let ready = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Mutex::new(None::<Instant>));
    let spawn = |me: u64| {
        let (turn, ready, start) = (turn.clone(), ready.clone(), start.clone());
        gil.spawn(&format!("ping-{me}"), move |h| {
            ready.fetch_add(1, Ordering::SeqCst);
            while ready.load(Ordering::SeqCst) < 2 {
                std::hint::spin_loop();
            }
            let a = h.acquire().unwrap();
            start.lock().get_or_insert_with(Instant::now);
            let mut done = 0;
            while done < rounds {
                if turn.load(Ordering::Relaxed) == me {
                    turn.store(1 - me, Ordering::Relaxed);
                    done += 1;
                }
                h.yield_now().unwrap();
            }
            h.release(a).unwrap();
            Instant::now()
        })
        .unwrap()
    };
    let a = spawn(0);
    let b = spawn(1);
    let end = a.join().unwrap().max(b.join().unwrap());
    let begin = start.lock().unwrap();
    (end - begin).as_secs_f64() * 1e6 / rounds as f64
}

/// The same with a parking_lot Mutex + Condvar.
fn pingpong_parking_lot(rounds: u64) -> f64 {
    let pair = Arc::new((Mutex::new(0u64), Condvar::new()));
    let t = Instant::now();
    let joins: Vec<_> = (0..2u64)
        .map(|me| {
            let pair = pair.clone();
            std::thread::spawn(move || {
                let (m, cv) = &*pair;
                for _ in 0..rounds {
                    let mut turn = m.lock();
                    while *turn != me {
                        cv.wait(&mut turn);
                    }
                    *turn = 1 - me;
                    cv.notify_one();
                }
            })
        })
        .collect();
    for j in joins {
        j.join().unwrap();
    }
    t.elapsed().as_secs_f64() * 1e6 / rounds as f64
}

/// A CPU-bound thread holding the GIL and polling; returns (iterations/s, stop flag
/// handle) once `stop` is set.
fn cpu_thread(gil: &Gil, stop: Arc<AtomicBool>) -> gil::GilJoinHandle<f64> {
    gil.spawn("cpu", move |h| {
        let _g = h.lock().unwrap();
        let t = Instant::now();
        let mut n: u64 = 0;
        let mut x: u64 = 1;
        while !stop.load(Ordering::Relaxed) {
            // ~100 ns of work between safepoints.
            for _ in 0..32 {
                x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            n += 1;
            h.poll().unwrap();
        }
        n as f64 / t.elapsed().as_secs_f64()
    })
    .unwrap()
}

/// sleep(100 us) in a blocking region, then the GIL: latency samples in ms.
fn io_samples(gil: &Gil, n: usize) -> Vec<f64> {
    let h = gil.attach("io").unwrap();
    let _g = h.lock().unwrap();
    let mut v: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            h.allow_threads(|| std::thread::sleep(Duration::from_micros(100)))
                .unwrap();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    drop(_g);
    h.detach();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

struct Io {
    p50_ms: f64,
    p99_ms: f64,
    idle_p50_ms: f64,
    throughput_ratio: f64,
    throughput_ratio_no_gil: f64,
    priority_grants: u64,
}

fn io_latency() -> Io {
    const SAMPLES: usize = 2000;
    let mut ratios = Vec::new();
    let mut p50s = Vec::new();
    let mut p99s = Vec::new();
    let mut grants = 0;
    let mut floor = Vec::new();
    let idle = {
        let gil = Gil::new();
        percentile(&io_samples(&gil, 500), 0.5)
    };
    for _ in 0..3 {
        // The CPU-bound thread alone...
        let gil = Gil::new();
        let stop = Arc::new(AtomicBool::new(false));
        let cpu = cpu_thread(&gil, stop.clone());
        std::thread::sleep(Duration::from_millis(400));
        stop.store(true, Ordering::Relaxed);
        let alone = cpu.join().unwrap();
        // ...and next to the I/O thread.
        let gil = Gil::new();
        let stop = Arc::new(AtomicBool::new(false));
        let cpu = cpu_thread(&gil, stop.clone());
        while gil.holder().is_none() {
            std::hint::spin_loop();
        }
        let samples = io_samples(&gil, SAMPLES);
        stop.store(true, Ordering::Relaxed);
        let with_io = cpu.join().unwrap();
        grants += gil.stats().priority_grants;
        ratios.push(with_io / alone);
        // The same I/O loop in a thread that does not use the GIL: what the machine
        // alone costs the CPU-bound thread (wake-ups, shared cores).
        let gil = Gil::new();
        let stop = Arc::new(AtomicBool::new(false));
        let cpu = cpu_thread(&gil, stop.clone());
        for _ in 0..SAMPLES {
            std::thread::sleep(Duration::from_micros(100));
        }
        stop.store(true, Ordering::Relaxed);
        floor.push(cpu.join().unwrap() / alone);
        p50s.push(percentile(&samples, 0.5));
        p99s.push(percentile(&samples, 0.99));
    }
    Io {
        p50_ms: median(p50s),
        p99_ms: median(p99s),
        idle_p50_ms: idle,
        throughput_ratio: median(ratios),
        throughput_ratio_no_gil: median(floor),
        priority_grants: grants,
    }
}

/// All-threads actions with one thread holding the GIL and polling and one queued for
/// it (parked). Time to safepoint is the time until every target is at a safepoint: the
/// holder when its poll picks the action up; the queued thread is blocked, so already at
/// one (the convention of Truffle and Julia). Also measured: the time until the action
/// has *run* on both, which includes waking the parked thread.
/// Returns (all ran p50, all ran p99, holder p50, holder p99) in us.
fn ttsp() -> (f64, f64, f64, f64) {
    const SAMPLES: usize = 2000;
    let gil = Gil::with_config(Config {
        switch_interval: None, // the waiter stays queued: only actions wake it
        ..Config::default()
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let holder = gil
        .spawn("holder", move |h| {
            let _g = h.lock().unwrap();
            let mut x: u64 = 1;
            while !s.load(Ordering::Relaxed) {
                for _ in 0..16 {
                    x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
                h.poll().unwrap();
            }
        })
        .unwrap();
    while gil.holder().is_none() {
        std::hint::spin_loop();
    }
    let waiter = gil
        .spawn("waiter", |h| {
            let a = h.acquire().unwrap();
            h.release(a).unwrap();
        })
        .unwrap();
    while gil.waiters() == 0 {
        std::hint::spin_loop();
    }
    let holder_id = gil.holder().unwrap();
    let epoch = Instant::now();
    let mut all = Vec::with_capacity(SAMPLES);
    let mut held = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        std::thread::sleep(Duration::from_micros(200)); // let the waiter park again
        let arrivals = Arc::new(Mutex::new(Vec::with_capacity(2)));
        let a2 = arrivals.clone();
        let submitted = epoch.elapsed();
        let action = gil
            .submit(ActionTarget::AllThreads, move |ctx| {
                a2.lock().push((ctx.thread, epoch.elapsed()));
            })
            .unwrap();
        action.wait(Duration::from_secs(10)).unwrap();
        let arrivals = arrivals.lock();
        let us = |d: Duration| (d - submitted).as_secs_f64() * 1e6;
        all.push(arrivals.iter().map(|(_, d)| us(*d)).fold(0.0, f64::max));
        if let Some((_, d)) = arrivals.iter().find(|(t, _)| *t == holder_id) {
            held.push(us(*d));
        }
    }
    stop.store(true, Ordering::Relaxed);
    holder.join().unwrap();
    waiter.join().unwrap();
    all.sort_by(|a, b| a.total_cmp(b));
    held.sort_by(|a, b| a.total_cmp(b));
    (
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        percentile(&held, 0.5),
        percentile(&held, 0.99),
    )
}

/// The floor: a thread spinning on a relaxed flag, how long until it sees a change (us).
fn ttsp_flag() -> f64 {
    let flag = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let (f, s) = (flag.clone(), seen.clone());
    let t = std::thread::spawn(move || {
        let mut last = 0;
        loop {
            let v = f.load(Ordering::Relaxed);
            if v == u64::MAX {
                return;
            }
            if v != last {
                last = v;
                s.store(epoch.elapsed().as_nanos() as u64, Ordering::Release);
            }
        }
    });
    let mut v = Vec::new();
    for i in 1..=2000u64 {
        std::thread::sleep(Duration::from_micros(200));
        seen.store(0, Ordering::Release);
        let at = epoch.elapsed().as_nanos() as u64;
        flag.store(i, Ordering::Relaxed);
        let mut got;
        loop {
            got = seen.load(Ordering::Acquire);
            if got != 0 {
                break;
            }
        }
        v.push((got.saturating_sub(at)) as f64 / 1e3);
    }
    flag.store(u64::MAX, Ordering::Relaxed);
    t.join().unwrap();
    median(v)
}

fn main() {
    let (ar, ar_tls, ar_pl, poll) = acquire_release_ns();
    let pp = (0..3)
        .map(|_| pingpong_gil(50_000))
        .fold(f64::INFINITY, f64::min);
    let pp_pl = (0..3)
        .map(|_| pingpong_parking_lot(50_000))
        .fold(f64::INFINITY, f64::min);
    let io = io_latency();
    let (t50, t99, h50, h99) = ttsp();
    let flag = ttsp_flag();
    let figures = [
        ("acquire_release_ns", ar),
        ("acquire_release_ns_tls", ar_tls),
        ("acquire_release_ns_parking_lot", ar_pl),
        ("poll_ns", poll),
        ("pingpong_us", pp),
        ("pingpong_us_parking_lot", pp_pl),
        ("io_latency_p50_ms", io.p50_ms),
        ("io_latency_p99_ms", io.p99_ms),
        ("io_latency_p50_ms_idle", io.idle_p50_ms),
        ("cpu_throughput_ratio_vs_alone", io.throughput_ratio),
        (
            "cpu_throughput_ratio_vs_alone_no_gil",
            io.throughput_ratio_no_gil,
        ),
        ("io_priority_grants", io.priority_grants as f64),
        ("ttsp_p50_us", h50),
        ("ttsp_p99_us", h99),
        ("action_all_ran_p50_us", t50),
        ("action_all_ran_p99_us", t99),
        ("ttsp_p50_us_relaxed_flag", flag),
    ];
    let body: Vec<String> = figures
        .iter()
        .map(|(k, v)| format!("  \"{k}\": {v}"))
        .collect();
    println!("{{\n{}\n}}", body.join(",\n"));
}
