//! `cargo xtask`: the project's automation.
//!
//! - `cargo xtask test`: everything CI checks, in order, stopping at the first failure.
//! - `cargo xtask demo`: the end-to-end scenarios that exist, with a readable summary.
//! - `cargo xtask bench [SUITE]`: benchmark suites, peers measured in the same run.
//!
//! It only shells out (to cargo, cc, python, ...); it links none of the workspace crates.

mod bench;
mod demo;
mod demo_cext;
mod demo_gap;
mod demo_multipy;
mod loader_libs;
mod steps;
mod test;
mod venv;

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
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Test { full } => test::run(full),
        Command::Demo => demo::run(),
        Command::Bench { suite } => bench::run(suite.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("\nxtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
