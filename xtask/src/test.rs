//! `cargo xtask test`: everything CI checks, in order.

use crate::gap_real::GapVersion;
use crate::steps::{cargo, succeeds, xtask, Steps};
use anyhow::{bail, Context, Result};
use std::process::Command;

/// Runs the checks in CI order, stopping at the first failure; `full` adds the slow
/// exhaustive comparisons (`MULTIPY_FULL=1`).
pub fn run(full: bool) -> Result<()> {
    install_toolchain_components()?;
    install_system_tools()?;
    // The minigap scenario builds its kernel on Boehm GC too (integration-tests' build.rs).
    crate::bench::ensure_boehm()?;
    // The numpy scenario's tests (integration-tests/tests/it/multipy_* and tests/multipy_*) need it.
    crate::venv::ensure()?;
    // tests/multipy_wheels.rs: popular binary wheels (scipy, pandas with pyarrow, duckdb,
    // numba, ...) in two interpreters.
    crate::venv::ensure_wheels()?;
    // tests/multipy_versions.rs imports numpy on 3.12 and 3.13 too, where they exist.
    for (major, minor) in [(3, 12), (3, 13)] {
        match crate::bench::find_python(major, minor) {
            Some(python) => {
                crate::venv::ensure_version(&python, major, minor)?;
            }
            None => println!(
                "xtask: no python{major}.{minor}: its numpy test is skipped (tests/multipy_versions.rs)"
            ),
        }
    }

    clear_packaged_sources()?;
    let mut plan = plan(full);
    if full {
        for (_, cmd) in plan.iter_mut() {
            cmd.env("MULTIPY_FULL", "1");
        }
    }
    let mut steps = Steps::new("test", plan.len());
    for (name, cmd) in plan {
        steps.run(&name, cmd)?;
    }
    steps.finish();
    Ok(())
}

/// Removes what earlier `cargo publish --dry-run`s unpacked of this workspace's own
/// packages. Cargo unpacks each package it verifies from a local registry of the
/// packages just made into `$CARGO_HOME/registry/src/-<hash of that registry's path>/`
/// and reuses an unpacked `name-version` there without unpacking it again: a clone at a
/// path used before would build the next crate's tarball against the previous run's
/// `gc-core 0.1.0` (a new `HeapConfig` field failed that way). Those directories (the
/// ones whose name starts with `-`; registries proper are named after their host) hold
/// nothing else.
fn clear_packaged_sources() -> Result<()> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(h) => std::path::PathBuf::from(h),
        None => match std::env::var_os("HOME") {
            Some(h) => std::path::PathBuf::from(h).join(".cargo"),
            None => return Ok(()),
        },
    };
    let src = home.join("registry/src");
    let Ok(entries) = std::fs::read_dir(&src) else {
        return Ok(());
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with('-') {
            std::fs::remove_dir_all(e.path()).with_context(|| {
                format!(
                    "removing the stale unpacked packages in {}",
                    e.path().display()
                )
            })?;
        }
    }
    Ok(())
}

/// The steps, in order: the cheap static checks first, then the test suites.
fn plan(full: bool) -> Vec<(String, Command)> {
    let mut plan = Vec::new();

    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    plan.push(("formatting (cargo fmt --check)".into(), fmt));

    // Clippy checks in a target directory of its own: its metadata-only builds of the
    // cdylib crates (the `artifact` crates) would otherwise sit next to the test build's unhashed rlibs, and rustdoc
    // refuses a doctest that sees both copies (E0460). Check builds share nothing with
    // test builds, so this costs no time.
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--target-dir",
        "target/clippy",
        "--",
        "-D",
        "warnings",
    ]);
    plan.push(("lints (cargo clippy -D warnings)".into(), clippy));

    // Ready to publish: every library crate packaged (metadata, path dependencies with
    // versions, no file outside the package) and built from its tarball alone, in
    // dependency order, workspace dependencies taken from the packages just made
    // (about 25 s once its own target directory is warm; dependencies resolve from
    // crates.io). Nothing is uploaded.
    let mut publish = cargo();
    publish.args([
        "publish",
        "--workspace",
        "--dry-run",
        "--allow-dirty",
        "--target-dir",
        "target/publish",
    ]);
    plan.push((
        "packages build from their tarballs (cargo publish --workspace --dry-run)".into(),
        publish,
    ));

    let mut test = cargo();
    test.args(["test", "--workspace"]);
    plan.push(("unit, integration and tidy tests (cargo test)".into(), test));

    let mut gc_valgrind = cargo();
    gc_valgrind
        .args(["test", "-p", "gc-core-capi", "--test", "it", "c_programs::"])
        .env("GC_CORE_VALGRIND", "1");
    plan.push(("gc-core C test program under valgrind".into(), gc_valgrind));

    let mut cons_valgrind = cargo();
    cons_valgrind
        .args([
            "test",
            "-p",
            "gc-conservative-capi",
            "--test",
            "it",
            "c_programs::",
        ])
        .env("GC_CONSERVATIVE_VALGRIND", "1");
    plan.push((
        "gc-conservative GCBench (conservative roots only, stress mode) under valgrind".into(),
        cons_valgrind,
    ));

    // gil: the loom models, in their own target directory so the `--cfg loom` build
    // does not invalidate the normal one.
    let mut loom = cargo();
    loom.args([
        "test",
        "-p",
        "gil",
        "--release",
        "--lib",
        "--target-dir",
        "target/loom",
        "loom",
    ])
    .env("RUSTFLAGS", "--cfg loom")
    .env("LOOM_MAX_PREEMPTIONS", "4");
    plan.push(("gil: loom models (bounded preemptions)".into(), loom));

    // gc-core: the parallel marker's termination protocol under loom (same target
    // directory as gil's models).
    let mut gc_loom = cargo();
    gc_loom
        .args([
            "test",
            "-p",
            "gc-core",
            "--release",
            "--lib",
            "--target-dir",
            "target/loom",
            "loom",
        ])
        .env("RUSTFLAGS", "--cfg loom")
        .env("LOOM_MAX_PREEMPTIONS", "4");
    plan.push((
        "gc-core: loom models of parallel marking (bounded preemptions)".into(),
        gc_loom,
    ));

    // gil: the C program against include/gil.h (gil-capi's test) again, valgrind required
    // this time.
    let mut valgrind = cargo();
    valgrind
        .args(["test", "-p", "gil-capi", "--test", "it", "c_program::"])
        .env("GIL_VALGRIND", "1");
    plan.push(("gil: C ABI program under valgrind".into(), valgrind));

    // gc-runtime: the C program (five threads, four blocked while another collects;
    // misuse) under valgrind.
    let mut runtime_valgrind = cargo();
    runtime_valgrind
        .args(["test", "-p", "gc-runtime", "--test", "it", "c_programs::"])
        .env("GC_RUNTIME_VALGRIND", "1");
    plan.push((
        "gc-runtime: C program under valgrind".into(),
        runtime_valgrind,
    ));

    // minigap: a short run of the kernel in two threads under GC stress, under valgrind.
    let mut minigap_valgrind = cargo();
    minigap_valgrind
        .args([
            "test",
            "-p",
            "integration-tests",
            "--test",
            "it",
            "minigap_gc::short_stress_run_is_valgrind_clean",
        ])
        .env("MINIGAP_VALGRIND", "1");
    plan.push((
        "minigap kernel (two threads, GC stress) under valgrind".into(),
        minigap_valgrind,
    ));

    // refbridge: the C program in CPython's extension style against refbridge_python.h,
    // under valgrind.
    let mut refbridge_valgrind = cargo();
    refbridge_valgrind
        .args([
            "test",
            "-p",
            "refbridge-capi",
            "--test",
            "it",
            "c_programs::",
        ])
        .env("REFBRIDGE_VALGRIND", "1");
    plan.push((
        "refbridge C program (CPython C-API style) under valgrind".into(),
        refbridge_valgrind,
    ));

    // Real GAP on our GC (xtask/src/gap_real.rs, gap_real_steps.rs): GAP 4.12.1 (a
    // Julia 1.6 client) and 4.15.1 (a Julia 1.10 client, marking in parallel) built
    // against prefixes made by `cargo xtask julia-prefix`, a representative part of
    // testinstall (every file with --full) in each mode; skipped with a message where
    // the source trees are absent.
    for version in GapVersion::ALL {
        let v = version.as_str();
        let mut modes = vec!["ours", "stress", "verify"];
        if full && version == GapVersion::V4_12_1 {
            modes.push("parallel");
        }
        for mode in modes {
            let mut gap = xtask();
            gap.args(["gap-real", "--gap", v, mode]);
            if full {
                gap.arg("--full");
            }
            plan.push((gap_step_name(version, mode, full), gap));
        }
        if full && version == GapVersion::V4_15_1 {
            let mut repeat = xtask();
            repeat.args(["gap-real", "--gap", v, "ours", "--repeat", "20"]);
            plan.push((
                "real GAP 4.15.1 on gc-core: its testinstall part 20 times in a row, parallel marking".into(),
                repeat,
            ));
            let mut standard = xtask();
            standard.args(["gap-real", "--gap", v, "ours", "--suite", "teststandard"]);
            plan.push((
                "real GAP 4.15.1 on gc-core: teststandard, timed against GASMAN".into(),
                standard,
            ));
        }
    }

    // interpool (integration-tests/interpool): the Python package's wheels, each in a
    // fresh venv with numpy, scipy and pandas: its pytest suite and CPython's own
    // concurrent.futures tests against the executor (3.11, the default interpreter; every version
    // found with --full).
    let mut interpool = xtask();
    interpool.arg("interpool-test");
    if !full {
        interpool.args(["--python", "3.11"]);
    }
    plan.push((
        "interpool: wheels, pytest suite and CPython's concurrent.futures tests".into(),
        interpool,
    ));

    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    plan.push(("documentation (cargo doc, warnings denied)".into(), doc));

    plan
}

/// The name of a real-GAP step.
fn gap_step_name(version: GapVersion, mode: &str, full: bool) -> String {
    let what = if full {
        "all of testinstall".to_string()
    } else {
        format!("{} testinstall files", version.representative().len())
    };
    let how = match mode {
        "ours" => "",
        "stress" => " under GC stress",
        "verify" => " in verify mode",
        _ => ", two mark threads (opted into)",
    };
    let marking = if version == GapVersion::V4_15_1 {
        ", parallel marking"
    } else {
        ""
    };
    format!(
        "real GAP {} on gc-core: {what}{how}{marking}",
        version.as_str()
    )
}

/// Programs the test suites run: elf-loader's tests build C and C++ fixtures (gcc,
/// g++), run its C ABI program (elf-loader-capi's test) under valgrind and a custom-loaded library under gdb.
/// Missing ones are installed with apt-get (CI runs as root).
fn install_system_tools() -> Result<()> {
    crate::loader_libs::ensure()?;
    crate::steps::ensure_apt_tools(
        &[
            ("gdb", "gdb"),
            ("valgrind", "valgrind"),
            ("g++", "g++"),
            ("gcc", "gcc"),
            ("cc", "gcc"),
        ],
        "C fixtures, valgrind runs and gdb tests",
    )
}

/// rustfmt and clippy come with the usual toolchain but are separate rustup components;
/// a minimal toolchain lacks them, so add them when missing.
fn install_toolchain_components() -> Result<()> {
    for (component, probe) in [("rustfmt", "fmt"), ("clippy", "clippy")] {
        let mut check = cargo();
        check.args([probe, "--version"]);
        if succeeds(check) {
            continue;
        }
        println!("xtask: installing missing toolchain component {component} (rustup)");
        let status = Command::new("rustup")
            .args(["component", "add", component])
            .status();
        match status {
            Ok(s) if s.success() => {}
            _ => bail!("cargo {probe} is missing and `rustup component add {component}` failed"),
        }
    }
    Ok(())
}
