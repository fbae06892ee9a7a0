//! Loading and initialising a libpython in this process (libloading's `dlopen` with
//! `RTLD_GLOBAL`, so the interpreter's extension modules bind to it), for programs that
//! embed CPython to hook it: the examples, the tests and the benchmark.

use super::api::Dlsym;
use super::Error;
use libloading::os::unix::{Library, Symbol};
use std::ffi::{c_int, c_void, CStr};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};

/// A libpython opened in this process (through libloading). It stays loaded after the
/// `Libpython` is dropped: a CPython cannot be unloaded and loaded again safely.
pub struct Libpython {
    lib: ManuallyDrop<Library>,
    handle: *mut c_void,
    path: PathBuf,
}

// SAFETY: a dlopen handle may be used from any thread (libloading's `Library` is Send
// and Sync; the raw copy of its handle is only passed to thread-safe dlsym).
unsafe impl Send for Libpython {}
// SAFETY: as above.
unsafe impl Sync for Libpython {}

impl Libpython {
    /// The shared libpython of the interpreter `python` (a program name or path), from
    /// its `sysconfig` (`LIBDIR`/`INSTSONAME`).
    pub fn find(python: &str) -> Result<PathBuf, Error> {
        let out = std::process::Command::new(python)
            .args([
                "-c",
                "import os, sysconfig; print(os.path.join(sysconfig.get_config_var('LIBDIR') or '', sysconfig.get_config_var('INSTSONAME') or ''))",
            ])
            .output()
            .map_err(|e| Error::Load {
                path: python.into(),
                message: format!("could not run it: {e}"),
            })?;
        if !out.status.success() {
            return Err(Error::Load {
                path: python.into(),
                message: format!(
                    "sysconfig query failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if !path.is_file() {
            return Err(Error::Load {
                path: path.display().to_string(),
                message: format!(
                    "{python} has no shared libpython (built without --enable-shared?)"
                ),
            });
        }
        Ok(path)
    }

    /// [`find`](Self::find), and for a bare `python3.N` that does not run (not on the
    /// PATH, or a pyenv shim of a version that is not selected) the newest shared
    /// CPython 3.N that [`find_minor`](Self::find_minor) finds.
    pub fn find_program(python: &str) -> Result<PathBuf, Error> {
        let err = match Libpython::find(python) {
            Ok(p) => return Ok(p),
            Err(e) => e,
        };
        match python
            .strip_prefix("python3.")
            .and_then(|m| m.parse::<u32>().ok())
        {
            Some(minor) => Libpython::find_minor(minor)
                .map(|(_, lib)| lib)
                .map_err(|_| err),
            None => Err(err),
        }
    }

    /// A CPython 3.`minor` with a shared libpython on this machine: `python3.X` on the
    /// PATH, else the newest `3.X.*` under pyenv's root (`pyenv root`). Returns the
    /// interpreter to run and its libpython, or an error listing what was tried.
    pub fn find_minor(minor: u32) -> Result<(String, PathBuf), Error> {
        let mut candidates = vec![format!("python3.{minor}")];
        if let Ok(out) = std::process::Command::new("pyenv").arg("root").output() {
            let root = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if let Ok(dir) = std::fs::read_dir(format!("{root}/versions")) {
                let mut found: Vec<String> = dir
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&format!("3.{minor}.")))
                    .collect();
                found.sort_by_key(|v| {
                    v.split('.')
                        .map(|p| p.parse::<u32>().unwrap_or(0))
                        .collect::<Vec<_>>()
                });
                for v in found.into_iter().rev() {
                    candidates.push(format!("{root}/versions/{v}/bin/python3.{minor}"));
                }
            }
        }
        let mut why = Vec::new();
        for c in candidates {
            match Libpython::find(&c) {
                Ok(p) => return Ok((c, p)),
                Err(e) => why.push(e.to_string()),
            }
        }
        Err(Error::Load {
            path: format!("CPython 3.{minor}"),
            message: format!("no shared CPython 3.{minor} found: {}", why.join("; ")),
        })
    }

    /// Opens `path` with `RTLD_NOW | RTLD_GLOBAL`.
    ///
    /// # Safety
    /// Loading a library runs its initialisers and puts its symbols in the process's
    /// global scope: `path` must be a CPython shared library (as [`Libpython::find`]
    /// returns), not an arbitrary file.
    pub unsafe fn open(path: impl AsRef<Path>) -> Result<Libpython, Error> {
        let path = path.as_ref();
        if path.as_os_str().as_encoded_bytes().contains(&0) {
            return Err(Error::Load {
                path: path.display().to_string(),
                message: "path contains a NUL byte".into(),
            });
        }
        // SAFETY: the caller's contract: a CPython shared library, whose initialisers
        // are libpython's.
        let lib =
            unsafe { Library::open(Some(path.as_os_str()), libc::RTLD_NOW | libc::RTLD_GLOBAL) }
                .map_err(|e| Error::Load {
                    path: path.display().to_string(),
                    // libloading says "dlopen failed"; its source is dlerror's text.
                    message: std::error::Error::source(&e)
                        .map_or_else(|| e.to_string(), |s| s.to_string()),
                })?;
        // The raw handle for `Dlsym` resolvers; `lib` owns it again (and is never
        // dropped: see the type's comment).
        let handle = lib.into_raw();
        Ok(Libpython {
            // SAFETY: `handle` is the live handle just opened.
            lib: ManuallyDrop::new(unsafe { Library::from_raw(handle) }),
            handle,
            path: path.to_path_buf(),
        })
    }

    /// The library's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A resolver over this library (`dlsym` on its handle).
    pub fn resolver(&self) -> Dlsym {
        // SAFETY: the handle this library was opened with; it is never closed.
        unsafe { Dlsym::from_handle(self.handle) }
    }

    /// The function `name` of this libpython, typed.
    ///
    /// # Safety
    /// `F` must be the function's C signature.
    unsafe fn function<F>(&self, name: &CStr) -> Result<Symbol<F>, Error> {
        // SAFETY: the caller's contract on `F`; the library stays loaded (never closed).
        unsafe { self.lib.get::<F>(name.to_bytes_with_nul()) }.map_err(|_| Error::MissingSymbol {
            name: name.to_string_lossy().into_owned(),
        })
    }

    /// Initialises the interpreter (`Py_InitializeEx(0)`: no signal handlers) unless it
    /// already is, and releases the GIL so any thread can take it.
    pub fn initialize(&self) -> Result<(), Error> {
        // SAFETY: Py_IsInitialized has this signature.
        let is_init =
            unsafe { self.function::<unsafe extern "C" fn() -> c_int>(c"Py_IsInitialized")? };
        // SAFETY: Py_InitializeEx has this signature.
        let init = unsafe { self.function::<unsafe extern "C" fn(c_int)>(c"Py_InitializeEx")? };
        // SAFETY: PyEval_SaveThread has this signature.
        let save = unsafe {
            self.function::<unsafe extern "C" fn() -> *mut c_void>(c"PyEval_SaveThread")?
        };
        // SAFETY: initialising once from this thread, then releasing the GIL it holds.
        unsafe {
            if is_init() != 0 {
                return Ok(());
            }
            init(0);
            if is_init() == 0 {
                return Err(Error::Load {
                    path: self.path.display().to_string(),
                    message: "Py_InitializeEx did not initialise the interpreter".into(),
                });
            }
            save();
        }
        Ok(())
    }

    /// Finalises the interpreter (`Py_FinalizeEx`) from a thread that does not hold the
    /// GIL: takes it first.
    ///
    /// # Safety
    /// No other thread runs this copy's Python code or holds its GIL, and nothing made
    /// from this copy (a `Python`'s code references, results) is used afterwards except
    /// to check `Py_IsInitialized` (which `Python` and `Installed` do).
    pub unsafe fn finalize(&self) -> Result<(), Error> {
        // SAFETY: PyGILState_Ensure has this signature.
        let ensure =
            unsafe { self.function::<unsafe extern "C" fn() -> c_int>(c"PyGILState_Ensure")? };
        // SAFETY: Py_FinalizeEx has this signature.
        let fin = unsafe { self.function::<unsafe extern "C" fn() -> c_int>(c"Py_FinalizeEx")? };
        // SAFETY: the interpreter is initialised; finalising with the GIL held.
        let rc = unsafe {
            ensure();
            fin()
        };
        if rc != 0 {
            return Err(Error::Python("Py_FinalizeEx reported an error".into()));
        }
        Ok(())
    }
}
