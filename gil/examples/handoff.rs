//! A tour of the GIL: two CPU-bound threads sharing it through switch requests, an
//! I/O-like thread getting it back quickly after each blocking call (the convoy-effect
//! fix), a safepoint action on every thread, and a shutdown that accounts for every
//! thread. Run with `cargo run -p gil --example handoff`; `RUST_LOG=gil=trace` shows
//! every handoff. Its output is checked by the `example_snapshot` test.

use gil::{ActionTarget, Gil, ThreadFate};
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Runs the tour and returns its report (deterministic: no times, no addresses).
pub fn run_demo() -> String {
    let mut out = String::new();
    let gil = Gil::new();
    let cfg = gil.config();
    writeln!(
        out,
        "GIL \"{}\": switch interval {:?}, convoy fix budget {:.0}% of wall time",
        gil.name(),
        cfg.switch_interval.expect("default has an interval"),
        cfg.priority_share * 100.0
    )
    .unwrap();
    let main = gil.attach("main").expect("attach main");

    writeln!(out, "phase 1: two CPU-bound threads and an I/O-like thread").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let progress: Vec<Arc<AtomicU64>> = (0..2).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let cpus: Vec<_> = (0..2)
        .map(|i| {
            let (stop, done) = (stop.clone(), progress[i].clone());
            gil.spawn(&format!("cpu-{i}"), move |h| {
                let _g = h.lock()?;
                while !stop.load(Ordering::Relaxed) {
                    done.fetch_add(1, Ordering::Relaxed); // work under the GIL
                    h.poll()?; // the safepoint: switch requests, actions, stop
                }
                Ok::<(), gil::GilError>(())
            })
            .expect("spawn")
        })
        .collect();
    let calls = 20;
    let io = gil
        .spawn("io", move |h| {
            let _g = h.lock()?;
            let mut retaken = 0;
            for _ in 0..calls {
                h.allow_threads(|| std::thread::sleep(Duration::from_micros(200)))?;
                retaken += u32::from(h.holds_gil());
            }
            Ok::<u32, gil::GilError>(retaken)
        })
        .expect("spawn");
    let retaken = io
        .join_timeout(Duration::from_secs(30))
        .expect("io joins")
        .expect("io ran");
    std::thread::sleep(Duration::from_millis(50));
    for (i, p) in progress.iter().enumerate() {
        let moved = p.load(Ordering::Relaxed) > 0;
        writeln!(out, "  cpu-{i} made progress: {}", yes(moved)).unwrap();
    }
    writeln!(
        out,
        "  switch requests honoured at poll(): {}",
        yes(gil.stats().switch_requests > 0 && gil.stats().handoffs > 0)
    )
    .unwrap();
    writeln!(
        out,
        "  io: {calls} blocking calls, GIL re-taken after each: {}",
        yes(retaken == calls)
    )
    .unwrap();

    writeln!(out, "phase 2: a safepoint action on every attached thread").unwrap();
    let action = gil
        .submit(ActionTarget::AllThreads, |ctx| {
            tracing::info!(
                thread = ctx.thread_name,
                holds_gil = ctx.holds_gil,
                "action ran"
            );
        })
        .expect("submit");
    let report = action
        .wait(Duration::from_secs(30))
        .expect("action completes");
    writeln!(
        out,
        "  ran on {} of {} threads (main, cpu-0, cpu-1), none pending: {}",
        report.ran(),
        report.outcomes.len(),
        yes(report.pending.is_empty())
    )
    .unwrap();

    writeln!(
        out,
        "phase 3: shutdown while the CPU-bound threads hold or wait"
    )
    .unwrap();
    let shutdown = gil
        .shutdown(Duration::from_secs(5))
        .expect("first shutdown");
    let mut lines: Vec<String> = shutdown
        .threads
        .iter()
        .map(|t| {
            let fate = match t.fate {
                ThreadFate::Caller => "the caller",
                ThreadFate::Detached | ThreadFate::LeftWithError => "left with an error",
                ThreadFate::Idle => "idle",
                ThreadFate::Stuck { .. } => "STUCK",
            };
            format!("  {}: {fate}", t.name)
        })
        .collect();
    lines.sort();
    for l in lines {
        writeln!(out, "{l}").unwrap();
    }
    for c in cpus {
        let r = c.join_timeout(Duration::from_secs(30)).expect("cpu joins");
        assert!(r.is_err(), "CPU threads end with the shutdown error");
    }
    writeln!(
        out,
        "  every thread accounted for, none stuck: {}",
        yes(shutdown.is_clean())
    )
    .unwrap();
    writeln!(
        out,
        "  later use is refused: {}",
        main.acquire().err().map_or("no".into(), |e| e.to_string())
    )
    .unwrap();
    out
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "NO"
    }
}

#[allow(dead_code)] // Not called when the test includes this file.
fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    print!("{}", run_demo());
}
