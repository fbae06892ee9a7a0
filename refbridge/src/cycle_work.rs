//! The cycle collector's per-bridge scratch: a candidate's record and the work vectors
//! a bridge keeps between collections (in its owner-thread state, `Local::cycle_work`),
//! and the vectors a dropped bridge leaves to the next one on its thread. A leaf, so
//! that the bridge's state (below the collector) can hold them; the algorithm is in
//! `cycle.rs`.

use crate::abi::PyObject;
use std::cell::RefCell;

/// One candidate of a cycle collection.
pub(crate) struct Cand {
    /// A native object, or a tagged stub pointer.
    pub(crate) op: *mut PyObject,
    pub(crate) refs: isize,
    pub(crate) managed: bool,
    pub(crate) reach: bool,
    pub(crate) w: bool,
    /// A tracked object's `gc_prev` flags (restored with its back link).
    pub(crate) gc_flags: u8,
    /// Native candidates, when edges are recorded: where this candidate's edges start
    /// in the recorded edges (`Ctx::edges` in `cycle.rs`; they end where the next native candidate's start). Stubs: the
    /// handle index.
    pub(crate) first_edge: u32,
    /// For members of W during the replication: the address of the managed side
    /// (managed object of a stub, mirror of a native object), 0 if none.
    pub(crate) side: usize,
}

/// The cycle collector's work vectors, kept between collections so that a collection
/// does not allocate and fault in fresh memory for them (owner thread only). After a
/// collection each keeps at most twice the capacity that collection used (about 50
/// bytes per candidate in all: the candidate, the stack, the recorded edges, the stub
/// index, the replicated item).
#[derive(Default)]
pub(crate) struct CycleWork {
    pub(crate) cands: Vec<Cand>,
    /// All zeros between collections (the entries set are cleared one by one).
    pub(crate) stub_cand: Vec<u32>,
    pub(crate) stack: Vec<usize>,
    pub(crate) edges: Vec<u32>,
}

impl CycleWork {
    pub(crate) const EMPTY: CycleWork = CycleWork {
        cands: Vec::new(),
        stub_cand: Vec::new(),
        stack: Vec::new(),
        edges: Vec::new(),
    };
}

thread_local! {
    /// The work vectors of the last bridge dropped on this thread, for the first
    /// collection of the next bridge here: a program that makes a bridge per task (a
    /// benchmark's runs) then reuses them too, instead of faulting in fresh memory
    /// whenever the allocator gave the freed ones back to the system.
    pub(crate) static SPARE_WORK: RefCell<CycleWork> = const { RefCell::new(CycleWork::EMPTY) };
}

/// A dropped bridge's work vectors, kept for the next bridge on this thread.
pub(crate) fn leave_work(work: CycleWork) {
    let _ = SPARE_WORK.try_with(|s| *s.borrow_mut() = work);
}
