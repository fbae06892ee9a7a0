//! The cycle collector for native objects: CPython's algorithm, with GraalPy's
//! replication of cycles that cross into the managed heap, and the weak-processing hook
//! that keeps replicated objects alive when native code took them back.
//!
//! # The algorithm (one generation: every tracked object is a candidate)
//! 1. **Candidates**: every tracked native object (`PyObject_GC_Track`) and every stub
//!    with native references (count above `MANAGED_REFCNT`). `gc_refs` starts at the
//!    count, minus `MANAGED_REFCNT` for objects the managed side references (a mirrored
//!    native object, a stub): managed references are not native references.
//! 2. **Subtract internal references**: `tp_traverse` of each native candidate visits its
//!    references; each one to a candidate lowers that candidate's `gc_refs`. Now
//!    `gc_refs > 0` means "referenced from outside the candidates" (native code's own
//!    variables, globals, non-tracked objects). When a candidate has a managed side,
//!    this traversal also records the edges between candidates (4 bytes each), and the
//!    next two steps walk them instead of calling `tp_traverse` again; otherwise (native
//!    objects only, W is empty) step 3 traverses the reachable objects as CPython does.
//! 3. **Reachable**: candidates with `gc_refs > 0` and everything they reach through
//!    `tp_traverse` are alive. The rest, the unreachable set U, is only referenced from
//!    inside U, and from the managed side.
//! 4. **GraalPy's extension**: the part W of U reachable (natively) from members of U
//!    that the managed side references may still be alive, through managed references
//!    the native side cannot see. W is **replicated** into the managed heap: each native
//!    member gets a mirror (if it had none: its count goes up by `MANAGED_REFCNT`), each
//!    mirror gets managed edges to the managed sides (mirror, or managed object of a
//!    stub) of the members it references (the one target itself in its edge slot, or an
//!    edge array), and the stubs of W become weak although their count is above
//!    `MANAGED_REFCNT` (the "weak to strong limit": their native references all come
//!    from W). The tracing collector now sees the whole cycle and
//!    frees it if nothing managed reaches it; the reference queue then lowers the counts
//!    and frees what reaches 0, and the next cycle collection clears what is left
//!    (native members referenced only by each other).
//! 5. **Pure garbage** G = U \ W (no managed reference reaches it): CPython's
//!    `delete_garbage`: hold a reference to each, `tp_clear` each, release the
//!    references: the counts reach 0 and the objects are deallocated.
//!
//! A replicated object that native code takes back (an incref from outside W, or a
//! reference moved out of a W member) must not lose its managed side: at every
//! collection of the heap, the **weak hook** recomputes `gc_refs` over the replicated set
//! (count minus `MANAGED_REFCNT` minus references from replicated native objects) and
//! keeps the managed side of every member referenced from outside, or whose managed side
//! is marked, and of everything they reach natively. `to_native` of a replicated managed
//! object makes its entry strong again at once (if native references exist); otherwise
//! a resurrected object becomes strong again at the next cycle collection, which starts
//! by undoing the previous replication.

use crate::abi::{
    from_gc_head, gc_head, is_stub, untag, PyGCHead, PyObject, GC_COLLECTING, GC_FLAGS,
    GC_MIRRORED, MANAGED_REFCNT,
};
use crate::cycle_work::{Cand, CycleWork, SPARE_WORK};
use crate::handles::{HandleTable, IMMORTAL, USED, WEAK_LIMIT};
use crate::state::{Inner, RItem, State, MIRROR_EDGES, MIRROR_SIZE};
use gc_core::{Marker, Mutator, ObjRef, WeakRef};
use rustc_hash::FxHashMap as HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

/// What one native cycle collection did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// Candidates examined (tracked native objects plus stubs with native references).
    pub candidates: usize,
    /// Native objects found unreachable with no managed reference to them or their
    /// cycle, and cleared.
    pub garbage: usize,
    /// Objects (native and stubs) of unreachable cycles that reach managed objects,
    /// replicated into the managed heap.
    pub replicated: usize,
}

/// The stub index (all zeros) kept with its length, its capacity capped at twice `used`.
fn keep_zeroed(mut v: Vec<u32>, used: usize) -> Vec<u32> {
    if v.capacity() > 2 * used {
        v.truncate(used);
        v.shrink_to(2 * used);
    }
    v
}

/// Empties `v` and caps its capacity at twice `used` (what this collection needed).
fn keep<T>(mut v: Vec<T>, used: usize) -> Vec<T> {
    v.clear();
    if v.capacity() > 2 * used {
        v.shrink_to(2 * used);
    }
    v
}

struct Ctx {
    cands: Vec<Cand>,
    /// Handle index -> candidate index + 1.
    stub_cand: Vec<u32>,
    stack: Vec<usize>,
    /// Candidate indices: the edges between candidates that the subtraction's traversal
    /// recorded (when a managed side exists: [`collect_cycles`]).
    edges: Vec<u32>,
}

impl Ctx {
    /// The candidate index of `op`, if it is a candidate.
    ///
    /// # Safety
    /// `op` is null, a live stub of the bridge or a live native object.
    #[inline]
    unsafe fn cand_of(&self, op: *mut PyObject) -> Option<usize> {
        if op.is_null() {
            return None;
        }
        if is_stub(op) {
            // SAFETY: a live stub (caller).
            let idx = unsafe { HandleTable::index_fast(op) } as usize;
            return match self.stub_cand.get(idx) {
                Some(&c) if c != 0 => Some(c as usize - 1),
                _ => None,
            };
        }
        // SAFETY: a live native object (caller): its type is valid; GC types have a head.
        unsafe {
            let ty = (*op).ob_type;
            if ty.is_null() || !(*ty).is_gc() {
                return None;
            }
            let p = (*gc_head(op)).gc_prev;
            (p & GC_COLLECTING != 0).then_some(p >> 4)
        }
    }
}

unsafe extern "C" fn visit_decref(op: *mut PyObject, arg: *mut c_void) -> c_int {
    // SAFETY: arg is the collector's context; op a reference held by a candidate.
    unsafe {
        let ctx = &mut *(arg as *mut Ctx);
        if let Some(j) = ctx.cand_of(op) {
            ctx.cands[j].refs -= 1;
        }
    }
    0
}

unsafe extern "C" fn visit_decref_record(op: *mut PyObject, arg: *mut c_void) -> c_int {
    // SAFETY: as visit_decref.
    unsafe {
        let ctx = &mut *(arg as *mut Ctx);
        if let Some(j) = ctx.cand_of(op) {
            ctx.cands[j].refs -= 1;
            ctx.edges.push(j as u32);
        }
    }
    0
}

unsafe extern "C" fn visit_reach(op: *mut PyObject, arg: *mut c_void) -> c_int {
    // SAFETY: as visit_decref.
    unsafe {
        let ctx = &mut *(arg as *mut Ctx);
        if let Some(j) = ctx.cand_of(op) {
            if !ctx.cands[j].reach {
                ctx.cands[j].reach = true;
                ctx.stack.push(j);
            }
        }
    }
    0
}

/// Calls `op`'s `tp_traverse` with `visit` (nothing for types without one).
///
/// # Safety
/// `op` is a live native object; `visit` accepts `arg`.
#[inline]
unsafe fn traverse(
    op: *mut PyObject,
    visit: unsafe extern "C" fn(*mut PyObject, *mut c_void) -> c_int,
    arg: *mut c_void,
) {
    // SAFETY: a live object (caller).
    unsafe {
        let ty = (*op).ob_type;
        if let Some(t) = (*ty).tp_traverse {
            t(op, Some(visit), arg);
        }
    }
}

/// Calls `f` for each reference `op`'s `tp_traverse` visits.
///
/// # Safety
/// `op` is a live native object.
pub(crate) unsafe fn for_each_ref(op: *mut PyObject, mut f: impl FnMut(*mut PyObject)) {
    unsafe extern "C" fn tramp(op: *mut PyObject, arg: *mut c_void) -> c_int {
        // SAFETY: arg is the `&mut dyn FnMut` below.
        let f = unsafe { &mut *(arg as *mut &mut dyn FnMut(*mut PyObject)) };
        if !op.is_null() {
            f(op);
        }
        0
    }
    let mut dynf: &mut dyn FnMut(*mut PyObject) = &mut f;
    // SAFETY: forwarded; the trampoline matches the argument.
    unsafe { traverse(op, tramp, &mut dynf as *mut _ as *mut c_void) };
}

/// The count behind a possibly tagged pointer.
///
/// # Safety
/// `op` is a live object or stub.
#[inline]
unsafe fn count(op: *mut PyObject) -> isize {
    // SAFETY: forwarded.
    unsafe { (*untag(op)).ob_refcnt }
}

/// Undoes the previous replication: stubs get their normal strong/weak state back,
/// mirrors lose their replicated edges.
/// Returns the set's emptied vector for the next one (its capacity capped at twice the
/// size the set had when made).
fn reset_replicated(inner: &Inner) -> Vec<RItem> {
    let (mut items, weak, made) = {
        let mut repl = inner.repl.lock();
        (
            std::mem::take(&mut repl.items),
            std::mem::take(&mut repl.weak),
            repl.made,
        )
    };
    if items.is_empty() {
        return keep(items, made);
    }
    let mut st = inner.state.lock();
    for it in &items {
        if it.side(&st).is_none() {
            continue; // left the set already
        }
        if it.key & 1 == 0 {
            st.table.entries[it.key >> 1].flags &= !WEAK_LIMIT;
        } else if let Some(r) = st.mirrors[it.key >> 1].as_mut() {
            r.replicated = false;
            // SAFETY: a registered mirror is alive (tokens were processed before); a
            // null store needs no write barrier.
            unsafe { r.mirror.write_slot(MIRROR_EDGES, 0) };
        }
    }
    st.repl_live = 0;
    drop(st);
    // (the weak handles are released outside the bridge's locks: each takes the heap's)
    drop(weak);
    items.clear();
    keep(items, made)
}

/// One native cycle collection (see the module documentation). Without a mutator
/// (`None`), nothing is replicated: cycles that reach managed objects are left alone.
pub(crate) fn collect_cycles(inner: &Inner, m: Option<&mut Mutator>) -> CycleReport {
    let _span = tracing::debug_span!("refbridge_cycles").entered();
    inner
        .counters
        .cycle_collections
        .fetch_add(1, Ordering::Relaxed);
    let items = reset_replicated(inner);
    let l = &inner.local.0;
    let sentinel = l.gc_list;
    let mut work = std::mem::take(&mut *l.cycle_work.borrow_mut());
    if work.cands.capacity() == 0 {
        // The bridge's first collection: a dropped bridge's vectors, if any.
        if let Ok(spare) = SPARE_WORK.try_with(|s| std::mem::take(&mut *s.borrow_mut())) {
            work = spare;
        }
    }
    let mut ctx = Ctx {
        cands: work.cands,
        stub_cand: work.stub_cand,
        stack: work.stack,
        edges: work.edges,
    };
    debug_assert!(ctx.cands.is_empty() && ctx.stack.is_empty() && ctx.edges.is_empty());
    // (tracked objects, then stubs: at most the entries in use)
    ctx.cands
        .reserve(inner.tracked.get() + inner.state.lock().table.used);
    let mut any_mirrored = false;
    // 1. Candidates: tracked objects (their gc_prev holds the index while we work)...
    // SAFETY: the tracked list is only changed by the owner thread, which is here; its
    // members are live native objects.
    unsafe {
        let mut g = (*sentinel).gc_next as *mut PyGCHead;
        while g != sentinel {
            let op = from_gc_head(g);
            let flags = (*g).gc_prev & GC_FLAGS;
            let managed = flags & GC_MIRRORED != 0;
            any_mirrored |= managed;
            let i = ctx.cands.len();
            ctx.cands.push(Cand {
                op,
                refs: (*op).ob_refcnt - if managed { MANAGED_REFCNT } else { 0 },
                managed,
                reach: false,
                w: false,
                gc_flags: flags as u8,
                first_edge: 0,
                side: 0,
            });
            (*g).gc_prev = (i << 4) | flags | GC_COLLECTING;
            g = (*g).gc_next as *mut PyGCHead;
        }
    }
    let n_native = ctx.cands.len();
    // ... and stubs with native references.
    {
        let st = inner.state.lock();
        debug_assert!(ctx.stub_cand.iter().all(|&c| c == 0));
        ctx.stub_cand.resize(st.table.entries.len(), 0);
        for (idx, e) in st.table.entries.iter().enumerate() {
            if e.flags & USED == 0 || e.obj == 0 || e.flags & IMMORTAL != 0 {
                continue;
            }
            let c = st.table.count(idx as u32);
            if c > MANAGED_REFCNT {
                ctx.cands.push(Cand {
                    op: st.table.tagged(idx as u32),
                    refs: c - MANAGED_REFCNT,
                    managed: true,
                    reach: false,
                    w: false,
                    gc_flags: 0,
                    first_edge: idx as u32,
                    side: 0,
                });
                ctx.stub_cand[idx] = ctx.cands.len() as u32;
            }
        }
    }
    let n = ctx.cands.len();
    ctx.stack.reserve(n);
    // With a managed side (a mirrored native candidate or a candidate stub), W may be
    // non-empty and then every unreachable native object is traversed a second time:
    // the subtraction's traversal records the edges between candidates instead, and the
    // later passes walk them (4 bytes per edge). Without, CPython's way: the
    // reachability pass traverses only what is reachable.
    let record = n > n_native || any_mirrored;
    // From here on the context is reached only through this pointer, which the visit
    // functions also use: no reference to it is held across a traversal.
    let p: *mut Ctx = &mut ctx;
    let arg = p as *mut c_void;
    macro_rules! c {
        () => {
            // SAFETY: `p` points to `ctx`, alive for the whole function; every reference
            // made here ends before the next traversal.
            unsafe { &mut *p }
        };
    }
    // 2. Subtract internal references.
    if record {
        c!().edges.reserve(n_native);
        for i in 0..n_native {
            let c = c!();
            c.cands[i].first_edge =
                u32::try_from(c.edges.len()).expect("fewer than 2^32 edges between candidates");
            let op = c.cands[i].op;
            // SAFETY: a tracked live object; the visit only touches the context.
            unsafe { traverse(op, visit_decref_record, arg) };
        }
    } else {
        for i in 0..n_native {
            let op = c!().cands[i].op;
            // SAFETY: as above.
            unsafe { traverse(op, visit_decref, arg) };
        }
    }
    // Native candidate i's recorded edges.
    let edge_range = |ctx: &Ctx, i: usize| -> (usize, usize) {
        let end = if i + 1 < n_native {
            ctx.cands[i + 1].first_edge as usize
        } else {
            ctx.edges.len()
        };
        (ctx.cands[i].first_edge as usize, end)
    };
    // 3. Reachable from outside.
    for i in 0..n {
        let c = c!();
        if c.cands[i].refs > 0 {
            c.cands[i].reach = true;
            c.stack.push(i);
        }
    }
    while let Some(i) = c!().stack.pop() {
        if i >= n_native {
            continue;
        }
        if record {
            let c = c!();
            let (a, b) = edge_range(c, i);
            for k in a..b {
                let j = c.edges[k] as usize;
                if !c.cands[j].reach {
                    c.cands[j].reach = true;
                    c.stack.push(j);
                }
            }
        } else {
            let op = c!().cands[i].op;
            // SAFETY: as above.
            unsafe { traverse(op, visit_reach, arg) };
        }
    }
    // 4. W: the part of the unreachable set reachable from managed-referenced members.
    let mut n_unreached = 0;
    for i in 0..n_native {
        let c = c!();
        if !c.cands[i].reach {
            n_unreached += 1;
            if c.cands[i].managed {
                c.cands[i].w = true;
                c.stack.push(i);
            }
        }
    }
    // Stubs (all managed). No traversal looks candidates up any more: their stub-index
    // entries are zeroed here, for the next collection.
    for i in n_native..n {
        let c = c!();
        let cand = &mut c.cands[i];
        c.stub_cand[cand.first_edge as usize] = 0;
        if !cand.reach {
            n_unreached += 1;
            cand.w = true;
            c.stack.push(i);
        }
    }
    // The edges inside W of its native members, for the replication: member i's targets
    // are those of its recorded edges not reachable from outside (every target not
    // reachable from outside is in W).
    // A native member's range is kept in the candidate: `first_edge` and, in `refs`
    // (its count is no longer needed), the end. The stack is walked as a worklist and
    // not popped, so that it ends up holding W, each member once.
    let mut k = 0;
    while k < c!().stack.len() {
        let i = c!().stack[k];
        k += 1;
        if i >= n_native {
            continue;
        }
        // (W is only non-empty with a managed candidate: the edges were recorded)
        debug_assert!(record);
        let c = c!();
        let (a, b) = edge_range(c, i);
        for e in a..b {
            let j = c.edges[e] as usize;
            let t = &mut c.cands[j];
            if !t.reach && !t.w {
                t.w = true;
                c.stack.push(j);
            }
        }
        c.cands[i].refs = b as isize;
    }
    // Restore the list's back links (and drop the COLLECTING flag), and move the pure
    // garbage G (unreachable, outside W) to a list of its own for `delete_garbage`, as
    // CPython's `move_unreachable` does. The tracked candidates are in list order
    // (nothing changed the list since: only traversals ran), so this walks the vector,
    // not the list: independent stores instead of a chain of dependent loads, and no
    // vector of the garbage.
    let mut garbage_head = PyGCHead {
        gc_next: 0,
        gc_prev: 0,
    };
    // (Reached only through this pointer from here on: the list's members point to it.)
    let garbage: *mut PyGCHead = &mut garbage_head;
    // (W is the stack now; G is empty if W is the whole unreachable set: then only the
    // back links are written.)
    let n_garbage = n_unreached - c!().stack.len();
    let tracked = &c!().cands[..n_native];
    // SAFETY: the candidates' heads are the list's members, in order; each goes on
    // exactly one of the two lists, both closed at the end.
    unsafe {
        let (mut prev, mut gprev) = (sentinel, garbage);
        if n_garbage == 0 {
            for c in tracked {
                let g = gc_head(c.op);
                (*g).gc_prev = prev as usize | c.gc_flags as usize;
                prev = g;
            }
        } else {
            for c in tracked {
                let g = gc_head(c.op);
                if c.reach || c.w {
                    (*g).gc_prev = prev as usize | c.gc_flags as usize;
                    (*prev).gc_next = g as usize;
                    prev = g;
                } else {
                    (*g).gc_prev = gprev as usize | c.gc_flags as usize;
                    (*gprev).gc_next = g as usize;
                    gprev = g;
                }
            }
        }
        (*prev).gc_next = sentinel as usize;
        (*sentinel).gc_prev = prev as usize;
        (*gprev).gc_next = garbage as usize;
        (*garbage).gc_prev = gprev as usize;
    }
    let ctx = c!();
    let w = std::mem::take(&mut ctx.stack);
    let mut report = CycleReport {
        candidates: n,
        garbage: n_garbage,
        replicated: 0,
    };
    // 5. Delete the pure garbage (CPython's delete_garbage). Its deallocators run native
    // code, which may allocate and so collect: the managed sides of W are kept alive
    // meanwhile.
    if n_garbage > 0 {
        {
            let mut st = inner.state.lock();
            let sides: Vec<ObjRef> = w
                .iter()
                .filter_map(|&i| managed_side(&st, ctx.cands[i].op))
                .collect();
            st.pinned.extend(sides);
        }
        // SAFETY: the garbage list holds tracked live objects, and its head stays here
        // until the function returns.
        unsafe { delete_garbage(inner, garbage) };
        inner
            .counters
            .cycle_garbage
            .fetch_add(n_garbage as u64, Ordering::Relaxed);
    }
    // 4'. Replicate W.
    if let (Some(m), false) = (m, w.is_empty()) {
        report.replicated = replicate(inner, m, ctx, n_native, &w, n_garbage > 0, items);
    }
    inner.state.lock().pinned.clear();
    // The work vectors go back for the next collection.
    let entries = ctx.stub_cand.len();
    *l.cycle_work.borrow_mut() = CycleWork {
        cands: keep(std::mem::take(&mut ctx.cands), n),
        stub_cand: keep_zeroed(std::mem::take(&mut ctx.stub_cand), entries),
        stack: keep(w, n),
        edges: {
            let e = ctx.edges.len();
            keep(std::mem::take(&mut ctx.edges), e)
        },
    };
    // Threshold for the next automatic collection (CPython: a quarter of the live).
    if let Some(base) = inner.config.cycle_threshold {
        l.cycle_threshold.set(base.max(inner.tracked.get() / 4));
    }
    l.gc_allocs.set(0);
    tracing::debug!(?report, "native cycle collection");
    report
}

/// Unlinks `g` from the circular list it is on (its flags stay).
///
/// # Safety
/// `g` is on a well-formed list.
unsafe fn list_remove(g: *mut PyGCHead) {
    // SAFETY: list members' links are valid (caller).
    unsafe {
        let prev = ((*g).gc_prev & !GC_FLAGS) as *mut PyGCHead;
        let next = (*g).gc_next as *mut PyGCHead;
        (*prev).gc_next = next as usize;
        (*next).gc_prev = prev as usize | ((*next).gc_prev & GC_FLAGS);
    }
}

/// Appends `g` to the circular list of sentinel `s` (its flags stay).
///
/// # Safety
/// `s` is a well-formed list's sentinel; `g` is on no list.
unsafe fn list_append(s: *mut PyGCHead, g: *mut PyGCHead) {
    // SAFETY: as stated.
    unsafe {
        let last = ((*s).gc_prev & !GC_FLAGS) as *mut PyGCHead;
        (*g).gc_prev = last as usize | ((*g).gc_prev & GC_FLAGS);
        (*g).gc_next = s as usize;
        (*last).gc_next = g as usize;
        (*s).gc_prev = g as usize | ((*s).gc_prev & GC_FLAGS);
    }
}

/// CPython's `delete_garbage`: one at a time, the first object of the garbage list `u`
/// is held, cleared with `tp_clear` and released. Its deallocation (or that of others,
/// as the cycle breaks) takes it off the list through `PyObject_GC_UnTrack`; an object
/// still first afterwards survived (`tp_clear` resurrected it, or it has none) and goes
/// back to the tracked list. Errors raised by `tp_clear` are dropped as unraisable, the
/// pending error kept.
///
/// # Safety
/// `u` is the sentinel of a well-formed list of tracked live objects of `inner`, found
/// unreachable; it stays in place until this returns.
unsafe fn delete_garbage(inner: &Inner, u: *mut PyGCHead) {
    let l = &inner.local.0;
    let saved = l.error.borrow_mut().take();
    // SAFETY: the objects are tracked (caller); the list lives until the loop has
    // emptied it (a deallocation unlinks an object from whichever list holds it).
    unsafe {
        loop {
            // (the list changes through the objects' links: deallocations unlink them)
            let g = std::ptr::read_volatile(&(*u).gc_next) as *mut PyGCHead;
            if g == u {
                break;
            }
            let op = from_gc_head(g);
            if let Some(clear) = (*(*op).ob_type).tp_clear {
                (*op).ob_refcnt += 1;
                clear(op);
                crate::refcount::decref(op);
            }
            if (*u).gc_next == g as usize {
                list_remove(g);
                list_append(l.gc_list, g);
            }
            let raised = l.error.borrow_mut().take();
            if let Some(e) = raised {
                inner.unraisable(op, &format!("in tp_clear: {}", e.to_string_lossy()));
            }
        }
    }
    *l.error.borrow_mut() = saved;
}

/// The managed side of a candidate: the managed object of a stub, the mirror of a
/// native object (if any).
fn managed_side(st: &State, op: *mut PyObject) -> Option<ObjRef> {
    if is_stub(op) {
        // SAFETY: candidates' stubs are live stubs of this bridge.
        let idx = unsafe { HandleTable::index_fast(op) };
        let e = st.table.entries.get(idx as usize)?;
        if e.flags & USED == 0 {
            return None;
        }
        ObjRef::from_addr(e.obj)
    } else {
        let rec = st.mirror_rec(op as usize)?;
        st.mirrors[rec as usize].map(|r| r.mirror)
    }
}

/// Replicates W (module documentation, step 4): one pass under the bridge's lock finds
/// each member's managed side, marks existing mirrors replicated and makes the stubs weak
/// (the weak to strong limit); mirrors are made for the native members without one; then
/// each native member's mirror gets its managed edges: the one target itself in the
/// mirror's edge slot, or an edge array for several. From the first allocation on (a
/// missing mirror, an edge array: it may collect), the managed sides are kept alive in
/// `pinned`; without allocations nothing is pinned. Returns the number of members.
/// `w` holds W's candidates; a native member's edges are `ctx.edges[first_edge..refs]`.
/// `code_ran`: native code (the garbage's deallocators) ran since W was found.
fn replicate(
    inner: &Inner,
    m: &mut Mutator,
    ctx: &mut Ctx,
    n_native: usize,
    w: &[usize],
    code_ran: bool,
    mut items: Vec<RItem>,
) -> usize {
    let (cands, edges) = (&mut ctx.cands[..], &ctx.edges[..]);
    let mut missing = Vec::new();
    items.reserve(w.len());
    {
        let mut st = inner.state.lock();
        let st = &mut *st;
        for &i in w {
            let op = cands[i].op;
            if is_stub(op) {
                // SAFETY: candidates' stubs are live stubs of this bridge.
                let idx = unsafe { HandleTable::index_fast(op) } as usize;
                let e = &mut st.table.entries[idx];
                if e.obj == 0 || e.flags & USED == 0 {
                    continue;
                }
                e.flags |= WEAK_LIMIT;
                st.repl_live += 1;
                cands[i].side = e.obj;
                items.push(RItem { key: idx << 1, op });
                continue;
            }
            // SAFETY: W members are alive: they are referenced from W and the managed
            // side. (Their counts can only have changed if the garbage's deallocators
            // ran meanwhile: otherwise the check, a cache miss per member, is skipped.)
            if code_ran && unsafe { (*op).ob_refcnt } <= 0 {
                continue;
            }
            match st.mirror_rec(op as usize) {
                Some(rec) => {
                    if let Some(r) = st.mirrors[rec as usize].as_mut() {
                        r.replicated = true;
                        st.repl_live += 1;
                        cands[i].side = r.mirror.addr();
                        items.push(RItem {
                            key: ((rec as usize) << 1) | 1,
                            op,
                        });
                    }
                }
                None => missing.push(i),
            }
        }
    }
    // Pins every managed side found so far (before the first allocation).
    let pin_sides = |cands: &[Cand]| {
        let mut st = inner.state.lock();
        st.pinned.reserve(w.len());
        st.pinned
            .extend(w.iter().filter_map(|&i| ObjRef::from_addr(cands[i].side)));
    };
    let mut pinned = false;
    for i in missing {
        if !pinned {
            pin_sides(cands);
            pinned = true;
        }
        let Ok(mirror) = m.alloc_typed(MIRROR_SIZE, inner.mirror_type) else {
            tracing::error!("replication: allocating a mirror failed; the cycle is kept");
            publish(inner, items);
            return 0;
        };
        inner.state.lock().pinned.push(mirror);
        let op = cands[i].op;
        // SAFETY: a live native object without a mirror, a fresh mirror.
        let rec = unsafe { inner.bind_mirror(op, mirror, true) };
        cands[i].side = mirror.addr();
        items.push(RItem {
            key: ((rec as usize) << 1) | 1,
            op,
        });
    }
    // Managed edges mirroring the native ones inside W (targets reachable from outside
    // have no side: they are not in W).
    let max_small = gc_core::max_internal_obj_size();
    for &i in w {
        if i >= n_native {
            continue;
        }
        let Some(mirror) = ObjRef::from_addr(cands[i].side) else {
            continue;
        };
        let targets = &edges[cands[i].first_edge as usize..cands[i].refs as usize];
        let mut k = 0;
        let mut first = None;
        for &j in targets {
            if let Some(t) = ObjRef::from_addr(cands[j as usize].side) {
                k += 1;
                first.get_or_insert(t);
            }
        }
        let edge = match (k, first) {
            (1, Some(t)) => t,
            (0, _) | (_, None) => continue,
            _ => {
                if !pinned {
                    pin_sides(cands);
                    pinned = true;
                }
                let size = 8 + 8 * k;
                let ty = if size > max_small {
                    inner.edges_large
                } else {
                    inner.edges_small
                };
                let Ok(arr) = m.alloc_typed(size, ty) else {
                    tracing::error!(
                        "replication: allocating an edge array failed; the cycle is kept"
                    );
                    publish(inner, items);
                    return 0;
                };
                // SAFETY: a fresh edge array of the right size; its referents are pinned.
                unsafe {
                    arr.write_slot(0, k);
                    let sides = targets
                        .iter()
                        .filter_map(|&j| ObjRef::from_addr(cands[j as usize].side));
                    for (s, r) in sides.enumerate() {
                        arr.write_slot(8 + 8 * s, r.addr());
                    }
                }
                arr
            }
        };
        // SAFETY: the mirror and its referents are alive (pinned if anything was
        // allocated) and the store goes through the write barrier.
        unsafe { m.store_ref(mirror, MIRROR_EDGES, Some(edge)) };
    }
    let n = items.len();
    publish(inner, items);
    inner
        .counters
        .replicated
        .fetch_add(n as u64, Ordering::Relaxed);
    n
}

/// Makes `items` the replicated set, watched from the next collection on (fresh).
fn publish(inner: &Inner, items: Vec<RItem>) {
    let mut repl = inner.repl.lock();
    // (The set is empty here: every cycle collection starts by resetting it. Were it
    // not, its members would become fresh too and get new handles when settled.)
    let old = std::mem::take(&mut repl.weak);
    if repl.items.is_empty() {
        repl.items = items;
    } else {
        repl.items.extend(items);
    }
    repl.made = repl.items.len();
    repl.fresh = true;
    drop(repl);
    drop(old);
}

/// The weak-processing hook: keeps the managed side of replicated objects that native
/// code references from outside the replicated set (or that are alive through the
/// managed side), and of everything they reach natively.
pub(crate) fn weak_hook(inner: &Inner, marker: &mut Marker<'_>) {
    let repl = inner.repl.lock();
    if repl.items.is_empty() || repl.fresh || inner.state.lock().repl_live == 0 {
        // Fresh: the bridge's own collection right after the replication, whose
        // managed edges are exact (or a collection another thread ran before the
        // bridge's thread, inside that collection, could run any native code).
        return;
    }
    // The members still in the set (lock order: the set, then the state), with their
    // weak handles (a settled set has one per item).
    debug_assert_eq!(
        repl.items.len(),
        repl.weak.len(),
        "a handle per settled item"
    );
    let items: Vec<(RItem, &WeakRef)> = {
        let st = inner.state.lock();
        repl.items
            .iter()
            .zip(&repl.weak)
            .filter(|(it, _)| it.side(&st).is_some())
            .map(|(&it, w)| (it, w))
            .collect()
    };
    let index: HashMap<usize, usize> = items
        .iter()
        .enumerate()
        .map(|(i, (it, _))| (it.op as usize, i))
        .collect();
    // gc_refs over the replicated set.
    let mut refs: Vec<isize> = items
        .iter()
        // SAFETY: replicated objects are allocated while they are in the set (their
        // count includes MANAGED_REFCNT until the queue reports their managed side gone,
        // which removes them from the set).
        .map(|(it, _)| unsafe { count(it.op) } - MANAGED_REFCNT)
        .collect();
    for (it, _) in &items {
        if !is_stub(it.op) {
            // SAFETY: as above.
            unsafe {
                for_each_ref(it.op, |r| {
                    if let Some(&j) = index.get(&(r as usize)) {
                        refs[j] -= 1;
                    }
                })
            };
        }
    }
    let mut seen = vec![false; items.len()];
    let mut stack = Vec::new();
    for (i, (_, w)) in items.iter().enumerate() {
        // SAFETY: a weak reference that still reads its object during the weak phase
        // names an allocated object of the heap (it is cleared before that is freed).
        let alive = w.get().is_some_and(|o| unsafe { marker.is_marked(o) });
        if refs[i] > 0 || alive {
            seen[i] = true;
            stack.push(i);
        }
    }
    while let Some(i) = stack.pop() {
        let (it, w) = items[i];
        if let Some(o) = w.get() {
            // SAFETY: as above.
            unsafe { marker.queue(o) };
        }
        if !is_stub(it.op) {
            // SAFETY: as above.
            unsafe {
                for_each_ref(it.op, |r| {
                    if let Some(&j) = index.get(&(r as usize)) {
                        if !seen[j] {
                            seen[j] = true;
                            stack.push(j);
                        }
                    }
                })
            };
        }
    }
}

/// Settles a fresh replication after the collection that followed it (and the queue
/// drain that removed the items whose managed side died): the survivors' managed sides
/// get weak handles, so the weak hook can watch them safely at later collections.
pub(crate) fn settle(inner: &Inner) {
    let survivors: Vec<(usize, ObjRef)> = {
        let mut repl = inner.repl.lock();
        if !repl.fresh {
            return;
        }
        let st = inner.state.lock();
        debug_assert_eq!(
            st.repl_live,
            repl.items
                .iter()
                .filter(|it| it.side(&st).is_some())
                .count(),
            "members of the replicated set counted"
        );
        if st.repl_live == 0 {
            // Nothing survived (the common case: the cycle was garbage).
            repl.items.clear();
            repl.fresh = false;
            return;
        }
        repl.items
            .iter()
            .enumerate()
            .filter_map(|(k, it)| it.side(&st).map(|o| (k, o)))
            .collect()
    };
    let weak: Vec<WeakRef> = survivors
        .iter()
        .map(|&(_, o)| inner.heap.new_weak_ref(o))
        .collect();
    // (Only a replication changes the vector, and none runs meanwhile: the positions
    // still hold.) Members that left the set are dropped from it, in place.
    let mut repl = inner.repl.lock();
    for (n, &(k, _)) in survivors.iter().enumerate() {
        let it = repl.items[k];
        repl.items[n] = it;
    }
    repl.items.truncate(survivors.len());
    repl.weak = weak;
    repl.fresh = false;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cycle_work::{CycleWork, SPARE_WORK};
    use crate::{BridgeConfig, PyTypeObject, Standalone, PY_TPFLAGS_HAVE_GC};

    unsafe extern "C" fn no_refs(_: *mut PyObject, _: crate::VisitProc, _: *mut c_void) -> c_int {
        0
    }

    fn spare_capacity() -> usize {
        SPARE_WORK.with(|s| s.borrow().cands.capacity())
    }

    /// One collection with one tracked object (left alive), on a fresh bridge.
    fn collect_one(ty: *mut PyTypeObject) -> Standalone {
        let s = Standalone::new(BridgeConfig {
            cycle_threshold: None,
            ..BridgeConfig::default()
        })
        .unwrap();
        // SAFETY: a ready GC type without references; the object stays alive (count 1)
        // until the bridge's shutdown reports it (a leak, with the debug mode off: none).
        unsafe { crate::gc_track(crate::gc_new(ty).unwrap().as_ptr()).unwrap() };
        crate::collect().unwrap();
        s
    }

    #[test]
    fn a_dropped_bridges_work_vectors_serve_the_next_bridges_first_collection() {
        let ty = Box::leak(Box::new(PyTypeObject::new(
            c"t.Obj",
            16,
            PY_TPFLAGS_HAVE_GC,
        )));
        ty.tp_traverse = Some(no_refs);
        // SAFETY: a leaked type with a sound traverse function.
        unsafe { crate::type_ready(ty).unwrap() };
        SPARE_WORK.with(|s| *s.borrow_mut() = CycleWork::EMPTY);
        let first = collect_one(ty);
        assert_eq!(spare_capacity(), 0);
        first.finish();
        let left = spare_capacity();
        assert!(left > 0, "the dropped bridge left its vectors");
        let second = collect_one(ty);
        assert_eq!(
            spare_capacity(),
            0,
            "taken by the next bridge's first collection"
        );
        let kept = second
            .bridge()
            .0
            .local
            .0
            .cycle_work
            .borrow()
            .cands
            .capacity();
        assert_eq!(kept, left, "the same vectors, kept by that bridge now");
        second.finish();
    }
}
