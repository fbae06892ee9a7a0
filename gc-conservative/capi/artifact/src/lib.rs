//! `libgc_conservative.so`: gc-conservative's C ABI (the `gc-conservative-capi` crate) as
//! a shared library. This crate only links it; every `extern "C"` function of
//! `gc-conservative-capi`, and of gc-core's C layer that it links, is exported from here,
//! so a C client links one library and has one heap.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub use gc_conservative_capi;
