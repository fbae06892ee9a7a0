//! Shared helpers for the integration tests (elf-loader's, and elf-loader-capi's, which
//! include this file): building C fixtures into shared libraries with the system C
//! compiler (through the `cc` crate), once per test run.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// elf-loader's folder: the manifest folder of the tests including this module
/// (elf-loader's own, or `capi/`'s, whose C-ABI tests load the same fixtures).
pub fn elf_loader_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    if manifest.join("tests/fixtures").is_dir() {
        manifest.to_path_buf()
    } else {
        manifest.join("..")
    }
}

/// Directory with the C sources of the fixtures.
pub fn fixtures_dir() -> PathBuf {
    elf_loader_dir().join("tests").join("fixtures")
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

/// Builds an executable from C (or C++) `sources` with `args`.
pub fn build_exe(name: &str, sources: &[PathBuf], args: &[String]) -> PathBuf {
    let _g = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let out = out_dir().join(name);
    let cpp = sources
        .iter()
        .any(|s| s.extension().is_some_and(|e| e == "cpp"));
    let mut cmd = compiler(cpp);
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

/// The `DT_NEEDED` entries of an ELF file, read with `readelf -d`.
pub fn needed(path: &Path) -> Vec<String> {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(path)
        .output()
        .expect("run readelf");
    assert!(out.status.success(), "readelf -d {} failed", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
        .collect()
}

/// pyenv's root: `$PYENV_ROOT`, else `pyenv root`, else `~/.pyenv`.
pub fn pyenv_root() -> PathBuf {
    if let Some(r) = std::env::var_os("PYENV_ROOT") {
        return PathBuf::from(r);
    }
    if let Ok(o) = Command::new("pyenv").arg("root").output() {
        if o.status.success() {
            return PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
        }
    }
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".pyenv")
}

/// For each of CPython 3.10, 3.11, 3.12 and 3.13: the shared libpython of the newest
/// pyenv installation of that minor version, or why there is none.
pub fn pyenv_libpythons() -> Vec<(String, Result<PathBuf, String>)> {
    let root = pyenv_root();
    let versions: Vec<String> = std::fs::read_dir(root.join("versions"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    ["3.10", "3.11", "3.12", "3.13"]
        .iter()
        .map(|minor| {
            let mut candidates: Vec<(u32, &String)> = versions
                .iter()
                .filter_map(|v| {
                    let patch = v.strip_prefix(&format!("{minor}."))?;
                    Some((patch.parse().ok()?, v))
                })
                .collect();
            candidates.sort();
            let found = match candidates.last() {
                None => Err(format!(
                    "no CPython {minor} under {}/versions",
                    root.display()
                )),
                Some((_, v)) => {
                    let so = root
                        .join("versions")
                        .join(v)
                        .join("lib")
                        .join(format!("libpython{minor}.so.1.0"));
                    if so.is_file() {
                        Ok(so)
                    } else {
                        Err(format!(
                            "{} is missing (CPython {v} built without --enable-shared)",
                            so.display()
                        ))
                    }
                }
            };
            (minor.to_string(), found)
        })
        .collect()
}

/// Builds `lib<name>.so` from a Rust source file in the fixtures directory as a
/// `cdylib` with debug info, with the `rustc` of the toolchain running the tests.
pub fn build_rust_cdylib(name: &str, source: &str) -> PathBuf {
    let _g = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let out = out_dir().join(format!("lib{name}.so"));
    let src = fixtures_dir().join(source);
    let fresh = match (out.metadata(), src.metadata()) {
        (Ok(o), Ok(s)) => matches!((o.modified(), s.modified()), (Ok(o), Ok(s)) if s <= o),
        _ => false,
    };
    if fresh {
        return out;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let o = Command::new(&rustc)
        .args([
            "--edition",
            "2021",
            "--crate-type",
            "cdylib",
            "-C",
            "debuginfo=2",
        ])
        .arg("--crate-name")
        .arg(name)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .expect("run rustc");
    assert!(
        o.status.success(),
        "building {name} with {rustc:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// The libraries of the global-scope scenario (`scope_*.c`): `scope_root` needs
/// `scope_a` (which needs `scope_c`) and `scope_b`, `scope_root2` needs `scope_d`, and
/// `scope_plugin` needs nothing but libc and binds to their symbols.
pub struct ScopeFixtures {
    pub root: PathBuf,
    pub root2: PathBuf,
    pub plugin: PathBuf,
    pub b: PathBuf,
}

/// Builds the global-scope scenario's libraries (once per test run).
pub fn scope_fixtures() -> ScopeFixtures {
    let rpath = "-Wl,-rpath,$ORIGIN";
    build_so("scope_c", &["scope_c.c"], &[]);
    let b = build_so("scope_b", &["scope_b.c"], &[]);
    build_so(
        "scope_a",
        &["scope_a.c"],
        &["-Wl,--no-as-needed", "-lscope_c", rpath],
    );
    build_so("scope_d", &["scope_d.c"], &[]);
    let root = build_so(
        "scope_root",
        &["scope_root.c"],
        &["-Wl,--no-as-needed", "-lscope_a", "-lscope_b", rpath],
    );
    let root2 = build_so(
        "scope_root2",
        &["scope_root2.c"],
        &["-Wl,--no-as-needed", "-lscope_d", rpath],
    );
    let plugin = build_so("scope_plugin", &["scope_plugin.c"], &[]);
    ScopeFixtures {
        root,
        root2,
        plugin,
        b,
    }
}

/// The machine's shared libpython (python3's `LIBDIR`/`INSTSONAME`), if python3 runs
/// and the file exists (CPython built with `--enable-shared`).
pub fn libpython() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sysconfig,os; print(os.path.join(sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME')))",
        ])
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    p.is_file().then_some(p)
}

/// Runs `f` with a tracing subscriber at INFO level and returns what it logged (the
/// loader's `loaded` events carry the figures some tests check).
pub fn capture_log(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let bytes = buf.0.lock().unwrap().clone();
    String::from_utf8(bytes).expect("the log is UTF-8")
}

/// The symbol `name` of `lib` (the library, then its search libraries) as an `F`,
/// detached from the borrow of `lib` (see `elf_loader::Symbol::into_raw`); panics
/// naming the symbol if it is missing.
///
/// # Safety
/// `F` must be the symbol's type, and `lib` must stay loaded while the value is used.
pub unsafe fn function<F: Copy>(lib: &elf_loader::CustomLibrary, name: &str) -> F {
    // SAFETY: the caller's contract.
    unsafe {
        lib.get::<F>(name)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .into_raw()
    }
}
