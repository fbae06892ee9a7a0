//! `elf-loader`: a custom ELF loader for x86_64 Linux that loads the same shared
//! library many times in one process, each copy isolated.
//!
//! Implements the seed `multiple-pythons-custom-loader.txt`: enough of a dynamic loader
//! (mapping, relocation, TLS, init/fini, `dlopen` redirection, debugger registration)
//! to run several copies of `libpython3.11.so` side by side, numpy included.
//!
//! The implementation is tracked by issue 6; see the crate README for what exists.
