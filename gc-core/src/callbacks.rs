//! The six callback kinds of the seed (pre_gc, post_gc, root_scanner, task_scanner,
//! notify_external_alloc, notify_external_free), and gc-core's weak-processing hook.
//!
//! Each kind is a list published as an immutable snapshot (`Arc<[...]>`): invoking
//! takes the snapshot and calls without any lock held, so a callback may register or
//! remove callbacks. With none registered, the cost at the call site is one load of an
//! `AtomicBool` and a branch that always goes the same way.
//!
//! Rust callbacks are closures identified by the [`CallbackId`] returned on
//! registration; C callbacks are plain function pointers identified by their address,
//! registered at most once (a second registration is refused).

use crate::error::GcError;
use crate::marker::Marker;
use crate::object::ObjRef;
use crate::task::Task;
use crate::CollectionKind;
use parking_lot::Mutex;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Identity of a registered callback, for removal. Unique in the process: an id
/// given by one heap is never registered with another, so removing it there is an
/// error ([`GcError::CallbackNotRegistered`]), never the removal of another callback.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallbackId(u64);

/// A Rust root scanner: queue extra roots with the marker.
pub type RootScannerFn = dyn Fn(&mut Marker<'_>, CollectionKind) + Send + Sync;
/// A Rust task scanner: queue the roots of one task.
pub type TaskScannerFn = dyn Fn(&mut Marker<'_>, &Task, CollectionKind) + Send + Sync;
/// A Rust weak-processing hook.
pub type WeakHookFn = dyn Fn(&mut Marker<'_>, CollectionKind) + Send + Sync;

/// A callback of one of the seven kinds, Rust closure or C function.
pub enum Callback {
    /// Called once per collection with the world stopped, once it is decided full or
    /// partial (the argument) and before marking. The threads' remembered sets are
    /// merged after the pre-GC callbacks (Julia's order): a write barrier one issues on
    /// the collecting thread (e.g. `jl_gc_wb_back` through the C API) counts for this
    /// collection.
    PreGc(Arc<dyn Fn(CollectionKind) + Send + Sync>),
    /// Called once per collection after sweeping, before the world resumes.
    PostGc(Arc<dyn Fn(CollectionKind) + Send + Sync>),
    /// Called at the beginning of marking to queue extra roots.
    RootScanner(Arc<RootScannerFn>),
    /// Called once per registered task during marking (on the collecting thread, or on
    /// any collector thread, see [`crate::TaskScan`]).
    TaskScanner(Arc<TaskScannerFn>),
    /// Called after an external (big) object is allocated, with its payload address and
    /// size, on the allocating thread. A panic in it unwinds out of the allocating call
    /// (`alloc_typed` and the like): the object stays allocated, unreferenced, and the
    /// next collection frees it (with the `ExternalFree` callbacks); the heap stays usable.
    ExternalAlloc(Arc<dyn Fn(ObjRef, usize) + Send + Sync>),
    /// Called before an external (big) object is freed, with its payload address.
    ExternalFree(Arc<dyn Fn(ObjRef) + Send + Sync>),
    /// The weak-processing hook: called between mark and sweep, before weak references
    /// are cleared, with the marker: [`Marker::is_marked`] tells whether an object is
    /// alive so far and [`Marker::queue`] keeps more objects alive. Called again (with
    /// every other hook) while a round marks new objects. See `weak.rs`.
    WeakProcessing(Arc<WeakHookFn>),
    /// C `jl_gc_cb_pre_gc_t` (made by the `unsafe` [`Callback::c_pre_gc`]).
    #[non_exhaustive]
    CPreGc(unsafe extern "C" fn(c_int)),
    /// C `jl_gc_cb_post_gc_t` (made by the `unsafe` [`Callback::c_post_gc`]).
    #[non_exhaustive]
    CPostGc(unsafe extern "C" fn(c_int)),
    /// C `jl_gc_cb_root_scanner_t` (made by the `unsafe` [`Callback::c_root_scanner`]).
    #[non_exhaustive]
    CRootScanner(unsafe extern "C" fn(c_int)),
    /// C `jl_gc_cb_task_scanner_t` (made by the `unsafe` [`Callback::c_task_scanner`]),
    /// given the task's C handle ([`Task::c_handle`]) and, per [`crate::TaskScan`],
    /// whether the collection is full or whether the task is its thread's own stack.
    #[non_exhaustive]
    CTaskScanner(unsafe extern "C" fn(*mut c_void, c_int)),
    /// C `jl_gc_cb_notify_external_alloc_t` (made by the `unsafe`
    /// [`Callback::c_external_alloc`]).
    #[non_exhaustive]
    CExternalAlloc(unsafe extern "C" fn(*mut c_void, usize)),
    /// C `jl_gc_cb_notify_external_free_t` (made by the `unsafe`
    /// [`Callback::c_external_free`]).
    #[non_exhaustive]
    CExternalFree(unsafe extern "C" fn(*mut c_void)),
    /// C weak-processing hook, `void (*)(int full)`; it reaches the marker through the
    /// collecting thread's ptls (`gc_is_marked`, `gc_mark_queue_obj`) (made by the
    /// `unsafe` [`Callback::c_weak_processing`]).
    #[non_exhaustive]
    CWeakProcessing(unsafe extern "C" fn(c_int)),
}

/// The C variants of [`Callback`] hold functions the heap calls later, with arguments
/// of its own: safe code cannot make them (the variants are `#[non_exhaustive]`), only
/// these `unsafe` constructors, whose callers promise what the call needs. Every one of
/// them has this contract:
///
/// # Safety
/// While it is registered, `f` may be called by the heap as the seed documents its kind
/// (on the thread running a collection with the world stopped, for the pre/post GC
/// callbacks, the root and task scanners and the weak-processing hook; on the
/// allocating thread after a big object is allocated, and before a big object is freed,
/// for the external-object notifications), with the arguments gc-core passes (the
/// `full` flag, a registered task, a big object's payload address and size): calling it
/// so must be sound, and it must not unwind.
///
/// ```compile_fail,E0603
/// // Safe code cannot store a C function the heap would call with its own arguments:
/// let heap = gc_core::Heap::default();
/// extern "C" fn free_it(_obj: *mut std::ffi::c_void) {}
/// heap.add_callback(gc_core::Callback::CExternalFree(free_it)).unwrap();
/// ```
///
/// ```compile_fail,E0133
/// let heap = gc_core::Heap::default();
/// extern "C" fn free_it(_obj: *mut std::ffi::c_void) {}
/// heap.add_callback(gc_core::Callback::c_external_free(free_it)).unwrap();
/// ```
impl Callback {
    /// A C pre-GC callback (`jl_gc_cb_pre_gc_t`).
    ///
    /// # Safety
    /// See the contract above: `f(full)` is called once per collection, world stopped.
    pub unsafe fn c_pre_gc(f: unsafe extern "C" fn(c_int)) -> Callback {
        Callback::CPreGc(f)
    }

    /// A C post-GC callback (`jl_gc_cb_post_gc_t`).
    ///
    /// # Safety
    /// See the contract above: `f(full)` is called once per collection, world stopped.
    pub unsafe fn c_post_gc(f: unsafe extern "C" fn(c_int)) -> Callback {
        Callback::CPostGc(f)
    }

    /// A C root scanner (`jl_gc_cb_root_scanner_t`).
    ///
    /// # Safety
    /// See the contract above: `f(full)` is called while marking, world stopped.
    pub unsafe fn c_root_scanner(f: unsafe extern "C" fn(c_int)) -> Callback {
        Callback::CRootScanner(f)
    }

    /// A C task scanner (`jl_gc_cb_task_scanner_t`).
    ///
    /// # Safety
    /// See the contract above: `f(task, arg)` is called once per registered task while
    /// marking, world stopped, with the task's C handle ([`Task::c_handle`]); `arg` is
    /// as [`crate::TaskScan`] says.
    pub unsafe fn c_task_scanner(f: unsafe extern "C" fn(*mut c_void, c_int)) -> Callback {
        Callback::CTaskScanner(f)
    }

    /// A C notification of big-object allocation (`jl_gc_cb_notify_external_alloc_t`).
    ///
    /// # Safety
    /// See the contract above: `f(payload, size)` is called after each big object is
    /// allocated, on the allocating thread.
    pub unsafe fn c_external_alloc(f: unsafe extern "C" fn(*mut c_void, usize)) -> Callback {
        Callback::CExternalAlloc(f)
    }

    /// A C notification of big-object release (`jl_gc_cb_notify_external_free_t`).
    ///
    /// # Safety
    /// See the contract above: `f(payload)` is called before each big object is freed
    /// (the object is dead: `f` must not free it or keep it).
    pub unsafe fn c_external_free(f: unsafe extern "C" fn(*mut c_void)) -> Callback {
        Callback::CExternalFree(f)
    }

    /// A C weak-processing hook.
    ///
    /// # Safety
    /// See the contract above: `f(full)` is called between mark and sweep, world stopped.
    pub unsafe fn c_weak_processing(f: unsafe extern "C" fn(c_int)) -> Callback {
        Callback::CWeakProcessing(f)
    }
}

/// Which of the seven lists a callback belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CallbackKind {
    /// pre_gc
    PreGc,
    /// post_gc
    PostGc,
    /// root_scanner
    RootScanner,
    /// task_scanner
    TaskScanner,
    /// notify_external_alloc
    ExternalAlloc,
    /// notify_external_free
    ExternalFree,
    /// The weak-processing hook (gc-core's own, not the seed's).
    WeakProcessing,
}

impl CallbackKind {
    /// The seed's name of the kind.
    pub fn name(self) -> &'static str {
        match self {
            CallbackKind::PreGc => "pre_gc",
            CallbackKind::PostGc => "post_gc",
            CallbackKind::RootScanner => "root_scanner",
            CallbackKind::TaskScanner => "task_scanner",
            CallbackKind::ExternalAlloc => "notify_external_alloc",
            CallbackKind::ExternalFree => "notify_external_free",
            CallbackKind::WeakProcessing => "weak_processing",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl Callback {
    /// The list this callback goes to.
    pub fn kind(&self) -> CallbackKind {
        match self {
            Callback::PreGc(_) | Callback::CPreGc(_) => CallbackKind::PreGc,
            Callback::PostGc(_) | Callback::CPostGc(_) => CallbackKind::PostGc,
            Callback::RootScanner(_) | Callback::CRootScanner(_) => CallbackKind::RootScanner,
            Callback::TaskScanner(_) | Callback::CTaskScanner(_) => CallbackKind::TaskScanner,
            Callback::ExternalAlloc(_) | Callback::CExternalAlloc(_) => CallbackKind::ExternalAlloc,
            Callback::ExternalFree(_) | Callback::CExternalFree(_) => CallbackKind::ExternalFree,
            Callback::WeakProcessing(_) | Callback::CWeakProcessing(_) => {
                CallbackKind::WeakProcessing
            }
        }
    }

    /// The address of a C callback (its identity), `None` for closures.
    fn c_address(&self) -> Option<usize> {
        match self {
            Callback::CPreGc(f)
            | Callback::CPostGc(f)
            | Callback::CRootScanner(f)
            | Callback::CWeakProcessing(f) => Some(*f as usize),
            Callback::CTaskScanner(f) => Some(*f as usize),
            Callback::CExternalAlloc(f) => Some(*f as usize),
            Callback::CExternalFree(f) => Some(*f as usize),
            _ => None,
        }
    }
}

type Snapshot = Arc<[(CallbackId, Arc<Callback>)]>;

struct List {
    any: AtomicBool,
    entries: Mutex<Snapshot>,
}

/// The heap's callback lists (the seed's six and the weak-processing hook).
pub(crate) struct Callbacks {
    lists: [List; 7],
}

/// The next [`CallbackId`], shared by every heap of the process.
static NEXT_CALLBACK_ID: AtomicU64 = AtomicU64::new(1);

impl Callbacks {
    pub(crate) fn new() -> Self {
        Callbacks {
            lists: std::array::from_fn(|_| List {
                any: AtomicBool::new(false),
                entries: Mutex::new(Arc::from(Vec::new())),
            }),
        }
    }

    /// Registers `cb`; a C function already registered in the same list is refused.
    pub(crate) fn add(&self, cb: Callback) -> Result<CallbackId, GcError> {
        let kind = cb.kind();
        let list = &self.lists[kind.index()];
        let mut entries = list.entries.lock();
        if let Some(addr) = cb.c_address() {
            if entries.iter().any(|(_, e)| e.c_address() == Some(addr)) {
                return Err(GcError::CallbackAlreadyRegistered {
                    kind: kind.name(),
                    id: format!("{addr:#x}"),
                });
            }
        }
        let id = CallbackId(NEXT_CALLBACK_ID.fetch_add(1, Ordering::Relaxed));
        let mut v: Vec<_> = entries.iter().cloned().collect();
        v.push((id, Arc::new(cb)));
        *entries = Arc::from(v);
        list.any.store(true, Ordering::Release);
        Ok(id)
    }

    /// Removes the callback registered as `id`.
    pub(crate) fn remove(&self, id: CallbackId) -> Result<(), GcError> {
        for list in &self.lists {
            let mut entries = list.entries.lock();
            if entries.iter().any(|(i, _)| *i == id) {
                let v: Vec<_> = entries.iter().filter(|(i, _)| *i != id).cloned().collect();
                list.any.store(!v.is_empty(), Ordering::Release);
                *entries = Arc::from(v);
                return Ok(());
            }
        }
        Err(GcError::CallbackNotRegistered {
            kind: "any",
            id: format!("{id:?}"),
        })
    }

    /// Removes the C function at `addr` from list `kind`.
    pub(crate) fn remove_c(&self, kind: CallbackKind, addr: usize) -> Result<(), GcError> {
        let id = {
            let entries = self.lists[kind.index()].entries.lock();
            entries
                .iter()
                .find(|(_, e)| e.c_address() == Some(addr))
                .map(|(i, _)| *i)
        };
        match id {
            Some(id) => self.remove(id),
            None => Err(GcError::CallbackNotRegistered {
                kind: kind.name(),
                id: format!("{addr:#x}"),
            }),
        }
    }

    /// Whether any callback of `kind` is registered (the one predictable branch).
    #[inline]
    pub(crate) fn any(&self, kind: CallbackKind) -> bool {
        self.lists[kind.index()].any.load(Ordering::Relaxed)
    }

    /// The current callbacks of `kind`.
    pub(crate) fn snapshot(&self, kind: CallbackKind) -> Snapshot {
        self.lists[kind.index()].entries.lock().clone()
    }

    /// Number of registered callbacks of `kind`.
    pub(crate) fn count(&self, kind: CallbackKind) -> usize {
        self.lists[kind.index()].entries.lock().len()
    }
}
