//! The bridge: managed objects as native stubs (`to_native`), native objects as managed
//! mirrors (`to_managed`), the reference queue drained at transitions and after each
//! collection, batched deallocation, the thread discipline and the C entry points' view
//! of "the current bridge".
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
    gc_head, is_stub, untag, PyObject, PyTypeObject, GC_MIRRORED, IMMORTAL_REFCNT, MANAGED_REFCNT,
};
use crate::debug::{DebugReport, DebugState, ReportKind, QUARANTINE};
use crate::error::BridgeError;
use crate::handles::{AddrMap, HandleTable, IMMORTAL, USED, WEAK_LIMIT};
use crate::mem::MemAccount;
use crate::{cycle, mem};
use gc_core::{
    Callback, CallbackId, CollectionKind, ForeignTypeSpec, Heap, MarkProc, Marker, Mutator, ObjRef,
    ReferenceQueue, SweepProc, TypeRef, WeakRef,
};
use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// Tuning and modes of a bridge.
#[derive(Clone, Debug)]
pub struct BridgeConfig {
    /// Debug mode: off by default. On, every native object and stub records where it
    /// was made; freed objects are kept poisoned in a quarantine ([`crate::QUARANTINE`]
    /// frees long), so a later `Py_DECREF` is reported at once and any other use at the
    /// next check ([`Bridge::debug_check`], each collection, shutdown); counts below
    /// zero, stubs used after their object died, double tracking and errors raised by
    /// deallocators are reported, and [`Bridge::shutdown`] reports every leak
    /// ([`DebugReport`]s with backtraces). Off, it costs nothing on the header's fast
    /// paths and one branch on the slow ones.
    pub debug: bool,
    /// GC-a-lot: a full collection (managed, native cycles, queue) every N transitions.
    pub gc_a_lot: Option<u32>,
    /// Counted native bytes that force a full collection when crossed (GraalPy's
    /// `MaxNativeMemory` start: 256 MiB).
    pub native_trigger: usize,
    /// The trigger doubles (while usage stays high after a collection) up to this
    /// (GraalPy: 8 GiB).
    pub native_trigger_max: usize,
    /// Hard cap on counted native bytes: an allocation that would go over it fails with
    /// a clear error after `pressure_retries` collections (`usize::MAX`: no cap).
    pub native_cap: usize,
    /// Collections tried before an allocation over the cap fails (GraalPy: 7).
    pub pressure_retries: u32,
    /// Automatic native cycle collection after this many more allocations than
    /// deallocations of GC objects (CPython's generation-0 threshold: 700); the
    /// threshold also grows to a quarter of the tracked objects. `None`: only explicit
    /// collections.
    pub cycle_threshold: Option<usize>,
    /// Drain the reference queue right after every collection of the heap, on the owner
    /// thread (deallocators may then run inside any managed allocation, as CPython's
    /// collector runs inside any allocation); otherwise only at transitions.
    pub drain_after_gc: bool,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            debug: false,
            gc_a_lot: None,
            native_trigger: 256 << 20,
            native_trigger_max: 8 << 30,
            native_cap: usize::MAX,
            pressure_retries: 7,
            cycle_threshold: Some(700),
            drain_after_gc: true,
        }
    }
}

impl BridgeConfig {
    fn validate(&self) -> Result<(), BridgeError> {
        if self.native_trigger == 0 || self.native_trigger_max < self.native_trigger {
            return Err(BridgeError::BadConfig(format!(
                "need 0 < native_trigger ({}) <= native_trigger_max ({})",
                self.native_trigger, self.native_trigger_max
            )));
        }
        if self.gc_a_lot == Some(0) || self.cycle_threshold == Some(0) {
            return Err(BridgeError::BadConfig(
                "gc_a_lot and cycle_threshold must be at least 1 (or None)".into(),
            ));
        }
        Ok(())
    }
}

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

#[derive(Default)]
pub(crate) struct Counters {
    pub stubs_made: AtomicU64,
    pub stubs_freed: AtomicU64,
    pub mirrors_made: AtomicU64,
    pub queue_deallocs: AtomicU64,
    pub tokens: AtomicU64,
    pub cycle_collections: AtomicU64,
    pub cycle_garbage: AtomicU64,
    pub replicated: AtomicU64,
    pub pressure_collections: AtomicU64,
    pub unraisable: AtomicU64,
}

/// A native object mirrored into the managed heap (GraalPy's `NativeObjectReference`):
/// registered with the reference queue, so it works as a weak reference to the mirror.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MirrorRec {
    pub native: usize,
    pub mirror: ObjRef,
    pub replicated: bool,
}

/// What the bridge's lock protects.
pub(crate) struct State {
    pub table: HandleTable,
    pub mirrors: Vec<Option<MirrorRec>>,
    pub mirror_free: Vec<u32>,
    /// Native address -> mirror record (the address -> weak reference map): valid while
    /// the record holds a mirror of that address ([`State::mirror_rec`]); entries of dead
    /// mirrors go stale and are removed in bulk ([`AddrMap`]).
    pub by_native: AddrMap,
    /// Managed type (its address) -> native type of its stubs.
    pub types: HashMap<usize, usize>,
    /// Managed objects kept alive while the bridge works on them (replication).
    pub pinned: Vec<ObjRef>,
    /// Members of the replicated set still in it (see [`RItem::side`]): raised by a
    /// replication, lowered wherever a member leaves (queue token, `to_native`), so
    /// that settling a replication none of which survived costs nothing per member.
    pub repl_live: usize,
}

// SAFETY: the raw pointers inside (type objects) are plain addresses of static or
// leaked memory; the state is only reached under the bridge's mutex.
unsafe impl Send for State {}

impl State {
    /// The mirror record of native object `addr`, if it has a live mirror.
    #[inline]
    pub(crate) fn mirror_rec(&self, addr: usize) -> Option<u32> {
        let rec = self.by_native.get(addr)?;
        match self.mirrors.get(rec as usize) {
            Some(Some(r)) if r.native == addr => Some(rec),
            _ => None,
        }
    }

    /// Removes the stale entries of both address maps if enough accumulated.
    pub(crate) fn sweep_maps(&mut self) {
        self.table.sweep_by_obj();
        let mirrors = &self.mirrors;
        self.by_native.maybe_sweep(
            |addr, rec| matches!(mirrors.get(rec as usize), Some(Some(r)) if r.native == addr),
        );
    }
}

/// An object of the replicated set ("weak to strong limit"), watched by the weak hook:
/// plain data (made, copied and dropped without per-member work; the weak handles of a
/// settled set are in [`Replicated::weak`]).
#[derive(Clone, Copy)]
pub(crate) struct RItem {
    /// Its queue token: stub entry (`idx << 1`) or mirror record (`rec << 1 | 1`).
    pub key: usize,
    /// The native side: a tagged stub pointer or a native object.
    pub op: *mut PyObject,
}

/// The replicated set, read by the weak-processing hook during collections.
#[derive(Default)]
pub(crate) struct Replicated {
    /// The members, in no order. An item leaves the set by losing its mark in the
    /// bridge's tables (the entry's `WEAK_LIMIT`, the record's `replicated`: queue
    /// token, `to_native`), not by removal here: [`RItem::side`] tells whether it is
    /// still in. Items are only added by a replication, right after
    /// `reset_replicated` emptied the vector, so a token never appears twice.
    pub items: Vec<RItem>,
    /// Once the set is settled: `weak[k]` is a weak handle to the managed side (managed
    /// object or mirror) of `items[k]`. Empty while the set is fresh.
    pub weak: Vec<WeakRef>,
    /// Members when the set was made (caps the vector kept for the next one).
    pub made: usize,
    /// The set was just made and no code ran since: its managed edges are exact, so the
    /// hook has nothing to add, and the next collection (the bridge's own) decides which
    /// items live; [`crate::cycle::settle`] then gives the survivors weak handles.
    pub fresh: bool,
}

impl RItem {
    /// The managed side of the item if it is still in the replicated set: the entry
    /// is used, its object alive and `WEAK_LIMIT` set (stub), or the record holds the
    /// same native object and is marked replicated (mirror).
    #[inline]
    pub(crate) fn side(&self, st: &State) -> Option<ObjRef> {
        if self.key & 1 == 0 {
            let e = st.table.entries.get(self.key >> 1)?;
            if e.flags & USED == 0 || e.flags & WEAK_LIMIT == 0 {
                return None;
            }
            ObjRef::from_addr(e.obj)
        } else {
            let r = st.mirrors.get(self.key >> 1)?.as_ref()?;
            (r.replicated && r.native == self.op as usize).then_some(r.mirror)
        }
    }
}

// SAFETY: the raw pointers are native objects owned by the bridge's thread; the hook
// reads them only while that thread is stopped (or is the collecting thread).
unsafe impl Send for Replicated {}

/// State only the owner thread touches (no lock: the owner discipline).
pub(crate) struct Local {
    /// Sentinel of the list of tracked GC objects.
    pub gc_list: *mut crate::abi::PyGCHead,
    pub gc_allocs: Cell<usize>,
    pub cycle_threshold: Cell<usize>,
    pub error: RefCell<Option<CString>>,
    pub draining: Cell<bool>,
    pub collecting: Cell<bool>,
    /// Inside `collect()` (no nested collections, automatic or forced).
    pub in_collect: Cell<bool>,
    pub pending: RefCell<Vec<*mut PyObject>>,
    pub dealloc_depth: Cell<u32>,
    pub deferred: RefCell<Vec<*mut PyObject>>,
    /// `deferred` may be non-empty (set when a deallocation is deferred).
    pub any_deferred: Cell<bool>,
    pub in_pressure: Cell<bool>,
    pub transitions: Cell<u64>,
    pub cycle_pending: Cell<bool>,
    /// The cycle collector's work vectors, kept between collections.
    pub cycle_work: RefCell<cycle::CycleWork>,
    pub enter_depth: Cell<usize>,
}

pub(crate) struct LocalCell(pub Local);
// SAFETY: only the owner thread (checked by `Inner::local`'s callers through the owner
// token and the thread-local current bridge) touches it.
unsafe impl Sync for LocalCell {}
// SAFETY: as above; the raw pointers are native memory owned by the bridge.
unsafe impl Send for LocalCell {}

/// A figure only the owner thread writes (a load and a store: no locked instruction on
/// its paths) and any thread may read (`Bridge::stats`).
#[derive(Default)]
pub(crate) struct OwnerCount(AtomicUsize);

impl OwnerCount {
    pub(crate) fn new(v: usize) -> Self {
        OwnerCount(AtomicUsize::new(v))
    }

    #[inline]
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Owner thread only.
    #[inline]
    pub(crate) fn set(&self, v: usize) {
        self.0.store(v, Ordering::Relaxed)
    }
}

/// The shared inside of a [`Bridge`].
pub(crate) struct Inner {
    pub heap: Heap,
    pub config: BridgeConfig,
    pub queue: ReferenceQueue,
    pub owner: AtomicUsize,
    pub state: Mutex<State>,
    pub repl: Mutex<Replicated>,
    pub local: LocalCell,
    /// Objects in the tracked list (written by the owner thread only).
    pub tracked: OwnerCount,
    /// The current native-memory trigger (written by the owner thread only).
    pub trigger: OwnerCount,
    pub account: Arc<MemAccount>,
    pub mirror_type: TypeRef,
    pub edges_small: TypeRef,
    pub edges_large: TypeRef,
    pub callbacks: Mutex<Vec<CallbackId>>,
    pub counters: Counters,
    pub debug: Option<Mutex<DebugState>>,
    /// `shutdown` ran its leak check.
    pub shut_down: std::sync::atomic::AtomicBool,
}

/// Payload of a mirror: the native address, then the replicated edges (the one target
/// itself, or an edge array for several).
pub(crate) const MIRROR_SIZE: usize = 16;
/// Offset of the replicated edges in a mirror.
pub(crate) const MIRROR_EDGES: usize = 8;

/// Bridges with the debug mode on, alive in the process: while there are none, the
/// memory functions skip looking for the entered bridge's debug state.
pub(crate) static DEBUG_BRIDGES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The bridge entered on this thread: the innermost live guard's (read on every path
    /// of the C API that needs the bridge; a `const` cell with no destructor, so it can
    /// be read while the thread's locals are being destroyed).
    static CURRENT: Cell<*const Inner> = const { Cell::new(std::ptr::null()) };
    /// This thread's live guards, innermost last: each guard's number and bridge. It
    /// keeps each bridge alive while its guard lives, so `CURRENT`, the last one's,
    /// always points to a live bridge this thread owns, whatever order the guards are
    /// dropped in.
    static ENTERED: Entered = const { Entered(RefCell::new(Vec::new())) };
    static NEXT_GUARD: Cell<u64> = const { Cell::new(0) };
}

/// This thread's live guards (see `ENTERED`).
struct Entered(RefCell<Vec<(u64, Arc<Inner>)>>);

impl Drop for Entered {
    fn drop(&mut self) {
        // The thread is ending with guards still alive (leaked, or in locals destroyed
        // later): nothing is entered any more.
        let _ = CURRENT.try_with(|c| c.set(std::ptr::null()));
    }
}

use crate::mem::thread_token;

/// The bridge entered on this thread, if any.
#[inline]
pub(crate) fn current<'a>() -> Option<&'a Inner> {
    let p = CURRENT.with(|c| c.get());
    // SAFETY: null or the innermost live guard's bridge, kept alive by `ENTERED` while
    // that guard lives (callers do not hold it across a call that could drop the guard).
    (!p.is_null()).then(|| unsafe { &*p })
}

/// A bridge between reference-counting native code and gc-core's managed heap. Cheap to
/// clone (shared).
#[derive(Clone)]
pub struct Bridge(pub(crate) Arc<Inner>);

/// Keeps the bridge entered on this thread (see [`Bridge::enter`]). Not `Send`: it
/// belongs to the thread that entered.
///
/// Guards may be dropped in any order: the bridge the C API uses on the thread is
/// always the one of the innermost guard still alive, and a bridge stays alive while a
/// guard of it does.
///
/// ```compile_fail,E0277
/// # use gc_core::{Heap, HeapConfig};
/// # use refbridge::{Bridge, BridgeConfig};
/// # let heap = Heap::new(HeapConfig::default()).unwrap();
/// let bridge = Bridge::new(&heap, BridgeConfig::default()).unwrap();
/// let guard = bridge.enter().unwrap();
/// std::thread::spawn(move || drop(guard)); // error: `*const ()` cannot be sent
/// ```
pub struct EnterGuard {
    inner: Arc<Inner>,
    /// Its number in `ENTERED`.
    id: u64,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let l = &self.inner.local.0;
        let d = l.enter_depth.get() - 1;
        l.enter_depth.set(d);
        if d == 0 {
            self.inner.account.set_owner(false);
            self.inner.owner.store(0, Ordering::Release);
        }
        let removed = ENTERED.try_with(|e| {
            let mut e = e.0.borrow_mut();
            let removed = e
                .iter()
                .rposition(|(id, _)| *id == self.id)
                .map(|k| e.remove(k));
            let top = e.last().map_or(std::ptr::null(), |(_, i)| Arc::as_ptr(i));
            CURRENT.with(|c| c.set(top));
            removed
        });
        if removed.is_err() {
            // The thread's locals are being destroyed (`Entered::drop` cleared CURRENT).
            let _ = CURRENT.try_with(|c| c.set(std::ptr::null()));
        }
        // (a bridge whose last handle this was is dropped here, after CURRENT moved on)
        drop(removed);
    }
}

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
                cycle_work: RefCell::new(cycle::CycleWork::default()),
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
        ENTERED
            .try_with(|e| e.0.borrow().last().map(|(_, i)| Bridge(i.clone())))
            .ok()
            .flatten()
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
        let id = NEXT_GUARD.with(|n| n.replace(n.get() + 1));
        ENTERED.with(|e| e.0.borrow_mut().push((id, self.0.clone())));
        CURRENT.with(|c| c.set(Arc::as_ptr(&self.0)));
        Ok(EnterGuard {
            inner: self.0.clone(),
            id,
            _not_send: std::marker::PhantomData,
        })
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
    pub unsafe fn to_native_new_ref(&self, obj: ObjRef) -> Result<*mut PyObject, BridgeError> {
        // SAFETY: forwarded.
        let op = unsafe { self.to_native(obj)? };
        // SAFETY: a live stub of ours.
        unsafe { crate::cpython::incref(op) };
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
        inner.collect(m)
    }

    /// Only the native cycle collection (with replication), without the managed
    /// collections around it.
    pub fn collect_cycles(&self, m: &mut Mutator) -> Result<cycle::CycleReport, BridgeError> {
        let inner = self.inner()?;
        inner.check_mutator(m, "collect_cycles")?;
        inner.drain();
        if inner.local.0.collecting.get() {
            return Ok(cycle::CycleReport::default());
        }
        inner.local.0.collecting.set(true);
        let r = cycle::collect_cycles(inner, Some(m));
        cycle::settle(inner);
        inner.local.0.collecting.set(false);
        inner.drain();
        Ok(r)
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

/// What [`Bridge::collect`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectReport {
    /// Native objects found in unreachable cycles and cleared.
    pub native_garbage: usize,
    /// Objects replicated into the managed heap (native objects and stubs of cycles that
    /// reach managed objects).
    pub replicated: usize,
    /// Full managed collections run.
    pub managed_collections: usize,
    /// Reference-queue tokens processed.
    pub tokens: usize,
    /// Native objects deallocated during the call (any cause).
    pub native_freed: usize,
    /// Stubs freed during the call.
    pub stubs_freed: usize,
}

impl Inner {
    /// Whether the calling thread owns the bridge and has it current.
    #[inline]
    pub(crate) fn is_owner(&self) -> bool {
        self.owner.load(Ordering::Relaxed) == thread_token()
    }

    /// Refuses a mutator of another heap than the bridge's (`m` allocates the bridge's
    /// mirrors and runs its collections).
    pub(crate) fn check_mutator(&self, m: &Mutator, what: &'static str) -> Result<(), BridgeError> {
        let (mutator_heap, bridge_heap) = (m.heap().id().get(), self.heap.id().get());
        if mutator_heap == bridge_heap {
            Ok(())
        } else {
            Err(BridgeError::WrongHeap {
                what,
                mutator_heap,
                bridge_heap,
            })
        }
    }

    pub(crate) fn set_error(&self, msg: &str) {
        let c = CString::new(msg.replace('\0', "?")).expect("NULs replaced");
        *self.local.0.error.borrow_mut() = Some(c);
    }

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
                    let _ = self.collect(&mut m);
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
        self.queue.register(obj, (idx as usize) << 1);
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
                return Err(BridgeError::Freed { addr: op as usize });
            }
        }
        // SAFETY: a live native object (caller).
        let count = unsafe { (*op).ob_refcnt };
        if count <= 0 {
            return Err(BridgeError::BeingDeallocated {
                addr: op as usize,
                // SAFETY: as above.
                type_name: unsafe { crate::debug::type_name_of(op) },
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

    /// The managed object of a stub (checked).
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

    fn dead_stub_report(&self, op: *mut PyObject, idx: u32, what: &str) {
        if let Some(d) = &self.debug {
            let mut d = d.lock();
            let (made, died) = d.stub_history(idx);
            // SAFETY: the stub slot is allocated (its entry is used).
            let type_name = unsafe { crate::debug::type_name_of(untag(op)) };
            d.report(DebugReport {
                kind: ReportKind::DeadStubUse,
                object: op as usize,
                type_name: type_name.clone(),
                message: format!(
                    "{what} of stub {:#x} (type {type_name}, handle {idx}) after its managed object died",
                    op as usize
                ),
                made_at: made,
                freed_at: died,
            });
        }
    }

    /// A stub that was already freed is used (debug mode keeps freed slots poisoned
    /// with count 1, so a decref of a stale pointer gets here, and `debug_check` finds
    /// other uses).
    pub(crate) fn freed_stub_use(&self, op: *mut PyObject, idx: u32, what: &str) {
        let Some(d) = &self.debug else {
            return;
        };
        let (made, died) = d.lock().stub_history(idx);
        // SAFETY: freed stub slots stay allocated; restore the poison.
        let type_name = unsafe {
            (*untag(op)).ob_refcnt = 1;
            crate::debug::type_name_of(untag(op))
        };
        d.lock().report(DebugReport {
            kind: ReportKind::DeadStubUse,
            object: op as usize,
            type_name: type_name.clone(),
            message: format!(
                "{what} of stub {:#x} (type {type_name}, handle {idx}) after its managed object died and the stub was freed",
                op as usize
            ),
            made_at: made,
            freed_at: died,
        });
    }

    /// The live mirror of native object `op`, if any.
    pub(crate) fn mirror_of(&self, op: *mut PyObject) -> Option<ObjRef> {
        let st = self.state.lock();
        let rec = st.mirror_rec(op as usize)?;
        st.mirrors[rec as usize].map(|r| r.mirror)
    }

    /// Makes `mirror` the mirror of `op`: count + MANAGED_REFCNT, map entry, queue
    /// registration, GC-header flag.
    ///
    /// # Safety
    /// `op` is a live native object without a mirror; `mirror` a fresh mirror object.
    pub(crate) unsafe fn bind_mirror(
        &self,
        op: *mut PyObject,
        mirror: ObjRef,
        replicated: bool,
    ) -> u32 {
        // SAFETY: a fresh mirror: word 0 is its native address.
        unsafe { mirror.write_slot(0, op as usize) };
        let rec = {
            let mut st = self.state.lock();
            let r = MirrorRec {
                native: op as usize,
                mirror,
                replicated,
            };
            st.repl_live += usize::from(replicated);
            let rec = match st.mirror_free.pop() {
                Some(i) => {
                    st.mirrors[i as usize] = Some(r);
                    i
                }
                None => {
                    st.mirrors.push(Some(r));
                    (st.mirrors.len() - 1) as u32
                }
            };
            st.by_native.insert(op as usize, rec);
            rec
        };
        // SAFETY: op is live (caller).
        unsafe {
            (*op).ob_refcnt += MANAGED_REFCNT;
            let ty = (*op).ob_type;
            if !ty.is_null() && (*ty).is_gc() {
                (*gc_head(op)).gc_prev |= GC_MIRRORED;
            }
        }
        self.queue.register(mirror, ((rec as usize) << 1) | 1);
        self.counters.mirrors_made.fetch_add(1, Ordering::Relaxed);
        rec
    }

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

    pub(crate) fn unraisable(&self, op: *mut PyObject, msg: &str) {
        self.counters.unraisable.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            object = format_args!("{:#x}", op as usize),
            "error raised by a deallocator run from the reference queue (dropped): {msg}"
        );
        if let Some(d) = &self.debug {
            d.lock().report(DebugReport {
                kind: ReportKind::UnraisableError,
                object: op as usize,
                type_name: String::new(),
                message: format!(
                    "deallocator of {:#x} run from the reference queue raised: {msg}",
                    op as usize
                ),
                made_at: None,
                freed_at: None,
            });
        }
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

    fn below_zero(&self, op: *mut PyObject, c: isize) {
        tracing::error!(
            object = format_args!("{:#x}", op as usize),
            count = c,
            "reference count below zero"
        );
        if let Some(d) = &self.debug {
            let mut d = d.lock();
            let made = d.made_at(untag(op));
            d.report(DebugReport {
                kind: ReportKind::RefcountBelowZero,
                object: op as usize,
                // SAFETY: the object's header is readable (its memory is allocated).
                type_name: unsafe { crate::debug::type_name_of(untag(op)) },
                message: format!("count of {:#x} went below zero ({c})", op as usize),
                made_at: made,
                freed_at: None,
            });
        }
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
        unsafe { crate::cpython::call_dealloc(op) };
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
            unsafe { crate::cpython::call_dealloc(op) };
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

    fn stub_below_managed(&self, op: *mut PyObject, idx: u32, c: isize) {
        tracing::error!(
            stub = format_args!("{:#x}", op as usize),
            count = c,
            "stub count below MANAGED_REFCNT while its managed object lives"
        );
        if let Some(d) = &self.debug {
            let mut d = d.lock();
            let (made, _) = d.stub_history(idx);
            d.report(DebugReport {
                kind: ReportKind::StubDecrefBelowManaged,
                object: op as usize,
                // SAFETY: the stub is live.
                type_name: unsafe { crate::debug::type_name_of(untag(op)) },
                message: format!(
                    "Py_DECREF of stub {:#x} (handle {idx}) took its count to {c}, below MANAGED_REFCNT: native code released a reference it did not own",
                    op as usize
                ),
                made_at: made,
                freed_at: None,
            });
        }
    }

    /// A full collection (see [`Bridge::collect`]).
    pub(crate) fn collect(&self, m: &mut Mutator) -> Result<CollectReport, BridgeError> {
        let l = &self.local.0;
        if l.collecting.get() || l.in_collect.get() {
            return Ok(CollectReport::default());
        }
        l.in_collect.set(true);
        let _span = tracing::debug_span!("refbridge_collect").entered();
        let before = (
            self.counters.tokens.load(Ordering::Relaxed),
            self.counters.stubs_freed.load(Ordering::Relaxed),
            crate::cpython::deallocs(),
        );
        let mut report = CollectReport::default();
        self.drain();
        l.collecting.set(true);
        let result = (|| {
            // Each round: the cycle collection (replicating what crosses into the
            // managed heap), a full managed collection, the queue. Another round only
            // for native remains of replicated cycles (objects whose mirror died but
            // that other dead native objects still reference).
            for _round in 0..4 {
                l.cycle_pending.set(false);
                let r = cycle::collect_cycles(self, Some(m));
                report.native_garbage += r.garbage;
                report.replicated += r.replicated;
                // Nothing runs between the replication and this collection, nor
                // between it and the settling of the replication (deallocations wait
                // while `collecting`): the replicated edges are exact for it.
                let gc = m.collect(CollectionKind::Full);
                report.managed_collections += 1;
                self.drain(); // bookkeeping only
                cycle::settle(self);
                l.collecting.set(false);
                self.drain(); // the deallocations
                gc?;
                l.collecting.set(true);
                if !l.cycle_pending.get() {
                    break;
                }
            }
            Ok::<(), BridgeError>(())
        })();
        l.collecting.set(false);
        self.drain();
        l.in_collect.set(false);
        self.debug_check();
        result?;
        report.tokens = (self.counters.tokens.load(Ordering::Relaxed) - before.0) as usize;
        report.stubs_freed =
            (self.counters.stubs_freed.load(Ordering::Relaxed) - before.1) as usize;
        report.native_freed = (crate::cpython::deallocs() - before.2) as usize;
        tracing::debug!(?report, "refbridge collection");
        Ok(report)
    }

    /// Debug mode: checks the quarantined objects and freed stub slots; returns the
    /// number of new reports.
    pub(crate) fn debug_check(&self) -> usize {
        let Some(d) = &self.debug else {
            return 0;
        };
        let mut n = d.lock().check_quarantine();
        let stale = self.state.lock().table.stale_uses();
        for (idx, _count) in stale {
            let op = self.state.lock().table.tagged(idx);
            self.freed_stub_use(op, idx, "use (count changed)");
            n += 1;
        }
        n
    }

    /// Debug mode: leak reports (native objects alive, stubs referenced from native code,
    /// native bytes not freed).
    pub(crate) fn leak_check(&self) -> Vec<DebugReport> {
        let Some(d) = &self.debug else {
            return Vec::new();
        };
        let mut out = d.lock().live_objects();
        {
            let st = self.state.lock();
            for i in 1..st.table.entries.len() as u32 {
                let e = st.table.entries[i as usize];
                if e.flags & USED == 0 || e.flags & IMMORTAL != 0 {
                    continue;
                }
                let c = st.table.count(i);
                let native_refs = if e.obj != 0 { c - MANAGED_REFCNT } else { c };
                if native_refs > 0 {
                    let op = st.table.tagged(i);
                    let (made, _) = d.lock().stub_history(i);
                    out.push(DebugReport {
                        kind: ReportKind::Leak,
                        object: op as usize,
                        // SAFETY: a used stub slot.
                        type_name: unsafe { crate::debug::type_name_of(untag(op)) },
                        message: format!(
                            "stub {:#x} (handle {i}) still has {native_refs} native reference(s){}",
                            op as usize,
                            if e.obj == 0 {
                                " after its managed object died"
                            } else {
                                ""
                            }
                        ),
                        made_at: made,
                        freed_at: None,
                    });
                }
            }
        }
        let bytes = self.account.bytes();
        if bytes > 0 {
            out.push(DebugReport {
                kind: ReportKind::Leak,
                object: 0,
                type_name: String::new(),
                message: format!(
                    "{bytes} bytes of native memory in {} blocks were never freed",
                    self.account.blocks()
                ),
                made_at: None,
                freed_at: None,
            });
        }
        let mut d = d.lock();
        for r in &out {
            tracing::warn!("{}", r.message);
            d.reports.push(r.clone());
        }
        out
    }
}

/// Nesting of deallocations before the rest is deferred to the outermost one.
pub const TRASHCAN_DEPTH: u32 = 64;

impl Drop for Inner {
    fn drop(&mut self) {
        cycle::leave_work(std::mem::take(self.local.0.cycle_work.get_mut()));
        for id in self.callbacks.get_mut().drain(..) {
            let _ = self.heap.remove_callback(id);
        }
        self.queue.set_notify(None);
        if self.config.debug && !self.shut_down.load(Ordering::Relaxed) {
            let _ = self.leak_check();
        }
        if let Some(d) = &self.debug {
            for block in d.lock().take_quarantine() {
                // SAFETY: quarantined blocks are counted blocks nobody may use any more.
                unsafe { mem::free(block) };
            }
        }
        let st = self.state.get_mut();
        if st.table.has_native_references() {
            // Native code still holds stubs: keep their memory (leaked) so it stays valid.
            let t = std::mem::replace(&mut st.table, HandleTable::new(0));
            std::mem::forget(t);
        }
        let sentinel = self.local.0.gc_list;
        // SAFETY: the sentinel is ours; objects still tracked link to it.
        unsafe {
            if (*sentinel).gc_next == sentinel as usize {
                drop(Box::from_raw(sentinel));
            }
        }
        if self.account.blocks() > 0 {
            // Blocks still in use point at the account: keep it alive for their frees.
            std::mem::forget(self.account.clone());
        }
        if self.debug.is_some() {
            DEBUG_BRIDGES.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
