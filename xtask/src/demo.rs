//! `cargo xtask demo`: the end-to-end scenarios, each run for real or reported as absent,
//! then each crate's own example (the building blocks the scenarios compose).

use crate::steps::cargo;
use anyhow::{bail, Result};

/// One end-to-end scenario (ARCHITECTURE.md, integration-tests) and whether it exists yet.
struct Scenario {
    name: &'static str,
    what: &'static str,
    /// Runs the scenario; `None` while it has not been built.
    run: Option<fn() -> Result<String>>,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "gap",
        what: "a GAP-like C kernel whose allocator and collector are gc-core + gc-conservative",
        run: Some(crate::demo_gap::run),
    },
    Scenario {
        name: "gap-real",
        what: "GAP 4.15.1 (julia_gc.c unmodified, a Julia 1.10 client marking in parallel) on gc-core + gc-conservative through the Julia-compatibility prefix",
        run: Some(crate::demo_gap_real::run),
    },
    Scenario {
        name: "numpy",
        what: "several CPython 3.11 interpreters in one process, each a libpython copy loaded by elf-loader, running numpy",
        run: Some(crate::demo_multipy::run),
    },
    Scenario {
        name: "interpool",
        what: "concurrent.futures.InterpreterPoolExecutor in a python process: worker interpreters of that process, numpy arrays shared without copies",
        run: Some(crate::demo_interpool::run),
    },
    Scenario {
        name: "c-extension",
        what: "a C extension in CPython's C-API style on refbridge, loaded by elf-loader, living on gc-core, next to the same source on CPython 3.11",
        run: Some(crate::demo_cext::run),
    },
];

/// Each crate's example: (package, example, what it shows).
const EXAMPLES: &[(&str, &str, &str)] = &[
    ("gc-core", "tour", "a foreign type with mark and sweep functions, a precise type, roots, callbacks, collections"),
    ("gc-core", "weak", "weak references, a resurrecting finalizer, the reference queue, a weak-processing hook"),
    ("gc-conservative", "scan", "an object kept only by a local variable, interior pointers, the big-object index"),
    ("gil", "handoff", "GIL handoff, switch requests, a blocking region, a safepoint action"),
    ("elf-loader", "two_pythons", "two copies of the machine's libpython3.11 in one process, each initialised"),
    ("frame-hooks", "profile", "a profiler written as a PEP 523 eval-frame hook, run on a script in the machine's CPython"),
];

/// Runs every scenario that exists and every crate example, and prints a summary.
pub fn run() -> Result<()> {
    let mut summary = Vec::new();
    let mut failed = 0;
    for scenario in SCENARIOS {
        println!("\n==> demo: scenario {} ({})", scenario.name, scenario.what);
        let line = match scenario.run {
            None => "not built yet: nothing to run".to_string(),
            Some(run) => match run() {
                Ok(result) => format!("ok: {result}"),
                Err(err) => {
                    failed += 1;
                    format!("FAILED: {err:#}")
                }
            },
        };
        println!("    {line}");
        summary.push((format!("scenario {}", scenario.name), line));
    }
    for (package, example, what) in EXAMPLES {
        println!("\n==> demo: {package} example `{example}` ({what})");
        let mut cmd = cargo();
        cmd.args([
            "run",
            "--quiet",
            "--release",
            "-p",
            package,
            "--example",
            example,
        ]);
        let line = match cmd.status() {
            Ok(s) if s.success() => "ok".to_string(),
            Ok(s) => {
                failed += 1;
                format!("FAILED ({s})")
            }
            Err(e) => {
                failed += 1;
                format!("FAILED to start: {e}")
            }
        };
        summary.push((format!("{package} example {example}"), line));
    }
    println!("\nSummary");
    for (name, line) in &summary {
        println!("  {name:<34} {line}");
    }
    let built = SCENARIOS.iter().filter(|s| s.run.is_some()).count();
    println!(
        "\n{built} of {} end-to-end scenarios exist; {} crate examples ran; {failed} failed.",
        SCENARIOS.len(),
        EXAMPLES.len()
    );
    if failed > 0 {
        bail!("{failed} demo(s) failed");
    }
    Ok(())
}
