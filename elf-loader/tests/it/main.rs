//! elf-loader's integration tests, one binary (each former `tests/*.rs` file a module):
//! loading real C and C++ libraries (basics, features, scopes, TLS through a C host,
//! C++ runtimes, Debian's ICU and RocksDB, `DT_RELR`, what glibc accepts), `dlclose`
//! and load events, `dl_iterate_phdr`, relocation plans and pre-faulting, finding
//! libraries by name, real CPython copies, panics at the C boundary (`dlsym`), gdb, the
//! example's snapshot, and the module graph. The C ABI's tests (C and C++ host programs,
//! the header checks) are `capi/tests/it/`'s.
//!
//! The tests that count process-wide state (mapped images, `/proc/self/maps`, TLS
//! blocks) are in `tests/isolated/`, a binary of their own whose tests run one at a
//! time: run here, the other modules' tests would load libraries while they count.

#[path = "../common/mod.rs"]
mod common;

mod basic;
mod by_name;
mod cxx;
mod cxx_debian;
mod cxx_runtime;
mod dlclose;
mod example;
mod features;
mod gdb;
mod glibc_accepts;
mod not_a_library;
mod panics;
mod phdr;
mod plan;
mod prefault;
mod python;
mod python_dlclose;
mod relr;
mod scope;
mod threads;
mod tls_index;
