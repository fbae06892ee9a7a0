//! The C program `tests/c/capi_test.c`, built with `cc` against the header (through
//! `include/compat/Python.h`) and the crate's shared library, run as a child process.
//! With `REFBRIDGE_VALGRIND=1` (set by `cargo xtask test`) it also runs under valgrind,
//! which must report no error.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Builds the crate's cdylib in a target directory of its own (the outer cargo holds the
/// lock on the main one, and a cdylib next to the test build's rlib confuses rustdoc).
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
            .expect("run cargo to build the refbridge cdylib");
        assert!(status.success(), "building the refbridge cdylib failed");
        target.join("debug")
    })
    .clone()
}

fn build(source: &str, name: &str) -> PathBuf {
    let dir = lib_dir();
    let out = std::env::temp_dir().join(format!("refbridge-{name}-{}", std::process::id()));
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-std=c11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-cast-function-type",
        ])
        .arg("-I")
        .arg(crate_dir.join("include/compat"))
        .arg(crate_dir.join(source))
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(&dir)
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-lrefbridge")
        .status()
        .expect("a C compiler (cc) is installed");
    assert!(status.success(), "compiling {source} failed");
    out
}

fn run(cmd: &mut Command) -> String {
    // cargo's LD_LIBRARY_PATH may hold an older librefbridge.so (target/debug/deps):
    // the program must use the one it was linked with (its rpath).
    let out = cmd
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("program runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{text}",
        out.status
    );
    text
}

#[test]
fn the_c_program_passes() {
    let exe = build("tests/c/capi_test.c", "capi");
    let out = run(Command::new(&exe).arg("1000"));
    let _ = std::fs::remove_file(&exe);
    assert!(
        out.contains("capi_test: 1002 pairs, 1001 leaves, 0 failures, ok"),
        "{out}"
    );
    // rb_fini wrote the leak report with where the object was made.
    assert!(out.contains("Leak: native object"), "{out}");
    assert!(
        out.contains("new_pair at "),
        "the C frame that made it: {out}"
    );
}

#[test]
fn the_c_program_is_valgrind_clean() {
    if std::env::var_os("REFBRIDGE_VALGRIND").is_none() {
        eprintln!(
            "skipped: set REFBRIDGE_VALGRIND=1 (cargo xtask test does) to run under valgrind"
        );
        return;
    }
    let exe = build("tests/c/capi_test.c", "capi-vg");
    let out = run(Command::new("valgrind")
        .args(["--error-exitcode=99", "--quiet", "--track-origins=no"])
        .arg(&exe)
        .arg("300"));
    let _ = std::fs::remove_file(&exe);
    assert!(out.contains("0 failures, ok"), "{out}");
}
