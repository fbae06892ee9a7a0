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

fn build_julia(source: &str, name: &str, flags: &[&str]) -> PathBuf {
    let (_, workspace) = dirs();
    let gc_core = workspace.join("gc-core").join("include");
    let mut all = vec!["-pthread"];
    all.extend_from_slice(flags);
    CProgram::new(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(source),
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(name),
    )
    .include(gc_core.join("julia"))
    .include(gc_core)
    .link(lib_dir(), "gc_conservative")
    .flags(&all)
    .build()
}

fn julia_runtime() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| build_julia("tests/c/julia_runtime.c", "julia_runtime", &[]))
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
/// `jl_n_gcthreads` counts the threads that mark.
#[test]
fn julia_1_6_clients_mark_on_one_thread_unless_asked() {
    let one = run(Command::new(julia_runtime())
        .arg("threads")
        .env_remove("GC_CORE_MARK_THREADS"));
    assert!(one.contains("gcthreads=1"), "{one}");
    let two = run(Command::new(julia_runtime())
        .arg("threads")
        .env("GC_CORE_MARK_THREADS", "2"));
    assert!(two.contains("gcthreads=2"), "{two}");
}

/// `tests/c/julia_versions.c` compiled for a Julia 1.`minor` client (as the prefix's
/// `julia_version.h` says for `--julia-version 1.minor`).
fn julia_versions(minor: u32) -> &'static Path {
    static V6: OnceLock<PathBuf> = OnceLock::new();
    static V10: OnceLock<PathBuf> = OnceLock::new();
    let (cell, flag) = match minor {
        6 => (&V6, "-DGC_COMPAT_JULIA_MINOR=6"),
        10 => (&V10, "-DGC_COMPAT_JULIA_MINOR=10"),
        _ => panic!("the prefix speaks 1.6 and 1.10"),
    };
    cell.get_or_init(|| {
        build_julia(
            "tests/c/julia_versions.c",
            &format!("julia_versions_1_{minor}"),
            &[flag],
        )
    })
}

/// Runs a case of `julia_versions` for 1.`minor` with the environment `env` (the
/// collector's knobs otherwise unset) and returns the value of `key=` in its "ok" line.
fn versions_case(minor: u32, case: &str, env: &[(&str, &str)], key: &str) -> String {
    let mut cmd = Command::new(julia_versions(minor));
    cmd.arg(case)
        .env_remove("GC_CORE_MARK_THREADS")
        .env_remove("GC_CORE_PARALLEL_THRESHOLD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd);
    assert!(out.contains(&format!("{case}: ok")), "{out}");
    out.split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key}= missing: {out}"))
        .to_string()
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `jl_init` tells the runtime which Julia the client is written for: a 1.6 client marks
/// on one thread, a 1.10 client on one thread per core (at least 2 on a 2-core machine),
/// `jl_n_gcthreads` says how many, and `jl_ver_string` answers the version.
#[test]
fn julia_clients_mark_on_the_threads_of_their_version() {
    assert_eq!(versions_case(6, "threads", &[], "version"), "1.6.0-gccore");
    assert_eq!(versions_case(6, "threads", &[], "gcthreads"), "1");
    assert_eq!(
        versions_case(10, "threads", &[], "version"),
        "1.10.0-gccore"
    );
    assert_eq!(
        versions_case(10, "threads", &[], "gcthreads"),
        cores().to_string()
    );
    let three = [("GC_CORE_MARK_THREADS", "3")];
    assert_eq!(versions_case(10, "threads", &three, "gcthreads"), "3");
    assert_eq!(versions_case(6, "threads", &three, "gcthreads"), "3");
}

/// Mark functions get the `ptls` of the thread that runs them (the one
/// `jl_get_ptls_states()` returns there), on as many threads as `jl_n_gcthreads` says:
/// one for a 1.6 client by default, two or more for a 1.10 client (and for a 1.6 client
/// that opts in).
#[test]
fn mark_functions_get_the_ptls_of_the_thread_that_marks() {
    let now = [("GC_CORE_PARALLEL_THRESHOLD", "0")];
    assert_eq!(versions_case(6, "ptls", &now, "marked_by"), "1");
    let two = [
        ("GC_CORE_PARALLEL_THRESHOLD", "0"),
        ("GC_CORE_MARK_THREADS", "2"),
    ];
    assert_eq!(versions_case(6, "ptls", &two, "marked_by"), "2");
    assert_eq!(versions_case(10, "ptls", &two, "marked_by"), "2");
    let by: usize = versions_case(10, "ptls", &now, "marked_by")
        .parse()
        .unwrap();
    assert_eq!(
        by >= 2,
        cores() >= 2,
        "a 1.10 client marks in parallel by default"
    );
}

/// The task scanner: a 1.6 client's runs on the collecting thread, once per task, with
/// "full collection" as second argument (also when it opts into parallel marking); a
/// 1.10 client's runs as Julia 1.10 runs it, as mark work on whichever thread marks the
/// task, several at once (its table guarded by a mutex because `jl_n_gcthreads > 1`),
/// with "the root task of its thread" as second argument and the marking thread's own
/// `ptls` from `jl_get_ptls_states()`. Both see a task as young (`bits.gc & 2` clear)
/// and keep what only tasks hold.
#[test]
fn task_scanners_run_as_the_clients_julia_ran_them() {
    let two = [
        ("GC_CORE_PARALLEL_THRESHOLD", "0"),
        ("GC_CORE_MARK_THREADS", "2"),
    ];
    assert_eq!(versions_case(6, "tasks", &[], "scanner_threads"), "1");
    assert_eq!(versions_case(6, "tasks", &two, "scanner_threads"), "1");
    assert_eq!(versions_case(6, "tasks", &two, "at_once"), "1");
    assert_eq!(versions_case(10, "tasks", &two, "scanner_threads"), "2");
    assert_eq!(versions_case(10, "tasks", &two, "at_once"), "2");
    let one = [("GC_CORE_MARK_THREADS", "1")];
    assert_eq!(versions_case(10, "tasks", &one, "at_once"), "1");
}

/// `jl_active_task_stack` of another thread's task (stopped in a GC-safe region): a 1.6
/// client gets the part in use from its saved stack pointer; a 1.10 client the whole
/// stack, as Julia 1.10 reports a task's stack buffer (GAP 4.15 skips its first 32 KiB
/// as Julia's guard pages, which from the saved stack pointer would skip live frames).
#[test]
fn other_tasks_stacks_are_reported_as_the_clients_julia_did() {
    assert_eq!(versions_case(6, "stack", &[], "other"), "from-sp");
    assert_eq!(versions_case(10, "stack", &[], "other"), "whole");
}

/// `jl_astaggedvalue(v)->bits.gc`: Julia's bits for a 1.10 client (young 0, old 3,
/// remembered 1 between collections; unmarked/marked while marking, old counted marked
/// in partial collections), 0 throughout for a 1.6 client.
#[test]
fn gc_bits_are_julias_for_1_10_clients_and_young_for_1_6() {
    for minor in [6, 10] {
        let mut cmd = Command::new(julia_versions(minor));
        cmd.arg("bits").env("GC_CORE_MARK_THREADS", "2");
        let out = run(&mut cmd);
        assert!(out.contains("bits: ok"), "1.{minor}: {out}");
    }
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
/// ones next to them are; one collector thread and no sweep thread, so that no helper
/// thread sweeps the pages before the program looks (a sweep helper beside one mark
/// thread, the default since `HeapConfig::sweep_threads`, made this fail now and then).
#[test]
fn dead_objects_on_pages_waiting_for_their_sweep_are_not_found_from_c() {
    let out = run(Command::new(conservative())
        .arg("unswept")
        .env("GC_CORE_MARK_THREADS", "1")
        .env("GC_CORE_SWEEP_THREADS", "0")
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
        "stale-heap: ok",
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
