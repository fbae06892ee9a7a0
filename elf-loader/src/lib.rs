//! `elf-loader`: a custom ELF loader for x86_64 Linux that loads the same shared
//! library many times in one process, each copy isolated.
//!
//! It implements the loader of the seed `multiple-pythons-custom-loader.txt`: enough of
//! a dynamic loader (mapping, relocation, symbol versions, TLS, init/fini, unwinder and
//! debugger registration, `dlopen` redirection) to run several copies of
//! `libpython3.11.so` side by side, each with its own extension modules.
//!
//! ```no_run
//! use elf_loader::{CustomLibrary, SymbolProvider, SystemLibrary};
//! let global = SystemLibrary::global();
//! let a = CustomLibrary::create("/path/to/libfoo.so");
//! a.add_search_library(global.clone())?;
//! // SAFETY: libfoo's initialisers are safe to run here (loading runs foreign code).
//! unsafe { a.load() }?;
//! let b = CustomLibrary::create("/path/to/libfoo.so");
//! // SAFETY: as above.
//! unsafe { b.load() }?;
//! // Two copies: each has its own globals.
//! assert_ne!(a.sym("counter"), b.sym("counter"));
//! // A typed symbol borrows its library: it cannot be called after `a` is dropped.
//! // SAFETY: libfoo's `bump` has this signature.
//! let bump = unsafe { a.get::<extern "C" fn() -> i32>("bump") }?;
//! bump();
//! # Ok::<(), elf_loader::Error>(())
//! ```
//!
//! Loading is `unsafe` (it runs the library's constructors, as libloading's
//! `Library::new`), and so is implementing [`SymbolProvider`] (loaded code jumps to
//! whatever address a provider answers).
//!
//! - [`SymbolProvider`]: anything that resolves names (`sym`, `tls_sym`).
//! - [`Symbol`]: a typed symbol (`get`) that keeps its library borrowed.
//! - [`SystemLibrary`]: the system loader's global scope or one `dlopen`ed library.
//! - [`CustomLibrary`]: one library loaded by this loader (create, add_search_library,
//!   load, sym), in a [`Namespace`] of its own or a shared one.
//! - [`Namespace`]: an isolated world of custom libraries with a [`DependencyPolicy`]
//!   deciding which `DT_NEEDED` libraries are shared through the system loader.
//!
//! The C ABI (`include/elf_loader.h`, `libelf_loader.so`) is the `elf-loader-capi`
//! crate in `capi/`, over this API.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod api;
mod boundary;
mod broadcast;
mod debug;
mod dlfcn;
#[cfg(feature = "elf-parser")]
pub mod elf;
// Without the feature the parser is the loader's own: its tool entry points (the fuzz
// oracle, file readers) and their re-exports are unused.
#[cfg(not(feature = "elf-parser"))]
#[allow(dead_code, unused_imports)]
mod elf;
mod error;
mod image;
mod iterate_phdr;
mod kthread;
mod map;
mod namespace;
mod order;
mod overrides;
mod phdr;
mod plan;
mod search;
mod symbol;
mod symtab;
mod system;
mod thread_atexit;
mod tls;

pub use api::{CustomLibrary, Namespace};
pub use error::{Error, Result};
pub use image::RelocStats;
pub use namespace::{loaded_image_count, DependencyPolicy, LoadEvent};
pub use plan::set_relocation_plans;
pub use search::{LD_SO_CACHE, SYSTEM_DIRS};
pub use symbol::Symbol;
pub use system::{SymbolProvider, SystemLibrary};
pub use tls::{
    live_blocks as tls_live_blocks, reap_exited_threads as tls_reap_exited_threads,
    static_pool_free as tls_static_pool_free, TlsIndex, STATIC_POOL_SIZE as TLS_STATIC_POOL_SIZE,
};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
