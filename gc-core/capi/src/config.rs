//! Heap configuration from C: `gc_config_t`, `gc_config_default`, and the default
//! configuration as the environment (`GC_CORE_*`) and the library
//! (`set_default_mark_threads`, for the seed's `jl_gc_compat_init`) adjust it.

use crate::entry::{arg, entry};
use gc_core::HeapConfig;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Heap configuration for `gc_heap_new`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gc_config_t {
    /// The least bytes allocated between two collections while fewer than `small_heap`
    /// bytes are live (twice that from then on); the first collection comes after half.
    pub min_interval: usize,
    /// The next collection comes after `(old live + young_weight * young live) * growth`
    /// bytes.
    pub growth: f64,
    /// Most bytes between two collections.
    pub max_interval: usize,
    /// Automatic collections are full when the old generation grew by this factor.
    pub full_growth: f64,
    /// Collect every N allocations per thread (0: off).
    pub stress_every: u64,
    /// Non-zero: verify the remembered set and every queued reference.
    pub verify: c_int,
    /// Free pages kept mapped after a collection.
    pub keep_free_pages: usize,
    /// Collector threads marking in parallel (0: one per core; 1: the collecting thread
    /// alone). Mark functions may then run on any of them, concurrently.
    pub mark_threads: usize,
    /// Non-zero: pool pages are swept after the world resumes, not inside the pause.
    pub lazy_sweep: c_int,
    /// How much young survivors count towards the next interval (0.0 to 1.0).
    pub young_weight: f64,
    /// Extra bytes between collections for small and middle-sized heaps
    /// (`live * headroom / (live + headroom)`; 0: none).
    pub headroom: usize,
    /// The interval may grow up to this multiple of the formula's to use free memory the
    /// heap already holds resident (1.0 or less: off).
    pub resident_reuse: f64,
    /// Live bytes from which the least interval is `2 * min_interval` (0: always).
    pub small_heap: usize,
    /// Helper threads sweeping pool pages in the background after a collection: 0 or 1
    /// (Julia's `--gcthreads=N,M`); only with `lazy_sweep` and more than one core.
    pub sweep_threads: usize,
    /// Old-generation size from which the room before a full collection grows with its
    /// square root (`full_growth * sqrt(knee * old)`; 0: always `full_growth * old`).
    pub full_growth_knee: usize,
    /// Most times the room above that an automatic full collection may be put off by
    /// when the last one found little garbage (the inverse of its yield; 1.0: never).
    pub full_defer: f64,
    /// Most bytes beyond that room a put-off full collection lets the old generation
    /// grow by (shrinking to nothing at `full_growth_knee`).
    pub full_defer_bytes: usize,
    /// The pause partial collections should stay within, in microseconds: the young
    /// generation shrinks (to a quarter at most) after longer ones (0: no goal).
    pub young_pause_goal_us: u64,
}

impl gc_config_t {
    /// The C view of a Rust configuration.
    fn from_rust(d: &HeapConfig) -> gc_config_t {
        gc_config_t {
            min_interval: d.min_interval,
            growth: d.growth,
            max_interval: d.max_interval,
            full_growth: d.full_growth,
            stress_every: 0,
            verify: 0,
            keep_free_pages: d.keep_free_pages,
            mark_threads: d.mark_threads,
            lazy_sweep: d.lazy_sweep as c_int,
            young_weight: d.young_weight,
            headroom: d.headroom,
            resident_reuse: d.resident_reuse,
            small_heap: d.small_heap,
            sweep_threads: d.sweep_threads,
            full_growth_knee: d.full_growth_knee,
            full_defer: d.full_defer,
            full_defer_bytes: d.full_defer_bytes,
            young_pause_goal_us: d.young_pause_goal.as_micros().min(u64::MAX as u128) as u64,
        }
    }

    /// The Rust configuration it describes (the fields C cannot set at their defaults).
    pub(crate) fn to_rust(self) -> HeapConfig {
        let d = HeapConfig::default();
        HeapConfig {
            min_interval: self.min_interval,
            growth: self.growth,
            max_interval: self.max_interval,
            full_growth: self.full_growth,
            full_growth_knee: self.full_growth_knee,
            full_defer: self.full_defer,
            full_defer_bytes: self.full_defer_bytes,
            young_pause_goal: std::time::Duration::from_micros(self.young_pause_goal_us),
            stress_every: (self.stress_every != 0).then_some(self.stress_every),
            verify: self.verify != 0,
            keep_free_pages: self.keep_free_pages,
            mark_threads: self.mark_threads,
            task_scan: d.task_scan,
            parallel_threshold: d.parallel_threshold,
            lazy_sweep: self.lazy_sweep != 0,
            young_weight: self.young_weight,
            headroom: self.headroom,
            resident_reuse: self.resident_reuse,
            small_heap: self.small_heap,
            sweep_threads: self.sweep_threads,
        }
    }
}

/// Fills `cfg` with the default configuration, adjusted by the `GC_CORE_*` environment
/// variables when set (as for the default heap, see `gc_default_heap`).
///
/// # Safety
/// `cfg` is null or points to writable memory for a `gc_config_t`.
#[no_mangle]
pub unsafe extern "C" fn gc_config_default(cfg: *mut gc_config_t) -> c_int {
    entry("gc_config_default", || {
        if cfg.is_null() {
            return Err(arg("gc_config_default: cfg is NULL"));
        }
        // SAFETY: non-null and writable per the caller.
        unsafe { cfg.write(gc_config_t::from_rust(&config_from_env())) };
        Ok(0)
    })
}

/// `mark_threads` for the default heap chosen by the library (0: the configuration's),
/// below the environment's `GC_CORE_MARK_THREADS`.
pub(crate) static DEFAULT_MARK_THREADS: AtomicUsize = AtomicUsize::new(0);

/// The default configuration, with `set_default_mark_threads`' count, then the
/// environment's knobs ([`HeapConfig::with_env`]) applied.
pub(crate) fn config_from_env() -> HeapConfig {
    let mut config = HeapConfig::default();
    match DEFAULT_MARK_THREADS.load(Ordering::Relaxed) {
        0 => {}
        n => config.mark_threads = n,
    }
    config.with_env()
}
