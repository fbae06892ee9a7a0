//! `libgc_core.so`: gc-core's C ABI (`include/gc_core.h`, `include/julia_gcext_compat.h`;
//! its C layer is still inside the gc-core crate) as a shared library. This crate only
//! links gc-core; every `extern "C"` function of gc-core is exported from here.

pub use gc_core;
