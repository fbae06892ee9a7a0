//! `cargo xtask bench gap`: the minigap kernel (integration-tests) on our GC
//! (gc-core + gc-conservative + gil) vs on Boehm GC, in the same run: the same kernel,
//! the same scripts, one process per run, interleaved. Figures per workload: total
//! time, time in GC (sum of pauses), max pause, peak RSS (the child's `ru_maxrss`).
//! Workloads: group orders (Rubik's cube, Mathieu groups), the seed's BigInt benchmark
//! (`Sum(List([1..2000], Factorial))`) and its array benchmark (`bencharr`).

use super::report::Report;
use crate::steps::{cargo, root};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

const RUNS: usize = 5;

fn scripts() -> Vec<(&'static str, String)> {
    let dir = root().join("integration-tests/minigap/scripts");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    vec![
        (
            "groups",
            format!("{}\n{}", read("rubik.g"), read("mathieu.g")),
        ),
        ("factorial", read("factorial_sum.g")),
        (
            "array",
            format!(
                "{}\nPrint(bencharr(100, 40, 10, \"x\", \"y\"), \"\\n\");\n",
                read("bencharr.g")
            ),
        ),
    ]
}

fn build() -> Result<PathBuf> {
    super::ensure_boehm()?;
    let mut b = cargo();
    b.args([
        "build",
        "--release",
        "--quiet",
        "-p",
        "integration-tests",
        "--example",
        "minigap",
    ]);
    if !b.status()?.success() {
        bail!("building the minigap example failed");
    }
    Ok(root().join("target/release/examples/minigap"))
}

/// Runs one workload in a child; returns (total ms, gc ms, max pause ms, peak RSS MB).
fn run_once(exe: &PathBuf, gc: &str, script: &PathBuf) -> Result<[f64; 4]> {
    let t0 = Instant::now();
    let out = Command::new(exe)
        .args(["--gc", gc, "--stats"])
        .arg(script)
        .output()
        .with_context(|| format!("run {}", exe.display()))?;
    let total = t0.elapsed().as_secs_f64() * 1e3;
    if !out.status.success() {
        bail!(
            "minigap --gc {gc} {} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let grab = |key: &str| -> Result<f64> {
        let i = err
            .find(key)
            .with_context(|| format!("no '{key}' in {err}"))?;
        let rest = &err[i + key.len()..];
        let num: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        num.parse().with_context(|| format!("bad '{key}' in {err}"))
    };
    let gc_ms = grab("pause total")?;
    let max = grab("max")?;
    let rss = grab("peak RSS")? / 1024.0;
    Ok([total, gc_ms, max, rss])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// `cargo xtask bench gap`.
pub fn run() -> Result<()> {
    let exe = build()?;
    let dir = root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let mut files = Vec::new();
    for (name, code) in scripts() {
        let p = dir.join(format!("gap_{name}.g"));
        std::fs::write(&p, code)?;
        files.push((name, p));
    }
    let mut samples: HashMap<String, Vec<f64>> = HashMap::new();
    for run in 0..RUNS {
        for (name, script) in &files {
            for gc in ["ours", "boehm"] {
                let f = run_once(&exe, gc, script)?;
                let suffix = if gc == "boehm" { "_boehm" } else { "" };
                for (k, v) in ["total_ms", "gc_ms", "max_pause_ms", "peak_rss_mb"]
                    .iter()
                    .zip(f)
                {
                    samples
                        .entry(format!("{name}_{k}{suffix}"))
                        .or_default()
                        .push(v);
                }
            }
        }
        println!("  minigap run {}/{RUNS} done", run + 1);
    }
    let mut r = Report::new("gap");
    let mut keys: Vec<_> = samples.keys().cloned().collect();
    keys.sort();
    for k in &keys {
        r.value(k, median(samples[k].clone()));
        let v = &samples[k];
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
        r.value(&format!("{k}_spread"), hi - lo);
    }
    for (name, _) in &files {
        r.compare(
            &format!("{name}: total vs Boehm"),
            &format!("{name}_total_ms"),
            &format!("{name}_total_ms_boehm"),
            Some(1.0),
        );
        r.compare(
            &format!("{name}: GC time vs Boehm"),
            &format!("{name}_gc_ms"),
            &format!("{name}_gc_ms_boehm"),
            Some(0.8),
        );
        r.compare(
            &format!("{name}: max pause vs Boehm"),
            &format!("{name}_max_pause_ms"),
            &format!("{name}_max_pause_ms_boehm"),
            Some(1.0),
        );
        r.compare(
            &format!("{name}: peak RSS vs Boehm"),
            &format!("{name}_peak_rss_mb"),
            &format!("{name}_peak_rss_mb_boehm"),
            None,
        );
    }
    r.finish()
}
