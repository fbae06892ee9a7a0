//! Finding the machine's CPython 3.11, 3.12 and 3.13 (shared builds) for the tests, and
//! running a test case in a child process of the test binary (an interpreter can be
//! initialised once per process).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// A CPython 3.`minor` interpreter with a shared libpython: the program to run, or why
/// there is none.
pub fn python(minor: u32) -> Result<String, String> {
    frame_hooks::cpython::Libpython::find_minor(minor)
        .map(|(python, _)| python)
        .map_err(|e| e.to_string())
}

/// The shared libpython of CPython 3.`minor`, or why there is none.
pub fn libpython(minor: u32) -> Result<PathBuf, String> {
    frame_hooks::cpython::Libpython::find_minor(minor)
        .map(|(_, lib)| lib)
        .map_err(|e| e.to_string())
}

/// Runs `case` in a child process (the test binary's `child` test) against CPython
/// 3.`minor`; returns its combined output, or `None` (with the reason printed) when that
/// version is absent.
pub fn run_child(case: &str, minor: u32) -> Option<String> {
    let lib = match libpython(minor) {
        Ok(p) => p,
        Err(why) => {
            println!("skipped: {why}");
            return None;
        }
    };
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cpython::child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FRAME_HOOKS_CASE", case)
        .env("FRAME_HOOKS_LIBPYTHON", &lib)
        .output()
        .expect("run the test binary as a child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "case {case} on {} failed ({}):\n{text}",
        lib.display(),
        out.status
    );
    assert!(
        text.contains(&format!("case {case} passed")),
        "case {case} did not report success:\n{text}"
    );
    Some(text)
}
