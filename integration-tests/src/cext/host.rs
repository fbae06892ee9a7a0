//! The refbridge side: the extension loaded by elf-loader (each [`Extension::load`] is a
//! fresh copy in a namespace of its own, with its own globals), its CPython names bound
//! to refbridge's C API, and a Rust host whose managed objects live on gc-core.

use super::{build_refbridge_library, Op, Outcome, HOST_SLOTS};
use elf_loader::{CustomLibrary, SymbolProvider, SystemLibrary, TlsIndex};
use gc_core::{Heap, HeapConfig, Mutator, ObjRef, Root, TypeRef, WeakRef};
use refbridge::{Bridge, BridgeConfig, EnterGuard};
use refbridge::{PyObject, PyTypeObject, PY_TPFLAGS_DEFAULT};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_int, c_long};
use std::sync::Arc;

/// refbridge's C API as symbols for loaded code: `PyObject_GC_New`'s `_PyObject_GC_New`,
/// `Py_IncRef`, ... resolve to this process's refbridge.
pub struct RefbridgeSymbols(HashMap<&'static str, usize>);

impl RefbridgeSymbols {
    /// Every function of refbridge's C ABI.
    pub fn new() -> Self {
        RefbridgeSymbols(refbridge_capi::symbols().into_iter().collect())
    }
}

impl Default for RefbridgeSymbols {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the answers are refbridge's C ABI functions by their C names
// (`refbridge::c_abi_symbols`), with the signatures of refbridge's `Python.h`.
unsafe impl SymbolProvider for RefbridgeSymbols {
    fn sym(&self, name: &str) -> Option<usize> {
        self.0.get(name).copied()
    }
    fn tls_sym(&self, _name: &str) -> Option<TlsIndex> {
        None
    }
    fn describe(&self) -> String {
        "refbridge C API".into()
    }
}

type NewFn = unsafe extern "C" fn(c_long) -> *mut PyObject;
type LeafFn = unsafe extern "C" fn(c_long, isize) -> *mut PyObject;
type ObjFn = unsafe extern "C" fn(*mut PyObject);
type AppendFn = unsafe extern "C" fn(*mut PyObject, *mut PyObject) -> c_int;
type PopFn = unsafe extern "C" fn(*mut PyObject) -> *mut PyObject;
type IdFn = unsafe extern "C" fn(*mut PyObject) -> c_long;
type CountFn = unsafe extern "C" fn() -> c_long;
type LogFn = unsafe extern "C" fn(c_long) -> c_long;
type CheckFn = unsafe extern "C" fn(*mut PyObject) -> c_int;
type VoidFn = unsafe extern "C" fn();
type InitFn = unsafe extern "C" fn() -> c_int;

/// The extension, loaded, with its operations.
pub struct Extension {
    /// `cext_container_new(id)`.
    pub container_new: NewFn,
    /// `cext_leaf_new(id, size)`.
    pub leaf_new: LeafFn,
    /// `cext_container_append(c, x)`.
    pub append: AppendFn,
    /// `cext_container_clear(c)`.
    pub clear: ObjFn,
    /// `cext_container_pop(c)`.
    pub pop: PopFn,
    /// `cext_id(obj)`.
    pub id: IdFn,
    /// `cext_leaf_check(leaf)`.
    pub leaf_check: CheckFn,
    freed_count: CountFn,
    freed_id: LogFn,
    freed_reset: VoidFn,
    live_count: CountFn,
    init: InitFn,
    lib: CustomLibrary,
}

impl Extension {
    /// Builds (or reuses) the library and loads a fresh copy of it.
    pub fn load() -> Result<Extension, String> {
        let build = build_refbridge_library()?;
        let lib = CustomLibrary::create(&build.library);
        lib.add_search_library(Arc::new(RefbridgeSymbols::new()))
            .map_err(|e| e.to_string())?;
        lib.add_search_library(SystemLibrary::global())
            .map_err(|e| e.to_string())?;
        // SAFETY: cext.c's initialisers only set up its own globals; its CPython names
        // bind to refbridge's C API (RefbridgeSymbols), the rest to the process's libc.
        unsafe { lib.load() }.map_err(|e| e.to_string())?;
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                // SAFETY: the symbol is the C function of that name in cext.c, with the
                // signature of the field it is stored in; the `Extension` keeps `lib`
                // (and so the mapping) for as long as it holds the pointer.
                unsafe { lib.get::<$ty>($name).map_err(|e| e.to_string())?.into_raw() }
            }};
        }
        Ok(Extension {
            container_new: sym!("cext_container_new", NewFn),
            leaf_new: sym!("cext_leaf_new", LeafFn),
            append: sym!("cext_container_append", AppendFn),
            clear: sym!("cext_container_clear", ObjFn),
            pop: sym!("cext_container_pop", PopFn),
            id: sym!("cext_id", IdFn),
            leaf_check: sym!("cext_leaf_check", CheckFn),
            freed_count: sym!("cext_freed_count", CountFn),
            freed_id: sym!("cext_freed_id", LogFn),
            freed_reset: sym!("cext_freed_reset", VoidFn),
            live_count: sym!("cext_live_count", CountFn),
            init: sym!("cext_init", InitFn),
            lib,
        })
    }

    /// The ids deallocated since the last call (the extension's log).
    pub fn take_freed(&self) -> Vec<i64> {
        // SAFETY: plain C functions of the loaded library.
        unsafe {
            let n = (self.freed_count)();
            let v = (0..n).map(|i| (self.freed_id)(i)).collect();
            (self.freed_reset)();
            v
        }
    }

    /// Extension objects alive.
    pub fn live(&self) -> i64 {
        // SAFETY: a plain C function of the loaded library.
        unsafe { (self.live_count)() }
    }

    /// The loaded library.
    pub fn library(&self) -> &CustomLibrary {
        &self.lib
    }
}

enum Held {
    /// A native object, and whether it is a container (else a leaf).
    Native(*mut PyObject, bool),
    Managed(Root),
}

/// The Rust host: a heap, this thread attached, a bridge entered, a managed `Host` type
/// (four reference slots and an id) whose stubs look like `host.Host` to native code.
pub struct RefbridgeHost {
    guard: Option<EnterGuard>,
    held: HashMap<i64, Held>,
    watch: Vec<(i64, WeakRef)>,
    watching: bool,
    reported: HashSet<i64>,
    /// The bridge.
    pub bridge: Bridge,
    /// This thread's mutator.
    pub m: Mutator,
    /// The heap.
    pub heap: Heap,
    host_type: TypeRef,
    /// The extension (dropped last: native objects' types live in it).
    pub ext: Extension,
}

/// Payload of a host object: four references, then the id.
const HOST_SIZE: usize = 8 * HOST_SLOTS + 8;

impl RefbridgeHost {
    /// A host over a fresh heap and bridge (automatic collections off, so objects are
    /// freed at the script's collections, as with `gc.disable()` in CPython).
    pub fn new(ext: Extension) -> Result<RefbridgeHost, String> {
        Self::with_config(
            ext,
            BridgeConfig {
                cycle_threshold: None,
                ..BridgeConfig::default()
            },
        )
    }

    /// A host with a given bridge configuration.
    pub fn with_config(ext: Extension, config: BridgeConfig) -> Result<RefbridgeHost, String> {
        let heap = Heap::new(HeapConfig::default()).map_err(|e| e.to_string())?;
        let m = heap.attach().map_err(|e| e.to_string())?;
        let bridge = Bridge::new(&heap, config).map_err(|e| e.to_string())?;
        let guard = bridge.enter().map_err(|e| e.to_string())?;
        // SAFETY: a C function of the loaded library.
        if unsafe { (ext.init)() } != 0 {
            return Err(format!("cext_init failed: {:?}", bridge.pending_error()));
        }
        let offsets: Vec<u32> = (0..HOST_SLOTS as u32).map(|i| 8 * i).collect();
        let host_type = heap
            .new_layout_type("Host", HOST_SIZE, &offsets)
            .map_err(|e| e.to_string())?;
        let native: &'static mut PyTypeObject = Box::leak(Box::new(PyTypeObject::new(
            c"host.Host",
            std::mem::size_of::<PyObject>(),
            PY_TPFLAGS_DEFAULT,
        )));
        // SAFETY: a type object, leaked so it outlives the bridge.
        unsafe {
            refbridge::type_ready(native).map_err(|e| format!("PyType_Ready(host.Host): {e}"))?;
            bridge
                .register_managed_type(host_type, native)
                .map_err(|e| e.to_string())?;
        }
        ext.take_freed();
        Ok(RefbridgeHost {
            guard: Some(guard),
            held: HashMap::new(),
            watch: Vec::new(),
            watching: true,
            reported: HashSet::new(),
            bridge,
            m,
            heap,
            host_type,
            ext,
        })
    }

    /// The container `id` (an error for a leaf, a host object or an unknown id, as the
    /// extension's `TypeError: expected a cext.Container` under CPython).
    fn native(&self, id: i64) -> Result<*mut PyObject, String> {
        match self.held.get(&id) {
            Some(Held::Native(p, true)) => Ok(*p),
            Some(Held::Native(_, false)) => Err(format!("object {id} is a leaf, not a container")),
            Some(Held::Managed(_)) => Err(format!("object {id} is a host object, not a container")),
            None => Err(format!("object {id} is not held")),
        }
    }

    /// Holds `obj` under `id`, releasing what the id held before (as the Python driver's
    /// dictionary assignment does).
    fn hold(&mut self, id: i64, obj: Held) {
        match self.held.insert(id, obj) {
            // SAFETY: the driver's own reference to the replaced object.
            Some(Held::Native(p, _)) => unsafe { refbridge::decref(p) },
            Some(Held::Managed(r)) => drop(r),
            None => {}
        }
    }

    /// The host object `h` and slot `k` of a `Set`/`Unset` (errors for a slot past
    /// `HOST_SLOTS` or a native object, as `AttributeError` under CPython).
    fn host_slot(&mut self, h: i64, k: usize) -> Result<ObjRef, String> {
        if k >= HOST_SLOTS {
            return Err(format!("host objects have slots 0..{HOST_SLOTS}, not {k}"));
        }
        match self.held.get(&h) {
            Some(Held::Managed(r)) => Ok(r.get()),
            Some(Held::Native(..)) => Err(format!("object {h} is not a host object")),
            None => Err(format!("object {h} is not held")),
        }
    }

    /// The native pointer for object `id`: the object itself, or a host's stub.
    pub fn pointer(&mut self, id: i64) -> Result<*mut PyObject, String> {
        match self.held.get(&id) {
            Some(Held::Native(p, _)) => Ok(*p),
            Some(Held::Managed(r)) => {
                // SAFETY: a rooted host object.
                unsafe { self.bridge.to_native(r.get()) }.map_err(|e| e.to_string())
            }
            None => Err(format!("object {id} is not held")),
        }
    }

    /// The managed reference for object `id`: a host object, or a native one's mirror.
    pub fn managed(&mut self, id: i64) -> Result<ObjRef, String> {
        match self.held.get(&id) {
            Some(Held::Managed(r)) => Ok(r.get()),
            Some(Held::Native(p, _)) => {
                // SAFETY: the driver holds a reference to the native object.
                unsafe { self.bridge.to_managed(&mut self.m, *p) }.map_err(|e| e.to_string())
            }
            None => Err(format!("object {id} is not held")),
        }
    }

    /// Whether host objects are watched with weak handles to report their deaths (on by
    /// default; benchmarks turn it off, as CPython's side makes no weak references).
    pub fn set_watching(&mut self, on: bool) {
        self.watching = on;
    }

    /// Runs one operation.
    pub fn apply(&mut self, op: &Op) -> Result<Option<Vec<i64>>, String> {
        let err = |what: &str| format!("{op}: {what}");
        match *op {
            Op::Container(id) => {
                // SAFETY: a C function of the extension; the bridge is entered.
                let p = unsafe { (self.ext.container_new)(id as c_long) };
                if p.is_null() {
                    return Err(err(&format!("{:?}", self.bridge.pending_error())));
                }
                self.hold(id, Held::Native(p, true));
            }
            Op::Leaf(id, size) => {
                // SAFETY: as above.
                let p = unsafe { (self.ext.leaf_new)(id as c_long, size as isize) };
                if p.is_null() {
                    return Err(err(&format!("{:?}", self.bridge.pending_error())));
                }
                self.hold(id, Held::Native(p, false));
            }
            Op::Host(id) => {
                let o = self
                    .m
                    .alloc_typed(HOST_SIZE, self.host_type)
                    .map_err(|e| err(&e.to_string()))?;
                // SAFETY: a fresh host object.
                unsafe { o.write_slot(8 * HOST_SLOTS, id as usize) };
                if self.watching {
                    self.watch.push((id, self.heap.new_weak_ref(o)));
                }
                let root = self.heap.root(o);
                self.hold(id, Held::Managed(root));
            }
            Op::Append(c, x) => {
                let cp = self.native(c)?;
                let xp = self.pointer(x)?;
                // SAFETY: cp is a live container, xp a live object or stub.
                if unsafe { (self.ext.append)(cp, xp) } != 0 {
                    return Err(err(&format!("{:?}", self.bridge.pending_error())));
                }
            }
            Op::Set(h, k, x) => {
                self.host_slot(h, k).map_err(|e| err(&e))?;
                let v = self.managed(x)?;
                let ho = self.host_slot(h, k).map_err(|e| err(&e))?;
                // SAFETY: ho is a rooted host, v a live object (no allocation between).
                unsafe { self.m.store_ref(ho, 8 * k, Some(v)) };
            }
            Op::Unset(h, k) => {
                let ho = self.host_slot(h, k).map_err(|e| err(&e))?;
                // SAFETY: a rooted host.
                unsafe { self.m.store_ref(ho, 8 * k, None) };
            }
            Op::Clear(c) => {
                let cp = self.native(c)?;
                // SAFETY: a live container.
                unsafe { (self.ext.clear)(cp) };
            }
            Op::Pop(c) => {
                let cp = self.native(c)?;
                // SAFETY: a live container; the popped reference is ours to release.
                unsafe {
                    let x = (self.ext.pop)(cp);
                    refbridge::decref(x);
                }
            }
            Op::Drop(id) => match self.held.remove(&id) {
                // SAFETY: the driver's own reference.
                Some(Held::Native(p, _)) => unsafe { refbridge::decref(p) },
                Some(Held::Managed(r)) => drop(r),
                None => return Err(err("not held")),
            },
            Op::Collect => return self.checkpoint().map(Some),
        }
        Ok(None)
    }

    /// A full collection, then the ids freed since the previous checkpoint.
    pub fn checkpoint(&mut self) -> Result<Vec<i64>, String> {
        self.bridge
            .collect(&mut self.m)
            .map_err(|e| e.to_string())?;
        let mut freed = self.ext.take_freed();
        for (id, w) in &self.watch {
            if w.is_cleared() && self.reported.insert(*id) {
                freed.push(*id);
            }
        }
        freed.sort_unstable();
        Ok(freed)
    }

    /// Runs a script, then releases everything and takes a last checkpoint.
    pub fn run(&mut self, ops: &[Op]) -> Result<Outcome, String> {
        // Ids are per script: forget the previous script's objects (all freed by its
        // last checkpoint).
        self.watch.clear();
        self.reported.clear();
        self.ext.take_freed();
        let mut checkpoints = Vec::new();
        for op in ops {
            if let Some(cp) = self.apply(op)? {
                checkpoints.push(cp);
            }
        }
        self.release_all();
        checkpoints.push(self.checkpoint()?);
        Ok(Outcome {
            checkpoints,
            live_at_end: self.ext.live(),
        })
    }

    /// Releases every reference the driver holds.
    pub fn release_all(&mut self) {
        for (_, h) in self.held.drain() {
            if let Held::Native(p, _) = h {
                // SAFETY: the driver's own reference.
                unsafe { refbridge::decref(p) };
            }
        }
    }
}

impl Drop for RefbridgeHost {
    fn drop(&mut self) {
        self.release_all();
        let _ = self.bridge.collect(&mut self.m);
        drop(self.guard.take());
    }
}
