//! Test harness shared by the workspace's crates (a dev-dependency only).
//!
//! The crates' C tests all do the same four things: have cargo build the crate's
//! `cdylib` (which `cargo test` does not build), compile a C program against the crate's
//! headers and that library, run it as a child process and check its exit status and
//! output, and, in `cargo xtask test`, run it again under valgrind. Example snapshot tests
//! run an example binary that cargo built next to the test binary. This crate does each
//! once, with failure messages that name the program, the command and its output.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// How long [`wait_until`] waits before it fails.
pub const WAIT_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until `cond` holds, looking every 200 us, and panics naming `what` after
/// [`WAIT_BOUND`]: the one wait of the workspace's tests for a state they cannot be told
/// about (a GIL's queue, another thread's progress inside a library). The pause only
/// spaces the looks: the outcome is `cond`'s, and the bound turns a hang into a failure.
/// Where a test can be told (its own threads), it uses a channel, a barrier or a
/// condition variable instead.
#[track_caller]
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < WAIT_BOUND,
            "timed out after {WAIT_BOUND:?} waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

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

/// For a test that must not share process-wide state with the tests running beside it
/// (libtest runs a binary's tests on threads of one process): in the test binary's
/// process, runs the test `name` (its path, e.g. `basics::the_test`) again alone in a
/// child process and panics with its output if it fails, then returns `false`; in that
/// child, returns `true`, and the caller does the test's work.
pub fn alone_in_a_process(name: &str) -> bool {
    const CHILD: &str = "TEST_SUPPORT_ALONE";
    if std::env::var_os(CHILD).is_some_and(|v| v == name) {
        return true;
    }
    let out = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, name)
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name}, alone in a process ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

/// The path of the example `name` that cargo builds for this test run (the `examples`
/// folder next to the test binary's `deps`).
pub fn example_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binaries live in target/<profile>/deps");
    dir.join("examples").join(name)
}

/// Runs the example `name` that cargo built for this test run (the `examples` folder
/// next to the test binary's), without `RUST_LOG`, and returns its stdout; panics with
/// its stderr if it fails.
pub fn example_output(name: &str) -> String {
    let path = example_path(name);
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

/// Checks the generated block `block` in the C header at `header`: the header must hold
/// it verbatim, from its first line (`/* BEGIN <name>...`) to its last (`/* END
/// <name> */`). The shared status codes of `ffi-support` (`ffi_support::c_block()`) are
/// carried by every header this way. With `FFI_BLESS=1` in the environment a differing
/// (or empty, `/* BEGIN <name> */` directly followed by the end line) block is rewritten
/// in place instead, and the check passes.
pub fn check_header_block(header: &Path, block: &str) -> Result<(), String> {
    let text =
        std::fs::read_to_string(header).map_err(|e| format!("read {}: {e}", header.display()))?;
    let first = block.lines().next().ok_or("the block is empty")?;
    let last = block.lines().last().unwrap_or(first);
    let name = first
        .split_whitespace()
        .nth(2)
        .map(|n| n.trim_end_matches(':'))
        .ok_or_else(|| format!("the block's first line {first:?} is not `/* BEGIN <name>...`"))?;
    let begin = format!("/* BEGIN {name}");
    let start = text
        .find(&begin)
        .ok_or_else(|| format!("{} has no `{begin}` line", header.display()))?;
    let end = text[start..]
        .find(last)
        .map(|i| start + i + last.len())
        .ok_or_else(|| format!("{} has no `{last}` line after `{begin}`", header.display()))?;
    let end = if text[end..].starts_with('\n') {
        end + 1
    } else {
        end
    };
    if &text[start..end] == block {
        return Ok(());
    }
    if std::env::var_os("FFI_BLESS").is_some() {
        let updated = format!("{}{block}{}", &text[..start], &text[end..]);
        std::fs::write(header, updated).map_err(|e| format!("write {}: {e}", header.display()))?;
        return Ok(());
    }
    Err(format!(
        "{} holds a different `{name}` block than its generator (rerun with FFI_BLESS=1 to \
         rewrite it); expected:\n{block}\nfound:\n{}",
        header.display(),
        &text[start..end]
    ))
}

/// The names of the `pub ... extern "C" fn` functions defined in a Rust source (a C
/// layer's `lib.rs`).
pub fn rust_c_functions(rust_source: &str) -> BTreeSet<String> {
    rust_source
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub "))
        .filter_map(|l| l.split("extern \"C\" fn ").nth(1))
        .map(|r| r.split('(').next().unwrap_or_default().trim().to_string())
        .collect()
}

/// The names of the functions a C header declares (not typedefs, not `static inline`
/// definitions, not what is inside `#ifdef __cplusplus` or a brace block).
pub fn header_functions(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut decl = String::new();
    let mut depth = 0i32;
    let mut in_cplusplus = false;
    let mut in_comment = false;
    for line in text.lines() {
        let mut t = line.trim().to_string();
        // Drop comments (they may span lines).
        let mut code = String::new();
        while !t.is_empty() {
            if in_comment {
                match t.find("*/") {
                    Some(i) => {
                        t = t[i + 2..].to_string();
                        in_comment = false;
                    }
                    None => t.clear(),
                }
            } else {
                match t.find("/*") {
                    Some(i) => {
                        code.push_str(&t[..i]);
                        t = t[i + 2..].to_string();
                        in_comment = true;
                    }
                    None => {
                        code.push_str(&t);
                        t.clear();
                    }
                }
            }
        }
        let t = code.trim();
        if t.starts_with("#ifdef __cplusplus") {
            in_cplusplus = true;
        }
        if in_cplusplus {
            in_cplusplus = !t.starts_with("#endif");
            continue;
        }
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        depth += t.matches('{').count() as i32 - t.matches('}').count() as i32;
        if depth > 0 || t.starts_with('}') || t.ends_with('}') {
            // Inside or at the end of a body (a one-line `static inline` function too).
            decl.clear();
            continue;
        }
        decl.push_str(t);
        decl.push(' ');
        if t.ends_with(';') {
            if !decl.starts_with("typedef") && !decl.starts_with("static") && decl.contains('(') {
                let before = decl.split('(').next().unwrap_or_default();
                let name = before
                    .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or_default();
                names.insert(name.to_string());
            }
            decl.clear();
        }
    }
    names
}

/// The header drift check shared by the C layers: cbindgen's declarations of a crate's
/// `extern "C"` functions, compiled in one translation unit after the hand-written
/// header, so a parameter or return type that differs is the compiler's "conflicting
/// types" error. Types and constants the header defines itself are excluded from
/// cbindgen's output (`exclude`; `#define` lines are always dropped: constants are
/// checked with `_Static_assert`s by the crate's test).
#[derive(Debug, Clone)]
pub struct DeclarationCheck {
    crate_dir: PathBuf,
    include_dir: PathBuf,
    header: String,
    exclude: Vec<String>,
    prelude: String,
    replace: Vec<(String, String)>,
}

impl DeclarationCheck {
    /// Checks the `extern "C"` functions of the crate at `crate_dir` against
    /// `include_dir/header`.
    pub fn new(
        crate_dir: impl Into<PathBuf>,
        include_dir: impl Into<PathBuf>,
        header: &str,
    ) -> Self {
        DeclarationCheck {
            crate_dir: crate_dir.into(),
            include_dir: include_dir.into(),
            header: header.to_string(),
            exclude: Vec::new(),
            prelude: String::new(),
            replace: Vec::new(),
        }
    }

    /// Items cbindgen must not declare (the header's own types and constants).
    pub fn exclude(mut self, items: &[&str]) -> Self {
        self.exclude.extend(items.iter().map(|s| s.to_string()));
        self
    }

    /// C text put between the header and cbindgen's declarations (typedefs naming the
    /// header's types the way the Rust side spells them).
    pub fn prelude(mut self, text: &str) -> Self {
        self.prelude.push_str(text);
        self
    }

    /// Replaces `from` by `to` in cbindgen's declarations.
    pub fn replace(mut self, from: &str, to: &str) -> Self {
        self.replace.push((from.to_string(), to.to_string()));
        self
    }

    /// cbindgen's declarations (after the replacements), as compiled.
    pub fn declarations(&self) -> String {
        let config = cbindgen::Config {
            language: cbindgen::Language::C,
            style: cbindgen::Style::Tag,
            usize_is_size_t: true,
            export: cbindgen::ExportConfig {
                exclude: self.exclude.clone(),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut out = Vec::new();
        cbindgen::Builder::new()
            .with_crate(&self.crate_dir)
            .with_config(config)
            .with_parse_expand(&[] as &[&str])
            .generate()
            .unwrap_or_else(|e| panic!("cbindgen parses {}: {e}", self.crate_dir.display()))
            .write(&mut out);
        let mut decls: String = String::from_utf8_lossy(&out)
            .lines()
            .filter(|l| !l.starts_with("#define"))
            .collect::<Vec<_>>()
            .join("\n");
        for (from, to) in &self.replace {
            decls = decls.replace(from, to);
        }
        decls
    }

    /// Compiles the header and cbindgen's declarations together; `Err` holds the
    /// compiler's diagnostics and cbindgen's view.
    pub fn run(&self) -> Result<(), String> {
        let decls = self.declarations();
        let n = std::process::id();
        let dir = std::env::temp_dir().join(format!(
            "test-support-decls-{n}-{}",
            self.header.replace(['/', '.'], "_")
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::write(
            dir.join("from_rust.h"),
            format!("{}\n{decls}\n", self.prelude),
        )
        .map_err(|e| format!("write from_rust.h: {e}"))?;
        let checked = c_syntax_check(
            &format!(
                "#include \"{}\"\n#include \"from_rust.h\"\nint main(void) {{ return 0; }}\n",
                self.header
            ),
            &[&self.include_dir, &dir],
            &[],
        );
        let _ = std::fs::remove_dir_all(&dir);
        checked.map_err(|err| {
            format!(
                "{} disagrees with the extern \"C\" functions of {}:\n{err}\n--- cbindgen's view ---\n{decls}",
                self.header,
                self.crate_dir.display()
            )
        })
    }
}

/// Checks C constant expressions against the Rust values: each `(expr, value)` becomes
/// `_Static_assert((expr) == (value))` in one translation unit including `header` from
/// `includes`; `Err` holds the failing assertions.
pub fn check_constants(
    header: &str,
    includes: &[&Path],
    checks: &[(String, String)],
) -> Result<(), String> {
    let body: String = checks
        .iter()
        .map(|(c, v)| format!("_Static_assert(({c}) == ({v}), \"{c} == {v}\");\n"))
        .collect();
    c_syntax_check(
        &format!(
            "#include <stddef.h>\n#include \"{header}\"\n{body}int main(void) {{ return 0; }}\n"
        ),
        includes,
        &[],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_returns_once_the_condition_holds() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || tx.send(()).unwrap());
        let mut got = false;
        wait_until("the message", || {
            got |= rx.try_recv().is_ok();
            got
        });
        t.join().unwrap();
        assert!(got);
    }

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
    fn a_header_block_must_match_verbatim() {
        let dir = std::env::temp_dir().join(format!("test-support-block-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let h = dir.join("h.h");
        let block = "/* BEGIN codes: generated */\n#define A 1\n/* END codes */\n";
        std::fs::write(&h, format!("#pragma once\n{block}int f(void);\n")).unwrap();
        assert_eq!(check_header_block(&h, block), Ok(()));
        std::fs::write(
            &h,
            "#pragma once\n/* BEGIN codes: generated */\n#define A 2\n/* END codes */\n",
        )
        .unwrap();
        let err = check_header_block(&h, block).unwrap_err();
        assert!(err.contains("different `codes` block"), "{err}");
        std::fs::write(&h, "#pragma once\n").unwrap();
        assert!(check_header_block(&h, block)
            .unwrap_err()
            .contains("no `/* BEGIN codes`"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn function_lists_of_both_sides() {
        let rust = "pub unsafe extern \"C\" fn a(x: i32) -> i32 { x }\n#[no_mangle]\npub extern \"C\" fn b() {}\ntype F = unsafe extern \"C\" fn(i32);\n";
        assert_eq!(rust_c_functions(rust), ["a", "b"].map(String::from).into());
        let header = "/* int commented(void); */\ntypedef void (*f)(int);\nstatic inline int g(void) { return 0; }\nint a(int x);\nvoid b(void);\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n";
        assert_eq!(
            header_functions(header),
            ["a", "b"].map(String::from).into()
        );
    }

    #[test]
    fn constant_checks_fail_on_a_different_value() {
        let dir = std::env::temp_dir().join(format!("test-support-const-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("k.h"), "#define K (-3)\n").unwrap();
        assert_eq!(
            check_constants("k.h", &[&dir], &[("K".into(), "-3".into())]),
            Ok(())
        );
        assert!(check_constants("k.h", &[&dir], &[("K".into(), "3".into())]).is_err());
        let _ = std::fs::remove_dir_all(&dir);
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
