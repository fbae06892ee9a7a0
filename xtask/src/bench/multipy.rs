//! `cargo xtask bench multipy`: many interpreters in one process (integration-tests'
//! `multipy`) against its peers, all measured in the same run:
//! - fib(30) in two threads: one interpreter vs two (`fib_speedup_two_interpreters`,
//!   the seed's 1.9x; target >= 1.85x), with the cores used (`fib_cores_used_one`,
//!   `fib_cores_used_two`: the process's CPU time over the wall time, which shows the
//!   two interpreters running at once even when load keeps the speedup down), and the
//!   speedup separate processes get on the machine in the same passes
//!   (`fib_speedup_two_processes`: two threads of one `python` vs two `python`s at
//!   once, the most a second interpreter can give here); the same work with
//!   `multiprocessing` (2 processes, pool start-up included) and with CPython
//!   3.12 sub-interpreters with a per-interpreter GIL (pure Python; `import numpy` is
//!   tried there and its failure recorded);
//! - start-up of one more interpreter with `import numpy` vs a `python -c "import
//!   numpy"` process (target <= 0.5x) and vs creating a 3.12 sub-interpreter (no numpy);
//!   also paired per round inside the driver (`startup_ratio_paired`: each start-up
//!   followed by such a process, the median of the ratios), which load changes between
//!   the driver's run and the peers' rounds cannot skew;
//! - private memory per extra interpreter with numpy imported vs a separate python
//!   process with numpy imported (its private memory; its RSS too) (target <= 0.5x);
//! - a numpy workload (matmul + ufuncs) in N interpreters at once vs N processes.
//!
//! The parallel promise on the newer CPythons: for 3.12 and 3.13 (each found as `bench
//! interp-speed` finds it: pyenv's newest `--enable-shared` build; `--python 3.12,3.13`
//! chooses which, `--python 3.11` none), fib(30) x2 two interpreters vs one (target >=
//! 1.85x, as on 3.11) and the numpy workload in N interpreters vs N processes, each
//! version with a numpy environment of its own (`target/multipy-venv-X.Y`, xtask's
//! `venv::ensure_version`). Their figures are the 3.11 ones' keys prefixed with `pyXY_`
//! (`py312_fib_speedup_two_interpreters`, `py313_numpy_s_processes`, ...); 3.11's keep
//! their unprefixed names.
//!
//! Our side runs in `integration-tests/examples/multipy_bench`; the peers are Python
//! scripts run here. Rounds interleave ours and the peers.

use super::report::Report;
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

const ROUNDS: usize = 5;
const WORKERS: usize = 2;
const ITERS: usize = 40;

/// Must equal `WORKLOAD` in integration-tests/examples/multipy_bench.rs.
const WORKLOAD: &str = "import numpy as np\nrng = np.random.default_rng(0)\na = rng.random((200, 200))\nx = rng.random(100_000)\ndef work(iters):\n    s = 0.0\n    for _ in range(iters):\n        s += float((a @ a).trace())\n        s += float(np.exp(np.sin(x)).sum())\n    return s\n";

const FIB: &str = "def fib(x):\n    return 1 if x <= 1 else fib(x - 1) + fib(x - 2)\n";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn kv(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .filter_map(|(k, v)| Some((k.trim().to_string(), v.trim().parse().ok()?)))
        .collect()
}

/// Runs `python -c code` and returns its `key=value` lines.
fn py(python: &Path, code: &str, env: &[(&str, &str)]) -> Result<HashMap<String, f64>> {
    let out = Command::new(python)
        .args(["-c", code])
        .envs(env.iter().copied())
        .output()
        .with_context(|| format!("run {}", python.display()))?;
    if !out.status.success() {
        bail!(
            "{} -c ... failed: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(kv(&String::from_utf8_lossy(&out.stdout)))
}

fn multiprocessing_fib(python: &Path) -> Result<f64> {
    let code = format!(
        "{FIB}import multiprocessing, time\nif __name__ == '__main__':\n    t = time.perf_counter()\n    with multiprocessing.Pool(2) as p:\n        p.map(fib, [30, 30])\n    print('s=%r' % (time.perf_counter() - t))\n"
    );
    py(python, &code, &[])?
        .get("s")
        .copied()
        .context("multiprocessing peer printed no time")
}

/// 3.12's sub-interpreters with their own GIL: fib(30) on two of them in two threads,
/// the creation time of one, and what `import numpy` does there.
fn subinterpreters(
    python312: &Path,
    site: Option<&Path>,
) -> Result<(HashMap<String, f64>, String)> {
    let site = site.map(|s| s.display().to_string()).unwrap_or_default();
    let code = format!(
        r#"import _xxsubinterpreters as si, threading, time
fib_src = {FIB:?}
ids = [si.create(isolated=True) for _ in range(2)]
for i in ids:
    si.run_string(i, fib_src)
t = time.perf_counter()
ts = [threading.Thread(target=si.run_string, args=(i, "fib(30)")) for i in ids]
for th in ts: th.start()
for th in ts: th.join()
print("fib_two_s=%r" % (time.perf_counter() - t))
created = []
for _ in range(5):
    t = time.perf_counter()
    j = si.create(isolated=True)
    created.append(time.perf_counter() - t)
    si.destroy(j)
created.sort()
print("create_ms=%r" % (created[2] * 1000))
k = si.create(isolated=True)
try:
    si.run_string(k, "import sys; sys.path.append(%r); import numpy" % {site:?})
    print("numpy_ok=1")
except Exception as e:
    print("numpy_ok=0")
    print("numpy_error:", str(e).splitlines()[-1] if str(e) else type(e).__name__)
"#
    );
    let out = Command::new(python312)
        .args(["-c", &code])
        .output()
        .context("run python3.12")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "python3.12 sub-interpreter peer failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let err = text
        .lines()
        .find_map(|l| l.strip_prefix("numpy_error: "))
        .unwrap_or("")
        .to_string();
    Ok((kv(&text), err))
}

fn private_and_rss_code() -> &'static str {
    "import numpy\nnumpy.ones(10).sum()\nkb = {}\nfor line in open('/proc/self/smaps_rollup'):\n    k, _, v = line.partition(':')\n    if v.strip().endswith('kB'): kb[k] = int(v.split()[0])\nprint('private_mb=%r' % ((kb['Private_Clean'] + kb['Private_Dirty']) / 1024))\nprint('rss_mb=%r' % (kb['Rss'] / 1024))\n"
}

/// `n` processes of `python`, each running `setup`, then waiting for one agreed
/// wall-clock instant `delay_s` from now, then timing `body`; the slowest one's time.
/// Every process has started and warmed up before the loops begin, so no process's
/// start-up overlaps another's loop.
fn slowest_of_simultaneous(
    python: &Path,
    n: usize,
    setup: &str,
    body: &str,
    delay_s: f64,
    env: &[(&str, &str)],
) -> Result<f64> {
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64()
        + delay_s;
    let code = format!(
        "{setup}import time\nwhile time.time() < {start}:\n    time.sleep(0.0005)\nt = time.perf_counter()\n{body}\nprint('s=%r' % (time.perf_counter() - t))\n"
    );
    let children: Vec<_> = (0..n)
        .map(|_| {
            Command::new(python)
                .args(["-c", &code])
                .envs(env.iter().copied())
                .stdout(std::process::Stdio::piped())
                .spawn()
        })
        .collect::<std::io::Result<_>>()
        .context("start the simultaneous processes")?;
    let mut worst: f64 = 0.0;
    for c in children {
        let out = c.wait_with_output()?;
        let s = kv(&String::from_utf8_lossy(&out.stdout))
            .get("s")
            .copied()
            .context("a simultaneous process printed no time")?;
        worst = worst.max(s);
    }
    Ok(worst)
}

/// WORKERS processes at once, each running the workload; the slowest one's loop time.
fn numpy_processes(python: &Path) -> Result<f64> {
    slowest_of_simultaneous(
        python,
        WORKERS,
        &format!("{WORKLOAD}work(1)\n"),
        &format!("work({ITERS})"),
        2.0,
        &[("OPENBLAS_NUM_THREADS", "1")],
    )
}

/// The parallel speedup separate processes get on this machine, the peer of
/// `fib_speedup_two_interpreters`: fib(30) in two threads of one `python` process (one
/// GIL, as the driver's one-interpreter case) and fib(30) in each of two processes whose
/// loops start at one agreed instant (the slower one's time). Two processes share nothing
/// but the machine, so their speedup is what a second interpreter can give here at most.
fn fib_processes(python: &Path) -> Result<(f64, f64)> {
    let one = py(
        python,
        &format!(
            "{FIB}import threading, time\nfib(20)\nt = time.perf_counter()\nts = [threading.Thread(target=fib, args=(30,)) for _ in range(2)]\nfor th in ts: th.start()\nfor th in ts: th.join()\nprint('s=%r' % (time.perf_counter() - t))\n"
        ),
        &[],
    )?["s"];
    let two = slowest_of_simultaneous(python, 2, &format!("{FIB}fib(20)\n"), "fib(30)", 0.5, &[])?;
    Ok((one, two))
}

/// The versions besides 3.11 that `--python` asked for (unset: 3.12 and 3.13).
static VERSIONS: OnceLock<Vec<(u32, u32)>> = OnceLock::new();

/// The newer CPythons measured when `--python` is not given.
const NEWER: [(u32, u32); 2] = [(3, 12), (3, 13)];

/// Parses `--python`'s `X.Y` list: 3.12 and 3.13 (3.11 is always measured, and
/// accepted there; the pinned numpy 2.4 needs 3.11 or later).
fn parse_versions(list: &[String]) -> Result<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    for v in list {
        let parsed = v
            .trim()
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
        match parsed {
            Some((3, 11)) => {}
            Some(version) if NEWER.contains(&version) => {
                if !out.contains(&version) {
                    out.push(version);
                }
            }
            _ => bail!(
                "--python {v}: expected 3.12 and/or 3.13 (3.11 is always measured; the pinned numpy has no wheels for 3.10)"
            ),
        }
    }
    Ok(out)
}

/// Records `--python`'s versions for [`run`].
pub fn set_versions(list: &[String]) -> Result<()> {
    let versions = parse_versions(list)?;
    VERSIONS
        .set(versions)
        .map_err(|_| anyhow::anyhow!("--python given twice"))
}

/// One more CPython's side of the parallel workloads: its executable, its numpy
/// environment, and the figures gathered over the passes.
struct Version {
    major: u32,
    minor: u32,
    python: PathBuf,
    venv: PathBuf,
    ours: Vec<HashMap<String, f64>>,
    processes: Vec<f64>,
    /// [`fib_processes`]' samples: one process (two threads), two processes.
    fib_procs: (Vec<f64>, Vec<f64>),
}

impl Version {
    fn tag(&self) -> String {
        format!("py{}{}", self.major, self.minor)
    }
    fn name(&self) -> String {
        format!("{}.{}", self.major, self.minor)
    }
}

/// Runs the driver on `venv` with the driver's extra arguments `extra` (`--python X.Y`
/// for a venv of another version than 3.11, `--only SECTIONS`); its `key=value` lines.
fn driver_run(driver: &Path, venv: &Path, extra: &[&str]) -> Result<HashMap<String, f64>> {
    let out = Command::new(driver)
        .arg(venv)
        .args([ROUNDS.to_string(), WORKERS.to_string(), ITERS.to_string()])
        .args(extra)
        .output()
        .context("run multipy_bench")?;
    if !out.status.success() {
        bail!(
            "multipy_bench {} failed: {}",
            extra.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(kv(&String::from_utf8_lossy(&out.stdout)))
}

/// The suite.
pub fn run() -> Result<()> {
    let venv = crate::venv::ensure()?;
    let python = venv.join("bin/python");
    let driver = crate::demo_multipy::build_example("multipy_bench")?;
    let wanted = VERSIONS.get().cloned().unwrap_or_else(|| NEWER.to_vec());
    let mut versions = Vec::new();
    for (major, minor) in wanted {
        let Some(python) = super::interp_speed::find_python(major, minor) else {
            println!("bench multipy: no python{major}.{minor} on this machine; its parallel workloads were not measured");
            continue;
        };
        let venv = crate::venv::ensure_version(&python, major, minor)?;
        versions.push(Version {
            major,
            minor,
            python,
            venv,
            ours: Vec::new(),
            processes: Vec::new(),
            fib_procs: (Vec::new(), Vec::new()),
        });
    }
    // The sub-interpreter peer: 3.12's executable, and its numpy environment's
    // site-packages (that of the parallel workloads when 3.12 is measured).
    let py312 = super::interp_speed::find_python(3, 12);
    let measured312 = versions.iter().find(|v| (v.major, v.minor) == (3, 12));
    let site312 = match (&py312, measured312) {
        (_, Some(v)) => Some(v.venv.join("lib/python3.12/site-packages")),
        (None, None) => None,
        (Some(p), None) => match crate::venv::ensure_version(p, 3, 12) {
            Ok(v) => Some(v.join("lib/python3.12/site-packages")),
            Err(e) => {
                println!("bench multipy: no 3.12 numpy venv ({e:#}); the numpy import is tried without it");
                None
            }
        },
    };

    // Ours (one driver run: its own medians over ROUNDS), then the peers, interleaved
    // over two passes so machine noise hits both.
    let mut ours: Vec<HashMap<String, f64>> = Vec::new();
    let (mut mp, mut sub_fib, mut sub_create, mut proc_start, mut proc_np) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut proc_private, mut proc_rss, mut proc_bare) = (Vec::new(), Vec::new(), Vec::new());
    let (mut fib_proc_one, mut fib_proc_two) = (Vec::new(), Vec::new());
    let mut numpy_error = String::new();
    let mut sub_numpy_ok = None;
    for pass in 0..2 {
        println!("bench multipy: pass {}/2", pass + 1);
        ours.push(driver_run(&driver, &venv, &[])?);
        for _ in 0..ROUNDS {
            let (one, two) = fib_processes(&python)?;
            fib_proc_one.push(one);
            fib_proc_two.push(two);
            mp.push(multiprocessing_fib(&python)?);
            let t = Instant::now();
            let ok = Command::new(&python)
                .args(["-c", "import numpy"])
                .status()?
                .success();
            if !ok {
                bail!("{} -c 'import numpy' failed", python.display());
            }
            proc_start.push(t.elapsed().as_secs_f64() * 1000.0);
            let t = Instant::now();
            if !Command::new(&python)
                .args(["-c", "pass"])
                .status()?
                .success()
            {
                bail!("{} -c pass failed", python.display());
            }
            proc_bare.push(t.elapsed().as_secs_f64() * 1000.0);
            let m = py(
                &python,
                private_and_rss_code(),
                &[("OPENBLAS_NUM_THREADS", "1")],
            )?;
            proc_private.push(m["private_mb"]);
            proc_rss.push(m["rss_mb"]);
            if let Some(p) = &py312 {
                let (m, err) = subinterpreters(p, site312.as_deref())?;
                sub_fib.push(m["fib_two_s"]);
                sub_create.push(m["create_ms"]);
                sub_numpy_ok = m.get("numpy_ok").copied();
                numpy_error = err;
            }
        }
        proc_np.push(numpy_processes(&python)?);
        proc_np.push(numpy_processes(&python)?);
        // The newer versions' parallel workloads: ours, then N processes of the same
        // version (twice, as for 3.11).
        for v in &mut versions {
            println!(
                "bench multipy: pass {}/2, CPython {} ({})",
                pass + 1,
                v.name(),
                v.python.display()
            );
            let name = v.name();
            v.ours.push(driver_run(
                &driver,
                &v.venv,
                &["--python", &name, "--only", "fib,numpy"],
            )?);
            let venv_python = v.venv.join("bin/python");
            for _ in 0..ROUNDS {
                let (one, two) = fib_processes(&venv_python)?;
                v.fib_procs.0.push(one);
                v.fib_procs.1.push(two);
            }
            v.processes.push(numpy_processes(&venv_python)?);
            v.processes.push(numpy_processes(&venv_python)?);
        }
    }

    let mut r = Report::new("multipy");
    let ours_median = |k: &str| median(ours.iter().filter_map(|m| m.get(k).copied()).collect());
    for k in [
        "fib_one_s",
        "fib_two_s",
        "fib_speedup_two_interpreters",
        "fib_cores_used_one",
        "fib_cores_used_two",
        "startup_ms_interpreter_numpy",
        "startup_ms_interpreter",
        "startup_ms_process_numpy_paired",
        "startup_ratio_paired",
        "rss_mb_interpreter_numpy",
        "numpy_s_interpreters",
    ] {
        r.value(k, ours_median(k));
    }
    for (i, m) in ours.iter().enumerate() {
        r.value(
            &format!("fib_speedup_two_interpreters_pass{}", i + 1),
            m["fib_speedup_two_interpreters"],
        );
        r.value(
            &format!("startup_ratio_paired_pass{}", i + 1),
            m["startup_ratio_paired"],
        );
    }
    r.value("fib_s_multiprocessing", median(mp));
    let (p1, p2) = (median(fib_proc_one), median(fib_proc_two));
    r.value("fib_one_s_processes", p1);
    r.value("fib_two_s_processes", p2);
    r.value("fib_speedup_two_processes", p1 / p2);
    r.value("startup_ms_process_numpy", median(proc_start));
    r.value("startup_ms_process", median(proc_bare));
    r.value("rss_mb_process_numpy", median(proc_private));
    r.value("rss_total_mb_process_numpy", median(proc_rss));
    r.value("numpy_s_processes", median(proc_np));
    r.value("numpy_workers", WORKERS as f64);
    r.value("numpy_iters_per_worker", ITERS as f64);
    if py312.is_some() {
        r.value("fib_s_subinterpreters_312", median(sub_fib));
        r.value("startup_ms_subinterpreter_312", median(sub_create));
        if let Some(ok) = sub_numpy_ok {
            r.value("subinterpreter_312_numpy_imports", ok);
        }
    }
    // The seed's comparison: one interpreter's time over two interpreters'.
    r.value("fib_target_speedup", 1.85);
    r.compare(
        "fib(30) x2: two interpreters vs one (s)",
        "fib_two_s",
        "fib_one_s",
        None,
    );
    r.compare(
        "fib(30) x2: two interpreters vs multiprocessing (s)",
        "fib_two_s",
        "fib_s_multiprocessing",
        None,
    );
    if py312.is_some() {
        r.compare(
            "fib(30) x2: two interpreters vs 3.12 subinterp (s)",
            "fib_two_s",
            "fib_s_subinterpreters_312",
            None,
        );
    }
    r.compare(
        "start-up + import numpy vs a process (ms)",
        "startup_ms_interpreter_numpy",
        "startup_ms_process_numpy",
        Some(0.5),
    );
    if py312.is_some() {
        r.compare(
            "start-up + numpy vs 3.12 subinterp w/o numpy (ms)",
            "startup_ms_interpreter_numpy",
            "startup_ms_subinterpreter_312",
            None,
        );
    }
    r.compare(
        "start-up without numpy: interpreter vs process (ms)",
        "startup_ms_interpreter",
        "startup_ms_process",
        None,
    );
    r.compare(
        "private MB per interpreter vs process (numpy)",
        "rss_mb_interpreter_numpy",
        "rss_mb_process_numpy",
        Some(0.5),
    );
    r.compare(
        "numpy workload, N at once: interpreters vs processes (s)",
        "numpy_s_interpreters",
        "numpy_s_processes",
        None,
    );
    for v in &versions {
        let tag = v.tag();
        let their = |k: &str| median(v.ours.iter().filter_map(|m| m.get(k).copied()).collect());
        for k in [
            "fib_one_s",
            "fib_two_s",
            "fib_speedup_two_interpreters",
            "fib_cores_used_one",
            "fib_cores_used_two",
            "numpy_s_interpreters",
        ] {
            r.value(&format!("{tag}_{k}"), their(k));
        }
        for (i, m) in v.ours.iter().enumerate() {
            r.value(
                &format!("{tag}_fib_speedup_two_interpreters_pass{}", i + 1),
                m["fib_speedup_two_interpreters"],
            );
        }
        r.value(
            &format!("{tag}_numpy_s_processes"),
            median(v.processes.clone()),
        );
        let (p1, p2) = (median(v.fib_procs.0.clone()), median(v.fib_procs.1.clone()));
        r.value(&format!("{tag}_fib_one_s_processes"), p1);
        r.value(&format!("{tag}_fib_two_s_processes"), p2);
        r.value(&format!("{tag}_fib_speedup_two_processes"), p1 / p2);
        r.compare(
            &format!("{}: fib(30) x2: two vs one interpreter (s)", v.name()),
            &format!("{tag}_fib_two_s"),
            &format!("{tag}_fib_one_s"),
            None,
        );
        r.compare(
            &format!("{}: numpy N at once, interps vs procs (s)", v.name()),
            &format!("{tag}_numpy_s_interpreters"),
            &format!("{tag}_numpy_s_processes"),
            None,
        );
    }
    r.finish()?;
    let speedup = r.get("fib_speedup_two_interpreters").unwrap_or(0.0);
    println!(
        "  fib speedup two interpreters vs one: {speedup:.2}x (target >= 1.85x: {}); per pass: {}",
        if speedup >= 1.85 { "met" } else { "MISSED" },
        ours.iter()
            .map(|m| format!("{:.2}x", m["fib_speedup_two_interpreters"]))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let paired = r.get("startup_ratio_paired").unwrap_or(f64::NAN);
    println!(
        "  start-up + numpy, each round paired with a process right after it: median ratio {paired:.3} (target <= 0.5: {}); per pass: {}",
        if paired <= 0.5 { "met" } else { "MISSED" },
        ours.iter()
            .map(|m| format!("{:.3}", m["startup_ratio_paired"]))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("\n  the parallel promise per CPython (fib(30) x2 two interpreters vs one, target >= 1.85x; numpy workload, {WORKERS} at once, {ITERS} iterations each):");
    println!("  (cores: the process's CPU time over the wall time, one interpreter / two; one GIL keeps it <= 1, above 1 the two ran at once; load lowers both)");
    println!("  (procs: the same fib in two threads of one python process vs two python processes at once, in the same passes: the speedup the machine gives separate processes)");
    println!(
        "    {:<7} {:>9} {:>9} {:>8} {:>6}  {:<8} {:<15} {:>11} {:>11} {:>11} {:>7}",
        "CPython",
        "one s",
        "two s",
        "speedup",
        "procs",
        "target",
        "per pass",
        "cores",
        "numpy ours",
        "numpy procs",
        "ratio"
    );
    let mut rows = vec![(
        "3.11".to_string(),
        String::new(),
        ours.iter()
            .map(|m| m["fib_speedup_two_interpreters"])
            .collect::<Vec<_>>(),
    )];
    rows.extend(versions.iter().map(|v| {
        (
            v.name(),
            format!("{}_", v.tag()),
            v.ours
                .iter()
                .map(|m| m["fib_speedup_two_interpreters"])
                .collect(),
        )
    }));
    for (name, prefix, passes) in rows {
        let get = |k: &str| r.get(&format!("{prefix}{k}")).unwrap_or(f64::NAN);
        let speedup = get("fib_speedup_two_interpreters");
        let (np_ours, np_procs) = (get("numpy_s_interpreters"), get("numpy_s_processes"));
        println!(
            "    {:<7} {:>9.3} {:>9.3} {:>7.2}x {:>5.2}x  {:<8} {:<15} {:>11} {:>11.3} {:>11.3} {:>6.2}x",
            name,
            get("fib_one_s"),
            get("fib_two_s"),
            speedup,
            get("fib_speedup_two_processes"),
            if speedup >= 1.85 { "met" } else { "MISSED" },
            passes
                .iter()
                .map(|s| format!("{s:.2}x"))
                .collect::<Vec<_>>()
                .join(" "),
            format!(
                "{:.2} / {:.2}",
                get("fib_cores_used_one"),
                get("fib_cores_used_two")
            ),
            np_ours,
            np_procs,
            np_ours / np_procs
        );
    }
    if py312.is_some() {
        println!(
            "  3.12 sub-interpreter `import numpy`: {}",
            if numpy_error.is_empty() {
                "imported".to_string()
            } else {
                format!("fails: {numpy_error}")
            }
        );
    } else {
        println!("  no CPython 3.12 on this machine: the sub-interpreter peer was not measured");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_versions_parse() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_versions(&list(&["3.12", "3.13"])).unwrap(),
            vec![(3, 12), (3, 13)]
        );
        // 3.11 is always measured; repeats count once.
        assert_eq!(
            parse_versions(&list(&["3.11", "3.13", " 3.13"])).unwrap(),
            vec![(3, 13)]
        );
        assert!(parse_versions(&list(&["3.9"])).is_err());
        assert!(parse_versions(&list(&["3.10"])).is_err());
        assert!(parse_versions(&list(&["4.0"])).is_err());
        assert!(parse_versions(&list(&["python3.12"])).is_err());
    }
}
