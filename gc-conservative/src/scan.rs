//! Conservative scanning of memory ranges and task stacks.
//!
//! Every aligned word of a range that resolves (see [`crate::base_ptr`]) to an object of
//! the heap being collected is queued for marking. A word that only happens to look like
//! a pointer keeps its object alive one collection longer (false retention) and never
//! corrupts anything: free cells are never reported, and marking an object only sets a
//! bit in its header.

use crate::lookup::base_ptr;
use crate::valgrind;
use gc_core::{current_thread_task, save_registers, Marker, Mutator, ObjRef, Task, SAVED_REGS};
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
///
/// Only a task registered with the heap being collected is read: one unregistered
/// since (whose stack its owner may have unmapped, as [`gc_core::Heap::register_task`]
/// allows), a task of another heap, or a call off the collecting thread (where the heap
/// cannot be asked) scans nothing and returns 0, with a warning. The check is a look-up
/// in the heap's task list, linear in the number of tasks: a task scanner, which the
/// heap hands its registered tasks, can skip it with [`scan_task_unchecked`] (with
/// 10,000 coroutines, 31 ms a collection checked against 2.3 ms).
pub fn scan_task(m: &mut Marker<'_>, task: &Task) -> usize {
    if !is_registered(m, task) {
        return 0;
    }
    scan_task_impl(m, task, &mut accept_all)
}

/// [`scan_task`] queueing only the objects `filter` accepts: a runtime whose stack
/// frames hold references to one kind of object only (GAP's master pointers) rejects
/// the rest, so that stale pointers into other objects retain nothing. Returns the
/// words accepted; a task not registered with the heap being collected scans nothing,
/// as for [`scan_task`].
pub fn scan_task_filtered(m: &mut Marker<'_>, task: &Task, filter: ScanFilter<'_>) -> usize {
    if !is_registered(m, task) {
        return 0;
    }
    scan_task_impl(m, task, &mut |obj| filter(obj))
}

/// [`scan_task`] without the registration check, for a task scanner (the heap hands it
/// its registered tasks): no look-up in the heap's task list.
///
/// # Safety
/// `task` is registered with the heap `m` collects (for example the task a task
/// scanner was handed), so that its stack is readable: the contract of
/// [`gc_core::Heap::register_task`].
pub unsafe fn scan_task_unchecked(m: &mut Marker<'_>, task: &Task) -> usize {
    scan_task_impl(m, task, &mut accept_all)
}

/// [`scan_task_filtered`] without the registration check (see [`scan_task_unchecked`]).
///
/// # Safety
/// As for [`scan_task_unchecked`].
pub unsafe fn scan_task_filtered_unchecked(
    m: &mut Marker<'_>,
    task: &Task,
    filter: ScanFilter<'_>,
) -> usize {
    scan_task_impl(m, task, &mut |obj| filter(obj))
}

/// Whether `task` is registered with the heap `m` collects, asked of that heap through
/// the calling thread's attachment: root and task scanners run on the collecting
/// thread, which is attached to the heap it collects (a thread is attached to one heap
/// at most). False, with a warning, when it is not, or when the calling thread is not
/// that thread (a marking helper), where the heap cannot be reached.
fn is_registered(m: &Marker<'_>, task: &Task) -> bool {
    let addr = task as *const Task as usize;
    let ptls = gc_core::ffi::current_ptls();
    let registered = !ptls.is_null() && {
        // SAFETY: a non-null current_ptls() is the calling thread's attached mutator
        // record; it and its heap live in Arcs (attach), as `borrowed` requires. The
        // handle does not detach when dropped, and is used only to reach the heap.
        let me = unsafe { Mutator::borrowed(&*ptls) };
        me.heap().id() == m.heap_id()
            && me
                .heap()
                .task_from_addr(task.c_handle() as usize)
                .is_some_and(|t| std::ptr::eq(&*t, task))
    };
    if !registered {
        tracing::warn!(
            task = addr,
            heap = %m.heap_id(),
            "scan_task: not a task registered with the heap being collected (unregistered, \
             another heap's, or asked off the collecting thread); not scanned"
        );
    }
    registered
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
    // SAFETY: the task is registered with the heap being collected (the callers), so
    // [lo, hi) is readable (register_task's contract, or a thread's own stack), and
    // [start, hi) is the live part of a stopped thread's (or suspended coroutine's) stack.
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
