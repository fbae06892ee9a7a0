//! `libgc_core.so`: gc-core's C ABI (`include/gc_core.h`, `include/julia_gcext_compat.h`;
//! the `gc-core-capi` crate) as a shared library. This crate only links gc-core-capi;
//! every `extern "C"` function of it is exported from here.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub use gc_core_capi;
