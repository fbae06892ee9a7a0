//! The interpool demo: the Python package's wheel for CPython 3.11 installed into its
//! venv (`cargo xtask wheel`'s build), then its README's example
//! (`integration-tests/interpool/examples/sum_of_squares.py`): four worker interpreters of
//! one `python` process summing squares of views of one 320 MB numpy array, checked
//! against numpy in the host.

use crate::steps::root;
use anyhow::{bail, Context, Result};
use std::process::Command;
use std::time::Instant;

/// Runs the example and returns a one-line summary.
pub fn run() -> Result<String> {
    let venv = crate::wheel::test_venv("3.11")?;
    let example = root().join("integration-tests/interpool/examples/sum_of_squares.py");
    println!("    $ python {}", example.display());
    let t = Instant::now();
    let out = Command::new(venv.join("bin/python"))
        .arg(&example)
        .output()
        .context("run the interpool example")?;
    let secs = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in stdout.lines() {
        println!("      {line}");
    }
    if !out.status.success() {
        bail!(
            "the interpool example failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let values: Vec<f64> = stdout
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [workers, host] = values[..] else {
        bail!("the example printed {stdout:?}, not two sums");
    };
    if (workers - host).abs() > 1e-6 * host.abs() {
        bail!("the workers' sum {workers} differs from the host's {host}");
    }
    Ok(format!(
        "4 worker interpreters summed views of a 320 MB numpy array: {workers:.6e} (host {host:.6e}), {secs:.1} s with start-up"
    ))
}
