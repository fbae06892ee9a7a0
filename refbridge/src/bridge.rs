//! The bridge: managed objects as native stubs (`to_native`), native objects as managed
//! mirrors (`to_managed`), transitions (GC-a-lot, the queue drained), the root scanner
//! and the weak hook registered with the heap, and the [`Bridge`] handle over the layers
//! below: the state (`state.rs`), the reference counts and the queue (`refcount.rs`),
//! the collections (`collect.rs` over `cycle.rs`).
//!
//! # Threads
//! A bridge serves one thread at a time, as CPython's C API serves the thread holding the
//! GIL: [`Bridge::enter`] makes the calling thread its owner (and the bridge the one the
//! C API functions use on that thread) until the guard drops. Native code, the header's
//! inline functions included, runs on the owner thread while it is attached to the heap
//! and not in a GC-safe region. The collector may run on another mutator thread: it then
//! reads the handle table (root scanner) and the replicated set (weak hook) while the
//! owner is stopped at a safepoint, and the bridge never holds its locks across a
//! managed allocation, so those reads never wait.

use crate::abi::{
    gc_head, is_stub, untag, PyObject, PyTypeObject, IMMORTAL_REFCNT, MANAGED_REFCNT,
};
use crate::collect::{auto_cycles, CollectReport};
use crate::cycle::{self, CycleReport};
use crate::cycle_work::CycleWork;
use crate::debug::{type_name_of, DebugReport, DebugState, QUARANTINE};
use crate::error::BridgeError;
use crate::handles::{AddrMap, HandleTable, IMMORTAL, USED, WEAK_LIMIT};
use crate::mem::{self, thread_token, MemAccount};
use crate::refcount::incref;
use crate::state::{
    entered, BridgeConfig, Collectors, Counters, EnterGuard, Inner, Local, LocalCell, OwnerCount,
    Replicated, State, DEBUG_BRIDGES, MIRROR_EDGES, MIRROR_SIZE,
};
use gc_core::{
    Callback, ForeignTypeSpec, Heap, MarkProc, Marker, Mutator, ObjRef, SweepProc, TypeRef,
};
use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// Counters of a bridge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BridgeStats {
    /// Stubs made (`to_native` of a managed object without one).
    pub stubs_made: u64,
    /// Stubs freed.
    pub stubs_freed: u64,
    /// Stubs alive now.
    pub stubs_live: usize,
    /// Handle-table entries that are strong now; `None` when read from a thread that has
    /// not entered the bridge (strength is read from the stubs' counts, which only the
    /// owner thread's native code writes).
    pub strong_entries: Option<usize>,
    /// Mirrors made (`to_managed` of a native object without one, and replication).
    pub mirrors_made: u64,
    /// Mirrors alive now (registered).
    pub mirrors_live: usize,
    /// Native objects deallocated through the reference queue.
    pub queue_deallocs: u64,
    /// Tokens processed from the reference queue.
    pub tokens: u64,
    /// Native cycle collections run.
    pub cycle_collections: u64,
    /// Native objects found unreachable and cleared by cycle collections.
    pub cycle_garbage: u64,
    /// Objects replicated into the managed heap (natives and stubs).
    pub replicated: u64,
    /// Full collections forced by native memory pressure.
    pub pressure_collections: u64,
    /// Native objects tracked by the cycle collector now.
    pub tracked: usize,
    /// Counted native bytes in use.
    pub native_bytes: usize,
    /// The current native-memory trigger.
    pub native_trigger: usize,
    /// Errors raised by deallocators run from the queue (dropped).
    pub unraisable: u64,
}

/// A bridge between reference-counting native code and gc-core's managed heap. Cheap to
/// clone (shared).
#[derive(Clone)]
pub struct Bridge(pub(crate) Arc<Inner>);

fn mark_edges(m: &mut Marker<'_>, obj: ObjRef) -> usize {
    // SAFETY: an edge array: word 0 is the length, then that many references, all inside
    // the payload.
    unsafe {
        let n = obj.read_slot(0);
        m.queue_array(
            obj,
            (obj.addr() + 8) as *const Option<ObjRef>,
            n.min((m.object_capacity(obj) - 8) / 8),
        );
    }
    0
}

impl Bridge {
    /// A bridge over `heap`. Registers a root scanner (strong handle-table entries), a
    /// weak-processing hook (the replicated set) and a reference queue with the heap.
    pub fn new(heap: &Heap, config: BridgeConfig) -> Result<Bridge, BridgeError> {
        config.validate()?;
        let mirror_type = heap.new_layout_type(
            "refbridge.NativeMirror",
            MIRROR_SIZE,
            &[MIRROR_EDGES as u32],
        )?;
        let spec = |large| ForeignTypeSpec {
            name: "refbridge.Edges",
            mark: MarkProc::Rust(mark_edges),
            sweep: SweepProc::None,
            has_pointers: true,
            large,
        };
        let edges_small = heap.new_foreign_type(spec(false))?;
        let edges_large = heap.new_foreign_type(spec(true))?;
        let sentinel = Box::into_raw(Box::new(crate::abi::PyGCHead {
            gc_next: 0,
            gc_prev: 0,
        }));
        // SAFETY: a fresh sentinel: an empty circular list.
        unsafe {
            (*sentinel).gc_next = sentinel as usize;
            (*sentinel).gc_prev = sentinel as usize;
        }
        let inner = Arc::new(Inner {
            heap: heap.clone(),
            queue: heap.new_reference_queue(),
            owner: AtomicUsize::new(0),
            state: Mutex::new(State {
                table: HandleTable::new(if config.debug { QUARANTINE } else { 0 }),
                mirrors: Vec::new(),
                mirror_free: Vec::new(),
                by_native: AddrMap::default(),
                types: HashMap::default(),
                pinned: Vec::new(),
                repl_live: 0,
            }),
            repl: Mutex::new(Replicated::default()),
            local: LocalCell(Local {
                gc_list: sentinel,
                gc_allocs: Cell::new(0),
                cycle_threshold: Cell::new(config.cycle_threshold.unwrap_or(usize::MAX)),
                error: RefCell::new(None),
                draining: Cell::new(false),
                collecting: Cell::new(false),
                in_collect: Cell::new(false),
                pending: RefCell::new(Vec::new()),
                dealloc_depth: Cell::new(0),
                deferred: RefCell::new(Vec::new()),
                any_deferred: Cell::new(false),
                in_pressure: Cell::new(false),
                transitions: Cell::new(0),
                cycle_pending: Cell::new(false),
                cycle_work: RefCell::new(CycleWork::default()),
                enter_depth: Cell::new(0),
            }),
            tracked: OwnerCount::new(0),
            trigger: OwnerCount::new(config.native_trigger),
            account: Arc::new(MemAccount::new()),
            mirror_type,
            edges_small,
            edges_large,
            callbacks: Mutex::new(Vec::new()),
            counters: Counters::default(),
            debug: config.debug.then(|| {
                DEBUG_BRIDGES.fetch_add(1, Ordering::Relaxed);
                Mutex::new(DebugState::default())
            }),
            collectors: Collectors {
                full: |inner, m| inner.collect_full(m).map(drop),
                auto_cycles,
            },
            shut_down: std::sync::atomic::AtomicBool::new(false),
            config,
        });
        let weak = Arc::downgrade(&inner);
        let roots = heap.add_callback(Callback::RootScanner(Arc::new(move |m, _| {
            if let Some(inner) = weak.upgrade() {
                inner.scan_roots(m);
            }
        })))?;
        let weak = Arc::downgrade(&inner);
        let hook = heap.add_callback(Callback::WeakProcessing(Arc::new(move |m, _| {
            if let Some(inner) = weak.upgrade() {
                cycle::weak_hook(&inner, m);
            }
        })))?;
        inner.callbacks.lock().extend([roots, hook]);
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        inner.queue.set_notify(Some(Arc::new(move || {
            if let Some(inner) = weak.upgrade() {
                if inner.config.drain_after_gc && inner.is_owner() {
                    inner.drain();
                }
            }
        })));
        tracing::debug!(heap = %heap.id(), "bridge created");
        Ok(Bridge(inner))
    }

    /// The bridge entered on the calling thread (the innermost live [`EnterGuard`]'s), if
    /// any: the one the C API and the functions acting on the entered bridge
    /// ([`crate::decref`], [`crate::gc_new`], ...) use.
    pub fn current() -> Option<Bridge> {
        entered().map(Bridge)
    }

    /// The managed heap.
    pub fn heap(&self) -> &Heap {
        &self.0.heap
    }

    /// The configuration.
    pub fn config(&self) -> &BridgeConfig {
        &self.0.config
    }

    /// Makes the calling thread the bridge's owner and the bridge the one the C API
    /// (`Py_INCREF`'s slow path, `PyObject_GC_New`, ...) uses on this thread, until the
    /// guard drops. Nested calls on the owner thread are allowed; another thread is
    /// refused while the guard lives.
    pub fn enter(&self) -> Result<EnterGuard, BridgeError> {
        let me = thread_token();
        match self
            .0
            .owner
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => {}
            Err(o) if o == me => {}
            Err(_) => return Err(BridgeError::EnteredElsewhere),
        }
        let l = &self.0.local.0;
        l.enter_depth.set(l.enter_depth.get() + 1);
        if l.enter_depth.get() == 1 && !self.0.config.debug {
            // The small-block pool serves the owner (the debug mode quarantines freed
            // blocks instead).
            self.0.account.set_owner(true);
        }
        Ok(EnterGuard::push(&self.0))
    }

    fn inner(&self) -> Result<&Inner, BridgeError> {
        if self.0.is_owner() {
            Ok(&self.0)
        } else {
            Err(BridgeError::NotEntered)
        }
    }

    /// Declares the native type of the stubs of managed type `ty` ("how it looks to
    /// native code"): `Py_TYPE(stub)` is `native`.
    ///
    /// # Safety
    /// `native` points to a `PyTypeObject` that lives (unmoved) as long as the bridge.
    pub unsafe fn register_managed_type(
        &self,
        ty: TypeRef,
        native: *mut PyTypeObject,
    ) -> Result<(), BridgeError> {
        if native.is_null() {
            return Err(BridgeError::Null {
                what: "register_managed_type",
            });
        }
        let mut st = self.0.state.lock();
        if st.types.contains_key(&ty.as_obj().addr()) {
            return Err(BridgeError::TypeAlreadyRegistered {
                type_name: ty.name(),
            });
        }
        st.types.insert(ty.as_obj().addr(), native as usize);
        Ok(())
    }

    /// The native view of managed object `obj` (GraalPy's `toNative`): its stub, made on
    /// first use with count `MANAGED_REFCNT` and a weak handle-table entry. A borrowed
    /// reference: native code that keeps it increfs it (which makes the entry strong).
    /// The same object gets the same stub while it lives.
    ///
    /// # Safety
    /// `obj` is a live object of the bridge's heap that stays reachable across the call
    /// (the call drains the reference queue, which runs deallocators).
    #[track_caller]
    pub unsafe fn to_native(&self, obj: ObjRef) -> Result<*mut PyObject, BridgeError> {
        let inner = self.inner()?;
        inner.transition();
        // SAFETY: forwarded.
        unsafe { inner.stub_for(obj) }
    }

    /// [`Bridge::to_native`] plus a new reference (`Py_NewRef`): the caller owns one
    /// count and the entry is strong.
    ///
    /// # Safety
    /// As [`Bridge::to_native`].
    #[track_caller]
    pub unsafe fn to_native_new_ref(&self, obj: ObjRef) -> Result<*mut PyObject, BridgeError> {
        // SAFETY: forwarded.
        let op = unsafe { self.to_native(obj)? };
        // SAFETY: a live stub of ours.
        unsafe { incref(op) };
        Ok(op)
    }

    /// Makes managed object `obj` immortal for native code: its stub's count becomes
    /// `IMMORTAL_REFCNT`, its entry strong for ever (the object is a root); it is never
    /// freed. For singletons that native code references everywhere.
    ///
    /// # Safety
    /// As [`Bridge::to_native`].
    pub unsafe fn make_immortal(&self, obj: ObjRef) -> Result<*mut PyObject, BridgeError> {
        // SAFETY: forwarded.
        let op = unsafe { self.to_native(obj)? };
        let mut st = self.0.state.lock();
        // SAFETY: a stub of ours.
        let idx = unsafe { HandleTable::index_fast(op) };
        st.table.entries[idx as usize].flags |= IMMORTAL;
        if st.table.entries[idx as usize].flags & WEAK_LIMIT != 0 {
            st.table.entries[idx as usize].flags &= !WEAK_LIMIT;
            st.repl_live -= 1;
        }
        // SAFETY: the stub is live.
        unsafe { (*untag(op)).ob_refcnt = IMMORTAL_REFCNT };
        Ok(op)
    }

    /// The managed view of native pointer `op` (GraalPy's `toManaged`): for a stub, its
    /// managed object; for a native object, its mirror, made on first use (the native
    /// count goes up by `MANAGED_REFCNT` until the mirror dies). Borrowed: the caller's
    /// reference is not consumed.
    ///
    /// Errors: a stub whose managed object died, an object being deallocated (count 0),
    /// a freed object (debug mode), a null pointer, a mutator of another heap.
    ///
    /// # Safety
    /// `op` is a live object (or stub) of this bridge that the caller holds a reference
    /// to. The returned mirror is only kept alive by references to it: root or store it
    /// before the next managed allocation.
    pub unsafe fn to_managed(
        &self,
        m: &mut Mutator,
        op: *mut PyObject,
    ) -> Result<ObjRef, BridgeError> {
        let inner = self.inner()?;
        // SAFETY: forwarded.
        unsafe { inner.to_managed(m, op) }
    }

    /// Whether `obj` is a mirror of a native object.
    ///
    /// # Safety
    /// `obj` is a live object of the bridge's heap.
    pub unsafe fn is_mirror(&self, obj: ObjRef) -> bool {
        // SAFETY: forwarded.
        unsafe { self.0.heap.type_of(obj) == self.0.mirror_type }
    }

    /// The native object behind mirror `mirror` (a borrowed pointer, valid while the
    /// mirror lives); `None` if `mirror` is not a mirror.
    ///
    /// # Safety
    /// `mirror` is a live object of the bridge's heap.
    pub unsafe fn native_of(&self, mirror: ObjRef) -> Option<*mut PyObject> {
        // SAFETY: forwarded; a mirror's word 0 is its native address.
        unsafe {
            self.is_mirror(mirror)
                .then(|| mirror.read_slot(0) as *mut PyObject)
                .filter(|p| !p.is_null())
        }
    }

    /// The type of mirrors.
    pub fn mirror_type(&self) -> TypeRef {
        self.0.mirror_type
    }

    /// Drains the reference queue now: lowers the counts of objects whose managed side
    /// died and deallocates those that reach 0 (in one batch, any pending error saved
    /// and restored). Returns the number of tokens processed.
    pub fn drain(&self) -> Result<usize, BridgeError> {
        Ok(self.inner()?.drain())
    }

    /// A full collection, what `PyGC_Collect()` does: the native cycle collection
    /// (unreachable native cycles cleared with `tp_clear`; cycles that reach managed
    /// objects replicated into the managed heap), a full managed collection, the queue
    /// drained; and once more if replicated cycles left native remains (objects whose
    /// mirror died, still referenced by other dead native objects). Every garbage
    /// object, whichever side holds it, is freed when this returns.
    ///
    /// Errors: the bridge is not entered on this thread ([`BridgeError::NotEntered`]),
    /// `m` is not attached to the bridge's heap ([`BridgeError::WrongHeap`]), the managed
    /// collection failed.
    pub fn collect(&self, m: &mut Mutator) -> Result<CollectReport, BridgeError> {
        let inner = self.inner()?;
        inner.check_mutator(m, "collect")?;
        inner.collect_full(m)
    }

    /// Only the native cycle collection (with replication), without the managed
    /// collections around it.
    pub fn collect_cycles(&self, m: &mut Mutator) -> Result<CycleReport, BridgeError> {
        let inner = self.inner()?;
        inner.check_mutator(m, "collect_cycles")?;
        Ok(inner.collect_cycles(Some(m)))
    }

    /// Counters and sizes.
    pub fn stats(&self) -> BridgeStats {
        let c = &self.0.counters;
        let st = self.0.state.lock();
        BridgeStats {
            stubs_made: c.stubs_made.load(Ordering::Relaxed),
            stubs_freed: c.stubs_freed.load(Ordering::Relaxed),
            stubs_live: st.table.used,
            strong_entries: self.0.is_owner().then(|| st.table.strong_count()),
            mirrors_made: c.mirrors_made.load(Ordering::Relaxed),
            mirrors_live: st.by_native.live(),
            queue_deallocs: c.queue_deallocs.load(Ordering::Relaxed),
            tokens: c.tokens.load(Ordering::Relaxed),
            cycle_collections: c.cycle_collections.load(Ordering::Relaxed),
            cycle_garbage: c.cycle_garbage.load(Ordering::Relaxed),
            replicated: c.replicated.load(Ordering::Relaxed),
            pressure_collections: c.pressure_collections.load(Ordering::Relaxed),
            tracked: self.0.tracked.get(),
            native_bytes: self.0.account.bytes(),
            native_trigger: self.0.trigger.get(),
            unraisable: c.unraisable.load(Ordering::Relaxed),
        }
    }

    /// The account of counted native memory charged to this bridge.
    pub fn memory(&self) -> &MemAccount {
        &self.0.account
    }

    /// Bytes used by the handle table (entries, stub chunks, address map).
    pub fn handle_table_bytes(&self) -> usize {
        self.0.state.lock().table.footprint()
    }

    /// Capacity of the handle table's entry vector.
    pub fn handle_table_capacity(&self) -> usize {
        self.0.state.lock().table.capacity()
    }

    /// Whether the handle-table entry of stub `op` is strong (its managed object a root).
    /// `None` if `op` is not a live stub of this bridge (checked without reading through
    /// it), or the calling thread has not entered the bridge (the stub's count is the
    /// owner thread's to read).
    pub fn is_strong(&self, op: *const PyObject) -> Option<bool> {
        if !self.0.is_owner() {
            return None;
        }
        let st = self.0.state.lock();
        let idx = st.table.index_of(op)?;
        Some(st.table.is_strong(idx))
    }

    /// Whether native object `op` has a live mirror.
    pub fn has_mirror(&self, op: *const PyObject) -> bool {
        self.0.state.lock().mirror_rec(op as usize).is_some()
    }

    /// The error pending on this bridge (CPython's error indicator), if any.
    pub fn pending_error(&self) -> Option<String> {
        let inner = self.inner().ok()?;
        let e = inner.local.0.error.borrow();
        e.as_ref().map(|c| c.to_string_lossy().into_owned())
    }

    /// Sets the pending error.
    pub fn set_error(&self, msg: &str) -> Result<(), BridgeError> {
        self.inner()?.set_error(msg);
        Ok(())
    }

    /// Clears the pending error.
    pub fn clear_error(&self) -> Result<(), BridgeError> {
        self.inner()?.local.0.error.borrow_mut().take();
        Ok(())
    }

    /// Native objects tracked by the cycle collector now (`PyObject_GC_Track`).
    pub fn tracked(&self) -> usize {
        self.0.tracked.get()
    }

    /// Debug mode: the number of reports so far (0 when the mode is off).
    pub fn debug_report_count(&self) -> usize {
        self.0.debug.as_ref().map_or(0, |d| d.lock().reports.len())
    }

    /// Debug mode: report `i` (in the order they were made), if there is one.
    pub fn debug_report(&self, i: usize) -> Option<DebugReport> {
        self.0
            .debug
            .as_ref()
            .and_then(|d| d.lock().reports.get(i).cloned())
    }

    /// Debug mode: the reports so far (empty when the mode is off).
    pub fn debug_reports(&self) -> Vec<DebugReport> {
        self.0
            .debug
            .as_ref()
            .map(|d| d.lock().reports.clone())
            .unwrap_or_default()
    }

    /// Debug mode: checks the quarantine (uses of freed objects since the last check);
    /// returns the number of new reports (0 when the mode is off). Only on the thread
    /// that entered the bridge (it reads memory the native code there writes).
    pub fn debug_check(&self) -> Result<usize, BridgeError> {
        Ok(self.inner()?.debug_check())
    }

    /// Teardown: a full collection, then (debug mode) the leak check: every native
    /// object still alive, every stub still referenced from native code and the native
    /// bytes not freed are reported. Returns the leak reports (empty when the debug mode
    /// is off).
    pub fn shutdown(&self, m: &mut Mutator) -> Result<Vec<DebugReport>, BridgeError> {
        self.inner()?.check_mutator(m, "shutdown")?;
        self.collect(m)?;
        self.0.shut_down.store(true, Ordering::Relaxed);
        Ok(self.0.leak_check())
    }
}

// rustc compiles an inherent impl's methods in the codegen unit of their self type
// (`Inner`, state.rs), not of this module: without `#[inline]`, the methods below that
// `Bridge`'s hot paths forward to are out-of-line calls from them (to_native and
// to_managed took 18-24 more instructions each when `Inner` moved to state.rs).
impl Inner {
    fn scan_roots(&self, m: &mut Marker<'_>) {
        let st = self.state.lock();
        let mut over_released = Vec::new();
        for (i, e) in st.table.entries.iter().enumerate().skip(1) {
            let i = i as u32;
            if st.table.is_strong_entry(i, e) {
                if let Some(o) = ObjRef::from_addr(e.obj) {
                    // SAFETY: a strong entry's object is kept alive by this root scanner
                    // (and was allocated by the bridge's heap), so it is a live object.
                    unsafe { m.queue(o) };
                }
            } else if self.debug.is_some()
                && st.table.entries[i as usize].obj != 0
                && st.table.entries[i as usize].flags & IMMORTAL == 0
                && st.table.count(i) < MANAGED_REFCNT
            {
                over_released.push((i, st.table.count(i)));
            }
        }
        for &o in &st.pinned {
            // SAFETY: pinned objects are kept alive by this root scanner.
            unsafe { m.queue(o) };
        }
        for (i, c) in over_released {
            let op = st.table.tagged(i);
            // SAFETY: a live stub; the owner thread is stopped (or collecting).
            unsafe { (*untag(op)).ob_refcnt = MANAGED_REFCNT };
            self.stub_below_managed(op, i, c);
        }
    }

    /// A transition (to_native, to_managed, stub allocation): GC-a-lot, then the queue.
    pub(crate) fn transition(&self) {
        if let Some(n) = self.config.gc_a_lot {
            let l = &self.local.0;
            let t = l.transitions.get() + 1;
            l.transitions.set(t);
            if t % n as u64 == 0 && !l.collecting.get() && !l.in_collect.get() {
                if let Ok(mut m) = self.heap.current_mutator() {
                    let _ = self.collect_full(&mut m);
                }
            }
        }
        if !self.queue.is_empty() {
            self.drain();
        }
    }

    /// Looks up or makes the stub of `obj`.
    ///
    /// # Safety
    /// `obj` is a live object of the heap.
    #[inline]
    #[track_caller]
    pub(crate) unsafe fn stub_for(&self, obj: ObjRef) -> Result<*mut PyObject, BridgeError> {
        let mut st = self.state.lock();
        if let Some(idx) = st.table.lookup(obj.addr()) {
            let e = st.table.entries[idx as usize];
            if e.flags & WEAK_LIMIT != 0 {
                // Handed to native code again: strong again if native references exist.
                // (This also takes it out of the replicated set: see `RItem::side`.)
                st.table.entries[idx as usize].flags &= !WEAK_LIMIT;
                st.repl_live -= 1;
                return Ok(st.table.tagged(idx));
            }
            return Ok(st.table.tagged(idx));
        }
        // SAFETY: a live object of the heap (caller).
        let ty = unsafe { self.heap.type_of(obj) };
        let Some(&native) = st.types.get(&ty.as_obj().addr()) else {
            return Err(BridgeError::UnregisteredType {
                type_name: ty.name(),
            });
        };
        let idx = st.table.alloc(obj.addr(), native as *mut PyTypeObject);
        let op = st.table.tagged(idx);
        drop(st);
        // SAFETY: a live object of the heap (caller), so the queue's check (a page-table
        // lookup, slower while the object's page waits for the lazy sweep) is skipped.
        unsafe { self.queue.register_unchecked(obj, (idx as usize) << 1) };
        self.counters.stubs_made.fetch_add(1, Ordering::Relaxed);
        if let Some(d) = &self.debug {
            d.lock().stub_made(idx);
        }
        Ok(op)
    }

    /// See [`Bridge::to_managed`].
    ///
    /// # Safety
    /// As there.
    #[inline]
    pub(crate) unsafe fn to_managed(
        &self,
        m: &mut Mutator,
        op: *mut PyObject,
    ) -> Result<ObjRef, BridgeError> {
        if op.is_null() {
            return Err(BridgeError::Null { what: "to_managed" });
        }
        if is_stub(op) {
            return self.stub_target(op);
        }
        self.transition();
        if let Some(d) = &self.debug {
            let mut d = d.lock();
            if d.is_freed(op) {
                d.use_after_free(op, "to_managed");
                return Err(BridgeError::Freed {
                    what: "to_managed",
                    addr: op as usize,
                });
            }
        }
        // SAFETY: a native object (caller): its type is valid; its counted block starts
        // at its GC head, or at the object for other types.
        let owner = unsafe {
            let block = if (*(*op).ob_type).is_gc() {
                gc_head(op) as *const u8
            } else {
                op as *const u8
            };
            mem::block_account(block)
        };
        if owner != Arc::as_ptr(&self.account) as usize {
            // SAFETY: as above.
            return Err(unsafe { self.not_ours(op) });
        }
        // SAFETY: a live native object (caller).
        let count = unsafe { (*op).ob_refcnt };
        if count <= 0 {
            return Err(BridgeError::BeingDeallocated {
                addr: op as usize,
                // SAFETY: as above.
                type_name: unsafe { type_name_of(op) },
                count,
            });
        }
        if let Some(m) = self.mirror_of(op) {
            return Ok(m);
        }
        self.check_mutator(m, "to_managed")?;
        let mirror = m.alloc_typed(MIRROR_SIZE, self.mirror_type)?;
        if let Some(existing) = self.mirror_of(op) {
            // Made meanwhile by a deallocator run from the collection of our allocation.
            return Ok(existing);
        }
        // SAFETY: op is live (caller); the mirror is fresh.
        unsafe { self.bind_mirror(op, mirror, false) };
        Ok(mirror)
    }

    /// Why [`Inner::to_managed`] refuses native object `op`, whose block is not one of
    /// this bridge's: another bridge's (or the process account's) object, a freed one,
    /// or memory of another allocator.
    ///
    /// # Safety
    /// As [`Inner::to_managed`]'s check of the block.
    #[cold]
    #[inline(never)]
    unsafe fn not_ours(&self, op: *mut PyObject) -> BridgeError {
        // SAFETY: forwarded.
        let (block, type_name) = unsafe {
            let block = if (*(*op).ob_type).is_gc() {
                gc_head(op) as *const u8
            } else {
                op as *const u8
            };
            (block, type_name_of(op))
        };
        // SAFETY: forwarded.
        match unsafe { mem::block_state(block) } {
            mem::BlockState::Live(_) => BridgeError::OtherBridge {
                what: "to_managed",
                addr: op as usize,
                type_name,
            },
            mem::BlockState::Freed => BridgeError::Freed {
                what: "to_managed",
                addr: op as usize,
            },
            mem::BlockState::Foreign => BridgeError::NotABlock {
                what: "to_managed",
                addr: op as usize,
            },
        }
    }

    /// The managed object of a stub (checked).
    #[inline]
    pub(crate) fn stub_target(&self, op: *mut PyObject) -> Result<ObjRef, BridgeError> {
        let st = self.state.lock();
        let Some(idx) = st.table.slot_of(op) else {
            return Err(BridgeError::NotAStub { addr: op as usize });
        };
        let e = st.table.entries[idx as usize];
        match ObjRef::from_addr(e.obj) {
            Some(o) if e.flags & USED != 0 => Ok(o),
            _ => {
                drop(st);
                self.dead_stub_report(op, idx, "to_managed");
                Err(BridgeError::DeadStub {
                    addr: op as usize,
                    handle: idx,
                })
            }
        }
    }
}
