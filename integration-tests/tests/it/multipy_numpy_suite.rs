//! numpy's own test suite in two interpreters at once, compared with a plain
//! `python -m pytest` of the same modules in the same venv: each interpreter's counts
//! (passed, failed, skipped, xfailed, xpassed, errors) and the list of every test that
//! did not pass, with its reason, must equal the plain run's.
//!
//! CI runs a subset covering ufuncs, linalg (OpenBLAS), random, fft, and the buffer
//! protocol (~2,300 tests); `MULTIPY_FULL=1` (or `cargo xtask test --full`) runs the
//! full comparison: umath, ufunc, all of multiarray, einsum, linalg, random, fft
//! (~20,800 tests).
//!
//! pytest options for both runs: `--capture=sys` (pytest's default fd capture `dup2`s
//! the process's file descriptors 1 and 2, which two interpreters cannot both do) and
//! `-p no:cacheprovider` (both would write the same `.pytest_cache`). Two tests that
//! need 6 and 18 GB of free memory are deselected in both runs (see `DESELECTED`).

use crate::multipy_common::{interp, venv};
use std::collections::BTreeMap;
use std::process::Command;

const CI_MODULES: &[&str] = &[
    "numpy/_core/tests/test_ufunc.py",
    "numpy/_core/tests/test_scalarbuffer.py",
    "numpy/_core/tests/test_multiarray.py::TestNewBufferProtocol",
    "numpy/_core/tests/test_multiarray.py::TestDot",
    "numpy/linalg/tests/test_linalg.py",
    "numpy/random/tests/test_generator_mt19937.py",
    "numpy/fft/tests/test_pocketfft.py",
];

const FULL_MODULES: &[&str] = &[
    "numpy/_core/tests/test_umath.py",
    "numpy/_core/tests/test_ufunc.py",
    "numpy/_core/tests/test_multiarray.py",
    "numpy/_core/tests/test_scalarbuffer.py",
    "numpy/_core/tests/test_einsum.py",
    "numpy/linalg/tests/test_linalg.py",
    "numpy/random/tests/test_generator_mt19937.py",
    "numpy/fft/tests/test_pocketfft.py",
];

/// Tests deselected in both runs (plain and interpreters), with the reason (also in the
/// README): they allocate 6 and 18 GB and run only when `requires_memory` finds that much
/// free at that instant, so their outcome depends on the machine's free memory at that
/// moment; two interpreters running them at once on a 24 GB machine would need twice
/// that.
const DESELECTED: &[&str] = &[
    "numpy/_core/tests/test_multiarray.py::TestDot::test_huge_vectordot[float64]",
    "numpy/_core/tests/test_multiarray.py::TestDot::test_huge_vectordot[complex128]",
    "numpy/_core/tests/test_ufunc.py::TestUfunc::test_identityless_reduction_huge_array",
];

/// Tests whose outcome may differ from the plain run because they touch process-wide
/// state, each with the reason (also listed in the README). A difference in any other
/// test fails.
const PROCESS_WIDE: &[(&str, &str)] = &[
    (
        "test_linalg.py:2043: Numpy xerbla not linked in",
        "test_xerbla_override forks and then calls os.wait(), which reaps *any* child of the \
         process: when both interpreters run it at the same moment, one may reap the other's \
         child, see the wrong exit status and skip",
    ),
    (
        "test_xerbla_override - ChildProcessError",
        "the same os.wait() race the other way: the other interpreter's os.wait() reaped \
         both children, so this one finds none (ECHILD)",
    ),
];

/// Removes from `got` the lines of known process-wide tests that the plain run does not
/// have, counting them as passed as in the plain run; returns what it excused.
fn excuse(got: &mut Summary, want: &Summary) -> Vec<String> {
    let mut excused = Vec::new();
    for (pattern, why) in PROCESS_WIDE {
        let extra: Vec<String> = got
            .not_passed
            .iter()
            .filter(|l| l.contains(pattern) && !want.not_passed.contains(l))
            .cloned()
            .collect();
        for line in extra {
            let outcome = match line.split_whitespace().next().unwrap_or("") {
                "SKIPPED" => "skipped",
                "FAILED" => "failed",
                "ERROR" => "error",
                "XFAIL" => "xfailed",
                _ => "xpassed",
            };
            if let Some(n) = got.counts.get_mut(outcome) {
                *n -= 1;
                if *n == 0 {
                    got.counts.remove(outcome);
                }
            }
            *got.counts.entry("passed".into()).or_default() += 1;
            got.not_passed.retain(|l| *l != line);
            excused.push(format!("{line} ({why})"));
        }
    }
    excused
}

/// A pytest run's result: counts by outcome and the non-passing tests' report lines.
#[derive(Debug, PartialEq, Eq)]
struct Summary {
    counts: BTreeMap<String, u64>,
    not_passed: Vec<String>,
}

fn summarize(out: &str) -> Summary {
    let last = out
        .lines()
        .rev()
        .find(|l| l.contains(" in ") && (l.contains("passed") || l.contains("failed")))
        .unwrap_or_else(|| panic!("no pytest summary line in:\n{out}"));
    let mut counts = BTreeMap::new();
    for part in last.trim_matches(|c| c == '=' || c == ' ').split(", ") {
        let part = part.split(" in ").next().unwrap();
        let mut words = part.split_whitespace();
        if let (Some(n), Some(what)) = (words.next(), words.next()) {
            if let Ok(n) = n.parse::<u64>() {
                counts.insert(what.trim_end_matches('s').to_string(), n);
            }
        }
    }
    let mut not_passed: Vec<String> = out
        .lines()
        .filter(|l| {
            ["FAILED ", "ERROR ", "SKIPPED ", "XFAIL ", "XPASS "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(str::to_string)
        .collect();
    not_passed.sort();
    Summary { counts, not_passed }
}

fn args(modules: &[&str]) -> Vec<String> {
    let site = venv().join("lib/python3.11/site-packages");
    let mut a: Vec<String> = [
        "-q",
        "-p",
        "no:cacheprovider",
        "--capture=sys",
        "-rfEsxX",
        "--color=no",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Node ids are relative to the rootdir: make it site-packages for every run.
    a.push("--rootdir".into());
    a.push(site.to_string_lossy().into_owned());
    for d in DESELECTED {
        a.push("--deselect".into());
        a.push(d.to_string());
    }
    a.extend(
        modules
            .iter()
            .map(|m| site.join(m).to_string_lossy().into_owned()),
    );
    a
}

#[test]
fn numpy_tests_in_two_interpreters_match_a_plain_process() {
    let full = std::env::var_os("MULTIPY_FULL").is_some();
    let modules = if full { FULL_MODULES } else { CI_MODULES };
    let args = args(modules);
    let t = std::time::Instant::now();
    let plain = Command::new(venv().join("bin/python"))
        .args(["-m", "pytest"])
        .args(&args)
        // The interpreters' OpenBLAS policy (one BLAS thread), for the same conditions.
        .env("OPENBLAS_NUM_THREADS", "1")
        .output()
        .unwrap();
    let plain_out = String::from_utf8_lossy(&plain.stdout).into_owned();
    let plain_secs = t.elapsed().as_secs_f64();
    let want = summarize(&plain_out);
    assert_eq!(
        want.counts.get("deselected").copied().unwrap_or(0),
        DESELECTED
            .iter()
            .filter(|d| modules
                .iter()
                .any(|m| d.starts_with(m.split("::").next().unwrap())))
            .count() as u64,
        "the memory-hungry tests are deselected: {plain_out}"
    );
    assert!(
        want.counts["passed"] > if full { 20_000 } else { 1_500 },
        "{want:?}"
    );

    let (a, b) = (interp(), interp());
    let t = std::time::Instant::now();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let outs: Vec<(String, i32)> = std::thread::scope(|s| {
        let hs: Vec<_> = [&a, &b]
            .into_iter()
            .map(|i| {
                let argv = argv.clone();
                s.spawn(move || match i.run_module("pytest", &argv) {
                    Err(integration_tests::multipy::Error::SystemExit { code, output, .. }) => {
                        (output.stdout, code)
                    }
                    other => panic!("pytest ends with SystemExit: {other:?}"),
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let both_secs = t.elapsed().as_secs_f64();
    eprintln!(
        "numpy suite ({} modules): plain process {plain_secs:.1} s; two interpreters at once {both_secs:.1} s",
        modules.len()
    );
    for (k, (out, code)) in outs.iter().enumerate() {
        let mut got = summarize(out);
        for e in excuse(&mut got, &want) {
            eprintln!("interpreter {k}: known process-wide difference: {e}");
        }
        eprintln!(
            "interpreter {k}: {:?} (exit {code}); plain: {:?}",
            got.counts, want.counts
        );
        let only_here: Vec<&String> = got
            .not_passed
            .iter()
            .filter(|l| !want.not_passed.contains(l))
            .collect();
        let only_plain: Vec<&String> = want
            .not_passed
            .iter()
            .filter(|l| !got.not_passed.contains(l))
            .collect();
        assert_eq!(
            got, want,
            "interpreter {k} differs from the plain run: only in the interpreter {only_here:#?}, only in the plain run {only_plain:#?}"
        );
        // After the comparison, which names the tests that differ.
        assert_eq!(
            *code,
            plain.status.code().unwrap(),
            "interpreter {k}: pytest's exit status"
        );
    }
}
