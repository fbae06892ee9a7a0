//! Weak references, finalizers and the reference queue (`weak/cases.rs`) with
//! lazy sweeping and two collector threads (mark functions and weak processing next to parallel marking).

const PARALLEL: bool = true;

// The same cases, compiled twice: with PARALLEL false here and true in the other module.
#[allow(clippy::duplicate_mod)]
#[path = "weak/cases.rs"]
mod cases;
