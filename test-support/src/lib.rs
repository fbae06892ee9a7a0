//! Test harness shared by the workspace's crates (a dev-dependency only).
//!
//! The crates' C tests all do the same four things: have cargo build the crate's
//! `cdylib` (which `cargo test` does not build), compile a C program against the crate's
//! headers and that library, run it as a child process and check its exit status and
//! output, and, in `cargo xtask test`, run it again under valgrind. Example snapshot tests
//! run an example binary that cargo built next to the test binary. This crate does each
//! once, with failure messages that name the program, the command and its output.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The C compiler: `$CC`, or `cc`.
pub fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Builds the `cdylib` of the crate whose manifest folder is `manifest_dir` (a test
/// passes `env!("CARGO_MANIFEST_DIR")`) and returns the folder holding `lib<name>.so`.
///
/// `cargo test` builds only the rlib, so this runs `cargo build --lib` for the crate, in
/// a target directory of its own under `target_tmpdir` (`env!("CARGO_TARGET_TMPDIR")`):
/// the outer cargo may hold the lock on the main one, and a cdylib next to the test
/// build's rlib confuses rustdoc. Cargo keeps it up to date with the sources; each crate
/// is built once per test process.
pub fn cdylib_dir(manifest_dir: &str, target_tmpdir: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<PathBuf, PathBuf>>> = OnceLock::new();
    let manifest = Path::new(manifest_dir).join("Cargo.toml");
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(dir) = built.get(&manifest) {
        return dir.clone();
    }
    let target = Path::new(target_tmpdir).join("cdylib");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "--lib", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .env_remove("RUSTFLAGS")
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "run cargo to build the cdylib of {}: {e}",
                manifest.display()
            )
        });
    assert!(
        status.success(),
        "building the cdylib of {} failed: {status}",
        manifest.display()
    );
    let dir = target.join("debug");
    built.insert(manifest, dir.clone());
    dir
}

/// A C program to compile with [`cc`] against headers and one shared library.
#[derive(Debug, Clone)]
pub struct CProgram {
    source: PathBuf,
    out: PathBuf,
    flags: Vec<String>,
    includes: Vec<PathBuf>,
    link: Option<(PathBuf, String)>,
}

impl CProgram {
    /// Compiles `source` into the executable `out`, with the flags every C test here
    /// uses: `-std=c11 -O1 -g -Wall -Wextra -Werror -pthread`.
    pub fn new(source: impl Into<PathBuf>, out: impl Into<PathBuf>) -> Self {
        CProgram {
            source: source.into(),
            out: out.into(),
            flags: [
                "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pthread",
            ]
            .map(String::from)
            .to_vec(),
            includes: Vec::new(),
            link: None,
        }
    }

    /// Adds compiler flags after the default ones.
    pub fn flags(mut self, flags: &[&str]) -> Self {
        self.flags.extend(flags.iter().map(|f| f.to_string()));
        self
    }

    /// Adds an include folder.
    pub fn include(mut self, dir: impl Into<PathBuf>) -> Self {
        self.includes.push(dir.into());
        self
    }

    /// Links `lib<name>.so` from `dir`, with `dir` as the program's run path.
    pub fn link(mut self, dir: impl Into<PathBuf>, name: &str) -> Self {
        let dir = dir.into();
        assert!(
            dir.join(format!("lib{name}.so")).exists(),
            "lib{name}.so not found in {}",
            dir.display()
        );
        self.link = Some((dir, name.to_string()));
        self
    }

    /// Compiles and returns the executable's path; panics with the compiler's exit
    /// status if it fails (its diagnostics went to the test's stderr).
    pub fn build(self) -> PathBuf {
        let mut cmd = Command::new(cc());
        cmd.args(&self.flags);
        for dir in &self.includes {
            cmd.arg("-I").arg(dir);
        }
        cmd.arg(&self.source).arg("-o").arg(&self.out);
        if let Some((dir, name)) = &self.link {
            cmd.arg("-L")
                .arg(dir)
                .arg(format!("-Wl,-rpath,{}", dir.display()))
                .arg(format!("-l{name}"));
        }
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("a C compiler ({}) is needed: {e}", cc()));
        assert!(
            status.success(),
            "compiling {} failed: {status}",
            self.source.display()
        );
        self.out
    }
}

/// Runs `cmd` and returns its stdout followed by its stderr; panics with both if it
/// exits unsuccessfully. `LD_LIBRARY_PATH` is removed first: cargo's may hold an older
/// build of the library, which would win over the program's run path.
pub fn run_ok(cmd: &mut Command) -> String {
    cmd.env_remove("LD_LIBRARY_PATH");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    format!("{stdout}{stderr}")
}

/// Whether to run valgrind tests: true when the environment variable `var` is set (as
/// `cargo xtask test` sets it), in which case valgrind must be installed; otherwise
/// prints why the test is skipped and returns false.
pub fn valgrind_requested(var: &str) -> bool {
    if std::env::var_os(var).is_none() {
        eprintln!("skipped: set {var}=1 (cargo xtask test does) to run under valgrind");
        return false;
    }
    let found = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(found, "{var} is set but valgrind is not installed");
    true
}

/// A `valgrind` command that fails (exit status 99) on any memcheck error, ready for the
/// program and its arguments; `extra` adds options (leak checking, scheduling).
pub fn valgrind(extra: &[&str]) -> Command {
    let mut cmd = Command::new("valgrind");
    cmd.args(["--error-exitcode=99", "--quiet", "--track-origins=no"])
        .args(extra);
    cmd
}

/// Runs the example `name` that cargo built for this test run (the `examples` folder
/// next to the test binary's), without `RUST_LOG`, and returns its stdout; panics with
/// its stderr if it fails.
pub fn example_output(name: &str) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binaries live in target/<profile>/deps");
    let path = dir.join("examples").join(name);
    let out = Command::new(&path)
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "the {name} example is built by cargo test ({}): {e}",
                path.display()
            )
        });
    assert!(
        out.status.success(),
        "example {name} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("example output is UTF-8")
}

/// Compiles the C translation unit `source` with `-fsyntax-only` (and `-std=c11 -Wall
/// -Werror` plus `flags`) against `includes`; returns the compiler's diagnostics if it
/// does not compile. Header drift tests use it to have the compiler compare two
/// declarations of the same functions or evaluate `_Static_assert`s.
pub fn c_syntax_check(source: &str, includes: &[&Path], flags: &[&str]) -> Result<(), String> {
    static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tu = std::env::temp_dir().join(format!("test-support-{}-{n}.c", std::process::id()));
    std::fs::write(&tu, source).unwrap_or_else(|e| panic!("write {}: {e}", tu.display()));
    let mut cmd = Command::new(cc());
    cmd.args(["-std=c11", "-Wall", "-Werror", "-fsyntax-only"])
        .args(flags);
    for dir in includes {
        cmd.arg("-I").arg(dir);
    }
    let out = cmd
        .arg(&tu)
        .output()
        .unwrap_or_else(|e| panic!("a C compiler ({}) is needed: {e}", cc()));
    let _ = std::fs::remove_file(&tu);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_check_reports_the_compilers_error() {
        assert_eq!(
            c_syntax_check("int main(void) { return 0; }\n", &[], &[]),
            Ok(())
        );
        let err = c_syntax_check("int f(int);\nlong f(int);\n", &[], &[]).unwrap_err();
        assert!(err.contains("conflicting types"), "{err}");
    }

    #[test]
    fn a_program_is_built_run_and_its_failure_reported() {
        let dir = std::env::temp_dir().join(format!("test-support-prog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("p.c");
        std::fs::write(
            &src,
            "#include <stdio.h>\nint main(int argc, char **argv) { (void)argv; printf(\"args=%d\\n\", argc); return argc > 1; }\n",
        )
        .unwrap();
        let exe = CProgram::new(&src, dir.join("p")).build();
        assert_eq!(run_ok(&mut Command::new(&exe)), "args=1\n");
        let failed = std::panic::catch_unwind(|| run_ok(Command::new(&exe).arg("x")));
        let msg = *failed.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("failed") && msg.contains("args=2"), "{msg}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
