//! Reference counts: CPython's `Py_IncRef`, `Py_DecRef` and `_Py_Dealloc` as a Rust API
//! on the entered bridge, and the bridge's side of them: deallocation with the trashcan,
//! a stub's count reaching 0, and the reference queue's drain (counts lowered when a
//! managed side dies, deallocations in a batch). The header's `Py_INCREF`/`Py_DECREF`
//! stay inline in C: [`incref`] and [`decref`] are the same add and subtract, with
//! [`dealloc`] at 0.

use crate::abi::{gc_head, is_stub, untag, PyObject, GC_MIRRORED, MANAGED_REFCNT};
use crate::handles::{USED, WEAK_LIMIT};
use crate::object::call_dealloc;
use crate::pyerr::set_pending_error;
use crate::state::{current, Inner, TRASHCAN_DEPTH};
use std::sync::atomic::Ordering;

/// CPython's `Py_IncRef` (the header's `Py_INCREF` out of line): one add on the untagged
/// address. NULL is accepted (nothing happens).
///
/// # Safety
/// `op` is NULL or a live native object or stub.
#[inline]
pub unsafe fn incref(op: *mut PyObject) {
    if !op.is_null() {
        // SAFETY: a live object (caller).
        unsafe { (*untag(op)).ob_refcnt += 1 };
    }
}

/// CPython's `Py_DecRef` (the header's `Py_DECREF` out of line): one subtract on the
/// untagged address, and [`dealloc`] when the count reaches 0. NULL is accepted.
///
/// # Safety
/// `op` is NULL or a live native object or stub the caller owns a reference to; the
/// type's `tp_dealloc` (run at 0) must be safe to call on it.
#[inline]
pub unsafe fn decref(op: *mut PyObject) {
    if op.is_null() {
        return;
    }
    // SAFETY: a live object (caller).
    let c = unsafe {
        let o = untag(op);
        (*o).ob_refcnt -= 1;
        (*o).ob_refcnt
    };
    if c == 0 {
        // SAFETY: forwarded (the count is 0).
        unsafe { dealloc(op) };
    }
}

/// CPython's `_Py_Dealloc`, the one slow path of `Py_DECREF`: a count reached 0. A native
/// object is deallocated (its `tp_dealloc`, nested at most [`crate::TRASHCAN_DEPTH`]
/// deep); a stub whose managed object died is freed; a stub whose managed object lives
/// was over-released by native code (reported, count repaired). With no bridge entered
/// on the thread, a non-GC object is deallocated and a GC object is left alone (its
/// bridge's collector frees it), with the pending error set and a line on stderr.
///
/// # Safety
/// `op` is a live native object or stub whose count is 0.
#[inline]
pub unsafe fn dealloc(op: *mut PyObject) {
    match current() {
        // SAFETY: forwarded.
        Some(inner) => unsafe { inner.decref_slow(op) },
        // SAFETY: forwarded.
        None => unsafe { dealloc_unentered(op) },
    }
}

/// [`dealloc`] on a thread with no bridge entered.
///
/// # Safety
/// As [`dealloc`].
#[cold]
unsafe fn dealloc_unentered(op: *mut PyObject) {
    // SAFETY: a live object (caller).
    if is_stub(op) || unsafe { (*op).ob_refcnt } != 0 {
        return;
    }
    // SAFETY: as above: a live object has a type.
    let tp = unsafe { &*(*op).ob_type };
    if tp.is_gc() {
        // GC objects belong to a bridge's list, which only a thread with that bridge
        // entered may change: deallocating here would leave the object linked there,
        // freed (deallocated again by that bridge's collector).
        let msg = format!(
            "SystemError: Py_DECREF dropped the last reference to {:#x} of type {} on a thread with no refbridge entered; GC objects are deallocated only with their bridge entered (left alone)",
            op as usize,
            // SAFETY: a live object's type has a C string or NULL as its name (caller).
            unsafe { tp.name() }
        );
        eprintln!("refbridge: {msg}");
        set_pending_error(&msg);
        return;
    }
    // SAFETY: a native object at 0 is deallocated directly.
    unsafe { call_dealloc(op) };
}

impl Inner {
    /// Processes the queue's tokens (bookkeeping always; deallocations in a batch unless
    /// a drain is already running on this thread, which then picks them up). Returns the
    /// number of tokens.
    pub(crate) fn drain(&self) -> usize {
        let n = self.bookkeep();
        let l = &self.local.0;
        if l.draining.get() || l.collecting.get() {
            return n;
        }
        self.run_pending();
        n
    }

    /// Deallocates the objects waiting in `pending`, in one batch, the pending error
    /// saved and restored.
    pub(crate) fn run_pending(&self) {
        let l = &self.local.0;
        if l.pending.borrow().is_empty() {
            return;
        }
        l.draining.set(true);
        let saved = l.error.borrow_mut().take();
        loop {
            let next = l.pending.borrow_mut().pop();
            let Some(op) = next else { break };
            self.counters.queue_deallocs.fetch_add(1, Ordering::Relaxed);
            // SAFETY: a native object whose count reached 0 in bookkeeping.
            unsafe { self.dealloc(op) };
            let raised = l.error.borrow_mut().take();
            if let Some(e) = raised {
                self.unraisable(op, &e.to_string_lossy());
            }
        }
        *l.error.borrow_mut() = saved;
        l.draining.set(false);
    }

    /// Takes the queue's tokens and updates the tables and counts; objects that reach 0
    /// go to `pending`.
    fn bookkeep(&self) -> usize {
        if self.queue.is_empty() {
            return 0;
        }
        let tokens = self.queue.drain();
        if tokens.is_empty() {
            return 0;
        }
        self.counters
            .tokens
            .fetch_add(tokens.len() as u64, Ordering::Relaxed);
        // Objects reaching 0 go straight to `pending` (nothing here runs native code);
        // replicated items whose side died leave the set by the flags cleared here.
        let mut pending = self.local.0.pending.borrow_mut();
        pending.reserve(tokens.len());
        let mut stubs_freed = 0;
        {
            let mut st = self.state.lock();
            st.mirror_free.reserve(tokens.len());
            for &t in &tokens {
                if t & 1 == 0 {
                    let idx = (t >> 1) as u32;
                    // (its identity-map entry goes stale: swept in bulk below)
                    let e = st.table.forget_obj(idx);
                    if e.flags & WEAK_LIMIT != 0 && e.flags & USED != 0 {
                        st.repl_live -= 1;
                    }
                    if let Some(d) = &self.debug {
                        d.lock().stub_died(idx);
                    }
                    let stub = st.table.stub(idx);
                    // SAFETY: the stub slot stays allocated while its entry is used.
                    let c = unsafe {
                        (*stub).ob_base.ob_refcnt -= MANAGED_REFCNT;
                        (*stub).ob_base.ob_refcnt
                    };
                    if c == 0 {
                        // SAFETY: `stub` is entry idx's stub.
                        unsafe { st.table.release_stub(idx, stub) };
                        stubs_freed += 1;
                        if let Some(d) = &self.debug {
                            d.lock().stub_freed(idx);
                        }
                    } else if c < 0 {
                        self.below_zero(st.table.tagged(idx), c);
                    }
                } else {
                    let rec = t >> 1;
                    let Some(r) = st.mirrors[rec].take() else {
                        continue;
                    };
                    st.mirror_free.push(rec as u32);
                    if r.replicated {
                        st.repl_live -= 1;
                    }
                    // (its address-map entry goes stale: swept in bulk below)
                    st.by_native.went_stale();
                    let op = r.native as *mut PyObject;
                    // SAFETY: a mirrored object is alive: its count includes
                    // MANAGED_REFCNT for the mirror until now.
                    let c = unsafe {
                        let ty = (*op).ob_type;
                        if !ty.is_null() && (*ty).is_gc() {
                            (*gc_head(op)).gc_prev &= !GC_MIRRORED;
                        }
                        (*op).ob_refcnt -= MANAGED_REFCNT;
                        (*op).ob_refcnt
                    };
                    if c == 0 {
                        pending.push(op);
                    } else if c < 0 {
                        self.below_zero(op, c);
                    } else if r.replicated {
                        self.local.0.cycle_pending.set(true);
                    }
                }
            }
            st.sweep_maps();
        }
        drop(pending);
        self.counters
            .stubs_freed
            .fetch_add(stubs_freed, Ordering::Relaxed);
        tokens.len()
    }

    /// Deallocates native object `op` (count 0): its type's `tp_dealloc`, nested at most
    /// [`TRASHCAN_DEPTH`] deep; deeper ones are run by the outermost call (so freeing a
    /// long chain does not overflow the stack: CPython's trashcan, without the
    /// extension's cooperation).
    ///
    /// # Safety
    /// `op` is a live native object whose count is 0.
    #[inline]
    pub(crate) unsafe fn dealloc(&self, op: *mut PyObject) {
        let l = &self.local.0;
        let depth = l.dealloc_depth.get();
        if depth >= TRASHCAN_DEPTH {
            l.deferred.borrow_mut().push(op);
            l.any_deferred.set(true);
            return;
        }
        l.dealloc_depth.set(depth + 1);
        // SAFETY: forwarded.
        unsafe { call_dealloc(op) };
        l.dealloc_depth.set(depth);
        if depth == 0 && l.any_deferred.get() {
            // SAFETY: forwarded (depth 0).
            unsafe { self.run_deferred() };
        }
    }

    /// Runs the deallocations deferred by [`Inner::dealloc`], at depth 0.
    ///
    /// # Safety
    /// Called by the outermost deallocation.
    #[inline(never)]
    unsafe fn run_deferred(&self) {
        let l = &self.local.0;
        loop {
            let next = l.deferred.borrow_mut().pop();
            let Some(op) = next else { break };
            l.dealloc_depth.set(1);
            // SAFETY: deferred objects have count 0 and are alive.
            unsafe { call_dealloc(op) };
            l.dealloc_depth.set(0);
        }
        l.any_deferred.set(false);
    }

    /// A count reached 0 (`_Py_Dealloc`): a native object is deallocated; a stub whose
    /// managed object died is freed; a stub whose managed object lives was released by
    /// native code that did not own a reference (reported, count repaired).
    ///
    /// # Safety
    /// `op` is a stub of this bridge or a live native object.
    #[inline]
    pub(crate) unsafe fn decref_slow(&self, op: *mut PyObject) {
        if !is_stub(op) {
            // SAFETY: a live native object (caller).
            let c = unsafe { (*op).ob_refcnt };
            if c != 0 {
                return;
            }
            if let Some(d) = &self.debug {
                let mut d = d.lock();
                if d.is_freed(op) {
                    d.use_after_free(op, "Py_DECREF");
                    return;
                }
            }
            // SAFETY: count 0: deallocate.
            unsafe { self.dealloc(op) };
            return;
        }
        // SAFETY: forwarded.
        unsafe { self.decref_stub(op) }
    }

    /// [`Inner::decref_slow`] for a stub.
    ///
    /// # Safety
    /// `op` is a tagged pointer native code decremented the count through.
    #[inline(never)]
    unsafe fn decref_stub(&self, op: *mut PyObject) {
        let mut st = self.state.lock();
        // SAFETY: native code decremented the count through this pointer: readable.
        let Some(idx) = (unsafe { st.table.slot_of_held(op) }) else {
            drop(st);
            tracing::error!(
                stub = format_args!("{:#x}", op as usize),
                "_Py_Dealloc of a tagged pointer that is no stub of this bridge"
            );
            return;
        };
        let e = st.table.entries[idx as usize];
        if e.flags & USED == 0 {
            drop(st);
            self.freed_stub_use(op, idx, "Py_DECREF");
            return;
        }
        // (slot `idx` is exactly the stub `op` points to: checked above)
        let stub = untag(op) as *mut crate::abi::Stub;
        // SAFETY: a stub slot of the table (its memory stays allocated).
        let c = unsafe { (*stub).ob_base.ob_refcnt };
        if c != 0 {
            return;
        }
        if e.obj != 0 {
            // Native code released a reference it did not own: keep the managed count
            // (the object is still referenced from managed code).
            // SAFETY: the stub is live.
            unsafe { (*stub).ob_base.ob_refcnt = MANAGED_REFCNT };
            drop(st);
            self.stub_below_managed(op, idx, c);
        } else {
            // SAFETY: `stub` is entry idx's stub (checked above).
            unsafe { st.table.release_stub(idx, stub) };
            drop(st);
            self.counters.stubs_freed.fetch_add(1, Ordering::Relaxed);
            if let Some(d) = &self.debug {
                d.lock().stub_freed(idx);
            }
        }
    }
}
