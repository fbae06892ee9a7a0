//! The runner: `runner.c` (the seed's `libpython_runner.so`) compiled once per CPython
//! version against that version's own headers, cached on disk, and loaded into each
//! interpreter's namespace after libpython; then a small typed table of its entry points.
//!
//! Compiling against the real headers is what makes `PyConfig` (whose layout changes
//! from one version to the next) and the C API macros right for every version, without
//! a table of offsets in Rust.

use super::error::{Error, Result};
use super::python::PythonInstall;
use elf_loader::{CustomLibrary, Namespace};
use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// The source, embedded so that the layer needs no file of the repository at run time.
const SOURCE: &str = include_str!("runner.c");
/// Must equal `MP_ABI` in runner.c.
pub const ABI: u32 = 3;
/// Fields of `struct mp_result`.
pub const FIELDS: usize = 8;

/// `void (*)(void *host, int stream, const char *data, size_t len)`.
pub type WriteFn = unsafe extern "C" fn(*mut c_void, c_int, *const c_char, usize);
/// `void (*)(void *host, uint64_t id)`.
pub type ReleaseFn = unsafe extern "C" fn(*mut c_void, u64);

/// `struct mp_config` of runner.c.
#[repr(C)]
pub struct MpConfig {
    /// [`ABI`].
    pub abi: u32,
    /// `sys.executable` (and `program_name`).
    pub executable: *const c_char,
    /// `argc` of `sys.argv`.
    pub argc: c_int,
    /// `sys.argv`.
    pub argv: *mut *mut c_char,
    /// `PyConfig.use_environment`.
    pub use_environment: c_int,
    /// `PyConfig.install_signal_handlers`.
    pub install_signal_handlers: c_int,
    /// `PyConfig.site_import`.
    pub site_import: c_int,
    /// The bootstrap's source.
    pub bootstrap: *const c_char,
    /// Passed back to `write` and `release`.
    pub host: *mut c_void,
    /// Output sink for text written outside a call.
    pub write: WriteFn,
    /// Called when a shared-buffer object dies.
    pub release: ReleaseFn,
}

/// `struct mp_result` of runner.c.
#[repr(C)]
pub struct MpResult {
    /// malloc'd UTF-8 strings (or NULL).
    pub fields: [*mut c_char; FIELDS],
    /// Their lengths.
    pub lens: [usize; FIELDS],
}

/// `int mp_initialize(const struct mp_config *, char **error)`.
pub type InitializeFn = unsafe extern "C" fn(*const MpConfig, *mut *mut c_char) -> c_int;
/// `int mp_dispatch(const char *const *args, const size_t *lens, int n, struct mp_result *)`.
pub type DispatchFn =
    unsafe extern "C" fn(*const *const c_char, *const usize, c_int, *mut MpResult) -> c_int;
/// `int mp_share_buffer(const char *name, void *ptr, size_t len, int ro, uint64_t id, char **error)`.
pub type ShareBufferFn =
    unsafe extern "C" fn(*const c_char, *mut c_void, usize, c_int, u64, *mut *mut c_char) -> c_int;
/// `int mp_finalize(int *live_threads)`.
pub type FinalizeFn = unsafe extern "C" fn(*mut c_int) -> c_int;
/// `void mp_free(void *)`.
pub type FreeFn = unsafe extern "C" fn(*mut c_void);

/// The runner's entry points in one loaded copy.
#[derive(Clone, Copy)]
pub struct RunnerFns {
    /// `mp_initialize`.
    pub initialize: InitializeFn,
    /// `mp_dispatch`.
    pub dispatch: DispatchFn,
    /// `mp_share_buffer`.
    pub share_buffer: ShareBufferFn,
    /// `mp_finalize`.
    pub finalize: FinalizeFn,
    /// `mp_free`.
    pub free: FreeFn,
}

/// One interpreter's loaded libraries: its namespace, libpython and the runner.
pub struct Loaded {
    /// The namespace (extension modules land here too).
    pub ns: Namespace,
    /// The libpython copy.
    pub libpython: CustomLibrary,
    /// The runner copy.
    pub runner: CustomLibrary,
    /// The runner's entry points.
    pub fns: RunnerFns,
}

/// Loads a fresh libpython copy and the runner into a new namespace called `name`.
pub fn load(install: &PythonInstall, name: &str) -> Result<Loaded> {
    let so = runner_for(install)?;
    let ns = Namespace::new(name);
    let libpython = ns.load(&install.libpython).map_err(|source| Error::Load {
        path: install.libpython.clone(),
        source: Box::new(source),
    })?;
    let runner = ns.load(&so).map_err(|source| Error::Load {
        path: so.clone(),
        source: Box::new(source),
    })?;
    let sym = |symbol: &'static str| {
        runner.own_sym(symbol).ok_or_else(|| Error::MissingSymbol {
            symbol,
            path: so.clone(),
        })
    };
    // SAFETY: each symbol is the runner.c function of the declared signature (the file
    // was compiled from SOURCE, whose ABI number is checked by mp_initialize).
    let fns = unsafe {
        RunnerFns {
            initialize: std::mem::transmute::<usize, InitializeFn>(sym("mp_initialize")?),
            dispatch: std::mem::transmute::<usize, DispatchFn>(sym("mp_dispatch")?),
            share_buffer: std::mem::transmute::<usize, ShareBufferFn>(sym("mp_share_buffer")?),
            finalize: std::mem::transmute::<usize, FinalizeFn>(sym("mp_finalize")?),
            free: std::mem::transmute::<usize, FreeFn>(sym("mp_free")?),
        }
    };
    Ok(Loaded {
        ns,
        libpython,
        runner,
        fns,
    })
}

/// The directory the compiled runners are cached in: `$MULTIPY_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/multipy`, else `~/.cache/multipy`, else the temporary directory.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MULTIPY_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("multipy");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("multipy");
    }
    std::env::temp_dir().join("multipy")
}

/// FNV-1a over the bytes: names the cached runner after its source and inputs.
pub(crate) fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter().chain(&[0u8]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The runner compiled for `install`, building it if it is not cached yet.
pub fn runner_for(install: &PythonInstall) -> Result<PathBuf> {
    static BUILD: Mutex<()> = Mutex::new(());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let include = install.include.to_string_lossy().into_owned();
    let key = fnv(&[SOURCE.as_bytes(), include.as_bytes(), cc.as_bytes()]);
    let (a, b) = install.version;
    let dir = cache_dir();
    let so = dir.join(format!("runner-py{a}.{b}-{key:016x}.so"));
    if so.is_file() {
        return Ok(so);
    }
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if so.is_file() {
        return Ok(so);
    }
    let err = |message: String| Error::RunnerBuild {
        version: install.version_string.clone(),
        message,
    };
    std::fs::create_dir_all(&dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    let unique = format!("{}-{}", std::process::id(), key);
    let src = dir.join(format!("runner-{unique}.c"));
    let tmp = dir.join(format!("runner-{unique}.so.tmp"));
    std::fs::write(&src, SOURCE).map_err(|e| err(format!("{}: {e}", src.display())))?;
    let out = Command::new(&cc)
        .args([
            "-shared",
            "-fPIC",
            "-O2",
            "-g",
            "-Wall",
            "-Werror=implicit-function-declaration",
        ])
        .arg(format!("-I{include}"))
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .output()
        .map_err(|e| err(format!("running {cc}: {e}")));
    let _ = std::fs::remove_file(&src);
    let out = out?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(format!(
            "{cc} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    std::fs::rename(&tmp, &so).map_err(|e| err(format!("{}: {e}", so.display())))?;
    Ok(so)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_numbers_agree() {
        assert!(
            SOURCE.contains(&format!("#define MP_ABI {ABI}\n")),
            "runner.c's MP_ABI differs from runner.rs's ABI"
        );
        assert!(SOURCE.contains(&format!("#define MP_FIELDS {FIELDS}\n")));
    }

    #[test]
    fn cache_key_changes_with_inputs() {
        assert_ne!(fnv(&[b"a", b"bc"]), fnv(&[b"ab", b"c"]));
    }
}
