//! `frame-hooks`: PEP 523 frame-evaluation hooks and per-code scratch space.
//!
//! Implements the seed `pep-523-frame-evaluation.txt` twice over one design:
//!
//! - for interpreters written in Rust: a per-interpreter [`HookSlot`] whose default is the
//!   interpreter's own evaluator (one pointer comparison when unset), hooks chained to the
//!   previous one, a per-thread recursion guard, per-code skip marks and the throw flag
//!   ([`hook`]); code extra indices with free functions ([`extra`]); lazy frames in
//!   GraalPy's `PFrame.Reference` style ([`lazy`]);
//! - for real CPython 3.11, 3.12 and 3.13 ([`cpython`]): a Rust hook installed with
//!   `_PyInterpreterState_SetEvalFrameFunc` into any copy of libpython whose symbols a
//!   caller-supplied resolver finds, the frame layout checked against the running library,
//!   typed code extras over `_PyCode_GetExtra`/`_PyCode_SetExtra`, panics turned into
//!   Python exceptions.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod cpython;
pub mod extra;
pub mod hook;
pub mod lazy;

pub use extra::{CodeExtras, ExtraError, ExtraIndex, ExtraRegistry, SkipMarks};
pub use hook::{eval_frame, EvalHook, HookCx, HookError, HookId, HookSlot, Interpreter};
pub use lazy::{FrameRef, LiveFrame, PFrame};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
