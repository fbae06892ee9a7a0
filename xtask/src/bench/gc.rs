//! `cargo xtask bench gc` and `cargo xtask bench conservative`: gc-core and
//! gc-conservative against Boehm GC (Debian `libgc-dev`, installed when missing), in the
//! same run.
//!
//! `gc`:
//! - GCBench in C (`gc-conservative/capi/tests/c/gcbench.c`, the classic sizes) three ways:
//!   ours with conservative stack scanning as the only roots (the same program Boehm
//!   runs), ours with precise roots (a shadow stack), and Boehm; run interleaved
//!   `GCBENCH_RUNS` times each, medians of total time, GC time, max pause and peak RSS;
//! - the same GCBench written against the proposal's API verbatim (`-DFOREIGN_TYPES`: a
//!   foreign node type with a C mark function calling `jl_gc_mark_queue_obj`,
//!   `jl_get_ptls_states()` per allocation, `jl_gc_wb` per store), same runs;
//! - GCBench as a new user writes it from the seed's API alone
//!   (`gc-conservative/benches/c/gcbench_user.c`: no gc-core knowledge, no tuning; its
//!   GC figures come from `GC_CORE_STATS_FILE`), same runs;
//! - the same GCBench with a finalizer and a weak reference on every short-lived tree
//!   (`-DWITH_WEAK`), ours (conservative roots) and Boehm's, in the same interleaved runs;
//! - allocation of 16-byte objects from C (`gc_alloc` vs `GC_MALLOC`);
//! - the Rust side (`gc-core/examples/gc_bench.rs`): the allocation fast path, the
//!   seed's two micro-benchmarks, and the per-item costs of weak references, finalizers
//!   and reference-queue registrations.
//!
//! `conservative`: `base_ptr` vs Boehm's `GC_base` on interior pointers (heaps of ~33 MB,
//! the target's figure, and of ~4 MB and ~130 MB), misses and free cells, and conservative
//! scan throughput (`gc-conservative/benches/c/micro.c`), medians of `CONSERVATIVE_RUNS`
//! processes; GCBench with conservative vs precise roots.

use super::report::Report;
use crate::steps::{cargo, ensure_apt_tools, root};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const GCBENCH_RUNS: usize = 7;
/// Processes of the conservative micro-benchmark (`gc-conservative/benches/c/micro.c`).
const CONSERVATIVE_RUNS: usize = 7;

/// The smallest and the largest of `v` (the spread of a figure over runs).
fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// Installs Debian's `libgc-dev` (Boehm GC) when its header is missing.
pub(crate) fn ensure_boehm() -> Result<()> {
    if Path::new("/usr/include/gc.h").exists() {
        return Ok(());
    }
    // libgc-dev has no program to probe; install it by package name.
    println!("bench: Boehm GC headers missing; installing Debian package libgc-dev (apt-get)");
    let status = Command::new("apt-get")
        .args([
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "libgc-dev",
        ])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("run apt-get to install libgc-dev")?;
    if !status.success() || !Path::new("/usr/include/gc.h").exists() {
        let _ = Command::new("apt-get").args(["update", "-qq"]).status();
        let retry = Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
                "libgc-dev",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()?;
        if !retry.success() {
            bail!("Boehm GC (libgc-dev) is needed for the peer figures and could not be installed");
        }
    }
    Ok(())
}

/// Builds libgc_conservative (gc-conservative's C ABI crate's artifact, which carries
/// gc-core's C ABI too) in release mode.
fn build_library() -> Result<PathBuf> {
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "--quiet",
        "-p",
        "gc-conservative-capi-artifact",
        "--lib",
    ]);
    if !build.status()?.success() {
        bail!("cargo build --release -p gc-conservative-capi-artifact failed");
    }
    Ok(root().join("target").join("release"))
}

fn compile(source: &str, out: &str, defines: &[&str], ours: bool, boehm: bool) -> Result<PathBuf> {
    let lib = root().join("target").join("release");
    let exe = root().join("target").join("bench").join(out);
    std::fs::create_dir_all(exe.parent().unwrap())?;
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-g", "-std=gnu11"]).args(defines);
    cc.arg("-I").arg(root().join("gc-core/include"));
    cc.arg("-I").arg(root().join("gc-conservative/include"));
    cc.arg(root().join(source)).arg("-o").arg(&exe);
    if ours {
        cc.arg("-L")
            .arg(&lib)
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lgc_conservative");
    }
    if boehm {
        cc.arg("-lgc");
    }
    if !cc.status().context("run cc")?.success() {
        bail!("compiling {source} ({out}) failed");
    }
    Ok(exe)
}

/// Runs `exe` and parses `key=value` pairs from its output.
fn figures(cmd: &mut Command) -> Result<HashMap<String, String>> {
    cmd.env_remove("LD_LIBRARY_PATH");
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(text
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

fn num(f: &HashMap<String, String>, key: &str) -> Result<f64> {
    f.get(key)
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no figure {key}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// `cargo xtask bench gc`.
pub fn run_gc() -> Result<()> {
    ensure_apt_tools(&[("cc", "gcc")], "to build the C benchmarks")?;
    ensure_boehm()?;
    build_library()?;
    let src = "gc-conservative/capi/tests/c/gcbench.c";
    let variants = [
        ("", compile(src, "gcbench_ours", &[], true, false)?),
        (
            "_precise",
            compile(src, "gcbench_precise", &["-DPRECISE_ROOTS"], true, false)?,
        ),
        (
            "_boehm",
            compile(src, "gcbench_boehm", &["-DUSE_BOEHM"], false, true)?,
        ),
        (
            "_foreign",
            compile(src, "gcbench_foreign", &["-DFOREIGN_TYPES"], true, false)?,
        ),
        (
            "_weak",
            compile(src, "gcbench_weak", &["-DWITH_WEAK"], true, false)?,
        ),
        (
            "_user",
            compile(
                "gc-conservative/benches/c/gcbench_user.c",
                "gcbench_user",
                &[],
                true,
                false,
            )?,
        ),
        (
            "_boehm_weak",
            compile(
                src,
                "gcbench_boehm_weak",
                &["-DUSE_BOEHM", "-DWITH_WEAK"],
                false,
                true,
            )?,
        ),
    ];
    let mut samples: HashMap<(String, &str), Vec<f64>> = HashMap::new();
    let stats_file = root().join("target/bench/gcbench_user.stats.json");
    for run in 0..GCBENCH_RUNS {
        for (suffix, exe) in &variants {
            let mut cmd = Command::new(exe);
            if *suffix == "_user" {
                // A new user's program prints no GC figures; gc-core writes them.
                cmd.env("GC_CORE_STATS_FILE", &stats_file);
            }
            let mut f = figures(&mut cmd)?;
            if *suffix == "_user" {
                let text = std::fs::read_to_string(&stats_file)
                    .context("gc-core wrote no statistics for gcbench_user")?;
                let s: serde_json::Value = serde_json::from_str(&text)?;
                let get = |k: &str| s[k].as_f64().unwrap_or(f64::NAN);
                f.insert("gc_ms".into(), get("total_pause_ms").to_string());
                f.insert("max_pause_ms".into(), get("max_pause_ms").to_string());
                f.insert(
                    "collections".into(),
                    (get("full_collections") + get("partial_collections")).to_string(),
                );
            }
            if f.get("result").map(String::as_str) != Some("ok") {
                bail!("GCBench{suffix} computed a wrong result: {f:?}");
            }
            for key in [
                "total_ms",
                "gc_ms",
                "max_pause_ms",
                "peak_rss_mb",
                "collections",
            ] {
                samples
                    .entry((suffix.to_string(), key))
                    .or_default()
                    .push(num(&f, key)?);
            }
        }
        println!("  GCBench run {}/{GCBENCH_RUNS} done", run + 1);
    }
    let mut r = Report::new("gc");
    for (suffix, _) in &variants {
        let m = |key: &str| median(samples[&(suffix.to_string(), key)].clone());
        r.value(&format!("gcbench_ms{suffix}"), m("total_ms"));
        r.value(&format!("gc_time_ms{suffix}"), m("gc_ms"));
        r.value(&format!("max_pause_ms{suffix}"), m("max_pause_ms"));
        r.value(&format!("peak_rss_mb{suffix}"), m("peak_rss_mb"));
        r.value(&format!("collections{suffix}"), m("collections"));
        // The spread over the runs of the two timing figures.
        for key in ["total_ms", "max_pause_ms"] {
            let v = &samples[&(suffix.to_string(), key)];
            let (lo, hi) = min_max(v);
            r.value(&format!("{key}{suffix}_min"), lo);
            r.value(&format!("{key}{suffix}_max"), hi);
        }
    }
    let micro = compile(
        "gc-conservative/benches/c/micro.c",
        "gc_micro",
        &[],
        true,
        true,
    )?;
    let f = figures(&mut Command::new(&micro))?;
    r.value("alloc_ns_c", num(&f, "alloc_ns_c")?);
    r.value("alloc_ns_c_boehm", num(&f, "alloc_ns_boehm")?);

    let mut ex = cargo();
    ex.args([
        "run",
        "--release",
        "--quiet",
        "-p",
        "gc-core",
        "--example",
        "gc_bench",
    ]);
    let f = figures(&mut ex)?;
    for key in [
        "alloc_ns",
        "alloc_ns_with_gc",
        "bencharr_ms",
        "bencharr_collections",
        "bencharr_max_pause_ms",
        "bencharr_full_mark_ms",
        "bencharr_1t_ms",
        "bencharr_1t_max_pause_ms",
        "bencharr_1t_full_mark_ms",
        "benchfac_ms",
        "benchfac_collections",
        "benchfac_max_pause_ms",
        "weak_ref_new_ns",
        "weak_ref_full_ns",
        "weak_ref_partial_ns",
        "weak_ref_clear_ns",
        "weak_obj_new_ns",
        "weak_obj_full_ns",
        "weak_obj_partial_ns",
        "finalizer_register_ns",
        "finalizer_gc_ns",
        "finalizer_run_ns",
        "finalizer_total_ns",
        "finalizer_live_full_ns",
        "queue_ns",
    ] {
        r.value(key, num(&f, key)?);
    }
    r.compare(
        "GCBench total (conservative roots) vs Boehm",
        "gcbench_ms",
        "gcbench_ms_boehm",
        Some(1.0),
    );
    r.compare("GC time vs Boehm", "gc_time_ms", "gc_time_ms_boehm", None);
    r.compare(
        "max pause (layout types) vs Boehm",
        "max_pause_ms",
        "max_pause_ms_boehm",
        Some(0.8),
    );
    r.compare(
        "peak RSS vs Boehm",
        "peak_rss_mb",
        "peak_rss_mb_boehm",
        Some(1.2),
    );
    r.compare(
        "GCBench foreign types + mark functions (compat API) vs Boehm",
        "gcbench_ms_foreign",
        "gcbench_ms_boehm",
        Some(0.9),
    );
    r.compare(
        "GCBench foreign types: max pause vs Boehm",
        "max_pause_ms_foreign",
        "max_pause_ms_boehm",
        Some(1.0),
    );
    r.compare(
        "GCBench foreign types: peak RSS vs Boehm",
        "peak_rss_mb_foreign",
        "peak_rss_mb_boehm",
        Some(1.1),
    );
    r.compare(
        "GCBench foreign types: collections vs Boehm",
        "collections_foreign",
        "collections_boehm",
        None,
    );
    r.compare(
        "GCBench as a new user writes it (seed's API) vs Boehm",
        "gcbench_ms_user",
        "gcbench_ms_boehm",
        Some(0.8),
    );
    r.compare(
        "GCBench new user: max pause vs Boehm",
        "max_pause_ms_user",
        "max_pause_ms_boehm",
        None,
    );
    r.compare(
        "GCBench new user: peak RSS vs Boehm",
        "peak_rss_mb_user",
        "peak_rss_mb_boehm",
        Some(1.1),
    );
    r.compare(
        "GCBench new user: collections vs Boehm",
        "collections_user",
        "collections_boehm",
        None,
    );
    r.compare(
        "bencharr max pause: all cores + lazy sweep vs one thread + eager sweep",
        "bencharr_max_pause_ms",
        "bencharr_1t_max_pause_ms",
        None,
    );
    r.compare(
        "bencharr full-collection mark: all cores vs one thread",
        "bencharr_full_mark_ms",
        "bencharr_1t_full_mark_ms",
        None,
    );
    r.compare(
        "GCBench with weak refs + finalizers vs Boehm with the same",
        "gcbench_ms_weak",
        "gcbench_ms_boehm_weak",
        None,
    );
    r.compare(
        "GCBench with weak refs + finalizers vs without (ours)",
        "gcbench_ms_weak",
        "gcbench_ms",
        None,
    );
    r.compare(
        "GCBench with weak refs + finalizers vs without (Boehm)",
        "gcbench_ms_boehm_weak",
        "gcbench_ms_boehm",
        None,
    );
    r.compare(
        "GCBench conservative vs precise roots (ours)",
        "gcbench_ms",
        "gcbench_ms_precise",
        Some(1.1),
    );
    r.compare(
        "C allocation, 16 bytes, vs GC_MALLOC",
        "alloc_ns_c",
        "alloc_ns_c_boehm",
        Some(1.0),
    );
    println!(
        "  allocation fast path (Rust): {:.2} ns per object (target <= 10 ns)",
        r.get("alloc_ns").unwrap_or(f64::NAN)
    );
    r.finish()
}

/// `cargo xtask bench conservative`.
pub fn run_conservative() -> Result<()> {
    ensure_apt_tools(&[("cc", "gcc")], "to build the C benchmarks")?;
    ensure_boehm()?;
    build_library()?;
    let micro = compile(
        "gc-conservative/benches/c/micro.c",
        "gc_micro",
        &[],
        true,
        true,
    )?;
    let keys = [
        "base_ptr_hit_ns",
        "gc_base_hit_ns",
        "base_ptr_miss_ns",
        "gc_base_miss_ns",
        "base_ptr_free_ns",
        "stack_scan_gbps",
        "base_ptr_hit_small_ns",
        "gc_base_hit_small_ns",
        "base_ptr_hit_large_ns",
        "gc_base_hit_large_ns",
    ];
    let mut samples: HashMap<&str, Vec<f64>> = HashMap::new();
    for _ in 0..CONSERVATIVE_RUNS {
        let f = figures(&mut Command::new(&micro))?;
        for key in keys {
            samples.entry(key).or_default().push(num(&f, key)?);
        }
    }
    let mut r = Report::new("conservative");
    for key in keys {
        r.value(key, median(samples[key].clone()));
    }
    // The spread of the hit ratio over the runs (each run pairs ours and Boehm's rounds):
    // code and data placement move it by +-10% between processes and builds.
    let ratios: Vec<f64> = samples["base_ptr_hit_ns"]
        .iter()
        .zip(&samples["gc_base_hit_ns"])
        .map(|(a, b)| a / b)
        .collect();
    let (lo, hi) = min_max(&ratios);
    r.value("base_ptr_hit_ratio_min", lo);
    r.value("base_ptr_hit_ratio_max", hi);
    // GCBench with conservative roots only vs precise roots, same run.
    let src = "gc-conservative/capi/tests/c/gcbench.c";
    let cons = compile(src, "gcbench_ours", &[], true, false)?;
    let precise = compile(src, "gcbench_precise", &["-DPRECISE_ROOTS"], true, false)?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..GCBENCH_RUNS {
        a.push(num(&figures(&mut Command::new(&cons))?, "total_ms")?);
        b.push(num(&figures(&mut Command::new(&precise))?, "total_ms")?);
    }
    r.value("gcbench_conservative_ms", median(a));
    r.value("gcbench_precise_ms", median(b));
    r.compare(
        "base_ptr hit (interior) vs GC_base",
        "base_ptr_hit_ns",
        "gc_base_hit_ns",
        Some(1.0),
    );
    r.compare(
        "base_ptr hit, ~4 MB heap (8,192 objects)",
        "base_ptr_hit_small_ns",
        "gc_base_hit_small_ns",
        None,
    );
    r.compare(
        "base_ptr hit, ~130 MB heap (262,144 objects)",
        "base_ptr_hit_large_ns",
        "gc_base_hit_large_ns",
        None,
    );
    r.compare(
        "base_ptr miss vs GC_base",
        "base_ptr_miss_ns",
        "gc_base_miss_ns",
        Some(1.0),
    );
    r.compare(
        "GCBench conservative-only vs precise roots",
        "gcbench_conservative_ms",
        "gcbench_precise_ms",
        Some(1.1),
    );
    r.finish()
}
