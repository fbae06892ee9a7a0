//! Start-up profile driver: `multipy_startup VENV N [CODE]` creates one interpreter that
//! imports numpy (as `cargo xtask bench multipy` keeps one running), then N times creates
//! one more interpreter, runs CODE (default `import numpy`) and drops it, printing each
//! round's `new` and CODE times. Meant to run under `perf record` or callgrind (with
//! `N` = 0 and 1 for the difference) to see where one more interpreter's start-up goes.
//! With `MULTIPY_STARTUP_KEEP=1` the interpreters are kept and the process exits without
//! finalising them, so that a profile holds start-up only.

use integration_tests::multipy::{Config, Interpreter};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: multipy_startup VENV N [CODE]");
        std::process::exit(2);
    }
    let venv = std::path::PathBuf::from(&args[1]);
    let n: usize = args[2].parse().expect("N");
    let code = args.get(3).map(String::as_str).unwrap_or("import numpy");
    let new = || Interpreter::new(Config::new().venv(&venv)).expect("interpreter");
    let first = new();
    first.run("import numpy").unwrap();
    // MULTIPY_STARTUP_KEEP=1: keep every interpreter and leave without finalising them,
    // so that a profile holds start-up only.
    let keep = std::env::var_os("MULTIPY_STARTUP_KEEP").is_some();
    let mut kept = Vec::new();
    let (mut news, mut runs) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let i = new();
        let created = t.elapsed().as_secs_f64() * 1000.0;
        i.run(code).unwrap();
        let total = t.elapsed().as_secs_f64() * 1000.0;
        news.push(created);
        runs.push(total - created);
        if keep {
            kept.push(i);
        } else {
            drop(i);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "rounds={n} new_ms={:.2} code_ms={:.2}",
        median(&mut news),
        median(&mut runs)
    );
    if keep {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // Leave without dropping: finalisation is not start-up.
        std::process::exit(0);
    }
    drop(kept);
}
