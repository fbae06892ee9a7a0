//! A heap's tuning ([`HeapConfig`]): its defaults, the environment's knobs, and the
//! checks `Heap::new` applies.
//!
//! Depends only on `error`.

use crate::error::GcError;
use std::time::Duration;

/// When a heap calls its task scanners, and with what.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TaskScan {
    /// The seed's way (the default): on the collecting thread, once per task, after the
    /// root scanners and before the mark stack is drained; a C scanner's second
    /// argument is whether the collection is full.
    #[default]
    AtRoots,
    /// Julia's way since its parallel marker (1.10; a Julia 1.10 client of the
    /// Julia-compatibility prefix gets it): each task is a piece of mark work, scanned
    /// by whichever collector thread takes it, so that scanners may run on several
    /// threads at once; a C scanner's second argument is, as Julia passes it, whether
    /// the task is its thread's own stack (the thread's root task), and the scanner
    /// reaches the marker of the thread it runs on through that thread's `ptls`
    /// (`jl_get_ptls_states()`).
    WhileMarking,
}

/// Tuning of a heap. All sizes in bytes.
#[derive(Clone, Debug)]
pub struct HeapConfig {
    /// The least number of bytes allocated (pool pages handed out plus big objects)
    /// between two collections while the heap holds fewer than `small_heap` live bytes
    /// (default 2 MiB); twice that from `small_heap` on. The first collection comes
    /// after half of it (1 MiB by default): a small program's peak stays near that of a
    /// collector with a small initial heap (Boehm's), and a program building something
    /// large learns so at its first collection.
    pub min_interval: usize,
    /// Live bytes (after a collection's sweep) from which the least interval between
    /// collections is `2 * min_interval` instead of `min_interval` (default 1 MiB; 0:
    /// always twice). A heap of a few hundred KB that collects every `min_interval`
    /// has its peak near `min_interval` above its live data (minigap's group orders:
    /// 168 KB live, 20 MB allocated); a heap with a large structure under construction
    /// needs the longer floor, or the structure survives two collections while it is
    /// built and is promoted, to be freed only by a full collection (GCBench's stretch
    /// tree at a 2 MiB floor: peak RSS 1.33x Boehm's). The live data is the figure of
    /// the completed sweep, so a structure under construction at the first collection
    /// sets the longer floor at once.
    pub small_heap: usize,
    /// After a collection the next one runs when `counted_live * growth + extra` more
    /// bytes have been allocated (but never fewer than `min_interval`, never more than
    /// `max_interval`), where `counted_live` is the old generation's live bytes plus
    /// `young_weight` times the young survivors' bytes, and `extra` comes from
    /// `headroom`.
    pub growth: f64,
    /// How much the young objects that survived the last collection count towards the
    /// next interval (0.0 to 1.0; default 0.0). Young survivors are often transient (a
    /// structure under construction, a value a stack slot still holds): counting them
    /// lets one burst of them inflate the next interval, and the peak heap with it
    /// (GCBench with `headroom` 32 MiB: peak RSS 37.6-38.0 MB at 0.0, 38.9-40.2 MB at
    /// 0.25, 43.6 MB at 0.5). Survivors that stay are promoted by the second collection
    /// they survive and then count in full, so the interval lags real growth by one or
    /// two collections at most.
    pub young_weight: f64,
    /// Extra room for small and middle-sized heaps, in bytes (0: none; default 32 MiB):
    /// the interval gets `extra = counted_live * headroom / (counted_live + headroom)`
    /// more bytes: nearly `counted_live` (one more `growth`) while the counted live data
    /// is well below `headroom`, never more than `headroom` however large the heap.
    /// Partial collections of a small heap are cheap but, at `growth` 1, twice as
    /// frequent as a non-generational collector's (GCBench: 71 collections against
    /// Boehm's 37 before, 43 with it); a 160 MB heap grows by at most 32 MB more
    /// (`bencharr`: +7% peak RSS), and below `min_interval` nothing changes.
    pub headroom: usize,
    /// Use of free memory the heap already holds (default 2.0; 1.0 or less: off): the
    /// interval from `growth` and `headroom` is lengthened to the free pool memory that
    /// is still resident (free cells of pages in use and free pages not yet returned to
    /// the OS), up to `resident_reuse` times the formula's. Allocating into memory that
    /// is already resident does not raise the peak; a heap that a transient structure
    /// once grew (GCBench's stretch tree) otherwise collects more often than it needs
    /// to afterwards (GCBench: 42-43 collections against Boehm's 37, which fills its
    /// heap before collecting; with it 32-33, see the README). The factor bounds what a
    /// large transient peak can do: pages beyond it stay idle and are returned to the OS.
    pub resident_reuse: f64,
    /// Upper bound of the interval between collections (default 32 MiB): the young
    /// generation's size. A `min_interval` above it wins (the interval is never below
    /// the floor). The formula above grows the interval with the old generation,
    /// which suits a small heap; on a large one it let the heap double between
    /// collections. Full collections come from the old generation's growth
    /// (`full_growth`), whatever this bound. Real GAP 4.12.1 (48 testinstall files): with
    /// 1 GiB, 13 partial collections and a peak RSS of 692 MB; with 32 MiB, 85 and
    /// 360-378 MB, in the same time (9.9-10.3 s against 11.1 s).
    pub max_interval: usize,
    /// An automatic collection is full when the old generation has grown by this factor
    /// since the last full collection (1.0 = doubled), up to `full_growth_knee`.
    pub full_growth: f64,
    /// Old-generation size (after the last full collection) from which the room before
    /// the next full collection grows with the square root of the old generation
    /// instead of in proportion: `full_growth * sqrt(knee * old)` above the knee,
    /// `full_growth * old` below it (default 64 MiB; 0: always in proportion). The
    /// marking a full collection costs grows with the live heap, the memory a doubling
    /// costs grows with it too; MemBalancer (Kirisame et al., PLDI 2022; Julia's pacer
    /// since 1.11) shows the room that balances the two grows with the square root of
    /// the live heap. A program whose old generation is 2 GB then collects in full
    /// after about 360 MB of promoted data rather than 2 GB. (GAP's `bigheap`, 2.1 GB
    /// live and 800 MB of promoted garbage at its end: with a 512 MiB knee, 1 GB of
    /// room, its peak RSS was 2.84-3.07 GB depending on where the last automatic full
    /// collection fell; with 64 MiB, 2.60-2.74 GB, for 6 more full collections.)
    pub full_growth_knee: usize,
    /// Most times the room above (`full_growth`, `full_growth_knee`) that an automatic
    /// full collection may be put off by when full collections find little garbage
    /// (default 16; 1.0: never). A full collection's yield is the old bytes it freed
    /// over the old generation's growth since the one before; the next waits for
    /// `1 / yield` times the room (so the old garbage expected by then is the same as at
    /// a yield of 1), up to this factor, and for at most `full_defer_bytes` more. A
    /// program that builds its data (a runtime loading its library: GAP's start-up
    /// promotes 190 MB and frees almost none of it at three full collections) then
    /// does not mark all of it again at each doubling.
    pub full_defer: f64,
    /// Most bytes the old generation may grow by beyond the room of `full_growth` when a
    /// full collection is put off (`full_defer`), for an old generation of nothing;
    /// shrinking in proportion to nothing at `full_growth_knee`, where the square-root
    /// rule takes over (not shrinking with a knee of 0; default 256 MiB): the bound on
    /// what a wrong guess costs when a program that promoted live data starts to
    /// promote garbage.
    pub full_defer_bytes: usize,
    /// The pause a partial collection should stay within (default 10 ms;
    /// `Duration::ZERO`: no goal), as G1's pause goal sizes its young generation. A
    /// partial collection's pause is the marking of the young survivors plus a part
    /// that does not depend on the young generation's size (roots, the remembered
    /// set); the survivors' part is taken at the last full collection's marking time
    /// per object. After a partial collection over the goal, the bytes allocated
    /// before the next one are bounded so that its survivors' part, at the density
    /// just seen, fits in what the rest leaves of the goal (down to a quarter of
    /// `max_interval`); under the goal, or where the rest alone reaches it, the bound
    /// grows back, at most doubling per collection. A program whose young objects all
    /// live (a runtime loading its library; GAP's start-up at 20-25 ms per 32 MiB) is
    /// what makes partial collections long; one whose young objects die is not bounded.
    pub young_pause_goal: Duration,
    /// Collect every N allocations on each thread (stress mode); `None` to disable.
    pub stress_every: Option<u64>,
    /// Verify mode: before each partial collection, check that no old object outside
    /// the remembered set references a young one, and validate every queued reference.
    pub verify: bool,
    /// Free pages kept mapped after a collection; the rest is returned to the OS.
    pub keep_free_pages: usize,
    /// Collector threads that mark in parallel: the collecting thread and
    /// `mark_threads - 1` helper threads of the heap, started at its first collection.
    /// 0 (the default) means one per core; 1 marks on the collecting thread alone. Mark
    /// functions then run on any of these threads, possibly at the same time (in the
    /// verify mode too: every thread validates what it queues).
    pub mark_threads: usize,
    /// When the task scanners run ([`TaskScan`]).
    pub task_scan: TaskScan,
    /// With several collector threads: objects each drain of a collection marks on the
    /// collecting thread alone before it wakes the helper threads (default 65536). Below
    /// that, sharing work costs more than it saves (minigap's array workload: its
    /// 50,000-130,000-object partial collections marked 1.3-2x slower with two threads).
    /// 0: wake them at once.
    pub parallel_threshold: usize,
    /// Sweep pool pages lazily, after the world resumes (by the helper threads, or by
    /// allocating threads when they need a page), instead of inside the pause. Sweep
    /// functions and external objects are still swept in the pause.
    pub lazy_sweep: bool,
    /// Helper threads that sweep pool pages in the background after a collection, as
    /// Julia's `--gcthreads=N,M` sweep threads: 0 or 1 (the default). Only with
    /// `lazy_sweep` and more than one core. With several mark threads one of their
    /// helpers sweeps; with one mark thread the heap starts a helper that only sweeps.
    /// With 0, allocating threads sweep the pages they need and the next collection the
    /// rest. (GAP 4.15.1's representative `testinstall` files, one mark thread: the
    /// mutator ran 0.5-1.6 s faster in 4 of 4 pairs of runs with the sweep helper, its
    /// own lazy sweep down from 1.1 s to 0.4 s.)
    pub sweep_threads: usize,
}

impl Default for HeapConfig {
    fn default() -> Self {
        HeapConfig {
            min_interval: 2 << 20,
            small_heap: 1 << 20,
            growth: 1.0,
            young_weight: 0.0,
            headroom: 32 << 20,
            resident_reuse: 2.0,
            max_interval: 32 << 20,
            full_growth: 1.0,
            full_growth_knee: 64 << 20,
            full_defer: 16.0,
            full_defer_bytes: 256 << 20,
            young_pause_goal: Duration::from_millis(10),
            stress_every: None,
            verify: false,
            keep_free_pages: 64,
            mark_threads: 0,
            task_scan: TaskScan::AtRoots,
            parallel_threshold: 1 << 16,
            lazy_sweep: true,
            sweep_threads: 1,
        }
    }
}

impl HeapConfig {
    /// Bytes the old generation may grow by, from `base` bytes after the last full
    /// collection, before an automatic collection is full (`full_growth`,
    /// `full_growth_knee`).
    pub(crate) fn full_allowance(&self, base: usize) -> f64 {
        let base = base as f64;
        let knee = self.full_growth_knee as f64;
        let scaled = if knee > 0.0 && base > knee {
            (knee * base).sqrt()
        } else {
            base
        };
        scaled * self.full_growth
    }

    /// The bytes the old generation may grow by, from `base` bytes after the last full
    /// collection, before an automatic collection is full, when the last full
    /// collection's yield asks to put it off by `defer` (1.0 up to `full_defer`).
    pub(crate) fn full_room(&self, base: usize, defer: f64) -> f64 {
        let room = self.full_allowance(base);
        let knee = self.full_growth_knee as f64;
        let cap = if knee > 0.0 {
            self.full_defer_bytes as f64 * (1.0 - base as f64 / knee).max(0.0)
        } else {
            self.full_defer_bytes as f64
        };
        room + (room * (defer.min(self.full_defer) - 1.0)).clamp(0.0, cap)
    }

    pub(crate) fn validate(&self) -> Result<(), GcError> {
        if self.min_interval == 0 || self.max_interval == 0 {
            return Err(GcError::BadConfig(format!(
                "need min_interval ({}) and max_interval ({}) above 0",
                self.min_interval, self.max_interval
            )));
        }
        let positive = |x: f64| x > 0.0 && x.is_finite();
        if !positive(self.growth) || !positive(self.full_growth) {
            return Err(GcError::BadConfig(
                "growth and full_growth must be positive and finite".into(),
            ));
        }
        if !(self.resident_reuse >= 0.0 && self.resident_reuse.is_finite()) {
            return Err(GcError::BadConfig(format!(
                "resident_reuse ({}) must be finite and not negative",
                self.resident_reuse
            )));
        }
        if !(self.full_defer >= 1.0 && self.full_defer.is_finite()) {
            return Err(GcError::BadConfig(format!(
                "full_defer ({}) must be finite and at least 1",
                self.full_defer
            )));
        }
        if !(0.0..=1.0).contains(&self.young_weight) {
            return Err(GcError::BadConfig(format!(
                "young_weight ({}) must be between 0 and 1",
                self.young_weight
            )));
        }
        if self.mark_threads > 1024 {
            return Err(GcError::BadConfig(format!(
                "mark_threads ({}) must be at most 1024",
                self.mark_threads
            )));
        }
        if self.sweep_threads > 1 {
            return Err(GcError::BadConfig(format!(
                "sweep_threads ({}) must be 0 or 1",
                self.sweep_threads
            )));
        }
        if self.stress_every == Some(0) {
            return Err(GcError::BadConfig("stress_every must be at least 1".into()));
        }
        Ok(())
    }
}

impl HeapConfig {
    /// This configuration with the `GC_CORE_*` environment variables applied (what the
    /// C ABI's default heap uses): `GC_CORE_MARK_THREADS`, `GC_CORE_SWEEP_THREADS`,
    /// `GC_CORE_LAZY_SWEEP`,
    /// `GC_CORE_GROWTH`, `GC_CORE_YOUNG_WEIGHT`, `GC_CORE_HEADROOM`,
    /// `GC_CORE_RESIDENT_REUSE`, `GC_CORE_SMALL_HEAP`, `GC_CORE_FULL_GROWTH`,
    /// `GC_CORE_FULL_GROWTH_KNEE`, `GC_CORE_FULL_DEFER`, `GC_CORE_FULL_DEFER_BYTES`,
    /// `GC_CORE_MAX_INTERVAL`, `GC_CORE_MIN_INTERVAL`, `GC_CORE_PARALLEL_THRESHOLD` (the
    /// fields of those names),
    /// `GC_CORE_STRESS` (`stress_every`) and `GC_CORE_VERIFY` (0 or 1). A value that does
    /// not parse or is out of range is reported on standard error and ignored.
    pub fn with_env(self) -> HeapConfig {
        let mut config = self;
        if let Some(n) = env_knob("GC_CORE_MARK_THREADS", "a number from 0 to 1024", |v| {
            v.parse::<usize>().ok().filter(|&n| n <= 1024)
        }) {
            config.mark_threads = n;
        }
        if let Some(n) = env_knob(
            "GC_CORE_PARALLEL_THRESHOLD",
            "an object count from 0 to 2^40",
            |v| v.parse::<usize>().ok().filter(|n| *n <= 1 << 40),
        ) {
            config.parallel_threshold = n;
        }
        if let Some(n) = env_knob("GC_CORE_SWEEP_THREADS", "0 or 1", |v| match v {
            "0" => Some(0),
            "1" => Some(1),
            _ => None,
        }) {
            config.sweep_threads = n;
        }
        if let Some(on) = env_knob("GC_CORE_LAZY_SWEEP", "0 or 1", |v| match v {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        }) {
            config.lazy_sweep = on;
        }
        if let Some(g) = env_knob("GC_CORE_GROWTH", "a number from 0.1 to 100", |v| {
            v.parse::<f64>().ok().filter(|g| (0.1..=100.0).contains(g))
        }) {
            config.growth = g;
        }
        if let Some(w) = env_knob("GC_CORE_YOUNG_WEIGHT", "a number from 0 to 1", |v| {
            v.parse::<f64>().ok().filter(|w| (0.0..=1.0).contains(w))
        }) {
            config.young_weight = w;
        }
        if let Some(h) = env_knob("GC_CORE_HEADROOM", "a byte count up to 1 TiB", |v| {
            v.parse::<usize>().ok().filter(|h| *h <= 1 << 40)
        }) {
            config.headroom = h;
        }
        if let Some(r) = env_knob("GC_CORE_RESIDENT_REUSE", "a number from 0 to 100", |v| {
            v.parse::<f64>().ok().filter(|r| (0.0..=100.0).contains(r))
        }) {
            config.resident_reuse = r;
        }
        if let Some(s) = env_knob("GC_CORE_SMALL_HEAP", "a byte count up to 1 TiB", |v| {
            v.parse::<usize>().ok().filter(|s| *s <= 1 << 40)
        }) {
            config.small_heap = s;
        }
        if let Some(f) = env_knob("GC_CORE_FULL_GROWTH", "a number from 0.05 to 100", |v| {
            v.parse::<f64>().ok().filter(|f| (0.05..=100.0).contains(f))
        }) {
            config.full_growth = f;
        }
        if let Some(k) = env_knob(
            "GC_CORE_FULL_GROWTH_KNEE",
            "a byte count up to 1 TiB",
            |v| v.parse::<usize>().ok().filter(|k| *k <= 1 << 40),
        ) {
            config.full_growth_knee = k;
        }
        if let Some(d) = env_knob("GC_CORE_FULL_DEFER", "a number from 1 to 1000", |v| {
            v.parse::<f64>().ok().filter(|d| (1.0..=1000.0).contains(d))
        }) {
            config.full_defer = d;
        }
        if let Some(b) = env_knob(
            "GC_CORE_FULL_DEFER_BYTES",
            "a byte count up to 1 TiB",
            |v| v.parse::<usize>().ok().filter(|b| *b <= 1 << 40),
        ) {
            config.full_defer_bytes = b;
        }
        if let Some(us) = env_knob(
            "GC_CORE_YOUNG_PAUSE_GOAL_US",
            "microseconds up to 10 s (0: no goal)",
            |v| v.parse::<u64>().ok().filter(|us| *us <= 10_000_000),
        ) {
            config.young_pause_goal = Duration::from_micros(us);
        }
        if let Some(m) = env_knob(
            "GC_CORE_MAX_INTERVAL",
            "a byte count from 64 KiB to 1 TiB",
            |v| {
                v.parse::<usize>()
                    .ok()
                    .filter(|m| (64 << 10..=1 << 40).contains(m))
            },
        ) {
            config.max_interval = m;
        }
        if let Some(n) = env_knob("GC_CORE_STRESS", "an allocation count from 1", |v| {
            v.parse::<u64>().ok().filter(|n| *n >= 1)
        }) {
            config.stress_every = Some(n);
        }
        if let Some(on) = env_knob("GC_CORE_VERIFY", "0 or 1", |v| match v {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        }) {
            config.verify = on;
        }
        if let Some(m) = env_knob(
            "GC_CORE_MIN_INTERVAL",
            "a byte count from 64 KiB to 1 GiB",
            |v| {
                v.parse::<usize>()
                    .ok()
                    .filter(|m| (64 << 10..=1 << 30).contains(m))
            },
        ) {
            config.min_interval = m;
        }
        config
    }
}

/// The value of environment variable `name` parsed by `parse`; reported and ignored
/// when set but not `expected`.
fn env_knob<T>(name: &str, expected: &str, parse: impl Fn(&str) -> Option<T>) -> Option<T> {
    let v = std::env::var(name).ok()?;
    let parsed = parse(v.trim());
    if parsed.is_none() {
        eprintln!("gc-core: ignoring {name}={v:?}: expected {expected}");
    }
    parsed
}

/// Bytes allocated before a heap's first collection: half of `min_interval`.
pub(crate) fn first_interval(min_interval: usize) -> usize {
    (min_interval / 2).max(1)
}
