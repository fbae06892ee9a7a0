//! A tour of gc-core: a precise layout type, a foreign type with its own mark and sweep
//! functions, roots, callbacks, partial and full collections, and statistics.
//!
//! Run with `cargo run -p gc-core --example tour` (`RUST_LOG=gc_core=debug` shows the
//! collector's phases).

use gc_core::{
    Callback, CollectionKind, ForeignTypeSpec, Heap, HeapConfig, MarkProc, Marker, ObjRef,
    SweepProc,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A foreign "vector": word 0 = length, then `length` references. Its sweep function
/// releases a side allocation whose address it keeps in the last word.
const VEC_CAP: usize = 8;

fn mark_vec(m: &mut Marker<'_>, obj: ObjRef) -> usize {
    // SAFETY: `obj` is a live Vec: its first word is the length, then the references.
    unsafe {
        let len = obj.read_slot(0);
        m.queue_array(obj, obj.as_ptr().add(8) as *const Option<ObjRef>, len);
    }
    0 // queue_array does the young accounting itself
}

static SIDE_BUFFERS_FREED: AtomicUsize = AtomicUsize::new(0);

fn sweep_vec(obj: ObjRef) {
    // SAFETY: the sweep function gets the dead Vec before its memory is reused; the side
    // buffer is a Box<[u8; 64]> leaked at allocation time.
    unsafe {
        let side = obj.read_slot(8 * (VEC_CAP + 1)) as *mut [u8; 64];
        drop(Box::from_raw(side));
    }
    SIDE_BUFFERS_FREED.fetch_add(1, Ordering::Relaxed);
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();

    let heap = Heap::new(HeapConfig::default()).expect("heap");
    let mut m = heap.attach().expect("attach");
    println!(
        "max internal object size: {} bytes",
        gc_core::max_internal_obj_size()
    );

    // A precise type: the collector reads the references at the given offsets.
    let pair = heap.new_layout_type("Pair", 16, &[0, 8]).expect("Pair");
    // A foreign type with a mark function and a sweep function.
    let vec = heap
        .new_foreign_type(ForeignTypeSpec {
            name: "Vec",
            mark: MarkProc::Rust(mark_vec),
            sweep: SweepProc::Rust(sweep_vec),
            has_pointers: true,
            large: false,
        })
        .expect("Vec");

    let collections = Arc::new(AtomicUsize::new(0));
    let c = collections.clone();
    heap.add_callback(Callback::PostGc(Arc::new(move |_| {
        c.fetch_add(1, Ordering::Relaxed);
    })))
    .expect("callback");

    // Build a list of 1000 pairs; keep only its head rooted.
    let head = m.alloc_typed(16, pair).expect("alloc");
    let root = heap.root(head);
    let mut tail = head;
    for _ in 0..999 {
        let p = m.alloc_typed(16, pair).expect("alloc");
        // SAFETY: `tail` and `p` are live Pairs (tail is reachable from the root).
        unsafe { m.store_ref(tail, 8, Some(p)) };
        tail = p;
    }
    // 100 Vecs, each with a side buffer released by its sweep function; keep 10.
    let mut kept = Vec::new();
    for i in 0..100 {
        let v = m.alloc_typed(8 * (VEC_CAP + 2), vec).expect("alloc");
        let side = Box::into_raw(Box::new([0u8; 64]));
        // SAFETY: a fresh Vec; the head list is alive.
        unsafe {
            v.write_slot(0, 2);
            m.store_ref(v, 8, Some(root.get()));
            m.store_ref(v, 16, Some(tail));
            v.write_slot(8 * (VEC_CAP + 1), side as usize);
            m.schedule_foreign_sweepfunc(v).expect("schedule");
        }
        if i % 10 == 0 {
            kept.push(heap.root(v));
        }
    }

    let partial = m
        .collect(CollectionKind::Partial)
        .expect("collect")
        .expect("ran");
    println!(
        "partial collection: marked {} objects",
        partial.objects_marked
    );
    println!(
        "side buffers freed by sweep functions: {}",
        SIDE_BUFFERS_FREED.load(Ordering::Relaxed)
    );
    let full = m
        .collect(CollectionKind::Full)
        .expect("collect")
        .expect("ran");
    println!(
        "full collection: marked {} objects, pause {:?}",
        full.objects_marked, full.pause
    );

    // Walk the list: all 1000 pairs survived.
    let mut n = 0;
    let mut cur = Some(root.get());
    while let Some(p) = cur {
        n += 1;
        // SAFETY: reachable from the root.
        cur = unsafe { m.load_ref(p, 8) };
    }
    println!("list length after collections: {n}");

    drop(kept);
    drop(root);
    m.collect(CollectionKind::Full).expect("collect");
    println!(
        "after dropping the roots, side buffers freed: {}",
        SIDE_BUFFERS_FREED.load(Ordering::Relaxed)
    );
    let s = heap.stats();
    println!(
        "collections: {} full, {} partial (post_gc callback saw {}); sweep functions run: {}",
        s.full_collections,
        s.partial_collections,
        collections.load(Ordering::Relaxed),
        s.sweep_functions_run
    );
    println!(
        "objects allocated: {}; bytes live now: {}",
        s.objects_allocated, s.live_bytes
    );
}
