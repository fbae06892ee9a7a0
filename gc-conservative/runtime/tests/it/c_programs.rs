//! The C program `tests/c/runtime.c` against `gc_runtime.h` and `libgc_runtime.so` (the
//! `artifact/` crate's cdylib, built for the test; it carries gc-core's, gc-conservative's and gil's C ABI too), run as a child
//! process: five threads, one holding an object only in a callee-saved register inside
//! a blocking region, one holding an object only on its stack while it waits for the
//! GIL, one whose object only the registers saved at its `gc_runtime_leave` refer to,
//! one waiting for the GIL inside a poll (GC-safe only through the GIL's hooks), while
//! the fifth collects (with scanning on, and off or filtered so that the test can
//! fail); misuse of every call. With `GC_RUNTIME_VALGRIND=1` (set by
//! `cargo xtask test`) both also run under valgrind, which must report no error.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use test_support::{cdylib_dir, run_ok as run, valgrind, valgrind_requested, CProgram};

fn program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let workspace = crate_dir.parent().unwrap().parent().unwrap();
        let lib = cdylib_dir(
            concat!(env!("CARGO_MANIFEST_DIR"), "/artifact"),
            env!("CARGO_TARGET_TMPDIR"),
        );
        CProgram::new(
            crate_dir.join("tests/c/runtime.c"),
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("runtime"),
        )
        .include(crate_dir.join("include"))
        .include(workspace.join("gc-core/include"))
        .include(workspace.join("gc-conservative/include"))
        .include(workspace.join("gil/include"))
        .link(lib, "gc_runtime")
        .build()
    })
}

#[test]
fn objects_of_blocked_and_waiting_threads_survive_another_threads_collections() {
    let out = run(Command::new(program()).args(["threads", "on"]));
    assert!(out.contains("threads on: ok (swept=0)"), "{out}");
}

#[test]
fn without_scanning_or_with_a_rejecting_filter_the_same_objects_die() {
    let off = run(Command::new(program()).args(["threads", "off"]));
    assert!(off.contains("threads off: ok (swept=4)"), "{off}");
    let reject = run(Command::new(program()).args(["threads", "reject"]));
    assert!(reject.contains("threads reject: ok (swept=4)"), "{reject}");
}

#[test]
fn misuse_gets_error_codes_and_messages() {
    let out = run(Command::new(program()).arg("misuse"));
    assert!(out.contains("misuse: ok"), "{out}");
}

#[test]
fn threads_and_misuse_are_valgrind_clean() {
    if !valgrind_requested("GC_RUNTIME_VALGRIND") {
        return;
    }
    // Fair scheduling: valgrind runs one thread at a time, and with its default lock a
    // thread polling the GIL could keep it for long stretches while the one it waits
    // for starved: "threads on" took 1 to 101 s (the program's alarm is 120 s), with
    // `--fair-sched=yes` 1.1-1.3 s over six runs.
    let out = run(valgrind(&["--fair-sched=yes"])
        .arg(program())
        .args(["threads", "on"]));
    assert!(out.contains("threads on: ok"), "{out}");
    let out = run(valgrind(&[]).arg(program()).arg("misuse"));
    assert!(out.contains("misuse: ok"), "{out}");
}
