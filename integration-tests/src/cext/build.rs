//! Building the extension two ways from the same `cext.c`: against refbridge's
//! `Python.h` (a shared library elf-loader loads) and as a CPython 3.11 extension module.
//! Results are cached by a hash of the sources, the headers and the compiler.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The shared C source (compiled unchanged both ways).
pub const CEXT_C: &str = include_str!("../../cext/cext.c");
/// The CPython-only module glue.
pub const CEXT_MODULE_C: &str = include_str!("../../cext/cext_module.c");
/// The Python driver of the CPython side (`cext/driver.py`), written next to the module.
pub const DRIVER: &str = include_str!("../../cext/driver.py");
/// refbridge's header and its `Python.h`.
const RB_HEADER: &str = include_str!("../../../refbridge/include/refbridge_python.h");
const RB_COMPAT: &str = include_str!("../../../refbridge/include/compat/Python.h");

/// Where the builds are cached (`CEXT_CACHE_DIR`, else the system's temp directory).
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("CEXT_CACHE_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::temp_dir().join("refbridge-cext"),
    }
}

fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter().chain(&[0u8]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Runs the compiler; the error names the command and what it printed.
fn compile(args: &[String], out: &Path) -> Result<(), String> {
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let res = Command::new(cc())
        .args(args)
        .arg("-o")
        .arg(&tmp)
        .output()
        .map_err(|e| format!("running {}: {e}", cc()))?;
    if !res.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "{} {} failed: {}",
            cc(),
            args.join(" "),
            String::from_utf8_lossy(&res.stderr).trim()
        ));
    }
    std::fs::rename(&tmp, out).map_err(|e| format!("{}: {e}", out.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    // Written aside and renamed into place: another process building the same key (two
    // checkouts testing at once share the cache directory) never sees a truncated file
    // while it compiles; both write the same bytes.
    // The temporary name is unique per process and per call, so two threads of one
    // process writing the same path never share it either.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{seq}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// What a build produced.
#[derive(Clone, Debug)]
pub struct ExtensionBuild {
    /// The shared library.
    pub library: PathBuf,
}

static BUILD: Mutex<()> = Mutex::new(());

/// `cext.c` compiled against refbridge's `Python.h` into a shared library whose CPython
/// names stay undefined (the loader resolves them to refbridge's C API).
pub fn build_refbridge_library() -> Result<ExtensionBuild, String> {
    let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let key = fnv(&[
        CEXT_C.as_bytes(),
        RB_HEADER.as_bytes(),
        RB_COMPAT.as_bytes(),
        cc().as_bytes(),
    ]);
    let dir = cache_dir().join(format!("rb-{key:016x}"));
    let library = dir.join("libcext_refbridge.so");
    if library.is_file() {
        return Ok(ExtensionBuild { library });
    }
    write(&dir.join("include/refbridge_python.h"), RB_HEADER)?;
    write(&dir.join("include/compat/Python.h"), RB_COMPAT)?;
    let src = dir.join("cext.c");
    write(&src, CEXT_C)?;
    let args: Vec<String> = vec![
        "-shared".into(),
        "-fPIC".into(),
        "-O2".into(),
        "-g".into(),
        "-std=c11".into(),
        "-Wall".into(),
        "-Werror".into(),
        format!("-I{}", dir.join("include/compat").display()),
        src.display().to_string(),
    ];
    compile(&args, &library)?;
    Ok(ExtensionBuild { library })
}

/// The machine's CPython 3.11: `python3` on PATH if it is 3.11, else pyenv's newest 3.11.
pub fn python3_path() -> Result<PathBuf, String> {
    let is_311 = |exe: &Path| {
        Command::new(exe)
            .args(["-c", "import sys; print(sys.version_info[:2] == (3, 11))"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "True")
            .unwrap_or(false)
    };
    if is_311(Path::new("python3")) {
        return Ok(PathBuf::from("python3"));
    }
    let root = Command::new("pyenv")
        .arg("root")
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(root) = root {
        let mut found: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("3.11."))
            .map(|e| e.path().join("bin/python3"))
            .filter(|p| is_311(p))
            .collect();
        found.sort();
        if let Some(p) = found.pop() {
            return Ok(p);
        }
    }
    Err("CPython 3.11 not found (python3 on PATH, or pyenv)".into())
}

/// `cext.c` + `cext_module.c` built as the CPython 3.11 extension module `cext`; returns
/// the directory holding it.
pub fn build_cpython_module() -> Result<PathBuf, String> {
    let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let py = python3_path()?;
    let info = Command::new(&py)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('EXT_SUFFIX'))",
        ])
        .output()
        .map_err(|e| format!("{}: {e}", py.display()))?;
    let text = String::from_utf8_lossy(&info.stdout).to_string();
    let mut lines = text.lines();
    let (Some(include), Some(suffix)) = (lines.next(), lines.next()) else {
        return Err(format!(
            "{} did not report its include directory",
            py.display()
        ));
    };
    let key = fnv(&[
        CEXT_C.as_bytes(),
        CEXT_MODULE_C.as_bytes(),
        DRIVER.as_bytes(),
        include.as_bytes(),
        cc().as_bytes(),
    ]);
    let dir = cache_dir().join(format!("py-{key:016x}"));
    let module = dir.join(format!("cext{suffix}"));
    let driver = dir.join("driver.py");
    if module.is_file() && driver.is_file() {
        return Ok(dir);
    }
    // The driver is written here, once, under the build lock and renamed into place:
    // tests running `run_cpython` in parallel threads start python on it while another
    // thread would otherwise be rewriting it (a truncated driver runs as an empty script
    // and prints nothing).
    write(&driver, DRIVER)?;
    if module.is_file() {
        return Ok(dir);
    }
    let src = dir.join("cext.c");
    let glue = dir.join("cext_module.c");
    write(&src, CEXT_C)?;
    write(&glue, CEXT_MODULE_C)?;
    let args: Vec<String> = vec![
        "-shared".into(),
        "-fPIC".into(),
        "-O2".into(),
        "-g".into(),
        "-Wall".into(),
        "-Werror".into(),
        "-Wno-cast-function-type".into(),
        format!("-I{include}"),
        src.display().to_string(),
        glue.display().to_string(),
    ];
    compile(&args, &module)?;
    Ok(dir)
}
