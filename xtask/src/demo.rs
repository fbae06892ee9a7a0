//! `cargo xtask demo`: the end-to-end scenarios, each run for real or reported as absent.

use anyhow::Result;

/// One end-to-end scenario of DESIGN.md and whether it exists yet.
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
        run: None,
    },
    Scenario {
        name: "numpy",
        what: "several CPython 3.11 interpreters in one process, each a libpython copy loaded by elf-loader, running numpy",
        run: None,
    },
    Scenario {
        name: "c-extension",
        what: "a C extension module on refbridge's C API, loaded by elf-loader, living on gc-core",
        run: None,
    },
];

/// Runs every scenario that exists and prints a summary of all of them.
pub fn run() -> Result<()> {
    let mut summary = Vec::new();
    let mut failed = 0;
    for scenario in SCENARIOS {
        println!("\n==> demo: {} ({})", scenario.name, scenario.what);
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
        summary.push((scenario.name, line));
    }
    println!("\nSummary");
    for (name, line) in &summary {
        println!("  {name:<12} {line}");
    }
    let built = SCENARIOS.iter().filter(|s| s.run.is_some()).count();
    println!(
        "\n{built} of {} scenarios exist; {failed} failed.",
        SCENARIOS.len()
    );
    if failed > 0 {
        anyhow::bail!("{failed} scenario(s) failed");
    }
    Ok(())
}
