//! The bridge's state, below everything that acts on it: the configuration, the tables
//! the bridge's lock protects (handle table, mirror records, address maps), the
//! replicated set, the owner thread's state, the counters, the thread's stack of entered
//! bridges (`current()`, what the C API functions act on), and the bookkeeping that
//! reads only them (mirror records, debug reports, the leak check). The collections
//! live above (`collect.rs` over `cycle.rs`); the allocation paths below them reach them
//! through the [`Collectors`] the bridge is given.

use crate::abi::{gc_head, untag, PyObject, GC_MIRRORED, MANAGED_REFCNT};
use crate::cycle_work::{leave_work, CycleWork};
use crate::debug::{type_name_of, DebugReport, DebugState, ReportKind};
use crate::error::BridgeError;
use crate::handles::{AddrMap, HandleTable, IMMORTAL, USED, WEAK_LIMIT};
use crate::mem::{self, thread_token, MemAccount};
use gc_core::{CallbackId, Heap, Mutator, ObjRef, ReferenceQueue, TypeRef, WeakRef};
use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The most collections [`BridgeConfig::pressure_retries`] may ask for: an allocation
/// over the cap collects at most this many times before it fails (each a full
/// collection of the heap and the native objects).
pub const MAX_PRESSURE_RETRIES: u32 = 100;

/// Tuning and modes of a bridge.
#[derive(Clone, Debug)]
pub struct BridgeConfig {
    /// Debug mode: off by default. On, every native object and stub records where it
    /// was made; freed objects are kept poisoned in a quarantine ([`crate::QUARANTINE`]
    /// frees long), so a later `Py_DECREF` (or `PyObject_GC_Del`, `PyObject_GC_Track`,
    /// `PyObject_GC_UnTrack`, `PyObject_Free`, `to_managed`, which also fail with
    /// [`BridgeError::Freed`](crate::BridgeError::Freed)) is reported at once and any
    /// other use at the next check ([`Bridge::debug_check`](crate::Bridge::debug_check), each collection, shutdown); counts below
    /// zero, stubs used after their object died, double tracking and errors raised by
    /// deallocators are reported, and [`Bridge::shutdown`](crate::Bridge::shutdown) reports every leak
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
    /// a clear error after `pressure_retries` collections (`usize::MAX`: no cap); a
    /// request larger than the cap itself fails at once, without collecting.
    pub native_cap: usize,
    /// Collections tried before an allocation over the cap fails (GraalPy: 7); at most
    /// [`MAX_PRESSURE_RETRIES`].
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
    pub(crate) fn validate(&self) -> Result<(), BridgeError> {
        if self.native_trigger == 0 || self.native_trigger_max < self.native_trigger {
            return Err(BridgeError::BadConfig(format!(
                "need 0 < native_trigger ({}) <= native_trigger_max ({})",
                self.native_trigger, self.native_trigger_max
            )));
        }
        if self.pressure_retries > MAX_PRESSURE_RETRIES {
            return Err(BridgeError::BadConfig(format!(
                "pressure_retries ({}) must be at most {MAX_PRESSURE_RETRIES}",
                self.pressure_retries
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
    pub cycle_work: RefCell<CycleWork>,
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
///
/// Its methods live in the module of the layer each belongs to (every one above this
/// module; `docs/design/refbridge.md`, "Module layers"), not gathered here, which would
/// make this module name the layers above it:
/// - `state.rs`: owner checks, the pending error, mirror records, the debug reports and
///   the leak check, and `collect`/`maybe_auto_collect` (through [`Collectors`]);
/// - `pressure.rs`: `alloc_native` and the collection memory pressure forces;
/// - `refcount.rs`: the queue's `drain`, `dealloc` (the trashcan), `decref_slow`;
/// - `collect.rs`: `collect_full` and `collect_cycles`, the collections' drivers;
/// - `bridge.rs`: the root scanner, `transition`, `stub_for`, `to_managed`,
///   `stub_target` (the hot paths `Bridge` forwards to).
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
    /// The collections of the layers above, given by `Bridge::new`.
    pub collectors: Collectors,
    /// `shutdown` ran its leak check.
    pub shut_down: std::sync::atomic::AtomicBool,
}

/// The collections, which live above this module (`collect.rs`, over the cycle
/// collector), given to the bridge when it is made: the allocation paths below them
/// call them (memory pressure forces a full collection; allocating GC objects runs an
/// automatic cycle collection past the threshold).
#[derive(Clone, Copy)]
pub(crate) struct Collectors {
    /// A full collection (`Bridge::collect`).
    pub full: fn(&Inner, &mut Mutator) -> Result<(), BridgeError>,
    /// An automatic native cycle collection (its threshold already checked).
    pub auto_cycles: fn(&Inner),
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

/// The bridge entered on this thread, if any.
#[inline]
pub(crate) fn current<'a>() -> Option<&'a Inner> {
    let p = CURRENT.with(|c| c.get());
    // SAFETY: null or the innermost live guard's bridge, kept alive by `ENTERED` while
    // that guard lives (callers do not hold it across a call that could drop the guard).
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Keeps the bridge entered on this thread (see [`Bridge::enter`](crate::Bridge::enter)). Not `Send`: it
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

impl EnterGuard {
    /// Pushes `inner` on this thread's stack of entered bridges, making it the current
    /// one (the caller made the thread its owner).
    pub(crate) fn push(inner: &Arc<Inner>) -> EnterGuard {
        let id = NEXT_GUARD.with(|n| n.replace(n.get() + 1));
        ENTERED.with(|e| e.0.borrow_mut().push((id, inner.clone())));
        CURRENT.with(|c| c.set(Arc::as_ptr(inner)));
        EnterGuard {
            inner: inner.clone(),
            id,
            _not_send: std::marker::PhantomData,
        }
    }
}

/// The bridge of the innermost live guard on this thread, if any (as a shared handle).
pub(crate) fn entered() -> Option<Arc<Inner>> {
    ENTERED
        .try_with(|e| e.0.borrow().last().map(|(_, i)| i.clone()))
        .ok()
        .flatten()
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
        // SAFETY: the mirror is a live object of the bridge's heap (allocated above).
        unsafe {
            self.queue
                .register_unchecked(mirror, ((rec as usize) << 1) | 1)
        };
        self.counters.mirrors_made.fetch_add(1, Ordering::Relaxed);
        rec
    }

    pub(crate) fn dead_stub_report(&self, op: *mut PyObject, idx: u32, what: &str) {
        if let Some(d) = &self.debug {
            let mut d = d.lock();
            let (made, died) = d.stub_history(idx);
            // SAFETY: the stub slot is allocated (its entry is used).
            let type_name = unsafe { type_name_of(untag(op)) };
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
            type_name_of(untag(op))
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

    pub(crate) fn below_zero(&self, op: *mut PyObject, c: isize) {
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
                type_name: unsafe { type_name_of(untag(op)) },
                message: format!("count of {:#x} went below zero ({c})", op as usize),
                made_at: made,
                freed_at: None,
            });
        }
    }

    pub(crate) fn stub_below_managed(&self, op: *mut PyObject, idx: u32, c: isize) {
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
                type_name: unsafe { type_name_of(untag(op)) },
                message: format!(
                    "Py_DECREF of stub {:#x} (handle {idx}) took its count to {c}, below MANAGED_REFCNT: native code released a reference it did not own",
                    op as usize
                ),
                made_at: made,
                freed_at: None,
            });
        }
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
                        type_name: unsafe { type_name_of(untag(op)) },
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

    /// A full collection ([`crate::Bridge::collect`]), by the driver the bridge was
    /// given.
    pub(crate) fn collect(&self, m: &mut Mutator) -> Result<(), BridgeError> {
        (self.collectors.full)(self, m)
    }

    /// Runs an automatic cycle collection if enough GC objects were allocated.
    #[inline]
    pub(crate) fn maybe_auto_collect(&self) {
        let l = &self.local.0;
        if self.config.cycle_threshold.is_none()
            || l.gc_allocs.get() <= l.cycle_threshold.get()
            || l.collecting.get()
            || l.in_collect.get()
        {
            return;
        }
        (self.collectors.auto_cycles)(self)
    }
}

/// Nesting of deallocations before the rest is deferred to the outermost one.
pub const TRASHCAN_DEPTH: u32 = 64;

impl Drop for Inner {
    fn drop(&mut self) {
        leave_work(std::mem::take(self.local.0.cycle_work.get_mut()));
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
