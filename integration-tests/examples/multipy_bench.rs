//! The multipy side of `cargo xtask bench multipy`: prints `key=value` lines that the
//! xtask suite compares with its peers (multiprocessing, CPython 3.12 sub-interpreters,
//! plain `python3` processes), measured by xtask in the same run.
//!
//! `multipy_bench VENV ROUNDS WORKERS ITERS [--python X.Y] [--only SECTION,...]`
//! measures, on the CPython of `--python` (default 3.11; VENV must be made by that
//! version), the sections named by `--only` (`fib`, `startup`, `memory`, `numpy`;
//! default all):
//! - `fib_one_s` / `fib_two_s`: wall time of fib(30) in two threads on one interpreter
//!   and on two interpreters (median of ROUNDS), and `fib_speedup_two_interpreters`;
//!   `fib_cores_used_one` / `fib_cores_used_two`: the process's CPU time over that wall
//!   time (median): one GIL keeps it at or below 1, and above 1 the two interpreters
//!   did run at the same time, however loaded the machine (which lowers both);
//! - `startup_ms_interpreter_numpy`: one more interpreter, load + initialise +
//!   `import numpy`, with one already running (median of 3 x ROUNDS);
//!   (`startup_ms_interpreter`: the same without numpy); each round is followed by a
//!   `python -c "import numpy"` process started from here with the host's environment
//!   (`startup_ms_process_numpy_paired`), so that `startup_ratio_paired` (the median of
//!   the per-round ratios) compares the two under the same machine load;
//! - `rss_mb_interpreter_numpy`: private memory (Private_Clean + Private_Dirty of
//!   `/proc/self/smaps_rollup`) added per extra interpreter with numpy imported;
//! - `numpy_s_interpreters`: wall time of WORKERS interpreters each running ITERS
//!   iterations of the numpy workload (matmul + ufuncs) at once.

use integration_tests::multipy::{Config, Interpreter, PythonSpec};
use std::path::PathBuf;
use std::time::Instant;

const FIB: &str = "def fib(x):\n    return 1 if x <= 1 else fib(x - 1) + fib(x - 2)\n";

/// The numpy workload, also run by the process peer (xtask's copy must stay equal).
pub const WORKLOAD: &str = "import numpy as np\nrng = np.random.default_rng(0)\na = rng.random((200, 200))\nx = rng.random(100_000)\ndef work(iters):\n    s = 0.0\n    for _ in range(iters):\n        s += float((a @ a).trace())\n        s += float(np.exp(np.sin(x)).sum())\n    return s\n";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// CPU time of the whole process (every thread), in seconds.
fn process_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_PROCESS_CPUTIME_ID always exists
    // on Linux, and clock_gettime only writes through the pointer it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn private_mb() -> f64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    let kb: u64 = text
        .lines()
        .filter(|l| l.starts_with("Private_Clean:") || l.starts_with("Private_Dirty:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    kb as f64 / 1024.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!(
            "usage: multipy_bench VENV ROUNDS WORKERS ITERS [--python X.Y] [--only fib,startup,memory,numpy]"
        );
        std::process::exit(2);
    };
    if args.len() < 5 {
        usage();
    }
    let venv = PathBuf::from(&args[1]);
    let rounds: usize = args[2].parse().expect("ROUNDS");
    let workers: usize = args[3].parse().expect("WORKERS");
    let iters: usize = args[4].parse().expect("ITERS");
    let mut python = PythonSpec::Default;
    let mut only: Option<Vec<String>> = None;
    let mut rest = args[5..].iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--python" => python = PythonSpec::parse(value),
            "--only" => only = Some(value.split(',').map(str::to_string).collect()),
            _ => usage(),
        }
    }
    let wanted = |section: &str| only.as_ref().is_none_or(|o| o.iter().any(|s| s == section));
    // The host's OpenBLAS setting, before the first interpreter applies the layer's
    // policy to this process's environment: the paired process peer runs with the
    // host's, as the xtask peers do.
    let host_blas = std::env::var_os("OPENBLAS_NUM_THREADS");
    let peer_numpy = || {
        let mut c = std::process::Command::new(venv.join("bin/python"));
        c.args(["-c", "import numpy"]);
        match &host_blas {
            Some(v) => c.env("OPENBLAS_NUM_THREADS", v),
            None => c.env_remove("OPENBLAS_NUM_THREADS"),
        };
        let t = Instant::now();
        let ok = c.status().map(|s| s.success()).unwrap_or(false);
        assert!(ok, "python -c 'import numpy' failed");
        t.elapsed().as_secs_f64() * 1000.0
    };
    let new =
        || Interpreter::new(Config::new().python(python.clone()).venv(&venv)).expect("interpreter");

    let a = new();

    // fib(30) in two threads: one interpreter vs two.
    if wanted("fib") {
        let b = new();
        a.run(FIB).unwrap();
        b.run(FIB).unwrap();
        let (mut one, mut two) = (Vec::new(), Vec::new());
        let (mut cores_one, mut cores_two) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (t, cpu) = (Instant::now(), process_cpu_s());
            std::thread::scope(|s| {
                s.spawn(|| a.run("fib(30)").unwrap());
                s.spawn(|| a.run("fib(30)").unwrap());
            });
            let wall = t.elapsed().as_secs_f64();
            one.push(wall);
            cores_one.push((process_cpu_s() - cpu) / wall);
            let (t, cpu) = (Instant::now(), process_cpu_s());
            std::thread::scope(|s| {
                s.spawn(|| a.run("fib(30)").unwrap());
                s.spawn(|| b.run("fib(30)").unwrap());
            });
            let wall = t.elapsed().as_secs_f64();
            two.push(wall);
            cores_two.push((process_cpu_s() - cpu) / wall);
        }
        let (one, two) = (median(one), median(two));
        println!("fib_one_s={one}");
        println!("fib_two_s={two}");
        println!("fib_speedup_two_interpreters={}", one / two);
        println!("fib_cores_used_one={}", median(cores_one));
        println!("fib_cores_used_two={}", median(cores_two));
        drop(b);
    }

    if wanted("startup") {
        // Start-up of one more interpreter with numpy, one already running (a).
        a.run("import numpy").unwrap();
        let (mut startup, mut bare, mut peer, mut ratio) = (vec![], vec![], vec![], vec![]);
        // Three times the rounds here: a round is short, and the machine's load varies.
        for _ in 0..3 * rounds {
            let t = Instant::now();
            let i = new();
            bare.push(t.elapsed().as_secs_f64() * 1000.0);
            i.run("import numpy").unwrap();
            let ours = t.elapsed().as_secs_f64() * 1000.0;
            startup.push(ours);
            drop(i);
            let p = peer_numpy();
            peer.push(p);
            ratio.push(ours / p);
        }
        println!("startup_ms_interpreter_numpy={}", median(startup));
        println!("startup_ms_interpreter={}", median(bare));
        println!("startup_ms_process_numpy_paired={}", median(peer));
        println!("startup_ratio_paired={}", median(ratio));
    }

    if wanted("memory") {
        // Private memory per extra interpreter with numpy imported.
        const EXTRA: usize = 4;
        a.run("import numpy").unwrap();
        let before = private_mb();
        let extra: Vec<Interpreter> = (0..EXTRA)
            .map(|_| {
                let i = new();
                i.run("import numpy\nnumpy.ones(10).sum()").unwrap();
                i
            })
            .collect();
        let after = private_mb();
        println!(
            "rss_mb_interpreter_numpy={}",
            (after - before) / EXTRA as f64
        );
        drop(extra);
    }

    if wanted("numpy") {
        // numpy workload: WORKERS interpreters at once.
        let ws: Vec<Interpreter> = (0..workers).map(|_| new()).collect();
        for w in &ws {
            w.run(WORKLOAD).unwrap();
            w.run("work(1)").unwrap();
        }
        let mut times = Vec::new();
        for _ in 0..rounds {
            let t = Instant::now();
            std::thread::scope(|s| {
                for w in &ws {
                    s.spawn(move || w.run(&format!("work({iters})")).unwrap());
                }
            });
            times.push(t.elapsed().as_secs_f64());
        }
        println!("numpy_s_interpreters={}", median(times));
        drop(ws);
    }
    drop(a);
}
