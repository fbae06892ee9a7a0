//! The marking state of a collector thread: [`Marker`] (handed to mark functions, root
//! and task scanners), the part of it C code reads ([`MarkFast`]), and the work items its
//! stacks and deques hold. The marking itself (queueing, scanning, draining) is
//! `mark.rs`, an `impl Marker` above the type descriptors that this module's `Marker`
//! appears in (`types::MarkFn`).
//!
//! Depends on `heap_id`, `object`, `task` and `par` (the helper pool and termination
//! protocol a team of markers shares).

use crate::heap_id::HeapId;
use crate::object::ObjRef;
use crate::par::{MarkPool, Termination};
use crate::task::Task;
use crossbeam_deque::{Stealer, Worker};
use std::collections::HashSet;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

/// A part of a reference array still to scan.
#[derive(Clone, Copy)]
pub(crate) struct ArrayWork {
    pub(crate) parent: ObjRef,
    pub(crate) cur: *const usize,
    pub(crate) end: *const usize,
    pub(crate) young: usize,
}

/// Work shared between collector threads.
pub(crate) enum Work {
    /// Marked objects to scan, moved off a mark stack together: one deque operation
    /// per batch rather than per object (each touches the line the thieves write).
    Objs(Box<[ObjRef]>),
    /// A part of an array.
    Array(ArrayWork),
    /// A task whose scanners are still to run ([`crate::TaskScan::WhileMarking`]).
    Task(*const Task),
}

// SAFETY: the pointers of an ArrayWork point into a live heap object, which any collector
// thread may read while the world is stopped; a task pointer points to a task the
// collection holds (its `TaskScanning` list) until marking ends, and `Task` is `Sync`.
unsafe impl Send for Work {}

/// Runs the task scanners for one task, on the collector thread whose marker is `m`:
/// what a mark phase does with its task work ([`Work::Task`]) when the heap scans tasks
/// while marking ([`crate::TaskScan::WhileMarking`]). Implemented by the collection
/// (`collect.rs`), which knows the callbacks.
pub(crate) trait ScanTask: Sync {
    /// # Safety
    /// `m` points to the live marker of the calling collector thread and no reference
    /// to it is alive (a C scanner reaches it again through its thread's `ptls`).
    unsafe fn scan(&self, m: *mut Marker<'_>, task: &Task);
}

#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub(crate) enum Mode {
    Mark,
    /// Count young children only; mark nothing.
    Verify,
    /// Mark, but young objects marked now are not promoted by this collection: what only
    /// finalizable objects reach dies young once the finalizers ran (see `weak.rs`).
    MarkKeepYoung,
}

/// The part of a [`Marker`] that C code reads and writes (`gc_mark_fast_t` in
/// `gc_core.h` / `julia_gcext_compat.h`): the inline `jl_gc_mark_queue_obj` marks and
/// pushes with it, and calls the out-of-line function when `slow` is set or the stack
/// is full. Layout checked by `capi/tests/it/headers.rs`.
#[repr(C)]
pub struct MarkFast {
    /// Non-zero: every queue goes through the out-of-line path (verify and keep-young
    /// modes).
    pub slow: usize,
    /// Next free slot of the mark stack.
    pub top: *mut usize,
    /// End of the mark stack.
    pub limit: *mut usize,
    /// Old objects are marked iff `header & old_mask == old_want` (0/0 in partial
    /// collections: every old object counts as marked; `object::Header::old_mark_test`
    /// computes both, `Header::old_mark_is` applies them; the C header's inline
    /// `queue` reads them too).
    pub old_mask: usize,
    /// See `old_mask`.
    pub old_want: usize,
    /// A young object is marked iff `header & (AGE | MARK) == young_marked`
    /// (`object::Header::is_young_marked`).
    pub young_marked: usize,
    /// Objects marked by this marker.
    pub marked: u64,
    /// Young results of queueing since the marker started the current object's mark
    /// function: the marker counts an object's young children itself, so that a mark
    /// function's return value (a count it may get wrong: a global shared by several
    /// mark threads, or Julia's "newly marked" semantics) cannot lose a remembered-set
    /// entry.
    pub young: u64,
}

/// The collector threads of one collection: the helpers' markers (the collecting
/// thread's is the one that holds the team) and every participant's stealer.
pub(crate) struct Team<'p, 'h> {
    pub(crate) pool: &'p MarkPool,
    pub(crate) helpers: Vec<*mut Marker<'h>>,
    pub(crate) stealers: Vec<Stealer<Work>>,
}

/// What the participants of one parallel drain share.
pub(crate) struct ParJob {
    pub(crate) term: Termination,
    pub(crate) stealers: Vec<Stealer<Work>>,
}

/// The marking state of one collector thread in one collection, handed to mark
/// functions, root scanners and task scanners.
#[repr(C)]
pub struct Marker<'h> {
    /// First field: C code reaches it through `ptls->marker`.
    pub(crate) fast: MarkFast,
    /// Bottom of the mark stack's live entries, inside `buf`'s allocation: above its
    /// start after sharing moved the oldest entries to the deque (`Marker::share`), so
    /// that sharing never moves the rest of the stack.
    pub(crate) base: *mut usize,
    pub(crate) buf: Vec<usize>,
    /// Stack entries copied within or between stack buffers (growing, compacting):
    /// what the regression test of `share` counts.
    #[cfg(test)]
    pub(crate) words_moved: usize,
    pub(crate) arrays: Vec<ArrayWork>,
    /// Tasks whose scanners are still to run, when they run while marking.
    pub(crate) tasks: Vec<*const Task>,
    /// What scanning a task means in this collection (`None`: tasks are scanned at the
    /// roots, not as mark work).
    pub(crate) task_scan: Option<&'h dyn ScanTask>,
    /// Drains this marker ran with its team (several threads marking).
    pub(crate) team_drains: u64,
    /// Objects the team's helper threads marked (added up by `absorb`).
    pub(crate) helper_marked: u64,
    /// The heap being collected.
    pub(crate) heap_id: HeapId,
    pub(crate) _heap: PhantomData<&'h ()>,
    pub(crate) full: bool,
    /// For old objects, the value of the MARK bit that means "marked" in this collection.
    pub(crate) parity: usize,
    pub(crate) next_remset: Vec<ObjRef>,
    /// The `ptls` of the thread this marker runs on, passed to C mark functions.
    pub(crate) ptls: *mut c_void,
    pub(crate) mode: Mode,
    /// Verify mode: addresses of the heap's big objects, to validate queued pointers
    /// (one set for every collector thread of the collection).
    pub(crate) big_set: Option<Arc<HashSet<usize>>>,
    pub(crate) errors: Vec<String>,
    pub(crate) verify_first_young: Option<ObjRef>,
    /// Bytes of young objects marked in keep-young mode (kept only for finalizers).
    pub(crate) kept_for_finalizers: usize,
    /// This marker's deque (parallel marking) and its index among the participants.
    pub(crate) deque: Worker<Work>,
    pub(crate) index: usize,
    /// The parallel drain running (null when marking alone).
    pub(crate) job: *const ParJob,
    pub(crate) since_share: u32,
    /// The collecting thread's marker: the team its drains run with (null: alone).
    pub(crate) team: *const Team<'static, 'static>,
    /// Objects a drain processes alone before it wakes the team
    /// (`HeapConfig::parallel_threshold`).
    pub(crate) solo_first: usize,
}
