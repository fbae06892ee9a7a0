//! `librefbridge.so`: refbridge's C ABI (the `refbridge-capi` crate) as a shared library.
//! This crate only links it; every `extern "C"` function of `refbridge-capi` is exported
//! from here.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub use refbridge_capi;
