//! C programs built with `cc` against the installed headers and the crate's shared
//! library, run as child processes (a C client is a process of its own: the default heap
//! is process-global). With `GC_CORE_VALGRIND=1` (set by `cargo xtask test`) they also
//! run under valgrind, which must report no error.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding `libgc_core.so` for this test build (target/<profile>).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
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

#[test]
fn seed_style_gcext_program_passes() {
    let exe = build("tests/c/gcext.c", "gcext");
    let out = run(Command::new(&exe).arg("40000"));
    let _ = std::fs::remove_file(&exe);
    assert!(out.contains(", ok"), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
}

#[test]
fn seed_style_gcext_program_is_valgrind_clean() {
    if std::env::var_os("GC_CORE_VALGRIND").is_none() {
        eprintln!("skipped: set GC_CORE_VALGRIND=1 (cargo xtask test does) to run under valgrind");
        return;
    }
    let exe = build("tests/c/gcext.c", "gcext-vg");
    let out = run(Command::new("valgrind")
        .args(["--error-exitcode=99", "--quiet", "--track-origins=no"])
        .arg(&exe)
        .arg("20000"));
    let _ = std::fs::remove_file(&exe);
    assert!(out.contains(", ok"), "{out}");
}
