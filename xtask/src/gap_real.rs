//! Real GAP on our GC: GAP's own source trees (4.12.1 and 4.15.1, `src/julia_gc.c`
//! unmodified, configured `--with-gc=julia`) built against the Julia-compatibility
//! prefix (`julia_prefix.rs`: gc-core + gc-conservative, no libjulia; made by `cargo
//! xtask julia-prefix` for the Julia version each GAP is written for), running GAP's own
//! test files. The same source built with GAP's own collector (GASMAN) is the peer of
//! `cargo xtask bench gap-real` and the reference a failing file is compared with. The
//! test steps themselves (modes, `--repeat`, the GASMAN comparison) are
//! `gap_real_steps.rs`.
//!
//! Inputs: the full source trees `gap-4.12.1.tar.xz` and `gap-4.15.1.tar.xz` (in
//! `../shared/vendor/` next to the repository, or in the folder `GAP_VENDOR_DIR` names),
//! unpacked into the target directory's `gap-real/` and never committed; two data files
//! the trees lack (`grp/perf20.grp`, `grp/perf23.grp`) from Debian's `gap-libs`, and the
//! packages GAP needs (GAPDoc, PrimGrp, SmallGrp, TransGrp) from Debian, linked into the
//! tree's `pkg/`; the build tools (`autoconf`, `libgmp-dev`, `zlib1g-dev`), installed
//! with apt-get when missing. GAP runs as `gap -l <tree>`: its own library.
//!
//! Builds are cached in `<target>/gap-real/<version>-<variant>-<hash>/`, the hash covering
//! the tarball, the two data files, the package links, the prefix's headers (their
//! inline fast paths are compiled into GAP), the patch and the configure arguments; the
//! prefix's library is refreshed on every run (GAP links it dynamically).

use crate::julia_prefix::JuliaVersion;
use crate::steps::{root, target_dir};
use anyhow::{bail, Context, Result};
use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A folder holding the GAP tarballs, for a clone without `../shared`.
pub const VENDOR_ENV: &str = "GAP_VENDOR_DIR";
/// The vendored tarballs' folder, relative to the repository's parent.
const VENDORED: &str = "shared/vendor";
/// Debian's GAP data: the two data files the trees lack are in its `grp/`, the packages
/// in its `pkg/`.
pub const DEBIAN_GAP: &str = "/usr/share/gap";
/// The data files of the perfect groups library missing from both trees.
const MISSING_DATA: [&str; 2] = ["grp/perf20.grp", "grp/perf23.grp"];
/// The packages GAP needs to start, linked into the tree's `pkg/`.
const PACKAGES: [&str; 4] = ["GAPDoc", "PrimGrp", "SmallGrp", "TransGrp"];

/// The GAP releases the scenario builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GapVersion {
    /// GAP 4.12.1 (2022, Debian 12's): `julia_gc.c` written for Julia 1.6.
    V4_12_1,
    /// GAP 4.15.1 (the current release): `julia_gc.c` written for Julia 1.10.
    V4_15_1,
}

impl GapVersion {
    pub const ALL: [GapVersion; 2] = [GapVersion::V4_12_1, GapVersion::V4_15_1];

    pub fn as_str(self) -> &'static str {
        match self {
            GapVersion::V4_12_1 => "4.12.1",
            GapVersion::V4_15_1 => "4.15.1",
        }
    }

    /// Parses `4.12.1` or `4.15.1`.
    pub fn parse(s: &str) -> Result<GapVersion, String> {
        GapVersion::ALL
            .into_iter()
            .find(|v| v.as_str() == s.trim())
            .ok_or_else(|| format!("unknown GAP version '{s}': 4.12.1 or 4.15.1"))
    }

    fn tarball(self) -> String {
        format!("gap-{}.tar.xz", self.as_str())
    }

    /// The Julia version its `julia_gc.c` is written for: the prefix it builds against.
    pub fn julia(self) -> JuliaVersion {
        match self {
            GapVersion::V4_12_1 => JuliaVersion::V1_6,
            GapVersion::V4_15_1 => JuliaVersion::V1_10,
        }
    }

    /// The representative part of `tst/testinstall` that `cargo xtask test` runs.
    pub fn representative(self) -> Vec<&'static str> {
        let mut files = REPRESENTATIVE.to_vec();
        if self == GapVersion::V4_15_1 {
            files.extend(REPRESENTATIVE_4_15);
        }
        files
    }
}

/// Which kernel to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// GAP's `julia_gc.c` as released, on gc-core, against the prefix of the Julia
    /// version it is written for (4.12.1: one mark thread; 4.15.1: parallel marking).
    Ours,
    /// GAP's own collector, GASMAN (the default build).
    Gasman,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Ours => "ours",
            Variant::Gasman => "gasman",
        }
    }
}

/// A built kernel and library tree.
pub struct Build {
    /// The tree (GAP's root for `-l`, with the `gap` executable).
    pub dir: PathBuf,
    pub version: GapVersion,
    pub variant: Variant,
}

/// The tarball of `version`: in `GAP_VENDOR_DIR`, else in the vendored folder next to
/// the repository; `None` (with a message saying what to do) if it is not there.
pub fn tarball(version: GapVersion) -> Option<PathBuf> {
    let name = version.tarball();
    let (dir, from_env) = match std::env::var_os(VENDOR_ENV) {
        Some(d) => (PathBuf::from(d), true),
        None => (root().parent()?.join(VENDORED), false),
    };
    let path = dir.join(&name);
    if path.is_file() {
        return Some(path);
    }
    if from_env {
        println!(
            "gap-real: {VENDOR_ENV}={} has no {name}; skipping GAP {}",
            dir.display(),
            version.as_str()
        );
    } else {
        println!(
            "gap-real: skipping GAP {}: its source tree is not here ({} is absent). Point \
             {VENDOR_ENV} at a folder holding {name} (the project's shared vendor folder) to \
             run these steps.",
            version.as_str(),
            path.display()
        );
    }
    None
}

/// Debian's two data files and GAP packages and the build tools; installed when missing.
pub fn ensure_system() -> Result<()> {
    let pkg = |p: &str| format!("{DEBIAN_GAP}/pkg/{p}");
    let items = [
        (format!("{DEBIAN_GAP}/{}", MISSING_DATA[0]), "gap-libs"),
        (format!("{DEBIAN_GAP}/{}", MISSING_DATA[1]), "gap-libs"),
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
        "GAP's packages, two data files and the kernel build tools for the real-GAP scenario",
    )
}

/// Where builds, prefixes and run logs go: `<target>/gap-real`.
pub fn work_dir() -> Result<PathBuf> {
    Ok(target_dir()?.join("gap-real"))
}

/// The Julia-compatibility prefix for `version`, made by `cargo xtask julia-prefix`
/// (this binary's subcommand) in `<target>/gap-real/prefix-<julia version>`, with a fresh
/// library.
pub fn prefix(version: JuliaVersion) -> Result<PathBuf> {
    let dir = work_dir()?.join(format!("prefix-{}", version.as_str()));
    let status = crate::steps::xtask()
        .arg("julia-prefix")
        .arg(&dir)
        .args(["--julia-version", version.as_str()])
        .stdout(Stdio::null())
        .status()
        .context("running cargo xtask julia-prefix")?;
    if !status.success() {
        bail!(
            "cargo xtask julia-prefix {} --julia-version {} failed ({status})",
            dir.display(),
            version.as_str()
        );
    }
    Ok(dir)
}

fn configure_args(variant: Variant, prefix: &Path) -> Vec<String> {
    match variant {
        Variant::Gasman => vec![],
        Variant::Ours => vec![
            "--with-gc=julia".into(),
            format!("--with-julia={}", prefix.display()),
        ],
    }
}

/// Everything a build depends on, hashed.
fn build_key(tar: &Path, version: GapVersion, variant: Variant, prefix: &Path) -> Result<String> {
    let mut h = DefaultHasher::new();
    "gap-real build recipe 2".hash(&mut h);
    version.as_str().hash(&mut h);
    variant.name().hash(&mut h);
    fs::read(tar)
        .with_context(|| format!("reading {}", tar.display()))?
        .hash(&mut h);
    for f in MISSING_DATA {
        let p = Path::new(DEBIAN_GAP).join(f);
        fs::read(&p)
            .with_context(|| format!("reading {}", p.display()))?
            .hash(&mut h);
    }
    for p in PACKAGES {
        Path::new(DEBIAN_GAP).join("pkg").join(p).hash(&mut h);
    }
    configure_args(variant, prefix).hash(&mut h);
    if variant != Variant::Gasman {
        let inc = prefix.join("include/julia");
        let mut headers: Vec<PathBuf> = fs::read_dir(&inc)
            .with_context(|| format!("reading {}", inc.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        headers.sort();
        for f in headers {
            f.file_name().hash(&mut h);
            fs::read(&f)
                .with_context(|| format!("reading {}", f.display()))?
                .hash(&mut h);
        }
    }
    Ok(format!("{:016x}", h.finish()))
}

/// Builds (or finds cached) GAP `version` of `variant` from `tar`.
pub fn build(tar: &Path, version: GapVersion, variant: Variant, prefix: &Path) -> Result<Build> {
    let key = build_key(tar, version, variant, prefix)?;
    let dir = work_dir()?.join(format!("{}-{}-{key}", version.as_str(), variant.name()));
    if dir.join("gap").is_file() && dir.join(".built").is_file() {
        return Ok(Build {
            dir,
            version,
            variant,
        });
    }
    let t0 = Instant::now();
    println!(
        "gap-real: building GAP {} ({}) in {}",
        version.as_str(),
        match variant {
            Variant::Ours => format!(
                "--with-gc=julia, on gc-core, as a Julia {} client",
                version.julia().as_str()
            ),
            Variant::Gasman => "GASMAN".to_string(),
        },
        dir.display()
    );
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::create_dir_all(&dir)?;
    unpack(tar, &dir)?;
    for needed in ["src/julia_gc.c", "lib/init.g", "tst/testinstall"] {
        if !dir.join(needed).exists() {
            bail!(
                "{} is not a GAP source tree: {needed} is missing after unpacking",
                tar.display()
            );
        }
    }
    complete_tree(&dir)?;
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
    Ok(Build {
        dir,
        version,
        variant,
    })
}

/// Adds what the tarballs lack: Debian's two data files into `grp/`, links to Debian's
/// packages in `pkg/`.
fn complete_tree(dir: &Path) -> Result<()> {
    for f in MISSING_DATA {
        let to = dir.join(f);
        if !to.exists() {
            let from = Path::new(DEBIAN_GAP).join(f);
            fs::copy(&from, &to)
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        }
    }
    let pkg = dir.join("pkg");
    fs::create_dir_all(&pkg)?;
    for p in PACKAGES {
        let to = pkg.join(p);
        if !to.exists() {
            std::os::unix::fs::symlink(Path::new(DEBIAN_GAP).join("pkg").join(p), &to)
                .with_context(|| format!("linking {}", to.display()))?;
        }
    }
    Ok(())
}

fn unpack(tar: &Path, dir: &Path) -> Result<()> {
    let status = Command::new("tar")
        .arg("-xf")
        .arg(tar)
        .arg("-C")
        .arg(dir)
        .arg("--strip-components=1")
        .status()
        .context("running tar")?;
    if !status.success() {
        bail!("unpacking {} failed", tar.display());
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

/// Files new in GAP 4.15.1's testinstall that its subset adds: matrix objects,
/// univariate polynomials, discrete logarithms, abelian invariants.
pub const REPRESENTATIVE_4_15: [&str; 4] = [
    "MatrixObj/matobjplist.tst",
    "upoly.tst",
    "dlog.tst",
    "opers/AbelianInvariants.tst",
];

/// What names the copies of a test file with a forced collection inserted (the test
/// step's probe of a diff, `<stem>-collect-before-<line>.tst`, written next to the
/// file and removed after its run): never one of GAP's own files, so [`all_files`]
/// skips one that an interrupted run left behind.
pub const PROBE_MARK: &str = "-collect-before-";

/// Every `.tst` file below `tst/<suite>` (`testinstall`, `teststandard`), sorted as
/// GAP's `TestDirectory` does; probes ([`PROBE_MARK`]) are not GAP's and are left out.
pub fn all_files(tree: &Path, suite: &str) -> Result<Vec<String>> {
    let base = tree.join("tst").join(suite);
    let mut out = Vec::new();
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) -> Result<()> {
        for e in fs::read_dir(dir)? {
            let p = e?.path();
            if p.is_dir() {
                walk(&p, base, out)?;
            } else if p.extension().is_some_and(|x| x == "tst")
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().contains(PROBE_MARK))
            {
                let rel = p.strip_prefix(base).expect("below base");
                out.push(rel.to_string_lossy().into_owned());
            }
        }
        Ok(())
    }
    walk(&base, &base, &mut out)
        .with_context(|| format!("listing the test files in {}", base.display()))?;
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
    /// What GAP printed while testing the file (its diffs, if any).
    pub output: String,
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
/// `STOP_TEST` silenced, failures counted; the screen made wide again before each file,
/// which a test may have narrowed, so that no line GAP prints is wrapped), printing a
/// line before each file (`gap-real: testing <index>`) and one after it to parse:
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
             SizeScreen([4096, 24]);\n\
             Print(\"\\ngap-real: testing \", i, \"\\n\");\n\
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
    let runs = work_dir()?.join("runs");
    fs::create_dir_all(&runs)?;
    let stem = format!("{}-{}-{tag}", build.version.as_str(), build.variant.name());
    let script_path = runs.join(format!("{stem}.g"));
    let log = runs.join(format!("{stem}.log"));
    let stats = runs.join(format!("{stem}.stats.json"));
    let _ = fs::remove_file(&stats);
    fs::write(&script_path, script)?;
    let mut cmd = Command::new(build.dir.join("gap"));
    cmd.arg("-l").arg(&build.dir).args(["-q", "--nointeract"]);
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

/// Runs `files` (relative to `tst/<suite>`) in one GAP process of `build` with the
/// environment `env`, stopping it after `timeout`.
pub fn run_files(
    build: &Build,
    suite: &str,
    files: &[String],
    env: &[(&str, String)],
    tag: &str,
    timeout: Duration,
    gasman_pauses: bool,
) -> Result<RunOutcome> {
    let paths: Vec<PathBuf> = files
        .iter()
        .map(|f| build.dir.join("tst").join(suite).join(f))
        .collect();
    let raw = run_gap(build, &driver(&paths), env, tag, timeout, gasman_pauses)?;
    let files = parse_results(files, &raw.stdout);
    Ok(RunOutcome { files, raw })
}

/// The per-file results in a driver's output.
fn parse_results(files: &[String], stdout: &str) -> Vec<FileResult> {
    let mut results: Vec<FileResult> = files
        .iter()
        .map(|f| FileResult {
            file: f.clone(),
            failures: None,
            ms: 0,
            gc_ms: 0,
            gasman_pause_ms: None,
            output: String::new(),
        })
        .collect();
    let mut current: Option<usize> = None;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("gap-real: testing ") {
            current = rest
                .split_whitespace()
                .next()
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|&i| i >= 1 && i <= results.len())
                .map(|i| i - 1);
            continue;
        }
        // A test may leave a partial line on standard output; the marker can follow it.
        let Some(at) = line.find("gap-real: result ") else {
            if let Some(i) = current {
                results[i].output.push_str(line);
                results[i].output.push('\n');
            }
            continue;
        };
        if let Some(i) = current {
            results[i].output.push_str(&line[..at]);
        }
        current = None;
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
    for r in &mut results {
        r.output = r.output.trim().to_string();
    }
    results
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(GapVersion::parse("4.15.1"), Ok(GapVersion::V4_15_1));
        assert_eq!(GapVersion::parse("4.12.1"), Ok(GapVersion::V4_12_1));
        assert!(GapVersion::parse("4.13.0").unwrap_err().contains("4.13.0"));
        assert_eq!(GapVersion::V4_15_1.julia(), JuliaVersion::V1_10);
        assert_eq!(GapVersion::V4_12_1.julia(), JuliaVersion::V1_6);
    }

    /// The driver's output: results by index, each file's diff text kept apart, a
    /// marker after a partial line, and a file that never finished.
    #[test]
    fn results_and_diffs_are_read_per_file() {
        let files: Vec<String> = ["a.tst", "b.tst", "c.tst"].map(String::from).into();
        let out = "noise\n\
                   gap-real: testing 1\n\
                   gap-real: result 1 0 120 10 -1 -1\n\
                   gap-real: testing 2\n\
                   ########> Diff in /t/b.tst:3\n\
                   # But found:\n\
                   2\n\
                   partialgap-real: result 2 1 50 0 7 3\n\
                   gap-real: testing 3\n\
                   Segmentation fault\n";
        let r = parse_results(&files, out);
        assert_eq!((r[0].failures, r[0].ms, r[0].gc_ms), (Some(0), 120, 10));
        assert_eq!(r[0].output, "");
        assert_eq!(r[1].failures, Some(1));
        assert_eq!(r[1].gasman_pause_ms, Some(7));
        assert!(r[1].output.starts_with("########> Diff in /t/b.tst:3"));
        assert!(r[1].output.ends_with("2\npartial"), "{:?}", r[1].output);
        assert_eq!(r[2].failures, None);
        assert_eq!(r[2].output, "Segmentation fault");
    }

    /// GAP's test files, sorted, subdirectories included; a probe an interrupted test
    /// step left next to them is not one of them (the bench listed one once and then
    /// could not find it in the other build's tree).
    #[test]
    fn test_files_are_gaps_own() {
        let tree = std::env::temp_dir().join(format!("xtask-all-files-{}", std::process::id()));
        let suite = tree.join("tst").join("testinstall");
        fs::create_dir_all(suite.join("opers")).unwrap();
        for f in [
            "weakptr.tst",
            "opers/Normal.tst",
            "a.tst",
            "notes.txt",
            "weakptr-collect-before-121.tst",
        ] {
            fs::write(suite.join(f), "gap> 1;\n1\n").unwrap();
        }
        let files = all_files(&tree, "testinstall");
        let _ = fs::remove_dir_all(&tree);
        assert_eq!(
            files.unwrap(),
            ["a.tst", "opers/Normal.tst", "weakptr.tst"].map(String::from)
        );
    }
}
