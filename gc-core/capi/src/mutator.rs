//! Mutator threads from C: attaching and detaching (`gc_thread_attach`, the
//! thread-local `C_MUTATOR`), the `ptls` check every per-thread entry runs
//! ([`checked_mutator`], [`running_mutator`]), collections, safepoints and GC-safe
//! regions.
//!
//! A `ptls` (`gc_mutator_t *`, the seed's `jl_ptls_t`) stays a raw pointer, not a
//! registry handle: the hot paths take it, and it is checked by its magic and owning
//! thread with two loads (mutator memory is recycled, never freed, so a stale `ptls`
//! stays readable and fails the check).

use crate::entry::{arg, entry, failure, gc_failure, Checked};
use crate::heap::{gc_heap_t, heap_arg};
use gc_core::ffi::{current_ptls, helper_ptls, thread_id, MUTATOR_MAGIC};
use gc_core::{CollectionKind, GcError, Mutator, MutatorShared, SafeState};
use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

/// A mutator thread's state (opaque; the seed's `jl_ptls_t` points to one).
#[repr(C)]
pub struct gc_mutator_t {
    _opaque: [u8; 0],
}

/// `gc_collect` kinds (same values as the seed's `jl_gc_collection_t`).
pub const GC_COLLECT_AUTO: c_int = 0;
/// Full collection.
pub const GC_COLLECT_FULL: c_int = 1;
/// Partial (young-generation) collection.
pub const GC_COLLECT_PARTIAL: c_int = 2;

thread_local! {
    /// Mutators attached through the C ABI; dropped (detached) at thread exit.
    static C_MUTATOR: RefCell<Option<Mutator>> = const { RefCell::new(None) };
}

/// The calling thread's mutator as a C pointer (null if not attached); on a collector
/// helper thread, its `ptls` record (for marking calls only).
pub(crate) fn cur() -> *mut gc_mutator_t {
    let m = current_ptls();
    if m.is_null() {
        return helper_ptls() as *mut gc_mutator_t;
    }
    m as *mut gc_mutator_t
}

/// Whether the calling thread is attached and inside a collection (a callback, a mark
/// or sweep function).
pub(crate) fn in_collection() -> bool {
    let m = current_ptls();
    // SAFETY: the current mutator is alive while attached.
    !m.is_null() && unsafe { &*m }.in_collection()
}

/// Checks that `m` is the calling thread's own, attached mutator: without a
/// thread-local lookup (costly in a shared library) when it is. Refused, naming `what`,
/// for NULL, an unattached thread or another thread's `ptls`.
///
/// # Safety
/// `m` is null or a `ptls` this library handed out.
#[inline(always)]
pub(crate) unsafe fn checked_mutator<'a>(
    m: *mut gc_mutator_t,
    what: &'static str,
) -> Checked<&'a MutatorShared> {
    let ms = m as *const MutatorShared;
    if !ms.is_null() {
        // The owning thread is always compared (one load of the thread pointer): a
        // ptls of another thread would otherwise allocate from, or queue into, that
        // thread's pages and corrupt them.
        // SAFETY: a non-null ptls is, by the documented contract, a pointer this library
        // handed out; mutator memory is recycled, never freed, so it stays readable; its
        // head is only read.
        let ok = unsafe {
            (*ms).head().magic.load(Ordering::Relaxed) == MUTATOR_MAGIC
                && (*ms).head().thread.load(Ordering::Relaxed) == thread_id()
        };
        if ok {
            // SAFETY: the calling thread's attached mutator.
            return Ok(unsafe { &*ms });
        }
    }
    checked_mutator_slow(m, what)
}

#[cold]
fn checked_mutator_slow<'a>(
    m: *mut gc_mutator_t,
    what: &'static str,
) -> Checked<&'a MutatorShared> {
    let current = current_ptls();
    if m.is_null() || current.is_null() {
        return Err(gc_failure(what, GcError::NotAttached));
    }
    if !std::ptr::eq(m as *const MutatorShared, current) {
        return Err(arg(format!(
            "{what}: ptls {m:p} is not the calling thread's ({current:p})"
        )));
    }
    // SAFETY: it is the calling thread's attached mutator, alive while attached.
    Ok(unsafe { &*current })
}

/// [`checked_mutator`], and the thread is running managed code (not in a GC-safe
/// region) outside a collection.
///
/// # Safety
/// As for [`checked_mutator`].
pub(crate) unsafe fn running_mutator<'a>(
    m: *mut gc_mutator_t,
    what: &'static str,
) -> Checked<&'a MutatorShared> {
    // SAFETY: forwarded from the caller.
    let ms = unsafe { checked_mutator(m, what) }?;
    if ms.in_collection() {
        return Err(failure(
            ffi_support::Status::State,
            format!("{what}: {}", GcError::DuringCollection { what }),
        ));
    }
    if !ms.is_running() {
        return Err(gc_failure(what, GcError::InGcSafeRegion));
    }
    Ok(ms)
}

/// The calling thread's mutator as a handle; refused (naming `what`) if the thread is
/// not attached.
pub(crate) fn current_mutator(what: &'static str) -> Checked<Mutator> {
    let m = current_ptls();
    if m.is_null() {
        return Err(gc_failure(what, GcError::NotAttached));
    }
    // SAFETY: the calling thread's attached mutator, alive while attached.
    Ok(unsafe { Mutator::borrowed(&*m) })
}

/// Attaches the calling thread to `heap`; returns its mutator (`ptls`), NULL on error
/// (already attached, bad heap handle). The thread detaches at exit or with
/// `gc_thread_detach`.
#[no_mangle]
pub extern "C" fn gc_thread_attach(heap: *mut gc_heap_t) -> *mut gc_mutator_t {
    entry("gc_thread_attach", || {
        Ok(attach(&heap_arg(heap, "gc_thread_attach")?)?)
    })
}

/// Attaches the calling thread to `heap` through the C ABI (its mutator kept in
/// `C_MUTATOR`).
pub(crate) fn attach(heap: &gc_core::Heap) -> Result<*mut gc_mutator_t, GcError> {
    let m = heap.attach()?;
    let p = m.ptls() as *mut gc_mutator_t;
    C_MUTATOR.with(|c| *c.borrow_mut() = Some(m));
    Ok(p)
}

/// Detaches the calling thread (attached with `gc_thread_attach` or `jl_init`); its
/// reachable objects stay alive. `RT_ERR_NOT_ATTACHED` if it was not attached through
/// the C ABI.
#[no_mangle]
pub extern "C" fn gc_thread_detach() -> c_int {
    entry("gc_thread_detach", || {
        match C_MUTATOR.with(|c| c.borrow_mut().take()) {
            Some(m) => {
                drop(m);
                Ok(0)
            }
            None => Err(GcError::NotAttached.into()),
        }
    })
}

/// The calling thread's mutator, NULL if it is not attached.
#[no_mangle]
pub extern "C" fn gc_current_mutator() -> *mut gc_mutator_t {
    cur()
}

/// Runs a collection (`GC_COLLECT_AUTO`, `_FULL` or `_PARTIAL`). 1 if this call ran
/// one, 0 if another thread's collection satisfied it, a negative `RT_ERR_*` code on
/// error.
///
/// # Safety
/// `m` is null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_collect(m: *mut gc_mutator_t, kind: c_int) -> c_int {
    entry("gc_collect", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { checked_mutator(m, "gc_collect") }?;
        let kind = match kind {
            GC_COLLECT_AUTO => CollectionKind::Auto,
            GC_COLLECT_FULL => CollectionKind::Full,
            GC_COLLECT_PARTIAL => CollectionKind::Partial,
            other => return Err(arg(format!("gc_collect: unknown collection kind {other}"))),
        };
        // SAFETY: the calling thread's attached mutator (`checked_mutator` checked it).
        let ran = unsafe { Mutator::borrowed(ms) }.collect(kind)?;
        Ok(ran.is_some() as c_int)
    })
}

/// A safepoint poll (a hot path: no panic guard).
///
/// # Safety
/// `m` is null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_safepoint(m: *mut gc_mutator_t) {
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    if let Ok(ms) = unsafe { checked_mutator(m, "gc_safepoint") } {
        // SAFETY: the calling thread's attached mutator (`checked_mutator` checked it).
        unsafe { ms.safepoint() };
    }
}

/// Enters a GC-safe region (blocking call, waiting for a lock): collections may run and
/// this thread must not touch the heap until `gc_safe_leave`. Returns the previous
/// state, to pass to `gc_safe_leave`; -1 on error.
///
/// Copies the caller's callee-saved registers and stack pointer into a buffer in its own
/// frame, then calls `gc_safe_enter_impl` with the buffer and `m`, which checks `m`
/// before anything is written to the mutator (`gc_core::spill_and_call!`). Written
/// without a prologue so that the registers saved are the caller's, and the stack
/// pointer is the caller's (which stays live for the whole GC-safe region, unlike this
/// function's frame).
///
/// # Safety
/// `m` is null or a mutator pointer (it is checked).
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn gc_safe_enter(m: *mut gc_mutator_t) -> i8 {
    gc_core::spill_and_call!(gc_safe_enter_impl)
}

/// Enters a GC-safe region (blocking call, waiting for a lock): collections may run and
/// this thread must not touch the heap until `gc_safe_leave`. Returns the previous
/// state, to pass to `gc_safe_leave`; -1 on error.
///
/// # Safety
/// `m` is null or a mutator pointer (it is checked).
///
/// cbindgen:ignore
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub unsafe extern "C" fn gc_safe_enter(m: *mut gc_mutator_t) -> i8 {
    entry("gc_safe_enter", || {
        let mut regs = [0; gc_core::SAVED_REGS];
        gc_core::tls::save_registers(&mut regs);
        // SAFETY: forwarded; `regs` is this call's.
        Ok(unsafe { gc_safe_enter_impl(&regs, m) })
    })
}

/// `gc_safe_enter` once the registers are saved: checks `m`, then forwards.
///
/// # Safety
/// `m` is null or a mutator pointer; `regs` points to the saved registers.
unsafe extern "C" fn gc_safe_enter_impl(
    regs: *const [usize; gc_core::SAVED_REGS],
    m: *mut gc_mutator_t,
) -> i8 {
    entry("gc_safe_enter", || {
        // SAFETY: the ptls is null or one this library handed out (this function's
        // contract).
        let ms = unsafe { checked_mutator(m, "gc_safe_enter") }?;
        // SAFETY: the calling thread's own mutator (checked); the C caller keeps off the
        // heap until gc_safe_leave (the function's documented contract); `regs` is the
        // buffer `gc_safe_enter` filled.
        Ok(unsafe { ms.enter_gc_safe(&*regs) as i8 })
    })
}

/// Enters a GC-safe region like `gc_safe_enter`, recording `sp` as the lowest stack
/// address in use during the region instead of the caller's stack pointer. For a
/// callback called deeper than the frame that stays live while the thread blocks (a GIL's
/// block hook): `sp` is the stack pointer of that frame, which must have spilled the
/// callee-saved registers that may hold references into itself, and must not return
/// before `gc_safe_leave`. The registers saved are this call's (their values only add
/// roots). Returns the previous state; -1 on error (`sp` not inside the thread's stack,
/// or below the caller's own stack pointer).
///
/// # Safety
/// `m` is null or a mutator pointer; `sp` satisfies the above.
#[no_mangle]
pub unsafe extern "C" fn gc_safe_enter_sp(m: *mut gc_mutator_t, sp: *mut c_void) -> i8 {
    entry("gc_safe_enter_sp", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { checked_mutator(m, "gc_safe_enter_sp") }?;
        // SAFETY: the calling thread's own mutator (checked); `sp` as documented.
        Ok(unsafe { ms.enter_gc_safe_at(sp as usize) }? as i8)
    })
}

/// Leaves a GC-safe region entered with `gc_safe_enter` (`state` is what it returned),
/// waiting for a running collection to finish first.
///
/// # Safety
/// `m` is null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_safe_leave(m: *mut gc_mutator_t, state: i8) {
    entry("gc_safe_leave", || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let ms = unsafe { checked_mutator(m, "gc_safe_leave") }?;
        let state = SafeState::from_raw(state)
            .ok_or_else(|| arg(format!("gc_safe_leave: invalid state {state}")))?;
        // SAFETY: the calling thread's own mutator (checked), with a state its entry
        // returned (the caller's contract).
        unsafe { ms.leave_gc_safe(state) };
        Ok(())
    })
}
