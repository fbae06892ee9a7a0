//! `libgil.so`: gil's C ABI (the `gil-capi` crate) as a shared library. This crate only
//! links it; every `extern "C"` function of `gil-capi` is exported from here.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub use gil_capi;
