//! Interior-pointer lookup: for objects of every size class and several large sizes,
//! every byte offset from the base to one past the end maps back to the base; the word
//! before an object (when the cell before is free), free cells, the unallocated part of
//! a page, freed big objects, page headers, stacks, static data and millions of random
//! words map to nothing, without a crash.

use gc_conservative::{
    base_ptr, enable_conservative_scanning, internal_obj_base_ptr, is_internal_obj_alloc,
};
use gc_core::{CollectionKind, Heap, HeapConfig, ObjRef};
use gc_core::{CELL_SIZES, FIRST_CELL, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, Ordering};

static STATIC_DATA: [u64; 64] = [7; 64];

fn heap() -> Heap {
    // Eager sweeping: the tests look at free cells right after each collection.
    Heap::new(HeapConfig {
        min_interval: 1 << 30,
        max_interval: 1 << 30,
        lazy_sweep: false,
        ..HeapConfig::default()
    })
    .unwrap()
}

/// Every byte from `obj` to one past the end of its `cap`-byte payload maps to `obj`.
fn assert_covers(heap: &Heap, obj: ObjRef, cap: usize, what: &str) {
    let id = heap.id();
    for off in 0..=cap {
        let p = obj.addr() + off;
        assert_eq!(base_ptr(id, p), Some(obj), "{what}: offset {off} of {cap}");
    }
}

#[test]
fn every_size_class_interior_and_one_past_end() {
    let heap = heap();
    let mut m = heap.attach().unwrap();
    let id = heap.id();
    let ty = heap.new_layout_type("Blob", 8, &[]).unwrap();
    for (class, &cell) in CELL_SIZES.iter().enumerate() {
        let size = cell as usize - 8;
        // a (garbage), b (kept), c (kept): after a full collection a's cell is free.
        let a = m.alloc_typed(size, ty).unwrap();
        let b = m.alloc_typed(size, ty).unwrap();
        let c = m.alloc_typed(size, ty).unwrap();
        let _rb = heap.root(b);
        let _rc = heap.root(c);
        // Before collecting: the cells after c in its page are the bump area.
        let page = gc_core::page_of(c.addr()).unwrap();
        let after_c = c.addr() + cell as usize;
        if after_c + 8 < page.base() + PAGE_SIZE {
            assert_eq!(
                base_ptr(id, after_c + 8),
                None,
                "class {class}: bump area beyond the last object"
            );
        }
        m.collect(CollectionKind::Full).unwrap();
        assert_covers(
            &heap,
            b,
            size,
            &format!("class {class} ({cell}-byte cells)"),
        );
        assert_eq!(internal_obj_base_ptr(id, b.addr() + size / 2), Some(b));
        assert!(is_internal_obj_alloc(id, b.addr()));
        assert!(
            !is_internal_obj_alloc(id, b.addr() + 8),
            "interior is not an object start"
        );
        if b.addr() == a.addr() + cell as usize {
            // a's cell is free now: nothing in it, and b's header word maps to nothing.
            for off in 0..cell as usize - 8 {
                assert_eq!(
                    base_ptr(id, a.addr() + off),
                    None,
                    "class {class}: free cell offset {off}"
                );
            }
            assert_eq!(
                base_ptr(id, b.addr() - 8),
                None,
                "class {class}: word before b"
            );
            // A free cell is still "memory reserved for allocation".
            assert!(is_internal_obj_alloc(id, a.addr()));
        }
        // Page header bytes (before the first payload) are never an object.
        for off in 0..FIRST_CELL + 8 {
            assert_eq!(
                base_ptr(id, page.base() + off),
                None,
                "class {class}: page start +{off}"
            );
        }
        // The tail after the last cell.
        let tail_start =
            page.base() + FIRST_CELL + (PAGE_SIZE - FIRST_CELL) / cell as usize * cell as usize;
        for p in tail_start + 1..page.base() + PAGE_SIZE {
            assert_eq!(
                internal_obj_base_ptr(id, p),
                None,
                "class {class}: page tail {p:#x}"
            );
        }
    }
}

/// Addresses kept out of any stack in plain form, so conservative scanning of the test's
/// own stack does not retain the objects whose freeing is being checked.
const MASK: usize = 0x5A5A_5A5A_5A5A_5A5A;

/// Runs `f` in frames laid on zeroed stack memory. A test's thread may run on the
/// recycled stack of an earlier test's thread, and the never-written slots of its frames
/// then hold that test's words (pointers into malloc'd memory the big objects here may
/// reuse): conservative roots that kept one big object of this test alive in about 1
/// run in 10 once the lookup tests below were added.
#[inline(never)]
fn on_a_scrubbed_stack(f: fn()) {
    scrub_stack_below();
    run_fn(f)
}

#[inline(never)]
fn scrub_stack_below() {
    let mut buf = [0u8; 256 << 10];
    std::hint::black_box(&mut buf);
}

#[inline(never)]
fn run_fn(f: fn()) {
    f()
}

#[test]
fn large_objects_are_found_through_the_index_and_forgotten_when_freed() {
    on_a_scrubbed_stack(large_objects_found_and_forgotten)
}

fn large_objects_found_and_forgotten() {
    let heap = heap();
    enable_conservative_scanning(&heap).unwrap();
    let sizes = [2025usize, 4096, 10_000, 65_536, 1 << 20, 3 << 20];
    // Allocate and check on a thread whose stack is gone before the collection.
    let (masked, roots) = std::thread::scope(|s| {
        s.spawn(|| {
            let mut m = heap.attach().unwrap();
            let id = heap.id();
            let ty = heap.new_layout_type("Big", 8, &[]).unwrap();
            let mut masked = Vec::new();
            let mut roots = Vec::new();
            for &size in &sizes {
                let o = m.alloc_typed(size, ty).unwrap();
                roots.push(heap.root(o));
                assert_covers(&heap, o, size, &format!("big object of {size} bytes"));
                assert_eq!(base_ptr(id, o.addr() + size + 1), None);
                assert_eq!(
                    base_ptr(id, o.addr() - 8),
                    None,
                    "header word of a big object"
                );
                assert_eq!(
                    internal_obj_base_ptr(id, o.addr()),
                    None,
                    "big objects are not internal"
                );
                assert!(!is_internal_obj_alloc(id, o.addr()));
                masked.push(o.addr() ^ MASK);
            }
            (masked, roots)
        })
        .join()
        .unwrap()
    });
    assert_eq!(gc_conservative::indexed_big_objects(&heap), sizes.len());
    drop(roots);
    let mut m = heap.attach().unwrap();
    m.collect(CollectionKind::Full).unwrap();
    assert_eq!(
        gc_conservative::indexed_big_objects(&heap),
        0,
        "every big object was freed"
    );
    for (&x, &s) in masked.iter().zip(sizes.iter()) {
        let a = x ^ MASK;
        for p in [a, a + s / 2, a + s] {
            assert_eq!(base_ptr(heap.id(), p), None, "freed big object {a:#x}");
        }
    }
}

#[test]
fn big_objects_allocated_before_enabling_are_indexed() {
    let heap = heap();
    let mut m = heap.attach().unwrap();
    let ty = heap.new_layout_type("Big", 8, &[]).unwrap();
    let early = m.alloc_typed(50_000, ty).unwrap();
    let _r = heap.root(early);
    enable_conservative_scanning(&heap).unwrap();
    enable_conservative_scanning(&heap).unwrap(); // idempotent
    assert_eq!(base_ptr(heap.id(), early.addr() + 1234), Some(early));
}

#[test]
fn stacks_static_data_other_heaps_and_random_words_are_not_objects() {
    let heap = heap();
    let mut m = heap.attach().unwrap();
    let id = heap.id();
    let ty = heap.new_layout_type("Blob", 8, &[]).unwrap();
    let keep: Vec<_> = (0..1000)
        .map(|_| heap.root(m.alloc_typed(24, ty).unwrap()))
        .collect();
    let local = [0u64; 16];
    for p in [
        &local as *const _ as usize,
        STATIC_DATA.as_ptr() as usize,
        main_like as fn() as usize,
        0,
        8,
        usize::MAX,
        1 << 47,
    ] {
        assert_eq!(base_ptr(id, p), None, "{p:#x}");
        assert!(!is_internal_obj_alloc(id, p));
    }
    // Another heap's objects are not this heap's.
    let other = Heap::default();
    drop(m);
    let mut om = other.attach().unwrap();
    let oty = other.new_layout_type("Blob", 8, &[]).unwrap();
    let foreign = om.alloc_typed(24, oty).unwrap();
    assert_eq!(base_ptr(id, foreign.addr()), None);
    assert_eq!(base_ptr(other.id(), foreign.addr()), Some(foreign));
    drop(om);
    // Random words: xorshift over the full 64-bit range, plus random offsets near the
    // heap's own pages (which must resolve only to real objects).
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let near = keep[0].get().addr() & !(PAGE_SIZE - 1);
    let mut hits = 0;
    for i in 0..10_000_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let p = if i % 4 == 0 {
            near.wrapping_add((x % (8 * PAGE_SIZE as u64)) as usize)
        } else {
            x as usize
        };
        if let Some(o) = base_ptr(id, p) {
            hits += 1;
            // Only allocated objects containing the word are ever reported.
            let page = gc_core::page_of(o.addr()).unwrap();
            let (cell, _) = page.cell_layout().unwrap();
            assert!(
                page.is_allocated(o.addr()),
                "random word {p:#x} resolved to a free cell"
            );
            assert!(
                o.addr() <= p && p <= o.addr() + cell - 8,
                "{p:#x} outside {o:?}"
            );
        }
    }
    assert!(
        hits > 0,
        "words near the heap's pages should sometimes hit live objects"
    );
}

fn main_like() {}

/// A page whose objects all died is free: nothing in it resolves (its page-table entry
/// no longer names the heap); once reused for another size class, interior pointers
/// resolve to that class's objects (the entry's copy of the cell geometry follows).
#[test]
fn freed_page_resolves_to_nothing_then_to_its_new_class() {
    let heap = heap();
    let mut m = heap.attach().unwrap();
    let id = heap.id();
    let ty = heap.new_layout_type("Blob", 8, &[]).unwrap();
    // Fill more than one page of 48-byte cells, keep nothing, hidden from the stack.
    let (small, big) = (40, 200);
    let mut hidden = Vec::new();
    for _ in 0..1000 {
        hidden.push(m.alloc_typed(small, ty).unwrap().addr() ^ MASK);
    }
    let page_of = |a: usize| a & !(PAGE_SIZE - 1);
    let first = hidden[0] ^ MASK;
    let old_page = page_of(first);
    m.collect(CollectionKind::Full).unwrap();
    heap.complete_sweep().unwrap();
    for off in 0..PAGE_SIZE {
        assert_eq!(base_ptr(id, old_page + off), None, "free page +{off}");
    }
    // Objects of another class, until one lands on the freed page.
    let mut kept = Vec::new();
    let mut reused = None;
    for _ in 0..4096 {
        let o = m.alloc_typed(big, ty).unwrap();
        kept.push(heap.root(o));
        if page_of(o.addr()) == old_page {
            reused = Some(o);
            break;
        }
    }
    let o = reused.expect("the freed page is reused within 4096 allocations");
    for off in 0..=big {
        assert_eq!(
            base_ptr(id, o.addr() + off),
            Some(o),
            "new class, offset {off}"
        );
    }
    // The old class's first object start is not a start under the new layout unless
    // the two layouts agree there.
    let got = base_ptr(id, first);
    assert!(
        got.is_none_or(|g| g.addr() <= first && first <= g.addr() + big),
        "{got:?} for {first:#x}"
    );
}

/// What every lookup answers for the objects of one page: `dead` are not objects (no
/// offset of theirs resolves), `live` are. `is_internal_obj_alloc` reports a dead
/// object's cell as memory reserved for objects once swept (a free cell: its header is
/// a free-list link, never a type), and as nothing while its page waits (`waiting`: its
/// header still names the dead object's type, which the seed promises a reserved cell's
/// never does).
fn assert_page_answers(
    heap: &Heap,
    dead: &[(ObjRef, usize)],
    live: &[(ObjRef, usize)],
    waiting: bool,
    when: &str,
) {
    let id = heap.id();
    for &(o, size) in dead {
        for off in [0, 8, size / 2, size] {
            let p = o.addr() + off;
            assert_eq!(
                internal_obj_base_ptr(id, p),
                None,
                "{when}: dead {o:?} +{off}"
            );
            assert_eq!(base_ptr(id, p), None, "{when}: dead {o:?} +{off}");
        }
        assert!(
            !gc_core::is_internal_object(id, o.addr()),
            "{when}: dead {o:?}"
        );
        let page = gc_core::page_of(o.addr()).unwrap();
        assert!(!page.is_allocated(o.addr()), "{when}: dead {o:?}");
        assert_eq!(
            is_internal_obj_alloc(id, o.addr()),
            !waiting,
            "{when}: dead {o:?}, is_internal_obj_alloc"
        );
    }
    for &(o, size) in live {
        for off in [0, 8, size / 2, size] {
            let p = o.addr() + off;
            assert_eq!(
                internal_obj_base_ptr(id, p),
                Some(o),
                "{when}: live {o:?} +{off}"
            );
            assert_eq!(base_ptr(id, p), Some(o), "{when}: live {o:?} +{off}");
        }
        assert!(
            gc_core::is_internal_object(id, o.addr()),
            "{when}: live {o:?}"
        );
        assert!(is_internal_obj_alloc(id, o.addr()), "{when}: live {o:?}");
    }
}

/// A collection leaves its dead objects' cells to the lazy sweep, which runs later on a
/// helper thread or an allocating thread. Until a page is swept, every lookup must answer
/// "no object" for its dead cells (a conservative scan or a mutator using the answer
/// would resurrect an object whose children are already freed: GAP issue 3412's bug
/// class) and still find the live objects next to them: old objects dead in a full
/// collection, young ones dead in a partial one; an old object unreachable at a partial
/// collection is still allocated (only a full collection frees it).
#[test]
fn dead_objects_on_pages_waiting_for_their_sweep_are_not_found() {
    let heap = Heap::new(HeapConfig {
        min_interval: 1 << 30,
        max_interval: 1 << 30,
        lazy_sweep: true,
        ..HeapConfig::default()
    })
    .unwrap();
    heap.hold_lazy_sweep(true);
    let mut m = heap.attach().unwrap();
    let ty = heap.new_layout_type("Blob", 8, &[]).unwrap();
    let sizes = [8usize, 40, 200, 2024];
    // Per size: a dead object, a live one and another dead one, side by side on a page.
    let mut dead = Vec::new();
    let mut live = Vec::new();
    let mut roots = Vec::new();
    for &size in &sizes {
        let a = m.alloc_typed(size, ty).unwrap();
        let b = m.alloc_typed(size, ty).unwrap();
        let c = m.alloc_typed(size, ty).unwrap();
        roots.push(heap.root(b));
        dead.extend([(a, size), (c, size)]);
        live.push((b, size));
    }
    assert_page_answers(&heap, &[], &live, false, "before collecting");
    m.collect(CollectionKind::Full).unwrap();
    assert!(heap.hold_lazy_sweep(true) > 0, "pages wait for their sweep");
    assert_page_answers(&heap, &dead, &live, true, "full collection, pages waiting");
    heap.complete_sweep().unwrap();
    assert_page_answers(&heap, &dead, &live, false, "full collection, pages swept");

    // The live objects are promoted by a second collection; young objects then take
    // the free cells of their pages (swept, so listed), next to old ones.
    m.collect(CollectionKind::Partial).unwrap();
    heap.complete_sweep().unwrap();
    // SAFETY: rooted.
    assert!(live.iter().all(|&(b, _)| !unsafe { b.is_young() }));
    let mut young_dead = Vec::new();
    let mut young_live = Vec::new();
    for &size in &sizes {
        let y = m.alloc_typed(size, ty).unwrap();
        let z = m.alloc_typed(size, ty).unwrap();
        roots.push(heap.root(z));
        young_dead.push((y, size));
        young_live.push((z, size));
    }
    let same_page = |o: ObjRef, p: ObjRef| o.addr() / PAGE_SIZE == p.addr() / PAGE_SIZE;
    assert!(
        young_live
            .iter()
            .zip(&live)
            .any(|(&(z, _), &(b, _))| same_page(z, b)),
        "young objects share a page with old ones"
    );
    // The first old object becomes unreachable: a partial collection keeps it.
    let unreachable_old = live.remove(0);
    roots.remove(0);
    m.collect(CollectionKind::Partial).unwrap();
    assert!(heap.hold_lazy_sweep(true) > 0, "pages wait for their sweep");
    let mut kept = live.clone();
    kept.push(unreachable_old);
    kept.extend(&young_live);
    assert_page_answers(
        &heap,
        &young_dead,
        &kept,
        true,
        "partial collection, pages waiting",
    );
    heap.complete_sweep().unwrap();
    assert_page_answers(
        &heap,
        &young_dead,
        &kept,
        false,
        "partial collection, pages swept",
    );
    // A full collection frees it.
    m.collect(CollectionKind::Full).unwrap();
    assert!(heap.hold_lazy_sweep(true) > 0, "pages wait for their sweep");
    let mut live_now = live.clone();
    live_now.extend(&young_live);
    assert_page_answers(
        &heap,
        &[unreachable_old],
        &live_now,
        true,
        "full collection, pages waiting",
    );
    heap.complete_sweep().unwrap();
    assert_page_answers(
        &heap,
        &[unreachable_old],
        &live_now,
        false,
        "full collection, pages swept",
    );
    heap.hold_lazy_sweep(false);
}

/// Lookups from another thread while the pages are swept: a live object is always found
/// (a lookup that meets its page being swept looks again), a dead one never (nothing
/// allocates meanwhile, so its cell stays free). Even rounds hold the pages waiting and
/// sweep them on this thread while the other looks; odd rounds leave them to the helper
/// thread's background sweep (which may be over before the lookups start).
#[test]
fn lookups_racing_with_the_sweep_answer_right() {
    let heap = Heap::new(HeapConfig {
        min_interval: 1 << 30,
        max_interval: 1 << 30,
        lazy_sweep: true,
        mark_threads: 2,
        ..HeapConfig::default()
    })
    .unwrap();
    let mut m = heap.attach().unwrap();
    let ty = heap.new_layout_type("Blob", 8, &[]).unwrap();
    let id = heap.id();
    // The first collection starts the helper thread (after its pause).
    m.collect(CollectionKind::Full).unwrap();
    for round in 0..6 {
        let mut live = Vec::new();
        let mut dead = Vec::new();
        let mut roots = Vec::new();
        for i in 0..300_000 {
            let o = m.alloc_typed(24, ty).unwrap();
            if i % 2 == 0 {
                roots.push(heap.root(o));
                live.push(o.addr());
            } else {
                dead.push(o.addr());
            }
        }
        let held = round % 2 == 0;
        heap.hold_lazy_sweep(held);
        m.collect(CollectionKind::Full).unwrap();
        let waiting = heap.hold_lazy_sweep(false);
        assert!(!held || waiting > 0, "round {round}: held pages wait");
        let done = AtomicBool::new(false);
        let looking = AtomicBool::new(false);
        let (checked, misses) = std::thread::scope(|s| {
            let looker = s.spawn(|| {
                let (mut checked, mut misses) = (0usize, Vec::new());
                while !done.load(Ordering::Acquire) || checked == 0 {
                    for (&l, &d) in live.iter().zip(&dead) {
                        if internal_obj_base_ptr(id, l + 8) != ObjRef::from_addr(l) {
                            misses.push(format!("live {l:#x} not found"));
                        }
                        if internal_obj_base_ptr(id, d + 8).is_some() {
                            misses.push(format!("dead {d:#x} found"));
                        }
                        checked += 1;
                        looking.store(true, Ordering::Release);
                    }
                    if misses.len() > 10 {
                        break;
                    }
                }
                (checked, misses)
            });
            while !looking.load(Ordering::Acquire) && !looker.is_finished() {
                std::hint::spin_loop();
            }
            // Sweep what still waits (all of it in the held rounds) while the other
            // thread looks.
            heap.complete_sweep().unwrap();
            done.store(true, Ordering::Release);
            looker.join().unwrap()
        });
        assert!(
            misses.is_empty(),
            "round {round} ({waiting} pages waiting): {misses:?}"
        );
        assert!(checked > 0);
    }
}

/// Lookups from a thread that is not attached run through collections (their pauses
/// flag the pages they leave to the sweep, between a lookup's two reads of a page's
/// geometry, and the sweeps clear the flags): the live objects are always found.
#[test]
fn live_objects_are_found_by_lookups_running_through_collections() {
    let heap = Heap::new(HeapConfig {
        min_interval: 1 << 30,
        max_interval: 1 << 30,
        lazy_sweep: true,
        ..HeapConfig::default()
    })
    .unwrap();
    let mut m = heap.attach().unwrap();
    let ty = heap.new_layout_type("Blob", 8, &[]).unwrap();
    let id = heap.id();
    let mut live = Vec::new();
    let mut roots = Vec::new();
    for i in 0..200_000 {
        let o = m.alloc_typed(8 + 8 * (i % 5), ty).unwrap();
        if i % 3 == 0 {
            roots.push(heap.root(o));
            live.push(o.addr());
        }
    }
    let done = AtomicBool::new(false);
    let (checked, misses) = std::thread::scope(|s| {
        let looker = s.spawn(|| {
            let (mut checked, mut misses) = (0usize, Vec::new());
            while !done.load(Ordering::Acquire) && misses.len() < 10 {
                for &l in &live {
                    if internal_obj_base_ptr(id, l + 8) != ObjRef::from_addr(l) {
                        misses.push(format!("live {l:#x} not found"));
                    }
                    checked += 1;
                }
            }
            (checked, misses)
        });
        for k in 0..40 {
            let kind = if k % 3 == 0 {
                CollectionKind::Full
            } else {
                CollectionKind::Partial
            };
            m.collect(kind).unwrap();
            // Garbage between collections, so that their pages have dead cells.
            for _ in 0..20_000 {
                m.alloc_typed(24, ty).unwrap();
            }
        }
        done.store(true, Ordering::Release);
        looker.join().unwrap()
    });
    assert!(misses.is_empty(), "{misses:?}");
    assert!(checked > 0);
}
