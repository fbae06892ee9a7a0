//! refbridge's integration tests, one binary (each file a module): the bridge's life
//! cycle and deallocation order, debug mode's reports, the example's snapshot, object
//! graphs crossing the boundary (cycles included), the model-based test, native memory
//! pressure, the Rust refcount and object API, and misuse by safe code. `common` holds
//! the native and managed test types.

mod bridge;
mod common;
mod debug;
mod example_snapshot;
mod graphs;
mod model;
mod pressure;
mod rust_api;
mod soundness;
