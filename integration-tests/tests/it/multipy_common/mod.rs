//! Helpers shared by the multipy tests: the project's virtual environments, the CLI
//! example, the process facts the unload tests compare, and the comparison of a pytest
//! run in interpreters with a plain process's ([`pytest`]).
#![allow(dead_code)]

pub mod pytest;

use integration_tests::multipy::{Config, Interpreter};
use std::path::PathBuf;
use std::process::Command;

/// The `multipy` CLI example, built by cargo in a target directory of its own
/// (`CARGO_TARGET_TMPDIR/own-build`): a `cargo build` of it in the workspace's target
/// directory resolves features for integration-tests alone and could rebuild rlibs that
/// the crates already compiled by `cargo test --workspace` link against (E0460; it did
/// while elf-loader was also a cdylib, whose rlib is unhashed). A no-op when current.
pub fn example() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("own-build");
    BUILT.call_once(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "-p",
                "integration-tests",
                "--example",
                "multipy",
                "--target-dir",
            ])
            .arg(&target)
            .env_remove("RUSTFLAGS")
            .status()
            .unwrap();
        assert!(status.success(), "building the example failed");
    });
    target.join("debug/examples/multipy")
}

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
