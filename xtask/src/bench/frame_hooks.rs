//! `cargo xtask bench frame-hooks`: PEP 523 hooks on the machine's CPython (python3),
//! measured by frame-hooks' `hook_bench` example (release build), with the peers in the
//! same process and run: the default evaluator, a C pass-through hook (the fixture
//! `frame-hooks/benches/c/passthrough.c`, compiled here with cc), `cProfile`, and
//! `sys.setprofile` with a no-op function. The Rust pass-through hook passes every frame on
//! with `Frame::pass_through` (the target's figure); a Rust hook evaluating the frame
//! inside itself (`Frame::eval`, what a hook with work after the frame pays) is measured
//! beside it. Timings are interleaved round by round; on a
//! shared machine they are noisy, so instruction counts of one `fib(20)` under callgrind
//! (deterministic) are recorded too when valgrind is installed.

use super::report::Report;
use crate::steps::{cargo, have, root};
use anyhow::{bail, Context, Result};
use std::process::Command;

/// Calls `fib(20)` makes (the callgrind workload).
const FIB20_CALLS: f64 = 21_891.0;

fn c_fixture() -> Result<String> {
    let out_dir = root().join("target").join("bench");
    std::fs::create_dir_all(&out_dir)?;
    let lib = out_dir.join("libfh_passthrough.so");
    let src = root().join("frame-hooks/benches/c/passthrough.c");
    let status = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .context("running cc for the C pass-through hook")?;
    if !status.success() {
        bail!("cc failed to build {}", src.display());
    }
    Ok(lib.display().to_string())
}

/// Instructions callgrind counts in `fh_bench_region` for one `fib(20)` under `mode`.
fn callgrind(bin: &str, c_hook: &str, mode: &str) -> Result<f64> {
    let out = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--toggle-collect=fh_bench_region",
            "--callgrind-out-file=/dev/null",
            bin,
            "--c-hook",
            c_hook,
            "--callgrind",
            mode,
        ])
        .output()
        .context("running valgrind")?;
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("callgrind run of mode {mode} failed:\n{err}");
    }
    let line = err
        .lines()
        .find(|l| l.contains("Collected :"))
        .with_context(|| format!("no 'Collected' line from callgrind:\n{err}"))?;
    let n = line
        .rsplit(':')
        .next()
        .unwrap_or("")
        .trim()
        .parse::<f64>()
        .with_context(|| format!("cannot parse {line}"))?;
    Ok(n)
}

/// Runs the suite and writes `target/bench/frame-hooks.json`.
pub fn run() -> Result<()> {
    let mut report = Report::new("frame-hooks");
    let c_hook = c_fixture()?;
    let mut build = cargo();
    build.args([
        "build",
        "--quiet",
        "--release",
        "-p",
        "frame-hooks",
        "--example",
        "hook_bench",
    ]);
    if !build.status().map(|s| s.success()).unwrap_or(false) {
        bail!("building frame-hooks' hook_bench example failed");
    }
    let bin = root()
        .join("target/release/examples/hook_bench")
        .display()
        .to_string();
    let rounds = std::env::var("FRAME_HOOKS_BENCH_ROUNDS").unwrap_or_else(|_| "31".into());
    let mut cmd = Command::new(&bin);
    cmd.args(["--c-hook", &c_hook, "--rounds", &rounds])
        .current_dir(root());
    for (k, v) in super::gil::json_figures(cmd, "hook_bench (release, python3)")? {
        report.value(&k, v);
    }

    if have("valgrind") {
        println!("    counting instructions of fib(20) under callgrind (default, c, rust, rust_eval, profiler, cprofile)");
        let mut ir = std::collections::BTreeMap::new();
        for mode in ["default", "c", "rust", "rust_eval", "profiler", "cprofile"] {
            ir.insert(mode, callgrind(&bin, &c_hook, mode)?);
        }
        for (mode, n) in &ir {
            report.value(&format!("fib20_ir_per_call_{mode}"), n / FIB20_CALLS);
        }
        for mode in ["c", "rust", "rust_eval", "profiler", "cprofile"] {
            report.value(
                &format!("fib20_ir_overhead_per_call_{mode}"),
                (ir[mode] - ir["default"]) / FIB20_CALLS,
            );
        }
    } else {
        println!("    valgrind not installed: no instruction counts");
    }

    report.value("extra_get_ns_target", 2.0);
    report.compare(
        "fib(25): C pass-through vs default (inlining lost)",
        "fib_c_ms",
        "fib_default_ms",
        None,
    );
    report.compare(
        "gen: C pass-through vs default",
        "gen_c_ms",
        "gen_default_ms",
        None,
    );
    report.compare(
        "gen: Rust pass-through vs C pass-through",
        "gen_rust_ms",
        "gen_c_ms",
        None,
    );
    report.compare(
        "fib(25) Rust hook overhead / C hook overhead",
        "fib_rust_overhead_ms",
        "fib_c_overhead_ms",
        Some(1.05),
    );
    report.compare(
        "fib(20) instrs/call overhead: Rust / C hook",
        "fib20_ir_overhead_per_call_rust",
        "fib20_ir_overhead_per_call_c",
        Some(1.05),
    );
    report.compare(
        "fib(25) profiler overhead / cProfile overhead",
        "fib_profiler_overhead_ms",
        "fib_cprofile_overhead_ms",
        Some(0.5),
    );
    report.compare(
        "gen profiler overhead / cProfile overhead",
        "gen_profiler_overhead_ms",
        "gen_cprofile_overhead_ms",
        Some(0.5),
    );
    report.compare(
        "fib(25) Rust hook evaluating inside (Frame::eval) overhead / C hook overhead",
        "fib_rust_eval_overhead_ms",
        "fib_c_overhead_ms",
        None,
    );
    report.compare(
        "fib(20) instrs/call overhead: Rust hook evaluating inside / C hook",
        "fib20_ir_overhead_per_call_rust_eval",
        "fib20_ir_overhead_per_call_c",
        None,
    );
    report.compare(
        "fib(20) instrs/call overhead: profiler / cProfile",
        "fib20_ir_overhead_per_call_profiler",
        "fib20_ir_overhead_per_call_cprofile",
        Some(0.5),
    );
    report.compare(
        "fib(25): cProfile vs sys.setprofile no-op",
        "fib_cprofile_ms",
        "fib_setprofile_ms",
        None,
    );
    report.compare(
        "code extra get (typed) vs dict lookup by code",
        "extra_get_ns",
        "dict_lookup_by_code_ns",
        None,
    );
    report.compare(
        "code extra get (typed) vs _PyCode_GetExtra",
        "extra_get_ns",
        "extra_get_api_ns",
        None,
    );
    report.compare(
        "code extra get (ns) / 2 ns target",
        "extra_get_ns",
        "extra_get_ns_target",
        Some(1.0),
    );
    report.finish()
}
