//! The project-local virtual environment (`.venv`, git-ignored) of the numpy scenario:
//! made with `python3.11 -m venv` and filled from
//! `integration-tests/multipy-requirements.txt` (every version pinned). A stamp file
//! records the requirements it was made from, so later runs reuse it and a changed
//! requirements file remakes it.

use crate::steps::root;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

const REQUIREMENTS: &str = "integration-tests/multipy-requirements.txt";
const STAMP: &str = ".multipy-requirements";

/// The environment's directory.
pub fn dir() -> PathBuf {
    root().join(".venv")
}

/// The Python that makes the environment: `python3.11` (the scenario's default CPython).
fn base_python() -> Result<String> {
    for candidate in ["python3.11", "python3"] {
        let out = Command::new(candidate)
            .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
            .output();
        if let Ok(out) = out {
            if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "3.11" {
                return Ok(candidate.to_string());
            }
        }
    }
    bail!("the numpy scenario needs CPython 3.11 (python3.11 or python3) on the PATH")
}

/// Makes `.venv` (or reuses it) with the pinned requirements installed.
pub fn ensure() -> Result<PathBuf> {
    let venv = dir();
    let req_path = root().join(REQUIREMENTS);
    let wanted = std::fs::read_to_string(&req_path)
        .with_context(|| format!("read {}", req_path.display()))?;
    let stamp = venv.join(STAMP);
    let python = venv.join("bin").join("python");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        println!(
            "xtask: reusing {} (pinned numpy scenario packages)",
            venv.display()
        );
        return Ok(venv);
    }
    let started = Instant::now();
    let base = base_python()?;
    println!(
        "xtask: making {} with {base} and installing {REQUIREMENTS} (pip)",
        venv.display()
    );
    if venv.exists() {
        std::fs::remove_dir_all(&venv).with_context(|| format!("remove {}", venv.display()))?;
    }
    let status = Command::new(&base)
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .with_context(|| format!("run {base} -m venv"))?;
    if !status.success() {
        bail!("`{base} -m venv {}` failed ({status})", venv.display());
    }
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "-r",
        ])
        .arg(&req_path)
        .status()
        .context("run pip install")?;
    if !status.success() {
        bail!(
            "`pip install -r {REQUIREMENTS}` into {} failed ({status})",
            venv.display()
        );
    }
    std::fs::write(&stamp, &wanted).with_context(|| format!("write {}", stamp.display()))?;
    println!(
        "xtask: {} ready in {:.1}s",
        venv.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(venv)
}
