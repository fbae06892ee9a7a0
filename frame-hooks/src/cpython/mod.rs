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
mod error;
mod extra;
mod hook;
pub mod layout;
pub mod profiler;
mod python;

pub use api::{Api, Dlsym, EvalFrameFn, InterpreterFrame, PyObject, PyThreadState, Resolver};
pub use embed::Libpython;
pub use extra::CodeExtra;
pub use hook::{
    CodeRef, EvalResult, Frame, FrameHook, FrameOwner, Installed, CO_GENERATOR_LIKE, MAX_HOOKS,
};
pub use layout::Layout;
pub use python::Python;

pub(crate) use error::panic_message;
pub use error::{version_string, Error};
