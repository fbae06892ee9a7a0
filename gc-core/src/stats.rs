//! Collection statistics: counts by kind, bytes allocated, freed and live, pause times.

use std::time::Duration;

/// A snapshot of a heap's statistics ([`crate::Heap::stats`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GcStats {
    /// Full collections run.
    pub full_collections: u64,
    /// Partial (young) collections run.
    pub partial_collections: u64,
    /// Objects allocated (by detached threads and attached threads up to their last
    /// safepoint in a collection).
    pub objects_allocated: u64,
    /// Bytes allocated, header and size-class rounding included.
    pub bytes_allocated: u64,
    /// Bytes freed by sweeps.
    pub bytes_freed: u64,
    /// Bytes live after the last collection (old generation estimate plus survivors).
    pub live_bytes: u64,
    /// Bytes of old objects after the last collection.
    pub old_bytes: u64,
    /// Number of pool pages holding objects after the last collection.
    pub pages_in_use: u64,
    /// Bytes of address space mapped for pool pages.
    pub mapped_bytes: u64,
    /// Total time the world was stopped.
    pub total_pause: Duration,
    /// Longest pause.
    pub max_pause: Duration,
    /// Median pause.
    pub p50_pause: Duration,
    /// 99th-percentile pause.
    pub p99_pause: Duration,
    /// Sweep functions run.
    pub sweep_functions_run: u64,
    /// Write-barrier violations found by the verify mode.
    pub verify_errors: u64,
    /// Weak references (objects and handles) cleared.
    pub weak_refs_cleared: u64,
    /// Finalizers queued to run (their objects found unreachable).
    pub finalizers_queued: u64,
    /// Finalizers run.
    pub finalizers_run: u64,
    /// Rust finalizers that panicked (caught; they count as run).
    pub finalizer_panics: u64,
    /// Reference-queue tokens queued.
    pub tokens_queued: u64,
    /// Total time in the weak phase (hooks, weak references, finalizers, queue).
    pub total_weak_time: Duration,
    /// Total time marking (roots, scanners, the mark stack), inside the pauses.
    pub total_mark_time: Duration,
    /// Objects marked, all collections together.
    pub objects_marked: u64,
    /// Drains of the mark stack that woke the helper threads (several threads marking),
    /// all collections together; 0 while one thread marks.
    pub parallel_drains: u64,
    /// Total time sweeping inside the pauses (sweep functions, big objects, and the pool
    /// pages the lazy sweep did not leave for later).
    pub total_sweep_time: Duration,
    /// Pool pages swept by allocating threads (the lazy sweep's part that the mutator
    /// pays: a thread that needs a page, reaches the trigger before the sweep ends, or
    /// asks for a collection, before the world stops).
    pub pages_swept_by_allocation: u64,
    /// Time allocating threads spent sweeping those pages (outside the pauses).
    pub allocation_sweep_time: Duration,
    /// Pool pages swept by the helper threads after the world resumed.
    pub pages_swept_in_background: u64,
    /// Time the helper threads spent sweeping them (on another core when one is free).
    pub background_sweep_time: Duration,
    /// Pool pages swept inside pauses (pages left over when a collection starts; all
    /// of them without lazy sweeping).
    pub pages_swept_in_pause: u64,
    /// Pages handed to allocating threads that were zero already (never used, or
    /// returned to the OS).
    pub pages_granted_fresh: u64,
    /// Pages handed to allocating threads that were used before and zeroed then
    /// (`memset` of 16 KiB).
    pub pages_granted_zeroed: u64,
    /// Partly used pages handed to allocating threads (their free lists).
    pub pages_granted_with_free_cells: u64,
    /// Free pages whose memory was returned to the OS (`madvise`).
    pub pages_returned: u64,
    /// Times an allocating thread that needed a page waited for the page lock (held
    /// by another allocating thread or by the background sweep, 16 pages at a time).
    pub page_lock_waits: u64,
    /// Time allocating threads waited for it (inside the mutator's time).
    pub page_lock_wait_time: Duration,
    /// Write barriers that fired (an old object got a young reference and entered the
    /// remembered set); the barriers that do not fire are inline and not counted.
    pub barrier_fires: u64,
    /// External (big) objects allocated.
    pub big_objects_allocated: u64,
    /// Bytes of external (big) objects allocated.
    pub big_bytes_allocated: u64,
    /// Bytes of whole zero pages at the end of big objects returned to the OS when they
    /// were promoted (the unused capacity a client left after shrinking them in place).
    pub big_zero_tail_bytes: u64,
    /// Times the system allocator was asked to return the free memory inside its heap
    /// (glibc's `malloc_trim`) after collections gave it a MiB of big objects back.
    pub malloc_trims: u64,
    /// Time those calls took (outside the pauses: on a helper thread, or on the
    /// collecting thread after the world resumed).
    pub malloc_trim_time: Duration,
    /// Bytes of freed page runs of big objects (3 to 16 pages) returned to the OS after
    /// collections, when no object took them for one mutator phase (the runs are
    /// process-wide: counted by the heap whose collection returned them).
    pub big_slot_bytes_released: u64,
    /// Time that took (outside the pauses, as `malloc_trim_time`).
    pub big_slot_release_time: Duration,
    /// The longest pauses (up to [`LONGEST_PAUSES`], longest first), each with its parts:
    /// what a long pause was made of.
    pub longest_pauses: Vec<PauseRecord>,
    /// Pool cells handed out per size class (index: class, cell sizes in
    /// [`crate::CELL_SIZES`]): cells of the pages granted minus those given back unused,
    /// so cells a thread still holds count as allocated.
    pub cells_by_class: Vec<u64>,
}

impl GcStats {
    /// The counters that say where the time and the pages went (sweeping by whom, pages
    /// granted by kind, pages returned, barriers that fired, big objects, cells per size
    /// class), as the members of a JSON object without its braces, for a statistics
    /// file (`GC_CORE_STATS_FILE`).
    pub fn detail_json(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let cells: Vec<String> = self.cells_by_class.iter().map(u64::to_string).collect();
        let longest: Vec<String> = self
            .longest_pauses
            .iter()
            .map(|r| {
                format!(
                    "{{\"number\": {}, \"full\": {}, \"pause_ms\": {:.3}, \"time_to_safepoint_ms\": {:.3}, \"leftover_sweep_ms\": {:.3}, \"mark_ms\": {:.3}, \"sweep_ms\": {:.3}, \"objects_marked\": {}, \"parallel_drains\": {}, \"objects_marked_by_helpers\": {}}}",
                    r.number,
                    r.full,
                    ms(r.pause),
                    ms(r.time_to_safepoint),
                    ms(r.leftover_sweep),
                    ms(r.mark),
                    ms(r.sweep),
                    r.objects_marked,
                    r.parallel_drains,
                    r.objects_marked_by_helpers
                )
            })
            .collect();
        format!(
            "\"pages_swept_by_allocation\": {}, \"allocation_sweep_ms\": {:.3}, \"pages_swept_in_background\": {}, \"background_sweep_ms\": {:.3}, \"pages_swept_in_pause\": {}, \"pages_granted_fresh\": {}, \"pages_granted_zeroed\": {}, \"pages_granted_with_free_cells\": {}, \"pages_returned\": {}, \"page_lock_waits\": {}, \"page_lock_wait_ms\": {:.3}, \"barrier_fires\": {}, \"big_objects_allocated\": {}, \"big_bytes_allocated\": {}, \"big_zero_tail_bytes\": {}, \"malloc_trims\": {}, \"malloc_trim_ms\": {:.3}, \"big_slot_bytes_released\": {}, \"big_slot_release_ms\": {:.3}, \"longest_pauses\": [{}], \"cells_by_class\": [{}]",
            self.pages_swept_by_allocation,
            ms(self.allocation_sweep_time),
            self.pages_swept_in_background,
            ms(self.background_sweep_time),
            self.pages_swept_in_pause,
            self.pages_granted_fresh,
            self.pages_granted_zeroed,
            self.pages_granted_with_free_cells,
            self.pages_returned,
            self.page_lock_waits,
            ms(self.page_lock_wait_time),
            self.barrier_fires,
            self.big_objects_allocated,
            self.big_bytes_allocated,
            self.big_zero_tail_bytes,
            self.malloc_trims,
            ms(self.malloc_trim_time),
            self.big_slot_bytes_released,
            ms(self.big_slot_release_time),
            longest.join(", "),
            cells.join(", ")
        )
    }
}

/// How many of the longest pauses the statistics keep ([`GcStats::longest_pauses`]).
pub const LONGEST_PAUSES: usize = 5;

/// One collection's pause and its parts ([`GcStats::longest_pauses`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PauseRecord {
    /// The collection's number (1 = the heap's first).
    pub number: u64,
    /// Full (true) or partial.
    pub full: bool,
    /// The whole pause.
    pub pause: Duration,
    /// Waiting for the threads to stop.
    pub time_to_safepoint: Duration,
    /// Sweeping pool pages the previous collection left (before marking).
    pub leftover_sweep: Duration,
    /// Marking.
    pub mark: Duration,
    /// Sweeping inside the pause.
    pub sweep: Duration,
    /// Objects marked.
    pub objects_marked: u64,
    /// Drains of the mark stack that woke the helper threads.
    pub parallel_drains: u64,
    /// Of `objects_marked`, those the helper threads marked (how the work split).
    pub objects_marked_by_helpers: u64,
}

/// What one collection did ([`crate::Mutator::collect`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CollectionInfo {
    /// Full or partial.
    pub kind: crate::CollectionKind,
    /// Time the world was stopped, including waiting for threads to reach a safepoint.
    pub pause: Duration,
    /// Time to stop the world.
    pub time_to_safepoint: Duration,
    /// Time spent marking.
    pub mark_time: Duration,
    /// Time spent sweeping.
    pub sweep_time: Duration,
    /// Time spent between mark and sweep (hooks, weak references, finalizers, queue).
    pub weak_time: Duration,
    /// Weak references cleared.
    pub weak_refs_cleared: u64,
    /// Finalizers queued to run.
    pub finalizers_queued: u64,
    /// Reference-queue tokens queued.
    pub tokens_queued: u64,
    /// Objects marked.
    pub objects_marked: u64,
    /// Bytes freed.
    pub bytes_freed: u64,
    /// Bytes live afterwards (estimate for partial collections).
    pub live_bytes: u64,
}

/// Running totals kept by the collector.
#[derive(Default)]
pub(crate) struct StatsAcc {
    pub full: u64,
    pub partial: u64,
    pub objects_allocated: u64,
    pub bytes_allocated: u64,
    pub bytes_freed: u64,
    pub live_bytes: u64,
    pub old_bytes: u64,
    pub pages_in_use: u64,
    pub mapped_bytes: u64,
    pub total_pause: Duration,
    pub max_pause: Duration,
    /// Pause times in nanoseconds (bounded: thinned by half when full).
    pub pauses: Vec<u64>,
    pub sweep_functions_run: u64,
    pub verify_errors: u64,
    pub weak_refs_cleared: u64,
    pub finalizers_queued: u64,
    pub tokens_queued: u64,
    pub total_weak_time: Duration,
    pub total_mark_time: Duration,
    pub objects_marked: u64,
    pub parallel_drains: u64,
    pub total_sweep_time: Duration,
    pub barrier_fires: u64,
    pub big_objects_allocated: u64,
    pub big_bytes_allocated: u64,
    pub big_zero_tail_bytes: u64,
    /// The longest pauses, longest first (at most `LONGEST_PAUSES`).
    pub longest: Vec<PauseRecord>,
}

const MAX_PAUSE_SAMPLES: usize = 1 << 16;

impl StatsAcc {
    /// Keeps `r` if it is among the `LONGEST_PAUSES` longest so far.
    pub(crate) fn record_longest(&mut self, r: PauseRecord) {
        if self.longest.len() == LONGEST_PAUSES
            && self.longest.last().is_some_and(|l| l.pause >= r.pause)
        {
            return;
        }
        let at = self.longest.partition_point(|l| l.pause >= r.pause);
        self.longest.insert(at, r);
        self.longest.truncate(LONGEST_PAUSES);
    }

    pub(crate) fn record_pause(&mut self, d: Duration) {
        self.total_pause += d;
        self.max_pause = self.max_pause.max(d);
        if self.pauses.len() >= MAX_PAUSE_SAMPLES {
            // Keep every other sample: percentiles stay representative, memory bounded.
            let thinned: Vec<u64> = self.pauses.iter().step_by(2).copied().collect();
            self.pauses = thinned;
        }
        self.pauses.push(d.as_nanos().min(u64::MAX as u128) as u64);
    }

    /// Copies every counter into `out`, leaving its percentiles (which need a sort of
    /// the samples) and the page allocator's counters (`HeapInner::complete_stats`) as
    /// they are: cheap enough to run at every collection.
    pub(crate) fn publish_counters(&self, out: &mut GcStats) {
        let (p50, p99) = (out.p50_pause, out.p99_pause);
        let cells_by_class = std::mem::take(&mut out.cells_by_class);
        *out = GcStats {
            full_collections: self.full,
            partial_collections: self.partial,
            objects_allocated: self.objects_allocated,
            bytes_allocated: self.bytes_allocated,
            bytes_freed: self.bytes_freed,
            live_bytes: self.live_bytes,
            old_bytes: self.old_bytes,
            pages_in_use: self.pages_in_use,
            mapped_bytes: self.mapped_bytes,
            total_pause: self.total_pause,
            max_pause: self.max_pause,
            p50_pause: p50,
            p99_pause: p99,
            sweep_functions_run: self.sweep_functions_run,
            verify_errors: self.verify_errors,
            weak_refs_cleared: self.weak_refs_cleared,
            finalizers_queued: self.finalizers_queued,
            finalizers_run: 0,
            finalizer_panics: 0,
            tokens_queued: self.tokens_queued,
            total_weak_time: self.total_weak_time,
            total_mark_time: self.total_mark_time,
            objects_marked: self.objects_marked,
            parallel_drains: self.parallel_drains,
            total_sweep_time: self.total_sweep_time,
            pages_swept_by_allocation: out.pages_swept_by_allocation,
            allocation_sweep_time: out.allocation_sweep_time,
            pages_swept_in_background: out.pages_swept_in_background,
            background_sweep_time: out.background_sweep_time,
            pages_swept_in_pause: out.pages_swept_in_pause,
            pages_granted_fresh: out.pages_granted_fresh,
            pages_granted_zeroed: out.pages_granted_zeroed,
            pages_granted_with_free_cells: out.pages_granted_with_free_cells,
            pages_returned: out.pages_returned,
            page_lock_waits: out.page_lock_waits,
            page_lock_wait_time: out.page_lock_wait_time,
            barrier_fires: self.barrier_fires,
            big_objects_allocated: self.big_objects_allocated,
            big_bytes_allocated: self.big_bytes_allocated,
            big_zero_tail_bytes: self.big_zero_tail_bytes,
            malloc_trims: out.malloc_trims,
            malloc_trim_time: out.malloc_trim_time,
            big_slot_bytes_released: out.big_slot_bytes_released,
            big_slot_release_time: out.big_slot_release_time,
            longest_pauses: self.longest.clone(),
            cells_by_class,
        };
    }

    pub(crate) fn snapshot(&self) -> GcStats {
        let mut sorted = self.pauses.clone();
        sorted.sort_unstable();
        let pct = |p: f64| -> Duration {
            if sorted.is_empty() {
                return Duration::ZERO;
            }
            let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
            Duration::from_nanos(sorted[idx])
        };
        let mut s = GcStats {
            p50_pause: pct(0.5),
            p99_pause: pct(0.99),
            ..GcStats::default()
        };
        self.publish_counters(&mut s);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_max() {
        let mut s = StatsAcc::default();
        for ms in 1..=100 {
            s.record_pause(Duration::from_millis(ms));
        }
        let snap = s.snapshot();
        assert_eq!(snap.max_pause, Duration::from_millis(100));
        assert_eq!(snap.p50_pause, Duration::from_millis(51));
        assert_eq!(snap.p99_pause, Duration::from_millis(99));
        assert_eq!(snap.total_pause, Duration::from_millis(5050));
    }

    #[test]
    fn the_longest_pauses_are_kept_longest_first() {
        let mut s = StatsAcc::default();
        for ms in [3, 9, 1, 7, 5, 8, 2, 9] {
            s.record_longest(PauseRecord {
                number: ms,
                pause: Duration::from_millis(ms),
                ..PauseRecord::default()
            });
        }
        let kept: Vec<u64> = s
            .longest
            .iter()
            .map(|r| r.pause.as_millis() as u64)
            .collect();
        assert_eq!(kept, [9, 9, 8, 7, 5]);
    }

    #[test]
    fn pause_samples_stay_bounded() {
        let mut s = StatsAcc::default();
        for i in 0..(MAX_PAUSE_SAMPLES * 3) {
            s.record_pause(Duration::from_nanos(i as u64));
        }
        assert!(s.pauses.len() <= MAX_PAUSE_SAMPLES);
        assert_eq!(
            s.max_pause,
            Duration::from_nanos((MAX_PAUSE_SAMPLES * 3 - 1) as u64)
        );
    }
}
