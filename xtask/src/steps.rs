//! Running named steps: each prints its name, runs one command, reports its time, and
//! turns a non-zero exit into an error that names the step.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// The workspace root (the parent of the xtask crate).
pub fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Cargo's target directory for the workspace (`CARGO_TARGET_DIR`, a configured
/// `build.target-dir`, or `<root>/target`), as `cargo metadata` reports it: where xtask
/// keeps what it builds besides cargo's own output (the real-GAP builds), so that a
/// read-only checkout works with a target directory elsewhere.
pub fn target_dir() -> Result<PathBuf> {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(d) = DIR.get() {
        return Ok(d.clone());
    }
    let mut meta = cargo();
    meta.args(["metadata", "--format-version", "1", "--no-deps"])
        .stderr(std::process::Stdio::inherit());
    let out = meta.output().context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed ({})", out.status);
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading cargo metadata's output")?;
    let Some(dir) = v["target_directory"].as_str() else {
        bail!("cargo metadata reported no target_directory");
    };
    Ok(DIR.get_or_init(|| PathBuf::from(dir)).clone())
}

/// A `cargo` command run from the workspace root, using the cargo that started xtask.
pub fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root());
    cmd
}

/// Whether `cmd` runs and exits with status 0 (its output is discarded).
pub fn succeeds(mut cmd: Command) -> bool {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A sequence of named steps with a running count, for readable progress output.
pub struct Steps {
    total: usize,
    done: usize,
    started: Instant,
    prefix: &'static str,
}

impl Steps {
    /// A sequence of `total` steps whose lines start with `prefix`.
    pub fn new(prefix: &'static str, total: usize) -> Self {
        Steps {
            total,
            done: 0,
            started: Instant::now(),
            prefix,
        }
    }

    /// Runs `cmd` as the next step called `name`; fails with a message naming the step.
    pub fn run(&mut self, name: &str, mut cmd: Command) -> Result<()> {
        self.done += 1;
        println!(
            "\n==> [{}/{}] {}: {}",
            self.done, self.total, self.prefix, name
        );
        println!("    $ {}", describe(&cmd));
        let start = Instant::now();
        let status = cmd
            .status()
            .with_context(|| format!("step '{name}': could not start {}", describe(&cmd)))?;
        let secs = start.elapsed().as_secs_f64();
        if !status.success() {
            bail!(
                "step '{name}' failed ({status}) after {secs:.1}s; \
                 fix it and run `cargo xtask {}` again",
                self.prefix
            );
        }
        println!("    ok: {name} ({secs:.1}s)");
        Ok(())
    }

    /// Prints the closing line.
    pub fn finish(&self) {
        println!(
            "\n{}: all {} steps passed in {:.1}s",
            self.prefix,
            self.done,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// The command line of `cmd`, with the environment variables it sets, for the log.
fn describe(cmd: &Command) -> String {
    let mut out = String::new();
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            out.push_str(&format!(
                "{}={} ",
                key.to_string_lossy(),
                value.to_string_lossy()
            ));
        }
    }
    out.push_str(&cmd.get_program().to_string_lossy());
    for arg in cmd.get_args() {
        out.push(' ');
        out.push_str(&arg.to_string_lossy());
    }
    out
}

/// This xtask binary, for steps that are xtask subcommands (run from the workspace root).
pub fn xtask() -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap_or_else(|_| "cargo-xtask".into()));
    cmd.current_dir(root());
    cmd
}

/// Whether `program` is on the PATH.
pub fn have(program: &str) -> bool {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &format!("command -v {program}")]);
    succeeds(cmd)
}

/// Installs, with one apt-get run, the Debian packages of the `(program, package)` pairs
/// whose program is not on the PATH; says what it installs and why.
pub fn ensure_apt_tools(tools: &[(&str, &str)], why: &str) -> Result<()> {
    ensure_apt_packages(tools, have, why)
}

/// Installs, with one apt-get run, the Debian packages of the `(thing, package)` pairs
/// whose thing is not `present` (a program on the PATH, a library file, ...); says what
/// it installs and why, and fails naming what is still missing afterwards.
pub fn ensure_apt_packages(
    items: &[(&str, &str)],
    present: impl Fn(&str) -> bool,
    why: &str,
) -> Result<()> {
    let missing: Vec<&str> = items
        .iter()
        .filter(|(thing, _)| !present(thing))
        .map(|(_, package)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!(
        "xtask: installing {} with apt-get ({why})",
        missing.join(", ")
    );
    let update = Command::new("apt-get").args(["update", "-qq"]).status();
    if !matches!(update, Ok(s) if s.success()) {
        println!("xtask: apt-get update failed; trying the install anyway");
    }
    let status = Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .with_context(|| format!("running apt-get to install {}", missing.join(", ")))?;
    let still: Vec<&str> = items
        .iter()
        .filter(|(thing, _)| !present(thing))
        .map(|(thing, _)| *thing)
        .collect();
    if !status.success() || !still.is_empty() {
        bail!(
            "needed {} and `apt-get install {}` failed ({status})",
            still.join(", "),
            missing.join(" ")
        );
    }
    Ok(())
}
