//! gc-conservative's integration tests, one binary (each file a module): the example's
//! snapshot, scan filters, lookups, tasks that are no longer registered, and weak
//! references next to conservative scanning.
//! The C programs and header drift checks are the C ABI's, in `capi/tests/it/`.

mod example_snapshot;
mod filter;
mod lookup;
mod stale_task;
mod weak;
