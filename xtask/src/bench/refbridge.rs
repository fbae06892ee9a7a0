//! `cargo xtask bench refbridge`: the bridge against CPython 3.11, in the same run.
//!
//! - `Py_INCREF`/`Py_DECREF` in a C loop (`refbridge/benches/c/refcount_loop.c`, the same
//!   source compiled against refbridge's `Python.h` and against CPython's), timings
//!   interleaved over several runs, and the instructions callgrind counts in the loop
//!   (deterministic, where the timings on a shared machine are not);
//! - the first `to_native` of a managed object and the first `to_managed` of a native
//!   one, and the memory per stub (`refbridge`'s `bridge_bench` example; GraalPy's 40
//!   bytes per GC stub is a figure from its source, not a measurement);
//! - collecting native cycles and cycles crossing the boundary with the C-extension
//!   scenario's extension, against CPython's `gc.collect()` on the same shapes of the
//!   same extension (`integration-tests`' `cext_bench` example).

use super::gil::json_figures;
use super::report::Report;
use crate::steps::{cargo, have, root};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Interleaved runs of each timing.
const RUNS: usize = 7;
/// Objects and rounds of the C loop (100,000 pairs a round).
const LOOP_OBJECTS: &str = "1000";
const LOOP_ROUNDS: &str = "50000";
/// GraalPy's native memory per GC stub (PyGC_Head 16 + ob_refcnt 8 + ob_type 8 + the
/// 32-bit handle index, padded: 40 bytes), read from its `handles.h`/`capi.h`.
const GRAALPY_STUB_BYTES: f64 = 40.0;

fn python_config() -> Result<(String, String)> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, sysconfig; assert sys.version_info[:2] == (3, 11), sys.version; \
             print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('LIBDIR'))",
        ])
        .output()
        .context("python3 not found: the refbridge bench compares with CPython 3.11")?;
    if !out.status.success() {
        bail!(
            "the refbridge bench needs CPython 3.11 as python3: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut l = text.lines();
    Ok((
        l.next().unwrap_or_default().to_string(),
        l.next().unwrap_or_default().to_string(),
    ))
}

fn cc(args: &[String], what: &str) -> Result<()> {
    let status = Command::new("cc")
        .args(args)
        .status()
        .with_context(|| format!("running cc for {what}"))?;
    if !status.success() {
        bail!("cc failed to build {what}");
    }
    Ok(())
}

/// The two builds of the C loop: against refbridge (linked with `librefbridge.so`, the
/// release build of `refbridge/capi/artifact`) and
/// against CPython 3.11 (linked with libpython, never called: counts never reach 0).
fn loop_programs(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "-p",
        "refbridge-capi-artifact",
        "--lib",
    ]);
    if !build.status()?.success() {
        bail!("cargo build --release -p refbridge-capi-artifact failed");
    }
    let lib = root().join("target/release");
    let src = root().join("refbridge/benches/c/refcount_loop.c");
    let ours = dir.join("refcount_loop_refbridge");
    let theirs = dir.join("refcount_loop_cpython");
    cc(
        &[
            "-O2".into(),
            "-g".into(),
            format!("-I{}", root().join("refbridge/include/compat").display()),
            src.display().to_string(),
            "-o".into(),
            ours.display().to_string(),
            format!("-L{}", lib.display()),
            "-lrefbridge".into(),
            format!("-Wl,--disable-new-dtags,-rpath,{}", lib.display()),
        ],
        "the C loop against refbridge",
    )?;
    let (inc, libdir) = python_config()?;
    cc(
        &[
            "-O2".into(),
            "-g".into(),
            format!("-I{inc}"),
            src.display().to_string(),
            "-o".into(),
            theirs.display().to_string(),
            format!("-L{libdir}"),
            "-lpython3.11".into(),
            format!("-Wl,--disable-new-dtags,-rpath,{libdir}"),
        ],
        "the C loop against CPython 3.11",
    )?;
    Ok((ours, theirs))
}

fn loop_ns(exe: &Path, stub: bool) -> Result<f64> {
    let mut cmd = Command::new(exe);
    cmd.args([LOOP_OBJECTS, LOOP_ROUNDS]);
    if stub {
        cmd.arg("stub");
    }
    let figs = json_figures(cmd, &format!("{}", exe.display()))?;
    figs.iter()
        .find(|(k, _)| k == "ns_per_pair")
        .map(|(_, v)| *v)
        .context("no ns_per_pair")
}

/// Instructions per incref+decref pair in the loop, counted by callgrind.
fn loop_instructions(exe: &Path, stub: bool) -> Result<f64> {
    let rounds = 200;
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--tool=callgrind",
        "--toggle-collect=round_trip",
        "--callgrind-out-file=/dev/null",
    ])
    .arg(exe)
    .args([LOOP_OBJECTS, &rounds.to_string()]);
    if stub {
        cmd.arg("stub");
    }
    let out = cmd.output().context("running valgrind")?;
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("callgrind run of {} failed:\n{err}", exe.display());
    }
    let line = err
        .lines()
        .find(|l| l.contains("Collected :"))
        .with_context(|| format!("no 'Collected' line from callgrind:\n{err}"))?;
    let n: f64 = line
        .rsplit(':')
        .next()
        .unwrap_or("")
        .trim()
        .parse()
        .context("callgrind's count")?;
    // One warm-up round plus the timed ones.
    let pairs = LOOP_OBJECTS.parse::<f64>()? * (rounds as f64 + 1.0);
    Ok(n / pairs)
}

/// Instructions callgrind counts in one collection, per object, for `shape` (2,000
/// rings of 10): ours (`cext_bench --one`, the whole `Bridge::collect`) and CPython's
/// (`gc_collect_main` while `bench.py` collects the shape, minus the same for no shape:
/// the interpreter's own objects and start-up collections).
fn cycle_instructions(shape: &str) -> Result<(f64, f64)> {
    const RINGS: &str = "2000";
    const NODES: &str = "10";
    let objects = 20_000.0;
    let exe = root().join("target/release/examples/cext_bench");
    let collected = |mut cmd: Command, what: &str| -> Result<f64> {
        let out = cmd
            .output()
            .with_context(|| format!("running valgrind on {what}"))?;
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            bail!("callgrind run of {what} failed:\n{err}");
        }
        let line = err
            .lines()
            .find(|l| l.contains("Collected :"))
            .with_context(|| format!("no 'Collected' line from callgrind for {what}"))?;
        line.rsplit(':')
            .next()
            .unwrap_or("")
            .trim()
            .parse::<f64>()
            .context("callgrind's count")
    };
    let mut ours = Command::new("valgrind");
    ours.args([
        "--tool=callgrind",
        "--toggle-collect=cext_bench::measured_collect",
        "--callgrind-out-file=/dev/null",
    ])
    .arg(&exe)
    .args(["--one", shape, RINGS, NODES]);
    let ours = collected(ours, "cext_bench --one")? / objects;
    let module = Command::new(&exe).arg("--module-dir").output()?;
    let module = String::from_utf8_lossy(&module.stdout).trim().to_string();
    // The interpreter itself (not pyenv's shim script).
    let py = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()?;
    let py = String::from_utf8_lossy(&py.stdout).trim().to_string();
    let script = root().join("integration-tests/cext/bench.py");
    let run_py = |what: &str| -> Result<f64> {
        let mut cmd = Command::new("valgrind");
        cmd.args([
            "--tool=callgrind",
            "--toggle-collect=gc_collect_main",
            "--callgrind-out-file=/dev/null",
        ])
        .arg(&py)
        .arg(&script)
        .args([&module, RINGS, NODES, what]);
        collected(cmd, &format!("bench.py {what}"))
    };
    let theirs = (run_py(shape)? - run_py("none")?) / objects;
    Ok((ours, theirs))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// (max - min) / median.
fn spread(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    let m = median(&mut s);
    (s[s.len() - 1] - s[0]) / m
}

/// The one-minute load average (`/proc/loadavg`), recorded with the figures as the
/// machine's noise; 0 where it cannot be read.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// Runs the suite and writes `target/bench/refbridge.json`.
pub fn run() -> Result<()> {
    let mut report = Report::new("refbridge");
    report.value("load_average_start", load_average());
    let dir = root().join("target/bench/refbridge");
    std::fs::create_dir_all(&dir)?;

    println!("    building the C loop (refbridge's and CPython's Python.h)");
    let (ours, theirs) = loop_programs(&dir)?;
    let (mut o, mut os, mut p) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        o.push(loop_ns(&ours, false)?);
        os.push(loop_ns(&ours, true)?);
        p.push(loop_ns(&theirs, false)?);
    }
    report.value("incref_decref_ns", median(&mut o.clone()));
    report.value("incref_decref_stub_ns", median(&mut os.clone()));
    report.value("incref_decref_ns_cpython", median(&mut p.clone()));
    report.value("incref_decref_spread", spread(&o));
    report.value("incref_decref_spread_cpython", spread(&p));
    if have("valgrind") {
        println!("    counting the loop's instructions under callgrind");
        report.value(
            "incref_decref_instructions",
            loop_instructions(&ours, false)?,
        );
        report.value(
            "incref_decref_stub_instructions",
            loop_instructions(&ours, true)?,
        );
        report.value(
            "incref_decref_instructions_cpython",
            loop_instructions(&theirs, false)?,
        );
    }

    println!("    transitions and stub memory (refbridge bridge_bench, release, 3 runs)");
    let mut per: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for _ in 0..3 {
        let mut cmd = cargo();
        cmd.args([
            "run",
            "--quiet",
            "--release",
            "-p",
            "refbridge",
            "--example",
            "bridge_bench",
        ]);
        for (k, v) in json_figures(cmd, "refbridge's bridge_bench (release)")? {
            per.entry(k).or_default().push(v);
        }
    }
    for (k, mut v) in per {
        report.value(&k, median(&mut v));
    }
    report.value("stub_native_bytes_graalpy", GRAALPY_STUB_BYTES);

    println!("    cycle collection vs CPython 3.11's gc.collect() ({RUNS} interleaved runs)");
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--quiet",
        "--release",
        "-p",
        "integration-tests",
        "--example",
        "cext_bench",
        "--",
        &RUNS.to_string(),
        "10000",
        "10",
    ]);
    for (k, v) in json_figures(cmd, "integration-tests' cext_bench (release)")? {
        report.value(&k, v);
    }

    if have("valgrind") {
        println!("    counting the collections' instructions under callgrind (20,000 objects)");
        for shape in ["native", "cross"] {
            let (ours, theirs) = cycle_instructions(shape)?;
            report.value(&format!("{shape}_cycles_instructions_per_obj"), ours);
            report.value(
                &format!("{shape}_cycles_instructions_per_obj_cpython"),
                theirs,
            );
        }
    }

    report.value("load_average_end", load_average());
    report.compare(
        "Py_INCREF+Py_DECREF, native object (ns)",
        "incref_decref_ns",
        "incref_decref_ns_cpython",
        Some(1.2),
    );
    report.compare(
        "Py_INCREF+Py_DECREF, stub (ns)",
        "incref_decref_stub_ns",
        "incref_decref_ns_cpython",
        Some(1.2),
    );
    if report.get("incref_decref_instructions").is_some() {
        report.compare(
            "  the same, instructions (callgrind)",
            "incref_decref_instructions",
            "incref_decref_instructions_cpython",
            Some(1.2),
        );
    }
    report.compare(
        "collect native cycles (ns per object)",
        "native_cycles_ns_per_obj",
        "native_cycles_ns_per_obj_cpython",
        Some(1.0),
    );
    report.compare(
        "collect cross-boundary cycles (ns per object)",
        "cross_cycles_ns_per_obj",
        "cross_cycles_ns_per_obj_cpython",
        Some(1.0),
    );
    if report.get("native_cycles_instructions_per_obj").is_some() {
        report.compare(
            "  native cycles, instructions per object",
            "native_cycles_instructions_per_obj",
            "native_cycles_instructions_per_obj_cpython",
            Some(1.0),
        );
        report.compare(
            "  cross-boundary cycles, instructions per object",
            "cross_cycles_instructions_per_obj",
            "cross_cycles_instructions_per_obj_cpython",
            Some(1.0),
        );
    }
    report.compare(
        "native bytes per stub vs GraalPy's GC stub",
        "stub_native_bytes",
        "stub_native_bytes_graalpy",
        Some(1.0),
    );
    report.finish()
}
