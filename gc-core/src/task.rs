//! Tasks: stacks the runtime registers with the heap (a thread's own stack, or a
//! coroutine's). The task_scanner callbacks run once per live task per collection, and
//! conservative stack scanning (gc-conservative) reads the bounds and saved stack
//! pointer recorded here.

use crate::tls::SAVED_REGS;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// A registered stack. `jl_task_t` in the C API, where C code knows it by
/// [`Task::c_handle`].
///
/// The stack occupies `[stack_lo, stack_hi)` and grows down. While the task is not
/// running on the CPU (its thread is stopped at a safepoint or in a GC-safe region, or
/// it is a suspended coroutine), `sp` is the lowest address in use (0 when unknown: the
/// whole range is then considered live).
#[repr(C)]
#[derive(Debug)]
pub struct Task {
    /// The word in front of the C handle, which a Julia client reads as the task's
    /// header (Julia's tasks are objects: `jl_astaggedvalue(task)->bits.gc`). Always 0:
    /// "young, unmarked", so a client never takes a task's stack for unchanged since the
    /// last collection (GAP rescans it; GAP itself gave up that shortcut, gap #6528).
    header: usize,
    stack_lo: AtomicUsize,
    stack_hi: AtomicUsize,
    sp: AtomicUsize,
    user_data: AtomicPtr<c_void>,
    is_thread_stack: bool,
    /// Callee-saved registers the thread saved when it last stopped.
    regs: [AtomicUsize; SAVED_REGS],
}

impl Task {
    pub(crate) fn new(lo: usize, hi: usize, is_thread_stack: bool) -> Task {
        Task {
            header: 0,
            stack_lo: AtomicUsize::new(lo),
            stack_hi: AtomicUsize::new(hi),
            sp: AtomicUsize::new(0),
            user_data: AtomicPtr::new(std::ptr::null_mut()),
            is_thread_stack,
            regs: [const { AtomicUsize::new(0) }; SAVED_REGS],
        }
    }

    /// The address C code knows this task by (`jl_task_t *`, `gc_task_t *`): just past
    /// its first word, as an object's address is just past its header word. That word
    /// reads 0 (see the field `header`), so a Julia client's `jl_astaggedvalue(task)`
    /// reads a task that is young.
    pub fn c_handle(&self) -> *mut c_void {
        (&self.header as *const usize).wrapping_add(1) as *mut c_void
    }

    /// The task whose [`Task::c_handle`] is `handle`.
    ///
    /// # Safety
    /// `handle` is the C handle of a task that stays alive (registered, or otherwise
    /// held) while the returned reference is used.
    pub unsafe fn from_c_handle<'a>(handle: *const c_void) -> &'a Task {
        // SAFETY: the handle is one word past the start of a live `Task` (caller), whose
        // first field is that word (`repr(C)`).
        unsafe { &*((handle as *const usize).sub(1) as *const Task) }
    }

    /// The stack bounds `[lo, hi)`.
    pub fn stack_bounds(&self) -> (usize, usize) {
        (
            self.stack_lo.load(Ordering::Acquire),
            self.stack_hi.load(Ordering::Acquire),
        )
    }

    /// Moves the stack bounds (for a coroutine whose stack is reused).
    ///
    /// # Safety
    /// As for [`crate::Heap::register_task`]: `[lo, hi)` stays readable while the task is
    /// registered with these bounds.
    pub unsafe fn set_stack_bounds(&self, lo: usize, hi: usize) {
        self.stack_lo.store(lo, Ordering::Release);
        self.stack_hi.store(hi, Ordering::Release);
    }

    /// The saved stack pointer, or 0 if unknown.
    pub fn saved_sp(&self) -> usize {
        self.sp.load(Ordering::Acquire)
    }

    /// Records the lowest stack address in use while the task is suspended (the
    /// runtime's coroutine switch calls this; 0 means unknown).
    pub fn set_saved_sp(&self, sp: usize) {
        self.sp.store(sp, Ordering::Release);
    }

    /// Records where a thread stopped: its saved registers (the last one is the stack
    /// pointer, which becomes `saved_sp`).
    pub(crate) fn record_stop(&self, regs: &[usize; SAVED_REGS]) {
        for (slot, &r) in self.regs.iter().zip(regs.iter()) {
            slot.store(r, Ordering::Relaxed);
        }
        self.sp.store(regs[SAVED_REGS - 1], Ordering::Release);
    }

    /// The callee-saved registers the task's thread saved when it last stopped (zero for
    /// a coroutine, whose registers are the runtime's business). Only meaningful while
    /// the thread is stopped.
    pub fn saved_registers(&self) -> [usize; SAVED_REGS] {
        std::array::from_fn(|i| self.regs[i].load(Ordering::Acquire))
    }

    /// The runtime's own pointer attached to the task.
    pub fn user_data(&self) -> *mut c_void {
        self.user_data.load(Ordering::Acquire)
    }

    /// Attaches a pointer of the runtime's to the task.
    pub fn set_user_data(&self, p: *mut c_void) {
        self.user_data.store(p, Ordering::Release);
    }

    /// Whether this is the stack of an attached thread (registered automatically).
    pub fn is_thread_stack(&self) -> bool {
        self.is_thread_stack
    }
}

/// The stack bounds of the calling thread, from `pthread_getattr_np`.
pub(crate) fn current_thread_stack() -> Option<(usize, usize)> {
    // SAFETY: pthread_attr_t is plain data; pthread_getattr_np initialises it for the
    // current thread and pthread_attr_destroy releases it.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 || addr.is_null() {
            return None;
        }
        Some((addr as usize, addr as usize + size))
    }
}
