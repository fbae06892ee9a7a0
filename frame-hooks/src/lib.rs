//! `frame-hooks`: PEP 523 frame-evaluation hooks and per-code scratch slots.
//!
//! Implements the seed `pep-523-frame-evaluation.txt`: a replaceable frame evaluator
//! with chaining and a recursion guard, and a registry of per-code-object "extra"
//! slots, both for interpreters written in Rust and for a real CPython 3.11
//! (`_PyInterpreterState_SetEvalFrameFunc`, `_PyCode_GetExtra`/`_PyCode_SetExtra`).
//!
//! No part of it is implemented yet; see the crate README.
