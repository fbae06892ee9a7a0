//! `gc-conservative`: interior-pointer lookup and conservative stack scanning.
//!
//! Implements the "Conservative scanning" part of the seed `julia-gc-extensions.txt` on
//! top of `gc-core`: mapping an arbitrary machine word to the object it points into (or
//! to nothing), and scanning thread stacks and memory ranges conservatively so that a C
//! system with raw pointers in its stack frames can use the collector.
//!
//! The implementation is tracked by issue 4; see the crate README for what exists.
