//! `integration-tests`: the end-to-end scenarios of the four seeds, composed from every
//! crate of the workspace.
//!
//! - GAP: a small C kernel modelled on GAP's memory model whose allocator and collector
//!   are `gc-core` + `gc-conservative`, threads serialised by `gil`.
//! - numpy: several CPython 3.11 interpreters in one process, each a separate copy of
//!   libpython loaded by `elf-loader`.
//! - C extension: a C extension in CPython's C-API style compiled against `refbridge`'s
//!   `Python.h`, loaded by `elf-loader`, living with managed objects on `gc-core`, and the
//!   same source as a real CPython 3.11 extension for comparison.
//!
//! The GAP scenario is [`minigap`], the numpy scenario [`multipy`], the C-extension
//! scenario [`cext`]; `cargo xtask demo` runs them.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod cext;
pub mod minigap;
pub mod multipy;
