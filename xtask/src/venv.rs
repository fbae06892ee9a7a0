//! The project-local virtual environment (`.venv`, git-ignored) of the numpy scenario:
//! made with `python3.11 -m venv` and filled from
//! `integration-tests/multipy-requirements.txt` (every version pinned). A stamp file
//! records the requirements it was made from, so later runs reuse it and a changed
//! requirements file remakes it.
//!
//! The other CPython versions' environments (`target/multipy-venv-X.Y`, numpy alone,
//! from `integration-tests/multipy-numpy-requirements.txt`) are made the same way by
//! [`ensure_version`], with that version's own Python (pyenv's `--enable-shared` build).
//! So are `bench interp-speed`'s pyperformance environments (`target/pyperf-venv-X.Y`,
//! from `integration-tests/bench/pyperformance-requirements.txt`: [`ensure_pyperformance`]).

use crate::steps::root;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const REQUIREMENTS: &str = "integration-tests/multipy-requirements.txt";
const NUMPY_REQUIREMENTS: &str = "integration-tests/multipy-numpy-requirements.txt";
const PYPERFORMANCE_REQUIREMENTS: &str = "integration-tests/bench/pyperformance-requirements.txt";
const WHEELS_REQUIREMENTS: &str = "integration-tests/wheels/requirements.txt";
const MATURIN_REQUIREMENTS: &str = "integration-tests/interpool/build-requirements.txt";
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
    if let Some(v) = reuse(&venv, REQUIREMENTS)? {
        return Ok(v);
    }
    let base = base_python()?;
    make(&venv, Path::new(&base), REQUIREMENTS)?;
    Ok(venv)
}

/// The directory of CPython `major.minor`'s numpy environment.
pub fn version_dir(major: u32, minor: u32) -> PathBuf {
    root().join(format!("target/multipy-venv-{major}.{minor}"))
}

/// Makes (or reuses) the numpy environment of the CPython whose executable is `python`
/// (version `major.minor`): `target/multipy-venv-X.Y` with
/// `integration-tests/multipy-numpy-requirements.txt` installed.
pub fn ensure_version(python: &Path, major: u32, minor: u32) -> Result<PathBuf> {
    let venv = version_dir(major, minor);
    if let Some(v) = reuse(&venv, NUMPY_REQUIREMENTS)? {
        return Ok(v);
    }
    make(&venv, python, NUMPY_REQUIREMENTS)?;
    Ok(venv)
}

/// Makes (or reuses) `target/pyperf-venv-X.Y`, the pinned pyperformance and pyperf of
/// `bench interp-speed`, with the CPython whose executable is `python`.
pub fn ensure_pyperformance(python: &Path, major: u32, minor: u32) -> Result<PathBuf> {
    let venv = root().join(format!("target/pyperf-venv-{major}.{minor}"));
    if let Some(v) = reuse(&venv, PYPERFORMANCE_REQUIREMENTS)? {
        return Ok(v);
    }
    make(&venv, python, PYPERFORMANCE_REQUIREMENTS)?;
    Ok(venv)
}

/// The requirement lines of a requirements text (comments and blank lines left out).
fn pins(text: &str) -> Vec<&str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect()
}

/// `venv` when it exists and its stamp records the current contents of `requirements`.
fn reuse(venv: &Path, requirements: &str) -> Result<Option<PathBuf>> {
    let req_path = root().join(requirements);
    let wanted = std::fs::read_to_string(&req_path)
        .with_context(|| format!("read {}", req_path.display()))?;
    let stamp = venv.join(STAMP);
    let python = venv.join("bin").join("python");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        println!(
            "xtask: reusing {} (pinned packages of {requirements})",
            venv.display()
        );
        return Ok(Some(venv.to_path_buf()));
    }
    Ok(None)
}

/// Makes `venv` afresh with `base -m venv` and installs `requirements` into it.
fn make(venv: &Path, base: &Path, requirements: &str) -> Result<()> {
    let req_path = root().join(requirements);
    let wanted = std::fs::read_to_string(&req_path)
        .with_context(|| format!("read {}", req_path.display()))?;
    let stamp = venv.join(STAMP);
    let python = venv.join("bin").join("python");
    let started = Instant::now();
    let base_s = base.display();
    println!(
        "xtask: making {} with {base_s} and installing {requirements} (pip)",
        venv.display()
    );
    if venv.exists() {
        std::fs::remove_dir_all(venv).with_context(|| format!("remove {}", venv.display()))?;
    }
    let status = Command::new(base)
        .args(["-m", "venv"])
        .arg(venv)
        .status()
        .with_context(|| format!("run {base_s} -m venv"))?;
    if !status.success() {
        bail!("`{base_s} -m venv {}` failed ({status})", venv.display());
    }
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "--only-binary=:all:",
            "-r",
        ])
        .arg(&req_path)
        .status()
        .context("run pip install")?;
    if !status.success() {
        bail!(
            "`pip install -r {requirements}` into {} failed ({status}); it pins {} \
             (pip's messages above name the package that failed)",
            venv.display(),
            pins(&wanted).join(", ")
        );
    }
    std::fs::write(&stamp, &wanted).with_context(|| format!("write {}", stamp.display()))?;
    println!(
        "xtask: {} ready in {:.1}s",
        venv.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The wheel scenario's environment: `target/wheels-venv`, CPython 3.11 with the
/// popular binary wheels of `integration-tests/wheels/requirements.txt` (binary wheels
/// only: a package pip would build from source is an error, not a slow build).
pub fn wheels_dir() -> PathBuf {
    root().join("target/wheels-venv")
}

/// Makes (or reuses) [`wheels_dir`].
pub fn ensure_wheels() -> Result<PathBuf> {
    let venv = wheels_dir();
    if let Some(v) = reuse(&venv, WHEELS_REQUIREMENTS)? {
        return Ok(v);
    }
    let base = base_python()?;
    make(&venv, Path::new(&base), WHEELS_REQUIREMENTS)?;
    Ok(venv)
}

/// `target/maturin-venv`: the pinned maturin that builds the interpool wheels.
pub fn ensure_maturin() -> Result<PathBuf> {
    let venv = root().join("target/maturin-venv");
    if let Some(v) = reuse(&venv, MATURIN_REQUIREMENTS)? {
        return Ok(v);
    }
    let base = base_python()?;
    make(&venv, Path::new(&base), MATURIN_REQUIREMENTS)?;
    Ok(venv)
}

/// The `numpy==` pin of a requirements text.
#[cfg(test)]
fn numpy_pin(text: &str) -> Option<&str> {
    text.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("numpy=="))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_leave_out_comments() {
        let text = "# comment\npyperf==2.9.0\n\ntomli==2.5.0; python_version < \"3.11\"  # why\n";
        assert_eq!(
            pins(text),
            vec!["pyperf==2.9.0", "tomli==2.5.0; python_version < \"3.11\""]
        );
    }

    #[test]
    fn pyperformance_requirements_pin_every_package() {
        let text = std::fs::read_to_string(root().join(PYPERFORMANCE_REQUIREMENTS)).unwrap();
        let pins = pins(&text);
        assert!(pins.contains(&"pyperformance==1.11.0"), "{pins:?}");
        assert!(pins.contains(&"pyperf==2.9.0"), "{pins:?}");
        assert!(pins.iter().all(|p| p.contains("==")), "{pins:?}");
    }

    #[test]
    fn the_wheel_scenario_pins_every_package_and_numpy_alike() {
        let text = std::fs::read_to_string(root().join(WHEELS_REQUIREMENTS)).unwrap();
        let pins = pins(&text);
        assert!(pins.len() >= 30, "{pins:?}");
        assert!(pins.iter().all(|p| p.contains("==")), "{pins:?}");
        let default = std::fs::read_to_string(root().join(REQUIREMENTS)).unwrap();
        assert_eq!(numpy_pin(&text), numpy_pin(&default));
    }

    #[test]
    fn every_version_gets_the_same_numpy() {
        let read = |p: &str| std::fs::read_to_string(root().join(p)).unwrap();
        let (default, others) = (read(REQUIREMENTS), read(NUMPY_REQUIREMENTS));
        let pin = numpy_pin(&default).expect("multipy-requirements.txt pins numpy");
        assert_eq!(numpy_pin(&others), Some(pin));
    }
}
