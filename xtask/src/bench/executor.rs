//! `cargo xtask bench executor`: interpool's `InterpreterPoolExecutor` (worker
//! interpreters of the calling process) against `ProcessPoolExecutor` (fork, the default
//! start method on 3.10-3.13, and forkserver, 3.14's) and `ThreadPoolExecutor`, in one
//! run of `integration-tests/interpool/bench/bench_executor.py` on CPython 3.11: a
//! trivial task's round trip, a 200 MB array summed (and how much this process grew),
//! CPU-bound pure Python on one and two workers, and pools of 8 and 16 workers each
//! importing numpy, scipy and pandas (start-up time, RSS and PSS with the children's,
//! CPU per worker), and the CPU CPython takes to import that stack in a fresh process
//! and in a fork of one that has numpy (the floor under the start-up ratio).

use super::report::Report;
use anyhow::{bail, Context, Result};
use std::process::Command;

pub fn run() -> Result<()> {
    let venv = crate::wheel::test_venv("3.11")?;
    let dir = crate::steps::root().join("integration-tests/interpool/bench");
    println!(
        "bench executor: {} (CPython 3.11)",
        dir.join("bench_executor.py").display()
    );
    let out = Command::new(venv.join("bin/python"))
        .arg(dir.join("bench_executor.py"))
        .current_dir(&dir)
        .output()
        .context("run bench_executor.py")?;
    if !out.status.success() {
        bail!(
            "bench_executor.py failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .context("no JSON line from bench_executor.py")?;
    let figures: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).context("parse bench_executor.py's JSON")?;
    let mut r = Report::new("executor");
    for (k, v) in &figures {
        if let Some(v) = v.as_f64() {
            r.value(k, v);
        }
    }
    r.compare(
        "round trip of a trivial task (us), vs processes",
        "round_trip_us_interpreters",
        "round_trip_us_processes",
        Some(0.2),
    );
    r.compare(
        "round trip of a trivial task (us), vs threads",
        "round_trip_us_interpreters",
        "round_trip_us_threads",
        None,
    );
    r.compare(
        "200 MB array summed (s), vs processes",
        "array_200mb_s_interpreters",
        "array_200mb_s_processes",
        Some(0.01),
    );
    r.compare(
        "200 MB array summed (s), vs the sum in the calling thread",
        "array_200mb_s_interpreters",
        "array_200mb_s_host",
        None,
    );
    r.compare(
        "8 CPU-bound tasks (s): 2 workers vs 1 (<= 1/1.8)",
        "cpu_8_tasks_s_2_interpreters",
        "cpu_8_tasks_s_1_interpreter",
        Some(0.556),
    );
    r.compare(
        "8 CPU-bound tasks (s): 2 workers vs 2 processes",
        "cpu_8_tasks_s_2_interpreters",
        "cpu_8_tasks_s_2_processes",
        Some(1.0),
    );
    for n in [8, 16] {
        for (peer, target) in [("processes", true), ("forkserver", false)] {
            let t = |x: f64| target.then_some(x);
            r.compare(
                &format!("{n} workers with the stack: start-up (s), vs {peer}"),
                &format!("stack_{n}_startup_s_interpreters"),
                &format!("stack_{n}_startup_s_{peer}"),
                t(0.7).filter(|_| n == 8),
            );
            r.compare(
                &format!("{n} workers with the stack: RSS (MiB), vs {peer}"),
                &format!("stack_{n}_rss_mib_interpreters"),
                &format!("stack_{n}_rss_mib_{peer}"),
                t(0.5).filter(|_| n == 8),
            );
            r.compare(
                &format!("{n} workers with the stack: PSS (MiB), vs {peer}"),
                &format!("stack_{n}_pss_mib_interpreters"),
                &format!("stack_{n}_pss_mib_{peer}"),
                None,
            );
        }
    }
    // Why the start-up target is out of reach: each isolated interpreter executes the
    // imports, which cost CPython itself (a fresh process) more than a fork pool's
    // worker pays (it inherits this process's numpy); the first ratio is that floor.
    r.compare(
        "importing the stack, CPU (s): fresh process vs fork with numpy (the floor)",
        "stack_import_cpu_s_fresh_process",
        "stack_import_cpu_s_forked_with_numpy",
        None,
    );
    r.compare(
        "8 workers with the stack: CPU per worker (s), vs processes",
        "stack_8_cpu_s_per_worker_interpreters",
        "stack_8_cpu_s_per_worker_processes",
        None,
    );
    r.compare(
        "8 workers with the stack: CPU per worker (s), vs a fresh process's import",
        "stack_8_cpu_s_per_worker_interpreters",
        "stack_import_cpu_s_fresh_process",
        None,
    );
    println!(
        "  a 200 MB array to a worker grew this process by {:.1} MiB (target < 10)",
        r.get("array_200mb_rss_growth_mib").unwrap_or(f64::NAN)
    );
    r.finish()
}
