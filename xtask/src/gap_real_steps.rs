//! `cargo xtask gap-real [--gap VERSION] [MODE] [--full] [--suite SUITE] [--repeat N]`:
//! the real-GAP test steps over the builds of `gap_real.rs`.
//!
//! Modes (the environment each run gets):
//! - `ours`: defaults. GAP 4.12.1 (a Julia 1.6 client) marks on one thread; GAP 4.15.1
//!   (a Julia 1.10 client) marks in parallel, one mark thread per core;
//! - `stress`: a collection every 20,000 allocations (`GC_CORE_STRESS`); 4.15.1 with
//!   two mark threads (`GC_CORE_MARK_THREADS=2`);
//! - `verify`: gc-core's verify mode (`GC_CORE_VERIFY=1`: every partial collection
//!   checks the remembered set, every queued reference is validated) and a collection
//!   every 300,000 allocations; 4.15.1 with two mark threads;
//! - `parallel` (4.12.1 only): two mark threads (`GC_CORE_MARK_THREADS=2`, the opt-in
//!   a Julia 1.6 client needs), GAP unmodified: its mark functions count young
//!   references in a global (`YoungRef`) that the threads race on, but gc-core counts
//!   them itself (the 1.6 prefix's `bits.gc` reads 0, so every reference is queued);
//! - `gasman`: GAP's own collector, the same tree (for comparison).
//!
//! A file passes when `Test` reports no diff. A file that fails on ours is run again on
//! the GASMAN build of the same tree: alone, then after the same files as in the run (GAP's
//! tests leave globals behind), then alone up to 49 times more (`GASMAN_TRIES`, within a
//! time budget): if GASMAN fails it with exactly the same diffs in one of those runs, the
//! file is reported as failing with GAP's own collector too (with the diffs' first lines
//! and the run that reproduced them: a cause outside the collector, such as Debian's
//! packages, shows at once; a race in GAP itself may take several) and does not fail the
//! step. Failing that, GASMAN runs the file once more with a collection forced before
//! the statement of the first diff (`forced_collection_reproduces`): the same diffs
//! there mean the test expects no collection between two statements, which a collector
//! running at any allocation (stress, verify) breaks now and then. Anything else fails
//! the step, as do a
//! crash, a file that did not finish, missing statistics and any verify error. In the
//! `gasman` mode every failing file fails the run.

use crate::gap_real::{
    self, all_files, build, ensure_system, tarball, Build, FileResult, GapVersion, RunOutcome,
    Variant,
};
use anyhow::{bail, Result};
use std::path::Path;
use std::time::Duration;

/// The stress mode's interval: a collection every this many allocations per thread.
pub const STRESS_EVERY: u64 = 20_000;
/// The verify mode also forces collections, less often (each partial collection checks
/// every old object), so that it checks a hundred or so partial collections.
pub const VERIFY_STRESS_EVERY: u64 = 300_000;

/// What `cargo xtask gap-real` was asked for.
pub struct Request {
    pub version: GapVersion,
    pub mode: String,
    /// Every file of the suite instead of the representative part (testinstall).
    pub full: bool,
    /// `testinstall` or `teststandard` (always every file).
    pub suite: String,
    /// Runs of the same files in a row, each a fresh GAP process.
    pub repeat: usize,
}

/// A mode: the build and the environment of its runs.
struct Mode {
    variant: Variant,
    env: Vec<(&'static str, String)>,
    timeout_min: u64,
}

fn mode(version: GapVersion, name: &str) -> Result<Mode> {
    let parallel = version == GapVersion::V4_15_1;
    let two = |mut env: Vec<(&'static str, String)>| {
        if parallel {
            env.push(("GC_CORE_MARK_THREADS", "2".into()));
        }
        env
    };
    Ok(match name {
        "ours" => Mode {
            variant: Variant::Ours,
            env: vec![],
            timeout_min: 20,
        },
        "stress" => Mode {
            variant: Variant::Ours,
            env: two(vec![("GC_CORE_STRESS", STRESS_EVERY.to_string())]),
            timeout_min: 40,
        },
        "verify" => Mode {
            variant: Variant::Ours,
            env: two(vec![
                ("GC_CORE_VERIFY", "1".into()),
                ("GC_CORE_STRESS", VERIFY_STRESS_EVERY.to_string()),
            ]),
            timeout_min: 60,
        },
        "parallel" if !parallel => Mode {
            variant: Variant::Ours,
            env: vec![("GC_CORE_MARK_THREADS", "2".into())],
            timeout_min: 20,
        },
        "parallel" => bail!(
            "GAP {} marks in parallel in every mode (it is a Julia 1.10 client); `parallel` is \
             GAP 4.12.1's mode with two mark threads opted into",
            version.as_str()
        ),
        "gasman" => Mode {
            variant: Variant::Gasman,
            env: vec![],
            timeout_min: 20,
        },
        other => bail!(
            "unknown gap-real mode '{other}': ours, stress, verify, {}gasman",
            if parallel { "" } else { "parallel, " }
        ),
    })
}

/// `cargo xtask gap-real`: builds what the request needs and runs it.
pub fn run(req: &Request) -> Result<()> {
    let mode_def = mode(req.version, &req.mode)?;
    if req.suite != "testinstall" && req.suite != "teststandard" {
        bail!(
            "unknown test suite '{}': testinstall or teststandard",
            req.suite
        );
    }
    if req.repeat == 0 {
        bail!("--repeat needs at least 1");
    }
    let Some(tar) = tarball(req.version) else {
        return Ok(());
    };
    ensure_system()?;
    let prefix = gap_real::prefix(req.version.julia())?;
    let b = build(&tar, req.version, mode_def.variant, &prefix)?;
    let files: Vec<String> = if req.full || req.suite == "teststandard" {
        all_files(&b.dir, &req.suite)?
    } else {
        let files: Vec<String> = req
            .version
            .representative()
            .iter()
            .map(|s| s.to_string())
            .collect();
        for f in &files {
            if !b.dir.join("tst/testinstall").join(f).is_file() {
                bail!(
                    "GAP {}'s testinstall has no {f} (the representative part names it)",
                    req.version.as_str()
                );
            }
        }
        files
    };
    let settings = if mode_def.env.is_empty() {
        "defaults".to_string()
    } else {
        mode_def
            .env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "gap-real: GAP {} {}, {} {} files, mode {} ({settings}){}",
        req.version.as_str(),
        if b.variant == Variant::Gasman {
            "with GASMAN".to_string()
        } else {
            format!("on gc-core (Julia {} client)", req.version.julia().as_str())
        },
        files.len(),
        req.suite,
        req.mode,
        if req.repeat > 1 {
            format!(", {} runs in a row", req.repeat)
        } else {
            String::new()
        }
    );
    let mut failed_runs = Vec::new();
    for round in 1..=req.repeat {
        let tag = format!(
            "{}-{}{}{}",
            req.suite,
            req.mode,
            if req.full { "-full" } else { "" },
            if req.repeat > 1 {
                format!("-{round}")
            } else {
                String::new()
            }
        );
        let out = gap_real::run_files(
            &b,
            &req.suite,
            &files,
            &mode_def.env,
            &tag,
            // teststandard takes GAP's own documentation's "up to an hour" and more.
            Duration::from_secs(if req.suite == "teststandard" {
                180 * 60
            } else {
                mode_def.timeout_min * 60
            }),
            false,
        )?;
        // teststandard: GASMAN runs the same files for the time comparison, which is also
        // the reference for failing files (the same files before each, as GAP's tests
        // leave globals behind).
        let peer = if req.suite == "teststandard" && b.variant != Variant::Gasman {
            Some(time_gasman(&tar, req.version, &prefix, &files, &req.suite)?)
        } else {
            None
        };
        let verdict = judge(&out, &b, &tar, &prefix, &req.suite, peer.as_ref())?;
        println!(
            "gap-real: {}{}",
            if req.repeat > 1 {
                format!("run {round}/{}: ", req.repeat)
            } else {
                String::new()
            },
            summary(&out, &verdict)
        );
        for (f, diffs) in &verdict.gasman_too {
            println!(
                "gap-real:   {f} fails with GAP's own collector (GASMAN) too, with the same \
                 diffs, so not a collector matter {}",
                indent(diffs, 6).trim_start()
            );
        }
        if let Some(peer) = &peer {
            let passed = peer.files.iter().filter(|r| r.failures == Some(0)).count();
            println!(
                "gap-real: {} time: gc-core {:.1} s wall (GAP's figures {:.1} s CPU, {:.1} s in GC), \
                 GASMAN {:.1} s wall ({:.1} s CPU, {:.1} s in GC; {passed} of {} files passed there); \
                 ratio {:.2}",
                req.suite,
                out.raw.wall.as_secs_f64(),
                out.gap_ms() as f64 / 1e3,
                out.gap_gc_ms() as f64 / 1e3,
                peer.raw.wall.as_secs_f64(),
                peer.gap_ms() as f64 / 1e3,
                peer.gap_gc_ms() as f64 / 1e3,
                files.len(),
                out.raw.wall.as_secs_f64() / peer.raw.wall.as_secs_f64()
            );
        }
        if !verdict.problems.is_empty() {
            let msg = format!(
                "real GAP {} {}, mode {}: {}; GAP's output is in {}",
                req.version.as_str(),
                if b.variant == Variant::Gasman {
                    "with GASMAN"
                } else {
                    "on gc-core"
                },
                req.mode,
                verdict.problems.join("; "),
                out.raw.log.display()
            );
            if req.repeat == 1 {
                bail!(msg);
            }
            println!("gap-real: run {round} FAILED: {msg}");
            failed_runs.push(round);
        }
    }
    if req.repeat > 1 {
        println!(
            "gap-real: {} runs in a row: {} failed{}",
            req.repeat,
            failed_runs.len(),
            if failed_runs.is_empty() {
                String::new()
            } else {
                format!(" (runs {failed_runs:?})")
            }
        );
        if !failed_runs.is_empty() {
            bail!(
                "{} of {} runs of GAP {}'s files failed in mode {}",
                failed_runs.len(),
                req.repeat,
                req.version.as_str(),
                req.mode
            );
        }
    }
    Ok(())
}

/// What a run ran: the build, its tarball and prefix, the suite.
#[derive(Clone, Copy)]
struct RunOf<'a> {
    build: &'a Build,
    tar: &'a Path,
    prefix: &'a Path,
    suite: &'a str,
}

/// A run's verdict.
struct Verdict {
    passed: usize,
    /// Files that fail with GASMAN too, with the same diffs (and those diffs' first
    /// lines).
    gasman_too: Vec<(String, String)>,
    /// What fails the run.
    problems: Vec<String>,
}

/// Judges a run: every file passes, or fails with GASMAN exactly as here; the process
/// exited normally; gc-core wrote its statistics and found no verify error. `peer`: a
/// GASMAN run of the same files, if there is one.
fn judge(
    out: &RunOutcome,
    b: &Build,
    tar: &Path,
    prefix: &Path,
    suite: &str,
    peer: Option<&RunOutcome>,
) -> Result<Verdict> {
    let mut v = Verdict {
        passed: 0,
        gasman_too: Vec::new(),
        problems: Vec::new(),
    };
    let mut failing: Vec<(usize, &FileResult)> = Vec::new();
    for (i, r) in out.files.iter().enumerate() {
        match r.failures {
            Some(0) => v.passed += 1,
            Some(_) => failing.push((i, r)),
            None => v
                .problems
                .push(format!("{}: did not finish (GAP stopped)", r.file)),
        }
    }
    if !failing.is_empty() {
        if b.variant == Variant::Gasman {
            // GAP's own collector's run: its failures are failures.
            for (_, r) in &failing {
                v.problems.push(format!(
                    "{}: {} failures:\n{}",
                    r.file,
                    r.failures.unwrap_or(0),
                    indent(&first_lines(&normalise(&r.output, b), 12), 6)
                ));
            }
        } else {
            let run = RunOf {
                build: b,
                tar,
                prefix,
                suite,
            };
            compare_with_gasman(&failing, out, &run, peer, &mut v)?;
        }
    }
    if out.raw.status != 0 {
        v.problems.push(format!(
            "GAP exited with wait status {:#x}{}",
            out.raw.status,
            if libc::WIFSIGNALED(out.raw.status) {
                format!(" (signal {})", libc::WTERMSIG(out.raw.status))
            } else {
                String::new()
            }
        ));
    }
    if b.variant != Variant::Gasman {
        match &out.raw.gc_stats {
            None => v
                .problems
                .push("gc-core wrote no statistics (GC_CORE_STATS_FILE)".into()),
            Some(s) if s["verify_errors"].as_u64() != Some(0) => v.problems.push(format!(
                "gc-core's verify mode found {} errors",
                s["verify_errors"]
            )),
            Some(_) => {}
        }
    }
    Ok(v)
}

/// How GASMAN is asked to reproduce failing files, batch by batch: each file alone
/// once; the run's files up to the last failing one, in the run's order (GAP's tests
/// leave globals behind, so a file's diffs may depend on the files before it); each
/// file alone 9 and 40 times more (a race in GAP itself may take several runs).
const GASMAN_TRIES: [Try; 4] = [Try::Alone(1), Try::InOrder, Try::Alone(9), Try::Alone(40)];
/// GASMAN's time budget for reproducing failures, per run.
const GASMAN_BUDGET: Duration = Duration::from_secs(600);

#[derive(Clone, Copy)]
enum Try {
    Alone(usize),
    InOrder,
}

/// A failing file waiting to be reproduced: its index in the run, its result, its
/// normalised diffs, GASMAN's runs of it so far and their outcomes.
struct Pending<'a> {
    index: usize,
    ours: &'a FileResult,
    diffs: String,
    runs: usize,
    seen: Vec<String>,
}

/// Files that failed on gc-core, run on the GASMAN build of the same tree
/// (`GASMAN_TRIES`, within `GASMAN_BUDGET`) until GASMAN fails each with exactly the same
/// diffs: not a collector matter (Debian's packages, a race in GAP itself). A file GASMAN
/// never fails that way is a problem of ours. `peer`: a GASMAN run of the same files in
/// the same order, if there is one (used as the in-order try).
fn compare_with_gasman(
    failing: &[(usize, &FileResult)],
    out: &RunOutcome,
    run: &RunOf<'_>,
    peer: Option<&RunOutcome>,
    v: &mut Verdict,
) -> Result<()> {
    let RunOf {
        build: b,
        tar,
        prefix,
        suite,
    } = *run;
    let order: Vec<String> = out.files.iter().map(|r| r.file.clone()).collect();
    let gasman = build(tar, b.version, Variant::Gasman, prefix)?;
    println!(
        "gap-real: {} file(s) failed on gc-core ({}); running them with GASMAN to compare",
        failing.len(),
        failing
            .iter()
            .map(|(_, r)| r.file.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut pending: Vec<Pending<'_>> = failing
        .iter()
        .map(|&(index, ours)| Pending {
            index,
            ours,
            diffs: normalise(&ours.output, b),
            runs: 0,
            seen: Vec::new(),
        })
        .collect();
    let started = std::time::Instant::now();
    for (batch, how) in GASMAN_TRIES.into_iter().enumerate() {
        let left = GASMAN_BUDGET.saturating_sub(started.elapsed());
        if pending.is_empty() || left.is_zero() {
            break;
        }
        // Each file's GASMAN results in this batch.
        let results: Vec<Vec<FileResult>> = match how {
            Try::InOrder => {
                let last = pending.iter().map(|p| p.index).max().unwrap_or(0);
                let run;
                let files = match peer {
                    Some(p) => &p.files,
                    None => {
                        run = gap_real::run_files(
                            &gasman,
                            suite,
                            &order[..=last],
                            &[],
                            &format!("{suite}-gasman-check-{batch}"),
                            Duration::from_secs(7200),
                            false,
                        )?;
                        &run.files
                    }
                };
                pending
                    .iter()
                    .map(|p| files.get(p.index).cloned().into_iter().collect())
                    .collect()
            }
            Try::Alone(tries) => {
                // As often as asked, within what is left of the budget at the time each
                // file took on gc-core (always once in the first batch).
                let reps: Vec<usize> = pending
                    .iter()
                    .map(|p| {
                        let per = Duration::from_millis(p.ours.ms + 100) * pending.len() as u32;
                        let fit = (left.as_millis() / per.as_millis().max(1)) as usize;
                        if batch == 0 {
                            tries
                        } else {
                            tries.min(fit)
                        }
                    })
                    .collect();
                if reps.iter().all(|&n| n == 0) {
                    break;
                }
                let names: Vec<String> = pending
                    .iter()
                    .zip(&reps)
                    .flat_map(|(p, &n)| std::iter::repeat_n(p.ours.file.clone(), n))
                    .collect();
                let run = gap_real::run_files(
                    &gasman,
                    suite,
                    &names,
                    &[],
                    &format!("{suite}-gasman-check-{batch}"),
                    Duration::from_secs(7200),
                    false,
                )?;
                let mut at = 0;
                reps.iter()
                    .map(|&n| {
                        at += n;
                        run.files[at - n..at].to_vec()
                    })
                    .collect()
            }
        };
        let mut still = Vec::new();
        for (mut p, theirs) in pending.into_iter().zip(results) {
            let hit = theirs.iter().position(|t| {
                t.failures == p.ours.failures && normalise(&t.output, &gasman) == p.diffs
            });
            for t in theirs.iter().take(hit.map_or(theirs.len(), |i| i + 1)) {
                p.runs += 1;
                let what = match t.failures {
                    Some(0) => "passed".to_string(),
                    Some(n) => format!("{n} failures"),
                    None => "did not finish".to_string(),
                };
                if !p.seen.contains(&what) {
                    p.seen.push(what);
                }
            }
            match hit {
                Some(_) => v.gasman_too.push((
                    p.ours.file.clone(),
                    format!(
                        "(GASMAN showed the same diffs {})\n{}",
                        match (how, p.runs) {
                            (Try::InOrder, _) => "after the same files before it".to_string(),
                            (_, 1) => "in its first run of the file".to_string(),
                            (_, n) => format!("in its run {n} of the file: a race in GAP itself"),
                        },
                        first_lines(&p.diffs, 12)
                    ),
                )),
                None => still.push(p),
            }
        }
        pending = still;
    }
    // What GASMAN never reproduced may be GAP's test expecting no collection between
    // two statements (a fresh object held only by a weak pointer): a collector that
    // can run at any allocation, as the stress and verify modes make ours, comes there
    // now and then. GASMAN is asked once more, with a collection forced there.
    let mut still = Vec::new();
    for p in pending {
        match forced_collection_reproduces(&p, &gasman, suite)? {
            Some(line) => v.gasman_too.push((
                p.ours.file.clone(),
                format!(
                    "(GASMAN showed the same diffs with a collection forced before line                      {line}: the test expects none between two statements there)\n{}",
                    first_lines(&p.diffs, 12)
                ),
            )),
            None => still.push(p),
        }
    }
    for p in still {
        v.problems.push(format!(
            "{}: {} failures on gc-core, which GASMAN did not reproduce in {} runs ({}); \
             the diffs on gc-core:\n{}",
            p.ours.file,
            p.ours.failures.unwrap_or(0),
            p.runs,
            p.seen.join(", "),
            indent(&first_lines(&p.diffs, 12), 6)
        ));
    }
    Ok(())
}

/// Runs `p`'s file on GASMAN once with `GASMAN("collect");;` inserted before the
/// statement of its first diff; returns that line if GASMAN then shows the same diffs
/// as gc-core did (line numbers mapped back past the inserted line).
fn forced_collection_reproduces(
    p: &Pending<'_>,
    gasman: &Build,
    suite: &str,
) -> Result<Option<usize>> {
    let file = &p.ours.file;
    let header = format!("Diff in <GAP tree>/tst/{suite}/{file}:");
    let Some(line) = first_diff_line(&p.diffs, &header) else {
        return Ok(None);
    };
    let dir = gasman.dir.join("tst").join(suite);
    let text = std::fs::read_to_string(dir.join(file))?;
    let mut lines: Vec<&str> = text.lines().collect();
    if line == 0 || !lines.get(line - 1).is_some_and(|l| l.starts_with("gap> ")) {
        return Ok(None);
    }
    lines.insert(line - 1, "gap> GASMAN(\"collect\");;");
    let stem = file.strip_suffix(".tst").unwrap_or(file);
    let probe = format!("{stem}{}{line}.tst", gap_real::PROBE_MARK);
    std::fs::write(dir.join(&probe), lines.join("\n") + "\n")?;
    let run = gap_real::run_files(
        gasman,
        suite,
        std::slice::from_ref(&probe),
        &[],
        &format!("{suite}-gasman-collect-probe"),
        Duration::from_secs(600),
        false,
    );
    let _ = std::fs::remove_file(dir.join(&probe));
    let run = run?;
    let Some(theirs) = run.files.first() else {
        return Ok(None);
    };
    let probe_header = format!("Diff in <GAP tree>/tst/{suite}/{probe}:");
    let mapped = map_diff_lines(
        &normalise(&theirs.output, gasman),
        &probe_header,
        &header,
        line,
    );
    Ok((theirs.failures == p.ours.failures && mapped == p.diffs).then_some(line))
}

/// The line number after the first `header` in `diffs`.
fn first_diff_line(diffs: &str, header: &str) -> Option<usize> {
    let at = diffs.find(header)? + header.len();
    let digits: String = diffs[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// `diffs` with each `from` header replaced by `to`, and its line number, when past
/// the line `inserted` was put before, one less.
fn map_diff_lines(diffs: &str, from: &str, to: &str, inserted: usize) -> String {
    let mut out = String::with_capacity(diffs.len());
    let mut rest = diffs;
    while let Some(at) = rest.find(from) {
        out.push_str(&rest[..at]);
        out.push_str(to);
        rest = &rest[at + from.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(n) = digits.parse::<usize>() {
            out.push_str(&(if n > inserted { n - 1 } else { n }).to_string());
            rest = &rest[digits.len()..];
        }
    }
    out.push_str(rest);
    out
}

/// A run's summary line.
fn summary(out: &RunOutcome, v: &Verdict) -> String {
    let stats = out.raw.gc_stats.as_ref();
    let num = |k: &str| stats.and_then(|s| s[k].as_f64()).unwrap_or(f64::NAN);
    let gc = if stats.is_some() {
        format!(
            "; gc-core: {} full + {} partial collections, {} mark threads ({} parallel drains), longest pause {:.1} ms, verify errors {}",
            num("full_collections"),
            num("partial_collections"),
            num("mark_threads"),
            num("parallel_drains"),
            num("max_pause_ms"),
            num("verify_errors"),
        )
    } else {
        String::new()
    };
    format!(
        "{} passed, {} failed{} ({:.1} s wall, GAP's own figures {} ms, {} ms in GC{gc}; peak RSS {} MB)",
        v.passed,
        out.files.len() - v.passed,
        if v.gasman_too.is_empty() {
            String::new()
        } else {
            format!(
                ", of which {} fail with GASMAN too ({})",
                v.gasman_too.len(),
                v.gasman_too
                    .iter()
                    .map(|(f, _)| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        out.raw.wall.as_secs_f64(),
        out.gap_ms(),
        out.gap_gc_ms(),
        out.raw.max_rss_kb / 1024,
    )
}

/// teststandard: the same files on GASMAN, timed (the peer of ours' run).
fn time_gasman(
    tar: &Path,
    version: GapVersion,
    prefix: &Path,
    files: &[String],
    suite: &str,
) -> Result<RunOutcome> {
    let gasman = build(tar, version, Variant::Gasman, prefix)?;
    gap_real::run_files(
        &gasman,
        suite,
        files,
        &[],
        &format!("{suite}-gasman-time"),
        Duration::from_secs(180 * 60),
        false,
    )
}

/// A file's diff text with the build's tree path replaced and the terminal's colour
/// codes removed, so that two builds' diffs compare (and read well).
fn normalise(text: &str, b: &Build) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters, then one final letter.
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        out.push(c);
    }
    out.replace(&b.dir.display().to_string(), "<GAP tree>")
}

fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut s = lines[..lines.len().min(n)].join("\n");
    if lines.len() > n {
        s.push_str(&format!("\n... ({} more lines)", lines.len() - n));
    }
    s
}

fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_lines_map_back_past_an_inserted_line() {
        let from = "Diff in <GAP tree>/tst/t/w-collect-before-121.tst:";
        let to = "Diff in <GAP tree>/tst/t/w.tst:";
        let theirs = format!("> {from}122\nx\n> {from}123\ny\n> {from}7\n");
        assert_eq!(
            map_diff_lines(&theirs, from, to, 121),
            format!("> {to}121\nx\n> {to}122\ny\n> {to}7\n")
        );
        assert_eq!(first_diff_line(&format!("a\n{to}121\n"), to), Some(121));
        assert_eq!(first_diff_line("no diff", to), None);
    }

    #[test]
    fn modes_by_version() {
        let m = mode(GapVersion::V4_15_1, "stress").unwrap();
        assert!(m.env.contains(&("GC_CORE_MARK_THREADS", "2".into())));
        assert!(mode(GapVersion::V4_15_1, "ours").unwrap().env.is_empty());
        assert!(mode(GapVersion::V4_15_1, "parallel").is_err());
        let p = mode(GapVersion::V4_12_1, "parallel").unwrap();
        assert_eq!(p.variant, Variant::Ours);
        assert!(p.env.contains(&("GC_CORE_MARK_THREADS", "2".into())));
        let s = mode(GapVersion::V4_12_1, "stress").unwrap();
        assert!(!s.env.iter().any(|(k, _)| *k == "GC_CORE_MARK_THREADS"));
        let e = mode(GapVersion::V4_12_1, "fast").err().unwrap().to_string();
        assert!(e.contains("fast") && e.contains("parallel"), "{e}");
    }

    #[test]
    fn diff_text_is_compared_without_the_tree_path() {
        let b = Build {
            dir: "/t/gap-real/4.15.1-ours-0123".into(),
            version: GapVersion::V4_15_1,
            variant: Variant::Ours,
        };
        let g = Build {
            dir: "/t/gap-real/4.15.1-gasman-4567".into(),
            version: GapVersion::V4_15_1,
            variant: Variant::Gasman,
        };
        assert_eq!(
            normalise("Diff in /t/gap-real/4.15.1-ours-0123/tst/x.tst:3", &b),
            normalise("Diff in /t/gap-real/4.15.1-gasman-4567/tst/x.tst:3", &g)
        );
        assert_eq!(
            normalise("\u{1b}[34m# Input is:\u{1b}[0m\n\u{1b}[2Kx", &b),
            "# Input is:\nx"
        );
        assert_eq!(first_lines("a\nb\nc", 2), "a\nb\n... (1 more lines)");
    }
}
