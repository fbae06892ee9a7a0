//! Test support: native types written in Rust against the crate's Rust API for
//! CPython's operations (a GC container with four reference slots, a leaf that owns a
//! `mem_alloc` buffer), a managed node type, and an environment (heap, attached thread,
//! entered bridge). Freed native objects are logged per thread by id. Failures inside
//! the types' functions become the pending error, as the C API reports them.
#![allow(dead_code)]

use gc_core::{Heap, HeapConfig, Mutator, ObjRef, Root, TypeRef};
use refbridge::{
    untag, Bridge, BridgeConfig, BridgeError, EnterGuard, PyObject, PyTypeObject,
    PY_TPFLAGS_DEFAULT, PY_TPFLAGS_HAVE_GC, PY_TPFLAGS_READY,
};
use std::cell::RefCell;
use std::ffi::{c_int, c_void};

/// Reference slots of a native node and of a managed node.
pub const SLOTS: usize = 4;

/// A native GC container: four references and an id.
#[repr(C)]
pub struct NodeObj {
    pub ob_base: PyObject,
    pub slots: [*mut PyObject; SLOTS],
    pub id: u64,
}

/// A native leaf (not GC) owning a buffer from `mem_alloc`.
#[repr(C)]
pub struct LeafObj {
    pub ob_base: PyObject,
    pub buf: *mut u8,
    pub size: usize,
    pub id: u64,
}

thread_local! {
    static FREED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    static RAISE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The deallocator of the node with this id (0: none) sets the pending error.
pub fn raise_in_dealloc(id: u64) {
    RAISE.with(|r| r.set(id));
}

/// Ids of native objects freed on this thread since the last call.
pub fn take_freed() -> Vec<u64> {
    FREED.with(|f| std::mem::take(&mut *f.borrow_mut()))
}

unsafe extern "C" fn node_traverse(
    op: *mut PyObject,
    visit: refbridge::VisitProc,
    arg: *mut c_void,
) -> c_int {
    let n = op as *mut NodeObj;
    let visit = visit.expect("visit");
    for i in 0..SLOTS {
        // SAFETY: a live node; the slot holds NULL or a reference.
        let s = unsafe { (*n).slots[i] };
        if !s.is_null() {
            // SAFETY: CPython's Py_VISIT.
            let r = unsafe { visit(s, arg) };
            if r != 0 {
                return r;
            }
        }
    }
    0
}

unsafe extern "C" fn node_clear(op: *mut PyObject) -> c_int {
    let n = op as *mut NodeObj;
    for i in 0..SLOTS {
        // SAFETY: a live node; Py_CLEAR.
        unsafe {
            let s = (*n).slots[i];
            if !s.is_null() {
                (*n).slots[i] = std::ptr::null_mut();
                refbridge::decref(s);
            }
        }
    }
    0
}

/// A failure as the pending error (what the C API does; a panic here would abort).
fn or_pending(r: Result<(), BridgeError>) {
    if let Err(e) = r {
        refbridge::set_pending_error_from(&e);
    }
}

unsafe extern "C" fn node_dealloc(op: *mut PyObject) {
    // SAFETY: a node whose count reached 0.
    unsafe {
        or_pending(refbridge::gc_untrack(op));
        let id = (*(op as *mut NodeObj)).id;
        FREED.with(|f| f.borrow_mut().push(id));
        if id != 0 && RAISE.with(|r| r.get()) == id {
            refbridge::set_pending_error("RuntimeError: raised in tp_dealloc");
        }
        node_clear(op);
        or_pending(refbridge::gc_del(op));
    }
}

unsafe extern "C" fn leaf_dealloc(op: *mut PyObject) {
    // SAFETY: a leaf whose count reached 0.
    unsafe {
        let l = op as *mut LeafObj;
        FREED.with(|f| f.borrow_mut().push((*l).id));
        for p in [(*l).buf, op as *mut u8] {
            if let Err(e) = refbridge::mem_free(p) {
                refbridge::set_pending_error_from(&e);
            }
        }
    }
}

struct TypeCell(std::cell::UnsafeCell<PyTypeObject>);
// SAFETY: written once by PyType_Ready (idempotent) under the Once below.
unsafe impl Sync for TypeCell {}

static NODE_TYPE: TypeCell = TypeCell(std::cell::UnsafeCell::new(PyTypeObject::new(
    c"test.Node",
    std::mem::size_of::<NodeObj>(),
    PY_TPFLAGS_DEFAULT | PY_TPFLAGS_HAVE_GC,
)));
static LEAF_TYPE: TypeCell = TypeCell(std::cell::UnsafeCell::new(PyTypeObject::new(
    c"test.Leaf",
    std::mem::size_of::<LeafObj>(),
    PY_TPFLAGS_DEFAULT,
)));
static MANAGED_NATIVE_TYPE: TypeCell = TypeCell(std::cell::UnsafeCell::new(PyTypeObject::new(
    c"test.ManagedNode",
    std::mem::size_of::<PyObject>(),
    PY_TPFLAGS_DEFAULT,
)));
static READY: std::sync::Once = std::sync::Once::new();

fn ready_types() {
    READY.call_once(|| {
        // SAFETY: the statics are type objects; this runs once.
        unsafe {
            let n = NODE_TYPE.0.get();
            (*n).tp_traverse = Some(node_traverse);
            (*n).tp_clear = Some(node_clear);
            (*n).tp_dealloc = Some(node_dealloc);
            refbridge::type_ready(n).unwrap();
            let l = LEAF_TYPE.0.get();
            (*l).tp_dealloc = Some(leaf_dealloc);
            refbridge::type_ready(l).unwrap();
            refbridge::type_ready(MANAGED_NATIVE_TYPE.0.get()).unwrap();
            assert_ne!((*n).tp_flags & PY_TPFLAGS_READY, 0);
        }
    });
}

/// Managed node: four reference slots, then an id word.
pub const MNODE_SIZE: usize = 8 * SLOTS + 8;

/// A heap, this thread attached, a bridge entered, the managed node type registered.
pub struct Env {
    pub guard: Option<EnterGuard>,
    pub bridge: Bridge,
    pub m: Mutator,
    pub heap: Heap,
    pub mnode: TypeRef,
}

impl Env {
    pub fn new(config: BridgeConfig) -> Env {
        Env::with_heap(HeapConfig::default(), config)
    }

    pub fn with_heap(hc: HeapConfig, config: BridgeConfig) -> Env {
        ready_types();
        let heap = Heap::new(hc).unwrap();
        let m = heap.attach().unwrap();
        let bridge = Bridge::new(&heap, config).unwrap();
        let guard = Some(bridge.enter().unwrap());
        let offsets: Vec<u32> = (0..SLOTS as u32).map(|i| 8 * i).collect();
        let mnode = heap
            .new_layout_type("ManagedNode", MNODE_SIZE, &offsets)
            .unwrap();
        // SAFETY: the native type is a static.
        unsafe {
            bridge
                .register_managed_type(mnode, MANAGED_NATIVE_TYPE.0.get())
                .unwrap()
        };
        take_freed();
        Env {
            guard,
            bridge,
            m,
            heap,
            mnode,
        }
    }

    /// A native node (count 1, tracked); the debug mode records the caller as the place
    /// it was made.
    #[track_caller]
    pub fn native(&mut self, id: u64) -> *mut PyObject {
        native_node(id)
    }

    /// A native leaf owning `size` bytes of `mem_alloc` memory (count 1); NULL with
    /// the pending error set when an allocation fails.
    pub fn leaf(&mut self, id: u64, size: usize) -> *mut PyObject {
        // SAFETY: the leaf type is ready.
        unsafe {
            let op = match refbridge::object_new(LEAF_TYPE.0.get()) {
                Ok(op) => op.as_ptr(),
                Err(e) => {
                    refbridge::set_pending_error_from(&e);
                    return std::ptr::null_mut();
                }
            };
            let buf = match refbridge::mem_alloc(size) {
                Ok(b) => b.as_ptr(),
                Err(e) => {
                    // A block of ours, just allocated (cannot fail).
                    let _ = refbridge::mem_free(op as *mut u8);
                    refbridge::set_pending_error_from(&e);
                    return std::ptr::null_mut();
                }
            };
            let l = op as *mut LeafObj;
            (*l).buf = buf;
            (*l).size = size;
            (*l).id = id;
            op
        }
    }

    /// A managed node with an id.
    pub fn managed(&mut self, id: u64) -> ObjRef {
        let o = self.m.alloc_typed(MNODE_SIZE, self.mnode).unwrap();
        // SAFETY: a fresh node.
        unsafe { o.write_slot(8 * SLOTS, id as usize) };
        o
    }

    pub fn root(&self, o: ObjRef) -> Root {
        self.heap.root(o)
    }

    /// Stores a native reference in slot `k` of native node `n` (new reference; the old
    /// one is released).
    pub fn set_native_slot(&mut self, n: *mut PyObject, k: usize, v: *mut PyObject) {
        // SAFETY: a live node; v a live object or stub.
        unsafe {
            refbridge::incref(v);
            let s = &mut (*(n as *mut NodeObj)).slots[k];
            let old = std::mem::replace(s, v);
            refbridge::decref(old);
        }
    }

    /// Stores a managed reference in slot `k` of managed node `o`.
    pub fn set_managed_slot(&mut self, o: ObjRef, k: usize, v: Option<ObjRef>) {
        // SAFETY: o a live managed node, v a live object.
        unsafe { self.m.store_ref(o, 8 * k, v) };
    }

    pub fn collect(&mut self) -> refbridge::CollectReport {
        self.bridge.collect(&mut self.m).unwrap()
    }

    pub fn count(op: *mut PyObject) -> isize {
        // SAFETY: tests pass live objects.
        unsafe { (*untag(op)).ob_refcnt }
    }
}

/// A native node (count 1, tracked) of the bridge entered on this thread (the debug
/// mode records the caller as the place it was made).
#[track_caller]
pub fn native_node(id: u64) -> *mut PyObject {
    ready_types();
    // SAFETY: the node type is ready; the node is initialised (zeroed) when tracked.
    unsafe {
        let op = refbridge::gc_new(NODE_TYPE.0.get()).unwrap().as_ptr();
        (*(op as *mut NodeObj)).id = id;
        refbridge::gc_track(op).unwrap();
        op
    }
}

/// The id of a native node.
pub fn node_id(op: *mut PyObject) -> u64 {
    // SAFETY: tests pass live nodes.
    unsafe { (*(op as *mut NodeObj)).id }
}

/// Decref from Rust.
pub fn decref(op: *mut PyObject) {
    // SAFETY: tests own the reference they release.
    unsafe { refbridge::decref(op) }
}

/// Incref from Rust.
pub fn incref(op: *mut PyObject) {
    // SAFETY: tests pass live objects.
    unsafe { refbridge::incref(op) }
}

/// The managed id of a managed node.
pub fn managed_id(o: ObjRef) -> u64 {
    // SAFETY: tests pass live nodes.
    unsafe { o.read_slot(8 * SLOTS) as u64 }
}
