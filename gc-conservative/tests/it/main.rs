//! gc-conservative's integration tests, one binary (each file a module): C programs
//! against the headers and the library, the example's snapshot, scan filters, header
//! drift, lookups, and weak references next to conservative scanning.

mod c_programs;
mod example_snapshot;
mod filter;
mod headers;
mod lookup;
mod weak;
