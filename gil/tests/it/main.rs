//! gil's integration tests, one binary (each file a module): safepoint actions, the Rust
//! API, the example's snapshot, the model-based test, shutdown, and stress. The C ABI's
//! tests (the C program, header drift) are `gil-capi`'s (`capi/tests/it`).

mod actions;
mod api;
mod example_snapshot;
mod model;
mod shutdown;
mod stress;
