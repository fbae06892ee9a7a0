//! `gil`: a global interpreter lock with switch requests, safepoint actions and clean
//! shutdown.
//!
//! Implements the GIL and threading parts of the seed
//! `graalpy-implementation-details.txt`, with CPython 3.11's GIL as the behaviour to beat.
//!
//! The implementation is tracked by issue 5; see the crate README for what exists.
