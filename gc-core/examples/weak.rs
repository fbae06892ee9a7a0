//! Weak references, finalizers, the reference queue and the weak-processing hook, in a
//! few steps: `cargo run -p gc-core --example weak`.
//!
//! - a weak handle and a weak-reference object held by another object, cleared when
//!   their referent dies (and not before);
//! - a finalizer that sees its object and what it reaches intact, runs after the
//!   collection (not during it), and resurrects the object once;
//! - a reference queue that yields a token once the object is really gone, with a
//!   notification after the collection;
//! - a weak-processing hook keeping a side table's values alive while their keys live.

use gc_core::{Callback, CollectionKind, Heap, HeapConfig, ObjRef, Root};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn main() -> Result<(), gc_core::GcError> {
    let heap = Heap::new(HeapConfig::default())?;
    let mut m = heap.attach()?;
    // A pair: [first, second, label].
    let pair = heap.new_layout_type("Pair", 24, &[0, 8])?;
    let label = |o: ObjRef| {
        // SAFETY: callers pass live pairs.
        unsafe { o.read_slot(16) }
    };
    let new_pair = |m: &mut gc_core::Mutator, l: usize| -> Result<ObjRef, gc_core::GcError> {
        let p = m.alloc_typed(24, pair)?;
        // SAFETY: a fresh pair.
        unsafe { p.write_slot(16, l) };
        Ok(p)
    };

    // 1. Weak references.
    let holder = heap.root(new_pair(&mut m, 1)?);
    let target = heap.root(new_pair(&mut m, 2)?);
    let handle = heap.new_weak_ref(target.get());
    let wobj = m.new_weak_object(Some(target.get()))?;
    // SAFETY: live objects: the holder keeps the weak-reference object.
    unsafe { m.store_ref(holder.get(), 0, Some(wobj)) };
    m.collect(CollectionKind::Full)?;
    // SAFETY: the weak-reference object is reachable from the rooted holder.
    let read = |heap: &Heap| unsafe { heap.weak_object_get(wobj) }.map(|o| o.map(label));
    println!(
        "target rooted: handle -> {:?}, weak object -> {:?}",
        handle.get().map(label),
        read(&heap)?
    );
    drop(target);
    let info = m.collect(CollectionKind::Partial)?.expect("single thread");
    println!(
        "target dropped: handle -> {:?}, weak object -> {:?} ({} weak references cleared)",
        handle.get(),
        read(&heap)?,
        info.weak_refs_cleared
    );

    // 2. A finalizer that resurrects its object once.
    let parent = new_pair(&mut m, 10)?;
    let pr = heap.root(parent);
    let child = new_pair(&mut m, 11)?;
    // SAFETY: live objects.
    unsafe { m.store_ref(pr.get(), 0, Some(child)) };
    let saved: Arc<Mutex<Option<Root>>> = Arc::new(Mutex::new(None));
    let runs = Arc::new(AtomicUsize::new(0));
    let (s, r) = (saved.clone(), runs.clone());
    m.add_finalizer(parent, move |m, obj| {
        r.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the object and what it reaches stay alive until its finalizer ran.
        let c = unsafe { m.load_ref(obj, 0) }.expect("child kept");
        println!(
            "  finalizer: object {} with child {}; resurrecting it",
            label(obj),
            label(c)
        );
        *s.lock() = Some(m.heap().root(obj));
    });
    let queue = heap.new_reference_queue();
    queue.register(parent, 10);
    let notified = Arc::new(AtomicUsize::new(0));
    let n = notified.clone();
    queue.set_notify(Some(Arc::new(move || {
        n.fetch_add(1, Ordering::SeqCst);
    })));
    drop(pr);
    let info = m.collect(CollectionKind::Full)?.expect("single thread");
    println!(
        "parent dropped: {} finalizer queued, {} run so far, {} pending",
        info.finalizers_queued,
        runs.load(Ordering::SeqCst),
        heap.pending_finalizers()
    );
    println!("run_finalizers ran {}", m.run_finalizers());
    m.collect(CollectionKind::Full)?;
    let back = saved.lock().as_ref().map(|r| label(r.get()));
    println!(
        "after another collection: resurrected object {back:?}, queue {:?}",
        queue.drain()
    );
    saved.lock().take();
    m.collect(CollectionKind::Full)?;
    println!(
        "resurrected object dropped: queue {:?} (notified {} time), finalizer runs {}",
        queue.drain(),
        notified.load(Ordering::SeqCst),
        runs.load(Ordering::SeqCst)
    );

    // 3. A weak-processing hook: values of a side table live while their keys do.
    let key = heap.root(new_pair(&mut m, 20)?);
    let value = new_pair(&mut m, 21)?;
    let table = Arc::new(Mutex::new(vec![(key.get(), value)]));
    let t = table.clone();
    heap.add_callback(Callback::WeakProcessing(Arc::new(move |mk, _| {
        for &(k, v) in t.lock().iter() {
            // SAFETY: the key is rooted, and the value is kept alive by this hook for as
            // long as its key lives, so both are live objects of the heap.
            if unsafe { mk.is_marked(k) } {
                // SAFETY: as above.
                unsafe { mk.queue(v) };
            }
        }
    })))?;
    let vh = heap.new_weak_ref(value);
    m.collect(CollectionKind::Full)?;
    println!("hook: key alive -> value {:?}", vh.get().map(label));
    drop(key);
    m.collect(CollectionKind::Full)?;
    table.lock().clear();
    println!("hook: key dropped -> value {:?}", vh.get());
    let s = heap.stats();
    println!(
        "totals: {} weak references cleared, {} finalizers queued and {} run, {} tokens",
        s.weak_refs_cleared, s.finalizers_queued, s.finalizers_run, s.tokens_queued
    );
    drop(holder);
    Ok(())
}
