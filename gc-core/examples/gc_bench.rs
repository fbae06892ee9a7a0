//! Measurement driver for `cargo xtask bench gc` (Rust side): the allocation fast path
//! and the seed's two micro-benchmarks, translated to this heap. Prints `key=value`
//! lines. Run in release: `cargo run --release -p gc-core --example gc_bench`
//! (`-- --bencharr`: only the bencharr figures).
//!
//! - `alloc_ns`: allocating 16-byte objects in a loop, nothing kept, collections
//!   disabled: the fast path plus its page refills. Between rounds a full collection
//!   and, untimed, the completion of its sweep (with lazy sweeping the rounds would
//!   otherwise time the sweep of the previous round's 320 MB of dead objects: 11 ns per
//!   object instead of 6.5 on this host; `alloc_ns_with_gc` includes all of it).
//! - `alloc_ns_with_gc`: the same with the default collection policy.
//! - `bencharr_ms`: the seed's "array allocations benchmark" (`bencharr(200, 1000, 100,
//!   "x", "y")`): a global array of n*n*m2 pairs, then an n x n array of arrays of pairs
//!   mapped m times into new arrays of swapped pairs.
//!   `bencharr_full_mark_ms`: the best mark time of three full collections of its final
//!   heap (about 4 million live objects); the `_1t` figures are the same run marking on
//!   one thread with eager sweeping.
//! - `benchfac_ms`: the seed's "BigInt allocations benchmark" (`benchfac(2000)`): the sum
//!   of i! for i in 1..=2000 with heap-allocated big integers, a new one per operation.
//! - `weak_*`, `finalizer_*`, `queue_*`: what weak references, finalizers and reference
//!   queue registrations cost, per item, measured as the difference between collections
//!   of the same heap with and without them (best of several collections each):
//!   - `weak_ref_new_ns` / `weak_obj_new_ns`: making a weak handle / weak-reference object;
//!   - `weak_ref_full_ns` / `weak_obj_full_ns`: per live weak reference (old referent) in
//!     a full collection; `weak_ref_partial_ns` / `weak_obj_partial_ns`: the same in a
//!     partial collection (old handles are not looked at: about 0; the referents of old
//!     weak-reference objects are, since C may store into `value` directly);
//!   - `weak_ref_clear_ns`: per weak handle cleared when its young referent dies in a
//!     partial collection;
//!   - `finalizer_register_ns`, `finalizer_gc_ns` (the two collections: the one that finds
//!     the object and keeps it, the one that frees it, minus those of plain garbage),
//!     `finalizer_run_ns` (a C no-op finalizer run by `run_finalizers`) and
//!     `finalizer_total_ns`; `finalizer_live_full_ns`: per registered finalizer of a live
//!     object in a full collection;
//!   - `queue_ns`: register + the collection that queues the token + drain, per object.

use gc_core::{CollectionKind, Heap, HeapConfig, Mutator, ObjRef, TypeRef};
use std::time::Instant;

/// ns per 16-byte allocation. Each round allocates `n` objects and keeps none; the
/// first round touches fresh memory (page faults), so the best of the later rounds is
/// the fast path on recycled pages (with `collect_between`, a full collection runs
/// between rounds and none inside them when `config` disables the trigger).
fn alloc_loop(config: HeapConfig, n: usize, collect_between: bool) -> f64 {
    let heap = Heap::new(config).unwrap();
    let mut m = heap.attach().unwrap();
    let ty = heap.new_layout_type("Small", 16, &[]).unwrap();
    let mut best = f64::INFINITY;
    for round in 0..4 {
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(m.alloc_typed(16, ty).unwrap());
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        if round > 0 {
            best = best.min(ns);
        }
        if collect_between {
            m.collect(CollectionKind::Full).unwrap();
            // Sweep the pages now (untimed), as a non-lazy collector's pause would, so
            // that the next round times allocation rather than the lazy sweep.
            heap.complete_sweep().unwrap();
        }
    }
    best
}

struct Arr {
    ty: TypeRef,
}

impl Arr {
    /// An array object of `n` reference slots (word 0 holds the length).
    fn alloc(m: &mut Mutator, ty: &Arr, n: usize) -> ObjRef {
        let a = m.alloc_typed(8 * (n + 1), ty.ty).unwrap();
        // SAFETY: a fresh array of n + 1 words.
        unsafe { a.write_slot(0, n) };
        a
    }
}

/// Array type: a length word then references; marked by a mark function with
/// `queue_array` (one mark-stack entry per array).
fn mark_array(m: &mut gc_core::Marker<'_>, obj: ObjRef) -> usize {
    // SAFETY: live arrays start with their length, followed by that many references.
    unsafe {
        let n = obj.read_slot(0);
        m.queue_array(obj, obj.as_ptr().add(8) as *const Option<ObjRef>, n);
    }
    0
}

/// What one `bencharr` run measured.
struct ArrRun {
    ms: f64,
    stats: gc_core::GcStats,
    /// Best mark time of three full collections of the final heap (everything live).
    full_mark_ms: f64,
}

fn bencharr(n: usize, mm: usize, m2: usize, config: HeapConfig) -> ArrRun {
    let heap = Heap::new(config).unwrap();
    let mut m = heap.attach().unwrap();
    let pair = heap.new_layout_type("Tuple", 16, &[0, 8]).unwrap();
    let string = heap.new_layout_type("String", 8, &[]).unwrap();
    let spec = |large| gc_core::ForeignTypeSpec {
        name: if large { "BigArray" } else { "Array" },
        mark: gc_core::MarkProc::Rust(mark_array),
        sweep: gc_core::SweepProc::None,
        has_pointers: true,
        large,
    };
    let small = Arr {
        ty: heap.new_foreign_type(spec(false)).unwrap(),
    };
    let large = Arr {
        ty: heap.new_foreign_type(spec(true)).unwrap(),
    };
    let arr_ty = |len: usize| {
        if 8 * (len + 1) > gc_core::max_internal_obj_size() {
            &large
        } else {
            &small
        }
    };
    let x = heap.root(m.alloc_typed(8, string).unwrap());
    let y = heap.root(m.alloc_typed(8, string).unwrap());
    // Objects never move and these stay rooted: their addresses stay valid.
    let (xo, yo) = (x.get(), y.get());
    let start = Instant::now();
    // global t = [(x, y) for i in 1:(n * n * m2)]
    let len = n * n * m2;
    let t = heap.root(Arr::alloc(&mut m, arr_ty(len), len));
    let to = t.get();
    for i in 0..len {
        let p = m.alloc_typed(16, pair).unwrap();
        // SAFETY: live objects; slots inside their payloads.
        unsafe {
            m.store_ref(p, 0, Some(xo));
            m.store_ref(p, 8, Some(yo));
            m.store_ref(to, 8 * (i + 1), Some(p));
        }
    }
    // a = [[(x, y) for j in 1:n] for i in 1:n]
    let mut a = heap.root(Arr::alloc(&mut m, arr_ty(n), n));
    let ao = a.get();
    for i in 0..n {
        let inner = Arr::alloc(&mut m, arr_ty(n), n);
        // SAFETY: live objects.
        unsafe { m.store_ref(ao, 8 * (i + 1), Some(inner)) };
        for j in 0..n {
            let p = m.alloc_typed(16, pair).unwrap();
            // SAFETY: live objects; `inner` is reachable from `a`.
            unsafe {
                m.store_ref(p, 0, Some(xo));
                m.store_ref(p, 8, Some(yo));
                m.store_ref(inner, 8 * (j + 1), Some(p));
            }
        }
    }
    // for i in 1:m: a = map(outer -> map(inner -> (inner[2], inner[1]), outer), a)
    for _ in 0..mm {
        let b = heap.root(Arr::alloc(&mut m, arr_ty(n), n));
        let (ao, bo) = (a.get(), b.get());
        for i in 0..n {
            let nb = Arr::alloc(&mut m, arr_ty(n), n);
            // SAFETY: live objects.
            unsafe { m.store_ref(bo, 8 * (i + 1), Some(nb)) };
            // SAFETY: reachable from a (rooted).
            let row = unsafe { m.load_ref(ao, 8 * (i + 1)).unwrap() };
            for j in 0..n {
                // SAFETY: reachable from a (rooted).
                let old = unsafe { m.load_ref(row, 8 * (j + 1)).unwrap() };
                let p = m.alloc_typed(16, pair).unwrap();
                // SAFETY: `old` is reachable from `a`; `nb` from `b`; `p` is fresh.
                unsafe {
                    let (first, second) = (m.load_ref(old, 0), m.load_ref(old, 8));
                    m.store_ref(p, 0, second);
                    m.store_ref(p, 8, first);
                    m.store_ref(nb, 8 * (j + 1), Some(p));
                }
            }
        }
        a = b;
    }
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let stats = heap.stats();
    let full_mark_ms = (0..3)
        .map(|_| {
            let info = m.collect(CollectionKind::Full).unwrap().unwrap();
            info.mark_time.as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min);
    drop((a, t));
    ArrRun {
        ms,
        stats,
        full_mark_ms,
    }
}

/// Big integers as heap objects of 64-bit limbs (word 0: limb count).
fn big_from(m: &mut Mutator, ty: TypeRef, limbs: &[u64]) -> ObjRef {
    let o = m.alloc_typed(8 * (limbs.len() + 1), ty).unwrap();
    // SAFETY: a fresh object of limbs.len() + 1 words.
    unsafe {
        o.write_slot(0, limbs.len());
        std::ptr::copy_nonoverlapping(limbs.as_ptr(), o.as_ptr().add(8) as *mut u64, limbs.len());
    }
    o
}

fn limbs(o: ObjRef) -> &'static [u64] {
    // SAFETY: callers pass live big integers, read before the next allocation.
    unsafe { std::slice::from_raw_parts(o.as_ptr().add(8) as *const u64, o.read_slot(0)) }
}

fn benchfac(n: u64) -> (f64, u64, gc_core::GcStats) {
    let heap = Heap::new(HeapConfig::default()).unwrap();
    let mut m = heap.attach().unwrap();
    let ty = heap.new_layout_type("BigInt", 8, &[]).unwrap();
    let start = Instant::now();
    let total = heap.root(big_from(&mut m, ty, &[0]));
    let mut scratch: Vec<u64> = Vec::new();
    for i in 1..=n {
        // fac(i): result = BigInt(1); for k in 2:i: result *= k (a new BigInt each time).
        let result = heap.root(big_from(&mut m, ty, &[1]));
        for k in 2..=i {
            scratch.clear();
            let mut carry = 0u128;
            for &l in limbs(result.get()) {
                let v = l as u128 * k as u128 + carry;
                scratch.push(v as u64);
                carry = v >> 64;
            }
            if carry != 0 {
                scratch.push(carry as u64);
            }
            let next = big_from(&mut m, ty, &scratch);
            result.set(next);
        }
        // total += fac(i): a new BigInt.
        scratch.clear();
        let (a, b) = (limbs(total.get()), limbs(result.get()));
        let mut carry = 0u128;
        for idx in 0..a.len().max(b.len()) {
            let v = *a.get(idx).unwrap_or(&0) as u128 + *b.get(idx).unwrap_or(&0) as u128 + carry;
            scratch.push(v as u64);
            carry = v >> 64;
        }
        if carry != 0 {
            scratch.push(carry as u64);
        }
        let next = big_from(&mut m, ty, &scratch);
        total.set(next);
    }
    let ms = start.elapsed().as_secs_f64() * 1e3;
    // A checksum of the result, so the work cannot be skipped and can be compared.
    let sum = limbs(total.get())
        .iter()
        .fold(0u64, |acc, &l| acc.rotate_left(7) ^ l);
    m.collect(CollectionKind::Full).unwrap();
    (ms, sum, heap.stats())
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // `--bencharr`: only the bencharr figures (for repeated runs).
    let arr_only = std::env::args().any(|a| a == "--bencharr");
    let n = if quick { 2_000_000 } else { 20_000_000 };
    let no_gc = HeapConfig {
        min_interval: 1 << 40,
        max_interval: 1 << 40,
        ..HeapConfig::default()
    };
    if !arr_only {
        println!("alloc_ns={:.3}", alloc_loop(no_gc, n, true));
        println!(
            "alloc_ns_with_gc={:.3}",
            alloc_loop(HeapConfig::default(), n, false)
        );
    }
    // bencharr with the default configuration (one collector thread per core), then
    // marking on one thread with eager sweeping (the behaviour before parallel marking
    // and lazy sweeping), for the pause and mark-speedup figures.
    let arr = |config: HeapConfig| {
        if quick {
            bencharr(50, 20, 10, config)
        } else {
            bencharr(200, 1000, 100, config)
        }
    };
    let one = HeapConfig {
        mark_threads: 1,
        lazy_sweep: false,
        ..HeapConfig::default()
    };
    for (suffix, run) in [("", arr(HeapConfig::default())), ("_1t", arr(one))] {
        let s = &run.stats;
        println!("bencharr{suffix}_ms={:.1}", run.ms);
        println!(
            "bencharr{suffix}_collections={}",
            s.full_collections + s.partial_collections
        );
        println!(
            "bencharr{suffix}_max_pause_ms={:.3}",
            s.max_pause.as_secs_f64() * 1e3
        );
        println!("bencharr{suffix}_full_mark_ms={:.3}", run.full_mark_ms);
    }
    if arr_only {
        return;
    }
    let (fac_ms, sum, s) = benchfac(if quick { 300 } else { 2000 });
    println!("benchfac_ms={fac_ms:.1}");
    println!("benchfac_checksum={sum}");
    println!(
        "benchfac_collections={}",
        s.full_collections + s.partial_collections
    );
    println!(
        "benchfac_max_pause_ms={:.3}",
        s.max_pause.as_secs_f64() * 1e3
    );
    weak_costs(if quick { 100_000 } else { 1_000_000 });
}

/// Best time of `reps` collections of `kind`, in ns.
fn best_collect(m: &mut Mutator, kind: CollectionKind, reps: usize) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            m.collect(kind).unwrap();
            t.elapsed().as_nanos() as f64
        })
        .fold(f64::INFINITY, f64::min)
}

unsafe extern "C" fn noop_finalizer(_: *mut std::ffi::c_void) {}

/// Per-item costs of weak references, finalizers and queue registrations (see the
/// module documentation). Collections run only when asked.
fn weak_costs(n: usize) {
    const REPS: usize = 7;
    let heap = Heap::new(HeapConfig {
        min_interval: 1 << 40,
        max_interval: 1 << 40,
        ..HeapConfig::default()
    })
    .unwrap();
    let mut m = heap.attach().unwrap();
    let obj = heap.new_layout_type("Obj", 16, &[]).unwrap();
    let word = heap.new_layout_type("Word", 8, &[]).unwrap();
    let big = Arr {
        ty: heap
            .new_foreign_type(gc_core::ForeignTypeSpec {
                name: "BigArray",
                mark: gc_core::MarkProc::Rust(mark_array),
                sweep: gc_core::SweepProc::None,
                has_pointers: true,
                large: true,
            })
            .unwrap(),
    };
    let per = |with: f64, without: f64| (with - without) / n as f64;
    // n live objects, and n live 8-byte objects (the size of a weak-reference object),
    // held by two arrays; all old after two collections.
    let holder = heap.root(Arr::alloc(&mut m, &big, n));
    let wholder = heap.root(Arr::alloc(&mut m, &big, n));
    for i in 0..n {
        let o = m.alloc_typed(16, obj).unwrap();
        let w = m.alloc_typed(8, word).unwrap();
        // SAFETY: live arrays of n slots; fresh objects.
        unsafe {
            m.store_ref(holder.get(), 8 * (i + 1), Some(o));
            m.store_ref(wholder.get(), 8 * (i + 1), Some(w));
        }
    }
    // Objects never move: the rooted arrays keep their addresses.
    let (holder_obj, wholder_obj) = (holder.get(), wholder.get());
    let target = |m: &Mutator, i: usize| {
        // SAFETY: the holder is rooted and full.
        unsafe { m.load_ref(holder_obj, 8 * (i + 1)) }.unwrap()
    };
    m.collect(CollectionKind::Full).unwrap();
    m.collect(CollectionKind::Full).unwrap();
    let base_full = best_collect(&mut m, CollectionKind::Full, REPS);
    let base_partial = best_collect(&mut m, CollectionKind::Partial, REPS);

    // Weak handles to the live objects.
    let t = Instant::now();
    let handles: Vec<gc_core::WeakRef> = (0..n).map(|i| heap.new_weak_ref(target(&m, i))).collect();
    println!(
        "weak_ref_new_ns={:.2}",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    m.collect(CollectionKind::Partial).unwrap(); // moves them off the young list
    let full = best_collect(&mut m, CollectionKind::Full, REPS);
    let partial = best_collect(&mut m, CollectionKind::Partial, REPS);
    println!("weak_ref_full_ns={:.2}", per(full, base_full));
    println!("weak_ref_partial_ns={:.2}", per(partial, base_partial));
    assert!(handles
        .iter()
        .enumerate()
        .all(|(i, h)| h.get() == Some(target(&m, i))));
    drop(handles);

    // Weak-reference objects in place of the 8-byte objects.
    let t = Instant::now();
    for i in 0..n {
        let w = m.new_weak_object(Some(target(&m, i))).unwrap();
        // SAFETY: a live array of n slots.
        unsafe { m.store_ref(wholder_obj, 8 * (i + 1), Some(w)) };
    }
    println!(
        "weak_obj_new_ns={:.2}",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    m.collect(CollectionKind::Full).unwrap();
    m.collect(CollectionKind::Full).unwrap();
    let full = best_collect(&mut m, CollectionKind::Full, REPS);
    let partial = best_collect(&mut m, CollectionKind::Partial, REPS);
    println!("weak_obj_full_ns={:.2}", per(full, base_full));
    println!("weak_obj_partial_ns={:.2}", per(partial, base_partial));
    // Back to plain objects, so that what follows compares like with like.
    for i in 0..n {
        let w = m.alloc_typed(8, word).unwrap();
        // SAFETY: as above.
        unsafe { m.store_ref(wholder_obj, 8 * (i + 1), Some(w)) };
    }
    m.collect(CollectionKind::Full).unwrap();
    m.collect(CollectionKind::Full).unwrap();

    // Young garbage: n objects die in a partial collection, with and without a weak
    // handle each, a finalizer each, a queue registration each.
    let garbage = |m: &mut Mutator, with: &dyn Fn(&mut Mutator, ObjRef)| -> f64 {
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            for _ in 0..n {
                let o = m.alloc_typed(16, obj).unwrap();
                with(m, o);
            }
            best = best.min(best_collect(m, CollectionKind::Partial, 1));
        }
        best
    };
    let plain = garbage(&mut m, &|_, _| {});
    let keep: std::cell::RefCell<Vec<gc_core::WeakRef>> = Default::default();
    let cleared = garbage(&mut m, &|m, o| {
        keep.borrow_mut().push(m.heap().new_weak_ref(o))
    });
    assert!(keep.borrow().iter().all(|h| h.get().is_none()));
    drop(keep);
    println!("weak_ref_clear_ns={:.2}", per(cleared, plain));
    let empty = best_collect(&mut m, CollectionKind::Partial, REPS);

    // Finalizers of young garbage: registration, the collection that keeps the objects
    // for their finalizers, running them, the collection that frees them.
    let (mut reg, mut gc1, mut run, mut gc2) =
        (f64::INFINITY, f64::INFINITY, f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        let objs: Vec<ObjRef> = (0..n).map(|_| m.alloc_typed(16, obj).unwrap()).collect();
        let t = Instant::now();
        for &o in &objs {
            // SAFETY: noop_finalizer may be called with any object, on any thread.
            unsafe { m.add_c_finalizer(o, noop_finalizer) };
        }
        reg = reg.min(t.elapsed().as_nanos() as f64);
        gc1 = gc1.min(best_collect(&mut m, CollectionKind::Partial, 1));
        let t = Instant::now();
        assert_eq!(m.run_finalizers(), n);
        run = run.min(t.elapsed().as_nanos() as f64);
        gc2 = gc2.min(best_collect(&mut m, CollectionKind::Partial, 1));
    }
    let gc = per(gc1 + gc2, plain + empty);
    println!("finalizer_register_ns={:.2}", reg / n as f64);
    println!("finalizer_gc_ns={gc:.2}");
    println!("finalizer_run_ns={:.2}", run / n as f64);
    println!("finalizer_total_ns={:.2}", (reg + run) / n as f64 + gc);

    // Queue registrations of young garbage.
    let q = heap.new_reference_queue();
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let objs: Vec<ObjRef> = (0..n).map(|_| m.alloc_typed(16, obj).unwrap()).collect();
        let t = Instant::now();
        for (i, &o) in objs.iter().enumerate() {
            q.register(o, i);
        }
        m.collect(CollectionKind::Partial).unwrap();
        assert_eq!(q.drain().len(), n);
        best = best.min(t.elapsed().as_nanos() as f64);
    }
    println!("queue_ns={:.2}", (best - plain) / n as f64);

    // Registered finalizers of live (old) objects.
    for i in 0..n {
        // SAFETY: as above.
        unsafe { m.add_c_finalizer(target(&m, i), noop_finalizer) };
    }
    m.collect(CollectionKind::Full).unwrap();
    m.collect(CollectionKind::Full).unwrap();
    let full = best_collect(&mut m, CollectionKind::Full, REPS);
    println!("finalizer_live_full_ns={:.2}", per(full, base_full));
    drop((holder, wholder));
}
