//! Real GAP on our GC: GAP 4.12.1's own kernel (`src/julia_gc.c` unmodified,
//! configured `--with-gc=julia`) built against the Julia-compatibility prefix
//! (`julia_prefix.rs`: gc-core + gc-conservative, no libjulia), running GAP's own test
//! files (`tst/testinstall`). The same kernel source built with GAP's own collector
//! (GASMAN) is the peer of `cargo xtask bench gap-real`.
//!
//! Inputs: the kernel sources (`../shared/vendor/gap-4.12.1-kernel-min.tar.xz` next
//! to the repository, or `GAP_KERNEL_SOURCES`: such a tarball or an unpacked GAP
//! 4.12.1 tree), unpacked into `target/gap-real/` and never committed; GAP's library
//! and data from Debian (`gap-libs`, `gap-gapdoc`, `gap-primgrp`, `gap-smallgrp`,
//! `gap-smallgrp-extra`, `gap-transgrp`) and the build tools (`autoconf`, `libgmp-dev`,
//! `zlib1g-dev`), installed with apt-get when missing. GAP runs as
//! `gap -l "/usr/share/gap;<kernel tree>"`.
//!
//! Builds are cached in `target/gap-real/<variant>-<hash>/`, the hash covering the
//! sources, the prefix's headers (their inline fast paths are compiled into GAP), the
//! patch and the configure arguments; the prefix's library is refreshed on every run
//! (GAP links it dynamically).

use crate::steps::root;
use anyhow::{bail, Context, Result};
use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where a user's clone without `../shared` points at GAP 4.12.1's sources.
pub const SOURCES_ENV: &str = "GAP_KERNEL_SOURCES";
/// The vendored tarball, relative to the repository's parent.
const VENDORED: &str = "shared/vendor/gap-4.12.1-kernel-min.tar.xz";
/// GAP's library and data, as Debian installs them.
pub const GAP_ROOT: &str = "/usr/share/gap";

/// The vendored tarball's `src/julia_gc.c` carries one line changed by an earlier trial
/// (`YoungRef` per thread); GAP 4.12.1 has this one. The unmodified build restores it.
const YOUNGREF_TRIAL: &str =
    "static __thread UInt   YoungRef;   // per collector thread (gc-core marks in parallel)";
const YOUNGREF_GAP: &str = "static UInt            YoungRef;";

/// Which kernel to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// GAP's `julia_gc.c` as released, on gc-core (marking on one thread, as the Julia
    /// 1.6 it was written for).
    Ours,
    /// The same with `YoungRef` per thread (the project's patch
    /// `integration-tests/gap-real/youngref-per-thread.patch`), so that it may mark on
    /// several threads.
    OursPerThread,
    /// GAP's own collector, GASMAN (the default build).
    Gasman,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Ours => "ours",
            Variant::OursPerThread => "ours-tls",
            Variant::Gasman => "gasman",
        }
    }
}

/// A built kernel.
pub struct Build {
    /// The kernel tree (GAP's root for `-l`, with the `gap` executable).
    pub dir: PathBuf,
    pub variant: Variant,
}

/// The kernel sources: `GAP_KERNEL_SOURCES`, else the vendored tarball; `None` (with a
/// message saying what to do) if neither exists.
pub fn sources() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(SOURCES_ENV) {
        let p = PathBuf::from(p);
        if p.exists() {
            return Some(p);
        }
        println!(
            "gap-real: {SOURCES_ENV}={} does not exist; skipping real GAP",
            p.display()
        );
        return None;
    }
    let vendored = root().parent().map(|p| p.join(VENDORED))?;
    if vendored.is_file() {
        return Some(vendored);
    }
    println!(
        "gap-real: skipping real GAP: the kernel sources are not here ({} is absent). Point \
         {SOURCES_ENV} at gap-4.12.1-kernel-min.tar.xz (from the project's shared vendor \
         folder) or at an unpacked GAP 4.12.1 source tree to run these steps.",
        vendored.display()
    );
    None
}

/// Debian's GAP library and data and the build tools; installed when missing.
pub fn ensure_system() -> Result<()> {
    let pkg = |p: &str| format!("{GAP_ROOT}/pkg/{p}");
    let items = [
        (format!("{GAP_ROOT}/lib/init.g"), "gap-libs"),
        (pkg("GAPDoc/PackageInfo.g"), "gap-gapdoc"),
        (pkg("PrimGrp/PackageInfo.g"), "gap-primgrp"),
        (pkg("SmallGrp/PackageInfo.g"), "gap-smallgrp"),
        (pkg("SmallGrp/id10"), "gap-smallgrp-extra"),
        (pkg("TransGrp/PackageInfo.g"), "gap-transgrp"),
        ("/usr/bin/autoconf".into(), "autoconf"),
        ("/usr/include/x86_64-linux-gnu/gmp.h".into(), "libgmp-dev"),
        ("/usr/include/zlib.h".into(), "zlib1g-dev"),
        ("/usr/bin/make".into(), "make"),
        ("/usr/bin/patch".into(), "patch"),
    ];
    let pairs: Vec<(&str, &str)> = items.iter().map(|(f, p)| (f.as_str(), *p)).collect();
    crate::steps::ensure_apt_packages(
        &pairs,
        |f| Path::new(f).exists(),
        "GAP's library, data and kernel build tools for the real-GAP scenario",
    )
}

fn work_dir() -> PathBuf {
    root().join("target/gap-real")
}

/// The project's Julia-compatibility prefix for the builds, with a fresh library.
pub fn prefix() -> Result<PathBuf> {
    crate::julia_prefix::make(&work_dir().join("prefix"))
}

fn patch_file() -> PathBuf {
    root().join("integration-tests/gap-real/youngref-per-thread.patch")
}

fn configure_args(variant: Variant, prefix: &Path) -> Vec<String> {
    match variant {
        Variant::Gasman => vec![],
        Variant::Ours | Variant::OursPerThread => vec![
            "--with-gc=julia".into(),
            format!("--with-julia={}", prefix.display()),
        ],
    }
}

/// Everything a build depends on, hashed.
fn build_key(src: &Path, variant: Variant, prefix: &Path) -> Result<String> {
    let mut h = DefaultHasher::new();
    "gap-real build recipe 1".hash(&mut h);
    variant.name().hash(&mut h);
    hash_path(src, &mut h)?;
    configure_args(variant, prefix).hash(&mut h);
    if variant != Variant::Gasman {
        for f in crate::julia_prefix::header_sources() {
            fs::read(&f)
                .with_context(|| format!("reading {}", f.display()))?
                .hash(&mut h);
        }
    }
    if variant == Variant::OursPerThread {
        fs::read(patch_file())?.hash(&mut h);
    }
    Ok(format!("{:016x}", h.finish()))
}

/// Hashes a file's bytes, or a tree's file names and bytes.
fn hash_path(p: &Path, h: &mut DefaultHasher) -> Result<()> {
    if p.is_file() {
        fs::read(p)?.hash(h);
        return Ok(());
    }
    let mut entries: Vec<_> = fs::read_dir(p)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for e in entries {
        if e.file_name().is_some_and(|n| n == ".git") {
            continue;
        }
        e.file_name().hash(h);
        hash_path(&e, h)?;
    }
    Ok(())
}

/// Builds (or finds cached) the kernel of `variant` from `src`.
pub fn build(src: &Path, variant: Variant, prefix: &Path) -> Result<Build> {
    let key = build_key(src, variant, prefix)?;
    let dir = work_dir().join(format!("{}-{key}", variant.name()));
    if dir.join("gap").is_file() && dir.join(".built").is_file() {
        return Ok(Build { dir, variant });
    }
    let t0 = Instant::now();
    println!(
        "gap-real: building GAP 4.12.1's kernel ({}) in {}",
        match variant {
            Variant::Ours => "--with-gc=julia, on gc-core",
            Variant::OursPerThread => "--with-gc=julia, on gc-core, YoungRef per thread",
            Variant::Gasman => "GASMAN",
        },
        dir.display()
    );
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::create_dir_all(&dir)?;
    unpack(src, &dir)?;
    let jgc = dir.join("src/julia_gc.c");
    let text = fs::read_to_string(&jgc).context("the sources have no src/julia_gc.c")?;
    if text.contains(YOUNGREF_TRIAL) {
        fs::write(&jgc, text.replace(YOUNGREF_TRIAL, YOUNGREF_GAP))?;
    }
    if variant == Variant::OursPerThread {
        run_logged(
            Command::new("patch")
                .args(["-p1", "--forward", "-i"])
                .arg(patch_file())
                .current_dir(&dir),
            &dir.join("patch.log"),
            "applying youngref-per-thread.patch",
        )?;
    }
    run_logged(
        Command::new("sh").arg("./autogen.sh").current_dir(&dir),
        &dir.join("autogen.log"),
        "GAP's autogen.sh",
    )?;
    run_logged(
        Command::new("sh")
            .arg("./configure")
            .args(configure_args(variant, prefix))
            .current_dir(&dir),
        &dir.join("configure.log"),
        "GAP's configure",
    )?;
    run_logged(
        Command::new("make").arg("-j2").current_dir(&dir),
        &dir.join("make.log"),
        "make (GAP's kernel)",
    )?;
    if !dir.join("gap").is_file() {
        bail!("make finished but {} has no gap executable", dir.display());
    }
    fs::write(dir.join(".built"), key)?;
    println!("gap-real: built in {:.0} s", t0.elapsed().as_secs_f64());
    Ok(Build { dir, variant })
}

fn unpack(src: &Path, dir: &Path) -> Result<()> {
    if src.is_dir() {
        let status = Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", src.display()))
            .arg(dir)
            .status()?;
        if !status.success() {
            bail!("copying {} failed", src.display());
        }
        return Ok(());
    }
    let status = Command::new("tar")
        .arg("-xf")
        .arg(src)
        .arg("-C")
        .arg(dir)
        .arg("--strip-components=1")
        .status()
        .context("running tar")?;
    if !status.success() {
        bail!("unpacking {} failed", src.display());
    }
    Ok(())
}

/// Runs `cmd` with its output in `log`; on failure, the error names `what` and shows the
/// log's tail.
fn run_logged(cmd: &mut Command, log: &Path, what: &str) -> Result<()> {
    let out = fs::File::create(log)?;
    let status = cmd
        .stdout(out.try_clone()?)
        .stderr(out)
        .status()
        .with_context(|| format!("starting {what}"))?;
    if !status.success() {
        let text = fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(25).collect();
        bail!(
            "{what} failed ({status}); last lines of {}:\n{}",
            log.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(())
}

/// The testinstall files that need GAP files outside the vendored kernel tarball (its
/// `tst/testenumerator.g`, `tst/testrandom.g`, `tst/example-dir`, `tst/mockpkg`,
/// `tst/testunix/*.sh`, the help system's manuals), with the diffs GAP's own collector
/// (GASMAN) shows for them on the same tree: they must fail exactly so on ours (144 in
/// all), and are reported apart from the pass count.
pub const NEED_MISSING_FILES: [(&str, u64); 8] = [
    ("coll.tst", 5),
    ("compressed.tst", 2),
    ("dir.tst", 9),
    ("interpreter.tst", 1),
    ("package.tst", 19),
    ("random.tst", 76),
    ("read.tst", 19),
    ("testunix/streamio.tst", 13),
];

/// The representative part `cargo xtask test` runs (paths below `tst/testinstall`):
/// permutation groups, polycyclic groups, finite fields, weak pointer objects,
/// records, strings, integers, lists and sets, functions and the kernel's own tests.
pub const REPRESENTATIVE: [&str; 48] = [
    // permutation groups
    "perm.tst",
    "stbc.tst",
    "stabchain.tst",
    "oprtperm.tst",
    "grp/basic.tst",
    "opers/NormalClosure.tst",
    "kernel/permutat.tst",
    "ConjNatSym.tst",
    // polycyclic groups
    "grppc.tst",
    "rwspcgrp.tst",
    "opers/SylowSystem.tst",
    "onecohom.tst",
    "dt.tst",
    // finite fields
    "ffe.tst",
    "ffeconway.tst",
    "kernel/vecffe.tst",
    "kernel/vec8bit.tst",
    "kernel/vecgf2.tst",
    "mat8bit.tst",
    "zmodnz.tst",
    // weak pointer objects
    "weakptr.tst",
    "weakptr-badargs.tst",
    // records
    "kernel/records.tst",
    "recordname.tst",
    // strings
    "strings.tst",
    "stringobj.tst",
    "kernel/stringobj.tst",
    "startendwith.tst",
    // integers and numbers
    "integer.tst",
    "kernel/integer.tst",
    "longnumber.tst",
    "rationals.tst",
    "cyclotom.tst",
    "float.tst",
    // lists, sets, dictionaries
    "list.tst",
    "kernel/plist.tst",
    "kernel/lists.tst",
    "set.tst",
    "range.tst",
    "kernel/blister.tst",
    "dict.tst",
    "hashkeybag.tst",
    // functions, methods, the kernel
    "kernel/funcs.tst",
    "callfunc.tst",
    "varargs.tst",
    "method.tst",
    "immutable.tst",
    "trans.tst",
];

/// Every `.tst` file below `tst/testinstall`, sorted as GAP's `TestDirectory` does.
pub fn all_files(tree: &Path) -> Result<Vec<String>> {
    let base = tree.join("tst/testinstall");
    let mut out = Vec::new();
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) -> Result<()> {
        for e in fs::read_dir(dir)? {
            let p = e?.path();
            if p.is_dir() {
                walk(&p, base, out)?;
            } else if p.extension().is_some_and(|x| x == "tst") {
                let rel = p.strip_prefix(base).expect("below base");
                out.push(rel.to_string_lossy().into_owned());
            }
        }
        Ok(())
    }
    walk(&base, &base, &mut out)?;
    out.sort();
    Ok(out)
}

/// One test file's outcome.
#[derive(Debug, Clone)]
pub struct FileResult {
    pub file: String,
    /// Diffs reported by `Test`; `None` if the run stopped before the file finished.
    pub failures: Option<u64>,
    /// GAP's own figures for the file: CPU ms, GC ms (`TOTAL_GC_TIME`).
    pub ms: u64,
    pub gc_ms: u64,
    /// GASMAN builds: the longer of its last full and last partial collection after the
    /// file (CPU ms, `GasmanStatistics`), a sample of its pauses.
    pub gasman_pause_ms: Option<u64>,
}

/// One GAP process's run of test files.
pub struct RunOutcome {
    pub files: Vec<FileResult>,
    pub raw: RawRun,
}

impl RunOutcome {
    /// Sum of GAP's own GC-time figures.
    pub fn gap_gc_ms(&self) -> u64 {
        self.files.iter().map(|f| f.gc_ms).sum()
    }
    /// Sum of GAP's own CPU-time figures.
    pub fn gap_ms(&self) -> u64 {
        self.files.iter().map(|f| f.ms).sum()
    }
}

/// The GAP driver: runs each file with `Test` as GAP's `TestDirectory` does (its
/// `STOP_TEST` silenced, failures counted), printing a line per file to parse:
/// `gap-real: result <index> <failures> <cpu ms> <gc ms> <last full ms> <last partial ms>`
/// (the last two from `GasmanStatistics` on GASMAN builds, -1 otherwise).
fn driver(files: &[PathBuf]) -> String {
    let list: Vec<String> = files
        .iter()
        .map(|f| format!("  \"{}\"", f.display()))
        .collect();
    format!(
        "SizeScreen([4096, 24]);;\n\
         GapRealFiles := [\n{}\n];;\n\
         GapRealRun := function(files)\n\
           local stop, i, t, g, n, s, full, part;\n\
           stop := STOP_TEST;\n\
           STOP_TEST := function(arg) end;\n\
           for i in [1 .. Length(files)] do\n\
             Print(\"gap-real: testing \", i, \" \", files[i], \"\\n\");\n\
             t := Runtime();\n\
             g := TOTAL_GC_TIME();\n\
             n := Test(files[i], rec(returnNumFailures := true));\n\
             t := Runtime() - t;\n\
             g := TOTAL_GC_TIME() - g;\n\
             full := -1; part := -1;\n\
             if GAPInfo.KernelInfo.GC = \"GASMAN\" then\n\
               s := GasmanStatistics();\n\
               if IsBound(s.full) then full := s.full.time; fi;\n\
               if IsBound(s.partial) then part := s.partial.time; fi;\n\
             fi;\n\
             Print(\"\\ngap-real: result \", i, \" \", n, \" \", t, \" \", g, \" \", full, \" \", part, \"\\n\");\n\
           od;\n\
           STOP_TEST := stop;\n\
         end;;\n\
         GapRealRun(GapRealFiles);\n\
         QuitGap(0);\n",
        list.join(",\n")
    )
}

/// What one GAP process did.
pub struct RawRun {
    /// Its standard output.
    pub stdout: String,
    pub wall: Duration,
    /// Peak resident set of the process, in KiB (`ru_maxrss`).
    pub max_rss_kb: u64,
    /// The process's wait status (`wait4`).
    pub status: i32,
    /// gc-core's statistics at exit (`GC_CORE_STATS_FILE`), for our builds.
    pub gc_stats: Option<serde_json::Value>,
    /// GASMAN builds run with `gasman_pauses`: the wall time of each collection, from the
    /// moment its message started (`#G  FULL`/`#G  PART` on stderr) to its end (`free`).
    pub gasman_pauses: Vec<(bool, Duration)>,
    /// Where the output is kept.
    pub log: PathBuf,
}

/// Runs `script` (GAP code) in one process of `build`, with `env`, stopped after
/// `timeout`. With `gasman_pauses` (GASMAN builds), GAP prints a message at the start
/// and end of every collection (`-g -g`) on its standard error, which is read here and
/// timestamped to give the pauses.
pub fn run_gap(
    build: &Build,
    script: &str,
    env: &[(&str, String)],
    tag: &str,
    timeout: Duration,
    gasman_pauses: bool,
) -> Result<RawRun> {
    let runs = work_dir().join("runs");
    fs::create_dir_all(&runs)?;
    let stem = format!("{}-{tag}", build.variant.name());
    let script_path = runs.join(format!("{stem}.g"));
    let log = runs.join(format!("{stem}.log"));
    let stats = runs.join(format!("{stem}.stats.json"));
    let _ = fs::remove_file(&stats);
    fs::write(&script_path, script)?;
    let mut cmd = Command::new(build.dir.join("gap"));
    cmd.arg("-l")
        .arg(format!("{GAP_ROOT};{}", build.dir.display()))
        .args(["-q", "--nointeract"]);
    if gasman_pauses {
        cmd.args(["-g", "-g"]);
    }
    cmd.arg(&script_path)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&log)?)
        .stderr(if gasman_pauses {
            Stdio::piped()
        } else {
            Stdio::from(fs::File::options().append(true).open(&log)?)
        })
        .env("GC_CORE_STATS_FILE", &stats)
        // GAP's test output is compared as text; no colours.
        .env("TERM", "dumb");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", build.dir.join("gap").display()))?;
    let reader = child.stderr.take().map(|err| {
        let log = log.clone();
        std::thread::spawn(move || gasman_messages(err, &log))
    });
    let pid = child.id() as i32;
    let (status, rss) = wait_with_timeout(pid, timeout, &log)?;
    let wall = t0.elapsed();
    let gasman_pauses = match reader {
        Some(r) => r.join().unwrap_or_default(),
        None => Vec::new(),
    };
    let mut stdout = String::new();
    fs::File::open(&log)?.read_to_string(&mut stdout)?;
    let gc_stats = fs::read_to_string(&stats)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok());
    Ok(RawRun {
        stdout,
        wall,
        max_rss_kb: rss,
        status,
        gc_stats,
        gasman_pauses,
        log,
    })
}

/// Reads GAP's standard error as it comes, timestamping GASMAN's collection messages:
/// `#G  FULL ` / `#G  PART ` when a collection starts, `... free` at its end. Other
/// text is appended to `log`.
fn gasman_messages(mut err: impl Read, log: &Path) -> Vec<(bool, Duration)> {
    let mut pauses = Vec::new();
    let mut other = Vec::new();
    let mut open: Option<(bool, Instant)> = None;
    let mut pending = String::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match err.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = Instant::now();
        pending.push_str(&String::from_utf8_lossy(&buf[..n]));
        loop {
            if open.is_none() {
                let full = pending.find("#G  FULL ");
                let part = pending.find("#G  PART ");
                let at = match (full, part) {
                    (Some(f), Some(p)) => Some((f.min(p), f < p)),
                    (Some(f), None) => Some((f, true)),
                    (None, Some(p)) => Some((p, false)),
                    (None, None) => None,
                };
                let Some((i, is_full)) = at else {
                    // Keep a possible message start split across reads.
                    let keep = pending.len().saturating_sub(8);
                    let keep = (0..=keep)
                        .rev()
                        .find(|&k| pending.is_char_boundary(k))
                        .unwrap_or(0);
                    other.extend_from_slice(&pending.as_bytes()[..keep]);
                    pending.drain(..keep);
                    break;
                };
                other.extend_from_slice(&pending.as_bytes()[..i]);
                pending.drain(..i + 9);
                open = Some((is_full, now));
            } else if let Some(i) = pending.find("free\n") {
                let (is_full, start) = open.take().expect("open message");
                pauses.push((is_full, now - start));
                pending.drain(..i + 5);
            } else {
                break;
            }
        }
    }
    other.extend_from_slice(pending.as_bytes());
    if !other.is_empty() {
        if let Ok(mut f) = fs::File::options().append(true).open(log) {
            use std::io::Write;
            let _ = f.write_all(&other);
        }
    }
    pauses
}

/// Runs `files` (relative to `tst/testinstall`) in one GAP process of `build` with the
/// environment `env`, stopping it after `timeout`.
pub fn run_files(
    build: &Build,
    files: &[String],
    env: &[(&str, String)],
    tag: &str,
    timeout: Duration,
    gasman_pauses: bool,
) -> Result<RunOutcome> {
    let paths: Vec<PathBuf> = files
        .iter()
        .map(|f| build.dir.join("tst/testinstall").join(f))
        .collect();
    let raw = run_gap(build, &driver(&paths), env, tag, timeout, gasman_pauses)?;
    let mut results: Vec<FileResult> = files
        .iter()
        .map(|f| FileResult {
            file: f.clone(),
            failures: None,
            ms: 0,
            gc_ms: 0,
            gasman_pause_ms: None,
        })
        .collect();
    for line in raw.stdout.lines() {
        // A test may leave a partial line on standard output; the marker can follow it.
        let Some(at) = line.find("gap-real: result ") else {
            continue;
        };
        let rest = &line[at + "gap-real: result ".len()..];
        let n: Vec<i64> = rest
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if n.len() != 6 || n[0] < 1 || n[0] as usize > results.len() {
            continue;
        }
        let r = &mut results[n[0] as usize - 1];
        r.failures = Some(n[1].max(0) as u64);
        r.ms = n[2].max(0) as u64;
        r.gc_ms = n[3].max(0) as u64;
        r.gasman_pause_ms = (n[4] >= 0).then(|| n[4].max(n[5]) as u64);
    }
    Ok(RunOutcome {
        files: results,
        raw,
    })
}

/// Waits for child `pid` (polling, so that a hang is stopped after `timeout`); returns
/// its wait status and peak RSS in KiB.
fn wait_with_timeout(pid: i32, timeout: Duration, log: &Path) -> Result<(i32, u64)> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waiting for our own child with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            return Ok((status, ru.ru_maxrss.max(0) as u64));
        }
        if r < 0 {
            bail!(
                "waiting for GAP (pid {pid}): {}",
                std::io::Error::last_os_error()
            );
        }
        if start.elapsed() > timeout {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: as above, reaping it.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            bail!(
                "GAP (pid {pid}) did not finish within {} s and was killed; its output is in {}",
                timeout.as_secs(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A run's verdict against the pass criterion: every file outside
/// [`NEED_MISSING_FILES`] finished with 0 failures; those finished with GASMAN's diffs.
pub struct Verdict {
    pub passed: Vec<String>,
    pub failed: Vec<(String, String)>,
    pub missing_inputs: Vec<(String, u64)>,
}

pub fn verdict(out: &RunOutcome) -> Verdict {
    let mut v = Verdict {
        passed: Vec::new(),
        failed: Vec::new(),
        missing_inputs: Vec::new(),
    };
    for r in &out.files {
        let excused = NEED_MISSING_FILES
            .iter()
            .find(|(f, _)| *f == r.file)
            .map(|(_, n)| *n);
        match (r.failures, excused) {
            (None, _) => v
                .failed
                .push((r.file.clone(), "did not finish (GAP stopped)".into())),
            (Some(n), Some(expected)) if n == expected => {
                v.missing_inputs.push((r.file.clone(), n))
            }
            (Some(n), Some(expected)) => v.failed.push((
                r.file.clone(),
                format!("{n} failures where GASMAN has {expected} (missing inputs)"),
            )),
            (Some(0), None) => v.passed.push(r.file.clone()),
            (Some(n), None) => v.failed.push((r.file.clone(), format!("{n} failures"))),
        }
    }
    v
}

/// `cargo xtask gap-real MODE [--full]`: the test steps. Modes: `ours`, `stress`
/// (a forced collection every 20,000 allocations), `verify` (gc-core's verify mode:
/// every partial collection checks the remembered set, every queued reference is
/// validated; a collection forced every 300,000 allocations), `parallel` (the
/// per-thread `YoungRef` build with two mark threads).
pub fn run_mode(mode: &str, full: bool) -> Result<()> {
    let (variant, env, timeout_min): (Variant, Vec<(&str, String)>, u64) = match mode {
        "ours" => (Variant::Ours, vec![], 20),
        "stress" => (
            Variant::Ours,
            vec![("GC_CORE_STRESS", STRESS_EVERY.to_string())],
            40,
        ),
        "verify" => (
            Variant::Ours,
            vec![
                ("GC_CORE_VERIFY", "1".into()),
                ("GC_CORE_STRESS", VERIFY_STRESS_EVERY.to_string()),
            ],
            60,
        ),
        "parallel" => (
            Variant::OursPerThread,
            vec![("GC_CORE_MARK_THREADS", "2".into())],
            20,
        ),
        other => bail!("unknown gap-real mode '{other}': ours, stress, verify or parallel"),
    };
    let Some(src) = sources() else {
        return Ok(());
    };
    ensure_system()?;
    let prefix = prefix()?;
    let build = build(&src, variant, &prefix)?;
    let files: Vec<String> = if full {
        all_files(&build.dir)?
    } else {
        REPRESENTATIVE.iter().map(|s| s.to_string()).collect()
    };
    let tag = format!("{mode}{}", if full { "-full" } else { "" });
    println!(
        "gap-real: {} testinstall files, mode {mode} ({}), GAP 4.12.1 on gc-core",
        files.len(),
        if env.is_empty() {
            "defaults".to_string()
        } else {
            env.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    );
    let out = run_files(
        &build,
        &files,
        &env,
        &tag,
        Duration::from_secs(timeout_min * 60),
        false,
    )?;
    let v = verdict(&out);
    let stats = out.raw.gc_stats.as_ref();
    let num = |k: &str| stats.and_then(|s| s[k].as_f64()).unwrap_or(f64::NAN);
    println!(
        "gap-real: {} passed, {} failed{} ({:.1} s wall, GAP's own figures {} ms, {} ms in GC; \
         gc-core: {} full + {} partial collections, longest pause {:.1} ms, verify errors {}; \
         peak RSS {} MB)",
        v.passed.len(),
        v.failed.len(),
        if v.missing_inputs.is_empty() {
            String::new()
        } else {
            format!(
                ", {} not counted (they need GAP files outside the kernel tarball: {})",
                v.missing_inputs.len(),
                v.missing_inputs
                    .iter()
                    .map(|(f, n)| format!("{f} {n} diffs"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        out.raw.wall.as_secs_f64(),
        out.gap_ms(),
        out.gap_gc_ms(),
        num("full_collections"),
        num("partial_collections"),
        num("max_pause_ms"),
        num("verify_errors"),
        out.raw.max_rss_kb / 1024,
    );
    let mut problems: Vec<String> = v
        .failed
        .iter()
        .map(|(f, why)| format!("{f}: {why}"))
        .collect();
    if out.raw.status != 0 {
        problems.push(format!(
            "GAP exited with wait status {:#x}{}",
            out.raw.status,
            if libc::WIFSIGNALED(out.raw.status) {
                format!(" (signal {})", libc::WTERMSIG(out.raw.status))
            } else {
                String::new()
            }
        ));
    }
    match stats {
        None => problems.push("gc-core wrote no statistics (GC_CORE_STATS_FILE)".into()),
        Some(s) if s["verify_errors"].as_u64() != Some(0) => problems.push(format!(
            "gc-core's verify mode found {} errors",
            s["verify_errors"]
        )),
        Some(_) => {}
    }
    if !problems.is_empty() {
        bail!(
            "real GAP on gc-core, mode {mode}: {}; GAP's output is in {}",
            problems.join("; "),
            out.raw.log.display()
        );
    }
    Ok(())
}

/// The stress mode's interval: a collection every this many allocations per thread.
pub const STRESS_EVERY: u64 = 20_000;
/// The verify mode also forces collections, less often (each partial collection checks
/// every old object), so that it checks a hundred or so partial collections.
pub const VERIFY_STRESS_EVERY: u64 = 300_000;
