//! `cargo xtask bench [SUITE]`: benchmark suites with their peers measured in the same
//! run. Each suite writes `target/bench/SUITE.json` (a flat object of named numbers) and
//! prints a table with ratios to the peer.

mod executor;
mod frame_hooks;
mod gap;
mod gap_real;
mod gc;
mod gil;
mod interp_speed;
mod loader;
mod multipy;
mod refbridge;
mod report;

use anyhow::{bail, Result};

pub(crate) use gap_real::Options as GapRealOptions;

pub(crate) use gc::ensure_boehm;
pub(crate) use interp_speed::find_python;

/// A benchmark suite: a name for the command line and the function that runs it.
struct Suite {
    name: &'static str,
    what: &'static str,
    run: fn() -> Result<()>,
}

/// Every suite that exists. Suites are added as the crates they measure are built.
const SUITES: &[Suite] = &[
    Suite {
        name: "gc",
        what: "GCBench in C vs Boehm GC (conservative and precise roots), allocation, the seed's micro-benchmarks",
        run: gc::run_gc,
    },
    Suite {
        name: "conservative",
        what: "interior-pointer lookup vs Boehm's GC_base, conservative scan throughput",
        run: gc::run_conservative,
    },Suite {
    name: "gil",
    what: "GIL handoff, I/O latency next to a CPU-bound thread, time-to-safepoint; vs CPython 3.11 and parking_lot",
    run: gil::run,
},
Suite {
    name: "gap",
    what: "the minigap kernel on our GC vs on Boehm GC: group orders, factorial sum, array benchmark (total, GC time, max pause, peak RSS)",
    run: gap::run,
},
Suite {
    name: "gap-real",
    what: "GAP 4.12.1's and 4.15.1's real kernels on our GC (one and two mark threads) vs on GASMAN, same source and flags: testinstall, computational workloads and a 1.5 GB live heap (total, collector / mutator / lazy sweep, max pause, peak RSS)",
    run: gap_real::run,
},
Suite {
    name: "loader",
    what: "elf-loader vs dlopen/dlmopen: load time, symbol lookup, memory per copy, copies, TLS",
    run: loader::run_suite,
},
Suite {
    name: "multipy",
    what: "many CPython interpreters in one process (numpy) vs one interpreter, multiprocessing, 3.12 sub-interpreters, python processes; fib and numpy in parallel on 3.12 and 3.13 too",
    run: multipy::run,
},
Suite {
    name: "interp-speed",
    what: "Python workloads (pyperformance-style bodies, issue 25's; then pyperformance 1.11.0's own benchmark files, pinned) in one multipy interpreter vs a python process, CPython 3.10-3.13",
    run: interp_speed::run,
},
Suite {
    name: "frame-hooks",
    what: "PEP 523 hooks on CPython: default vs Rust and C pass-through vs the Rust profiler vs cProfile vs sys.setprofile; code-extra lookups",
    run: frame_hooks::run,
},
Suite {
    name: "executor",
    what: "interpool's InterpreterPoolExecutor vs ProcessPoolExecutor and ThreadPoolExecutor: round trip, a 200 MB array, CPU-bound tasks on 2 workers, 8 and 16 workers with numpy/scipy/pandas (start-up, memory)",
    run: executor::run,
},
Suite {
    name: "refbridge",
    what: "Py_INCREF/Py_DECREF in C, to_native/to_managed, stub memory, native and cross-boundary cycle collection; vs CPython 3.11 (and GraalPy's stub size)",
    run: refbridge::run,
}];

/// Runs the named suite, or all of them.
pub fn run(only: Option<&str>, python: &[String], gap_real: GapRealOptions) -> Result<()> {
    let gap_real_set = !gap_real.versions.is_empty() || gap_real.rounds.is_some() || gap_real.quick;
    if gap_real_set && only != Some("gap-real") {
        bail!("--gap, --rounds and --quick apply to the gap-real suite only");
    }
    gap_real::set_options(gap_real);
    if !python.is_empty() {
        if only.is_some_and(|name| name != "multipy") {
            bail!("--python applies to the multipy suite only");
        }
        multipy::set_versions(python)?;
    }
    if let Some(name) = only {
        let Some(suite) = SUITES.iter().find(|s| s.name == name) else {
            let known: Vec<&str> = SUITES.iter().map(|s| s.name).collect();
            if known.is_empty() {
                bail!("no benchmark suite named '{name}': no suites exist yet");
            }
            bail!(
                "no benchmark suite named '{name}'; known suites: {}",
                known.join(", ")
            );
        };
        return run_suite(suite);
    }
    if SUITES.is_empty() {
        println!("bench: no benchmark suites exist yet; nothing to run.");
        return Ok(());
    }
    for suite in SUITES {
        run_suite(suite)?;
    }
    Ok(())
}

fn run_suite(suite: &Suite) -> Result<()> {
    println!("\n==> bench: {} ({})", suite.name, suite.what);
    (suite.run)()
}
