//! `cargo xtask test`: everything CI checks, in order.

use crate::steps::{cargo, succeeds, Steps};
use anyhow::{bail, Result};
use std::process::Command;

/// Runs the checks in CI order, stopping at the first failure.
pub fn run() -> Result<()> {
    install_toolchain_components()?;
    install_system_tools()?;

    let plan = plan();
    let mut steps = Steps::new("test", plan.len());
    for (name, cmd) in plan {
        steps.run(name, cmd)?;
    }
    steps.finish();
    Ok(())
}

/// The steps, in order: the cheap static checks first, then the test suites.
fn plan() -> Vec<(&'static str, Command)> {
    let mut plan = Vec::new();

    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    plan.push(("formatting (cargo fmt --check)", fmt));

    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    plan.push(("lints (cargo clippy -D warnings)", clippy));

    let mut test = cargo();
    test.args(["test", "--workspace"]);
    plan.push(("unit, integration and tidy tests (cargo test)", test));

    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    plan.push(("documentation (cargo doc, warnings denied)", doc));

    plan
}

/// Programs the test suites run: elf-loader's tests build C and C++ fixtures (gcc,
/// g++), run its C ABI program under valgrind and a custom-loaded library under gdb.
/// Missing ones are installed with apt-get (CI runs as root).
fn install_system_tools() -> Result<()> {
    let tools = [
        ("gdb", "gdb"),
        ("valgrind", "valgrind"),
        ("g++", "g++"),
        ("gcc", "gcc"),
    ];
    let missing: Vec<&str> = tools
        .iter()
        .filter(|(program, _)| {
            let mut probe = Command::new(program);
            probe.arg("--version");
            !succeeds(probe)
        })
        .map(|(_, package)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!(
        "xtask: installing {} (apt-get, for elf-loader's tests)",
        missing.join(", ")
    );
    let mut update = Command::new("apt-get");
    update.arg("update");
    let _ = update.status();
    let status = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        _ => bail!("could not install {} with apt-get", missing.join(", ")),
    }
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
