//! Shared helpers for the integration tests: building C fixtures into shared libraries
//! with the system C compiler (through the `cc` crate), once per test run.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Directory with the C sources of the fixtures.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
}

/// Directory where built fixtures go.
pub fn out_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("elf-loader-fixtures");
    std::fs::create_dir_all(&d).expect("create fixture output directory");
    d
}

static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// The C (or C++) compiler as the `cc` crate finds it (honours `CC`/`CXX`).
pub fn compiler(cpp: bool) -> Command {
    let mut b = cc::Build::new();
    b.cargo_metadata(false)
        .cargo_warnings(false)
        .target("x86_64-unknown-linux-gnu")
        .host("x86_64-unknown-linux-gnu")
        .opt_level(1)
        .cpp(cpp);
    b.get_compiler().to_command()
}

/// Builds `lib<name>.so` from `sources` (relative to the fixtures directory) with extra
/// compiler/linker `args`; rebuilt when a source is newer than the output.
pub fn build_so(name: &str, sources: &[&str], args: &[&str]) -> PathBuf {
    let _g = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let out = out_dir().join(format!("lib{name}.so"));
    let srcs: Vec<PathBuf> = sources.iter().map(|s| fixtures_dir().join(s)).collect();
    let fresh = out
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .is_some_and(|t| {
            srcs.iter().all(|s| {
                s.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|st| st <= t)
            })
        });
    if fresh {
        return out;
    }
    let cpp = sources.iter().any(|s| s.ends_with(".cpp"));
    let mut cmd = compiler(cpp);
    cmd.args(["-shared", "-fPIC", "-g", "-Wall", "-o"])
        .arg(&out);
    cmd.args(&srcs);
    cmd.arg(format!("-L{}", out_dir().display()));
    cmd.args(args);
    let o = cmd.output().expect("run the C compiler");
    assert!(
        o.status.success(),
        "building {name} failed: {:?} {:?}\n{}",
        cmd.get_program(),
        cmd.get_args().collect::<Vec<_>>(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Builds an executable from C `sources` with `args`.
pub fn build_exe(name: &str, sources: &[PathBuf], args: &[String]) -> PathBuf {
    let _g = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let out = out_dir().join(name);
    let mut cmd = compiler(false);
    cmd.args(["-g", "-Wall", "-o"])
        .arg(&out)
        .args(sources)
        .args(args);
    let o = cmd.output().expect("run the C compiler");
    assert!(
        o.status.success(),
        "building {name} failed: {:?} {:?}\n{}",
        cmd.get_program(),
        cmd.get_args().collect::<Vec<_>>(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// The process's mappings, minus those that change on their own (heap, stack, vdso)
/// and those of threads' stacks: used to check that unloading restores the map.
pub fn maps_snapshot() -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .filter(|l| !l.contains('[') && l.split_whitespace().count() >= 6)
        .map(|l| l.to_string())
        .collect()
}
