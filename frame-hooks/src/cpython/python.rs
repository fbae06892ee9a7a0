//! [`Python`]: one checked libpython copy (its resolved C API and layout, its GIL,
//! running source and scripts). Hooks are installed on it by `hook.rs`
//! (`Python::install`), per-code data by `extra.rs`.

use super::api::{Api, Resolver};
use super::error::{version_string, Error};
use super::layout::{self, Layout};
use std::ffi::CString;
use std::sync::Arc;

/// `s` as a Python string literal (escaping everything outside printable ASCII).
fn py_str_literal(s: &str) -> String {
    let mut out = String::from("'");
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            ' '..='~' => out.push(ch),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('\'');
    out
}

pub(crate) struct PythonInner {
    pub(crate) api: &'static Api,
    pub(crate) layout: Layout,
    /// Our own code-extra index: the layout check, then the hooks' skip marks.
    /// The code-extra indices holding skip marks: slots 0-3 in the first, 4-7 in the
    /// second.
    pub(crate) skip_index: [isize; 2],
}

/// One checked libpython copy.
#[derive(Clone)]
pub struct Python {
    pub(crate) inner: Arc<PythonInner>,
}

impl std::fmt::Debug for Python {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Python")
            .field("version", &self.version())
            .field("layout", &self.inner.layout)
            .finish()
    }
}

impl Python {
    /// Resolves the C API of the copy behind `resolver` and checks its layout. The copy's
    /// interpreter must be initialised; this takes its GIL (any thread may call it).
    ///
    /// Each call takes one of the interpreter's 254 code-extra indices (the skip marks)
    /// and keeps its resolved API table for the life of the process: make one `Python`
    /// per copy and clone it.
    ///
    /// # Safety
    /// Every address `resolver` returns is that of the named symbol in one loaded
    /// libpython (the backend calls and reads them as CPython declares them); a symbol
    /// the copy lacks may be reported as missing, never as another address.
    pub unsafe fn new(resolver: &dyn Resolver) -> Result<Python, Error> {
        // SAFETY: the caller's contract on `resolver` is `Api::resolve`'s.
        let api = unsafe { Api::resolve(resolver) }?;
        // SAFETY: Py_IsInitialized may be called at any time.
        if unsafe { (api.is_initialized)() } == 0 {
            return Err(Error::NotInitialized);
        }
        let layout = Layout::for_minor(api.minor()).ok_or_else(|| Error::UnsupportedVersion {
            version: version_string(api.version),
        })?;
        let api: &'static Api = Box::leak(Box::new(api));
        // Two code-extra indices for skip marks: 16 bits per hook slot, four slots each.
        let skip_index = api.with_gil(|| {
            let mut indices = [0isize; 2];
            for index in &mut indices {
                // SAFETY: GIL held; a NULL free function is allowed (skip marks are
                // integers).
                *index = unsafe { (api.request_extra_index)(None) };
                if *index < 0 {
                    // SAFETY: GIL held.
                    unsafe { (api.err_clear)() };
                    return Err(Error::ExtraIndexExhausted {
                        version: version_string(api.version),
                    });
                }
                // SAFETY: GIL held; an index this copy just gave out.
                unsafe { layout::check(api, layout, *index) }?;
            }
            Ok(indices)
        })?;
        tracing::debug!(version = %version_string(api.version), ?layout, "libpython checked");
        Ok(Python {
            inner: Arc::new(PythonInner {
                api,
                layout,
                skip_index,
            }),
        })
    }

    /// The C API table of this copy.
    pub fn api(&self) -> &'static Api {
        self.inner.api
    }

    /// The checked layout.
    pub fn layout(&self) -> Layout {
        self.inner.layout
    }

    /// `(major, minor, micro)` of this copy.
    pub fn version(&self) -> (u32, u32, u32) {
        let v = self.inner.api.version;
        (v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff)
    }

    /// Runs `f` holding this copy's GIL.
    pub fn with_gil<R>(&self, f: impl FnOnce() -> R) -> R {
        self.inner.api.with_gil(f)
    }

    /// Runs Python source in `__main__` (`PyRun_SimpleString`); an exception is printed to
    /// the copy's stderr and returned as [`Error::Python`].
    pub fn run(&self, source: &str) -> Result<(), Error> {
        let c =
            CString::new(source).map_err(|_| Error::Python("source contains a NUL byte".into()))?;
        let api = self.inner.api;
        // SAFETY: GIL held by with_gil; valid NUL-terminated source.
        let rc = self.with_gil(|| unsafe { (api.run_simple)(c.as_ptr()) });
        if rc != 0 {
            return Err(Error::Python(format!(
                "{} (traceback printed above)",
                source.lines().next().unwrap_or("")
            )));
        }
        Ok(())
    }

    /// Runs the script at `path` as `__main__` with `sys.argv = [path, *args]` and the
    /// script's directory first on `sys.path`, as `python path args...` does
    /// (`runpy.run_path`), then flushes `sys.stdout`/`sys.stderr`. Returns the script's
    /// exit status if it raised `SystemExit` (`None` if it ended normally), as the
    /// `python` command computes it: 0 for `None`, the integer itself (-1 for one outside
    /// a C `long`, as `PyLong_AsLong` gives), or 1 after printing any other value to
    /// `sys.stderr` (`sys.exit("message")`). An uncaught `KeyboardInterrupt` is printed
    /// and gives 130 (`python` then ends by SIGINT, which a shell reports as 130). Any
    /// other uncaught exception is printed by Python and returned as [`Error::Python`]
    /// naming the script.
    pub fn run_script(&self, path: &str, args: &[String]) -> Result<Option<i64>, Error> {
        let mut argv = String::from("[");
        for a in std::iter::once(path).chain(args.iter().map(String::as_str)) {
            argv.push_str(&py_str_literal(a));
            argv.push(',');
        }
        argv.push(']');
        let source = format!(
            "import sys as _fh_sys, runpy as _fh_runpy, os as _fh_os\n\
             _fh_sys.argv = {argv}\n\
             _fh_sys.path.insert(0, _fh_os.path.dirname(_fh_os.path.realpath(_fh_sys.argv[0])))\n\
             _fh_exit = None\n\
             try:\n    _fh_runpy.run_path(_fh_sys.argv[0], run_name='__main__')\n\
             except SystemExit as _fh_e:\n\
             \x20   _fh_exit = _fh_e.code\n\
             \x20   if _fh_exit is None:\n        _fh_exit = 0\n\
             \x20   elif not isinstance(_fh_exit, int):\n\
             \x20       print(_fh_exit, file=_fh_sys.stderr)\n\
             \x20       _fh_exit = 1\n\
             \x20   elif not -(1 << 63) <= _fh_exit < (1 << 63):\n\
             \x20       _fh_exit = -1\n\
             except KeyboardInterrupt:\n\
             \x20   import traceback as _fh_tb\n\
             \x20   _fh_tb.print_exc()\n\
             \x20   _fh_exit = 130\n\
             finally:\n    _fh_sys.stdout.flush()\n    _fh_sys.stderr.flush()\n"
        );
        self.run(&source)
            .map_err(|_| Error::Python(format!("the script {path} (traceback printed above)")))?;
        let api = self.inner.api;
        Ok(self.with_gil(|| {
            // SAFETY: GIL held; __main__ exists and holds _fh_exit (set above).
            unsafe {
                let m = (api.import_add_module)(c"__main__".as_ptr());
                api.attr_long(m, c"_fh_exit")
            }
        }))
    }

    /// Whether the copy's interpreter evaluates frames with its own default evaluator.
    pub fn eval_is_default(&self) -> bool {
        let api = self.inner.api;
        // SAFETY: GIL held; reading the interpreter's eval function.
        self.with_gil(|| unsafe {
            (api.get_eval)((api.interp_get)()) as usize == api.eval_default as usize
        })
    }
}
