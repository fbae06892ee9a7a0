//! The CPython backend: Rust eval-frame hooks and typed code extras in a running CPython
//! 3.11, 3.12 or 3.13, reached only through a caller-supplied [`Resolver`].
//!
//! [`Python::new`] resolves the C API of one libpython copy (the process's own with
//! [`Dlsym`], or a copy elf-loader loaded), gates on the copy's exported `Py_Version`,
//! and checks the frame and code layouts of that version against the running library
//! ([`layout`]). [`Python::install`] puts a [`FrameHook`] in front of the copy's current
//! evaluator (`_PyInterpreterState_SetEvalFrameFunc`), chained to it;
//! [`Installed::uninstall`] restores it. [`CodeExtra`] stores typed per-code data through
//! the copy's own `_PyEval_RequestCodeExtraIndex`/`_PyCode_SetExtra`, freed with `Drop`.
//!
//! What the anchors taught, kept here: a hook sees the frame before `RESUME` (nothing here
//! builds a frame object); frames evaluated with the throw flag go to the previous
//! evaluator unless the hook asks otherwise; a panic in a hook becomes a `RuntimeError`
//! raised in the hooked frame (the frame is then unwound by the copy's own evaluator,
//! which is how 3.12+ frames get cleared); restoring "the default" uses that copy's own
//! `_PyEval_EvalFrameDefault`, never another copy's.

pub mod api;
pub mod embed;
mod extra;
mod hook;
pub mod layout;
pub mod profiler;

pub use api::{Api, Dlsym, EvalFrameFn, InterpreterFrame, PyObject, PyThreadState, Resolver};
pub use embed::Libpython;
pub use extra::CodeExtra;
pub use hook::{
    CodeRef, EvalResult, Frame, FrameHook, FrameOwner, Installed, CO_GENERATOR_LIKE, MAX_HOOKS,
};
pub use layout::Layout;

use std::ffi::CString;
use std::sync::Arc;

/// Errors of the CPython backend; each names the thing that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The resolver did not find a symbol.
    #[error("symbol {name} not found in this libpython")]
    MissingSymbol {
        /// The symbol.
        name: String,
    },
    /// The copy is not CPython 3.11, 3.12 or 3.13.
    #[error("CPython {version} is not supported (3.11, 3.12 and 3.13 are)")]
    UnsupportedVersion {
        /// The copy's `Py_Version`, as text.
        version: String,
    },
    /// The running library's layout differs from the one known for its version.
    #[error("frame layout mismatch in CPython {version}: {what}")]
    LayoutMismatch {
        /// The copy's version.
        version: String,
        /// The field, offset and what was found.
        what: String,
    },
    /// The interpreter is not initialised.
    #[error("the interpreter of this libpython is not initialised (Py_IsInitialized() == 0)")]
    NotInitialized,
    /// The interpreter is finalising: no hook is installed then.
    #[error("the interpreter is finalising; refusing to install a frame hook")]
    Finalizing,
    /// All trampolines are in use.
    #[error("all {0} frame-hook trampolines are in use (one per installed hook)")]
    NoFreeSlot(usize),
    /// Another evaluator was installed after ours: uninstall it first.
    #[error("the interpreter's eval-frame function is no longer our hook (another one was installed after it); uninstall that one first")]
    NotCurrent,
    /// The copy gave out all of its code-extra indices.
    #[error("CPython {version} refused a code-extra index: its 254 indices are used up")]
    ExtraIndexExhausted {
        /// The copy's version.
        version: String,
    },
    /// Python code raised (the traceback was printed to the copy's stderr).
    #[error("Python code raised: {0}")]
    Python(String),
    /// Loading a libpython failed.
    #[error("could not load {path}: {message}")]
    Load {
        /// The library path.
        path: String,
        /// What dlopen or the interpreter said.
        message: String,
    },
}

/// The message a panic carried.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    let text = payload.downcast_ref::<&str>().copied();
    text.or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// `Py_Version` as `3.11.7` (with a release-level suffix when not final).
pub fn version_string(v: u32) -> String {
    let level = match (v >> 4) & 0xf {
        0xa => "a",
        0xb => "b",
        0xc => "rc",
        _ => "",
    };
    let serial = if level.is_empty() {
        String::new()
    } else {
        format!("{}", v & 0xf)
    };
    format!(
        "{}.{}.{}{level}{serial}",
        v >> 24,
        (v >> 16) & 0xff,
        (v >> 8) & 0xff
    )
}

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
