//! refbridge-capi's integration tests, one binary (each file a module): the C programs in
//! CPython's extension style against `refbridge_python.h` and `librefbridge.so` (also
//! under valgrind), and the header drift checks.

mod c_programs;
mod header_drift;
