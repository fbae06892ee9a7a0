//! Errors of the multipy layer: each names what it is about (the Python, the file, the
//! interpreter), and Python's own exceptions and `SystemExit` are values too.

use std::path::PathBuf;

/// Output an interpreter produced during one call (its `sys.stdout` / `sys.stderr`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// What the call wrote to `sys.stdout`.
    pub stdout: String,
    /// What the call wrote to `sys.stderr`.
    pub stderr: String,
}

/// A Python exception that escaped a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonException {
    /// Which interpreter raised it.
    pub interpreter: usize,
    /// The exception's type (`ValueError`, `numpy.linalg.LinAlgError`).
    pub type_name: String,
    /// `str(exception)`.
    pub message: String,
    /// The formatted traceback, as Python prints it (frames of the layer removed).
    pub traceback: String,
    /// What the call wrote before it raised.
    pub output: Output,
}

/// Everything that can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No installation of the wanted Python was found.
    #[error("CPython {wanted} not found (tried: {})", tried.join("; "))]
    PythonNotFound {
        /// The version or path asked for.
        wanted: String,
        /// What was tried and why it failed.
        tried: Vec<String>,
    },
    /// The Python is not one of 3.10 to 3.13.
    #[error("{}: CPython {version} is not supported (3.10 to 3.13 are)", python.display())]
    UnsupportedPython {
        /// The executable.
        python: PathBuf,
        /// Its version.
        version: String,
    },
    /// The Python was built without `--enable-shared`.
    #[error("{}: no shared libpython ({} missing; CPython must be built with --enable-shared)", python.display(), libpython.display())]
    NoSharedLibrary {
        /// The executable.
        python: PathBuf,
        /// Where sysconfig says the library is.
        libpython: PathBuf,
    },
    /// The Python's headers are missing (needed to build the runner).
    #[error("{}: Python.h not found in {}", python.display(), include.display())]
    NoHeaders {
        /// The executable.
        python: PathBuf,
        /// The include directory sysconfig names.
        include: PathBuf,
    },
    /// The virtual environment has no `bin/python` or no `pyvenv.cfg`.
    #[error("{}: not a virtual environment ({why})", venv.display())]
    BadVenv {
        /// The directory given.
        venv: PathBuf,
        /// What is missing.
        why: String,
    },
    /// Building the runner (`runner.c`) for a Python failed.
    #[error("building the multipy runner for Python {version} failed: {message}")]
    RunnerBuild {
        /// The Python version.
        version: String,
        /// The compiler's message or the I/O error.
        message: String,
    },
    /// elf-loader could not load libpython or the runner.
    #[error("loading {}: {source}", path.display())]
    Load {
        /// The library.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: Box<elf_loader::Error>,
    },
    /// A symbol the layer needs is missing from a loaded library.
    #[error("{symbol} not found in {}", path.display())]
    MissingSymbol {
        /// The symbol.
        symbol: &'static str,
        /// The library.
        path: PathBuf,
    },
    /// Initialisation of the interpreter failed (PyConfig or `Py_InitializeFromConfig`).
    #[error("interpreter {interpreter}: initialisation failed: {message}")]
    Init {
        /// The interpreter's number.
        interpreter: usize,
        /// CPython's message.
        message: String,
    },
    /// A Python exception escaped the call.
    #[error("interpreter {}: {}: {}", .0.interpreter, .0.type_name, .0.message)]
    Exception(Box<PythonException>),
    /// The code raised `SystemExit` (the process keeps running).
    #[error("interpreter {interpreter}: SystemExit({code})")]
    SystemExit {
        /// The interpreter's number.
        interpreter: usize,
        /// The exit status `python` would have exited with.
        code: i32,
        /// What the call wrote before it exited.
        output: Box<Output>,
    },
    /// An argument cannot be passed to Python (a NUL byte in a name, say).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The interpreter's main thread is gone (it panicked or was never started).
    #[error("interpreter {0}: its main thread is gone")]
    MainThreadGone(usize),
    /// An internal failure of the layer's own Python code.
    #[error("interpreter {interpreter}: multipy host error: {message}")]
    Host {
        /// The interpreter's number.
        interpreter: usize,
        /// The message.
        message: String,
    },
}

impl Error {
    /// The output the failed call produced, if it ran.
    pub fn output(&self) -> Option<&Output> {
        match self {
            Error::Exception(e) => Some(&e.output),
            Error::SystemExit { output, .. } => Some(output),
            _ => None,
        }
    }
}

/// The layer's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
