//! gil-capi's integration tests, one binary (each file a module): the C program against
//! `gil.h` and `libgil.so` (also under valgrind), and the header drift checks.

mod c_program;
mod header;
