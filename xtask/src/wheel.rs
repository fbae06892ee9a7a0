//! `cargo xtask wheel`: the `interpool` Python package (`integration-tests/interpool`,
//! PyO3 + maturin) built into `target/wheels/`, one wheel per CPython 3.10-3.13 found
//! (pyenv's `--enable-shared` builds); and `cargo xtask interpool-test`, what
//! `cargo xtask test` runs of it: each wheel installed into a fresh virtual environment
//! with numpy, scipy, pandas and pytest, the package's pytest suite, and CPython's own
//! concurrent.futures tests against the executor.
//!
//! maturin comes from PyPI, pinned (`integration-tests/interpool/build-requirements.txt`),
//! into `target/maturin-venv`.

use crate::steps::root;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The versions the package supports.
pub const VERSIONS: [(u32, u32); 4] = [(3, 10), (3, 11), (3, 12), (3, 13)];

/// The pythons to build for: `only` (`X.Y` strings) or every supported one found; each
/// with its version.
pub fn pythons(only: &[String]) -> Result<Vec<((u32, u32), PathBuf)>> {
    let mut out = Vec::new();
    for (major, minor) in VERSIONS {
        let name = format!("{major}.{minor}");
        if !only.is_empty() && !only.contains(&name) {
            continue;
        }
        match crate::bench::find_python(major, minor) {
            Some(p) => out.push(((major, minor), p)),
            None if only.contains(&name) => bail!("python{name} is not on this machine"),
            None => println!("xtask: no python{name}: no wheel for it"),
        }
    }
    if out.is_empty() {
        bail!("no CPython 3.10-3.13 found to build interpool for");
    }
    Ok(out)
}

/// Builds the wheels (release) for `pythons`; returns each version's wheel.
pub fn build(pythons: &[((u32, u32), PathBuf)]) -> Result<Vec<((u32, u32), PathBuf)>> {
    let maturin = crate::venv::ensure_maturin()?.join("bin/maturin");
    let out_dir = root().join("target/wheels");
    std::fs::create_dir_all(&out_dir)?;
    let mut cmd = Command::new(&maturin);
    cmd.current_dir(root())
        .args([
            "build",
            "--release",
            "--manifest-path",
            "integration-tests/interpool/Cargo.toml",
            // For this machine's glibc (the wheel loads libpython copies of the
            // installed CPython; it is not meant for another system).
            "--compatibility",
            "linux",
            "--out",
        ])
        .arg(&out_dir);
    for (_, p) in pythons {
        cmd.arg("--interpreter").arg(p);
    }
    println!(
        "xtask: building interpool wheels (maturin) for {}",
        describe(pythons)
    );
    let status = cmd.status().context("run maturin")?;
    if !status.success() {
        bail!("maturin build failed ({status})");
    }
    let mut wheels = Vec::new();
    for ((major, minor), _) in pythons {
        let tag = format!("cp{major}{minor}-cp{major}{minor}");
        let wheel = newest(&out_dir, &tag)
            .with_context(|| format!("no interpool wheel for {tag} in {}", out_dir.display()))?;
        println!("xtask: {}", wheel.display());
        wheels.push(((*major, *minor), wheel));
    }
    Ok(wheels)
}

fn describe(pythons: &[((u32, u32), PathBuf)]) -> String {
    pythons
        .iter()
        .map(|((a, b), _)| format!("{a}.{b}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The newest `interpool-*-<tag>-*.whl` in `dir`.
fn newest(dir: &Path, tag: &str) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with("interpool-") && n.contains(tag) && n.ends_with(".whl")
            })
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}

/// `cargo xtask wheel`.
pub fn run(only: &[String]) -> Result<()> {
    let wheels = build(&pythons(only)?)?;
    println!("\ninstall with: pip install {}", wheels[0].1.display());
    Ok(())
}

/// A fresh virtual environment at `dir` made with `python`, with `requirements` and then
/// `wheel` installed (binary wheels only).
fn fresh_venv(python: &Path, dir: &Path, requirements: &Path, wheel: &Path) -> Result<PathBuf> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("remove {}", dir.display()))?;
    }
    let run = |cmd: &mut Command, what: &str| -> Result<()> {
        let status = cmd.status().with_context(|| what.to_string())?;
        if !status.success() {
            bail!("{what} failed ({status})");
        }
        Ok(())
    };
    run(
        Command::new(python).args(["-m", "venv"]).arg(dir),
        &format!("{} -m venv {}", python.display(), dir.display()),
    )?;
    let pip = dir.join("bin/python");
    run(
        Command::new(&pip)
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
            .arg(requirements),
        &format!(
            "pip install -r {} into {}",
            requirements.display(),
            dir.display()
        ),
    )?;
    run(
        Command::new(&pip)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
            ])
            .arg(wheel),
        &format!("pip install {}", wheel.display()),
    )?;
    Ok(dir.to_path_buf())
}

/// Where CPython's concurrent.futures tests come from for one installation.
enum CfTests {
    /// Its own test package has them.
    Own,
    /// Another build's (Debian's `libpythonX.Y-testsuite` of the same minor version).
    From(PathBuf),
    /// Nowhere on this machine or its package registries: why.
    Missing(String),
}

/// CPython's concurrent.futures tests for `python`: its own, or, when its test package
/// lacks them (pyenv's 3.11 and 3.12 builds do), Debian's `libpythonX.Y-testsuite` of
/// the same minor version (Debian 12 has 3.11.2's), unpacked into
/// `target/cpython-tests-X.Y`.
fn cpython_tests(python: &Path) -> Result<CfTests> {
    let has = Command::new(python)
        .args(["-c", "import test.test_concurrent_futures"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has {
        return Ok(CfTests::Own);
    }
    let version = Command::new(python)
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .context("ask python its version")?;
    let v = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let dir = root().join(format!("target/cpython-tests-{v}"));
    let module = dir.join(format!("usr/lib/python{v}/test/test_concurrent_futures.py"));
    if module.is_file() {
        return Ok(CfTests::From(module.parent().unwrap().to_path_buf()));
    }
    let package = format!("libpython{v}-testsuite");
    let known = Command::new("apt-cache")
        .args(["show", &package])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    if !known {
        return Ok(CfTests::Missing(format!(
            "this CPython {v} has no test.test_concurrent_futures and Debian's package \
             registry has no {package}"
        )));
    }
    std::fs::create_dir_all(&dir)?;
    let status = Command::new("apt-get")
        .args(["download", "-q", &package])
        .current_dir(&dir)
        .status()
        .context("run apt-get download")?;
    if !status.success() {
        bail!("`apt-get download {package}` failed: CPython {v}'s concurrent.futures tests are not on this machine");
    }
    let deb = std::fs::read_dir(&dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .context("apt-get download left no .deb")?;
    let status = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&dir)
        .status()
        .context("run dpkg-deb")?;
    if !status.success() || !module.is_file() {
        bail!("unpacking {} gave no {}", deb.display(), module.display());
    }
    Ok(CfTests::From(module.parent().unwrap().to_path_buf()))
}

/// The wheel of CPython `version` (`X.Y`) built and installed into
/// `target/interpool-venv-X.Y` (made with the test requirements when missing; the wheel
/// is reinstalled every time): for the benchmark.
pub fn test_venv(version: &str) -> Result<PathBuf> {
    let pythons = pythons(&[version.to_string()])?;
    let wheels = build(&pythons)?;
    let (_, wheel) = &wheels[0];
    let dir = root().join(format!("target/interpool-venv-{version}"));
    let py = dir.join("bin/python");
    if !py.exists() {
        return fresh_venv(
            &pythons[0].1,
            &dir,
            &root().join("integration-tests/interpool/test-requirements.txt"),
            wheel,
        );
    }
    let status = Command::new(&py)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--no-deps", "--force-reinstall"])
        .arg(wheel)
        .status()
        .context("pip install the wheel")?;
    if !status.success() {
        bail!("pip install {} failed ({status})", wheel.display());
    }
    Ok(dir)
}

/// `cargo xtask interpool-test`: for each version, a fresh venv with the wheel, the
/// pytest suite (`--quick`: its quick part) and CPython's concurrent.futures tests.
pub fn test(only: &[String], quick: bool) -> Result<()> {
    let pythons = pythons(only)?;
    let wheels = build(&pythons)?;
    let pkg = root().join("integration-tests/interpool");
    let mut failures = Vec::new();
    for (((major, minor), wheel), (_, python)) in wheels.iter().zip(&pythons) {
        let v = format!("{major}.{minor}");
        let venv = fresh_venv(
            python,
            &root().join(format!("target/interpool-venv-{v}")),
            &pkg.join("test-requirements.txt"),
            wheel,
        )?;
        let py = venv.join("bin/python");
        let mut pytest = Command::new(&py);
        pytest
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEsxX"])
            .arg(pkg.join("tests"))
            .current_dir(&pkg);
        if quick {
            pytest.args(["-m", "not slow"]);
        }
        println!(
            "\nxtask: interpool {v}: pytest {}",
            if quick { "(quick part)" } else { "" }
        );
        if !pytest.status().context("run pytest")?.success() {
            failures.push(format!("{v}: pytest"));
        }
        let mut suite = Command::new(&py);
        suite.arg(pkg.join("tests/cpython_futures_suite.py"));
        match cpython_tests(python)? {
            CfTests::From(dir) => {
                suite.arg("--tests").arg(dir);
            }
            CfTests::Own => {}
            CfTests::Missing(why) => {
                println!(
                    "\nxtask: interpool {v}: CPython's concurrent.futures tests cannot run: {why}"
                );
                continue;
            }
        }
        println!("\nxtask: interpool {v}: CPython's concurrent.futures tests");
        if !suite
            .status()
            .context("run the concurrent.futures suite")?
            .success()
        {
            failures.push(format!("{v}: CPython's concurrent.futures tests"));
        }
    }
    if !failures.is_empty() {
        bail!("interpool: {}", failures.join("; "));
    }
    Ok(())
}
