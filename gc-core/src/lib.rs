//! `gc-core`: a garbage-collected heap with the Julia GC-extension API.
//!
//! Implements the seed `julia-gc-extensions.txt` ("Garbage collector extensions for
//! better foreign language support"): foreign types with their own mark and sweep
//! functions, root and task scanners, GC callbacks, generational collection with a
//! write barrier, and many mutator threads stopping at safepoints. A C ABI exposes the
//! same API under the seed's own names so C code written against it compiles unchanged.
//!
//! The implementation is tracked by issue 3; see the crate README for what exists.
