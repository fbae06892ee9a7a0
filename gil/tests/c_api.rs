//! Builds `tests/c/gil_prog.c` with `cc` against `include/gil.h`, links it with the
//! crate's cdylib (`libgil.so`, built for the test) and runs it; then runs it again under valgrind
//! (required when `GIL_VALGRIND=1`, as `cargo xtask test` sets; otherwise when found).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Builds the crate's cdylib and returns the folder holding `libgil.so`. `cargo test`
/// does not build a library's cdylib for its tests, so this asks cargo for it, in a
/// target directory of its own (the outer cargo holds the lock on the main one); cargo
/// keeps it up to date with the sources.
fn lib_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cdylib");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "--lib", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target)
            .env_remove("RUSTFLAGS")
            .status()
            .expect("run cargo to build the gil cdylib");
        assert!(status.success(), "building the gil cdylib failed: {status}");
        let dir = target.join("debug");
        assert!(
            dir.join("libgil.so").exists(),
            "libgil.so not found in {}",
            dir.display()
        );
        dir
    })
    .clone()
}

/// Builds the program as `name` (each test its own file: tests run in parallel).
fn build(name: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let lib = lib_dir();
    let status = Command::new("cc")
        .args([
            "-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1", "-pthread",
        ])
        .arg("-I")
        .arg(manifest.join("include"))
        .arg(manifest.join("tests/c/gil_prog.c"))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lgil")
        .arg("-o")
        .arg(&out)
        .status()
        .expect("run cc (a C compiler is required)");
    assert!(status.success(), "cc failed to build gil_prog.c: {status}");
    out
}

fn run(cmd: &mut Command) -> String {
    let output = cmd.output().expect("start the C program");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "C program failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    stdout
}

#[test]
fn c_program_runs_against_the_header() {
    let prog = build("gil_prog");
    let out = run(&mut Command::new(&prog));
    assert!(out.contains("c-abi: all checks passed"), "{out}");
}

#[test]
fn c_program_is_clean_under_valgrind() {
    let required = std::env::var("GIL_VALGRIND").is_ok_and(|v| v == "1");
    let found = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(!required, "GIL_VALGRIND=1 but valgrind is not installed");
        eprintln!("valgrind not installed: skipped (cargo xtask test requires it)");
        return;
    }
    let prog = build("gil_prog_valgrind");
    let out = run(Command::new("valgrind")
        .args([
            "--quiet",
            "--error-exitcode=99",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            "--fair-sched=yes",
        ])
        .arg(&prog));
    assert!(out.contains("c-abi: all checks passed"), "{out}");
}
