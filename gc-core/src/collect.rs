//! A collection: stop the world, mark, (weak processing, reserved), sweep, resume.
//!
//! Phases, each a `tracing` span with its figures:
//! 1. **stop**: set the safepoint flag; wait until every other attached thread is
//!    parked at a safepoint or inside a GC-safe region.
//! 2. **prepare**: take back every thread's allocation pages and merge its remembered
//!    set, scheduled sweeps and young big objects; decide full or partial; pre_gc.
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

use crate::big::{self, BigHeader};
use crate::callbacks::{Callback, CallbackId, CallbackKind};
use crate::error::GcError;
use crate::heap::{GcState, HeapInner};
use crate::mark::Marker;
use crate::mutator::{save_registers, MutatorShared, RUNNING};
use crate::object::{header_is_allocated, ObjRef, FREE_END, HEADER_SIZE, MARK, OLD, REMEMBERED};
use crate::page::PageMeta;
use crate::pagetable;
use crate::sizeclass::{cells_per_page, FIRST_CELL};
use crate::stats::CollectionInfo;
use crate::weak::{is_dead, QueueInner};
use crate::CollectionKind;
use std::collections::HashSet;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Free pages unused for this many collections are returned to the OS (madvise): a page
/// freed by one collection is usually needed again before the next.
const IDLE_COLLECTIONS: u32 = 4;

/// Runs a collection from mutator `me` (which must be running managed code).
pub(crate) fn collect(
    me: &MutatorShared,
    req: CollectionKind,
) -> Result<Option<CollectionInfo>, GcError> {
    if me.in_collection.load(Ordering::Relaxed) {
        return Err(GcError::DuringCollection { what: "collect" });
    }
    if me.state.load(Ordering::Relaxed) != RUNNING {
        return Err(GcError::InGcSafeRegion);
    }
    let heap = me.heap();
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
    loop {
        let waiting = w
            .mutators
            .iter()
            .filter(|m| {
                !std::ptr::eq(Arc::as_ptr(m), me) && m.state.load(Ordering::SeqCst) == RUNNING
            })
            .count();
        if waiting == 0 {
            break;
        }
        // The timeout only guards against a lost notification; threads notify.
        heap.cv_stopped.wait_for(&mut w, Duration::from_millis(1));
    }
    drop(stop_span);
    let mutators: Vec<Arc<MutatorShared>> = w.mutators.clone();
    drop(w);
    let time_to_safepoint = t0.elapsed();

    save_registers(me.regs.get());
    me.task.record_stop(&me.saved_registers());
    me.in_collection.store(true, Ordering::Relaxed);
    let (info, notify) = run(heap, me, &mutators, req, t0, time_to_safepoint);
    me.in_collection.store(false, Ordering::Relaxed);
    me.task.set_saved_sp(0);

    let mut w = heap.world.lock();
    w.collecting = false;
    w.last_full = info.kind == CollectionKind::Full;
    w.epoch += 1;
    heap.gc_flag.store(0, Ordering::SeqCst);
    heap.cv_resume.notify_all();
    drop(w);
    crate::weak::after_collection(me, notify);
    Ok(Some(info))
}

/// Merges the threads' allocation state into the heap: pages become unheld (the sweep
/// rebuilds their free lists from the headers), buffers are appended.
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
            if let Some(page) = pool.page.take() {
                // SAFETY: page lock held.
                unsafe { page.state() }.held = false;
            }
            pool.free = FREE_END;
            pool.bump = 0;
            pool.bump_end = 0;
        }
        gc.remset.append(&mut local.remset);
        gc.sweep_list.append(&mut local.sweep_list);
        weak.objs_young.append(&mut local.weak_objs);
        weak.objs_dirty |= std::mem::take(&mut local.weak_dirty);
        objects += std::mem::take(&mut local.objects);
        bytes += std::mem::take(&mut local.bytes);
    }
    if let Some(page) = gc.perm.page.take() {
        // SAFETY: page lock held.
        unsafe { page.state() }.held = false;
        gc.perm.free = FREE_END;
        gc.perm.bump = 0;
        gc.perm.bump_end = 0;
    }
    gc.stats.objects_allocated += objects;
    gc.stats.bytes_allocated += bytes;
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
    let allocd = heap.allocd.swap(0, Ordering::Relaxed);
    let config = heap.config.lock().clone();
    let full = match req {
        CollectionKind::Full => true,
        CollectionKind::Partial => false,
        CollectionKind::Auto => {
            let base = gc.old_after_full.max(config.min_interval);
            gc.old_bytes as f64 > base as f64 * (1.0 + config.full_growth)
        }
    };
    let kind = if full {
        CollectionKind::Full
    } else {
        CollectionKind::Partial
    };
    let n = gc.stats.full + gc.stats.partial + 1;
    let span =
        tracing::debug_span!("gc", n, kind = if full { "full" } else { "partial" }).entered();
    invoke_simple(heap, CallbackKind::PreGc, full);

    // ---- mark ----
    let t_mark = Instant::now();
    let mark_span = tracing::debug_span!("gc_mark").entered();
    if full {
        gc.parity ^= MARK;
        for obj in gc.remset.drain(..) {
            // SAFETY: remembered objects are live old objects (the world is stopped).
            let hdr = unsafe { obj.header() };
            hdr.store(hdr.load(Ordering::Relaxed) & !REMEMBERED, Ordering::Relaxed);
        }
    } else {
        gc.remset.sort_unstable();
        gc.remset.dedup();
    }
    let verify = heap.verify.load(Ordering::Relaxed);
    let mut marker = Marker::new(
        heap,
        full,
        gc.parity,
        me as *const MutatorShared as *mut c_void,
    );
    if verify {
        let lists = heap.big.lock();
        let set: HashSet<usize> = lists
            .young
            .iter()
            .chain(lists.old.iter())
            .map(|o| o.addr())
            .collect();
        drop(lists);
        marker.big_set = Some(set);
    }
    let marker_ptr: *mut Marker<'_> = &mut marker;
    // Published before verifying too: C mark functions reach the marker through their
    // ptls (gc_mark_queue_obj), in verify mode as in marking.
    me.marker
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
    unsafe { mark_roots(heap, &gc, marker_ptr, full) };
    let mark_time = t_mark.elapsed();

    // ---- weak references, finalizers, reference queue, hooks ----
    let t_weak = Instant::now();
    let weak_span = tracing::debug_span!("gc_weak").entered();
    // SAFETY: as for mark_roots; the mark stack is empty.
    let weak = unsafe { crate::weak::process(heap, marker_ptr, full, gc.parity) };
    me.marker.store(std::ptr::null_mut(), Ordering::Release);
    tracing::trace!(
        cleared = weak.cleared,
        finalizable = weak.finalizable,
        tokens = weak.tokens,
        "weak references and finalizers"
    );
    drop(weak_span);
    let weak_time = t_weak.elapsed();
    let objects_marked = marker.objects_marked;
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
    drop(marker);
    drop(mark_span);

    // ---- sweep ----
    let t_sweep = Instant::now();
    let sweep_span = tracing::debug_span!("gc_sweep").entered();
    let parity = gc.parity;
    let mut totals = SweepTotals::default();
    sweep_scheduled(heap.id(), &mut gc, full, parity, &mut totals);
    sweep_big(heap, full, parity, &mut totals);
    let (pages_in_use, mapped) = {
        let mut pages = heap.pages.lock();
        for &page in pages.in_use.iter() {
            // SAFETY: world stopped, page lock held, no page is held by a thread.
            let st = unsafe { page.state() };
            if full || st.has_young {
                // SAFETY: as above.
                unsafe { sweep_page(page, full, parity, &mut totals) };
            }
        }
        // SAFETY: every page's nfree/free_head were just refreshed or left untouched.
        let freed_pages = unsafe { pages.rebuild_lists() };
        tracing::trace!(freed_pages, free = pages.free_pages(), "pages");
        (pages.pages_in_use(), pages.mapped_bytes())
    };
    gc.remset = next_remset;
    if full {
        gc.old_bytes = totals.old_kept + totals.promoted;
        gc.old_after_full = gc.old_bytes;
    } else {
        gc.old_bytes += totals.promoted;
    }
    drop(sweep_span);
    let sweep_time = t_sweep.elapsed();

    let live = gc.old_bytes + totals.young_kept;
    // Objects kept only for their finalizers die at the next collection: they do not make
    // the heap grow (counted, they would double the interval after every collection that
    // finds many finalizable objects).
    let interval = (((live.saturating_sub(kept_for_finalizers)) as f64 * config.growth) as usize)
        .clamp(config.min_interval, config.max_interval);
    heap.trigger.store(interval, Ordering::Relaxed);
    // Keep as many free pages as the next interval will use; return the rest to the OS.
    let returned = heap
        .pages
        .lock()
        .trim(config.keep_free_pages, IDLE_COLLECTIONS);
    tracing::trace!(returned, "pages returned to the OS");
    invoke_simple(heap, CallbackKind::PostGc, full);

    let pause = t0.elapsed();
    let old_bytes = gc.old_bytes as u64;
    let st = &mut gc.stats;
    if full {
        st.full += 1;
    } else {
        st.partial += 1;
    }
    st.bytes_freed += totals.freed as u64;
    st.live_bytes = live as u64;
    st.old_bytes = old_bytes;
    st.pages_in_use = pages_in_use as u64;
    st.mapped_bytes = mapped as u64;
    st.sweep_functions_run += totals.sweepfns;
    st.weak_refs_cleared += weak.cleared;
    st.finalizers_queued += weak.finalizable;
    st.tokens_queued += weak.tokens;
    st.total_weak_time += weak_time;
    st.record_pause(pause);
    tracing::debug!(
        allocd,
        objects_marked,
        freed = totals.freed,
        promoted = totals.promoted,
        live,
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

/// Marks from every root until the mark stack is empty.
///
/// # Safety
/// `m` is the running collection's marker and no reference to it is alive.
unsafe fn mark_roots(heap: &HeapInner, gc: &GcState, m: *mut Marker<'_>, full: bool) {
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
    // SAFETY: m is valid (caller); each borrow ends before anything else touches it.
    unsafe {
        for obj in types.into_iter().chain(roots) {
            (*m).queue(obj);
            Marker::drain(m);
        }
    }
    if heap.callbacks.any(CallbackKind::RootScanner) {
        for (_, cb) in heap.callbacks.snapshot(CallbackKind::RootScanner).iter() {
            match &**cb {
                // SAFETY: m is valid and unaliased during the call.
                Callback::RootScanner(f) => f(unsafe { &mut *m }, kind),
                // SAFETY: a C root scanner; it reaches the marker through its ptls.
                Callback::CRootScanner(f) => unsafe { f(full as c_int) },
                _ => {}
            }
            // SAFETY: as above.
            unsafe { Marker::drain(m) };
        }
    }
    if heap.callbacks.any(CallbackKind::TaskScanner) {
        let tasks = heap.tasks.lock().clone();
        let scanners = heap.callbacks.snapshot(CallbackKind::TaskScanner);
        for task in &tasks {
            for (_, cb) in scanners.iter() {
                match &**cb {
                    // SAFETY: as above.
                    Callback::TaskScanner(f) => f(unsafe { &mut *m }, task, kind),
                    // SAFETY: a C task scanner given a registered task.
                    Callback::CTaskScanner(f) => unsafe {
                        f(Arc::as_ptr(task) as *mut _, full as c_int)
                    },
                    _ => {}
                }
                // SAFETY: as above.
                unsafe { Marker::drain(m) };
            }
        }
    }
    if !full {
        for &obj in &gc.remset {
            // SAFETY: remembered objects are live old objects; m as above.
            unsafe {
                Marker::scan_object(m, obj);
                Marker::drain(m);
            }
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
        let (cell, class) = page.cell_layout().expect("in use");
        for i in 0..cells_per_page(class) {
            let obj = page.object_at(i, cell);
            // SAFETY: a cell header of a page of ours (always mapped).
            let h =
                unsafe { (*((obj - HEADER_SIZE) as *const AtomicUsize)).load(Ordering::Relaxed) };
            if header_is_allocated(h) && h & OLD != 0 && h & REMEMBERED == 0 {
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

#[derive(Default)]
struct SweepTotals {
    freed: usize,
    promoted: usize,
    young_kept: usize,
    old_kept: usize,
    sweepfns: u64,
}

/// Runs the sweep function of every scheduled object found dead, exactly once.
fn sweep_scheduled(
    heap_id: usize,
    gc: &mut GcState,
    full: bool,
    parity: usize,
    totals: &mut SweepTotals,
) {
    let list = std::mem::take(&mut gc.sweep_list);
    let mut keep = Vec::with_capacity(list.len());
    for obj in list {
        // SAFETY: scheduled objects are live until this sweep frees them.
        let h = unsafe { obj.header_bits() };
        if !is_dead(h, full, parity) {
            keep.push(obj);
            continue;
        }
        // SAFETY: h is a live header: its type is a live type object.
        let desc = unsafe { &*((h & !crate::object::TAG_BITS) as *const crate::types::TypeDesc) };
        match pagetable::lookup(obj.addr()) {
            Some(page) if page.cell_layout().is_some() && page.owner() == heap_id => {
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
            // SAFETY: a C callback of the seed's signature, given the dying object.
            Callback::CExternalFree(f) => unsafe { f(obj.as_ptr().cast()) },
            _ => {}
        }
    }
}

fn sweep_big(heap: &HeapInner, full: bool, parity: usize, totals: &mut SweepTotals) {
    let mut guard = heap.big.lock();
    let lists = &mut *guard;
    let notify = heap
        .callbacks
        .any(CallbackKind::ExternalFree)
        .then(|| heap.callbacks.snapshot(CallbackKind::ExternalFree));
    let free = |obj: ObjRef, size: usize, totals: &mut SweepTotals| {
        if let Some(list) = &notify {
            notify_free(list, obj);
        }
        totals.freed += size;
        // SAFETY: unmarked, so unreachable; freed once (it leaves its list here).
        unsafe { big::free(obj) };
    };
    if full {
        // Old objects first, so that objects promoted below are not counted twice.
        let old = std::mem::take(&mut lists.old);
        let mut keep = Vec::with_capacity(old.len());
        for obj in old {
            // SAFETY: objects on the big lists are allocated until freed here.
            let h = unsafe { BigHeader::of(obj) }.tag.load(Ordering::Relaxed);
            // SAFETY: as above.
            let size = unsafe { big::size(obj) } + big::BIG_HEADER;
            if h & MARK == parity {
                keep.push(obj);
                totals.old_kept += size;
            } else {
                free(obj, size, totals);
            }
        }
        lists.old = keep;
    }
    let young = std::mem::take(&mut lists.young);
    let mut keep_young = Vec::with_capacity(young.len());
    for obj in young {
        // SAFETY: objects on the big lists are allocated until freed here.
        let bh = unsafe { &mut *((obj.addr() - big::BIG_HEADER) as *mut BigHeader) };
        let h = bh.tag.load(Ordering::Relaxed);
        // SAFETY: as above.
        let size = unsafe { big::size(obj) } + big::BIG_HEADER;
        if h & MARK == 0 {
            free(obj, size, totals);
        } else if bh.age {
            bh.age = false;
            bh.tag.store((h & !MARK) | OLD | parity, Ordering::Relaxed);
            totals.promoted += size;
            lists.old.push(obj);
        } else {
            bh.age = true;
            bh.tag.store(h & !MARK, Ordering::Relaxed);
            totals.young_kept += size;
            keep_young.push(obj);
        }
    }
    lists.young = keep_young;
}

/// Sweeps one pool page: frees dead cells into the page's free list (in address order),
/// ages or promotes surviving young objects.
///
/// # Safety
/// The world is stopped, the page lock held and the page held by no thread.
unsafe fn sweep_page(page: &'static PageMeta, full: bool, parity: usize, totals: &mut SweepTotals) {
    let (cell, class) = page.cell_layout().expect("in-use page");
    let n = cells_per_page(class);
    let first = page.base() + FIRST_CELL;
    // Free cells found, by index (a page has at most 1023 cells).
    let mut free_bits = [0u64; 16];
    // The new age bits: set for young survivors that stay young. Promoted and dead
    // objects have none, so the old bitmap is replaced wholesale.
    let mut new_ages = [0u64; 16];
    // The new allocation bitmap: set for every cell that stays allocated.
    let mut new_alloc = [0u64; 16];
    // SAFETY: collector with the world stopped (caller).
    let ages = unsafe { page.ages() };
    let mut nfree = 0u32;
    let mut has_young = false;
    for i in 0..n {
        let hp = first + i * cell;
        // SAFETY: a cell header inside the page (always mapped).
        let hdr = unsafe { &*(hp as *const AtomicUsize) };
        let h = hdr.load(Ordering::Relaxed);
        let free = if !header_is_allocated(h) {
            true
        } else if h & OLD != 0 {
            if full && h & MARK != parity {
                totals.freed += cell;
                true
            } else {
                totals.old_kept += cell;
                false
            }
        } else if h & MARK != 0 {
            let g = (hp + HEADER_SIZE - page.base()) >> 4;
            if ages[g >> 6] & (1 << (g & 63)) != 0 {
                hdr.store((h & !MARK) | OLD | parity, Ordering::Relaxed);
                totals.promoted += cell;
            } else {
                new_ages[g >> 6] |= 1 << (g & 63);
                hdr.store(h & !MARK, Ordering::Relaxed);
                totals.young_kept += cell;
                has_young = true;
            }
            false
        } else {
            totals.freed += cell;
            true
        };
        if free {
            nfree += 1;
            free_bits[i >> 6] |= 1 << (i & 63);
        } else {
            let g = (hp + HEADER_SIZE - page.base()) >> 4;
            new_alloc[g >> 6] |= 1 << (g & 63);
        }
    }
    *ages = new_ages;
    // SAFETY: collector with the world stopped (caller).
    unsafe { page.store_allocated(&new_alloc) };
    // Scheduled sweep bits of dead objects were cleared by `sweep_scheduled`.
    let mut head = FREE_END;
    if (nfree as usize) < n {
        // Thread the free cells in address order (a page left empty is released as a
        // whole by `rebuild_lists`, so its cells need no links).
        let mut last: *const AtomicUsize = std::ptr::null();
        for (w, &bits) in free_bits.iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let hp = first + i * cell;
                if last.is_null() {
                    head = hp;
                } else {
                    // SAFETY: `last` is the header of the previous free cell of this page.
                    unsafe { (*last).store(hp, Ordering::Relaxed) };
                }
                last = hp as *const AtomicUsize;
            }
        }
        if !last.is_null() {
            // SAFETY: as above.
            unsafe { (*last).store(FREE_END, Ordering::Relaxed) };
        }
    }
    // SAFETY: caller's contract.
    let st = unsafe { page.state() };
    st.nfree = nfree;
    st.free_head = head;
    st.has_young = has_young;
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
            // SAFETY: C callbacks of the seed's signature.
            Callback::CPreGc(f) | Callback::CPostGc(f) => unsafe { f(full as c_int) },
            _ => {}
        }
    }
}
