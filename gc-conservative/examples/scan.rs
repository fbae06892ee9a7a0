//! Conservative scanning in a few steps: an object referenced only from a local variable
//! dies on a heap without conservative scanning and survives on one with it; interior
//! pointers resolve to their object; big objects are found through the index.
//!
//! Run with `cargo run -p gc-conservative --example scan`.

use gc_conservative::{base_ptr, enable_conservative_scanning, is_internal_obj_alloc};
use gc_core::{CollectionKind, ForeignTypeSpec, Heap, HeapConfig, MarkProc, ObjRef, SweepProc};
use std::sync::atomic::{AtomicUsize, Ordering};

static SWEPT: AtomicUsize = AtomicUsize::new(0);

fn count(_: ObjRef) {
    SWEPT.fetch_add(1, Ordering::Relaxed);
}

/// Allocates an object whose only reference is a local of this frame, collects twice,
/// and reports whether its sweep function ran (it died).
#[inline(never)]
fn survives_in_a_local(heap: &Heap) -> bool {
    let mut m = heap.attach().expect("attach");
    let ty = heap
        .new_foreign_type(ForeignTypeSpec {
            name: "Local",
            mark: MarkProc::None,
            sweep: SweepProc::Rust(count),
            has_pointers: false,
            large: false,
        })
        .expect("type");
    let before = SWEPT.load(Ordering::Relaxed);
    let local = std::hint::black_box(m.alloc_typed(64, ty).expect("alloc"));
    // SAFETY: a fresh object of this heap.
    unsafe { m.schedule_foreign_sweepfunc(local).expect("schedule") };
    m.collect(CollectionKind::Full).expect("collect");
    m.collect(CollectionKind::Full).expect("collect");
    std::hint::black_box(&local);
    SWEPT.load(Ordering::Relaxed) == before
}

fn main() {
    let config = HeapConfig {
        min_interval: 64 << 20,
        ..HeapConfig::default()
    };
    let plain = Heap::new(config.clone()).expect("heap");
    println!(
        "object only in a local, no conservative scanning: survives = {}",
        survives_in_a_local(&plain)
    );
    let scanned = Heap::new(config).expect("heap");
    enable_conservative_scanning(&scanned).expect("enable");
    println!(
        "object only in a local, conservative scanning on: survives = {}",
        survives_in_a_local(&scanned)
    );

    let mut m = scanned.attach().expect("attach");
    let blob = scanned.new_layout_type("Blob", 8, &[]).expect("type");
    let small = m.alloc_typed(100, blob).expect("alloc");
    let big = m.alloc_typed(100_000, blob).expect("alloc");
    let id = scanned.id();
    let resolves = |p: usize, o: ObjRef| base_ptr(id, p) == Some(o);
    println!(
        "small object: start {}, interior {}, one past the end {}, header word {}",
        resolves(small.addr(), small),
        resolves(small.addr() + 57, small),
        resolves(small.addr() + 104, small),
        base_ptr(id, small.addr() - 8).is_some_and(|o| o == small)
    );
    println!(
        "big object: start {}, interior {}, one past the end {}",
        resolves(big.addr(), big),
        resolves(big.addr() + 77_777, big),
        resolves(big.addr() + 100_000, big)
    );
    println!(
        "is_internal_obj_alloc: small start {}, small interior {}, big {}",
        is_internal_obj_alloc(id, small.addr()),
        is_internal_obj_alloc(id, small.addr() + 8),
        is_internal_obj_alloc(id, big.addr())
    );
    let stack_word = 0usize;
    println!(
        "a stack address {} an object; a random word {} an object",
        if base_ptr(id, &stack_word as *const usize as usize).is_some() {
            "is"
        } else {
            "is not"
        },
        if base_ptr(id, 0x1234_5678_9abc_def0).is_some() {
            "is"
        } else {
            "is not"
        }
    );
}
