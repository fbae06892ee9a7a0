//! `cargo xtask bench loader`: elf-loader against the system loader, in the same run.
//!
//! Runs `elf-loader/examples/loader_bench` (built in release mode), one child process
//! per load measurement (a second `dlopen` of a file costs nothing, and `dlmopen`
//! namespaces are never freed), interleaving ours and the peers so that machine noise
//! hits both alike, and reports medians:
//! - `load_us` vs `load_us_dlopen` (RTLD_NOW) vs `load_us_dlmopen` (LM_ID_NEWLM):
//!   map + relocate + init of libpython3.11, wall clock; `load_cpu_us*` (the loading
//!   thread's CPU time) and `load_faults*` (its minor page faults) for the same loads;
//!   `*_deps_loaded`: the same with libpython's `DT_NEEDED` libraries already loaded;
//!   `load_us_ratio_paired`: the median of the per-round ratios ours / dlopen;
//! - `sym_ns` vs `sym_ns_dlsym`: lookup of every exported function of libpython;
//! - `rss_per_copy_mb` vs `writable_load_mb`: private memory added per extra loaded
//!   (not initialised) copy;
//! - `max_copies` vs `max_copies_dlmopen`: copies of libpython loaded and initialised
//!   (each runs code) in one process;
//! - `tls_ns` vs `tls_ns_system`: a `__thread` access in a custom-loaded library vs the
//!   same library loaded by the system (general dynamic; `tls_ld_*` local dynamic,
//!   `tls_desc_*` and `tls_desc_ld_*` the same through TLS descriptors), medians of 21
//!   interleaved rounds, with the median per-round ratio and its 10th/90th percentiles.

use super::report::Report;
use crate::steps::{cargo, root};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

/// Load samples per loader (one child process each; odd, so the median is a sample).
const LOAD_SAMPLES: usize = 61;
/// Copies to try for the maximum (the target is 64).
const MAX_CAP: usize = 80;

fn libpython() -> Result<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, sysconfig; print(os.path.join(sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME')))",
        ])
        .output()
        .context("run python3 to find libpython")?;
    if !out.status.success() {
        bail!("python3 -c 'import sysconfig' failed");
    }
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !p.is_file() {
        bail!(
            "{} does not exist (CPython without --enable-shared?)",
            p.display()
        );
    }
    Ok(p)
}

fn driver() -> Result<PathBuf> {
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "--quiet",
        "-p",
        "elf-loader",
        "--example",
        "loader_bench",
    ]);
    let status = build.status().context("build loader_bench")?;
    if !status.success() {
        bail!("building elf-loader's loader_bench example failed");
    }
    Ok(root().join("target/release/examples/loader_bench"))
}

/// Runs the driver with `args`; returns its `key=value` lines (the last value of each
/// key wins) and whether it exited successfully.
fn run(exe: &PathBuf, args: &[&str]) -> Result<(HashMap<String, String>, bool)> {
    run_env(exe, args, &[])
}

/// [`run`] with extra environment variables.
fn run_env(
    exe: &PathBuf,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<(HashMap<String, String>, bool)> {
    let out = Command::new(exe)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .with_context(|| format!("run loader_bench {}", args.join(" ")))?;
    let mut kv = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((k, v)) = line.split_once('=') {
            kv.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    Ok((kv, out.status.success()))
}

fn num(kv: &HashMap<String, String>, key: &str, what: &str) -> Result<f64> {
    kv.get(key)
        .with_context(|| format!("{what}: no {key} in the driver's output"))?
        .parse::<f64>()
        .with_context(|| format!("{what}: {key} is not a number"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Runs the suite and writes `target/bench/loader.json`.
pub fn run_suite() -> Result<()> {
    let lib = libpython()?;
    let lib_s = lib.to_string_lossy().to_string();
    let exe = driver()?;
    println!("  library: {lib_s}");
    let mut r = Report::new("loader");

    // Load time, interleaved: wall clock (the target), plus the loading thread's CPU
    // time (not inflated when another process preempts it) and its minor page faults.
    // Each in a fresh process as it starts (libpython's libm not loaded yet: each
    // loader loads it), and again with libpython's DT_NEEDED libraries already loaded
    // by the system loader (as in a program linked against libm), which compares the
    // loaders' own work without the dependency search: glibc probes libpython's
    // RUNPATH (its glibc-hwcaps and tls subdirectories, 21 failing openat/stat calls)
    // before ld.so.cache for libm, while elf-loader takes the C runtime by soname from
    // the system loader by policy.
    let cases: [(&str, &str, &[&str]); 5] = [
        ("ours", "", &[]),
        ("dlopen", "_dlopen", &[]),
        ("dlmopen", "_dlmopen", &[]),
        ("ours", "_deps_loaded", &["--deps-loaded"]),
        ("dlopen", "_dlopen_deps_loaded", &["--deps-loaded"]),
    ];
    // The order of the cases changes from round to round (a fixed pseudo-random
    // permutation), so that no loader always runs right after the same other one: a
    // child that exits returns its pages, and the next one's page faults depend on
    // where they come from.
    let mut samples: HashMap<(&str, &str), Vec<f64>> = HashMap::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..LOAD_SAMPLES {
        let mut order = cases;
        for k in (1..order.len()).rev() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            order.swap(k, (seed % (k as u64 + 1)) as usize);
        }
        for (how, suffix, extra) in order {
            let mut args = vec!["load", how, lib_s.as_str()];
            args.extend_from_slice(extra);
            let (kv, ok) = run(&exe, &args)?;
            if !ok {
                bail!("load with {how} {} failed (sample {i})", extra.join(" "));
            }
            for key in ["us", "cpu_us", "faults"] {
                samples
                    .entry((suffix, key))
                    .or_default()
                    .push(num(&kv, key, how)?);
            }
        }
    }
    // Also the median of the per-round ratios (ours and dlopen in the same round),
    // which cancels noise that drifts over the run.
    let paired = |ours: &str, peer: &str| -> f64 {
        let (a, b) = (&samples[&(ours, "us")], &samples[&(peer, "us")]);
        median(a.iter().zip(b).map(|(x, y)| x / y).collect())
    };
    r.value("load_us_ratio_paired", paired("", "_dlopen"));
    r.value(
        "load_us_deps_loaded_ratio_paired",
        paired("_deps_loaded", "_dlopen_deps_loaded"),
    );
    for (key, name) in [
        ("us", "load_us"),
        ("cpu_us", "load_cpu_us"),
        ("faults", "load_faults"),
    ] {
        for (_, suffix, _) in cases {
            let v = samples.remove(&(suffix, key)).unwrap_or_default();
            r.value(&format!("{name}{suffix}"), median(v));
        }
    }

    // Symbol lookup.
    let (kv, ok) = run(&exe, &["sym", &lib_s])?;
    if !ok {
        bail!("symbol lookup measurement failed");
    }
    r.value("sym_names", num(&kv, "names", "sym")?);
    r.value("sym_ns", num(&kv, "sym_ns", "sym")?);
    r.value("sym_ns_dlsym", num(&kv, "sym_ns_dlsym", "sym")?);

    // Memory per extra copy.
    let (kv, ok) = run(&exe, &["rss", &lib_s, "16"])?;
    if !ok {
        bail!("memory measurement failed");
    }
    r.value("rss_per_copy_mb", num(&kv, "rss_per_copy_mb", "rss")?);
    r.value(
        "rss_resident_per_copy_mb",
        num(&kv, "rss_resident_per_copy_mb", "rss")?,
    );
    r.value("writable_load_mb", num(&kv, "writable_load_mb", "rss")?);

    // Copies that load and initialise in one process.
    let cap = MAX_CAP.to_string();
    let (kv, _) = run(&exe, &["max", "ours", &lib_s, &cap])?;
    let ours = kv
        .get("copies")
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    if let Some(why) = kv.get("stopped") {
        println!("  ours stopped after {ours} copies: {why}");
    }
    let (kv, _) = run(&exe, &["max", "dlmopen", &lib_s, &cap])?;
    let theirs = kv
        .get("copies")
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    if let Some(why) = kv.get("stopped") {
        println!("  dlmopen stopped after {theirs} copies: {why}");
    }
    r.value("max_copies", ours);
    r.value("max_copies_dlmopen", theirs);
    r.value("max_copies_cap", MAX_CAP as f64);
    r.value("max_copies_target", 64.0);

    // TLS access.
    let (kv, ok) = run(&exe, &["tls"])?;
    if !ok {
        bail!("TLS measurement failed");
    }
    for case in ["tls", "tls_ld", "tls_desc", "tls_desc_ld"] {
        for suffix in [
            "_ns",
            "_ns_system",
            "_ratio_paired",
            "_ratio_p10",
            "_ratio_p90",
        ] {
            let key = format!("{case}{suffix}");
            r.value(&key, num(&kv, &key, "tls")?);
        }
    }
    // glibc gives a dlopened library's TLS descriptors a slot of its surplus static
    // TLS while there is room (a descriptor then returns a constant); without that
    // surplus, its descriptors take the dynamic path, the one ours always takes.
    let (kv, ok) = run_env(
        &exe,
        &["tls"],
        &[("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=0")],
    )?;
    if !ok {
        bail!("TLS measurement without optional static TLS failed");
    }
    for case in ["tls_desc", "tls_desc_ld"] {
        for suffix in ["_ns", "_ns_system", "_ratio_paired"] {
            let key = format!("{case}{suffix}");
            r.value(&format!("{key}_dynamic"), num(&kv, &key, "tls (dynamic)")?);
        }
    }

    // (Each comparison records `<ours>_ratio`; the targeted one goes last so that
    // `load_us_ratio` in the JSON file is the ratio to dlopen.)
    r.compare(
        "load libpython: ours / dlmopen(LM_ID_NEWLM)",
        "load_us",
        "load_us_dlmopen",
        None,
    );
    r.compare(
        "load libpython, libm already loaded: ours / dlopen(RTLD_NOW)",
        "load_us_deps_loaded",
        "load_us_dlopen_deps_loaded",
        None,
    );
    r.compare(
        "load libpython, CPU time: ours / dlopen(RTLD_NOW)",
        "load_cpu_us",
        "load_cpu_us_dlopen",
        None,
    );
    r.compare(
        "load libpython, minor page faults: ours / dlopen(RTLD_NOW)",
        "load_faults",
        "load_faults_dlopen",
        None,
    );
    r.compare(
        "load libpython: ours / dlopen(RTLD_NOW)",
        "load_us",
        "load_us_dlopen",
        Some(1.0),
    );
    r.compare(
        "symbol lookup: ours / dlsym",
        "sym_ns",
        "sym_ns_dlsym",
        Some(0.5),
    );
    r.compare(
        "private MB per extra copy / writable PT_LOAD MB",
        "rss_per_copy_mb",
        "writable_load_mb",
        Some(1.1),
    );
    r.compare(
        "TLS access, general dynamic: ours / system __tls_get_addr",
        "tls_ns",
        "tls_ns_system",
        Some(1.1),
    );
    r.compare(
        "TLS access, local dynamic: ours / system __tls_get_addr",
        "tls_ld_ns",
        "tls_ld_ns_system",
        Some(1.1),
    );
    r.compare(
        "TLS access, descriptor (gnu2), general dynamic: ours / system",
        "tls_desc_ns",
        "tls_desc_ns_system",
        None,
    );
    r.compare(
        "TLS access, descriptor (gnu2), local dynamic: ours / system",
        "tls_desc_ld_ns",
        "tls_desc_ld_ns_system",
        None,
    );
    r.compare(
        "TLS descriptor, glibc without optional static TLS: ours / system",
        "tls_desc_ns_dynamic",
        "tls_desc_ns_system_dynamic",
        None,
    );
    // Higher is better for copies, so these put ours in the denominator.
    r.compare(
        "copies: 64 / ours (<= 1 means >= 64 copies)",
        "max_copies_target",
        "max_copies",
        Some(1.0),
    );
    r.compare(
        "copies: dlmopen / ours",
        "max_copies_dlmopen",
        "max_copies",
        None,
    );
    r.finish()
}
