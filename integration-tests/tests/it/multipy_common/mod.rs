//! Helpers shared by the multipy tests: the project's virtual environment and the
//! process facts the unload tests compare.
#![allow(dead_code)]

use integration_tests::multipy::{Config, Interpreter};
use std::path::PathBuf;

/// The virtual environment with the pinned numpy (`cargo xtask test` makes it):
/// `$MULTIPY_VENV`, else `.venv` at the workspace root.
pub fn venv() -> PathBuf {
    let v = std::env::var_os("MULTIPY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv"));
    assert!(
        v.join("bin/python").exists(),
        "{} has no bin/python: run `cargo xtask test` once (it makes the numpy venv), \
         or set MULTIPY_VENV",
        v.display()
    );
    v.canonicalize().unwrap()
}

/// An interpreter on the venv.
pub fn interp() -> Interpreter {
    Interpreter::new(Config::new().venv(venv())).expect("interpreter starts")
}

/// The file-backed lines of `/proc/self/maps` (anonymous memory is the allocators').
pub fn maps() -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| !l.contains('[') && l.split_whitespace().count() >= 6)
        .map(str::to_string)
        .collect()
}
