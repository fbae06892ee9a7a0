//! `cargo xtask demo`, scenario gap: the minigap kernel (a GAP-like C kernel whose memory
//! is gc-core + gc-conservative, threads serialised by gil) computes the Rubik's cube
//! group order and the seed's factorial sum in two threads under GC stress, and prints
//! its GC statistics.

use crate::steps::{cargo, root};
use anyhow::{bail, Context, Result};
use std::process::Command;

/// Runs the demo; returns a one-line summary.
pub fn run() -> Result<String> {
    crate::bench::ensure_boehm()?;
    let mut b = cargo();
    b.args([
        "build",
        "--release",
        "--quiet",
        "-p",
        "integration-tests",
        "--example",
        "minigap",
    ]);
    if !b.status()?.success() {
        bail!("building the minigap example failed");
    }
    let exe = root().join("target/release/examples/minigap");
    let scripts = root().join("integration-tests/minigap/scripts");
    let mut summary = Vec::new();
    for (what, file, args) in [
        (
            "Rubik's cube group order, 2 threads, collect every 1000 allocations",
            "rubik.g",
            vec!["--threads", "2", "--gc-stress", "1000"],
        ),
        (
            "Sum(List([1..2000], Factorial)), 2 threads",
            "factorial_sum.g",
            vec!["--threads", "2"],
        ),
    ] {
        println!("\n    -- {what}");
        let out = Command::new(&exe)
            .args(&args)
            .arg("--stats")
            .arg(scripts.join(file))
            .output()
            .context("run minigap")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let shown: Vec<&str> = text.lines().collect();
        for l in shown.iter().take(4) {
            println!("    {}", &l[..l.len().min(100)]);
        }
        if shown.len() > 4 {
            println!("    ... ({} lines of output)", shown.len());
        }
        for l in String::from_utf8_lossy(&out.stderr).lines() {
            println!("    {l}");
        }
        if !out.status.success() {
            bail!("minigap {file} failed");
        }
        summary.push(file.to_string());
    }
    Ok(format!(
        "minigap ran {} on gc-core + gc-conservative + gil",
        summary.join(" and ")
    ))
}
