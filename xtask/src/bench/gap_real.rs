//! `cargo xtask bench gap-real [--gap 4.12.1,4.15.1] [--rounds N] [--quick]`: GAP's real
//! kernel, each release built twice from the same source with the same compiler flags:
//! GAP's own collector (GASMAN, the default build) and ours (`--with-gc=julia` against
//! the Julia-compatibility prefix; `julia_gc.c` unmodified). Per release, three builds
//! or settings run interleaved, the order rotated each round:
//!
//! | release | `gasman` | `ours` (its default) | the other mark-thread setting |
//! |---|---|---|---|
//! | 4.12.1 (a Julia 1.6 client) | GASMAN | one mark thread | `ours_par`: two (`GC_CORE_MARK_THREADS=2`, the same unmodified build) |
//! | 4.15.1 (a Julia 1.10 client) | GASMAN | two mark threads (parallel marking) | `ours_1`: one mark thread |
//!
//! Workloads: GAP's `testinstall` (every file; `--quick`: the representative part of
//! `cargo xtask test`), five computational workloads of several seconds each
//! (`--quick`: `strings` alone), `collect` (twenty forced full collections,
//! `GASMAN("collect")`, of the heap GAP starts with, each timed from GAP by the wall
//! clock; their median) and `bigheap`, whose live heap passes 1.5 GB with
//! GASMAN (a list of a million permutations of degree 500, 165,000 large integers and
//! 5 million short lists, kept while short-lived permutations are made, then three
//! forced full collections, `GASMAN("collect")`, each timed from GAP by the wall clock).
//!
//! Figures per run: wall time; the collector's time (GASMAN: its own figure,
//! `TOTAL_GC_TIME()`; ours: gc-core's pause total) and, for ours, its parts (marking,
//! the lazy sweep that allocating threads did, outside the pauses, and what the helper
//! thread swept in the background); the mutator (wall time minus the collector's
//! time; for ours it includes the lazy sweep on allocation, shown apart); the longest
//! pause (GASMAN: the wall time between the start and end messages of each collection,
//! `-g -g`, timestamped as they arrive; ours: gc-core's); collections; peak RSS
//! (`ru_maxrss`); for `bigheap` the live heap after the forced collections (GASMAN's
//! `livekb`, gc-core's live bytes) and the longest forced collection per GB live. The
//! load average (1 minute) is recorded next to every run. Medians of the rounds with
//! their spread (max - min); `--rounds` (default 3, `--quick` 1; or `GAP_REAL_RUNS`).
//!
//! JSON keys: `gapVV_<workload>_<figure>_<build>` (and `_spread`) for every figure, and
//! per release (`gap412_`, `gap415_`) the target ratios of its default build against
//! GASMAN: `testinstall_total_ratio`, `testinstall_gc_ratio`, `mutator_ratio`
//! (testinstall), `testinstall_peak_rss_ratio`, `testinstall_max_pause_ratio`,
//! `bigheap_max_pause_ratio` (the longest pause of the run), `bigheap_forced_ratio`
//! (the longest forced collection), `bigheap_peak_rss_ratio`, `collect_forced_ratio`
//! (the median forced collection of the start-up heap), plus the other thread
//! setting's pause ratios (`..._max_pause_ratio_<build>`) and
//! `collect_forced_ratio_<build>`.
//!
//! GAP's standard input is `/dev/null` in every run (the bench runs unattended, from a
//! runner whose standard input may be closed); a file that fails is reported and
//! counted (`testinstall_failed_files_<build>`), not fatal: GAP 4.12.1's
//! `testunix/streams.tst` fails now and then with any collector (see the README).

use super::report::Report;
use crate::gap_real::{self, Build, GapVersion, RawRun, Variant};
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// Options from the command line (`cargo xtask bench gap-real ...`).
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The GAP releases to measure (default both).
    pub versions: Vec<GapVersion>,
    /// Rounds (default 3, quick 1).
    pub rounds: Option<usize>,
    /// The representative files of testinstall, `strings` and `bigheap` only.
    pub quick: bool,
}

static OPTIONS: Mutex<Option<Options>> = Mutex::new(None);

/// Sets the options of the next run.
pub fn set_options(o: Options) {
    *OPTIONS.lock().expect("options lock") = Some(o);
}

/// A computational workload: GAP code that a script runs between two readings of
/// GAP's clocks.
struct Workload {
    name: &'static str,
    code: &'static str,
    /// Part of `--quick`.
    quick: bool,
}

/// The computational workloads (several seconds each with GASMAN).
const WORKLOADS: [Workload; 7] = [
    Workload {
        name: "perm",
        code: "G := MathieuGroup(24);;\n\
               for i in [1 .. 16] do Length(ConjugacyClasses(Group(GeneratorsOfGroup(G)))); od;",
        quick: false,
    },
    Workload {
        name: "smallgroups",
        code: "n := Sum(AllSmallGroups(128), g -> Length(ConjugacyClasses(g)));;",
        quick: false,
    },
    Workload {
        name: "factorial",
        code: "s := Sum([1 .. 20000], Factorial);;",
        quick: false,
    },
    Workload {
        name: "strings",
        code: "l := List([1 .. 4000000], i -> String(i));; Sort(l);; l := 0;;",
        quick: true,
    },
    Workload {
        name: "matrices",
        code: "M := RandomMat(250, 250, GF(7));; for i in [1 .. 300] do M := M * M; od;",
        quick: false,
    },
    // What a full collection of GAP's own heap costs (the one `testinstall` forces
    // before every file): twenty forced full collections of the heap GAP starts with,
    // each timed by the wall clock; reported as their median.
    Workload {
        name: "collect",
        code: "for k in [1 .. 20] do\n\
                 t := NanosecondsSinceEpoch();; GASMAN(\"collect\");\n\
                 Print(\"gap-bench-collect: \", QuoInt(NanosecondsSinceEpoch() - t, 1000), \"\\n\");\n\
               od;",
        quick: false,
    },
    // The live heap passes 1.5 GB with GASMAN: permutations of degree 500 (1 KB bodies,
    // pool objects here), large integers of 2.5 KB (big objects here) and short lists
    // (small bags), all kept, while short-lived permutations are made; then three
    // forced full collections, each timed by the wall clock.
    Workload {
        name: "bigheap",
        code: "p := PermList(Concatenation([2 .. 500], [1]));;\n\
               x := 2^20000;;\n\
               L := [];;\n\
               for i in [1 .. 1000000] do Add(L, p^i); od;\n\
               for i in [1 .. 165000] do Add(L, x + i); od;\n\
               for i in [1 .. 5000000] do Add(L, [i, i + 1]); od;\n\
               for k in [1 .. 8] do y := List([1 .. 100000], j -> p^j); od;; y := 0;;\n\
               for k in [1 .. 3] do\n\
                 t := NanosecondsSinceEpoch();; GASMAN(\"collect\");\n\
                 Print(\"gap-bench-collect: \", QuoInt(NanosecondsSinceEpoch() - t, 1000), \"\\n\");\n\
               od;",
        quick: true,
    },
];

/// A build (or setting) compared.
struct Config {
    variant: Variant,
    env: Vec<(&'static str, String)>,
    /// Report suffix.
    suffix: &'static str,
    /// Mark threads (0 for GASMAN).
    threads: usize,
}

/// The builds compared for `version`: GASMAN, ours with the release's default marking,
/// ours with the other mark-thread setting.
fn configs(version: GapVersion) -> Vec<Config> {
    let threads = |n: usize| vec![("GC_CORE_MARK_THREADS", n.to_string())];
    let mut v = vec![Config {
        variant: Variant::Gasman,
        env: vec![],
        suffix: "gasman",
        threads: 0,
    }];
    match version {
        GapVersion::V4_12_1 => {
            v.push(Config {
                variant: Variant::Ours,
                env: threads(1),
                suffix: "ours",
                threads: 1,
            });
            v.push(Config {
                variant: Variant::Ours,
                env: threads(2),
                suffix: "ours_par",
                threads: 2,
            });
        }
        GapVersion::V4_15_1 => {
            v.push(Config {
                variant: Variant::Ours,
                env: threads(2),
                suffix: "ours",
                threads: 2,
            });
            v.push(Config {
                variant: Variant::Ours,
                env: threads(1),
                suffix: "ours_1",
                threads: 1,
            });
        }
    }
    v
}

/// The key prefix of a release.
fn prefix_of(version: GapVersion) -> &'static str {
    match version {
        GapVersion::V4_12_1 => "gap412",
        GapVersion::V4_15_1 => "gap415",
    }
}

/// One measurement.
#[derive(Default, Clone)]
struct Sample {
    wall_s: f64,
    gap_ms: f64,
    gap_gc_ms: f64,
    /// The collector's time: GASMAN's own figure, or gc-core's pause total.
    gc_ms: f64,
    /// Wall time minus `gc_ms`.
    mutator_s: f64,
    /// Ours: marking inside the pauses.
    mark_ms: f64,
    /// Ours: the lazy sweep done by allocating threads (inside `mutator_s`).
    alloc_sweep_ms: f64,
    /// Ours: the lazy sweep done by the helper thread (another core).
    bg_sweep_ms: f64,
    max_pause_ms: f64,
    collections: f64,
    peak_rss_mb: f64,
    /// Write barriers that fired (ours).
    barrier_fires: f64,
    /// Pages zeroed at their grant, and returned to the OS (ours).
    pages_zeroed: f64,
    pages_returned: f64,
    /// `bigheap`: the live heap after the forced collections, MB.
    live_mb: f64,
    /// `bigheap`: the longest forced full collection as GAP saw it (wall ms).
    forced_ms: f64,
    /// `collect` (and `bigheap`): the median forced full collection (wall ms).
    forced_median_ms: f64,
    /// Files that failed (testinstall).
    failed: f64,
    /// Load average (1 minute) when the run ended.
    load: f64,
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn sample(raw: &RawRun, variant: Variant, gap_ms: f64, gap_gc_ms: f64) -> Result<Sample> {
    if raw.status != 0 {
        bail!(
            "GAP ({variant:?}) exited with wait status {:#x}; output in {}",
            raw.status,
            raw.log.display()
        );
    }
    let wall_s = raw.wall.as_secs_f64();
    let mut s = Sample {
        wall_s,
        gap_ms,
        gap_gc_ms,
        peak_rss_mb: raw.max_rss_kb as f64 / 1024.0,
        load: load_average(),
        ..Sample::default()
    };
    if variant == Variant::Gasman {
        let max = raw.gasman_pauses.iter().map(|(_, d)| *d).max();
        s.gc_ms = gap_gc_ms;
        s.max_pause_ms = max.unwrap_or_default().as_secs_f64() * 1e3;
        s.collections = raw.gasman_pauses.len() as f64;
    } else {
        let st = raw.gc_stats.as_ref().ok_or_else(|| {
            anyhow::anyhow!(
                "gc-core wrote no statistics; output in {}",
                raw.log.display()
            )
        })?;
        let f = |k: &str| st[k].as_f64().unwrap_or(f64::NAN);
        s.gc_ms = f("total_pause_ms");
        s.max_pause_ms = f("max_pause_ms");
        s.collections = f("full_collections") + f("partial_collections");
        s.mark_ms = f("total_mark_ms");
        s.alloc_sweep_ms = f("allocation_sweep_ms");
        s.bg_sweep_ms = f("background_sweep_ms");
        s.barrier_fires = f("barrier_fires");
        s.pages_zeroed = f("pages_granted_zeroed");
        s.pages_returned = f("pages_returned");
        s.live_mb = f("live_bytes") / (1024.0 * 1024.0);
    }
    s.mutator_s = wall_s - s.gc_ms / 1e3;
    Ok(s)
}

fn workload_script(name: &str, code: &str) -> String {
    format!(
        "GapBenchT := Runtime();; GapBenchG := TOTAL_GC_TIME();;\n{code}\n\
         GapBenchLive := -1;;\n\
         if GAPInfo.KernelInfo.GC = \"GASMAN\" and IsBound(GasmanStatistics().full) then GapBenchLive := GasmanStatistics().full.livekb; fi;\n\
         Print(\"gap-bench: {name} \", Runtime() - GapBenchT, \" \", TOTAL_GC_TIME() - GapBenchG, \" \", GapBenchLive, \"\\n\");\n\
         QuitGap(0);\n"
    )
}

fn run_workload(build: &Build, env: &[(&str, String)], w: &Workload) -> Result<Sample> {
    let name = w.name;
    let raw = gap_real::run_gap(
        build,
        &workload_script(name, w.code),
        env,
        &format!("bench-{name}"),
        Duration::from_secs(1800),
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
    if n.len() != 3 {
        bail!("workload {name}: unreadable result line {line:?}");
    }
    let mut s = sample(&raw, build.variant, n[0], n[1])?;
    if n[2] >= 0.0 {
        s.live_mb = n[2] / 1024.0;
    }
    let forced: Vec<f64> = raw
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("gap-bench-collect: "))
        .filter_map(|x| x.trim().parse::<f64>().ok())
        .map(|us| us / 1e3)
        .collect();
    if !forced.is_empty() {
        s.forced_ms = forced.iter().copied().fold(0.0, f64::max);
        s.forced_median_ms = median(forced).0;
    }
    Ok(s)
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
    if out.files.iter().any(|r| r.failures.is_none()) {
        bail!(
            "testinstall ({:?}) did not finish: {failed:?}; output in {}",
            build.variant,
            out.raw.log.display()
        );
    }
    if !failed.is_empty() {
        println!(
            "  testinstall ({:?}): files with diffs (timed all the same): {failed:?}; output in {}",
            build.variant,
            out.raw.log.display()
        );
    }
    let mut s = sample(
        &out.raw,
        build.variant,
        out.gap_ms() as f64,
        out.gap_gc_ms() as f64,
    )?;
    s.failed = failed.len() as f64;
    Ok(s)
}

fn median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let spread = v.last().copied().unwrap_or(0.0) - v.first().copied().unwrap_or(0.0);
    (v[v.len() / 2], spread)
}

type Field = (&'static str, fn(&Sample) -> f64);

/// The figures recorded per workload and build.
const FIELDS: [Field; 20] = [
    ("wall_s", |s| s.wall_s),
    ("gap_ms", |s| s.gap_ms),
    ("gap_gc_ms", |s| s.gap_gc_ms),
    ("gc_ms", |s| s.gc_ms),
    ("mutator_s", |s| s.mutator_s),
    ("mark_ms", |s| s.mark_ms),
    ("alloc_sweep_ms", |s| s.alloc_sweep_ms),
    ("bg_sweep_ms", |s| s.bg_sweep_ms),
    ("max_pause_ms", |s| s.max_pause_ms),
    ("collections", |s| s.collections),
    ("peak_rss_mb", |s| s.peak_rss_mb),
    ("barrier_fires", |s| s.barrier_fires),
    ("pages_zeroed", |s| s.pages_zeroed),
    ("pages_returned", |s| s.pages_returned),
    ("live_mb", |s| s.live_mb),
    ("forced_ms", |s| s.forced_ms),
    ("forced_median_ms", |s| s.forced_median_ms),
    ("pause_per_gb_ms", |s| {
        if s.live_mb > 0.0 {
            s.forced_ms.max(s.max_pause_ms) / (s.live_mb / 1024.0)
        } else {
            0.0
        }
    }),
    ("failed", |s| s.failed),
    ("load", |s| s.load),
];

/// `cargo xtask bench gap-real`.
pub fn run() -> Result<()> {
    let opts = OPTIONS
        .lock()
        .expect("options lock")
        .clone()
        .unwrap_or_default();
    let versions = if opts.versions.is_empty() {
        GapVersion::ALL.to_vec()
    } else {
        opts.versions.clone()
    };
    let rounds = opts
        .rounds
        .or_else(|| {
            std::env::var("GAP_REAL_RUNS")
                .ok()
                .and_then(|v| v.parse().ok())
        })
        .filter(|&n| n >= 1)
        .unwrap_or(if opts.quick { 1 } else { 3 });
    gap_real::ensure_system()?;
    struct Release {
        version: GapVersion,
        configs: Vec<Config>,
        builds: Vec<Build>,
        files: Vec<String>,
    }
    let mut releases = Vec::new();
    for version in versions {
        let Some(tar) = gap_real::tarball(version) else {
            continue;
        };
        let prefix = gap_real::prefix(version.julia())?;
        let configs = configs(version);
        let mut builds = Vec::new();
        for c in &configs {
            builds.push(gap_real::build(&tar, version, c.variant, &prefix)?);
        }
        let files = if opts.quick {
            version
                .representative()
                .iter()
                .map(|s| s.to_string())
                .collect()
        } else {
            gap_real::all_files(&builds[0].dir, "testinstall")?
        };
        releases.push(Release {
            version,
            configs,
            builds,
            files,
        });
    }
    if releases.is_empty() {
        return Ok(());
    }
    let mut names: Vec<&str> = vec!["testinstall"];
    names.extend(
        WORKLOADS
            .iter()
            .filter(|w| w.quick || !opts.quick)
            .map(|w| w.name),
    );
    println!(
        "gap-real bench: GAP {}; {} round(s){}; workloads {}; load average now {:.2}",
        releases
            .iter()
            .map(|r| r.version.as_str())
            .collect::<Vec<_>>()
            .join(" and "),
        rounds,
        if opts.quick {
            " (quick: representative testinstall files)"
        } else {
            ""
        },
        names.join(", "),
        load_average()
    );
    let mut samples: BTreeMap<(String, String, &str), Vec<Sample>> = BTreeMap::new();
    for round in 0..rounds {
        for rel in &releases {
            let pre = prefix_of(rel.version);
            for name in &names {
                // Rotate the order of the builds each round.
                for k in 0..rel.configs.len() {
                    let i = (k + round) % rel.configs.len();
                    let c = &rel.configs[i];
                    let s = if *name == "testinstall" {
                        run_testinstall(&rel.builds[i], &c.env, &rel.files)?
                    } else {
                        let w = WORKLOADS
                            .iter()
                            .find(|w| w.name == *name)
                            .expect("a workload");
                        run_workload(&rel.builds[i], &c.env, w)?
                    };
                    println!(
                        "  round {}/{rounds} {pre} {name:<12} {:<8} wall {:7.2} s  GC {:8.1} ms  mutator {:7.2} s  lazy sweep {:7.1} ms  max pause {:7.1} ms  collections {:5}  peak RSS {:6.0} MB{}  load {:.2}",
                        round + 1,
                        c.suffix,
                        s.wall_s,
                        s.gc_ms,
                        s.mutator_s,
                        s.alloc_sweep_ms,
                        s.max_pause_ms,
                        s.collections,
                        s.peak_rss_mb,
                        if s.forced_ms > 0.0 {
                            format!("  live {:.0} MB  forced {:.0} ms", s.live_mb, s.forced_ms)
                        } else {
                            String::new()
                        },
                        s.load
                    );
                    samples
                        .entry((pre.to_string(), name.to_string(), c.suffix))
                        .or_default()
                        .push(s);
                }
            }
        }
    }
    let mut r = Report::new("gap-real");
    r.value("rounds", rounds as f64);
    r.value("quick", opts.quick as u8 as f64);
    for rel in &releases {
        let pre = prefix_of(rel.version);
        r.value(&format!("{pre}_testinstall_files"), rel.files.len() as f64);
    }
    for ((pre, name, suffix), v) in &samples {
        for (field, get) in FIELDS {
            let (m, spread) = median(v.iter().map(get).collect());
            r.value(&format!("{pre}_{name}_{field}_{suffix}"), m);
            r.value(&format!("{pre}_{name}_{field}_{suffix}_spread"), spread);
        }
    }
    for rel in &releases {
        let pre = prefix_of(rel.version);
        decomposition_table(&r, pre, &names, &rel.configs);
        let get = |k: &str| r.get(&format!("{pre}_{k}"));
        let ratio = |a: &str, b: &str| match (get(a), get(b)) {
            (Some(a), Some(b)) if b != 0.0 => Some(a / b),
            _ => None,
        };
        let mut keys: Vec<(String, Option<f64>)> = vec![
            (
                "testinstall_total_ratio".into(),
                ratio("testinstall_wall_s_ours", "testinstall_wall_s_gasman"),
            ),
            (
                "testinstall_gc_ratio".into(),
                ratio("testinstall_gc_ms_ours", "testinstall_gc_ms_gasman"),
            ),
            (
                "mutator_ratio".into(),
                ratio("testinstall_mutator_s_ours", "testinstall_mutator_s_gasman"),
            ),
            (
                "testinstall_peak_rss_ratio".into(),
                ratio(
                    "testinstall_peak_rss_mb_ours",
                    "testinstall_peak_rss_mb_gasman",
                ),
            ),
            (
                "testinstall_max_pause_ratio".into(),
                ratio(
                    "testinstall_max_pause_ms_ours",
                    "testinstall_max_pause_ms_gasman",
                ),
            ),
            (
                "bigheap_max_pause_ratio".into(),
                ratio("bigheap_max_pause_ms_ours", "bigheap_max_pause_ms_gasman"),
            ),
            (
                "bigheap_forced_ratio".into(),
                ratio("bigheap_forced_ms_ours", "bigheap_forced_ms_gasman"),
            ),
            (
                "collect_forced_ratio".into(),
                ratio(
                    "collect_forced_median_ms_ours",
                    "collect_forced_median_ms_gasman",
                ),
            ),
            (
                "bigheap_peak_rss_ratio".into(),
                ratio("bigheap_peak_rss_mb_ours", "bigheap_peak_rss_mb_gasman"),
            ),
        ];
        let other = rel.configs[2].suffix;
        for name in ["testinstall", "bigheap"] {
            keys.push((
                format!("{name}_max_pause_ratio_{other}"),
                ratio(
                    &format!("{name}_max_pause_ms_{other}"),
                    &format!("{name}_max_pause_ms_gasman"),
                ),
            ));
        }
        keys.push((
            format!("collect_forced_ratio_{other}"),
            ratio(
                &format!("collect_forced_median_ms_{other}"),
                "collect_forced_median_ms_gasman",
            ),
        ));
        for (k, v) in keys {
            if let Some(v) = v {
                r.value(&format!("{pre}_{k}"), v);
            }
        }
        // Targets: the release's default build; pauses with both thread settings.
        for name in &names {
            for c in &rel.configs[1..] {
                let ours = c.suffix;
                let main = ours == "ours";
                let ti = *name == "testinstall";
                let big = *name == "bigheap";
                let forced = match *name {
                    "bigheap" => "forced_ms",
                    "collect" => "forced_median_ms",
                    _ => "",
                };
                let rows: [(&str, &str, Option<f64>); 6] = [
                    ("total time", "wall_s", (ti && main).then_some(1.0)),
                    ("GC time", "gc_ms", (ti && main).then_some(0.8)),
                    ("mutator time", "mutator_s", (ti && main).then_some(1.05)),
                    (
                        "max pause",
                        "max_pause_ms",
                        Some(if big { 0.5 } else { 1.0 }),
                    ),
                    ("forced full collection", forced, None),
                    (
                        "peak RSS",
                        "peak_rss_mb",
                        main.then_some(if big { 1.3 } else { 1.5 })
                            .filter(|_| ti || big),
                    ),
                ];
                for (what, field, target) in rows {
                    if field.is_empty() {
                        continue;
                    }
                    r.compare(
                        &format!("{pre} {name}: {what} ({ours}, {} thr)", c.threads),
                        &format!("{pre}_{name}_{field}_{ours}"),
                        &format!("{pre}_{name}_{field}_gasman"),
                        target,
                    );
                }
            }
        }
    }
    r.finish()
}

/// Prints the decomposition of each workload's time for every build of a release:
/// wall = collector + mutator, the collector's marking, the lazy sweep that allocation
/// paid (inside the mutator's time) and the background sweep (another core).
fn decomposition_table(r: &Report, pre: &str, names: &[&str], configs: &[Config]) {
    println!("\n  {pre}: where the time goes (medians; s and ms; load = 1-minute load average)");
    println!(
        "  {:<12} {:<9} {:>8} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9} {:>9} {:>8} {:>6}",
        "workload",
        "build",
        "wall s",
        "GC ms",
        "mark ms",
        "mutator s",
        "lazy sw ms",
        "bg sw ms",
        "max p ms",
        "RSS MB",
        "barriers",
        "load"
    );
    for name in names {
        for c in configs {
            let g = |f: &str| {
                r.get(&format!("{pre}_{name}_{f}_{}", c.suffix))
                    .unwrap_or(f64::NAN)
            };
            println!(
                "  {:<12} {:<9} {:>8.2} {:>9.0} {:>9.0} {:>9.2} {:>10.0} {:>9.0} {:>9.1} {:>9.0} {:>8.0} {:>6.2}",
                name,
                c.suffix,
                g("wall_s"),
                g("gc_ms"),
                g("mark_ms"),
                g("mutator_s"),
                g("alloc_sweep_ms"),
                g("bg_sweep_ms"),
                g("max_pause_ms"),
                g("peak_rss_mb"),
                g("barrier_fires"),
                g("load"),
            );
        }
    }
}
