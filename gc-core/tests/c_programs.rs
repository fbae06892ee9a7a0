//! C programs built with `cc` against the installed headers and the crate's shared
//! library, run as child processes (a C client is a process of its own: the default heap
//! is process-global). With `GC_CORE_VALGRIND=1` (set by `cargo xtask test`) they also
//! run under valgrind, which must report no error.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Builds the crate's cdylib and returns the folder holding `libgc_core.so`. `cargo test`
/// builds only the rlib for tests, so this asks cargo for the shared library, in a
/// target directory of its own (the outer cargo may hold the lock on the main one);
/// cargo keeps it up to date with the sources.
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
            .expect("run cargo to build the gc-core cdylib");
        assert!(
            status.success(),
            "building the gc-core cdylib failed: {status}"
        );
        target.join("debug")
    })
    .clone()
}

fn build(source: &str, name: &str) -> PathBuf {
    let dir = lib_dir();
    assert!(
        dir.join("libgc_core.so").exists(),
        "libgc_core.so not built in {}",
        dir.display()
    );
    let out = std::env::temp_dir().join(format!("gc-core-{name}-{}", std::process::id()));
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-std=c11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-D_GNU_SOURCE",
            "-pthread",
        ])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join(source))
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(&dir)
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-lgc_core")
        .status()
        .expect("a C compiler (cc) is installed");
    assert!(status.success(), "compiling {source} failed");
    out
}

fn run(cmd: &mut Command) -> String {
    // cargo's LD_LIBRARY_PATH holds target/debug, where `cargo build` may have left an
    // older libgc_core.so; it would win over the program's RUNPATH.
    cmd.env_remove("LD_LIBRARY_PATH");
    let out = cmd.output().expect("program runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout + &stderr
}

/// Builds `source` and runs it with `arg`, under valgrind when `valgrind` (which must
/// then report no error); the program prints ", ok" on success.
fn check_program(source: &str, name: &str, arg: &str, valgrind: bool) {
    if valgrind && std::env::var_os("GC_CORE_VALGRIND").is_none() {
        eprintln!("skipped: set GC_CORE_VALGRIND=1 (cargo xtask test does) to run under valgrind");
        return;
    }
    let exe = build(source, name);
    let out = if valgrind {
        run(Command::new("valgrind")
            .args(["--error-exitcode=99", "--quiet", "--track-origins=no"])
            .arg(&exe)
            .arg(arg))
    } else {
        run(Command::new(&exe).arg(arg))
    };
    let _ = std::fs::remove_file(&exe);
    assert!(out.contains(", ok"), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
}

#[test]
fn seed_style_gcext_program_passes() {
    check_program("tests/c/gcext.c", "gcext", "40000", false);
}

#[test]
fn seed_style_gcext_program_is_valgrind_clean() {
    check_program("tests/c/gcext.c", "gcext-vg", "20000", true);
}

#[test]
fn weak_references_and_finalizers_program_passes() {
    check_program("tests/c/weakfin.c", "weakfin", "20", false);
}

#[test]
fn weak_references_and_finalizers_program_is_valgrind_clean() {
    check_program("tests/c/weakfin.c", "weakfin-vg", "5", true);
}
