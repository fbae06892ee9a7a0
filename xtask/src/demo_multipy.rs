//! The numpy scenario's demo: the `multipy` CLI example (integration-tests) run four
//! ways: the seed's numpy example in two interpreters, fib(30) on two threads of one
//! interpreter vs two interpreters, one of numpy's own test modules under pytest in
//! two interpreters at once, and popular binary wheels from PyPI (scipy, pandas with
//! pyarrow, duckdb, numba, ...: `integration-tests/wheels/smoke.py`) in two
//! interpreters.

use crate::steps::{cargo, root};
use anyhow::{bail, Context, Result};
use std::process::Command;

/// Runs the CLI with `args`, echoing its output; returns stdout.
fn multipy(args: &[&str]) -> Result<String> {
    let exe = root().join("target/release/examples/multipy");
    println!("    $ multipy {}", args.join(" "));
    let out = Command::new(&exe)
        .args(args)
        .output()
        .context("run multipy")?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in stdout
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
    {
        println!("      {line}");
    }
    if !out.status.success() {
        bail!("multipy {} failed ({})", args.join(" "), out.status);
    }
    Ok(stdout)
}

/// The `run R s` figure of the CLI's summary line.
fn run_secs(out: &str) -> Option<f64> {
    let line = out.lines().rev().find(|l| l.starts_with("multipy: "))?;
    line.split(", run ")
        .nth(1)?
        .trim_end_matches(" s")
        .parse()
        .ok()
}

/// Builds integration-tests' example `name` in release mode; returns its path.
pub fn build_example(name: &str) -> Result<std::path::PathBuf> {
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "--quiet",
        "-p",
        "integration-tests",
        "--example",
        name,
    ]);
    if !build
        .status()
        .with_context(|| format!("build the {name} example"))?
        .success()
    {
        bail!("building integration-tests' {name} example failed");
    }
    Ok(root().join("target/release/examples").join(name))
}

/// The scenario.
pub fn run() -> Result<String> {
    let venv = crate::venv::ensure()?;
    let venv_s = venv.to_string_lossy().into_owned();
    build_example("multipy")?;
    println!("\n  1. the seed's example: numpy in two interpreters, each with its own None");
    multipy(&[
        "--interpreters",
        "2",
        "--venv",
        &venv_s,
        "-c",
        "import numpy as np\nprint(np.arange(10)*10)\nprint('I think None is', id(None))",
    ])?;

    println!("\n  2. fib(30) twice: two threads of one interpreter, then two interpreters (three rounds, the best of each: a shared VM's vCPU is sometimes taken for a moment)");
    let fib = "def fib(x):\n    return 1 if x <= 1 else fib(x - 1) + fib(x - 2)\nfib(30)";
    let (mut one, mut two) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        let o = run_secs(&multipy(&[
            "-n",
            "1",
            "--threads-per-interpreter",
            "2",
            "-c",
            fib,
        ])?)
        .context("no run time from the one-interpreter run")?;
        let t = run_secs(&multipy(&["-n", "2", "-c", fib])?)
            .context("no run time from the two-interpreter run")?;
        (one, two) = (one.min(o), two.min(t));
    }
    println!(
        "      one interpreter {one:.2} s, two interpreters {two:.2} s (best of 3 each): {:.2}x",
        one / two
    );

    println!("\n  3. numpy's own fft tests under pytest in two interpreters at once");
    let module = venv.join("lib/python3.11/site-packages/numpy/fft/tests/test_pocketfft.py");
    let out = multipy(&[
        "-n",
        "2",
        "--venv",
        &venv_s,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--capture=sys",
        &module.to_string_lossy(),
    ])?;
    let passed: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" passed"))
        .map(|l| l.split_once("] ").map_or(l, |(_, r)| r))
        .collect();
    println!("\n  4. popular PyPI wheels (scipy, pandas with pyarrow, duckdb, numba, scikit-learn, opencv, ...) in two interpreters");
    let wheels = crate::venv::ensure_wheels()?;
    let smoke = root().join("integration-tests/wheels/smoke.py");
    let out = multipy(&[
        "-n",
        "2",
        "--venv",
        &wheels.to_string_lossy(),
        &smoke.to_string_lossy(),
    ])?;
    let smoke_lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("] smoke: "))
        .map(|l| l.split_once("] ").map_or(l, |(_, r)| r))
        .collect();
    if smoke_lines.len() != 2 || smoke_lines.iter().any(|l| !l.ends_with(" 0 failed")) {
        bail!("the wheel smoke script failed in an interpreter: {smoke_lines:?}");
    }
    // The speedup needs two idle cores; say how busy the machine was.
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    Ok(format!(
        "numpy in 2 interpreters; fib(30) twice: {one:.2} s on one interpreter, {two:.2} s on two (best of 3; speedup {:.2}x, load average {load}); pytest test_pocketfft: {}; PyPI wheels: {}",
        one / two,
        passed.join(" / "),
        smoke_lines.join(" / ")
    ))
}
