//! `libelf_loader.so`: elf-loader's C ABI (the `elf-loader-capi` crate) as a shared
//! library. This crate only links it; every `extern "C"` function of `elf-loader-capi`
//! is exported from here.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub use elf_loader_capi;
