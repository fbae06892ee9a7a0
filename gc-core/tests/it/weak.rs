//! Weak references, finalizers and the reference queue (`weak/cases.rs`) with
//! eager sweeping, one collector thread, verify mode checking every barrier.

const PARALLEL: bool = false;

// The same cases, compiled twice: with PARALLEL false here and true in the other module.
#[allow(clippy::duplicate_mod)]
#[path = "weak/cases.rs"]
mod cases;
