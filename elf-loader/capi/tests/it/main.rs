//! elf-loader-capi's integration tests, one binary (each file a module): the header
//! checks (`header.rs`), the C program against `elf_loader.h` and `libelf_loader.so`
//! (also under valgrind), the C and C++ host programs (exceptions across custom-loaded
//! code, fini functions at exit, every CPython twice from a host without libm), and
//! panics caught at the C entries. Fixtures are elf-loader's (`../tests/fixtures`).

#[path = "../../../tests/common/mod.rs"]
mod common;

mod c_hosts;
mod c_program;
mod glibc_order;
mod header;
mod hosts;
mod panics;
mod python_versions;
