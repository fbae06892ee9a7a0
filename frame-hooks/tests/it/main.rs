//! frame-hooks' integration tests, one binary (each file a module): the generic layer on
//! a small bytecode interpreter, the CPython backend on the machine's CPython 3.11-3.13
//! (each case in a child process), and the examples' output.

mod cpython;
mod examples;
mod generic;
mod pythons;
