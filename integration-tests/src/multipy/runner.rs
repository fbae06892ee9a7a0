//! The runner: `runner.c` (the seed's `libpython_runner.so`) compiled once per CPython
//! version against that version's own headers, cached on disk, and loaded into each
//! interpreter's namespace after libpython; then a small typed table of its entry points.
//!
//! Compiling against the real headers is what makes `PyConfig` (whose layout changes
//! from one version to the next) and the C API macros right for every version, without
//! a table of offsets in Rust.

use super::cache::{cache_dir, fnv, write_cache_file};
use super::error::{Error, Result};
use super::python::PythonInstall;
use elf_loader::{CustomLibrary, DependencyPolicy, Namespace};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

/// The source, embedded so that the layer needs no file of the repository at run time.
const SOURCE: &str = include_str!("runner.c");
/// Must equal `MP_ABI` in runner.c.
pub const ABI: u32 = 5;
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
    /// The bootstrap compiled by an earlier copy of this Python (import magic number +
    /// marshal data, see [`BootstrapCache`]), or null.
    pub bootstrap_code: *const c_char,
    /// Its length in bytes.
    pub bootstrap_code_len: usize,
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

/// `int mp_initialize(const struct mp_config *, char **error, char **code_out, size_t
/// *code_len)`: `code_out` receives the bootstrap's marshalled code (malloc'd) when this
/// copy compiled it.
pub type InitializeFn =
    unsafe extern "C" fn(*const MpConfig, *mut *mut c_char, *mut *mut c_char, *mut usize) -> c_int;
/// `int mp_dispatch(const char *const *args, const size_t *lens, int n, struct mp_result *)`.
pub type DispatchFn =
    unsafe extern "C" fn(*const *const c_char, *const usize, c_int, *mut MpResult) -> c_int;
/// `int mp_share_buffer(const char *name, void *ptr, size_t len, int ro, uint64_t id, char **error)`.
pub type ShareBufferFn =
    unsafe extern "C" fn(*const c_char, *mut c_void, usize, c_int, u64, *mut *mut c_char) -> c_int;
/// `struct mp_buffer` of runner.c: an out-of-band buffer of a pickled call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MpBuffer {
    /// Its first byte.
    pub ptr: *mut c_void,
    /// Its length in bytes.
    pub len: usize,
    /// Read-only (non-zero) or writable.
    pub readonly: c_int,
    /// The host's id (host memory) or the copy's (lent memory).
    pub id: u64,
}

/// `struct mp_pickled` of runner.c: a pickled call's answer.
#[repr(C)]
pub struct MpPickled {
    /// 0 returned, 1 raised, -1 could not call.
    pub status: c_int,
    /// The pickled result or exception (malloc'd).
    pub payload: *mut c_char,
    /// Its length.
    pub payload_len: usize,
    /// The result's out-of-band buffers lent to the host (malloc'd array).
    pub buffers: *mut MpBuffer,
    /// How many.
    pub nbuffers: usize,
    /// Why the call could not be made (malloc'd), or null.
    pub error: *mut c_char,
}

/// `int mp_call_pickled(const char *payload, size_t len, const struct mp_buffer *in,
/// size_t nin, const uint64_t *release, size_t nrelease, struct mp_pickled *out)`.
pub type CallPickledFn = unsafe extern "C" fn(
    *const c_char,
    usize,
    *const MpBuffer,
    usize,
    *const u64,
    usize,
    *mut MpPickled,
) -> c_int;
/// `void mp_release_lent(const uint64_t *ids, size_t n)`.
pub type ReleaseLentFn = unsafe extern "C" fn(*const u64, usize);
/// `int mp_interrupt(unsigned long ident)`.
pub type InterruptFn = unsafe extern "C" fn(std::ffi::c_ulong) -> c_int;
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
    /// `mp_call_pickled`.
    pub call_pickled: CallPickledFn,
    /// `mp_release_lent`.
    pub release_lent: ReleaseLentFn,
    /// `mp_interrupt`.
    pub interrupt: InterruptFn,
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

/// System libraries whose process-global state is neither thread-safe nor meant for
/// two clients: GNU readline (`readline` module: `rl_initialize`, the history, the
/// completer) and ncurses/terminfo under it and `_curses` (`cur_term`, `stdscr`,
/// `LINES`). In one process CPython calls them under its one GIL; interpreters here run
/// at once, so each namespace gets its own copy (shared, two interpreters importing
/// `readline` at the same moment crashed inside libreadline).
pub const PRIVATE_SYSTEM_LIBRARIES: &[&str] = &[
    "libreadline.so",
    "libhistory.so",
    "libtinfo.so",
    "libncurses.so",
    "libncursesw.so",
    "libpanel.so",
    "libpanelw.so",
    "libform.so",
    "libformw.so",
    "libmenu.so",
    "libmenuw.so",
];

/// The namespace policy of an interpreter: elf-loader's default (the C runtime and
/// thread-safe system libraries shared) with [`PRIVATE_SYSTEM_LIBRARIES`] per namespace.
pub fn dependency_policy() -> DependencyPolicy {
    let mut policy = DependencyPolicy::default();
    policy
        .private_prefixes
        .extend(PRIVATE_SYSTEM_LIBRARIES.iter().map(|s| s.to_string()));
    policy
}

/// Loads a fresh libpython copy and the runner into a new namespace called `name`.
pub fn load(install: &PythonInstall, name: &str) -> Result<Loaded> {
    let so = runner_for(install)?;
    let ns = Namespace::with_policy(name, dependency_policy());
    // SAFETY: libpython's initialisers are safe to run in any process (they set up its
    // own globals); each copy is in a namespace of its own.
    let libpython = unsafe { ns.load(&install.libpython) }.map_err(|source| Error::Load {
        path: install.libpython.clone(),
        source: Box::new(source),
    })?;
    // SAFETY: the runner (runner.c) has no initialisers of its own besides libc's.
    let runner = unsafe { ns.load(&so) }.map_err(|source| Error::Load {
        path: so.clone(),
        source: Box::new(source),
    })?;
    /// The runner's own function `symbol` as an `F`, detached from the borrow of
    /// `runner`: `Loaded` keeps the namespace (and so the mapping) as long as `fns`.
    ///
    /// # Safety
    /// `F` must be the signature of runner.c's `symbol`.
    unsafe fn function<F: Copy>(
        runner: &CustomLibrary,
        so: &Path,
        symbol: &'static str,
    ) -> Result<F> {
        // SAFETY: the caller's contract on `F`; `Loaded` holds `runner` and its
        // namespace alongside the detached pointer.
        unsafe { runner.get_own::<F>(symbol) }
            .map(|s| unsafe { s.into_raw() })
            .map_err(|_| Error::MissingSymbol {
                symbol,
                path: so.to_path_buf(),
            })
    }
    // SAFETY: each symbol is the runner.c function of the declared signature (the file
    // was compiled from SOURCE, whose ABI number is checked by mp_initialize).
    let fns = unsafe {
        RunnerFns {
            initialize: function::<InitializeFn>(&runner, &so, "mp_initialize")?,
            dispatch: function::<DispatchFn>(&runner, &so, "mp_dispatch")?,
            share_buffer: function::<ShareBufferFn>(&runner, &so, "mp_share_buffer")?,
            call_pickled: function::<CallPickledFn>(&runner, &so, "mp_call_pickled")?,
            release_lent: function::<ReleaseLentFn>(&runner, &so, "mp_release_lent")?,
            interrupt: function::<InterruptFn>(&runner, &so, "mp_interrupt")?,
            finalize: function::<FinalizeFn>(&runner, &so, "mp_finalize")?,
            free: function::<FreeFn>(&runner, &so, "mp_free")?,
        }
    };
    Ok(Loaded {
        ns,
        libpython,
        runner,
        fns,
    })
}

/// The bootstrap's compiled code per CPython, so that only the first interpreter of a
/// Python compiles it (parsing and compiling its ~230 lines costs each interpreter as
/// much as ~5% of `import numpy`). Like a `.pyc`: kept in memory for this process and
/// on disk next to the compiled runners, keyed by the source, the libpython file and
/// its version; the runner also checks the import magic number before unmarshalling,
/// and compiles the source when anything does not match.
pub struct BootstrapCache;

/// A cached bootstrap on disk: the payload, then its FNV-1a hash (8 bytes, little
/// endian), so that a truncated or damaged file is recompiled rather than unmarshalled.
const HASH_LEN: usize = 8;

impl BootstrapCache {
    fn key(install: &PythonInstall, source: &str) -> u64 {
        fnv(&[
            source.as_bytes(),
            install.libpython.as_os_str().as_encoded_bytes(),
            install.version_string.as_bytes(),
        ])
    }

    fn memory() -> &'static Mutex<HashMap<u64, Arc<[u8]>>> {
        static MEMORY: OnceLock<Mutex<HashMap<u64, Arc<[u8]>>>> = OnceLock::new();
        MEMORY.get_or_init(Default::default)
    }

    fn file(install: &PythonInstall, key: u64) -> PathBuf {
        let (a, b) = install.version;
        cache_dir().join(format!("bootstrap-py{a}.{b}-{key:016x}.marshal"))
    }

    /// The code compiled earlier for `source` on `install`, if any.
    pub fn get(install: &PythonInstall, source: &str) -> Option<Arc<[u8]>> {
        let key = Self::key(install, source);
        let memory = Self::memory();
        if let Some(code) = memory.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Some(code.clone());
        }
        let code = Self::read(&Self::file(install, key))?;
        memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, code.clone());
        Some(code)
    }

    /// A cache file's payload, if its hash is right.
    fn read(file: &std::path::Path) -> Option<Arc<[u8]>> {
        let bytes = std::fs::read(file).ok()?;
        let (payload, hash) = bytes.split_at(bytes.len().checked_sub(HASH_LEN)?);
        (!payload.is_empty() && hash == fnv(&[payload]).to_le_bytes()).then(|| payload.into())
    }

    /// Keeps `code`, just compiled for `source` by a copy of `install` (best effort on
    /// disk: an unwritable cache directory only means the next process compiles again).
    pub fn put(install: &PythonInstall, source: &str, code: &[u8]) {
        let key = Self::key(install, source);
        Self::memory()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, code.into());
        let file = Self::file(install, key);
        let mut bytes = code.to_vec();
        bytes.extend_from_slice(&fnv(&[code]).to_le_bytes());
        write_cache_file(&file, &bytes);
    }
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
    fn bootstrap_cache_round_trip_and_damage() {
        let install = PythonInstall {
            version: (3, 99),
            version_string: "3.99.0".into(),
            executable: "/nonexistent/python3.99".into(),
            libpython: "/nonexistent/libpython3.99.so".into(),
            include: "/nonexistent/include".into(),
        };
        let source = format!("# test {}\n", std::process::id());
        assert!(BootstrapCache::get(&install, &source).is_none());
        BootstrapCache::put(&install, &source, b"\x01\x02\x03\x04marshal");
        assert_eq!(
            BootstrapCache::get(&install, &source).as_deref(),
            Some(&b"\x01\x02\x03\x04marshal"[..])
        );
        let file = BootstrapCache::file(&install, BootstrapCache::key(&install, &source));
        assert_eq!(
            BootstrapCache::read(&file).as_deref(),
            Some(&b"\x01\x02\x03\x04marshal"[..])
        );
        // A damaged or truncated file is not used (the source is compiled instead).
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[2] ^= 0xff;
        std::fs::write(&file, &bytes).unwrap();
        assert!(BootstrapCache::read(&file).is_none());
        std::fs::write(&file, &bytes[..5]).unwrap();
        assert!(BootstrapCache::read(&file).is_none());
        std::fs::remove_file(&file).unwrap();
        // Another source or another Python is another entry.
        assert!(BootstrapCache::get(&install, "other").is_none());
    }

    #[test]
    fn cache_key_changes_with_inputs() {
        assert_ne!(fnv(&[b"a", b"bc"]), fnv(&[b"ab", b"c"]));
    }
}
