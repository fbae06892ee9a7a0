//! The C programs `tests/c/capi_test.c` and `tests/c/misuse.c`, built with `cc` against
//! the header (through `refbridge/include/compat/Python.h`) and `librefbridge.so` (the
//! `artifact/` crate's cdylib), run as a child process.
//! With `REFBRIDGE_VALGRIND=1` (set by `cargo xtask test`) it also runs under valgrind,
//! which must report no error.

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
        std::env::temp_dir().join(format!("refbridge-{name}-{}", std::process::id())),
    )
    .flags(&["-Wno-cast-function-type"])
    .include(crate_dir.join("../include/compat"))
    .link(lib, "refbridge")
    .build()
}

#[test]
fn the_c_program_passes() {
    let exe = build("tests/c/capi_test.c", "capi");
    let out = run_ok(Command::new(&exe).arg("1000"));
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
    if !valgrind_requested("REFBRIDGE_VALGRIND") {
        return;
    }
    let exe = build("tests/c/capi_test.c", "capi-vg");
    let out = run_ok(valgrind(&[]).arg(&exe).arg("300"));
    let _ = std::fs::remove_file(&exe);
    assert!(out.contains("0 failures, ok"), "{out}");
}

/// `tests/c/misuse.c`: misuse that crashed or corrupted the collector before (user
/// trials): a GC object's last reference dropped on a thread with no bridge entered, or
/// while another bridge is entered; NULL, non-GC or overflowing arguments to the GC
/// entry points; a negative `tp_basicsize`; `PyMem_Free` of a `malloc`'d block; a
/// second `PyObject_GC_Del` or `PyMem_Free`, with and without the debug mode.
#[test]
fn misuse_gets_errors_and_the_collector_stays_whole() {
    let exe = build("tests/c/misuse.c", "misuse");
    let out = run_ok(&mut Command::new(&exe));
    let _ = std::fs::remove_file(&exe);
    for case in [
        "foreign-thread: ok",
        "gc-args: ok",
        "other-bridge: ok",
        "negative-size: ok",
        "foreign-free: ok",
        "double-free: ok",
        "debug-double: ok",
        "misuse: all ok",
    ] {
        assert!(out.contains(case), "{case} missing: {out}");
    }
}
