//! Finding the machine's CPython 3.11, 3.12 and 3.13 (shared builds) for the tests, and
//! running a test case in a child process of the test binary (an interpreter can be
//! initialised once per process).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// A CPython 3.`minor` interpreter with a shared libpython: the program to run, or why
/// there is none.
pub fn python(minor: u32) -> Result<String, String> {
    let mut why = Vec::new();
    for c in candidates(minor) {
        match frame_hooks::cpython::Libpython::find(&c) {
            Ok(_) => return Ok(c),
            Err(e) => why.push(e.to_string()),
        }
    }
    Err(format!("no shared CPython 3.{minor}: {}", why.join("; ")))
}

/// The shared libpython of CPython 3.`minor`, or why there is none.
pub fn libpython(minor: u32) -> Result<PathBuf, String> {
    python(minor).map(|p| frame_hooks::cpython::Libpython::find(&p).unwrap())
}

fn candidates(minor: u32) -> Vec<String> {
    let mut candidates = vec![format!("python3.{minor}")];
    if let Ok(out) = Command::new("pyenv").arg("root").output() {
        let root = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if let Ok(dir) = std::fs::read_dir(format!("{root}/versions")) {
            let mut found: Vec<_> = dir
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("3.{minor}.")))
                .collect();
            found.sort();
            for v in found.into_iter().rev() {
                candidates.push(format!("{root}/versions/{v}/bin/python3.{minor}"));
            }
        }
    }
    candidates
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
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
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
