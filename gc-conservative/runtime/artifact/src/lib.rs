//! `libgc_runtime.so`: gc-runtime (whose whole content is its C ABI) as a shared library.
//! This crate only links it; every `extern "C"` function of gc-runtime, and of the C
//! layers it links (gc-core's, gc-conservative-capi's, gil-capi's), is exported from here.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub use gc_runtime;
