//! C programs against the headers and `libgc_conservative.so` (the `artifact/` crate's
//! cdylib, built for the test; it carries gc-core's C ABI too), each run as a child
//! process (the default heap is process-global): conservative scanning of a local
//! variable, of a callee-saved register and of two threads' stacks (each with scanning
//! on, and off so that the test can fail), lookups of dead objects on pages waiting for
//! their lazy sweep (`unswept`), misuse of the compat API (`misuse.c`), and GCBench with
//! no precise roots at all under the collect-every-N stress mode. With
//! `GC_CONSERVATIVE_VALGRIND=1` (set by `cargo xtask test`) GCBench also runs under
//! valgrind, which must report no error.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use test_support::{cdylib_dir, run_ok as run, valgrind, valgrind_requested, CProgram};

/// gc-conservative's folder (the header's) and the workspace's.
fn dirs() -> (PathBuf, PathBuf) {
    let capi = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crate_dir = capi.parent().unwrap().to_path_buf();
    let workspace = crate_dir.parent().unwrap().to_path_buf();
    (crate_dir, workspace)
}

/// `libgc_conservative.so`'s folder (the `artifact/` crate's cdylib, built for the test).
fn lib_dir() -> PathBuf {
    cdylib_dir(
        concat!(env!("CARGO_MANIFEST_DIR"), "/artifact"),
        env!("CARGO_TARGET_TMPDIR"),
    )
}

fn build(source: &str, name: &str) -> PathBuf {
    let (crate_dir, workspace) = dirs();
    CProgram::new(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(source),
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(name),
    )
    .include(workspace.join("gc-core").join("include"))
    .include(crate_dir.join("include"))
    .link(lib_dir(), "gc_conservative")
    .build()
}

fn build_julia(source: &str, name: &str) -> PathBuf {
    let (_, workspace) = dirs();
    let gc_core = workspace.join("gc-core").join("include");
    CProgram::new(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(source),
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(name),
    )
    .include(gc_core.join("julia"))
    .include(gc_core)
    .link(lib_dir(), "gc_conservative")
    .flags(&["-pthread"])
    .build()
}

fn julia_runtime() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| build_julia("tests/c/julia_runtime.c", "julia_runtime"))
}

/// The Julia runtime names of the Julia-compatibility prefix (`julia.h`), used as an
/// unmodified julia-gcext client (GAP) uses them: the globals and type checks, weak
/// references cleared to `jl_nothing`, thread counts, tasks, conservative-support calls.
#[test]
fn julia_runtime_names_work_as_a_julia_client_uses_them() {
    let out = run(Command::new(julia_runtime()).arg("names"));
    assert!(out.contains("names: ok"), "{out}");
}

/// `jl_set_safe_restore`: a faulting read returns to the restore point, again and again
/// (the signal stays unblocked); with no restore point, a fault still kills the process
/// with SIGSEGV (the previous disposition is restored, not swallowed).
#[test]
fn safe_restore_points_catch_faults_and_others_still_kill() {
    let out = run(Command::new(julia_runtime()).arg("restore"));
    assert!(out.contains("restore: ok"), "{out}");
    let status = Command::new(julia_runtime())
        .arg("fault")
        .output()
        .expect("run julia_runtime fault");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.status.signal(),
        Some(SIGSEGV),
        "expected death by SIGSEGV: {status:?}"
    );
    assert!(!String::from_utf8_lossy(&status.stdout).contains("survived"));
}

/// SIGSEGV on Linux.
const SIGSEGV: i32 = 11;

/// A client compiled against the prefix's Julia 1.6 marks on one thread (its mark
/// functions may keep state in globals, as GAP 4.12's do); GC_CORE_MARK_THREADS opts in.
#[test]
fn julia_1_6_clients_mark_on_one_thread_unless_asked() {
    let one = run(Command::new(julia_runtime())
        .arg("threads")
        .env_remove("GC_CORE_MARK_THREADS"));
    assert!(one.contains("gcthreads=0"), "{one}");
    let two = run(Command::new(julia_runtime())
        .arg("threads")
        .env("GC_CORE_MARK_THREADS", "2"));
    assert!(two.contains("gcthreads=1"), "{two}");
}

fn conservative() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| build("tests/c/conservative.c", "conservative"))
}

#[test]
fn object_only_in_a_c_local_survives_with_scanning_and_dies_without() {
    assert!(
        run(Command::new(conservative()).args(["local", "on"])).contains("local on: ok (swept=0)")
    );
    assert!(run(Command::new(conservative()).args(["local", "off"]))
        .contains("local off: ok (swept=1)"));
}

#[test]
fn object_only_in_a_callee_saved_register_survives_with_scanning_and_dies_without() {
    assert!(run(Command::new(conservative()).args(["register", "on"]))
        .contains("register on: ok (swept=0)"));
    assert!(run(Command::new(conservative()).args(["register", "off"]))
        .contains("register off: ok (swept=1)"));
}

#[test]
fn two_threads_hold_objects_on_their_stacks_while_the_other_collects() {
    let out = run(Command::new(conservative()).args(["threads", "on"]));
    assert!(out.contains("threads: ok"), "{out}");
}

/// Dead objects on pages waiting for their lazy sweep are not objects for
/// `jl_gc_internal_obj_base_ptr` and `gc_base_ptr` (they were 8 times in 10 before), live
/// ones next to them are; one collector thread, so that no helper thread sweeps the
/// pages before the program looks.
#[test]
fn dead_objects_on_pages_waiting_for_their_sweep_are_not_found_from_c() {
    let out = run(Command::new(conservative())
        .arg("unswept")
        .env("GC_CORE_MARK_THREADS", "1")
        .env("GC_CORE_LAZY_SWEEP", "1"));
    assert!(out.contains("unswept: ok"), "{out}");
}

#[test]
fn native_api_scan_range_and_conservative_bodies() {
    let out = run(Command::new(conservative()).arg("native"));
    assert!(out.contains("native: ok"), "{out}");
}

/// Misuse a ported C system commits, each found by a user trial (crash, hang or a
/// wrong answer before): allocation inside a GC-safe region, another thread's ptls, the
/// seed's type check on free cells, a GC-safe region inside a root scanner, sweep
/// functions and finalizers on memory that is not an object, and GAP's mark functions
/// passing a saved ptls while marking runs on every collector thread.
#[test]
fn misuse_of_the_compat_api_gets_errors_not_crashes() {
    let exe = build("tests/c/misuse.c", "misuse");
    let out = run(Command::new(&exe).arg("17"));
    for case in [
        "safe-alloc: ok",
        "other-ptls: ok",
        "free-type: ok",
        "scanner-safe: ok",
        "not-object: ok",
        "saved-ptls: ok (262143 nodes)",
        "misuse: all ok",
    ] {
        assert!(out.contains(case), "{case} missing: {out}");
    }
}

fn gcbench() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| build("tests/c/gcbench.c", "gcbench"))
}

#[test]
fn gcbench_with_only_conservative_roots_under_stress_is_correct() {
    // Depths 14/12/12, collecting every 500 allocations: ~1000 collections, each of which
    // must find every live tree node through the C stack alone.
    let out = run(Command::new(gcbench()).args(["14", "12", "12", "500"]));
    assert!(out.contains("result=ok"), "{out}");
    let collections: u64 = out
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("collections="))
        .and_then(|v| v.parse().ok())
        .expect("collections=N in the output");
    assert!(collections > 500, "stress mode should collect often: {out}");
}

#[test]
fn gcbench_under_stress_is_valgrind_clean() {
    if !valgrind_requested("GC_CONSERVATIVE_VALGRIND") {
        return;
    }
    let out = run(valgrind(&[]).arg(gcbench()).args(["12", "11", "10", "300"]));
    assert!(out.contains("result=ok"), "{out}");
}

#[test]
fn misuse_program_is_valgrind_clean() {
    if !valgrind_requested("GC_CONSERVATIVE_VALGRIND") {
        return;
    }
    let exe = build("tests/c/misuse.c", "misuse-vg");
    let out = run(valgrind(&[]).arg(&exe).arg("12"));
    assert!(out.contains("misuse: all ok"), "{out}");
}
