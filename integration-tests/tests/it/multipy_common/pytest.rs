//! A pytest run in interpreters compared with the same run in a plain process: counts
//! by outcome (passed, failed, skipped, xfailed, xpassed, errors) and the report line of
//! every test that did not pass must be equal, except for known process-wide tests
//! (a test that reaps any child with `os.wait()`, say), each excused with its reason.
//!
//! pytest options for every run: `--capture=sys` (pytest's default fd capture `dup2`s
//! the process's file descriptors 1 and 2, which two interpreters cannot both do) and
//! `-p no:cacheprovider` (both would write the same `.pytest_cache`).

use integration_tests::multipy::Interpreter;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// A pytest run's result: counts by outcome and the non-passing tests' report lines.
#[derive(Debug, PartialEq, Eq)]
pub struct Summary {
    pub counts: BTreeMap<String, u64>,
    pub not_passed: Vec<String>,
}

impl Summary {
    /// The number of tests with `outcome` ("passed", "failed", "deselected", ...).
    pub fn count(&self, outcome: &str) -> u64 {
        self.counts.get(outcome).copied().unwrap_or(0)
    }
}

/// The summary of pytest's output (run with `-rfEsxX`).
pub fn summarize(out: &str) -> Summary {
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

/// Removes from `got` the lines of known process-wide tests (`(pattern, why)`) that the
/// plain run does not have, counting them as passed as in the plain run; returns what it
/// excused.
pub fn excuse(got: &mut Summary, want: &Summary, known: &[(&str, &str)]) -> Vec<String> {
    let mut excused = Vec::new();
    for (pattern, why) in known {
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

/// pytest's arguments: quiet, no cache, `--capture=sys`, a report line per test that
/// did not pass, node ids relative to `site` (site-packages), `deselected` tests left
/// out, then the test files or node ids `modules` (relative to `site`).
pub fn args(site: &Path, modules: &[&str], deselected: &[&str]) -> Vec<String> {
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
    a.push("--rootdir".into());
    a.push(site.to_string_lossy().into_owned());
    for d in deselected {
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

/// The plain run: `python -m pytest ARGS` in `venv` (one BLAS thread, the interpreters'
/// OpenBLAS policy, for the same conditions). Returns the summary, pytest's exit
/// status and the seconds it took.
pub fn plain(venv: &Path, args: &[String]) -> (Summary, i32, f64) {
    let t = std::time::Instant::now();
    let out = Command::new(venv.join("bin/python"))
        .args(["-m", "pytest"])
        .args(args)
        .env("OPENBLAS_NUM_THREADS", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        summarize(&text),
        out.status.code().unwrap_or(-1),
        t.elapsed().as_secs_f64(),
    )
}

/// The same run in each of `interps` at once (one thread each). Returns each one's
/// output and pytest's exit status, and the seconds it took.
pub fn in_interpreters(interps: &[&Interpreter], args: &[String]) -> (Vec<(String, i32)>, f64) {
    let t = std::time::Instant::now();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let outs = std::thread::scope(|s| {
        let hs: Vec<_> = interps
            .iter()
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
    (outs, t.elapsed().as_secs_f64())
}

/// Asserts that each interpreter's run equals the plain one (after excusing `known`
/// process-wide tests), naming the tests that differ; `what` names the suite.
pub fn assert_same(
    what: &str,
    outs: &[(String, i32)],
    want: &Summary,
    want_code: i32,
    known: &[(&str, &str)],
) {
    for (k, (out, code)) in outs.iter().enumerate() {
        let mut got = summarize(out);
        for e in excuse(&mut got, want, known) {
            eprintln!("{what}, interpreter {k}: known process-wide difference: {e}");
        }
        eprintln!(
            "{what}, interpreter {k}: {:?} (exit {code}); plain: {:?}",
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
        if got != *want {
            // pytest's own account of the tests that failed here (the summary lines
            // above carry no reason when the node id fills the line).
            eprintln!("{what}, interpreter {k}: {}", failures_section(out));
        }
        assert_eq!(
            &got, want,
            "{what}: interpreter {k} differs from the plain run: only in the interpreter \
             {only_here:#?}, only in the plain run {only_plain:#?}"
        );
        // After the comparison, which names the tests that differ.
        assert_eq!(
            *code, want_code,
            "{what}: interpreter {k}: pytest's exit status"
        );
    }
}

/// The tracebacks pytest printed for failures and errors (its `FAILURES` and `ERRORS`
/// sections), at most the last 20,000 characters of them.
fn failures_section(out: &str) -> String {
    let start = ["= FAILURES =", "= ERRORS ="]
        .iter()
        .filter_map(|m| out.find(m))
        .min();
    let Some(start) = start else {
        return "no FAILURES or ERRORS section in pytest's output".into();
    };
    let end = out[start..]
        .find("short test summary info")
        .map_or(out.len(), |e| start + e);
    let section = &out[start..end];
    let keep = section.len().saturating_sub(20_000);
    let cut = (keep..section.len())
        .find(|&i| section.is_char_boundary(i))
        .unwrap_or(section.len());
    section[cut..].to_string()
}

#[test]
fn failures_section_is_pytests_tracebacks_without_the_summary() {
    let out = "..F.\n=================== FAILURES ===================\n______ test_x ______\nE   CalledProcessError: exit status 1\n=========== short test summary info ===========\nFAILED t.py::test_x\n1 failed, 3 passed in 0.10s\n";
    let s = failures_section(out);
    assert!(s.starts_with("= FAILURES ="), "{s}");
    assert!(s.contains("CalledProcessError: exit status 1"), "{s}");
    assert!(!s.contains("FAILED t.py::test_x"), "{s}");
    assert_eq!(
        failures_section("4 passed in 0.10s\n"),
        "no FAILURES or ERRORS section in pytest's output"
    );
    // A long section keeps its end, cut on a character boundary.
    let long = format!("= FAILURES =\n{}\nE   the end\n", "é".repeat(30_000));
    let s = failures_section(&long);
    assert!(s.len() <= 20_000 && s.ends_with("E   the end\n"));
}
