//! CPython's own stdlib tests (`python -m test`, regrtest) in two interpreters at once,
//! compared with a plain `python3.11 -m test` of the same modules: the totals (tests
//! run, failures, skips) and the names of failing tests must be equal.
//!
//! Each interpreter runs regrtest on its own main thread (as a process would) with a
//! `--tempdir` of its own. Two adaptations, both for process-wide state, applied in each
//! interpreter before regrtest starts:
//! - `os.getpid()` is the same in every interpreter, so `test.support.os_helper.TESTFN`
//!   (the scratch file, `@test_<pid>_tmp` in the current directory) would be the same
//!   file in both runs: it is made an absolute path in a directory of that interpreter;
//! - the current directory is process-wide: regrtest `chdir`s into a work directory
//!   and back (`os_helper.temp_cwd`), and interleaved in two interpreters each restores
//!   the other's directory, which the other then deletes. `temp_cwd` is replaced by a
//!   context manager that stays in the current directory;
//! - child processes and `wait` are process-wide: after every test regrtest calls
//!   `support.reap_children()`, which reaps *any* finished child (`waitpid(-1,
//!   WNOHANG)`), so one interpreter's regrtest reaped the child the other interpreter's
//!   test (`test_is_alive_after_fork`) was about to wait for (ECHILD). It is made a
//!   no-op (it only reaps zombies and warns).
//!
//! The plain run is unchanged.

use integration_tests::multipy::{Config, Error, Interpreter};
use std::collections::BTreeSet;
use std::process::Command;

const MODULES: &[&str] = &[
    "test_json",
    "test_threading",
    "test_decimal",
    "test_sqlite3",
    "test_ctypes",
    "test_math",
    "test_re",
];

/// Tests whose outcome depends on the process-wide SIGINT disposition, so on timing
/// between the two interpreters. `_thread.interrupt_main()` "does nothing" when SIGINT
/// is not handled by that copy of Python, and these tests expect a KeyboardInterrupt:
/// they usually fail in the interpreters without Python's signal handlers (all but
/// interpreter 0: dispositions are process-wide, so only one installs them), but pass
/// there when the other interpreter's concurrent tests have just set a Python handler
/// for SIGINT (seen in CI); either way is accepted, in either interpreter, and every
/// other result must equal the plain run's.
const NEED_SIGNAL_HANDLERS: &[&str] = &[
    "test_interrupt_main_mainthread (test.test_threading.InterruptMainTests.",
    "test_interrupt_main_subthread (test.test_threading.InterruptMainTests.",
    "test_interrupt_main_noerror (test.test_threading.InterruptMainTests.",
];

/// The adaptations described above, run in each interpreter before regrtest (`DIR` is
/// the interpreter's own directory).
const PREPARE: &str = r#"
import contextlib, os
from test import support
from test.support import os_helper
old, new = os_helper.TESTFN_ASCII, os.path.join("DIR", "@test_tmp")
for k, v in list(vars(os_helper).items()):
    if k.startswith("TESTFN") and isinstance(v, str) and v.startswith(old):
        setattr(os_helper, k, new + v[len(old):])
    elif k.startswith("TESTFN") and isinstance(v, bytes) and v.startswith(os.fsencode(old)):
        setattr(os_helper, k, os.fsencode(new) + v[len(os.fsencode(old)):])
os_helper.temp_cwd = lambda *a, **k: contextlib.nullcontext(os.getcwd())
support.reap_children = lambda: None
"#;

#[derive(Debug, PartialEq, Eq)]
struct Summary {
    /// (run, failures, skipped) of the "Total tests:" line.
    totals: (u64, u64, u64),
    failing: BTreeSet<String>,
}

fn number(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .map(|v| v.replace(',', "").parse().unwrap())
        .unwrap_or(0)
}

fn summarize(out: &str) -> Summary {
    let line = out
        .lines()
        .find(|l| l.starts_with("Total tests:"))
        .unwrap_or_else(|| panic!("no 'Total tests:' line in:\n{out}"));
    let totals = (
        number(line, "run="),
        number(line, "failures="),
        number(line, "skipped="),
    );
    let failing = out
        .lines()
        .filter(|l| l.starts_with("FAIL: ") || l.starts_with("ERROR: "))
        .map(str::to_string)
        .collect();
    Summary { totals, failing }
}

#[test]
fn stdlib_tests_in_two_interpreters_match_a_plain_process() {
    let base = std::env::temp_dir().join(format!("multipy-regrtest-{}", std::process::id()));
    let plain_dir = base.join("plain");
    std::fs::create_dir_all(&plain_dir).unwrap();
    let python = integration_tests::multipy::PythonInstall::find(&Default::default()).unwrap();
    let t = std::time::Instant::now();
    let plain = Command::new(&python.executable)
        .args(["-m", "test", "-v", "--tempdir"])
        .arg(&plain_dir)
        .args(MODULES)
        .current_dir(&plain_dir)
        .output()
        .unwrap();
    let plain_secs = t.elapsed().as_secs_f64();
    let want = summarize(&String::from_utf8_lossy(&plain.stdout));

    // Interpreter 0 installs CPython's signal handlers (as a plain process does); only
    // one interpreter may.
    let interps: Vec<Interpreter> = (0..2)
        .map(|k| Interpreter::new(Config::new().install_signal_handlers(k == 0)).unwrap())
        .collect();
    let t = std::time::Instant::now();
    let results: Vec<(Summary, i32)> = std::thread::scope(|s| {
        let hs: Vec<_> = interps
            .iter()
            .enumerate()
            .map(|(k, i)| {
                let dir = base.join(format!("interp{k}"));
                std::fs::create_dir_all(&dir).unwrap();
                s.spawn(move || {
                    i.run(&PREPARE.replace("DIR", &dir.to_string_lossy()))
                        .unwrap();
                    let tempdir = dir.to_string_lossy().into_owned();
                    let mut args = vec!["-v", "--tempdir", &tempdir];
                    args.extend(MODULES);
                    match i.run_module_on_main("test", &args) {
                        Err(Error::SystemExit { code, output, .. }) => {
                            (summarize(&output.stdout), code)
                        }
                        other => panic!("regrtest ends with SystemExit: {other:?}"),
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!(
        "stdlib tests: plain process {plain_secs:.1} s, two interpreters at once {:.1} s",
        t.elapsed().as_secs_f64()
    );
    for (k, (got, code)) in results.iter().enumerate() {
        let mut got = Summary {
            totals: got.totals,
            failing: got.failing.clone(),
        };
        eprintln!(
            "interpreter {k}: {:?} (exit {code}); plain: {:?}",
            got.totals, want.totals
        );
        let excused: Vec<String> = got
            .failing
            .iter()
            .filter(|l| {
                NEED_SIGNAL_HANDLERS.iter().any(|p| l.contains(p)) && !want.failing.contains(*l)
            })
            .cloned()
            .collect();
        for l in &excused {
            eprintln!("interpreter {k}: known difference (SIGINT disposition): {l}");
            got.failing.remove(l);
            // regrtest's "failures=" counts FAILs, not ERRORs.
            if l.starts_with("FAIL: ") {
                got.totals.1 -= 1;
            }
        }
        if excused.is_empty() {
            assert_eq!(
                *code,
                plain.status.code().unwrap(),
                "interpreter {k}: exit status"
            );
        }
        assert_eq!(got, want, "interpreter {k} differs from the plain run");
    }
    drop(interps);
    std::fs::remove_dir_all(&base).ok();
}
