//! `libgil.so`: gil's C ABI (the `gil-capi` crate) as a shared library. This crate only
//! links it; every `extern "C"` function of `gil-capi` is exported from here.

pub use gil_capi;
