//! Popular binary wheels from PyPI in two interpreters of one process, as a user runs
//! them: `integration-tests/wheels/requirements.txt` pins them (scipy, pandas with
//! pyarrow, duckdb, numba, scikit-learn, statsmodels, scikit-image, matplotlib, opencv,
//! pyproj, shapely, h5py, polars, cryptography, lxml, pydantic, ... with pytest), and
//! `integration-tests/wheels/smoke.py` imports each and checks a small real operation
//! (51 checks, one of them in Python threads that exit). The `multipy` CLI runs the
//! script in two interpreters at once: every line of each interpreter must equal the
//! plain `python` process's, and the process must exit with status 0 (its teardown
//! included: thread exits, namespace ends, exit handlers).
//!
//! `MULTIPY_FULL=1` (`cargo xtask test --full`): three CLI runs in a row, and scipy's
//! and pandas' own test suites (linalg, special, fft, interpolate; frame, series: some
//! 60,000 tests) in two interpreters at once against a plain process, test for test.
//!
//! The environment is `target/wheels-venv` (`cargo xtask test` makes it), or
//! `$MULTIPY_WHEELS_VENV`. A binary of its own: it compares whole processes.

#[path = "it/multipy_common/mod.rs"]
mod multipy_common;

use integration_tests::multipy::{Config, Interpreter};
use multipy_common::{example, pytest};
use std::path::{Path, PathBuf};
use std::process::Command;

fn venv() -> PathBuf {
    let v = std::env::var_os("MULTIPY_WHEELS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wheels-venv"));
    assert!(
        v.join("bin/python").exists(),
        "{} has no bin/python: run `cargo xtask test` once (it makes the wheels venv from \
         integration-tests/wheels/requirements.txt), or set MULTIPY_WHEELS_VENV",
        v.display()
    );
    v.canonicalize().unwrap()
}

fn smoke_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("wheels/smoke.py")
}

/// The check lines of a smoke run (`name: result`), sorted; the summary line apart.
fn checks(text: &str) -> (Vec<String>, Option<String>) {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.contains(": ") && !l.starts_with("smoke:"))
        .map(str::to_string)
        .collect();
    lines.sort();
    let summary = text
        .lines()
        .find(|l| l.starts_with("smoke:"))
        .map(str::to_string);
    (lines, summary)
}

/// The plain process's lines (it must pass every check).
fn plain_run(venv: &Path, dir: &Path) -> Vec<String> {
    let out = Command::new(venv.join("bin/python"))
        .arg(smoke_script())
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the plain process fails a check ({}):\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (lines, summary) = checks(&text);
    assert_eq!(summary.as_deref(), Some("smoke: 51 ok, 0 failed"), "{text}");
    lines
}

/// One CLI run with two interpreters: each interpreter's lines equal `want`, and the
/// process exits 0.
fn cli_run(venv: &Path, dir: &Path, want: &[String], run: usize) {
    let out = Command::new(example())
        .args(["--interpreters", "2", "--venv"])
        .arg(venv)
        .arg(smoke_script())
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    for k in 0..2 {
        let prefix = format!("[{k}] ");
        let mine: String = stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(|l| format!("{l}\n"))
            .collect();
        let (lines, summary) = checks(&mine);
        let differ: Vec<(&String, Option<&String>)> = want
            .iter()
            .filter(|w| !lines.contains(w))
            .map(|w| {
                let name = w.split(": ").next().unwrap();
                (
                    w,
                    lines.iter().find(|l| l.starts_with(&format!("{name}: "))),
                )
            })
            .collect();
        assert!(
            differ.is_empty() && lines.len() == want.len(),
            "run {run}, interpreter {k}: checks that differ from the plain process \
             (plain, interpreter): {differ:#?}\nstderr:\n{stderr}"
        );
        assert_eq!(
            summary.as_deref(),
            Some("smoke: 51 ok, 0 failed"),
            "run {run}, interpreter {k}"
        );
    }
    assert!(
        out.status.success(),
        "run {run}: the process exited with {} (the checks matched):\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("multipy: 2/2 interpreters ok"),
        "run {run}:\n{stdout}\n{stderr}"
    );
}

#[test]
fn popular_wheels_in_two_interpreters_match_a_plain_process() {
    let venv = venv();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wheels-smoke");
    std::fs::create_dir_all(&dir).unwrap();
    let want = plain_run(&venv, &dir);
    let runs = if std::env::var_os("MULTIPY_FULL").is_some() {
        3
    } else {
        1
    };
    for run in 1..=runs {
        cli_run(&venv, &dir, &want, run);
    }
}

/// scipy's and pandas' own tests that depend on the machine's free memory or on
/// network access behave alike in both runs, so nothing is deselected; tests that touch
/// process-wide state are listed here with the reason when a difference shows.
const PROCESS_WIDE: &[(&str, &str)] = &[];

const SUITES: &[(&str, &[&str])] = &[
    (
        "scipy",
        &[
            "scipy/linalg/tests",
            "scipy/special/tests",
            "scipy/fft/tests",
            "scipy/interpolate/tests",
        ],
    ),
    ("pandas", &["pandas/tests/frame", "pandas/tests/series"]),
];

#[test]
fn scipy_and_pandas_suites_in_two_interpreters_match_a_plain_process() {
    if std::env::var_os("MULTIPY_FULL").is_none() {
        eprintln!(
            "skipped: scipy's and pandas' suites run with MULTIPY_FULL=1 (cargo xtask test --full)"
        );
        return;
    }
    let venv = venv();
    let site = venv.join("lib/python3.11/site-packages");
    let (a, b) = (
        Interpreter::new(Config::new().venv(&venv)).expect("interpreter starts"),
        Interpreter::new(Config::new().venv(&venv)).expect("interpreter starts"),
    );
    let mut total = 0;
    for (what, modules) in SUITES {
        let args = pytest::args(&site, modules, &[]);
        let (want, want_code, plain_secs) = pytest::plain(&venv, &args);
        let (outs, both_secs) = pytest::in_interpreters(&[&a, &b], &args);
        eprintln!(
            "{what} suite: plain process {plain_secs:.1} s; two interpreters at once {both_secs:.1} s"
        );
        pytest::assert_same(what, &outs, &want, want_code, PROCESS_WIDE);
        total += want.count("passed");
    }
    assert!(total > 10_000, "{total} tests passed in all");
}
