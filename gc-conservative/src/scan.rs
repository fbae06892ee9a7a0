//! Conservative scanning of memory ranges and task stacks.
//!
//! Every aligned word of a range that resolves (see [`crate::base_ptr`]) to an object of
//! the heap being collected is queued for marking. A word that only happens to look like
//! a pointer keeps its object alive one collection longer (false retention) and never
//! corrupts anything: free cells are never reported, and marking an object only sets a
//! bit in its header.

use crate::lookup::base_ptr;
use crate::valgrind;
use gc_core::{current_thread_task, save_registers, Marker, ObjRef, Task, SAVED_REGS};
use std::sync::OnceLock;

fn under_valgrind() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(valgrind::running_on_valgrind)
}

/// Decides which objects found by a conservative scan are kept: `true` queues the object
/// (the base of what the word points into), `false` ignores the word.
pub type ScanFilter<'f> = &'f mut dyn FnMut(ObjRef) -> bool;

/// The filter of an unfiltered scan.
#[inline(always)]
fn accept_all(_: ObjRef) -> bool {
    true
}

#[inline]
fn scan_words_filtered<F: FnMut(ObjRef) -> bool>(
    m: &mut Marker<'_>,
    words: impl Iterator<Item = usize>,
    filter: &mut F,
) -> (usize, usize) {
    let heap = m.heap_id();
    let mut found = 0;
    let mut young = 0;
    for w in words {
        if let Some(obj) = base_ptr(heap, w) {
            if !filter(obj) {
                continue;
            }
            found += 1;
            // SAFETY: base_ptr found an allocated object of the heap at this word.
            young += unsafe { m.queue(obj) } as usize;
        }
    }
    (found, young)
}

/// Scans `[lo, hi)` conservatively; returns how many words resolved to objects and how
/// many of those objects are young.
///
/// # Safety
/// Every byte of the range is mapped and readable for the duration of the call.
pub unsafe fn scan_range_counting(m: &mut Marker<'_>, lo: usize, hi: usize) -> (usize, usize) {
    // SAFETY: forwarded.
    unsafe { scan_range_filtered(m, lo, hi, &mut accept_all) }
}

/// [`scan_range_counting`] keeping only the objects `filter` accepts.
///
/// # Safety
/// Every byte of the range is mapped and readable for the duration of the call.
unsafe fn scan_range_filtered<F: FnMut(ObjRef) -> bool>(
    m: &mut Marker<'_>,
    lo: usize,
    hi: usize,
    filter: &mut F,
) -> (usize, usize) {
    let lo = (lo + 7) & !7;
    let hi = hi & !7;
    if lo >= hi {
        return (0, 0);
    }
    let n = (hi - lo) / 8;
    if under_valgrind() {
        // Stacks hold uninitialised words; scan a copy declared defined, so that memcheck
        // reports only the program's own errors.
        let mut copy = vec![0usize; n];
        // SAFETY: the caller guarantees the range is readable; the copy has n words.
        unsafe { std::ptr::copy_nonoverlapping(lo as *const usize, copy.as_mut_ptr(), n) };
        valgrind::make_mem_defined(copy.as_ptr() as usize, n * 8);
        return scan_words_filtered(m, copy.into_iter(), filter);
    }
    let read = |i: usize| {
        // SAFETY: each read is of an aligned word inside the readable range (caller);
        // volatile so that the compiler makes no assumption about memory it does not own
        // (uninitialised stack slots included).
        unsafe { std::ptr::read_volatile((lo as *const usize).add(i)) }
    };
    scan_words_filtered(m, (0..n).map(read), filter)
}

/// Scans `[lo, hi)` conservatively; returns how many words resolved to objects.
///
/// # Safety
/// Every byte of the range is mapped and readable for the duration of the call.
pub unsafe fn scan_range(m: &mut Marker<'_>, lo: usize, hi: usize) -> usize {
    // SAFETY: forwarded.
    unsafe { scan_range_counting(m, lo, hi) }.0
}

/// Scans a task's stack (and, for a stopped thread, the registers it saved): the calling
/// thread's own stack from its current stack pointer after spilling its registers, a
/// stopped thread's from the stack pointer it saved, a suspended coroutine's from its
/// recorded stack pointer (or whole, if none was recorded). Never reads below the stack
/// pointer, so guard pages and unused stack are not touched. Returns the words found.
pub fn scan_task(m: &mut Marker<'_>, task: &Task) -> usize {
    scan_task_impl(m, task, &mut accept_all)
}

/// [`scan_task`] queueing only the objects `filter` accepts: a runtime whose stack
/// frames hold references to one kind of object only (GAP's master pointers) rejects
/// the rest, so that stale pointers into other objects retain nothing. Returns the
/// words accepted.
pub fn scan_task_filtered(m: &mut Marker<'_>, task: &Task, filter: ScanFilter<'_>) -> usize {
    scan_task_impl(m, task, &mut |obj| filter(obj))
}

fn scan_task_impl<F: FnMut(ObjRef) -> bool>(
    m: &mut Marker<'_>,
    task: &Task,
    filter: &mut F,
) -> usize {
    let (lo, hi) = task.stack_bounds();
    let own = current_thread_task().is_some_and(|t| std::ptr::eq(&*t, task));
    if own {
        return scan_own_stack(m, lo, hi, filter);
    }
    let sp = task.saved_sp();
    let start = if sp >= lo && sp < hi {
        sp
    } else if sp == 0 && !task.is_thread_stack() {
        lo
    } else {
        // A thread running on another stack (a coroutine registered separately), or one
        // that never stopped: its thread stack's live part is unknown. Scanning it whole
        // could touch unmapped memory, so skip it and say so.
        tracing::warn!(
            lo,
            hi,
            sp,
            "task stack pointer outside its bounds; stack not scanned"
        );
        return 0;
    };
    // SAFETY: [sp, hi) is the live part of a stopped thread's (or suspended coroutine's)
    // stack, which stays mapped while it is stopped.
    let mut found = unsafe { scan_range_filtered(m, start, hi, filter) }.0;
    if task.is_thread_stack() {
        found += scan_words_filtered(m, task.saved_registers().into_iter(), filter).0;
    }
    found
}

/// Spills the calling thread's callee-saved registers into this frame and scans from
/// here to the base of the stack.
#[inline(never)]
fn scan_own_stack<F: FnMut(ObjRef) -> bool>(
    m: &mut Marker<'_>,
    lo: usize,
    hi: usize,
    filter: &mut F,
) -> usize {
    let mut regs = [0usize; SAVED_REGS];
    save_registers(&mut regs);
    let sp = regs[SAVED_REGS - 1];
    let mut found = scan_words_filtered(m, regs.iter().copied(), filter).0;
    if sp >= lo && sp < hi {
        // SAFETY: from our own stack pointer to the base of our own stack: mapped.
        found += unsafe { scan_range_filtered(m, sp, hi, filter) }.0;
    } else {
        tracing::warn!(
            lo,
            hi,
            sp,
            "collecting thread runs outside its registered stack; stack not scanned"
        );
    }
    std::hint::black_box(&regs);
    found
}
