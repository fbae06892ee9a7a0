//! `multipy`: many CPython interpreters in one process, each a fresh copy of libpython
//! loaded by `elf-loader` into a namespace of its own (the seed
//! `multiple-pythons-custom-loader.txt`), so C extensions such as numpy run in every
//! interpreter at once, each interpreter under its own GIL.
//!
//! ```no_run
//! use integration_tests::multipy::{Config, Interpreter};
//! let a = Interpreter::new(Config::new().venv(".venv"))?;
//! let b = Interpreter::new(Config::new().venv(".venv"))?;
//! std::thread::scope(|s| {
//!     s.spawn(|| a.run("import numpy as np; print(np.arange(10) * 10)"));
//!     s.spawn(|| b.run("import numpy as np; print(np.arange(10) * 10)"));
//! });
//! let out = a.run("print(id(None))")?;
//! assert_ne!(out.stdout, b.run("print(id(None))")?.stdout);
//! # Ok::<(), integration_tests::multipy::Error>(())
//! ```
//!
//! - [`Interpreter`]: load + `PyConfig` initialisation on a main thread of its own;
//!   `run`, `run_file`, `run_module`, `call` from any thread; output captured per call at
//!   the `sys` level; exceptions and `SystemExit` as [`Error`] values; drop finalises
//!   and unloads.
//! - [`SharedBuffer`]: memory shared without copies by several interpreters.
//! - [`PythonSpec`] / [`PythonInstall`]: which CPython (3.10 to 3.13).
//!
//! The runner (`runner.c`, the seed's `libpython_runner.so`) is compiled with the
//! system C compiler against the chosen Python's headers the first time that Python is
//! used, and cached (see [`runner_cache_dir`]).

mod buffer;
mod cache;
mod error;
mod interpreter;
mod python;
mod runner;

pub use buffer::SharedBuffer;
pub use cache::cache_dir as runner_cache_dir;
pub use error::{Error, Output, PythonException, Result};
pub use interpreter::{
    main_stack_size, BorrowedBuffer, Config, Interpreter, KeepAlive, LentBuffer, PickledReply,
    Reply, Sink, Stream,
};
pub use python::{PythonInstall, PythonSpec, SUPPORTED};

/// Number of threads of this process (entries of `/proc/self/task`).
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}
