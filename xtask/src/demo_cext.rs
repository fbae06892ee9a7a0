//! The C-extension scenario's demo: integration-tests' `cext` example (the scenario's
//! standard script run on refbridge, with the extension loaded by elf-loader, and on
//! CPython 3.11 with the same C source as a real extension module), then refbridge's
//! own `tour` example.

use crate::steps::cargo;
use anyhow::{bail, Context, Result};
use std::process::Command;

/// Runs the scenario and returns a one-line summary.
pub fn run() -> Result<String> {
    let exe = crate::demo_multipy::build_example("cext")?;
    println!("    $ cext");
    let out = Command::new(&exe)
        .output()
        .context("run the cext example")?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in stdout.lines() {
        println!("      {line}");
    }
    if !out.status.success() {
        bail!(
            "the cext example failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let checkpoints = stdout.matches("checkpoint").count();
    if !stdout.contains("same objects freed at the same points: yes") {
        bail!("refbridge and CPython freed different objects");
    }
    let mut tour = cargo();
    tour.args([
        "run",
        "--quiet",
        "--release",
        "-p",
        "refbridge",
        "--example",
        "refbridge_tour",
    ]);
    println!("    $ cargo run -p refbridge --example refbridge_tour");
    if !tour.status().context("run refbridge's tour")?.success() {
        bail!("refbridge's tour example failed");
    }
    Ok(format!(
        "same objects freed at the same {checkpoints} checkpoints on refbridge and CPython 3.11 (cycles across the boundary included)"
    ))
}
