//! Weak references, finalizers and the reference queue (`weak/cases.rs`) with
//! eager sweeping, one collector thread, verify mode checking every barrier.

const PARALLEL: bool = false;

#[path = "weak/cases.rs"]
mod cases;
