//! `refbridge`: a bridge between reference-counting C extensions and a tracing GC.
//!
//! Implements the "C extensions" and "memory management" parts of the seed
//! `graalpy-implementation-details.txt` over `gc-core`: native stubs with a managed
//! reference count, a handle table, weak/strong switching, a reference queue, native
//! memory accounting and a cycle collector for native objects.
//!
//! No part of it is implemented yet; see the crate README.
