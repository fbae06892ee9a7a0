//! CPython's C API for objects and memory as a Rust API: readying a type, GC objects
//! (new, track, untrack, delete), plain objects, the memory functions and calling a
//! type's deallocator. Each acts on the bridge entered on the calling thread
//! ([`crate::Bridge::enter`]), as CPython's act on the current interpreter; the memory
//! functions also work with none entered. (Reference counts are in `refcount.rs`, the
//! pending error in `pyerr.rs`, `PyGC_Collect` in `collect.rs`: together with this
//! module, the crate's Rust API of CPython's operations.)
//!
//! The C ABI (the `refbridge-capi` crate, CPython's names) calls these functions and only
//! converts: a failure here is an `Err(BridgeError)`, which the C layer turns into NULL /
//! -1 and the pending error ([`crate::set_pending_error_from`]). Rust code calls them
//! directly (native types written in Rust, hosts releasing the references they hold).

use crate::abi::{
    from_gc_head, gc_head, is_stub, Destructor, FreeFunc, PyGCHead, PyObject, PySsizeT,
    PyTypeObject, PyVarObject, GC_FLAGS, PY_TPFLAGS_HAVE_GC, PY_TPFLAGS_READY,
};
use crate::debug::{DebugReport, ReportKind};
use crate::error::BridgeError;
use crate::mem::{self, BlockState};
use crate::pyerr::set_pending_error_from;
use crate::state::{current, Inner, DEBUG_BRIDGES};
use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

thread_local! {
    static DEALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// Native objects deallocated on this thread so far (every `tp_dealloc` the bridge or
/// [`crate::decref`] called).
pub fn deallocs() -> u64 {
    DEALLOCS.with(|d| d.get())
}

fn count_dealloc() {
    DEALLOCS.with(|d| d.set(d.get() + 1));
}

/// Calls `tp_dealloc` (or [`default_dealloc`] if the type has none) and counts it.
///
/// # Safety
/// `op` is a live native object whose count is 0.
#[inline]
pub(crate) unsafe fn call_dealloc(op: *mut PyObject) {
    count_dealloc();
    // SAFETY: a live object has a valid type (caller).
    unsafe {
        let ty = (*op).ob_type;
        match (*ty).tp_dealloc {
            Some(f) => f(op),
            None => default_dealloc(op),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Memory.

fn alloc(size: usize, zero: bool) -> Result<NonNull<u8>, BridgeError> {
    match current() {
        Some(inner) => inner.alloc_native(size, zero),
        None => {
            // SAFETY: the global account is static.
            let p = unsafe { mem::alloc(&mem::GLOBAL, size, zero) };
            match NonNull::new(p) {
                Some(p) => Ok(p),
                None => Err(BridgeError::OutOfMemory { size }),
            }
        }
    }
}

/// CPython's `PyMem_Malloc` (and `PyObject_Malloc`): `size` counted bytes, charged to the
/// entered bridge (subject to its pressure policy: a collection when the trigger is
/// crossed, [`BridgeError::MemoryCap`] over the cap) or, with none entered, to the
/// process-wide account. 16-byte aligned; free with [`mem_free`].
#[inline]
pub fn mem_alloc(size: usize) -> Result<NonNull<u8>, BridgeError> {
    alloc(size, false)
}

/// The error for a pointer `what` was given that is not a live counted block.
#[cold]
#[inline(never)]
fn not_a_block(state: BlockState, what: &'static str, addr: usize) -> BridgeError {
    match state {
        BlockState::Freed => BridgeError::Freed { what, addr },
        _ => BridgeError::NotABlock { what, addr },
    }
}

/// CPython's `PyMem_Realloc`: resizes a block of [`mem_alloc`] (NULL allocates); on
/// failure the block is left as it was. A pointer that is not a live block of these
/// allocators (memory from `malloc`, a block freed already) is refused with
/// [`BridgeError::NotABlock`] or [`BridgeError::Freed`].
///
/// # Safety
/// `p` is NULL or a live block of these allocators, or at least a pointer with 16
/// readable bytes before it (what a `malloc`'d block has).
pub unsafe fn mem_realloc(p: *mut u8, size: usize) -> Result<NonNull<u8>, BridgeError> {
    if p.is_null() {
        return mem_alloc(size);
    }
    // SAFETY: 16 readable bytes before p (caller).
    match unsafe { mem::block_state(p) } {
        BlockState::Live(_) => {}
        state => return Err(not_a_block(state, "PyMem_Realloc", p as usize)),
    }
    // SAFETY: a counted block (checked).
    let old = unsafe { mem::block_size(p) };
    let inner = current();
    if size > old {
        if let Some(inner) = inner {
            // Apply the pressure policy to the growth.
            let probe = inner.alloc_native(0, false)?;
            // SAFETY: the probe block was just allocated.
            unsafe { mem::free(probe.as_ptr()) };
        }
    }
    let account = inner.map_or(&mem::GLOBAL as *const _, |i| &*i.account as *const _);
    // SAFETY: forwarded; the account outlives its blocks.
    let n = unsafe { mem::realloc(account, p, size) };
    match NonNull::new(n) {
        Some(n) => Ok(n),
        None => Err(BridgeError::OutOfMemory { size }),
    }
}

/// CPython's `PyMem_Free` and `PyObject_Free` (`PyObject_Del`): frees a block of
/// [`mem_alloc`] or a non-GC object of [`object_new`]. NULL is accepted. In debug mode
/// objects go to the quarantine and a second free is reported.
///
/// Errors (the pointer left alone): [`BridgeError::NotABlock`] for a pointer that is
/// not a block of these allocators (a `malloc`'d block, which CPython would pass on to
/// `free()`, or any other memory), [`BridgeError::Freed`] for a block freed already
/// whose memory was not reused since (a reused one is freed again, as in CPython).
///
/// # Safety
/// `p` is NULL, or a live block of these allocators that nobody uses any more, or at
/// least a pointer with 16 readable bytes before it (what a `malloc`'d block has).
#[inline(always)]
#[track_caller]
pub unsafe fn mem_free(p: *mut u8) -> Result<(), BridgeError> {
    if p.is_null() {
        return Ok(());
    }
    // Only a bridge in debug mode looks at frees: no thread-local lookup without one.
    if DEBUG_BRIDGES.load(Ordering::Relaxed) != 0 {
        // SAFETY: forwarded.
        return unsafe { mem_free_debug(p) };
    }
    // SAFETY: forwarded.
    unsafe { mem_free_plain(p) }
}

/// [`mem_free`] of a block: freed if it is a live one, refused otherwise.
///
/// # Safety
/// As [`mem_free`]; `p` is not NULL.
#[inline(always)]
unsafe fn mem_free_plain(p: *mut u8) -> Result<(), BridgeError> {
    // SAFETY: the caller's contract.
    match unsafe { mem::free_checked(p) } {
        Ok(()) => Ok(()),
        Err(state) => Err(not_a_block(state, "PyMem_Free", p as usize)),
    }
}

/// [`mem_free`] with a debug bridge somewhere: the entered bridge's quarantine takes
/// its objects (and reports a second free of one); other blocks are freed as usual.
///
/// # Safety
/// As [`mem_free`]; `p` is not NULL.
#[cold]
#[inline(never)]
#[track_caller]
unsafe fn mem_free_debug(p: *mut u8) -> Result<(), BridgeError> {
    if let Some(d) = current().and_then(|inner| inner.debug.as_ref()) {
        let mut d = d.lock();
        let op = p as *mut PyObject;
        if d.is_freed(op) {
            d.use_after_free(op, "PyObject_Free");
            return Err(BridgeError::Freed {
                what: "PyMem_Free",
                addr: p as usize,
            });
        }
        if d.made_at(op).is_some() {
            // SAFETY: a live object in a counted block.
            if let Some(old) = unsafe { d.object_freed(op, p) } {
                drop(d);
                // SAFETY: a block leaving the quarantine.
                unsafe { mem::free(old) };
            }
            return Ok(());
        }
    }
    // SAFETY: forwarded.
    unsafe { mem_free_plain(p) }
}

/// Counted native bytes in use: the entered bridge's, or those allocated with none
/// entered (`rb_native_bytes`).
pub fn native_bytes() -> usize {
    current().map_or(mem::GLOBAL.bytes(), |i| i.account.bytes())
}

// ---------------------------------------------------------------------------------------
// Types.

/// The functions [`type_ready_with`] fills in where a type has none. [`type_ready`]
/// uses the Rust ones ([`DefaultSlots::RUST`]); the C ABI's `PyType_Ready` its own C
/// names, so that, as in CPython, `tp_free` of a GC type is `PyObject_GC_Del`.
#[derive(Clone, Copy, Debug)]
pub struct DefaultSlots {
    /// `tp_dealloc` (untrack if GC, then `tp_free`): [`default_dealloc`] or a function
    /// that calls it.
    pub dealloc: Destructor,
    /// `tp_free` of GC types: a function that calls [`gc_del`].
    pub free_gc: FreeFunc,
    /// `tp_free` of other types: a function that calls [`mem_free`].
    pub free: FreeFunc,
}

impl DefaultSlots {
    /// The crate's own: [`default_dealloc`], and `tp_free`s that call [`gc_del`] and
    /// [`mem_free`] (a failure of `gc_del` becomes the pending error).
    pub const RUST: DefaultSlots = DefaultSlots {
        dealloc: Some(default_dealloc),
        free_gc: Some(free_gc_slot),
        free: Some(free_slot),
    };
}

/// `tp_free` of GC types in [`DefaultSlots::RUST`].
///
/// # Safety
/// As [`gc_del`].
unsafe extern "C" fn free_gc_slot(p: *mut c_void) {
    // SAFETY: forwarded.
    if let Err(e) = unsafe { gc_del(p as *mut PyObject) } {
        set_pending_error_from(&e);
    }
}

/// `tp_free` of other types in [`DefaultSlots::RUST`].
///
/// # Safety
/// As [`mem_free`].
unsafe extern "C" fn free_slot(p: *mut c_void) {
    // SAFETY: forwarded.
    if let Err(e) = unsafe { mem_free(p as *mut u8) } {
        set_pending_error_from(&e);
    }
}

/// CPython's `PyType_Ready` for the supported fields, with the crate's default slots
/// ([`DefaultSlots::RUST`]): see [`type_ready_with`].
///
/// # Safety
/// As [`type_ready_with`].
pub unsafe fn type_ready(tp: *mut PyTypeObject) -> Result<(), BridgeError> {
    // SAFETY: forwarded.
    unsafe { type_ready_with(tp, &DefaultSlots::RUST) }
}

/// `PyType_Ready`: checks the type (a name, `tp_basicsize` at least a `PyObject` (so
/// not negative), `tp_itemsize` not negative, `tp_traverse` if it has `Py_TPFLAGS_HAVE_GC`), fills in
/// `tp_free` and `tp_dealloc` from `slots` where they are unset, and marks it ready.
/// A ready type is left alone.
///
/// # Safety
/// `tp` is NULL or a type object that lives (unmoved) as long as objects of it do, and
/// nobody else reads or writes it during the call; `tp_name` is NULL or a NUL-terminated
/// string; its functions are sound to call on its objects (`tp_dealloc` on an object at
/// count 0, `tp_traverse` and `tp_clear` on a live one) and never drop the last
/// [`crate::Bridge`] or guard of the bridge that runs them.
pub unsafe fn type_ready_with(
    tp: *mut PyTypeObject,
    slots: &DefaultSlots,
) -> Result<(), BridgeError> {
    if tp.is_null() {
        return Err(BridgeError::NullType {
            what: "PyType_Ready",
        });
    }
    // SAFETY: a type object (caller).
    let t = unsafe { &mut *tp };
    if t.tp_flags & PY_TPFLAGS_READY != 0 {
        return Ok(());
    }
    let invalid = |t: &PyTypeObject, reason: String| BridgeError::InvalidType {
        what: "PyType_Ready",
        // SAFETY: tp_name is NULL or a C string (caller).
        type_name: unsafe { t.name() },
        reason,
    };
    if t.tp_name.is_null() {
        return Err(invalid(t, "has no tp_name".into()));
    }
    // Compared signed: a negative size is refused, not read as a huge unsigned one.
    if t.tp_basicsize < std::mem::size_of::<PyObject>() as PySsizeT || t.tp_itemsize < 0 {
        return Err(invalid(
            t,
            format!(
                "has tp_basicsize {} (at least {}) and tp_itemsize {}",
                t.tp_basicsize,
                std::mem::size_of::<PyObject>(),
                t.tp_itemsize
            ),
        ));
    }
    if t.tp_flags & PY_TPFLAGS_HAVE_GC != 0 && t.tp_traverse.is_none() {
        return Err(invalid(
            t,
            "has Py_TPFLAGS_HAVE_GC but no tp_traverse".into(),
        ));
    }
    if t.tp_free.is_none() {
        t.tp_free = if t.is_gc() { slots.free_gc } else { slots.free };
    }
    if t.tp_dealloc.is_none() {
        t.tp_dealloc = slots.dealloc;
    }
    t.tp_flags |= PY_TPFLAGS_READY;
    Ok(())
}

/// Checks a type before allocating an instance.
///
/// # Safety
/// `tp` is NULL or a `PyTypeObject` whose `tp_name` is NULL or a C string.
unsafe fn check_type(
    tp: *mut PyTypeObject,
    gc: bool,
    what: &'static str,
) -> Result<(), BridgeError> {
    if tp.is_null() {
        return Err(BridgeError::NullType { what });
    }
    // SAFETY: a type object (caller).
    let t = unsafe { &*tp };
    let invalid = |reason: String| BridgeError::InvalidType {
        what,
        // SAFETY: tp_name is NULL or a C string (caller).
        type_name: unsafe { t.name() },
        reason,
    };
    if t.tp_flags & PY_TPFLAGS_READY == 0 {
        return Err(invalid("is not ready (call PyType_Ready)".into()));
    }
    if t.is_gc() != gc {
        return Err(invalid(format!(
            "{} Py_TPFLAGS_HAVE_GC",
            if gc { "lacks" } else { "has" }
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Objects.

/// Allocates a GC object of `size` bytes (header included) and initialises its header.
///
/// # Safety
/// `tp` is a ready GC type.
#[track_caller]
unsafe fn gc_alloc(tp: *mut PyTypeObject, size: usize) -> Result<NonNull<PyObject>, BridgeError> {
    // (no `ok_or(error)` on these paths: the error would be made and dropped on success)
    let Some(inner) = current() else {
        return Err(BridgeError::NoneEntered {
            what: "PyObject_GC_New",
        });
    };
    inner.maybe_auto_collect();
    let Some(total) = size.checked_add(std::mem::size_of::<PyGCHead>()) else {
        return Err(BridgeError::OutOfMemory { size });
    };
    let g = inner.alloc_native(total, true)?.as_ptr() as *mut PyGCHead;
    let op = from_gc_head(g);
    // SAFETY: a fresh zeroed block of `total` bytes.
    unsafe {
        (*op).ob_refcnt = 1;
        (*op).ob_type = tp;
    }
    let l = &inner.local.0;
    l.gc_allocs.set(l.gc_allocs.get() + 1);
    if let Some(d) = &inner.debug {
        // SAFETY: tp is a valid type (caller).
        d.lock().object_made(op, unsafe { (*tp).name() });
    }
    // SAFETY: inside a non-null block.
    Ok(unsafe { NonNull::new_unchecked(op) })
}

fn var_size(tp: &PyTypeObject, n: PySsizeT) -> Option<usize> {
    let items = usize::try_from(n)
        .ok()?
        .checked_mul(tp.tp_itemsize.max(0) as usize)?;
    let size = (tp.tp_basicsize as usize).checked_add(items)?;
    Some(size.checked_add(7)? & !7)
}

/// CPython's `PyObject_GC_New(type, typeobj)` (`_PyObject_GC_New`): a new object of GC
/// type `tp`, count 1, not tracked yet, its memory after the header zeroed. It may run
/// an automatic cycle collection first ([`crate::BridgeConfig::cycle_threshold`]).
///
/// # Safety
/// `tp` is NULL or a type object as [`type_ready_with`] requires.
#[track_caller]
pub unsafe fn gc_new(tp: *mut PyTypeObject) -> Result<NonNull<PyObject>, BridgeError> {
    // SAFETY: forwarded.
    unsafe { check_type(tp, true, "PyObject_GC_New")? };
    // SAFETY: a ready GC type.
    unsafe { gc_alloc(tp, (*tp).tp_basicsize as usize) }
}

/// CPython's `PyObject_GC_NewVar` (`_PyObject_GC_NewVar`): a variable-size GC object
/// with `n` items (`ob_size` = `n`).
///
/// # Safety
/// As [`gc_new`].
#[track_caller]
pub unsafe fn gc_new_var(
    tp: *mut PyTypeObject,
    n: PySsizeT,
) -> Result<NonNull<PyVarObject>, BridgeError> {
    // SAFETY: forwarded.
    unsafe { check_type(tp, true, "PyObject_GC_NewVar")? };
    // SAFETY: a ready type.
    let Some(size) = var_size(unsafe { &*tp }, n) else {
        return Err(BridgeError::BadItemCount {
            what: "PyObject_GC_NewVar",
            count: n,
        });
    };
    // SAFETY: a ready GC type.
    let op = unsafe { gc_alloc(tp, size)? }.cast::<PyVarObject>();
    // SAFETY: a fresh var object.
    unsafe { (*op.as_ptr()).ob_size = n };
    Ok(op)
}

/// CPython's `PyObject_New(type, typeobj)` (`_PyObject_New`): a new object of non-GC
/// type `tp`, count 1, its memory zeroed. Freed with [`mem_free`].
///
/// # Safety
/// As [`gc_new`].
#[track_caller]
pub unsafe fn object_new(tp: *mut PyTypeObject) -> Result<NonNull<PyObject>, BridgeError> {
    // SAFETY: forwarded.
    unsafe { check_type(tp, false, "PyObject_New")? };
    // SAFETY: a ready type.
    let size = unsafe { (*tp).tp_basicsize } as usize;
    let op = alloc(size, true)?.cast::<PyObject>();
    // SAFETY: a fresh zeroed block.
    unsafe {
        (*op.as_ptr()).ob_refcnt = 1;
        (*op.as_ptr()).ob_type = tp;
    }
    if let Some(inner) = current() {
        if let Some(d) = &inner.debug {
            // SAFETY: a valid type.
            d.lock().object_made(op.as_ptr(), unsafe { (*tp).name() });
        }
    }
    Ok(op)
}

/// Checks an object handed to a GC entry point ([`gc_track`], [`gc_untrack`],
/// [`gc_del`]): not NULL, not a stub, of a GC type, and a live block allocated by the
/// bridge entered on this thread (its list and counts are that bridge's: unlinking an
/// object of another bridge, or of none, would corrupt both; freeing a freed one would
/// corrupt the allocator). On failure the caller leaves the object alone (a leak, never
/// corruption). Inline, the error made out of line: these run once or twice per
/// deallocated object.
///
/// # Safety
/// `op` is NULL or points to an object (live, or freed by the bridge with its memory
/// not handed back to the system).
#[inline]
unsafe fn gc_checked<'a>(op: *mut PyObject, what: &'static str) -> Result<&'a Inner, BridgeError> {
    if !op.is_null() && !is_stub(op) {
        // SAFETY: an object has a type (caller).
        if unsafe { &*(*op).ob_type }.is_gc() {
            if let Some(inner) = current() {
                // SAFETY: a GC object's block starts at its head (if the object is not
                // the bridge's, the header read is another allocator's chunk header or
                // the object's neighbour, and matches no account).
                let owner = unsafe { mem::block_account(gc_head(op) as *const u8) };
                if owner == std::sync::Arc::as_ptr(&inner.account) as usize {
                    return Ok(inner);
                }
            }
        }
    }
    // SAFETY: as above (caller).
    Err(unsafe { gc_refusal(op, what) })
}

/// Why [`gc_checked`] refused `op`.
///
/// # Safety
/// As [`gc_checked`].
#[cold]
#[inline(never)]
unsafe fn gc_refusal(op: *mut PyObject, what: &'static str) -> BridgeError {
    if op.is_null() {
        return BridgeError::NullObject { what };
    }
    if is_stub(op) {
        return BridgeError::StubNotAllowed {
            what,
            addr: op as usize,
        };
    }
    let inner = current();
    if let Some(d) = inner.and_then(|i| i.debug.as_ref()) {
        // The debug mode's quarantine: the freed object's type is the freed-object type.
        let mut d = d.lock();
        if d.is_freed(op) {
            d.use_after_free(op, what);
            return BridgeError::Freed {
                what,
                addr: op as usize,
            };
        }
    }
    // SAFETY: an object has a type (caller).
    let tp = unsafe { &*(*op).ob_type };
    // SAFETY: a live object's type has a C string or NULL as its name (caller).
    let type_name = unsafe { tp.name() };
    if !tp.is_gc() {
        return BridgeError::NotGcObject {
            what,
            addr: op as usize,
            type_name,
        };
    }
    if inner.is_none() {
        return BridgeError::NoneEntered { what };
    }
    // SAFETY: as in gc_checked.
    match unsafe { mem::block_state(gc_head(op) as *const u8) } {
        BlockState::Live(_) => BridgeError::OtherBridge {
            what,
            addr: op as usize,
            type_name,
        },
        state => not_a_block(state, what, op as usize),
    }
}

/// CPython's `PyObject_GC_Track`: the cycle collector considers the object from now on.
/// Tracking it twice is reported in debug mode (and ignored).
///
/// # Safety
/// `op` is NULL or a live object; if it is of a GC type, [`gc_new`] or [`gc_new_var`]
/// made it, and its references are initialised (its `tp_traverse` may run from now on).
#[inline]
pub unsafe fn gc_track(op: *mut PyObject) -> Result<(), BridgeError> {
    // SAFETY: forwarded (caller).
    let inner = unsafe { gc_checked(op, "PyObject_GC_Track")? };
    // SAFETY: a GC object has a head (caller).
    unsafe {
        let g = gc_head(op);
        if (*g).gc_next != 0 {
            if let Some(d) = &inner.debug {
                let mut d = d.lock();
                let made = d.made_at(op);
                d.report(DebugReport {
                    kind: ReportKind::DoubleTrack,
                    object: op as usize,
                    type_name: crate::debug::type_name_of(op),
                    message: format!(
                        "PyObject_GC_Track of {:#x}, already tracked by the garbage collector",
                        op as usize
                    ),
                    made_at: made,
                    freed_at: None,
                });
            }
            return Ok(());
        }
        let s = inner.local.0.gc_list;
        let last = ((*s).gc_prev & !GC_FLAGS) as *mut PyGCHead;
        (*g).gc_prev = last as usize | ((*g).gc_prev & GC_FLAGS);
        (*g).gc_next = s as usize;
        (*last).gc_next = g as usize;
        (*s).gc_prev = g as usize;
    }
    inner.tracked.set(inner.tracked.get() + 1);
    Ok(())
}

/// Unlinks a tracked object from the list.
///
/// # Safety
/// `g` is the head of a tracked object of `inner`'s list.
#[inline]
unsafe fn unlink(inner: &Inner, g: *mut PyGCHead) {
    // SAFETY: a tracked object's neighbours are list members (caller).
    unsafe {
        let prev = ((*g).gc_prev & !GC_FLAGS) as *mut PyGCHead;
        let next = (*g).gc_next as *mut PyGCHead;
        (*prev).gc_next = next as usize;
        (*next).gc_prev = prev as usize | ((*next).gc_prev & GC_FLAGS);
        (*g).gc_next = 0;
        (*g).gc_prev &= GC_FLAGS;
    }
    inner.tracked.set(inner.tracked.get() - 1);
}

/// CPython's `PyObject_GC_UnTrack`: no longer considered by the cycle collector (nothing
/// happens if it is not tracked).
///
/// # Safety
/// `op` is NULL or a live object.
#[inline]
pub unsafe fn gc_untrack(op: *mut PyObject) -> Result<(), BridgeError> {
    // SAFETY: forwarded (caller).
    let inner = unsafe { gc_checked(op, "PyObject_GC_UnTrack")? };
    // SAFETY: a GC object has a head (caller).
    unsafe {
        let g = gc_head(op);
        if (*g).gc_next != 0 {
            unlink(inner, g);
        }
    }
    Ok(())
}

/// CPython's `PyObject_GC_Del`: frees a GC object (untracking it first if needed). NULL
/// is accepted.
///
/// A second `gc_del` of an object is refused, the object left alone: in debug mode
/// (quarantine) it is reported as a use after free and fails with
/// [`BridgeError::Freed`]; without it, the mark the first free left in the block's
/// header gives [`BridgeError::Freed`] too while the memory is not reused (once reused
/// by a new block, that block is freed, as in CPython), and
/// [`BridgeError::NotABlock`] once the system allocator took it back.
///
/// # Safety
/// `op` is NULL or a live object nobody references any more, or an object this bridge
/// freed already whose memory is still mapped (refused as above).
#[inline]
#[track_caller]
pub unsafe fn gc_del(op: *mut PyObject) -> Result<(), BridgeError> {
    if op.is_null() {
        return Ok(());
    }
    // SAFETY: forwarded (caller).
    let inner = unsafe { gc_checked(op, "PyObject_GC_Del")? };
    // SAFETY: a GC object (checked) has a head.
    let g = unsafe { gc_head(op) };
    // SAFETY: as above.
    unsafe {
        if (*g).gc_next != 0 {
            unlink(inner, g);
        }
    }
    let l = &inner.local.0;
    l.gc_allocs.set(l.gc_allocs.get().saturating_sub(1));
    if let Some(d) = &inner.debug {
        // SAFETY: a live object in the counted block starting at its head.
        let old = unsafe { d.lock().object_freed(op, g as *mut u8) };
        if let Some(old) = old {
            // SAFETY: a block leaving the quarantine.
            unsafe { mem::free(old) };
        }
        return Ok(());
    }
    // SAFETY: the block starts at the head.
    unsafe { mem::free(g as *mut u8) };
    Ok(())
}

/// The `tp_dealloc` of types that define none ([`DefaultSlots::RUST`]; the C ABI's
/// `rb_default_dealloc`): untrack (GC types), then `tp_free` (or [`gc_del`] /
/// [`mem_free`] if the type has none). A failure becomes the pending error.
///
/// # Safety
/// `op` is a live native object whose count is 0, of a type as [`type_ready_with`]
/// requires.
pub unsafe extern "C" fn default_dealloc(op: *mut PyObject) {
    // SAFETY: a live object (caller).
    unsafe {
        let tp = (*op).ob_type;
        if (*tp).is_gc() {
            if let Err(e) = gc_untrack(op) {
                set_pending_error_from(&e);
            }
        }
        match (*tp).tp_free {
            Some(f) => f(op as *mut c_void),
            None if (*tp).is_gc() => {
                if let Err(e) = gc_del(op) {
                    set_pending_error_from(&e);
                }
            }
            None => {
                if let Err(e) = mem_free(op as *mut u8) {
                    set_pending_error_from(&e);
                }
            }
        }
    }
}
