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
//! a.add_search_library(global.clone()).unwrap();
//! a.load().unwrap();
//! let b = CustomLibrary::create("/path/to/libfoo.so");
//! b.load().unwrap();
//! // Two copies: each has its own globals.
//! assert_ne!(a.sym("counter"), b.sym("counter"));
//! ```
//!
//! - [`SymbolProvider`]: anything that resolves names (`sym`, `tls_sym`).
//! - [`SystemLibrary`]: the system loader's global scope or one `dlopen`ed library.
//! - [`CustomLibrary`]: one library loaded by this loader (create, add_search_library,
//!   load, sym), in a [`Namespace`] of its own or a shared one.
//! - [`Namespace`]: an isolated world of custom libraries with a [`DependencyPolicy`]
//!   deciding which `DT_NEEDED` libraries are shared through the system loader.
//! - [`capi`]: the C ABI (`include/elf_loader.h`).

mod boundary;
mod debug;
mod dlfcn;
pub mod elf;
mod error;
mod image;
mod map;
mod namespace;
mod phdr;
mod plan;
mod search;
mod symtab;
mod system;
mod thread_atexit;
mod tls;

pub mod capi;

pub use error::{Error, Result};
pub use image::RelocStats;
pub use namespace::{loaded_image_count, CustomLibrary, DependencyPolicy, Namespace};
pub use plan::set_relocation_plans;
pub use search::{LD_SO_CACHE, SYSTEM_DIRS};
pub use system::{SymbolProvider, SystemLibrary};
pub use tls::{live_blocks as tls_live_blocks, TlsIndex};
