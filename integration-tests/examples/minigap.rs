//! `minigap`: evaluates GAP code on the minigap kernel.
//!
//! ```text
//! cargo run --release -p integration-tests --example minigap -- \
//!     [--threads N] [--gc-stress N] [--gc ours|boehm] [--stats] (-e CODE | FILE)
//! ```
//!
//! Prints what the code prints (with `--threads N`, N interpreter threads each run the
//! whole code; one `Print` call's output is never interleaved with another thread's),
//! GC statistics on stderr with `--stats`; exits non-zero on any error.

use integration_tests::minigap::{format_stats, run_in_threads, Backend, Config, Kernel};
use std::io::Write;
use std::process::ExitCode;

struct Args {
    threads: usize,
    stress: u64,
    backend: Backend,
    stats: bool,
    code: String,
    file: String,
}

const USAGE: &str =
    "usage: minigap [--threads N] [--gc-stress N] [--gc ours|boehm] [--stats] (-e CODE | FILE)";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        threads: 1,
        stress: 0,
        backend: Backend::Ours,
        stats: false,
        code: String::new(),
        file: String::new(),
    };
    let mut it = std::env::args().skip(1);
    let mut source = None;
    let number = |v: Option<String>, what: &str| -> Result<u64, String> {
        let v = v.ok_or_else(|| format!("{what} needs a number\n{USAGE}"))?;
        v.parse()
            .map_err(|_| format!("{what}: '{v}' is not a non-negative integer\n{USAGE}"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--threads" => {
                a.threads = number(it.next(), "--threads")? as usize;
                if a.threads == 0 {
                    return Err(format!("--threads must be at least 1\n{USAGE}"));
                }
            }
            "--gc-stress" => a.stress = number(it.next(), "--gc-stress")?,
            "--gc" => {
                let v = it
                    .next()
                    .ok_or_else(|| format!("--gc needs ours or boehm\n{USAGE}"))?;
                a.backend = Backend::parse(&v).map_err(|e| format!("{e}\n{USAGE}"))?;
            }
            "--stats" => a.stats = true,
            "-e" => {
                let code = it.next().ok_or_else(|| format!("-e needs code\n{USAGE}"))?;
                source = Some((code, "-e".to_string()));
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{USAGE}")),
            path => {
                let code = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {path}: {e}"))?;
                source = Some((code, path.to_string()));
            }
        }
    }
    let (code, file) = source.ok_or_else(|| format!("no code given\n{USAGE}"))?;
    a.code = code;
    a.file = file;
    Ok(a)
}

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        // e.g. RUST_LOG=gc_core=debug: one line per collection (marked, pause, phases)
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let config = Config {
        gc_stress: args.stress,
        ..Config::default()
    };
    let kernel = match Kernel::init(args.backend, &config) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let sink = |bytes: &[u8]| {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(bytes);
        let _ = out.flush();
    };
    let results = run_in_threads(kernel, args.threads, &args.code, &args.file, sink);
    let mut failed = false;
    for (i, r) in results.iter().enumerate() {
        if let Err(e) = r {
            failed = true;
            if args.threads > 1 {
                eprintln!("thread {i}: {e}");
            } else {
                eprintln!("{e}");
            }
        }
    }
    if args.stats {
        eprint!("{}", format_stats(args.backend, &kernel.stats()));
        let hwm = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
            })
            .unwrap_or_else(|| "0".into());
        eprintln!("gc[{}]: peak RSS {hwm} KB", args.backend.name());
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
