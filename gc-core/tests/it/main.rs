//! gc-core's integration tests, one binary (each file a module): basics, the C programs
//! against the headers, borrowed mutators, the examples' snapshots, header drift, misuse
//! by safe code, the model-based test, threads, and weak references with one and two
//! collector threads.

mod basics;
mod c_programs;
mod current_mutator;
mod example_snapshot;
mod headers;
mod misuse;
mod model;
mod threads;
mod weak;
mod weak_parallel;
