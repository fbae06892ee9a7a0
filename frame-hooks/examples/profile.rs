//! `profile`: runs a Python script in this process's CPython under a call-counting
//! profiler written as an eval-frame hook, then prints a table (function, file:line,
//! calls, total and own time) or, with `--json`, a JSON list of
//! `{"function", "file", "line", "calls"}` as the last line of stdout.
//!
//! ```text
//! cargo run -p frame-hooks --example profile -- [--json] [--all] [--python python3.12] script.py [args...]
//! ```
//!
//! The table lists the functions of the script's own file unless `--all` is given; the
//! JSON lists every Python function that ran (from every thread). Without a script it
//! profiles the bundled `tests/scripts/workload.py`.

use frame_hooks::cpython::profiler::Profiler;
use frame_hooks::cpython::{Error, Libpython, Python};
use std::process::ExitCode;
use std::sync::Arc;

struct Args {
    json: bool,
    all: bool,
    python: String,
    script: String,
    rest: Vec<String>,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        json: false,
        all: false,
        python: "python3".into(),
        script: String::new(),
        rest: Vec::new(),
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => a.json = true,
            "--all" => a.all = true,
            "--python" => a.python = it.next().ok_or("--python needs a value")?,
            "-h" | "--help" => {
                return Err(
                    "usage: profile [--json] [--all] [--python PYTHON] script.py [args...]".into(),
                )
            }
            _ => {
                a.script = arg;
                a.rest = it.collect();
                break;
            }
        }
    }
    if a.script.is_empty() {
        // `cargo xtask demo` runs the example without arguments: profile the bundled
        // workload then.
        a.script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scripts/workload.py").into();
        eprintln!(
            "profile: no script given; profiling the bundled {}",
            a.script
        );
    }
    if !std::path::Path::new(&a.script).is_file() {
        return Err(format!("{}: no such script", a.script));
    }
    Ok(a)
}

fn run(a: Args) -> Result<i64, Box<dyn std::error::Error>> {
    // SAFETY: the path is the interpreter's own shared libpython (from its sysconfig).
    let lib = unsafe { Libpython::open(Libpython::find_program(&a.python)?)? };
    lib.initialize()?;
    // SAFETY: dlsym on that library's handle finds that library's symbols.
    let py = unsafe { Python::new(&lib.resolver())? };
    let profiler = Arc::new(Profiler::new(&py, true)?);
    let mut hook = py.install(profiler.clone())?;
    let outcome = py.run_script(&a.script, &a.rest);
    hook.uninstall()?;
    // As `python -m cProfile`: the profile is printed even when the script raised, then
    // the run fails.
    let (exit, failure) = match outcome {
        Ok(code) => (code.unwrap_or(0), None),
        Err(e @ Error::Python(_)) => (1, Some(e)),
        Err(e) => return Err(e.into()),
    };
    let report = |exit: i64| -> Result<i64, Box<dyn std::error::Error>> {
        if let Some(e) = &failure {
            eprintln!("profile: {e}");
        }
        Ok(exit)
    };

    let mut stats = profiler.stats();
    stats.retain(|s| s.calls() > 0);
    if a.json {
        let list: Vec<_> = stats
            .iter()
            .map(|s| {
                serde_json::json!({
                    "function": s.function,
                    "file": s.file,
                    "line": s.line,
                    "calls": s.calls(),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
        return report(exit);
    }
    let script = std::fs::canonicalize(&a.script)?;
    if !a.all {
        stats.retain(|s| std::fs::canonicalize(&s.file).ok().as_ref() == Some(&script));
    }
    stats.sort_by(|x, y| {
        y.calls()
            .cmp(&x.calls())
            .then(x.line.cmp(&y.line))
            .then(x.function.cmp(&y.function))
    });
    let (major, minor, micro) = py.version();
    println!(
        "profile of {} under CPython {major}.{minor}.{micro} (eval-frame hook)",
        a.script
    );
    println!(
        "{:<40} {:<28} {:>9} {:>11} {:>11}",
        "function", "file:line", "calls", "total ms", "own ms"
    );
    for s in &stats {
        let file = std::path::Path::new(&s.file)
            .file_name()
            .map_or(s.file.clone(), |f| f.to_string_lossy().into_owned());
        println!(
            "{:<40} {:<28} {:>9} {:>11.3} {:>11.3}",
            s.function,
            format!("{file}:{}", s.line),
            s.calls(),
            s.total_ns() as f64 / 1e6,
            s.own_ns() as f64 / 1e6
        );
    }
    println!(
        "{} functions, {} calls",
        stats.len(),
        stats.iter().map(|s| s.calls()).sum::<u64>()
    );
    report(exit)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("profile: {e}");
            return ExitCode::from(2);
        }
    };
    // Python runs on a thread with a large stack: hook frames (large in a debug build)
    // sit between Python's, and recursion that `python` survives must not overflow ours.
    let outcome = std::thread::Builder::new()
        .name("python".into())
        .stack_size(256 << 20)
        .spawn(move || run(args).map_err(|e| e.to_string()))
        .map_err(|e| format!("cannot start the Python thread: {e}"))
        .and_then(|t| {
            t.join()
                .unwrap_or_else(|_| Err("the Python thread panicked".into()))
        });
    match outcome {
        // The status the `python` command would give (`sys.exit(-1)` is 255).
        Ok(code) => ExitCode::from((code & 0xff) as u8),
        Err(e) => {
            eprintln!("profile: error: {e}");
            ExitCode::FAILURE
        }
    }
}
