//! `cargo xtask`: the project's automation.
//!
//! - `cargo xtask test`: everything CI checks, in order, stopping at the first failure.
//! - `cargo xtask demo`: the end-to-end scenarios that exist, with a readable summary.
//! - `cargo xtask bench [SUITE]`: benchmark suites, peers measured in the same run.
//! - `cargo xtask julia-prefix DIR [--julia-version 1.6|1.10]`: a Julia-compatibility
//!   prefix for julia-gcext clients (GAP's `--with-gc=julia` build) over gc-core and
//!   gc-conservative.
//! - `cargo xtask gap-real [--gap 4.12.1|4.15.1] [MODE]`: real GAP built against that
//!   prefix, running its own test files.
//! - `cargo xtask wheel`: the `interpool` Python package's wheels in `target/wheels/`;
//!   `cargo xtask interpool-test`: each in a fresh venv, its pytest suite and CPython's
//!   concurrent.futures tests.
//!
//! It only shells out (to cargo, cc, python, ...); it links none of the workspace crates.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod bench;
mod demo;
mod demo_cext;
mod demo_gap;
mod demo_gap_real;
mod demo_interpool;
mod demo_multipy;
mod gap_real;
mod gap_real_steps;
mod julia_prefix;
mod loader_libs;
mod steps;
mod test;
mod venv;
mod wheel;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Build, test, demo and benchmark the runtime toolkit"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every check CI runs, in order; stops at the first failure.
    Test {
        /// Also the slow, exhaustive comparisons (MULTIPY_FULL=1: numpy's full test
        /// subset in two interpreters vs a plain process).
        #[arg(long)]
        full: bool,
    },
    /// Run the end-to-end scenarios that exist and print a summary.
    Demo,
    /// Run benchmark suites (all of them, or the one named) and write target/bench/SUITE.json.
    Bench {
        /// The suite to run; without it every suite runs.
        suite: Option<String>,
        /// multipy: the CPython versions measured besides 3.11 (always measured), as
        /// `3.12,3.13`; without it every one of 3.12 and 3.13 found on the machine
        /// (`--python 3.11`: 3.11 alone).
        #[arg(long, value_delimiter = ',', value_name = "X.Y,...")]
        python: Vec<String>,
        /// gap-real: the GAP releases measured, as `4.12.1,4.15.1` (default both).
        #[arg(long = "gap", value_delimiter = ',', value_parser = gap_real::GapVersion::parse)]
        gap: Vec<gap_real::GapVersion>,
        /// gap-real: rounds (default 3; with --quick 1).
        #[arg(long)]
        rounds: Option<usize>,
        /// gap-real: the representative testinstall files and the strings and bigheap
        /// workloads only (about 10 minutes for both releases).
        #[arg(long)]
        quick: bool,
    },
    /// Write a Julia-compatibility prefix (bin/julia, include/julia, lib/libjulia.so)
    /// into DIR, for configuring julia-gcext clients against gc-core.
    JuliaPrefix {
        /// Where to write it (created if needed).
        dir: std::path::PathBuf,
        /// The Julia version the prefix speaks (what `julia` answers and
        /// `julia_version.h` says): 1.6 (GAP 4.12's julia_gc.c: marking on one thread)
        /// or 1.10 (GAP 4.13 and later: parallel marking).
        #[arg(long, default_value = "1.6", value_parser = julia_prefix::JuliaVersion::parse)]
        julia_version: julia_prefix::JuliaVersion,
    },
    /// Build the interpool wheels (PyO3 + maturin) into target/wheels/, one per CPython
    /// 3.10-3.13 found (or those named).
    Wheel {
        /// Only these versions, as `3.11,3.13`.
        #[arg(long, value_delimiter = ',', value_name = "X.Y,...")]
        python: Vec<String>,
    },
    /// Build the interpool wheels, install each into a fresh venv, run the package's
    /// pytest suite and CPython's concurrent.futures tests against the executor.
    InterpoolTest {
        /// Only these versions, as `3.11,3.13`.
        #[arg(long, value_delimiter = ',', value_name = "X.Y,...")]
        python: Vec<String>,
        /// Only the quick part of the pytest suite (not the tests marked slow).
        #[arg(long)]
        quick: bool,
    },
    /// Build real GAP against the prefix and run its test files (what `cargo xtask test`
    /// runs as its GAP steps).
    GapReal {
        /// ours (default), stress, verify, parallel (4.12.1: two mark threads opted into,
        /// GAP unmodified) or gasman (GAP's own collector, for comparison).
        #[arg(default_value = "ours")]
        mode: String,
        /// The GAP release: 4.12.1 (a Julia 1.6 client) or 4.15.1 (a Julia 1.10
        /// client, marking in parallel).
        #[arg(long = "gap", default_value = "4.12.1", value_parser = gap_real::GapVersion::parse)]
        version: gap_real::GapVersion,
        /// Every file of the suite instead of the representative part.
        #[arg(long)]
        full: bool,
        /// The test suite: testinstall, or teststandard (all of its files).
        #[arg(long, default_value = "testinstall")]
        suite: String,
        /// Run the files this many times in a row (a fresh GAP each time); fails if any
        /// run fails.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Test { full } => test::run(full),
        Command::Demo => demo::run(),
        Command::Bench {
            suite,
            python,
            gap,
            rounds,
            quick,
        } => bench::run(
            suite.as_deref(),
            &python,
            bench::GapRealOptions {
                versions: gap,
                rounds,
                quick,
            },
        ),
        Command::JuliaPrefix { dir, julia_version } => {
            julia_prefix::make(&dir, julia_version).map(|d| {
                println!(
                    "julia-prefix: {} (Julia {})",
                    d.display(),
                    julia_version.as_str()
                );
                println!(
                    "  configure a julia-gcext client with --with-julia={} (GAP: --with-gc=julia)",
                    d.display()
                );
            })
        }
        Command::GapReal {
            mode,
            version,
            full,
            suite,
            repeat,
        } => gap_real_steps::run(&gap_real_steps::Request {
            version,
            mode,
            full,
            suite,
            repeat,
        }),
        Command::Wheel { python } => wheel::run(&python),
        Command::InterpoolTest { python, quick } => wheel::test(&python, quick),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("\nxtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
