//! gc-core-capi's integration tests, one binary (each file a module): the C programs
//! against the headers (`c_programs`), header drift and layouts (`headers`), and the C
//! ABI on heaps made and used from Rust (`rust_heaps`).

mod c_programs;
mod headers;
mod rust_heaps;
