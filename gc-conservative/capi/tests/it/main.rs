//! gc-conservative-capi's integration tests, one binary (each file a module): C programs
//! against the headers and `libgc_conservative.so` (the `artifact/` crate's cdylib, which
//! carries gc-core's C ABI too), and the header drift checks.

mod c_programs;
mod headers;
