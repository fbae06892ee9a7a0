//! What the refbridge benchmark examples share: reading their size knobs and building
//! `n` managed objects kept alive through one rooted holder array.

use gc_core::{CollectionKind, Heap, MarkProc, Mutator, ObjRef, Root, SweepProc, TypeRef};
use refbridge::{Bridge, BridgeConfig, PyObject, PyTypeObject, PY_TPFLAGS_DEFAULT};

/// The value of the environment variable `name` as a number, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The type of holder arrays: a large object whose word 0 is the count of the
/// references that follow it.
pub fn holder_type(heap: &Heap) -> TypeRef {
    heap.new_foreign_type(gc_core::ForeignTypeSpec {
        name: "Holder",
        mark: MarkProc::Rust(|mk, o| {
            // SAFETY: a holder: word 0 is the count, then the references.
            unsafe {
                let k = o.read_slot(0);
                mk.queue_array(o, (o.addr() + 8) as *const Option<ObjRef>, k);
            }
            0
        }),
        sweep: SweepProc::None,
        has_pointers: true,
        large: true,
    })
    .unwrap()
}

/// `n` objects of type `ty` (16 bytes each), rooted through one holder array of
/// `holder_ty` ([`holder_type`]), after a full collection so that they are old. Returns
/// the holder's root (keep it while the objects are used) and the objects.
pub fn rooted_objects(
    heap: &Heap,
    m: &mut Mutator,
    holder_ty: TypeRef,
    ty: TypeRef,
    n: usize,
) -> (Root, Vec<ObjRef>) {
    let holder = m.alloc_typed(8 + 8 * n, holder_ty).unwrap();
    let holder: Root = heap.root(holder);
    for i in 0..n {
        let o = m.alloc_typed(16, ty).unwrap();
        // SAFETY: the holder has room for n references; a fresh old-to-young store
        // needs the barrier.
        unsafe {
            holder.get().write_slot(8 + 8 * i, o.addr());
            holder.get().write_slot(0, i + 1);
            m.wb(holder.get(), o);
        }
    }
    m.collect(CollectionKind::Full).unwrap();
    let objs = (0..n)
        // SAFETY: the holder's slots hold live objects.
        .map(|i| unsafe { ObjRef::from_addr(holder.get().read_slot(8 + 8 * i)).unwrap() })
        .collect();
    (holder, objs)
}

/// A bridge on `heap` with automatic cycle collection off, and a managed type `M` (16
/// bytes, two reference slots) whose stubs have the native type `bench.M`.
pub fn bridge_with_managed_type(heap: &Heap) -> (Bridge, TypeRef) {
    let bridge = Bridge::new(
        heap,
        BridgeConfig {
            cycle_threshold: None,
            ..BridgeConfig::default()
        },
    )
    .unwrap();
    let mty = heap.new_layout_type("M", 16, &[0, 8]).unwrap();
    let native_m: &'static mut PyTypeObject = Box::leak(Box::new(PyTypeObject::new(
        c"bench.M",
        std::mem::size_of::<PyObject>(),
        PY_TPFLAGS_DEFAULT,
    )));
    // SAFETY: a leaked type object outlives the bridge.
    unsafe {
        refbridge::type_ready(native_m).unwrap();
        bridge.register_managed_type(mty, native_m).unwrap();
    }
    (bridge, mty)
}
