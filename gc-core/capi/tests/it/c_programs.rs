//! C programs built with `cc` against the installed headers and the crate's shared
//! library (`libgc_core.so`, `artifact/`'s cdylib, built for the test), run as child
//! processes (a C client is a process of its own: the default heap is process-global). With `GC_CORE_VALGRIND=1` (set by `cargo xtask test`) they also
//! run under valgrind, which must report no error.

use std::path::PathBuf;
use std::process::Command;
use test_support::{cdylib_dir, run_ok, valgrind, valgrind_requested, CProgram};

fn build(source: &str, name: &str) -> PathBuf {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let lib = cdylib_dir(
        concat!(env!("CARGO_MANIFEST_DIR"), "/artifact"),
        env!("CARGO_TARGET_TMPDIR"),
    );
    CProgram::new(
        crate_dir.join(source),
        std::env::temp_dir().join(format!("gc-core-{name}-{}", std::process::id())),
    )
    .flags(&["-D_GNU_SOURCE"])
    .include(crate_dir.join("../include"))
    .link(lib, "gc_core")
    .build()
}

/// Builds `source` and runs it with `arg`, under valgrind when `valgrind` (which must
/// then report no error); the program prints ", ok" on success.
fn check_program(source: &str, name: &str, arg: &str, under_valgrind: bool) {
    if under_valgrind && !valgrind_requested("GC_CORE_VALGRIND") {
        return;
    }
    let exe = build(source, name);
    let out = if under_valgrind {
        run_ok(valgrind(&[]).arg(&exe).arg(arg))
    } else {
        run_ok(Command::new(&exe).arg(arg))
    };
    let _ = std::fs::remove_file(&exe);
    assert!(out.contains(", ok") || out.contains(": ok"), "{out}");
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

/// Handle misuse (double delete, stale, wrong-kind, NULL and non-handle pointers) is an
/// error with a message, never undefined behaviour.
#[test]
fn handle_misuse_program_passes() {
    check_program("tests/c/handles.c", "handles", "", false);
}

#[test]
fn handle_misuse_program_is_valgrind_clean() {
    check_program("tests/c/handles.c", "handles-vg", "", true);
}
