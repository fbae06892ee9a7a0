//! gil's integration tests, one binary (each file a module): safepoint actions, the Rust
//! API, the C program against `gil.h`, the example's snapshot, header drift, the
//! model-based test, shutdown, and stress.

mod actions;
mod api;
mod c_api;
mod example_snapshot;
mod header;
mod model;
mod shutdown;
mod stress;
