//! Weak references, finalizers and the reference queue (`weak/cases.rs`) with
//! lazy sweeping and two collector threads (mark functions and weak processing next to parallel marking).

const PARALLEL: bool = true;

#[path = "weak/cases.rs"]
mod cases;
