//! Model-based random test of the heap (after PyPy's rawrefcount state machine).
//!
//! Random sequences of operations (allocate objects of random types and sizes, store
//! references through the write barrier or in bulk with the backward barrier, add and
//! drop roots, run partial, full and automatic collections) run against the heap and
//! against a plain model of the object graph. After every collection every object
//! reachable in the model must be intact (type, identity word, every reference slot,
//! payload check words); after a full collection every unreachable object must be gone
//! (its pool cell free, or its big object reported freed). The verify mode is on, so a
//! missed barrier inside the heap would be reported too.

use gc_core::{
    Callback, CollectionKind, ForeignTypeSpec, Heap, HeapConfig, MarkProc, Marker, Mutator, ObjRef,
    Root, SweepProc, TypeRef,
};
use parking_lot::Mutex;
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Object kinds: layout types (the collector traces offsets) and foreign types (a mark
/// function traces them), small and large.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    LayoutSmall,
    LayoutBig,
    ForeignSmall,
    ForeignBig,
}

const KINDS: [Kind; 4] = [
    Kind::LayoutSmall,
    Kind::LayoutBig,
    Kind::ForeignSmall,
    Kind::ForeignBig,
];
/// Reference slots per object.
const REFS: usize = 4;

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        kind: usize,
        extra_words: usize,
        root: bool,
    },
    Store {
        src: usize,
        slot: usize,
        dst: Option<usize>,
    },
    BulkStore {
        src: usize,
        dsts: Vec<Option<usize>>,
    },
    AddRoot {
        obj: usize,
    },
    DropRoot {
        root: usize,
    },
    Collect {
        kind: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..4usize, 0..300usize, any::<bool>()).prop_map(|(kind, extra_words, root)| Op::Alloc { kind, extra_words, root }),
        6 => (any::<usize>(), 0..REFS, proptest::option::of(any::<usize>())).prop_map(|(src, slot, dst)| Op::Store { src, slot, dst }),
        1 => (any::<usize>(), proptest::collection::vec(proptest::option::of(any::<usize>()), REFS)).prop_map(|(src, dsts)| Op::BulkStore { src, dsts }),
        2 => any::<usize>().prop_map(|obj| Op::AddRoot { obj }),
        2 => any::<usize>().prop_map(|root| Op::DropRoot { root }),
        2 => (0..3u8).prop_map(|kind| Op::Collect { kind }),
    ]
}

/// Payload layout of every test object: word 0 = identity, words 1..=REFS = references,
/// then `extra` check words each holding `id * 31 + i`.
const ID: usize = 0;
fn ref_off(slot: usize) -> usize {
    8 * (1 + slot)
}
fn extra_off(i: usize) -> usize {
    8 * (1 + REFS + i)
}

fn mark_foreign(m: &mut Marker<'_>, obj: ObjRef) -> usize {
    // SAFETY: the collector calls this for live test objects, whose first REFS+1 words
    // are the identity and the references.
    let id = unsafe { obj.read_slot(ID) };
    if id % 2 == 0 {
        // SAFETY: the reference slots are inside the object.
        unsafe {
            m.queue_array(
                obj,
                obj.as_ptr().add(ref_off(0)) as *const Option<ObjRef>,
                REFS,
            )
        };
        0
    } else {
        let mut young = 0;
        for s in 0..REFS {
            // SAFETY: as above.
            let r = unsafe { obj.read_slot(ref_off(s)) };
            young += m.queue_opt(ObjRef::from_addr(r)) as usize;
        }
        young
    }
}

struct ModelObj {
    id: usize,
    kind: Kind,
    extra: usize,
    refs: [Option<usize>; REFS],
    addr: ObjRef,
}

struct World {
    heap: Heap,
    m: Mutator,
    types: HashMap<Kind, TypeRef>,
    /// Objects not known to be dead, by id.
    objs: HashMap<usize, ModelObj>,
    order: Vec<usize>,
    roots: Vec<(usize, Root)>,
    next_id: usize,
    freed_big: Arc<Mutex<HashSet<usize>>>,
}

impl World {
    fn new() -> World {
        let heap = Heap::new(HeapConfig {
            min_interval: 256 << 10,
            verify: true,
            ..HeapConfig::default()
        })
        .unwrap();
        let freed_big = Arc::new(Mutex::new(HashSet::new()));
        let fb = freed_big.clone();
        heap.add_callback(Callback::ExternalFree(Arc::new(move |o| {
            fb.lock().insert(o.addr());
        })))
        .unwrap();
        let size = extra_off(0);
        let offsets: Vec<u32> = (0..REFS).map(|s| ref_off(s) as u32).collect();
        let mut types = HashMap::new();
        types.insert(
            Kind::LayoutSmall,
            heap.new_layout_type("LayoutSmall", size, &offsets).unwrap(),
        );
        types.insert(
            Kind::LayoutBig,
            heap.new_layout_type("LayoutBig", size, &offsets).unwrap(),
        );
        for (kind, large) in [(Kind::ForeignSmall, false), (Kind::ForeignBig, true)] {
            let spec = ForeignTypeSpec {
                name: if large { "ForeignBig" } else { "ForeignSmall" },
                mark: MarkProc::Rust(mark_foreign),
                sweep: SweepProc::None,
                has_pointers: true,
                large,
            };
            types.insert(kind, heap.new_foreign_type(spec).unwrap());
        }
        let m = heap.attach().unwrap();
        World {
            heap,
            m,
            types,
            objs: HashMap::new(),
            order: Vec::new(),
            roots: Vec::new(),
            next_id: 1,
            freed_big,
        }
    }

    fn pick(&self, i: usize) -> Option<usize> {
        (!self.order.is_empty()).then(|| self.order[i % self.order.len()])
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Alloc {
                kind,
                extra_words,
                root,
            } => {
                let kind = KINDS[kind];
                let extra = match kind {
                    Kind::LayoutBig | Kind::ForeignBig => 260 + extra_words,
                    _ => extra_words % 64,
                };
                let size = extra_off(extra).max(8);
                let before = self.collections();
                let obj = self
                    .m
                    .alloc_typed(size, self.types[&kind])
                    .expect("allocation succeeds");
                if self.collections() != before {
                    // The allocation triggered a collection: unrooted objects may be gone.
                    self.check(false);
                }
                let id = self.next_id;
                self.next_id += 1;
                // SAFETY: a fresh object of `size` bytes.
                unsafe {
                    obj.write_slot(ID, id);
                    for i in 0..extra {
                        obj.write_slot(extra_off(i), id * 31 + i);
                    }
                }
                self.objs.insert(
                    id,
                    ModelObj {
                        id,
                        kind,
                        extra,
                        refs: [None; REFS],
                        addr: obj,
                    },
                );
                self.order.push(id);
                // An unrooted new object is garbage at once; usually root it.
                if root || self.roots.len() < 2 {
                    self.roots.push((id, self.heap.root(obj)));
                }
            }
            Op::Store { src, slot, dst } => {
                let Some(s) = self.pick(src) else { return };
                let d = dst.and_then(|d| self.pick(d));
                let src_obj = self.objs[&s].addr;
                let dst_obj = d.map(|d| self.objs[&d].addr);
                // SAFETY: both objects are alive (in the model's live set, which only holds
                // objects reachable at the last check or allocated since).
                unsafe { self.m.store_ref(src_obj, ref_off(slot), dst_obj) };
                self.objs.get_mut(&s).unwrap().refs[slot] = d;
            }
            Op::BulkStore { src, ref dsts } => {
                let Some(s) = self.pick(src) else { return };
                let src_obj = self.objs[&s].addr;
                for (slot, dst) in dsts.iter().enumerate() {
                    let d = dst.and_then(|d| self.pick(d));
                    let v = d.map_or(0, |d| self.objs[&d].addr.addr());
                    // SAFETY: a live object with REFS reference slots.
                    unsafe { src_obj.write_slot(ref_off(slot), v) };
                    self.objs.get_mut(&s).unwrap().refs[slot] = d;
                }
                // SAFETY: live object.
                unsafe { self.m.wb_back(src_obj) };
            }
            Op::AddRoot { obj } => {
                if let Some(id) = self.pick(obj) {
                    let r = self.heap.root(self.objs[&id].addr);
                    self.roots.push((id, r));
                }
            }
            Op::DropRoot { root } => {
                if !self.roots.is_empty() {
                    let i = root % self.roots.len();
                    self.roots.swap_remove(i);
                }
            }
            Op::Collect { kind } => {
                let kind = [
                    CollectionKind::Partial,
                    CollectionKind::Full,
                    CollectionKind::Auto,
                ][kind as usize];
                let info = self
                    .m
                    .collect(kind)
                    .unwrap()
                    .expect("single-threaded: this call collects");
                self.check(info.kind == CollectionKind::Full);
            }
        }
    }

    fn collections(&self) -> u64 {
        let s = self.heap.stats();
        s.full_collections + s.partial_collections
    }

    fn reachable(&self) -> HashSet<usize> {
        let mut seen = HashSet::new();
        let mut stack: Vec<usize> = self.roots.iter().map(|(id, _)| *id).collect();
        while let Some(id) = stack.pop() {
            if seen.insert(id) {
                stack.extend(self.objs[&id].refs.iter().flatten());
            }
        }
        seen
    }

    /// Checks every reachable object; after a full collection, that the others are gone.
    /// Unreachable objects leave the model either way (they must never be used again).
    fn check(&mut self, full: bool) {
        let live = self.reachable();
        for &id in &live {
            let o = &self.objs[&id];
            let gone = match gc_core::pagetable::lookup(o.addr.addr()) {
                Some(page) => page.cell_layout().is_none() || !page.is_allocated(o.addr.addr()),
                None => self.freed_big.lock().contains(&o.addr.addr()),
            };
            assert!(!gone, "reachable object {id} ({:?}) was freed", o.kind);
            // SAFETY: reachable from a root, so alive.
            unsafe {
                assert_eq!(
                    self.heap.type_of(o.addr),
                    self.types[&o.kind],
                    "type of object {id}"
                );
                assert_eq!(o.addr.read_slot(ID), o.id, "identity of object {id}");
                for (slot, r) in o.refs.iter().enumerate() {
                    let expect = r.map_or(0, |d| self.objs[&d].addr.addr());
                    assert_eq!(
                        o.addr.read_slot(ref_off(slot)),
                        expect,
                        "slot {slot} of object {id}"
                    );
                }
                for i in 0..o.extra {
                    assert_eq!(
                        o.addr.read_slot(extra_off(i)),
                        id * 31 + i,
                        "word {i} of object {id}"
                    );
                }
            }
        }
        let dead: Vec<usize> = self
            .order
            .iter()
            .copied()
            .filter(|id| !live.contains(id))
            .collect();
        for id in dead {
            let o = self.objs.remove(&id).unwrap();
            if full {
                // Big objects never lie in pool pages (those are our own mappings).
                match gc_core::pagetable::lookup(o.addr.addr()) {
                    Some(page) => assert!(
                        page.cell_layout().is_none() || !page.is_allocated(o.addr.addr()),
                        "unreachable object {id} survived a full collection"
                    ),
                    None => assert!(
                        self.freed_big.lock().contains(&o.addr.addr()),
                        "unreachable big object {id} not freed"
                    ),
                }
            }
        }
        self.order.retain(|id| live.contains(id));
        self.freed_big.lock().clear();
        let errors = self.heap.verify_errors();
        assert!(errors.is_empty(), "verify mode found: {errors:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000),
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn heap_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        let mut w = World::new();
        for op in &ops {
            w.apply(op);
        }
        w.m.collect(CollectionKind::Full).unwrap();
        w.check(true);
        w.roots.clear();
        w.m.collect(CollectionKind::Full).unwrap();
        w.check(true);
        prop_assert!(w.objs.is_empty());
    }
}
