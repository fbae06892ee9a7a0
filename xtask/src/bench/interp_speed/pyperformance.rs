//! The pyperformance part of `cargo xtask bench interp-speed`: pyperformance's OWN
//! benchmark files (`bm_NAME/run_benchmark.py` of pyperformance 1.11.0, pinned with pyperf
//! 2.9.0 and their dependencies in `integration-tests/bench/pyperformance-requirements.txt`
//! and installed by pip into `target/pyperf-venv-X.Y` with that version's Python; nothing
//! of pyperformance is kept in this repository), each run by pyperf's worker mode
//! (`--worker --loops L --warmups 1 --values 6 --output FILE`: the benchmark runs in the
//! current interpreter, no child process) through `integration-tests/bench/pyperf_driver.py`,
//! in one interpreter of `multipy` (`--venv` that environment) and as a process of the
//! same executable (the environment's `bin/python`), the same command line on both sides.
//!
//! The loop counts are fixed ([`BENCHMARKS`]) so both sides do the same work. The clock is
//! the working thread's CPU time (the driver's `--clock thread`; `INTERP_SPEED_PYPERF_CLOCK=wall`
//! keeps pyperf's `perf_counter`). Per round the two sides of one benchmark run back to
//! back (which goes first alternates by round). The figure (`pyXY_pyperf_NAME_ratio`) is
//! the ratio of the two sides' best values over all rounds: on this shared 2-vCPU machine
//! even CPU time grows by 10-40% with what runs beside it (the same run of richards took
//! 46-76 ms at load average 5-7), an error in one direction only, which the best value
//! of many leaves out best; the median of the per-round ratios (best value of each run)
//! is recorded too (`pyXY_pyperf_NAME_ratio_rounds_median`).
//!
//! Knobs: `INTERP_SPEED_PYPERF_ROUNDS` (default [`ROUNDS`]; 0 skips this part),
//! `INTERP_SPEED_PYPERF_BENCHMARKS` (comma-separated names from [`BENCHMARKS`]; the
//! default leaves out the two slowest, raytrace and fannkuch).

use super::super::report::Report;
use super::{geomean, median};
use crate::steps::root;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Rounds by default.
pub(super) const ROUNDS: usize = 8;
/// Warm-up values and measured values of one pyperf worker run.
const WARMUPS: &str = "1";
const VALUES: &str = "6";

/// pyperformance 1.11.0's pure-Python benchmarks that need nothing but pyperf, with the
/// loop count of one value (about 10-40 ms of CPU on CPython 3.12 here; one loop where a
/// single one already takes longer: up to 125 ms, go), and whether the default run
/// includes it. Short values, many of them: the machine's interference comes and goes
/// within a second.
pub(super) const BENCHMARKS: &[(&str, u32, bool)] = &[
    ("chaos", 1, true),
    ("deltablue", 8, true),
    ("fannkuch", 1, false),
    ("float", 1, true),
    ("generators", 1, true),
    ("go", 1, true),
    ("hexiom", 3, true),
    ("json_dumps", 2, true),
    ("json_loads", 32, true),
    ("nbody", 1, true),
    ("nqueens", 1, true),
    ("raytrace", 1, false),
    ("regex_v8", 1, true),
    ("richards", 1, true),
    ("spectral_norm", 1, true),
    ("unpack_sequence", 512, true),
];

/// What the environment asks for.
pub(super) struct Settings {
    pub rounds: usize,
    benchmarks: Vec<(&'static str, u32)>,
    clock: &'static str,
}

impl Settings {
    /// Reads the `INTERP_SPEED_PYPERF_*` variables.
    pub fn from_env() -> Result<Settings> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let rounds = match var("INTERP_SPEED_PYPERF_ROUNDS") {
            Some(v) => v
                .trim()
                .parse()
                .with_context(|| format!("INTERP_SPEED_PYPERF_ROUNDS={v}: not a number"))?,
            None => ROUNDS,
        };
        let benchmarks = match var("INTERP_SPEED_PYPERF_BENCHMARKS") {
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(|n| {
                    BENCHMARKS
                        .iter()
                        .find(|b| b.0 == n)
                        .map(|b| (b.0, b.1))
                        .with_context(|| {
                            let known: Vec<&str> = BENCHMARKS.iter().map(|b| b.0).collect();
                            format!(
                                "INTERP_SPEED_PYPERF_BENCHMARKS: no benchmark {n} (known: {})",
                                known.join(", ")
                            )
                        })
                })
                .collect::<Result<Vec<_>>>()?,
            None => BENCHMARKS
                .iter()
                .filter(|b| b.2)
                .map(|b| (b.0, b.1))
                .collect(),
        };
        let clock = match var("INTERP_SPEED_PYPERF_CLOCK").as_deref() {
            None | Some("thread") => "thread",
            Some("wall") => "wall",
            Some(other) => bail!("INTERP_SPEED_PYPERF_CLOCK={other}: use thread or wall"),
        };
        Ok(Settings {
            rounds,
            benchmarks,
            clock,
        })
    }
}

/// `v` with about four significant digits (the table's microseconds run from 0.05 to
/// 200,000).
fn four_digits(v: f64) -> String {
    let decimals = match v.abs() {
        x if x >= 1000.0 => 0,
        x if x >= 100.0 => 1,
        x if x >= 10.0 => 2,
        x if x >= 1.0 => 3,
        _ => 4,
    };
    format!("{v:.decimals$}")
}

/// The values (seconds per loop) of a pyperf JSON file (`--output` of a worker): every
/// run's `values`, warm-ups left out.
pub(super) fn pyperf_values(json: &str) -> Result<Vec<f64>> {
    let doc: serde_json::Value = serde_json::from_str(json).context("parse pyperf's JSON")?;
    let benchmarks = doc["benchmarks"]
        .as_array()
        .context("pyperf's JSON has no `benchmarks` list")?;
    let values: Vec<f64> = benchmarks
        .iter()
        .filter_map(|b| b["runs"].as_array())
        .flatten()
        .filter_map(|run| run["values"].as_array())
        .flatten()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    if values.is_empty() {
        bail!("pyperf's JSON has no values");
    }
    Ok(values)
}

/// Runs `cmd` (which writes pyperf's JSON to `out`) and returns the best value.
fn best_value(cmd: &mut Command, out: &Path, what: &str) -> Result<f64> {
    let _ = std::fs::remove_file(out);
    let run = cmd.output().with_context(|| format!("run {what}"))?;
    if !run.status.success() {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(12)..].join("\n");
        bail!("{what} failed ({}):\n{tail}", run.status);
    }
    let json = std::fs::read_to_string(out)
        .with_context(|| format!("{what}: read its output {}", out.display()))?;
    let values = pyperf_values(&json).with_context(|| format!("{what}: {}", out.display()))?;
    Ok(values.into_iter().fold(f64::MAX, f64::min))
}

/// The directory of pyperformance's benchmark files in `venv`.
fn benchmarks_dir(venv: &Path, major: u32, minor: u32) -> Result<PathBuf> {
    let dir = venv.join(format!(
        "lib/python{major}.{minor}/site-packages/pyperformance/data-files/benchmarks"
    ));
    if !dir.is_dir() {
        bail!(
            "{} is missing: pyperformance==1.11.0 did not install its benchmarks",
            dir.display()
        );
    }
    Ok(dir)
}

/// One version's pyperformance part: records `pyXY_pyperf_*` figures in `r` and returns
/// the printed table and the benchmarks that failed (with why).
pub(super) fn run_version(
    r: &mut Report,
    settings: &Settings,
    multipy: &Path,
    python: &Path,
    (major, minor): (u32, u32),
) -> Result<(String, Vec<String>)> {
    let venv = crate::venv::ensure_pyperformance(python, major, minor)?;
    let bench_dir = benchmarks_dir(&venv, major, minor)?;
    let driver = root().join("integration-tests/bench/pyperf_driver.py");
    let work = root().join("target/bench/interp-speed-pyperf");
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    let tag = format!("py{major}{minor}");
    println!(
        "bench interp-speed: pyperformance 1.11.0 on {}: {} benchmarks, {} rounds, clock {}",
        python.display(),
        settings.benchmarks.len(),
        settings.rounds,
        settings.clock
    );

    let mut failures: Vec<String> = Vec::new();
    let mut failed: Vec<&str> = Vec::new();
    let mut samples: Vec<(&str, Vec<f64>, Vec<f64>)> = Vec::new();
    for round in 0..settings.rounds {
        for &(name, loops) in &settings.benchmarks {
            if failed.contains(&name) {
                continue;
            }
            let file = bench_dir.join(format!("bm_{name}/run_benchmark.py"));
            let (ours_out, theirs_out) = (
                work.join(format!("{tag}-{name}-ours.json")),
                work.join(format!("{tag}-{name}-process.json")),
            );
            let args = |out: &Path| -> Vec<std::ffi::OsString> {
                let mut a: Vec<std::ffi::OsString> = vec![
                    driver.clone().into(),
                    "--clock".into(),
                    settings.clock.into(),
                    file.clone().into(),
                    "--worker".into(),
                    "--loops".into(),
                    loops.to_string().into(),
                    "--warmups".into(),
                    WARMUPS.into(),
                    "--values".into(),
                    VALUES.into(),
                    "--output".into(),
                ];
                a.push(out.into());
                a
            };
            let mut mp = Command::new(multipy);
            mp.args(["--interpreters", "1", "--python"])
                .arg(python)
                .arg("--venv")
                .arg(&venv)
                .args(args(&ours_out));
            let mut proc_ = Command::new(venv.join("bin/python"));
            proc_.args(args(&theirs_out));
            let what_ours = format!("{name} in a multipy interpreter ({major}.{minor})");
            let what_theirs = format!("{name} in a python{major}.{minor} process");
            let pair = if round % 2 == 0 {
                best_value(&mut mp, &ours_out, &what_ours)
                    .and_then(|a| best_value(&mut proc_, &theirs_out, &what_theirs).map(|b| (a, b)))
            } else {
                best_value(&mut proc_, &theirs_out, &what_theirs)
                    .and_then(|b| best_value(&mut mp, &ours_out, &what_ours).map(|a| (a, b)))
            };
            match pair {
                Ok((a, b)) => match samples.iter_mut().find(|s| s.0 == name) {
                    Some(s) => {
                        s.1.push(a);
                        s.2.push(b);
                    }
                    None => samples.push((name, vec![a], vec![b])),
                },
                Err(e) => {
                    let msg = format!("{major}.{minor} {name}: {e:#}");
                    println!("bench interp-speed: FAILED {msg}");
                    failures.push(msg);
                    failed.push(name);
                    samples.retain(|s| s.0 != name);
                }
            }
        }
    }

    let mut table = format!(
        "\n  {major}.{minor} pyperformance 1.11.0 ({}): benchmark, best us ours, best us process, \
         ratio of the bests; median of per-round ratios [min-max]\n",
        python.display()
    );
    let mut paired = Vec::new();
    let mut worst: (f64, &str) = (0.0, "");
    samples.sort_by(|a, b| a.0.cmp(b.0));
    for (name, o, t) in &samples {
        let ratios: Vec<f64> = o.iter().zip(t).map(|(a, b)| a / b).collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
        let rounds_median = median(ratios);
        let best = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min) * 1e6;
        let (om, tm) = (best(o), best(t));
        let ratio = om / tm;
        r.value(&format!("{tag}_pyperf_{name}_us"), om);
        r.value(&format!("{tag}_pyperf_{name}_us_process"), tm);
        r.value(&format!("{tag}_pyperf_{name}_ratio"), ratio);
        r.value(
            &format!("{tag}_pyperf_{name}_ratio_rounds_median"),
            rounds_median,
        );
        paired.push(ratio);
        if ratio > worst.0 {
            worst = (ratio, name);
        }
        table.push_str(&format!(
            "    {name:<16} {:>11} {:>11}  {ratio:.3}x; {rounds_median:.3}x [{lo:.2}-{hi:.2}]\n",
            four_digits(om),
            four_digits(tm)
        ));
    }
    if paired.is_empty() {
        table.push_str("    no figures\n");
        return Ok((table, failures));
    }
    let g = geomean(&paired);
    r.value(&format!("{tag}_pyperf_geomean_ratio"), g);
    r.value(&format!("{tag}_pyperf_worst_ratio"), worst.0);
    r.value(&format!("{tag}_pyperf_benchmarks"), paired.len() as f64);
    table.push_str(&format!(
        "    geometric mean {g:.3}x (target <= 1.03), worst: {} {:.3}x (target <= 1.10)\n",
        worst.1, worst.0
    ));
    r.compare(
        &format!("{major}.{minor} pyperformance: geometric mean"),
        &format!("{tag}_pyperf_geomean_ratio"),
        "unity",
        Some(1.03),
    );
    r.compare(
        &format!("{major}.{minor} pyperformance: worst ({})", worst.1),
        &format!("{tag}_pyperf_worst_ratio"),
        "unity",
        Some(1.10),
    );
    Ok((table, failures))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of a pyperf 2.9.0 worker's `--output` file (metadata shortened).
    const WORKER_JSON: &str = r#"{"benchmarks": [{"runs": [{"values": [0.1868, 0.1941, 0.2010],
        "warmups": [[2, 0.1401]]}]}], "metadata": {"name": "richards", "loops": 2,
        "unit": "second"}, "version": "1.0"}"#;

    #[test]
    fn worker_values_are_read_without_warmups() {
        assert_eq!(
            pyperf_values(WORKER_JSON).unwrap(),
            vec![0.1868, 0.1941, 0.2010]
        );
        assert!(pyperf_values(r#"{"benchmarks": [{"runs": [{"warmups": [[1, 0.5]]}]}]}"#).is_err());
        assert!(pyperf_values("{}").is_err());
        assert!(pyperf_values("not json").is_err());
    }

    #[test]
    fn four_significant_digits() {
        assert_eq!(four_digits(0.05123), "0.0512");
        assert_eq!(four_digits(22.456), "22.46");
        assert_eq!(four_digits(123456.7), "123457");
    }

    #[test]
    fn default_benchmarks_are_at_least_twelve() {
        assert!(BENCHMARKS.iter().filter(|b| b.2).count() >= 12);
    }
}
