//! `cargo xtask bench interp-speed`: does an interpreter of ours run Python as fast as a
//! `python` process? For each CPython 3.10-3.13 found (pyenv's newest `X.Y.*`, else
//! `pythonX.Y` on the `PATH`: see `find_python`), `integration-tests/bench/interp_speed.py` (small versions of
//! pyperformance's pure-Python benchmarks plus issue 25's workloads; each prints its best
//! of three runs) runs in one interpreter of integration-tests' `multipy` (a libpython
//! copy loaded by elf-loader) and as a process of the same executable, alternating
//! (which goes first changes every round) for ROUNDS rounds (`INTERP_SPEED_ROUNDS`; 0
//! skips this part). The times are the working
//! thread's CPU time (`time.thread_time`): on this shared 2-vCPU machine, wall time
//! mostly measured whose turn it was.
//!
//! Per workload and version: the medians (`pyXY_NAME_ms`, `pyXY_NAME_ms_process`) and
//! the median of the per-round ratios (`pyXY_NAME_ratio`); per version the geometric
//! mean of those ratios (`pyXY_geomean_ratio`, target <= 1.03) and the worst one
//! (`pyXY_worst_ratio`, target <= 1.10). Written to `target/bench/interp-speed.json`.
//!
//! Then, per version, pyperformance's own benchmark files (pinned from PyPI, installed
//! into `target/pyperf-venv-X.Y`, run by pyperf's worker mode on both sides): the
//! `pyXY_pyperf_*` figures, see [`pyperformance`]. The load average at the start and the
//! end (`load_avg_start`, `load_avg_end`) is recorded too.

mod pyperformance;

use super::report::Report;
use crate::steps::root;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROUNDS: usize = 7;
/// Runs of each workload inside one process (the best counts).
const REPEAT: &str = "5";

/// pyenv's newest `X.Y.*` (built with `--enable-shared`: its `python` runs the very
/// `libpython` that multipy loads), else `pythonX.Y` on the `PATH` (not a pyenv shim).
/// A distribution's `/usr/bin/pythonX.Y` may be a different build from its
/// `libpythonX.Y.so` (Debian's 3.11: a static, non-PIC executable, 1.29x faster than
/// the same version's shared library in a process of its own), which would compare two
/// builds instead of two ways of running one.
pub(crate) fn find_python(major: u32, minor: u32) -> Option<PathBuf> {
    let name = format!("python{major}.{minor}");
    let pyenv = || -> Option<PathBuf> {
        let root = std::env::var_os("PYENV_ROOT")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))?;
        let prefix = format!("{major}.{minor}.");
        let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(root.join("versions"))
            .ok()?
            .flatten()
            .filter_map(|e| {
                let v = e.file_name().to_string_lossy().into_owned();
                let patch = v.strip_prefix(&prefix)?.parse::<u32>().ok()?;
                let exe = e.path().join("bin").join(&name);
                exe.is_file().then_some((patch, exe))
            })
            .collect();
        found.sort();
        found.pop().map(|(_, p)| p)
    };
    pyenv().or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join(&name))
            .find(|p| p.is_file() && !p.to_string_lossy().contains("/shims/"))
    })
}

/// Runs `cmd`, returning the workloads' `name=seconds` lines (a multipy interpreter's
/// lines carry a `[0] ` prefix).
fn times(cmd: &mut Command, what: &str) -> Result<BTreeMap<String, f64>> {
    let out = cmd.output().with_context(|| format!("run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().trim_start_matches("[0] "))
        .filter_map(|l| l.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse::<f64>().ok()?)))
        .collect())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn geomean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// The 1-minute load average (`/proc/loadavg`), if readable.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// One version's 17 workloads of `interp_speed.py`, `n` rounds: records `pyXY_*` figures in
/// `r` and returns the printed table.
fn workloads(
    r: &mut Report,
    multipy: &Path,
    python: &Path,
    script: &Path,
    n: usize,
    (major, minor): (u32, u32),
) -> Result<String> {
    let mut table = String::new();
    let tag = format!("py{major}{minor}");
    println!("bench interp-speed: {} ({n} rounds)", python.display());
    let (ours, theirs) = rounds(multipy, python, script, n)?;
    let mut paired = Vec::new();
    let mut worst: (f64, String) = (0.0, String::new());
    table.push_str(&format!(
        "\n  {major}.{minor} ({}): workload, ours ms, process ms, ratio (median of rounds) [min-max]\n",
        python.display()
    ));
    for (name, o) in &ours {
        let Some(t) = theirs.get(name) else { continue };
        let ratios: Vec<f64> = o.iter().zip(t).map(|(a, b)| a / b).collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
        let ratio = median(ratios);
        let (om, tm) = (median(o.clone()) * 1e3, median(t.clone()) * 1e3);
        r.value(&format!("{tag}_{name}_ms"), om);
        r.value(&format!("{tag}_{name}_ms_process"), tm);
        r.value(&format!("{tag}_{name}_ratio"), ratio);
        paired.push(ratio);
        if ratio > worst.0 {
            worst = (ratio, name.clone());
        }
        table.push_str(&format!(
            "    {name:<16} {om:>9.2} {tm:>9.2}  {ratio:.3}x [{lo:.2}-{hi:.2}]\n"
        ));
    }
    if paired.is_empty() {
        bail!("{}: no workload figures", python.display());
    }
    let g = geomean(&paired);
    r.value(&format!("{tag}_geomean_ratio"), g);
    r.value(&format!("{tag}_worst_ratio"), worst.0);
    table.push_str(&format!(
        "    geometric mean {g:.3}x, worst: {} {:.3}x\n",
        worst.1, worst.0
    ));
    r.compare(
        &format!("{major}.{minor}: geometric mean, ours / process"),
        &format!("{tag}_geomean_ratio"),
        "unity",
        Some(1.03),
    );
    r.compare(
        &format!("{major}.{minor}: worst workload ({})", worst.1),
        &format!("{tag}_worst_ratio"),
        "unity",
        Some(1.10),
    );
    Ok(table)
}

/// The suite.
pub fn run() -> Result<()> {
    let started = std::time::Instant::now();
    let pyperf = pyperformance::Settings::from_env()?;
    let workload_rounds = match std::env::var("INTERP_SPEED_ROUNDS") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .with_context(|| format!("INTERP_SPEED_ROUNDS={v}: not a number"))?,
        _ => ROUNDS,
    };
    let multipy = crate::demo_multipy::build_example("multipy")?;
    let script = root().join("integration-tests/bench/interp_speed.py");
    let mut r = Report::new("interp-speed");
    r.value("unity", 1.0);
    if let Some(l) = load_average() {
        r.value("load_avg_start", l);
    }
    let mut table = String::new();
    let mut pyperf_tables = String::new();
    let mut failures: Vec<String> = Vec::new();
    for (major, minor) in [(3u32, 10u32), (3, 11), (3, 12), (3, 13)] {
        let Some(python) = find_python(major, minor) else {
            println!("bench interp-speed: no python{major}.{minor}; skipped");
            continue;
        };
        if workload_rounds > 0 {
            let t = workloads(
                &mut r,
                &multipy,
                &python,
                &script,
                workload_rounds,
                (major, minor),
            )?;
            table.push_str(&t);
        }
        if pyperf.rounds > 0 {
            let (t, f) =
                pyperformance::run_version(&mut r, &pyperf, &multipy, &python, (major, minor))?;
            pyperf_tables.push_str(&t);
            failures.extend(f);
        }
    }
    if let Some(l) = load_average() {
        r.value("load_avg_end", l);
    }
    r.value("suite_seconds", started.elapsed().as_secs_f64());
    println!("{table}{pyperf_tables}");
    r.finish()?;
    if !failures.is_empty() {
        bail!(
            "pyperformance benchmarks failed:\n  {}",
            failures.join("\n  ")
        );
    }
    Ok(())
}

type Samples = BTreeMap<String, Vec<f64>>;

/// `n` rounds of one multipy interpreter and one process, alternating.
fn rounds(multipy: &Path, python: &Path, script: &Path, n: usize) -> Result<(Samples, Samples)> {
    let (mut ours, mut theirs) = (Samples::new(), Samples::new());
    for round in 0..n {
        let mut mp = Command::new(multipy);
        mp.args(["--interpreters", "1", "--python"])
            .arg(python)
            .arg(script)
            .arg(REPEAT);
        let mut proc_ = Command::new(python);
        proc_.arg(script).arg(REPEAT);
        let (a, b) = if round % 2 == 0 {
            let a = times(&mut mp, "multipy")?;
            (a, times(&mut proc_, "python")?)
        } else {
            let b = times(&mut proc_, "python")?;
            (times(&mut mp, "multipy")?, b)
        };
        for (k, v) in a {
            ours.entry(k).or_default().push(v);
        }
        for (k, v) in b {
            theirs.entry(k).or_default().push(v);
        }
    }
    Ok((ours, theirs))
}
