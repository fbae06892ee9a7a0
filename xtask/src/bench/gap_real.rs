//! `cargo xtask bench gap-real`: GAP 4.12.1's real kernel, the same source built twice
//! with the same compiler flags: GAP's own collector (GASMAN, the default build) and
//! ours (`--with-gc=julia` against the Julia-compatibility prefix; `julia_gc.c`
//! unmodified, marking on one thread as a Julia 1.6 client), plus ours with `YoungRef`
//! per thread and two mark threads. Interleaved runs of GAP's full `testinstall` and of
//! a few computational workloads of several seconds each.
//!
//! Figures per workload and build: wall time, GAP's own CPU and GC figures
//! (`Runtime()`, `TOTAL_GC_TIME()`: for GASMAN its own accounting, for ours the process
//! CPU time between the pre- and post-GC callbacks), GC time (GASMAN: its own figure;
//! ours: gc-core's pause total), the longest pause (GASMAN: the wall time between the
//! start and end messages of each collection, `-g -g`, timestamped as they arrive;
//! ours: gc-core's), collections, and peak RSS (`ru_maxrss`). Medians of the runs with
//! their spread. `GAP_REAL_RUNS` sets the number of rounds (default 3).

use super::report::Report;
use crate::gap_real::{self, Build, GapVersion, RawRun, Variant};
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::time::Duration;

/// The computational workloads (several seconds each with GASMAN): GAP code that ends
/// with `GapBenchDone(name)`.
const WORKLOADS: [(&str, &str); 5] = [
    (
        "perm",
        "G := MathieuGroup(24);;\n\
         for i in [1 .. 16] do Length(ConjugacyClasses(Group(GeneratorsOfGroup(G)))); od;",
    ),
    (
        "smallgroups",
        "n := Sum(AllSmallGroups(128), g -> Length(ConjugacyClasses(g)));;",
    ),
    ("factorial", "s := Sum([1 .. 20000], Factorial);;"),
    (
        "strings",
        "l := List([1 .. 4000000], i -> String(i));; Sort(l);; l := 0;;",
    ),
    (
        "matrices",
        "M := RandomMat(250, 250, GF(7));; for i in [1 .. 300] do M := M * M; od;",
    ),
];

/// A build compared: its variant, environment and report suffix.
type Config = (Variant, Vec<(&'static str, String)>, &'static str);

/// The builds compared.
fn configs() -> Vec<Config> {
    vec![
        (Variant::Gasman, vec![], "gasman"),
        (Variant::Ours, vec![], "ours"),
        (
            Variant::OursPerThread,
            vec![("GC_CORE_MARK_THREADS", "2".into())],
            "ours_par",
        ),
    ]
}

/// One measurement.
#[derive(Default, Clone)]
struct Sample {
    wall_s: f64,
    gap_ms: f64,
    gap_gc_ms: f64,
    gc_ms: f64,
    max_pause_ms: f64,
    collections: f64,
    peak_rss_mb: f64,
}

fn sample(raw: &RawRun, variant: Variant, gap_ms: f64, gap_gc_ms: f64) -> Result<Sample> {
    if raw.status != 0 {
        bail!(
            "GAP ({variant:?}) exited with wait status {:#x}; output in {}",
            raw.status,
            raw.log.display()
        );
    }
    let (gc_ms, max_pause_ms, collections) = if variant == Variant::Gasman {
        let max = raw.gasman_pauses.iter().map(|(_, d)| *d).max();
        (
            gap_gc_ms,
            max.unwrap_or_default().as_secs_f64() * 1e3,
            raw.gasman_pauses.len() as f64,
        )
    } else {
        let s = raw.gc_stats.as_ref().ok_or_else(|| {
            anyhow::anyhow!(
                "gc-core wrote no statistics; output in {}",
                raw.log.display()
            )
        })?;
        let f = |k: &str| s[k].as_f64().unwrap_or(f64::NAN);
        (
            f("total_pause_ms"),
            f("max_pause_ms"),
            f("full_collections") + f("partial_collections"),
        )
    };
    Ok(Sample {
        wall_s: raw.wall.as_secs_f64(),
        gap_ms,
        gap_gc_ms,
        gc_ms,
        max_pause_ms,
        collections,
        peak_rss_mb: raw.max_rss_kb as f64 / 1024.0,
    })
}

fn workload_script(name: &str, code: &str) -> String {
    format!(
        "GapBenchT := Runtime();; GapBenchG := TOTAL_GC_TIME();;\n{code}\n\
         Print(\"gap-bench: {name} \", Runtime() - GapBenchT, \" \", TOTAL_GC_TIME() - GapBenchG, \"\\n\");\n\
         QuitGap(0);\n"
    )
}

fn run_workload(build: &Build, env: &[(&str, String)], name: &str, code: &str) -> Result<Sample> {
    let raw = gap_real::run_gap(
        build,
        &workload_script(name, code),
        env,
        &format!("bench-{name}"),
        Duration::from_secs(900),
        build.variant == Variant::Gasman,
    )?;
    let line = raw
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("gap-bench: {name} ")))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "workload {name} printed no result; output in {}",
                raw.log.display()
            )
        })?;
    let n: Vec<f64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    if n.len() != 2 {
        bail!("workload {name}: unreadable result line {line:?}");
    }
    sample(&raw, build.variant, n[0], n[1])
}

fn run_testinstall(build: &Build, env: &[(&str, String)], files: &[String]) -> Result<Sample> {
    let out = gap_real::run_files(
        build,
        "testinstall",
        files,
        env,
        "bench-testinstall",
        Duration::from_secs(3600),
        build.variant == Variant::Gasman,
    )?;
    let failed: Vec<&str> = out
        .files
        .iter()
        .filter(|r| r.failures != Some(0))
        .map(|r| r.file.as_str())
        .collect();
    if !failed.is_empty() {
        bail!(
            "testinstall ({:?}) failed: {failed:?}; output in {}",
            build.variant,
            out.raw.log.display()
        );
    }
    sample(
        &out.raw,
        build.variant,
        out.gap_ms() as f64,
        out.gap_gc_ms() as f64,
    )
}

fn median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let spread = v.last().copied().unwrap_or(0.0) - v.first().copied().unwrap_or(0.0);
    (v[v.len() / 2], spread)
}

/// `cargo xtask bench gap-real`.
pub fn run() -> Result<()> {
    let version = GapVersion::V4_12_1;
    let Some(tar) = gap_real::tarball(version) else {
        return Ok(());
    };
    gap_real::ensure_system()?;
    let prefix = gap_real::prefix(version.julia())?;
    let runs: usize = std::env::var("GAP_REAL_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(3);
    let configs = configs();
    let mut builds = Vec::new();
    for (variant, _, _) in &configs {
        builds.push(gap_real::build(&tar, version, *variant, &prefix)?);
    }
    let files = gap_real::all_files(&builds[0].dir, "testinstall")?;
    let mut names: Vec<&str> = vec!["testinstall"];
    names.extend(WORKLOADS.iter().map(|(n, _)| *n));
    let mut samples: BTreeMap<(String, &str), Vec<Sample>> = BTreeMap::new();
    for round in 0..runs {
        for name in &names {
            // Rotate the order of the builds each round.
            for k in 0..configs.len() {
                let i = (k + round) % configs.len();
                let (_, env, suffix) = &configs[i];
                let s = if *name == "testinstall" {
                    run_testinstall(&builds[i], env, &files)?
                } else {
                    let code = WORKLOADS
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, c)| *c)
                        .expect("a workload");
                    run_workload(&builds[i], env, name, code)?
                };
                println!(
                    "  round {}/{runs} {name:<12} {suffix:<9} wall {:7.2} s  GC {:8.1} ms  max pause {:6.1} ms  collections {:5}  peak RSS {:6.0} MB",
                    round + 1,
                    s.wall_s,
                    s.gc_ms,
                    s.max_pause_ms,
                    s.collections,
                    s.peak_rss_mb
                );
                samples
                    .entry((name.to_string(), suffix))
                    .or_default()
                    .push(s);
            }
        }
    }
    let mut r = Report::new("gap-real");
    r.value("runs", runs as f64);
    r.value("testinstall_files", files.len() as f64);
    for ((name, suffix), v) in &samples {
        type Field = (&'static str, fn(&Sample) -> f64);
        let fields: [Field; 7] = [
            ("wall_s", |s| s.wall_s),
            ("gap_ms", |s| s.gap_ms),
            ("gap_gc_ms", |s| s.gap_gc_ms),
            ("gc_ms", |s| s.gc_ms),
            ("max_pause_ms", |s| s.max_pause_ms),
            ("collections", |s| s.collections),
            ("peak_rss_mb", |s| s.peak_rss_mb),
        ];
        for (field, get) in fields {
            let (m, spread) = median(v.iter().map(get).collect());
            r.value(&format!("{name}_{field}_{suffix}"), m);
            r.value(&format!("{name}_{field}_{suffix}_spread"), spread);
        }
    }
    for name in &names {
        for ours in ["ours", "ours_par"] {
            let target = |t: f64| (*name == "testinstall" && ours == "ours").then_some(t);
            for (what, field, t) in [
                ("total time", "wall_s", target(1.0)),
                ("GC time", "gc_ms", target(0.8)),
                ("max pause", "max_pause_ms", target(0.5)),
                ("peak RSS", "peak_rss_mb", target(1.5)),
            ] {
                r.compare(
                    &format!("{name}: {what} ({ours} vs GASMAN)"),
                    &format!("{name}_{field}_{ours}"),
                    &format!("{name}_{field}_gasman"),
                    t,
                );
            }
        }
    }
    r.finish()
}
