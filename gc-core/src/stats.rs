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
}

const MAX_PAUSE_SAMPLES: usize = 1 << 16;

impl StatsAcc {
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
    /// the samples) as they are: cheap enough to run at every collection.
    pub(crate) fn publish_counters(&self, out: &mut GcStats) {
        let (p50, p99) = (out.p50_pause, out.p99_pause);
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
