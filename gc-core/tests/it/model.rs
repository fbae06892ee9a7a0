//! Model-based random test of the heap (after PyPy's rawrefcount state machine).
//!
//! Random sequences of operations run against the heap and against a plain model of the
//! object graph: allocate objects of random types and sizes, store references through the
//! write barrier or in bulk with the backward barrier, add and drop roots, make
//! weak-reference objects (held by roots or by other objects) and re-point them (with
//! `weak_object_set` or by a plain store into the value word, as C may), make
//! and drop weak handles, register finalizers (some resurrecting their object) and
//! reference-queue tokens, run finalizers, finalize objects now, drain the queue, and run
//! partial, full and automatic collections.
//!
//! The model is exact, generations included: it knows each object's age (promoted after
//! surviving two collections), so it predicts every collection's outcome. A collection
//! keeps what is reachable from the roots and the pending finalizers' objects (plus, in a
//! partial collection, every old object and what it reaches); weak references whose
//! referent is not kept are cleared; registered finalizers whose object is not kept join
//! the run queue (in reverse registration order) and their objects and what those reach
//! are kept too, without being promoted; a queue registration whose object is still not
//! kept yields its token; everything else is freed. After every collection: every kept object is intact (type,
//! identity, reference slots, check words), every weak reference reads what the model
//! says, every other object is freed. Finalizers run in the order the model predicts,
//! each exactly once; every token is drained exactly once. The verify mode is on, so a
//! missed barrier inside the heap would be reported too.

use gc_core::{
    Callback, CollectionKind, ForeignTypeSpec, Heap, HeapConfig, MarkProc, Marker, Mutator, ObjRef,
    ReferenceQueue, Root, SweepProc, TypeRef, WeakRef,
};
use parking_lot::Mutex;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// Object kinds: layout types (the collector traces offsets) and foreign types (a mark
/// function traces them), small and large, and weak-reference objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    LayoutSmall,
    LayoutBig,
    ForeignSmall,
    ForeignBig,
    Weak,
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
    NewWeakObject {
        target: usize,
        root: bool,
    },
    SetWeakObject {
        weak: usize,
        target: Option<usize>,
        /// A plain store into the payload word, as C does (`jl_weakref_t::value`),
        /// instead of `weak_object_set`.
        direct: bool,
    },
    NewHandle {
        target: usize,
    },
    DropHandle {
        handle: usize,
    },
    AddFinalizer {
        obj: usize,
        resurrect: bool,
    },
    Register {
        obj: usize,
    },
    RunFinalizers,
    Finalize {
        obj: usize,
    },
    Drain,
}

fn op() -> impl Strategy<Value = Op> {
    let opt = || proptest::option::of(any::<usize>());
    prop_oneof![
        4 => (0..4usize, 0..300usize, any::<bool>()).prop_map(|(kind, extra_words, root)| Op::Alloc { kind, extra_words, root }),
        6 => (any::<usize>(), 0..REFS, opt()).prop_map(|(src, slot, dst)| Op::Store { src, slot, dst }),
        1 => (any::<usize>(), proptest::collection::vec(opt(), REFS)).prop_map(|(src, dsts)| Op::BulkStore { src, dsts }),
        2 => any::<usize>().prop_map(|obj| Op::AddRoot { obj }),
        3 => any::<usize>().prop_map(|root| Op::DropRoot { root }),
        2 => (0..3u8).prop_map(|kind| Op::Collect { kind }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(target, root)| Op::NewWeakObject { target, root }),
        1 => (any::<usize>(), opt(), any::<bool>()).prop_map(|(weak, target, direct)| Op::SetWeakObject { weak, target, direct }),
        1 => any::<usize>().prop_map(|target| Op::NewHandle { target }),
        1 => any::<usize>().prop_map(|handle| Op::DropHandle { handle }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(obj, resurrect)| Op::AddFinalizer { obj, resurrect }),
        2 => any::<usize>().prop_map(|obj| Op::Register { obj }),
        1 => Just(Op::RunFinalizers),
        1 => any::<usize>().prop_map(|obj| Op::Finalize { obj }),
        1 => Just(Op::Drain),
    ]
}

/// Payload layout of every test object but weak-reference objects: word 0 = identity,
/// words 1..=REFS = references, then `extra` check words each holding `id * 31 + i`.
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
            // SAFETY: a reference slot of a live object: null or a live object.
            young += unsafe { m.queue_opt(ObjRef::from_addr(r)) } as usize;
        }
        young
    }
}

struct ModelObj {
    kind: Kind,
    extra: usize,
    refs: [Option<usize>; REFS],
    /// Weak-reference objects: the referent the model expects (None once cleared).
    target: Option<usize>,
    addr: ObjRef,
    /// Collections survived while young (2 = old).
    age: u8,
}

/// A finalizer registration in the model.
#[derive(Clone, Copy, Debug)]
struct Fin {
    id: usize,
    obj: usize,
}

struct World {
    heap: Heap,
    m: Mutator,
    types: HashMap<Kind, TypeRef>,
    /// Every object the heap still holds, by id.
    objs: BTreeMap<usize, ModelObj>,
    /// Objects the test may use: reachable from the roots at the last collection, or
    /// allocated (or resurrected) since.
    order: Vec<usize>,
    roots: Vec<(usize, Root)>,
    handles: Vec<(Option<usize>, WeakRef)>,
    /// Registered finalizers, in registration order.
    fins: Vec<Fin>,
    /// Finalizers found by collections, in the order they will run.
    pending: VecDeque<Fin>,
    /// Finalizer ids in the order they ran (written by the finalizers).
    ran: Arc<Mutex<Vec<usize>>>,
    /// Finalizer ids the model expects to have run, in order.
    expect_ran: Vec<usize>,
    /// Roots made by resurrecting finalizers: (object id, root).
    resurrected: Arc<Mutex<Vec<(usize, Root)>>>,
    next_fin: usize,
    queue: ReferenceQueue,
    /// Queue registrations: token -> object id.
    phantoms: BTreeMap<usize, usize>,
    /// Tokens the model expects on the queue, and every token drained so far.
    expect_tokens: HashSet<usize>,
    drained: HashSet<usize>,
    next_token: usize,
    next_id: usize,
    freed_big: Arc<Mutex<HashSet<usize>>>,
    /// Collections run so far (full, partial), counted by a post_gc callback.
    counts: Arc<[std::sync::atomic::AtomicU64; 2]>,
    /// Collections checked so far.
    checks: u64,
}

impl World {
    /// `parallel`: two collector threads and lazy sweeping; the verify mode checks every
    /// barrier and reference either way (on every collector thread).
    fn new(parallel: bool) -> World {
        let heap = Heap::new(HeapConfig {
            min_interval: 256 << 10,
            verify: true,
            mark_threads: if parallel { 2 } else { 1 },
            // Small heaps: wake the helper at once, or it would never mark.
            parallel_threshold: 0,
            lazy_sweep: true,
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
        types.insert(Kind::Weak, heap.weak_ref_type());
        let counts: Arc<[std::sync::atomic::AtomicU64; 2]> = Arc::new(Default::default());
        let c = counts.clone();
        heap.add_callback(Callback::PostGc(Arc::new(move |kind| {
            c[(kind == CollectionKind::Partial) as usize]
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })))
        .unwrap();
        let m = heap.attach().unwrap();
        let queue = heap.new_reference_queue();
        World {
            heap,
            m,
            types,
            objs: BTreeMap::new(),
            order: Vec::new(),
            roots: Vec::new(),
            handles: Vec::new(),
            fins: Vec::new(),
            pending: VecDeque::new(),
            ran: Arc::new(Mutex::new(Vec::new())),
            expect_ran: Vec::new(),
            resurrected: Arc::new(Mutex::new(Vec::new())),
            next_fin: 0,
            queue,
            phantoms: BTreeMap::new(),
            expect_tokens: HashSet::new(),
            drained: HashSet::new(),
            next_token: 0,
            next_id: 1,
            freed_big,
            counts,
            checks: 0,
        }
    }

    fn pick(&self, i: usize) -> Option<usize> {
        (!self.order.is_empty()).then(|| self.order[i % self.order.len()])
    }

    /// Picks an object that has reference slots (not a weak-reference object).
    fn pick_container(&self, i: usize) -> Option<usize> {
        self.pick(i).filter(|id| self.objs[id].kind != Kind::Weak)
    }

    fn collections(&self) -> (u64, u64) {
        let load = |i: usize| self.counts[i].load(std::sync::atomic::Ordering::Relaxed);
        (load(0), load(1))
    }

    /// Runs `f`, which may allocate; if that triggered a collection, models it.
    fn allocating<T>(&mut self, f: impl FnOnce(&mut Mutator) -> T) -> T {
        let before = self.collections();
        let r = f(&mut self.m);
        let after = self.collections();
        if after != before {
            assert_eq!(
                (after.0 - before.0) + (after.1 - before.1),
                1,
                "one allocation runs at most one collection"
            );
            self.collected(after.0 != before.0);
        }
        r
    }

    fn insert(&mut self, kind: Kind, extra: usize, target: Option<usize>, addr: ObjRef) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        self.objs.insert(
            id,
            ModelObj {
                kind,
                extra,
                refs: [None; REFS],
                target,
                addr,
                age: 0,
            },
        );
        self.order.push(id);
        id
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
                let ty = self.types[&kind];
                let obj =
                    self.allocating(|m| m.alloc_typed(size, ty).expect("allocation succeeds"));
                let id = self.next_id;
                // SAFETY: a fresh object of `size` bytes.
                unsafe {
                    obj.write_slot(ID, id);
                    for i in 0..extra {
                        obj.write_slot(extra_off(i), id * 31 + i);
                    }
                }
                self.insert(kind, extra, None, obj);
                // An unrooted new object is garbage at once; usually root it.
                if root || self.roots.len() < 2 {
                    self.roots.push((id, self.heap.root(obj)));
                }
            }
            Op::Store { src, slot, dst } => {
                let Some(s) = self.pick_container(src) else {
                    return;
                };
                let d = dst.and_then(|d| self.pick(d));
                let src_obj = self.objs[&s].addr;
                let dst_obj = d.map(|d| self.objs[&d].addr);
                // SAFETY: both objects are alive (usable objects are allocated).
                unsafe { self.m.store_ref(src_obj, ref_off(slot), dst_obj) };
                self.objs.get_mut(&s).unwrap().refs[slot] = d;
            }
            Op::BulkStore { src, ref dsts } => {
                let Some(s) = self.pick_container(src) else {
                    return;
                };
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
                self.collected(info.kind == CollectionKind::Full);
            }
            Op::NewWeakObject { target, root } => {
                let Some(t) = self.pick(target) else { return };
                // The target must stay reachable across the allocation: root it.
                let tr = self.heap.root(self.objs[&t].addr);
                self.roots.push((t, tr));
                let taddr = self.objs[&t].addr;
                let w = self.allocating(|m| m.new_weak_object(Some(taddr)).unwrap());
                let id = self.insert(Kind::Weak, 0, Some(t), w);
                self.roots.pop();
                if root {
                    self.roots.push((id, self.heap.root(w)));
                }
            }
            Op::SetWeakObject {
                weak,
                target,
                direct,
            } => {
                let Some(w) = self.pick(weak).filter(|w| self.objs[w].kind == Kind::Weak) else {
                    return;
                };
                let t = target.and_then(|t| self.pick(t));
                let taddr = t.map(|t| self.objs[&t].addr);
                let waddr = self.objs[&w].addr;
                if direct {
                    // SAFETY: a live weak-reference object, whose payload word is its
                    // referent; a plain store, as C does (no bookkeeping, no barrier).
                    unsafe { waddr.write_slot(0, taddr.map_or(0, |a| a.addr())) };
                } else {
                    // SAFETY: both are live objects of the heap.
                    unsafe { self.m.weak_object_set(waddr, taddr) }.unwrap();
                }
                self.objs.get_mut(&w).unwrap().target = t;
            }
            Op::NewHandle { target } => {
                let Some(t) = self.pick(target) else { return };
                let h = self.heap.new_weak_ref(self.objs[&t].addr);
                self.handles.push((Some(t), h));
            }
            Op::DropHandle { handle } => {
                if !self.handles.is_empty() {
                    let i = handle % self.handles.len();
                    self.handles.swap_remove(i);
                }
            }
            Op::AddFinalizer { obj, resurrect } => {
                let Some(o) = self.pick(obj) else { return };
                let fin = Fin {
                    id: self.next_fin,
                    obj: o,
                };
                self.next_fin += 1;
                let (ran, res) = (self.ran.clone(), self.resurrected.clone());
                let addr = self.objs[&o].addr;
                self.m.add_finalizer(addr, move |m, obj| {
                    assert_eq!(obj, addr, "a finalizer gets its own object");
                    ran.lock().push(fin.id);
                    if resurrect {
                        res.lock().push((fin.obj, m.heap().root(obj)));
                    }
                });
                self.fins.push(fin);
            }
            Op::Register { obj } => {
                let Some(o) = self.pick(obj) else { return };
                let token = self.next_token;
                self.next_token += 1;
                self.queue.register(self.objs[&o].addr, token);
                self.phantoms.insert(token, o);
            }
            Op::RunFinalizers => {
                let n = self.m.run_finalizers();
                let expect: Vec<usize> = self.pending.drain(..).map(|f| f.id).collect();
                assert_eq!(n, expect.len(), "finalizers run");
                self.expect_ran.extend(expect);
                self.finalizers_ran();
            }
            Op::Finalize { obj } => {
                let Some(o) = self.pick(obj) else { return };
                let mut mine: Vec<Fin> = self.fins.iter().copied().filter(|f| f.obj == o).collect();
                self.fins.retain(|f| f.obj != o);
                mine.reverse();
                let n = self.m.finalize(self.objs[&o].addr);
                assert_eq!(n, mine.len(), "finalize runs the object's finalizers");
                self.expect_ran.extend(mine.iter().map(|f| f.id));
                self.finalizers_ran();
            }
            Op::Drain => self.drain(),
        }
    }

    /// Checks the finalizers' log and takes the roots of resurrected objects.
    fn finalizers_ran(&mut self) {
        assert_eq!(
            *self.ran.lock(),
            self.expect_ran,
            "finalizers ran in the model's order"
        );
        for (id, root) in self.resurrected.lock().drain(..) {
            self.roots.push((id, root));
            if !self.order.contains(&id) {
                self.order.push(id);
            }
        }
    }

    fn drain(&mut self) {
        for t in self.queue.drain() {
            assert!(
                self.expect_tokens.remove(&t),
                "token {t} queued unexpectedly"
            );
            assert!(self.drained.insert(t), "token {t} queued twice");
        }
        assert!(
            self.expect_tokens.is_empty(),
            "tokens expected but not queued: {:?}",
            self.expect_tokens
        );
    }

    /// What `from` reaches through strong references.
    fn closure(&self, from: impl IntoIterator<Item = usize>) -> HashSet<usize> {
        let mut seen = HashSet::new();
        let mut stack: Vec<usize> = from.into_iter().collect();
        while let Some(id) = stack.pop() {
            if seen.insert(id) {
                let o = &self.objs[&id];
                if o.kind != Kind::Weak {
                    stack.extend(o.refs.iter().flatten());
                }
            }
        }
        seen
    }

    /// Models the collection that just ran, then checks the heap against the model.
    fn collected(&mut self, full: bool) {
        // Marking: roots, pending finalizers' objects, and (partial) the old generation.
        let mut from: Vec<usize> = self.roots.iter().map(|(id, _)| *id).collect();
        from.extend(self.pending.iter().map(|f| f.obj));
        if !full {
            from.extend(
                self.objs
                    .iter()
                    .filter(|(_, o)| o.age >= 2)
                    .map(|(id, _)| *id),
            );
        }
        let marked = self.closure(from.iter().copied());
        // Weak references to unmarked objects are cleared.
        for o in self.objs.values_mut() {
            if o.target.is_some_and(|t| !marked.contains(&t)) {
                o.target = None;
            }
        }
        for (t, _) in &mut self.handles {
            if t.is_some_and(|t| !marked.contains(&t)) {
                *t = None;
            }
        }
        // Finalizable objects join the run queue, newest registration first, and are kept.
        let mut batch: Vec<Fin> = self
            .fins
            .iter()
            .copied()
            .filter(|f| !marked.contains(&f.obj))
            .collect();
        self.fins.retain(|f| marked.contains(&f.obj));
        batch.reverse();
        from.extend(batch.iter().map(|f| f.obj));
        self.pending.extend(batch);
        let kept = self.closure(from);
        // Registrations of objects still not kept yield their tokens.
        let gone: Vec<usize> = self
            .phantoms
            .iter()
            .filter(|(_, o)| !kept.contains(o))
            .map(|(t, _)| *t)
            .collect();
        for t in gone {
            self.phantoms.remove(&t);
            self.expect_tokens.insert(t);
        }
        // The heap against the model.
        let freed_big = std::mem::take(&mut *self.freed_big.lock());
        // Lazy sweeping: every other collection, the dead are looked at once the sweep is
        // complete; in between, while their pages wait for it (one collector thread: no
        // helper sweeps them; with two, the helper may be sweeping them right now), and
        // allocation then meets pages still waiting for theirs. Either way a dead cell is
        // no object to any lookup.
        self.checks += 1;
        if self.checks % 2 == 0 {
            self.heap.complete_sweep().unwrap();
        }
        let dead: Vec<usize> = self
            .objs
            .keys()
            .copied()
            .filter(|id| !kept.contains(id))
            .collect();
        for id in dead {
            let o = self.objs.remove(&id).unwrap();
            let gone = match gc_core::page_of(o.addr.addr()) {
                Some(page) => {
                    !page.is_allocated(o.addr.addr())
                        && gc_core::internal_object(self.heap.id(), o.addr.addr()).is_none()
                }
                None => freed_big.contains(&o.addr.addr()),
            };
            assert!(
                gone,
                "unreachable object {id} ({:?}, age {}) survived a {} collection",
                o.kind,
                o.age,
                if full { "full" } else { "partial" }
            );
        }
        for &id in &kept {
            self.check_object(id, &freed_big);
        }
        // Survivors age; young objects kept only for finalizers are not promoted.
        for (id, o) in self.objs.iter_mut() {
            o.age = if marked.contains(id) || o.age >= 2 {
                (o.age + 1).min(2)
            } else {
                1
            };
        }
        for (t, h) in &self.handles {
            assert_eq!(
                h.get(),
                t.map(|t| self.objs[&t].addr),
                "weak handle to {t:?}"
            );
        }
        let reachable = self.closure(self.roots.iter().map(|(id, _)| *id));
        self.order = self
            .objs
            .keys()
            .copied()
            .filter(|id| reachable.contains(id))
            .collect();
        let errors = self.heap.verify_errors();
        assert!(errors.is_empty(), "verify mode found: {errors:?}");
    }

    fn check_object(&self, id: usize, freed_big: &HashSet<usize>) {
        let o = &self.objs[&id];
        let gone = match gc_core::page_of(o.addr.addr()) {
            Some(page) => {
                !page.is_allocated(o.addr.addr())
                    || gc_core::internal_object(self.heap.id(), o.addr.addr() + 8) != Some(o.addr)
            }
            None => freed_big.contains(&o.addr.addr()),
        };
        assert!(!gone, "kept object {id} ({:?}) was freed", o.kind);
        // SAFETY: kept by the collection, so alive.
        unsafe {
            assert_eq!(
                self.heap.type_of(o.addr),
                self.types[&o.kind],
                "type of object {id}"
            );
            if o.kind == Kind::Weak {
                let expect = o.target.map(|t| self.objs[&t].addr);
                assert_eq!(
                    self.heap.weak_object_get(o.addr).unwrap(),
                    expect,
                    "weak-reference object {id} (model referent {:?})",
                    o.target
                );
                return;
            }
            assert_eq!(o.addr.read_slot(ID), id, "identity of object {id}");
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

    /// Drops every root and collects until the heap is empty; then every finalizer must
    /// have run once and every token been queued once.
    fn finish(&mut self) {
        for _ in 0..4 {
            self.roots.clear();
            self.apply(&Op::Collect { kind: 1 });
            self.apply(&Op::RunFinalizers);
            if self.objs.is_empty() && self.roots.is_empty() {
                break;
            }
        }
        self.drain();
        assert!(self.objs.is_empty(), "objects left: {}", self.objs.len());
        assert!(self.fins.is_empty() && self.pending.is_empty());
        let ran = self.ran.lock().clone();
        let mut sorted = ran.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (0..self.next_fin).collect::<Vec<_>>(),
            "each finalizer ran once"
        );
        assert_eq!(
            self.drained.len(),
            self.next_token,
            "each token was queued once"
        );
        assert!(self.phantoms.is_empty());
        assert!(self
            .handles
            .iter()
            .all(|(t, h)| t.is_none() && h.get().is_none()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(4000),
        max_shrink_iters: 4000,
        // The default ChaCha generator, unoptimised in test builds, took most of the
        // run time generating operations.
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    })]

    #[test]
    fn heap_matches_model(ops in proptest::collection::vec(op(), 1..140)) {
        let mut w = World::new(false);
        for op in &ops {
            w.apply(op);
        }
        w.finish();
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES_PARALLEL").ok().and_then(|v| v.parse().ok()).unwrap_or(1000),
        max_shrink_iters: 4000,
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    })]

    /// The same model with parallel marking (two collector threads: foreign mark
    /// functions run on either) and lazy sweeping.
    #[test]
    fn heap_matches_model_with_parallel_marking(ops in proptest::collection::vec(op(), 1..140)) {
        let mut w = World::new(true);
        for op in &ops {
            w.apply(op);
        }
        w.finish();
    }
}
