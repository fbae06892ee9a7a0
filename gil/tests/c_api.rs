//! Builds `tests/c/gil_prog.c` with `cc` against `include/gil.h`, links it with the
//! crate's cdylib (`libgil.so`) and runs it; then runs it again under valgrind
//! (required when `GIL_VALGRIND=1`, as `cargo xtask test` sets; otherwise when found).

use std::path::{Path, PathBuf};
use std::process::Command;

fn lib_dir() -> PathBuf {
    // target/<profile>/deps/c_api-HASH -> target/<profile>
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    assert!(
        dir.join("libgil.so").exists(),
        "libgil.so not found in {} (the gil crate builds it as a cdylib)",
        dir.display()
    );
    dir.to_path_buf()
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
