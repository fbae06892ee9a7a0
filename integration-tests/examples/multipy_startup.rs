//! Start-up profile driver: `multipy_startup VENV N [CODE]` creates one interpreter that
//! imports numpy (as `cargo xtask bench multipy` keeps one running), then N times creates
//! one more interpreter, runs CODE (default `import numpy`) and drops it, printing the
//! median `new` and CODE wall times and the CPU time of each start-up (this process's
//! user + system time across `new` + CODE: the new interpreter's thread does the work,
//! the others are idle). With `MULTIPY_STARTUP_PEER=1` each round is followed by a
//! `python -c "import numpy"` process of the venv (OpenBLAS one thread, as the
//! interpreters have), timed by wall clock and by its CPU time (`RUSAGE_CHILDREN`), and
//! the medians of the per-round ratios are printed: CPU time moves less with the
//! machine's load than wall time. Meant to run under `perf record` or callgrind too
//! (with `N` = 0 and 1 for the difference) to see where one more interpreter's start-up
//! goes. With `MULTIPY_STARTUP_KEEP=1` the interpreters are kept and the process exits
//! without finalising them, so that a profile holds start-up only.

use integration_tests::multipy::{Config, Interpreter};
use std::time::Instant;

/// User + system CPU time of this process (`RUSAGE_SELF`) or of its waited-for children.
fn cpu_ms(who: i32) -> f64 {
    // SAFETY: getrusage fills a zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

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
    let peer = std::env::var_os("MULTIPY_STARTUP_PEER").is_some();
    let mut kept = Vec::new();
    let (mut news, mut runs, mut cpus) = (Vec::new(), Vec::new(), Vec::new());
    let (mut peer_wall, mut peer_cpu, mut wall_ratio, mut cpu_ratio) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let c0 = cpu_ms(libc::RUSAGE_SELF);
        let t = Instant::now();
        let i = new();
        let created = t.elapsed().as_secs_f64() * 1000.0;
        i.run(code).unwrap();
        let total = t.elapsed().as_secs_f64() * 1000.0;
        let cpu = cpu_ms(libc::RUSAGE_SELF) - c0;
        news.push(created);
        runs.push(total - created);
        cpus.push(cpu);
        if keep {
            kept.push(i);
        } else {
            drop(i);
        }
        if peer {
            let c0 = cpu_ms(libc::RUSAGE_CHILDREN);
            let t = Instant::now();
            let ok = std::process::Command::new(venv.join("bin/python"))
                .args(["-c", code])
                .env("OPENBLAS_NUM_THREADS", "1")
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(ok, "python -c {code:?} failed");
            let wall = t.elapsed().as_secs_f64() * 1000.0;
            let c = cpu_ms(libc::RUSAGE_CHILDREN) - c0;
            peer_wall.push(wall);
            peer_cpu.push(c);
            wall_ratio.push(total / wall);
            cpu_ratio.push(cpu / c);
        }
    }
    let mut totals: Vec<f64> = news.iter().zip(&runs).map(|(a, b)| a + b).collect();
    println!(
        "rounds={n} new_ms={:.2} code_ms={:.2} total_ms={:.2} cpu_ms={:.2}",
        median(&mut news),
        median(&mut runs),
        median(&mut totals),
        median(&mut cpus)
    );
    if peer {
        println!(
            "peer_wall_ms={:.2} peer_cpu_ms={:.2} wall_ratio_paired={:.3} cpu_ratio_paired={:.3}",
            median(&mut peer_wall),
            median(&mut peer_cpu),
            median(&mut wall_ratio),
            median(&mut cpu_ratio)
        );
    }
    if keep {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // Leave without dropping: finalisation is not start-up.
        std::process::exit(0);
    }
    drop(kept);
}
