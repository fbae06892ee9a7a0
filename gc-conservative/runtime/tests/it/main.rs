//! gc-runtime's integration tests, one binary (each file a module): the header generated
//! from the Rust side and gil.h's functions as the runtime declares them, and C programs
//! against `gc_runtime.h` and `libgc_runtime.so` (several threads, one blocking while
//! another collects; misuse), under valgrind with `GC_RUNTIME_VALGRIND=1`.

mod c_programs;
mod headers;
