//! A collection: stop the world, mark, (weak processing, reserved), sweep, resume.
//!
//! Phases, each a `tracing` span with its figures:
//! 1. **stop**: set the safepoint flag; wait until every other attached thread is
//!    parked at a safepoint or inside a GC-safe region.
//! 2. **prepare**: take back every thread's allocation pages, scheduled sweeps and young
//!    big objects; decide full or partial; run the pre-GC callbacks (with that
//!    decision); then merge every thread's remembered set, so that a write barrier a
//!    pre-GC callback issues counts for this collection (Julia's order: GAP's PreGCHook
//!    calls `jl_gc_wb_back` on a bag it stored into without barriers).
//! 3. **verify** (verify mode, partial collections): no old object outside the
//!    remembered set may reference a young one.
//! 4. **mark**: persistent roots, types (full), root scanners, task scanners (once per
//!    task), the remembered set (partial), then the mark stack until empty.
//! 5. **weak** (`weak.rs`): weak-processing hooks, weak references cleared, finalizable
//!    objects found and marked, reference-queue tokens queued.
//! 6. **sweep**: sweep functions of dead scheduled objects, big objects, then pool
//!    pages (all of them in a full collection, pages with young objects otherwise),
//!    promotion of twice-surviving young objects, page lists rebuilt, spare pages
//!    returned to the OS; post_gc.
//! 7. **resume**: clear the flag, wake the threads; then, outside the stop-the-world, the
//!    collecting thread notifies the reference queues that received tokens and runs
//!    pending finalizers if it opted in.
//!
//! Layering: over the heap's state (`state.rs`), marking (`mark.rs`) and weak processing
//! (`weak.rs`); called by `mutator` (allocation, `Mutator::collect`) and `heap`, never
//! the other way round.

use crate::big::{self, BigHeader};
use crate::callbacks::{Callback, CallbackId, CallbackKind};
use crate::config::TaskScan;
use crate::error::GcError;
use crate::heap_id::HeapId;
use crate::marker::{Marker, ScanTask, Team};
use crate::object::{Header, ObjRef, FREE_END, HEADER_SIZE};
use crate::page::{Sweeper, TriggerPlan, IDLE_COLLECTIONS, LARGE_HEAP_FLOOR};
use crate::pagemeta::SweepParams;
use crate::par::MarkPool;
use crate::sizeclass::cells_per_page;
use crate::state::{GcState, HeapInner, MutatorShared, RUNNING};
use crate::stats::{CollectionInfo, PauseRecord};
use crate::task::Task;
use crate::tls::{abort_after_panic, save_registers};
use crate::weaktab::QueueInner;
use crate::CollectionKind;
use std::collections::HashSet;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a collection waits for the other threads before it says which it waits for.
const STOP_WARNING: Duration = Duration::from_secs(10);

/// Runs a collection from mutator `me` (which must be running managed code).
pub(crate) fn collect(
    me: &MutatorShared,
    req: CollectionKind,
) -> Result<Option<CollectionInfo>, GcError> {
    if me.in_collection.load(Ordering::Relaxed) {
        return Err(GcError::DuringCollection { what: "collect" });
    }
    me.check_running()?;
    let heap = me.heap();
    // What the last collection left to the lazy sweep is swept now, by the requesting
    // thread before the world stops, as an allocating thread does when it reaches the
    // trigger: a lazy sweep runs next to mutators, so it need not be part of the pause
    // (GAP's forced full collections, `GASMAN("collect")`, came one after the other with
    // 90-180 ms of the previous one's sweep in each pause on a 2 GB heap). Not while
    // another thread's collection waits for this one to stop.
    if heap.gc_flag.load(Ordering::Relaxed) == 0 {
        let pages = heap.pages.lock();
        if pages.unswept_pages() > 0 && !pages.hold {
            // SAFETY: this thread runs managed code, so no collection marks (it would be
            // stopped first).
            drop(unsafe { heap.finish_sweep(pages, Sweeper::Allocation) });
        }
    }
    let t0 = Instant::now();
    let mut w = heap.world.lock();
    while w.collecting {
        me.park(&mut w);
        if req != CollectionKind::Full || w.last_full {
            drop(w);
            crate::weak::after_resume(me);
            return Ok(None);
        }
    }
    w.collecting = true;
    heap.gc_flag.store(1, Ordering::SeqCst);
    let stop_span = tracing::trace_span!("gc_stop").entered();
    let mut warned = false;
    loop {
        let running = |m: &&Arc<MutatorShared>| {
            !std::ptr::eq(Arc::as_ptr(m), me) && m.state.load(Ordering::SeqCst) == RUNNING
        };
        let waiting = w.mutators.iter().filter(running).count();
        if waiting == 0 {
            break;
        }
        if !warned && t0.elapsed() >= STOP_WARNING {
            warned = true;
            let names: Vec<String> = w
                .mutators
                .iter()
                .filter(running)
                .map(|m| m.name.clone())
                .collect();
            let msg = format!(
                "gc-core: a collection has waited {} s for {} to reach a safepoint; a thread attached to the heap must poll (safepoint) in long loops and enter a GC-safe region around every blocking call (join, I/O, waiting for a lock another attached thread holds)",
                STOP_WARNING.as_secs(),
                names.join(", ")
            );
            tracing::warn!("{msg}");
            eprintln!("{msg}");
        }
        // The timeout only guards against a lost notification; threads notify.
        heap.cv_stopped.wait_for(&mut w, Duration::from_millis(1));
    }
    drop(stop_span);
    let mutators: Vec<Arc<MutatorShared>> = w.mutators.clone();
    drop(w);
    let time_to_safepoint = t0.elapsed();

    // SAFETY: the collecting thread's own register buffer; the others are stopped and
    // nothing reads it before the collection starts.
    save_registers(unsafe { &mut *me.head.regs.get() });
    me.record_stop();
    me.in_collection.store(true, Ordering::Relaxed);
    let (info, notify) = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(heap, me, &mutators, req, t0, time_to_safepoint)
    })) {
        Ok(r) => r,
        Err(payload) => abort_after_panic("the collecting thread", payload.as_ref()),
    };
    me.in_collection.store(false, Ordering::Relaxed);
    me.task.set_saved_sp(0);

    let mut w = heap.world.lock();
    w.collecting = false;
    w.last_full = info.kind == CollectionKind::Full;
    w.epoch += 1;
    heap.gc_flag.store(0, Ordering::SeqCst);
    heap.cv_resume.notify_all();
    drop(w);
    ensure_pool(heap);
    start_background_work(heap);
    crate::weak::after_collection(me, notify);
    Ok(Some(info))
}

/// The mark stacks' storage kept for the next collection: the largest ones, up to a
/// sixteenth of the pool pages' mapped bytes in all (at least `MARK_STACKS_KEPT_MIN`),
/// so that a heap whose marking once needed a deep stack does not pay for it again in
/// every collection, and a heap that shrank does not keep a stack it no longer needs.
/// Kept storage stays resident; a stack is never larger than what marking this heap
/// needed once.
fn keep_mark_stacks(mut stacks: Vec<Vec<usize>>, mapped: usize) -> Vec<Vec<usize>> {
    let mut budget = (mapped / 16).max(MARK_STACKS_KEPT_MIN);
    stacks.sort_unstable_by_key(|s| std::cmp::Reverse(s.capacity()));
    stacks.retain(|s| {
        let bytes = s.capacity() * std::mem::size_of::<usize>();
        let keep = bytes <= budget;
        if keep {
            budget -= bytes;
        }
        keep
    });
    // The largest last: the collecting thread's marker pops first.
    stacks.reverse();
    stacks
}

/// What [`keep_mark_stacks`] keeps on any heap: 1 MiB.
const MARK_STACKS_KEPT_MIN: usize = 1 << 20;

/// Starts (or restarts with the configured size) the heap's helper threads, outside any
/// pause; the next collection marks with them (with several mark threads), and one of
/// them sweeps in the background (`HeapConfig::sweep_threads`).
fn ensure_pool(heap: &HeapInner) {
    let (threads, sweeper) = {
        let c = heap.config.lock();
        (mark_threads(c.mark_threads), background_sweep(&c))
    };
    let helpers = if threads > 1 {
        threads - 1
    } else if sweeper {
        1
    } else {
        return;
    };
    let mut pool = heap.pool.lock();
    if pool.as_ref().map(|p| p.helpers()) == Some(helpers) {
        return;
    }
    *pool = None;
    match MarkPool::new(helpers) {
        Ok(p) => *pool = Some(p),
        Err(e) => tracing::warn!("cannot start mark threads ({e}); marking on one thread"),
    }
}

/// Whether a helper thread sweeps in the background with configuration `c`: lazy
/// sweeping, a sweep thread asked for, and another core to run it on.
fn background_sweep(c: &crate::HeapConfig) -> bool {
    c.lazy_sweep && c.sweep_threads > 0 && mark_threads(0) > 1
}

/// The work a collection leaves for after the pause, once the world has resumed:
/// lazy sweeping, handed to a helper thread if the heap sweeps in the background
/// (without, allocating threads sweep what they need, and the next collection the
/// rest), and the memory given back after it ([`return_memory`]), on the helper thread
/// after the sweep, or here when there is none.
fn start_background_work(heap: &HeapInner) {
    let background = background_sweep(&heap.config.lock());
    let sweep = background && heap.pages.lock().unswept_pages() > 0;
    let trim = heap.big.lock().freed_since_trim >= TRIM_AFTER_FREED
        || crate::bigrun::any_freed()
        || heap.pages.lock().has_trimmed();
    if !sweep && !trim {
        return;
    }
    let pool = heap.pool.lock();
    let Some(pool) = pool.as_ref().filter(|_| background) else {
        drop(pool);
        return_memory(heap);
        return;
    };
    struct HeapPtr(*const HeapInner);
    // SAFETY: the heap outlives its pool's threads (`HeapInner`'s drop shuts the pool
    // down, waiting for background work, before anything else goes).
    unsafe impl Send for HeapPtr {}
    let hp = HeapPtr(heap);
    pool.start_background(Box::new(move |stop| {
        let hp = hp;
        // SAFETY: see HeapPtr.
        let heap = unsafe { &*hp.0 };
        let _span = tracing::trace_span!("gc_background_sweep").entered();
        // Pages are swept outside the page lock, a batch at a time: allocating threads
        // need the lock for every new page, and a batch swept under it made GAP's thread
        // wait ~0.4 ms per new page (parking_lot lets the releasing thread take the lock
        // again before a parked waiter wakes).
        let mut pages = heap.pages.lock();
        while !stop.load(Ordering::Relaxed) {
            if heap.sweep_batch(&mut pages, Sweeper::Background) == 0 {
                break;
            }
        }
        drop(pages);
        if !stop.load(Ordering::Relaxed) {
            return_memory(heap);
        }
    }));
}

/// Merges the threads' allocation state into the heap: pages become unheld (the sweep
/// rebuilds their free lists from the headers), buffers are appended. The remembered
/// sets are merged later, by `merge_remembered_sets`, after the pre-GC callbacks.
fn take_back_threads(heap: &HeapInner, gc: &mut GcState, mutators: &[Arc<MutatorShared>]) {
    let _pages = heap.pages.lock();
    let mut objects = 0;
    let mut bytes = 0;
    let mut weak = heap.weak.lock();
    for m in mutators {
        // SAFETY: every thread is stopped (or is us), so we have exclusive access to its
        // allocation state; the world handshake ordered its writes before our reads.
        let local = unsafe { &mut *m.local.get() };
        for pool in local.pools.iter_mut() {
            if let Some(page) = pool.release() {
                // SAFETY: page lock held.
                unsafe { page.state() }.held = false;
            }
            pool.free = FREE_END;
            pool.bump = 0;
            pool.bump_end = 0;
        }
        gc.sweep_list.append(&mut local.sweep_list);
        weak.objs_young.append(&mut local.weak_objs);
        weak.objs_dirty |= std::mem::take(&mut local.weak_dirty);
        objects += std::mem::take(&mut local.objects);
        bytes += std::mem::take(&mut local.bytes);
        gc.stats.barrier_fires += std::mem::take(&mut local.barrier_fires);
        gc.stats.big_objects_allocated += std::mem::take(&mut local.big_objects);
        gc.stats.big_bytes_allocated += std::mem::take(&mut local.big_bytes);
    }
    if let Some(page) = gc.perm.release() {
        // SAFETY: page lock held.
        unsafe { page.state() }.held = false;
        gc.perm.free = FREE_END;
        gc.perm.bump = 0;
        gc.perm.bump_end = 0;
    }
    gc.stats.objects_allocated += objects;
    gc.stats.bytes_allocated += bytes;
}

/// Appends every thread's remembered set to the heap's. Called after the pre-GC
/// callbacks (Julia's order): a barrier one of them issues (GAP's PreGCHook calls
/// `jl_gc_wb_back` on its current local-variables bag, which it stores into without
/// barriers) lands in the collecting thread's remembered set and must count for this
/// collection.
fn merge_remembered_sets(gc: &mut GcState, mutators: &[Arc<MutatorShared>]) {
    for m in mutators {
        // SAFETY: every thread is stopped (or is us, between callbacks), so we have
        // exclusive access to its allocation state; the world handshake ordered its
        // writes before our reads.
        let local = unsafe { &mut *m.local.get() };
        gc.remset.append(&mut local.remset);
    }
}

fn run(
    heap: &HeapInner,
    me: &MutatorShared,
    mutators: &[Arc<MutatorShared>],
    req: CollectionKind,
    t0: Instant,
    tts: Duration,
) -> (CollectionInfo, Vec<Arc<QueueInner>>) {
    let mut gc = heap.gc.lock();
    take_back_threads(heap, &mut gc, mutators);
    let config = heap.config.lock().clone();
    let t_leftover = Instant::now();
    let leftover_time;
    // Pages the previous collection left to the lazy sweep are swept now, before any
    // mark bit changes (usually the helper threads or the allocating threads have done
    // it long before).
    {
        // SAFETY: marking has not begun.
        let (_pages, leftover) = unsafe { heap.finish_sweep(heap.pages.lock(), Sweeper::Pause) };
        leftover_time = t_leftover.elapsed();
        if leftover > 0 {
            tracing::trace!(leftover, "pages swept before marking");
        }
    }
    // What `Heap::stats` returns when called from inside this collection.
    heap.publish_stats(&gc);
    let big_old_now = heap.big.lock().old_bytes;
    let allocd = heap.allocd.swap(0, Ordering::Relaxed);
    let old_bytes_now = heap.pages.lock().totals.old + big_old_now;
    if std::mem::take(&mut gc.full_pending) {
        gc.old_after_full = old_bytes_now;
        gc.chain_base = old_bytes_now;
        learn_yield(heap, &mut gc, &config);
    }
    let full = match req {
        CollectionKind::Full => true,
        CollectionKind::Partial => false,
        CollectionKind::Auto => {
            // Full collections are considered where the old generation has grown by the
            // room of `full_growth` since the last one (or since such a point was
            // passed), and done there unless the last full collection's yield puts them
            // off (`HeapConfig::full_defer`): put off, the next point is the room of
            // `full_growth` above the one passed, wherever the collections fall, so that
            // the points do not depend on how much is allocated between collections.
            let floor = config.min_interval.saturating_mul(LARGE_HEAP_FLOOR);
            let point = gc.chain_base.max(floor);
            let next = point as f64 + config.full_allowance(point);
            if old_bytes_now as f64 > next {
                let base = gc.old_after_full.max(floor);
                let due =
                    old_bytes_now as f64 > base as f64 + config.full_room(base, gc.full_defer);
                if !due {
                    gc.chain_base = next as usize;
                }
                due
            } else {
                false
            }
        }
    };
    if full {
        gc.full_growth = old_bytes_now.saturating_sub(gc.old_after_full);
        gc.old_freed_before_full = old_freed(heap);
    }
    let kind = if full {
        CollectionKind::Full
    } else {
        CollectionKind::Partial
    };
    let n = gc.stats.full + gc.stats.partial + 1;
    let span =
        tracing::debug_span!("gc", n, kind = if full { "full" } else { "partial" }).entered();
    invoke_simple(heap, CallbackKind::PreGc, full);
    // After the pre-GC callbacks: the barriers they issue count for this collection.
    merge_remembered_sets(&mut gc, mutators);

    // ---- mark ----
    let t_mark = Instant::now();
    let mark_span = tracing::debug_span!("gc_mark").entered();
    gc.young_parity = Header::flip_parity(gc.young_parity);
    if full {
        gc.parity = Header::flip_parity(gc.parity);
        for obj in gc.remset.drain(..) {
            // SAFETY: remembered objects are live old objects (the world is stopped).
            let hdr = unsafe { obj.header() };
            let h = Header::from_raw(hdr.load(Ordering::Relaxed));
            hdr.store(h.without_remembered().raw(), Ordering::Relaxed);
        }
    } else {
        gc.remset.sort_unstable();
        gc.remset.dedup();
    }
    let verify = heap.verify.load(Ordering::Relaxed);
    let threads = mark_threads(config.mark_threads);
    // Tasks scanned as mark work (`TaskScan::WhileMarking`): the scanners and the tasks,
    // held until marking ends.
    let task_scanning = (config.task_scan == TaskScan::WhileMarking
        && heap.callbacks.any(CallbackKind::TaskScanner))
    .then(|| TaskScanning {
        scanners: heap.callbacks.snapshot(CallbackKind::TaskScanner),
        tasks: heap.tasks.lock().clone(),
        kind,
    });
    let mut stacks = std::mem::take(&mut gc.mark_stacks);
    let mut marker = Marker::new(
        heap.id(),
        full,
        gc.parity,
        gc.young_parity,
        me as *const MutatorShared as *mut c_void,
        stacks.pop().unwrap_or_default(),
    );
    let big_set = verify.then(|| {
        let lists = heap.big.lock();
        let set: HashSet<usize> = lists
            .young
            .iter()
            .chain(lists.old.iter())
            .map(|o| o.addr())
            .collect();
        Arc::new(set)
    });
    let task_scan: Option<&dyn ScanTask> = task_scanning.as_ref().map(|t| t as &dyn ScanTask);
    if let Some(set) = &big_set {
        marker.set_big_set(set.clone());
    }
    marker.task_scan = task_scan;
    // The helper threads and their markers (parallel marking). A pool of the wrong size
    // (first collection, or `mark_threads` changed) is started after the world resumes
    // (`ensure_pool`): this collection marks alone rather than start threads in its pause.
    let pool = heap.pool.lock();
    let pool_ok = threads > 1 && pool.as_ref().map(|p| p.helpers()) == Some(threads - 1);
    let mut helpers: Vec<Box<Marker<'_>>> = match pool.as_ref() {
        Some(p) if pool_ok => (0..p.helpers())
            .map(|_| {
                let mut h = Box::new(Marker::new(
                    heap.id(),
                    full,
                    gc.parity,
                    gc.young_parity,
                    std::ptr::null_mut(),
                    stacks.pop().unwrap_or_default(),
                ));
                if let Some(set) = &big_set {
                    h.set_big_set(set.clone());
                }
                h.task_scan = task_scan;
                h
            })
            .collect(),
        _ => Vec::new(),
    };
    let team = pool.as_ref().filter(|_| !helpers.is_empty()).map(|p| {
        let mut stealers = vec![marker.stealer()];
        stealers.extend(helpers.iter().map(|h| h.stealer()));
        Team {
            pool: p,
            helpers: helpers
                .iter_mut()
                .map(|h| &mut **h as *mut Marker<'_>)
                .collect(),
            stealers,
        }
    });
    if let Some(t) = &team {
        marker.set_team(t, config.parallel_threshold);
    }
    let marker_ptr: *mut Marker<'_> = &mut marker;
    // Published before verifying too: C mark functions reach the marker through their
    // ptls (gc_mark_queue_obj), in verify mode as in marking.
    me.head
        .marker
        .store(marker_ptr as *mut c_void, Ordering::Release);
    if verify && !full {
        let _v = tracing::debug_span!("gc_verify").entered();
        // SAFETY: marker_ptr is our live marker; no other reference to it is used while
        // the verification runs (C mark functions reach it through ptls).
        verify_remembered_set(heap, unsafe { &mut *marker_ptr });
    }
    // SAFETY: marker_ptr points to our live marker; while these calls run no other
    // reference to it is held (mark functions reach it through ptls), and every thread
    // is stopped.
    unsafe { mark_roots(heap, &gc, marker_ptr, full, task_scanning.as_ref()) };
    let mark_time = t_mark.elapsed();

    // ---- weak references, finalizers, reference queue, hooks ----
    let t_weak = Instant::now();
    let weak_span = tracing::debug_span!("gc_weak").entered();
    // SAFETY: as for mark_roots; the mark stack is empty.
    let weak = unsafe { crate::weak::process(heap, marker_ptr, full, gc.parity) };
    me.head
        .marker
        .store(std::ptr::null_mut(), Ordering::Release);
    tracing::trace!(
        cleared = weak.cleared,
        finalizable = weak.finalizable,
        tokens = weak.tokens,
        "weak references and finalizers"
    );
    drop(weak_span);
    let weak_time = t_weak.elapsed();
    marker.clear_team();
    drop(team);
    stacks.push(marker.take_stack());
    stacks.extend(helpers.iter_mut().map(|h| h.take_stack()));
    drop(helpers);
    drop(pool);
    gc.mark_stacks = keep_mark_stacks(stacks, heap.pages.lock().mapped_bytes());
    let objects_marked = marker.objects_marked();
    let team_drains = marker.team_drains;
    let helper_marked = marker.helper_marked;
    let kept_for_finalizers = marker.kept_for_finalizers;
    let next_remset = std::mem::take(&mut marker.next_remset);
    if !marker.errors.is_empty() {
        let mut errors = std::mem::take(&mut marker.errors);
        for e in &errors {
            tracing::error!(target: "gc_core::verify", "{e}");
        }
        gc.stats.verify_errors += errors.len() as u64;
        gc.verify_errors.append(&mut errors);
        let excess = gc.verify_errors.len().saturating_sub(1000);
        gc.verify_errors.drain(..excess);
    }
    let young_marked = Header::young_marked(gc.young_parity);
    drop(marker);
    drop(mark_span);

    // ---- sweep ----
    let t_sweep = Instant::now();
    let sweep_span = tracing::debug_span!("gc_sweep").entered();
    let parity = gc.parity;
    let mut totals = SweepTotals::default();
    sweep_scheduled(heap.id(), &mut gc, full, parity, young_marked, &mut totals);
    sweep_big(heap, full, parity, young_marked, &mut totals);
    let (big_live, big_old) = {
        let b = heap.big.lock();
        (b.live, b.old_bytes)
    };
    if full {
        if objects_marked > 0 {
            gc.mark_rate = Some(mark_time.as_secs_f64() / objects_marked as f64);
        }
    } else {
        gc.young_cap = young_cap(
            gc.young_cap,
            allocd,
            t_mark.elapsed(),
            objects_marked,
            gc.mark_rate,
            config.young_pause_goal,
            config.max_interval,
        );
    }
    let plan = TriggerPlan {
        other_live: big_live,
        other_old: big_old,
        young_weight: config.young_weight,
        discount: kept_for_finalizers,
        growth: config.growth,
        headroom: config.headroom as f64,
        min: config.min_interval,
        small_heap: config.small_heap,
        max: config.max_interval,
        reuse: config.resident_reuse,
        cap: gc.young_cap,
    };
    let (pages_in_use, mapped, pool_live, pool_old, unswept) = {
        let mut pages = heap.pages.lock();
        let freed_before = pages.totals.freed;
        // SAFETY: world stopped, page lock held, no page is held by a thread.
        unsafe {
            pages.begin_sweep(
                SweepParams {
                    full,
                    parity,
                    young_marked,
                },
                plan,
            )
        };
        // Until the sweep is complete, the trigger is estimated from what is known.
        heap.trigger.store(
            plan.interval(pages.totals.live, pages.totals.old, 0),
            Ordering::Relaxed,
        );
        if !config.lazy_sweep {
            // SAFETY: as above.
            unsafe { pages.sweep_waiting(&heap.trigger, Sweeper::Pause) };
            totals.pool_freed = (pages.totals.freed - freed_before) as usize;
            totals.freed += totals.pool_freed;
        }
        (
            pages.pages_in_use(),
            pages.mapped_bytes(),
            pages.totals.live,
            pages.totals.old,
            pages.unswept_pages(),
        )
    };
    gc.remset = next_remset;
    if full && unswept == 0 {
        gc.old_after_full = pool_old + big_old;
        gc.chain_base = gc.old_after_full;
        learn_yield(heap, &mut gc, &config);
    } else if full {
        gc.full_pending = true;
    }
    drop(sweep_span);
    let sweep_time = t_sweep.elapsed();

    let live = pool_live + big_live;
    // Keep as many free pages as the next interval will use; the rest go back to the OS
    // after the pause (`return_memory`).
    let returned = heap
        .pages
        .lock()
        .trim(config.keep_free_pages, IDLE_COLLECTIONS);
    tracing::trace!(
        returned,
        unswept,
        "pages to return to the OS, left to sweep"
    );
    invoke_simple(heap, CallbackKind::PostGc, full);

    let pause = t0.elapsed();
    let st = &mut gc.stats;
    if full {
        st.full += 1;
    } else {
        st.partial += 1;
    }
    // Pool pages count their freed bytes as they are swept (`PageAlloc::totals`).
    st.bytes_freed += (totals.freed - totals.pool_freed) as u64;
    st.pages_in_use = pages_in_use as u64;
    st.mapped_bytes = mapped as u64;
    st.sweep_functions_run += totals.sweepfns;
    st.weak_refs_cleared += weak.cleared;
    st.finalizers_queued += weak.finalizable;
    st.tokens_queued += weak.tokens;
    st.total_weak_time += weak_time;
    st.total_mark_time += mark_time;
    st.objects_marked += objects_marked;
    st.parallel_drains += team_drains;
    st.total_sweep_time += sweep_time;
    st.big_zero_tail_bytes += totals.zero_tails as u64;
    st.record_pause(pause);
    st.record_longest(PauseRecord {
        number: st.full + st.partial,
        full,
        pause,
        time_to_safepoint: tts,
        leftover_sweep: leftover_time,
        mark: mark_time,
        sweep: sweep_time,
        objects_marked,
        parallel_drains: team_drains,
        objects_marked_by_helpers: helper_marked,
    });
    tracing::debug!(
        allocd,
        objects_marked,
        freed = totals.freed,
        live,
        unswept,
        pause_us = pause.as_micros() as u64,
        mark_us = mark_time.as_micros() as u64,
        weak_us = weak_time.as_micros() as u64,
        sweep_us = sweep_time.as_micros() as u64,
        "collection done"
    );
    drop(span);
    let info = CollectionInfo {
        kind,
        pause,
        time_to_safepoint: tts,
        mark_time,
        sweep_time,
        weak_time,
        weak_refs_cleared: weak.cleared,
        finalizers_queued: weak.finalizable,
        tokens_queued: weak.tokens,
        objects_marked,
        bytes_freed: totals.freed as u64,
        live_bytes: live as u64,
    };
    (info, weak.notify)
}

/// The task scanners of a collection whose tasks are mark work
/// ([`TaskScan::WhileMarking`], Julia's way), and the tasks, held until marking ends.
struct TaskScanning {
    scanners: Arc<[(CallbackId, Arc<Callback>)]>,
    tasks: Vec<Arc<Task>>,
    kind: CollectionKind,
}

impl ScanTask for TaskScanning {
    unsafe fn scan(&self, m: *mut Marker<'_>, task: &Task) {
        for (_, cb) in self.scanners.iter() {
            match &**cb {
                // SAFETY: m is valid and unaliased during the call (caller's contract).
                Callback::TaskScanner(f) => f(unsafe { &mut *m }, task, self.kind),
                // SAFETY: a C task scanner of Julia's signature, given a registered task's
                // handle and, as Julia passes, whether it is its thread's own stack (the
                // thread's root task); it reaches this thread's marker through its ptls.
                Callback::CTaskScanner(f) => unsafe {
                    f(task.c_handle(), task.is_thread_stack() as c_int)
                },
                _ => {}
            }
        }
    }
}

/// The least the pause goal bounds the interval between collections to, as a fraction
/// of `max_interval` (`HeapConfig::young_pause_goal`): a cost that does not shrink
/// with the young generation (roots, a large remembered set) costs at most four times
/// the partial collections.
pub(crate) const YOUNG_CAP_FLOOR: f64 = 0.25;

/// The most bytes to allocate before the next collection after a partial collection
/// that followed `allocd` bytes of allocation, took `cost` (marking and in-pause
/// sweeping) and marked `marked` objects, with `rate` seconds of marking per object
/// (the last full collection's; the partial collection's own without one) and the
/// pause goal `goal`. The survivors' part of the cost (`marked * rate`) is what fewer
/// bytes between collections shortens, in proportion at the density just seen; the
/// bound is the bytes whose survivors fit in what the rest of the cost leaves of the
/// goal, at most twice `allocd` (it grows back twofold per collection), and at least
/// `YOUNG_CAP_FLOOR` times `max_interval`. Where the rest (roots, the remembered set)
/// reaches the goal alone it grows back too: more collections would not make one
/// shorter. `usize::MAX` (no bound) without a goal or once it reaches `max_interval`,
/// and while none is in force (`prev`, the bound the collection came under, is
/// `usize::MAX`) and the pause kept to the goal: a program whose collections come
/// early for other reasons (a small heap's interval, explicit collections) is not
/// bounded to twice what it allocated before a pause that was short anyway.
pub(crate) fn young_cap(
    prev: usize,
    allocd: usize,
    cost: Duration,
    marked: u64,
    rate: Option<f64>,
    goal: Duration,
    max_interval: usize,
) -> usize {
    let (cost, goal) = (cost.as_secs_f64(), goal.as_secs_f64());
    if goal == 0.0 || marked == 0 || allocd == 0 || (prev == usize::MAX && cost <= goal) {
        return usize::MAX;
    }
    let survivors = rate.map_or(cost, |r| (marked as f64 * r).min(cost));
    let fixed = cost - survivors;
    let ratio = if fixed >= goal {
        2.0
    } else {
        (goal - fixed) / survivors.max(1e-9)
    };
    let cap = allocd as f64 * ratio.min(2.0);
    if cap >= max_interval as f64 {
        usize::MAX
    } else {
        cap.max(max_interval as f64 * YOUNG_CAP_FLOOR) as usize
    }
}

/// The number of collector threads for a `mark_threads` setting (0: one per core).
pub(crate) fn mark_threads(setting: usize) -> usize {
    if setting != 0 {
        return setting;
    }
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Marks from every root until the mark stack is empty.
///
/// # Safety
/// `m` is the running collection's marker and no reference to it is alive.
unsafe fn mark_roots(
    heap: &HeapInner,
    gc: &GcState,
    m: *mut Marker<'_>,
    full: bool,
    task_scanning: Option<&TaskScanning>,
) {
    let kind = if full {
        CollectionKind::Full
    } else {
        CollectionKind::Partial
    };
    let mut roots: Vec<ObjRef> = heap.roots.lock().slots.iter().flatten().copied().collect();
    // Finalizers found by earlier collections and not run yet keep their objects.
    {
        let fin = heap.fin.lock();
        if !fin.is_empty() {
            roots.extend(fin.roots());
        }
    }
    let types: Vec<ObjRef> = if full {
        heap.types.lock().iter().map(|t| t.as_obj()).collect()
    } else {
        Vec::new()
    };
    // Every root is queued first; the mark stack is drained once, by every collector
    // thread, at the end.
    // SAFETY: m is valid (caller); each borrow ends before anything else touches it.
    unsafe {
        for obj in types.into_iter().chain(roots) {
            (*m).queue(obj);
        }
    }
    if heap.callbacks.any(CallbackKind::RootScanner) {
        for (_, cb) in heap.callbacks.snapshot(CallbackKind::RootScanner).iter() {
            match &**cb {
                // SAFETY: m is valid and unaliased during the call.
                Callback::RootScanner(f) => f(unsafe { &mut *m }, kind),
                // SAFETY: a C root scanner (`Callback::c_root_scanner`'s contract: called while
                // marking, world stopped); it reaches the marker through its ptls.
                Callback::CRootScanner(f) => unsafe { f(full as c_int) },
                _ => {}
            }
        }
    }
    if let Some(job) = task_scanning {
        // Julia's way: each task is mark work, scanned by the collector thread that
        // takes it.
        for task in &job.tasks {
            // SAFETY: m is valid; the job holds the task until marking ends.
            unsafe { (*m).push_task(Arc::as_ptr(task)) };
        }
    } else if heap.callbacks.any(CallbackKind::TaskScanner) {
        let tasks = heap.tasks.lock().clone();
        let scanners = heap.callbacks.snapshot(CallbackKind::TaskScanner);
        for task in &tasks {
            for (_, cb) in scanners.iter() {
                match &**cb {
                    // SAFETY: as above.
                    Callback::TaskScanner(f) => f(unsafe { &mut *m }, task, kind),
                    // SAFETY: a C task scanner given a registered task's handle
                    // (`Callback::c_task_scanner`'s contract).
                    Callback::CTaskScanner(f) => unsafe { f(task.c_handle(), full as c_int) },
                    _ => {}
                }
            }
        }
    }
    if !full {
        for &obj in &gc.remset {
            // SAFETY: m as above; remembered objects are live old objects, scanned as
            // roots of their own.
            unsafe { (*m).push_to_scan(obj) };
        }
    }
    // SAFETY: as above.
    unsafe { Marker::drain(m) };
}

/// Verify mode: every old object outside the remembered set must have no young child.
fn verify_remembered_set(heap: &HeapInner, marker: &mut Marker<'_>) {
    let m: *mut Marker<'_> = marker;
    let pages = heap.pages.lock();
    for &page in &pages.in_use {
        // Entries of pages released since the last collection are stale.
        let Some((cell, class)) = page.cell_layout() else {
            continue;
        };
        for i in 0..cells_per_page(class) {
            let obj = page.object_at(i, cell);
            // SAFETY: a cell header of a page of ours (always mapped).
            let h = Header::from_raw(unsafe {
                (*((obj - HEADER_SIZE) as *const AtomicUsize)).load(Ordering::Relaxed)
            });
            if h.is_allocated() && h.is_old_unremembered() {
                // SAFETY: an allocated old object; m is our marker, unaliased.
                unsafe { Marker::verify_object(m, ObjRef::from_addr(obj).expect("non-null")) };
            }
        }
    }
    drop(pages);
    let old: Vec<ObjRef> = heap.big.lock().old.clone();
    for obj in old {
        // SAFETY: a live big old object; m as above.
        unsafe { Marker::verify_object(m, obj) };
    }
}

/// Old bytes freed by full collections since the heap was created.
fn old_freed(heap: &HeapInner) -> u64 {
    heap.pages.lock().totals.old_freed + heap.big.lock().old_freed
}

/// Judges the last full collection, its sweep complete: its yield is the old bytes it
/// freed over what the old generation grew by since the full collection before, and the
/// next automatic one is put off by its inverse (`HeapConfig::full_defer`). Growth below
/// the least interval between collections says too little to judge by.
fn learn_yield(heap: &HeapInner, gc: &mut GcState, config: &crate::HeapConfig) {
    if gc.full_growth < config.min_interval {
        return;
    }
    let freed = old_freed(heap).saturating_sub(gc.old_freed_before_full) as f64;
    let yield_ = freed / gc.full_growth as f64;
    gc.full_defer = if yield_ > 0.0 {
        (1.0 / yield_).clamp(1.0, config.full_defer)
    } else {
        config.full_defer
    };
    tracing::debug!(
        growth = gc.full_growth,
        freed,
        defer = gc.full_defer,
        "full collection's yield"
    );
}

#[derive(Default)]
struct SweepTotals {
    freed: usize,
    pool_freed: usize,
    sweepfns: u64,
    /// Bytes of zero pages at the end of big objects returned to the OS.
    zero_tails: usize,
    /// Bytes of big objects given back to the system allocator.
    system_freed: usize,
}

/// Runs the sweep function of every scheduled object found dead, exactly once.
fn sweep_scheduled(
    heap_id: HeapId,
    gc: &mut GcState,
    full: bool,
    parity: usize,
    young_marked: usize,
    totals: &mut SweepTotals,
) {
    let list = std::mem::take(&mut gc.sweep_list);
    let mut keep = Vec::with_capacity(list.len());
    for obj in list {
        // SAFETY: scheduled objects are live until this sweep frees them.
        let h = unsafe { obj.header_bits() };
        if !h.is_dead(full, parity, young_marked) {
            keep.push(obj);
            continue;
        }
        // SAFETY: h is a live header: its type is a live type object.
        let desc = unsafe { &*(h.type_addr() as *const crate::types::TypeDesc) };
        match crate::lookup::page_of(obj.addr()) {
            Some(page) if page.cell_layout().is_some() && page.is_owned_by(heap_id) => {
                page.clear_sweep(obj.addr())
            }
            // SAFETY: a big object that is still allocated.
            _ => unsafe { BigHeader::of(obj) }
                .sched
                .store(false, Ordering::Relaxed),
        }
        desc.sweep.run(obj);
        totals.sweepfns += 1;
    }
    gc.sweep_list = keep;
}

/// Tells the notify_external_free listeners that `obj` is about to be freed.
pub(crate) fn notify_free(list: &[(CallbackId, Arc<Callback>)], obj: ObjRef) {
    for (_, cb) in list {
        match &**cb {
            Callback::ExternalFree(f) => f(obj),
            // SAFETY: a C callback of the seed's signature, given the dying object
            // (`Callback::c_external_free`'s contract).
            Callback::CExternalFree(f) => unsafe { f(obj.as_ptr().cast()) },
            _ => {}
        }
    }
}

fn sweep_big(
    heap: &HeapInner,
    full: bool,
    parity: usize,
    young_marked: usize,
    totals: &mut SweepTotals,
) {
    let mut guard = heap.big.lock();
    let lists = &mut *guard;
    let system_freed_at_start = totals.system_freed;
    let notify = heap
        .callbacks
        .any(CallbackKind::ExternalFree)
        .then(|| heap.callbacks.snapshot(CallbackKind::ExternalFree));
    let free = |obj: ObjRef, size: usize, totals: &mut SweepTotals| {
        // SAFETY: unmarked, so unreachable; not freed yet. From here on no lookup takes
        // it for an object, so a listener cannot root it again.
        unsafe { big::retire(obj) };
        if let Some(list) = &notify {
            notify_free(list, obj);
        }
        totals.freed += size;
        // SAFETY: unmarked, so unreachable; freed once (it leaves its list here).
        totals.system_freed += unsafe { big::free(obj) };
    };
    if full {
        let old = std::mem::take(&mut lists.old);
        let mut keep = Vec::with_capacity(old.len());
        for obj in old {
            // SAFETY: objects on the big lists are allocated until freed here.
            let h = Header::from_raw(unsafe { BigHeader::of(obj) }.tag.load(Ordering::Relaxed));
            // SAFETY: as above.
            let size = unsafe { big::size(obj) } + big::BIG_HEADER;
            if h.is_marked_old(parity) {
                keep.push(obj);
            } else {
                lists.old_freed += size as u64;
                lists.old_bytes -= size;
                lists.live -= size;
                free(obj, size, totals);
            }
        }
        lists.old = keep;
    }
    // Young objects: dead, still young, or promoted by this collection's marking.
    let mut tails = big::ZeroTails::default();
    let young = std::mem::take(&mut lists.young);
    let mut keep_young = Vec::with_capacity(young.len());
    for obj in young {
        // SAFETY: objects on the big lists are allocated until freed here.
        let h = Header::from_raw(unsafe { BigHeader::of(obj) }.tag.load(Ordering::Relaxed));
        // SAFETY: as above.
        let size = unsafe { big::size(obj) } + big::BIG_HEADER;
        if h.is_old() {
            lists.old_bytes += size;
            lists.old.push(obj);
            // Promoted: it has lived through two collections, so whatever its client
            // left of it unused is likely to stay so.
            if size > big::OS_PAGE {
                // SAFETY: a live big object; the world stays stopped until the release
                // below, and no object is freed in between (only dead ones are).
                unsafe { tails.add(obj) };
            }
        } else if h.is_young_marked(young_marked) {
            keep_young.push(obj);
        } else {
            lists.live -= size;
            free(obj, size, totals);
        }
    }
    lists.young = keep_young;
    lists.freed_since_trim += totals.system_freed - system_freed_at_start;
    // SAFETY: the objects added are promoted, so live, and the world is still stopped.
    totals.zero_tails += unsafe { tails.release() };
}

/// Bytes of big objects given back to the system allocator (by any collection) before
/// it is asked to trim its heap ([`return_memory`], after the pause): 1 MiB. Partial
/// collections count too: GAP 4.15.1's `wordrep.tst` frees growing words of a few KB in
/// partial collections only, and counting full ones alone left the allocator's heap 16
/// MB larger (testinstall's peak RSS 440 MB against 427-428 MB, alternated runs; 400
/// trims of ~1.2 ms each on the helper thread instead of 64).
const TRIM_AFTER_FREED: usize = 1 << 20;

/// Gives back the memory of the free pool pages the pause chose (`PageAlloc::trim`) and
/// of the page runs freed and not reused since the collection before
/// (`bigrun::age_and_release`), and if collections gave the system allocator enough
/// big objects since the last time ([`TRIM_AFTER_FREED`]), asks it to return the free
/// memory inside its heap (`big::trim_system_heap`); counts both. Runs outside the
/// pauses.
fn return_memory(heap: &HeapInner) {
    let trimmed = heap.pages.lock().take_trimmed();
    if !trimmed.is_empty() {
        let (released, kept) = crate::page::release_pages(trimmed);
        heap.pages.lock().put_back(released, kept);
    }
    let t = Instant::now();
    let released = crate::bigrun::age_and_release(false);
    let release_ns = t.elapsed().as_nanos().min(u64::MAX as u128) as u64;
    let trim = {
        let mut big = heap.big.lock();
        let trim = big.freed_since_trim >= TRIM_AFTER_FREED;
        if trim {
            big.freed_since_trim = 0;
        }
        trim
    };
    let t = Instant::now();
    if trim {
        big::trim_system_heap();
    }
    let trim_ns = t.elapsed().as_nanos().min(u64::MAX as u128) as u64;
    let mut pages = heap.pages.lock();
    if trim {
        pages.counters.malloc_trims += 1;
        pages.counters.malloc_trim_ns += trim_ns;
    }
    pages.counters.big_slots_released += released as u64;
    pages.counters.big_slot_release_ns += release_ns;
}

/// Calls the pre_gc or post_gc callbacks.
fn invoke_simple(heap: &HeapInner, kind: CallbackKind, full: bool) {
    if !heap.callbacks.any(kind) {
        return;
    }
    let ck = if full {
        CollectionKind::Full
    } else {
        CollectionKind::Partial
    };
    for (_, cb) in heap.callbacks.snapshot(kind).iter() {
        match &**cb {
            Callback::PreGc(f) | Callback::PostGc(f) => f(ck),
            // SAFETY: C callbacks of the seed's signature, called once per collection with
            // the world stopped (`Callback::c_pre_gc`/`c_post_gc`'s contract).
            Callback::CPreGc(f) | Callback::CPostGc(f) => unsafe { f(full as c_int) },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pause goal's bound on the bytes between collections: the survivors' part of
    /// the cost fitted in what the rest leaves of the goal at the density just seen,
    /// grown back at most twofold, within a quarter of `max_interval` and no bound.
    #[test]
    fn the_young_cap_follows_the_pause_goal() {
        let ms = Duration::from_millis;
        let (goal, mib, max) = (ms(10), 1 << 20, 32 << 20);
        // The collection came under a bound (the cases below but the last).
        let bounded = 8 * mib;
        let cap =
            |allocd, cost, marked, rate| young_cap(bounded, allocd, cost, marked, rate, goal, max);
        // No goal, nothing marked or allocated: no bound.
        assert_eq!(
            young_cap(bounded, max, ms(40), 1000, None, Duration::ZERO, max),
            usize::MAX
        );
        assert_eq!(cap(max, ms(40), 0, None), usize::MAX);
        assert_eq!(cap(0, ms(40), 1000, None), usize::MAX);
        // Without a full collection's rate, all of the cost is the survivors'.
        assert_eq!(cap(32 * mib, ms(20), 1000, None), 16 * mib);
        assert_eq!(cap(12 * mib, ms(15), 1000, None), 8 * mib);
        assert_eq!(cap(32 * mib, ms(100), 1000, None), 8 * mib);
        // 1,000,000 survivors at 10 ns are 10 of the 16 ms; the other 6 leave 4 ms.
        assert_eq!(cap(20 * mib, ms(16), 1_000_000, Some(10e-9)), 8 * mib);
        // Roots and the remembered set alone over the goal: grown back twofold.
        assert_eq!(cap(10 * mib, ms(30), 1000, Some(10e-9)), 20 * mib);
        // Under the goal: grown by as much, at most twofold, unbounded at the maximum.
        assert_eq!(cap(8 * mib, ms(8), 1000, None), 10 * mib);
        assert_eq!(cap(10 * mib, ms(1), 1000, None), 20 * mib);
        assert_eq!(cap(20 * mib, ms(1), 1000, None), usize::MAX);
        // No bound in force and a pause within the goal: none comes, however little was
        // allocated before it; one over the goal brings one.
        let free = |allocd, cost| young_cap(usize::MAX, allocd, cost, 1000, None, goal, max);
        assert_eq!(free(2 * mib, ms(8)), usize::MAX);
        assert_eq!(free(2 * mib, ms(10)), usize::MAX);
        assert_eq!(free(32 * mib, ms(20)), 16 * mib);
    }

    fn stack(words: usize) -> Vec<usize> {
        Vec::with_capacity(words)
    }

    fn capacities(stacks: &[Vec<usize>]) -> Vec<usize> {
        stacks.iter().map(|s| s.capacity()).collect()
    }

    /// The stacks kept fit in a sixteenth of the mapped pool bytes (at least
    /// `MARK_STACKS_KEPT_MIN`), the largest that fit first, and the largest comes out
    /// first (the collecting thread's marker pops it).
    #[test]
    fn mark_stacks_are_kept_within_the_budget_largest_first() {
        let words = |bytes: usize| bytes / std::mem::size_of::<usize>();
        // A 2 GiB heap keeps a 64 MiB stack and a small one.
        let kept = keep_mark_stacks(
            vec![stack(words(4096 * 8)), stack(words(64 << 20))],
            2 << 30,
        );
        assert_eq!(capacities(&kept), vec![words(4096 * 8), words(64 << 20)]);
        assert_eq!(kept.last().unwrap().capacity(), words(64 << 20));
        // A small heap keeps only what fits in the minimum.
        let kept = keep_mark_stacks(
            vec![stack(words(64 << 20)), stack(words(512 << 10))],
            8 << 20,
        );
        assert_eq!(capacities(&kept), vec![words(512 << 10)]);
        // Two that do not both fit: the larger one is kept.
        let kept = keep_mark_stacks(
            vec![stack(words(40 << 20)), stack(words(50 << 20))],
            1 << 30,
        );
        assert_eq!(capacities(&kept), vec![words(50 << 20)]);
    }
}
