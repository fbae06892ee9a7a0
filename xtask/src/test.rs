//! `cargo xtask test`: everything CI checks, in order.

use crate::steps::{cargo, succeeds, Steps};
use anyhow::{bail, Result};
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

    let mut plan = plan(full);
    if full {
        for (_, cmd) in plan.iter_mut() {
            cmd.env("MULTIPY_FULL", "1");
        }
    }
    let mut steps = Steps::new("test", plan.len());
    for (name, cmd) in plan {
        steps.run(name, cmd)?;
    }
    steps.finish();
    Ok(())
}

/// The steps, in order: the cheap static checks first, then the test suites.
fn plan(full: bool) -> Vec<(&'static str, Command)> {
    let mut plan = Vec::new();

    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    plan.push(("formatting (cargo fmt --check)", fmt));

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
    plan.push(("lints (cargo clippy -D warnings)", clippy));

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
        "packages build from their tarballs (cargo publish --workspace --dry-run)",
        publish,
    ));

    let mut test = cargo();
    test.args(["test", "--workspace"]);
    plan.push(("unit, integration and tidy tests (cargo test)", test));

    let mut gc_valgrind = cargo();
    gc_valgrind
        .args(["test", "-p", "gc-core-capi", "--test", "it", "c_programs::"])
        .env("GC_CORE_VALGRIND", "1");
    plan.push(("gc-core C test program under valgrind", gc_valgrind));

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
        "gc-conservative GCBench (conservative roots only, stress mode) under valgrind",
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
    plan.push(("gil: loom models (bounded preemptions)", loom));

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
        "gc-core: loom models of parallel marking (bounded preemptions)",
        gc_loom,
    ));

    // gil: the C program against include/gil.h (gil-capi's test) again, valgrind required
    // this time.
    let mut valgrind = cargo();
    valgrind
        .args(["test", "-p", "gil-capi", "--test", "it", "c_program::"])
        .env("GIL_VALGRIND", "1");
    plan.push(("gil: C ABI program under valgrind", valgrind));

    // gc-runtime: the C program (five threads, four blocked while another collects;
    // misuse) under valgrind.
    let mut runtime_valgrind = cargo();
    runtime_valgrind
        .args(["test", "-p", "gc-runtime", "--test", "it", "c_programs::"])
        .env("GC_RUNTIME_VALGRIND", "1");
    plan.push(("gc-runtime: C program under valgrind", runtime_valgrind));

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
        "minigap kernel (two threads, GC stress) under valgrind",
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
        "refbridge C program (CPython C-API style) under valgrind",
        refbridge_valgrind,
    ));

    // Real GAP 4.12.1 on our GC (xtask/src/gap_real.rs): its kernel built against the
    // Julia-compatibility prefix, a representative part of testinstall (everything with
    // --full) in each mode; skipped with a message where the kernel sources are absent.
    let modes: &[(&'static str, &'static str)] =
        if full {
            &[
            ("ours", "real GAP on gc-core: all of testinstall"),
            ("stress", "real GAP on gc-core: all of testinstall under GC stress"),
            ("verify", "real GAP on gc-core: all of testinstall in verify mode"),
            (
                "parallel",
                "real GAP on gc-core: all of testinstall, two mark threads, YoungRef per thread",
            ),
        ]
        } else {
            &[
                ("ours", "real GAP on gc-core: 48 testinstall files"),
                (
                    "stress",
                    "real GAP on gc-core: 48 testinstall files under GC stress",
                ),
                (
                    "verify",
                    "real GAP on gc-core: 48 testinstall files in verify mode",
                ),
            ]
        };
    for (mode, name) in modes {
        let mut gap = xtask();
        gap.args(["gap-real", mode]);
        if full {
            gap.arg("--full");
        }
        plan.push((*name, gap));
    }

    // interpool (integration-tests/interpool): the Python package's wheels, each in a
    // fresh venv with numpy, scipy and pandas: its pytest suite and CPython's own
    // concurrent.futures tests against the executor (3.11 and 3.13; every version
    // found with --full).
    let mut interpool = xtask();
    interpool.arg("interpool-test");
    if !full {
        interpool.args(["--python", "3.11,3.13"]);
    }
    plan.push((
        "interpool: wheels, pytest suite and CPython's concurrent.futures tests",
        interpool,
    ));

    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    plan.push(("documentation (cargo doc, warnings denied)", doc));

    plan
}

/// This xtask binary, for steps that are xtask subcommands.
fn xtask() -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap_or_else(|_| "cargo-xtask".into()));
    cmd.current_dir(crate::steps::root());
    cmd
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
