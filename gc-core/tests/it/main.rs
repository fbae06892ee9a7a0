//! gc-core's integration tests, one binary (each file a module): basics, borrowed
//! mutators, the examples' snapshots, misuse by safe code, the model-based test, task
//! scanners at the roots and as mark work, threads, and weak references with one and
//! two collector threads. The C ABI's tests
//! are gc-core-capi's (`capi/tests/`).

mod basics;
mod current_mutator;
mod example_snapshot;
mod misuse;
mod model;
mod tasks;
mod threads;
mod weak;
mod weak_parallel;
