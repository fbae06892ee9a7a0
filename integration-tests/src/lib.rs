//! `integration-tests`: the end-to-end scenarios of the four seeds, composed from every
//! crate of the workspace.
//!
//! - GAP: a small C kernel modelled on GAP's memory model whose allocator and collector
//!   are `gc-core` + `gc-conservative`, threads serialised by `gil`.
//! - numpy: several CPython 3.11 interpreters in one process, each a separate copy of
//!   libpython loaded by `elf-loader`.
//! - C extension: a module written against `refbridge`'s C API, loaded by `elf-loader`.
//!
//! None of the scenarios exists yet; `cargo xtask demo` says which ones run.

pub mod cext;
pub mod multipy;
