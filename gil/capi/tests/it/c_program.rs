//! Builds `tests/c/gil_prog.c` with `cc` against `gil/include/gil.h`, links it with
//! `libgil.so` (the `artifact/` crate's cdylib, built for the test) and runs it; then runs
//! it again under valgrind (required and run when `GIL_VALGRIND=1`, as `cargo xtask test`
//! sets; skipped otherwise).

use std::path::{Path, PathBuf};
use std::process::Command;
use test_support::{cdylib_dir, run_ok, valgrind, valgrind_requested, CProgram};

/// Builds the program as `name` (each test its own file: tests run in parallel).
fn build(name: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = cdylib_dir(
        concat!(env!("CARGO_MANIFEST_DIR"), "/artifact"),
        env!("CARGO_TARGET_TMPDIR"),
    );
    CProgram::new(
        manifest.join("tests/c/gil_prog.c"),
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(name),
    )
    .include(manifest.join("../include"))
    .link(lib, "gil")
    .build()
}

#[test]
fn c_program_runs_against_the_header() {
    let prog = build("gil_prog");
    let out = run_ok(&mut Command::new(&prog));
    assert!(out.contains("c-abi: all checks passed"), "{out}");
}

#[test]
fn c_program_is_clean_under_valgrind() {
    if !valgrind_requested("GIL_VALGRIND") {
        return;
    }
    let prog = build("gil_prog_valgrind");
    let out = run_ok(
        valgrind(&[
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            "--fair-sched=yes",
        ])
        .arg(&prog),
    );
    assert!(out.contains("c-abi: all checks passed"), "{out}");
}
