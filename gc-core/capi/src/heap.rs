//! Heaps from C: `gc_heap_t` handles (in the registry, [`crate::entry::HANDLES`]),
//! `gc_heap_new`/`gc_heap_delete`, the process's default heap (`gc_default_heap`, what
//! the seed's `jl_*` names use) and its statistics file, and [`heap_arg`], the check
//! every entry taking a heap runs.
//!
//! A heap handle's record is never freed (a deleted heap's record stays, with the heap
//! itself gone): the per-word lookups of extending crates ([`heap_id_from_ptr`]) read
//! the heap's id from it with one load and no registry lookup, and a deleted heap's id
//! names no memory any more (ids are never reused), so they answer "not an object".
//! It also means a new heap never reuses a deleted one's address: a stale heap handle
//! is always recognised.

use crate::config::{config_from_env, gc_config_t, DEFAULT_MARK_THREADS};
use crate::entry::{arg, entry, failure, record, registered, unregister, Checked, HANDLES};
use ffi_support::{Handle, Status};
use gc_core::{Heap, HeapConfig, HeapId};
use parking_lot::{Mutex, RwLock};
use std::ffi::c_int;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// A heap (`gc_heap_t`): an opaque handle from `gc_heap_new` or `gc_default_heap`.
pub struct gc_heap_t {
    /// `heap.id()`, kept here so that lookups through the C ABI need one load for it.
    id: HeapId,
    /// The heap; `None` once `gc_heap_delete` took it.
    heap: RwLock<Option<Heap>>,
    /// Whether it is the default heap (which `gc_heap_delete` refuses).
    default: bool,
}

impl Handle for gc_heap_t {
    const KIND: &'static str = "heap";
}

/// Every heap record ever registered: kept so that none is freed (see the module
/// documentation).
static RECORDS: Mutex<Vec<Arc<gc_heap_t>>> = Mutex::new(Vec::new());

/// Registers `heap` and returns its C handle.
fn register(heap: Heap, default: bool) -> *mut gc_heap_t {
    let record = Arc::new(gc_heap_t {
        id: heap.id(),
        heap: RwLock::new(Some(heap)),
        default,
    });
    RECORDS.lock().push(record.clone());
    HANDLES.register_arc(record)
}

/// The heap behind the handle `p`; refused (naming `what`) for a NULL, unknown, deleted
/// or wrong-kind handle. A clone of the `Heap` (an `Arc`): the heap stays alive for the
/// call even if another thread deletes the handle meanwhile.
pub(crate) fn heap_arg(p: *const gc_heap_t, what: &str) -> Checked<Heap> {
    let record = registered(p, "heap", what)?;
    let heap = record.heap.read().clone();
    heap.ok_or_else(|| arg(format!("{what}: heap {p:p} was deleted")))
}

/// The id of the heap behind a C heap handle, with one load and no registry lookup (for
/// per-word lookups); `None` (and the last error set, naming `what`) for NULL. A deleted
/// heap's id is returned too: lookups with it find nothing.
///
/// # Safety
/// `p` is null or a heap handle this library handed out (live or deleted).
#[inline(always)]
pub unsafe fn heap_id_from_ptr(p: *mut gc_heap_t, what: &str) -> Option<HeapId> {
    if p.is_null() {
        heap_null(what);
        return None;
    }
    // SAFETY: a heap record (caller's contract), never freed (module documentation).
    Some(unsafe { (*p).id })
}

#[cold]
fn heap_null(what: &str) {
    arg(format!("{what}: heap is NULL"));
}

/// Creates a heap; `cfg` may be NULL for the defaults. NULL on error.
///
/// # Safety
/// `cfg` is null or points to a valid `gc_config_t`.
#[no_mangle]
pub unsafe extern "C" fn gc_heap_new(cfg: *const gc_config_t) -> *mut gc_heap_t {
    entry("gc_heap_new", || {
        let config = if cfg.is_null() {
            HeapConfig::default()
        } else {
            // SAFETY: non-null and valid per the caller.
            unsafe { *cfg }.to_rust()
        };
        Ok(register(Heap::new(config)?, false))
    })
}

/// Destroys a heap created by `gc_heap_new`: `RT_OK`, or `RT_ERR_ARG` for a NULL,
/// unknown, already deleted or wrong-kind handle (or the default heap), `RT_ERR_STATE`
/// while threads are attached. Objects still rooted by roots, weak handles or queues of
/// the heap keep its memory until those are deleted too.
#[no_mangle]
pub extern "C" fn gc_heap_delete(heap: *mut gc_heap_t) -> c_int {
    entry("gc_heap_delete", || {
        let record = registered(heap, "heap", "gc_heap_delete")?;
        if record.default {
            return Err(arg("gc_heap_delete: the default heap cannot be deleted"));
        }
        let attached = record
            .heap
            .read()
            .as_ref()
            .map_or(0, Heap::attached_threads);
        if attached > 0 {
            return Err(failure(
                Status::State,
                format!("gc_heap_delete: {attached} thread(s) still attached; detach them first"),
            ));
        }
        let record = unregister(heap, "heap", "gc_heap_delete")?;
        drop(record.heap.write().take());
        Ok(0)
    })
}

/// The default heap and its handle.
static DEFAULT_HEAP: OnceLock<(Heap, usize)> = OnceLock::new();

/// The default heap, made on first use (see `gc_default_heap`).
pub(crate) fn default_heap_ref() -> &'static Heap {
    &DEFAULT_HEAP.get_or_init(make_default_heap).0
}

fn make_default_heap() -> (Heap, usize) {
    let heap =
        Heap::new(config_from_env()).expect("the default configuration with valid knobs is valid");
    if std::env::var_os("GC_CORE_STATS_FILE").is_some() {
        // SAFETY: registering a function with no arguments that only reads the
        // default heap, which lives for the whole process.
        unsafe { libc::atexit(write_default_stats) };
    }
    let handle = register(heap.clone(), true) as usize;
    (heap, handle)
}

/// Makes the default heap mark on `n` threads (unless `GC_CORE_MARK_THREADS` says
/// otherwise): before it exists, through its configuration, after, from its next
/// collection on.
pub(crate) fn set_default_mark_threads(n: usize) {
    DEFAULT_MARK_THREADS.store(n, Ordering::Relaxed);
    if let Some((h, _)) = DEFAULT_HEAP.get() {
        if let Err(e) = h.set_mark_threads(n) {
            record(e);
        }
    }
}

/// The process's default heap (the one the `jl_*` names use), created on first use
/// with the default configuration, adjusted by environment variables (as Julia's
/// `JULIA_NUM_GC_THREADS`): `GC_CORE_MARK_THREADS` (collector threads, 0 = one per
/// core; `HeapConfig::mark_threads`), `GC_CORE_SWEEP_THREADS` (0 or 1; a helper sweeping
/// in the background, `HeapConfig::sweep_threads`), `GC_CORE_LAZY_SWEEP` (0 or 1;
/// `HeapConfig::lazy_sweep`) and the policy knobs `GC_CORE_MIN_INTERVAL`,
/// `GC_CORE_GROWTH`, `GC_CORE_YOUNG_WEIGHT`, `GC_CORE_HEADROOM` (bytes),
/// `GC_CORE_MAX_INTERVAL` (bytes), `GC_CORE_RESIDENT_REUSE`, `GC_CORE_FULL_GROWTH` and
/// `GC_CORE_FULL_GROWTH_KNEE` (bytes) (the `HeapConfig` fields of those names),
/// `GC_CORE_STRESS` (collect every N allocations per thread) and `GC_CORE_VERIFY` (0 or
/// 1). A value that does not parse or is out of range is reported
/// on stderr and ignored. `GC_CORE_STATS_FILE=path` writes the heap's statistics there
/// as JSON at exit. Its handle is never deleted (`gc_heap_delete` refuses it).
#[no_mangle]
pub extern "C" fn gc_default_heap() -> *mut gc_heap_t {
    if let Some(h) = made_default_heap() {
        return h;
    }
    entry("gc_default_heap", || {
        Ok(DEFAULT_HEAP.get_or_init(make_default_heap).1 as *mut gc_heap_t)
    })
}

/// The default heap's handle once it exists (one load, inlined into the per-word
/// lookups of the `jl_*` names: GAP's `MarkBag` asks `jl_gc_internal_obj_base_ptr` for
/// every reference it marks).
#[inline]
pub(crate) fn made_default_heap() -> Option<*mut gc_heap_t> {
    DEFAULT_HEAP.get().map(|&(_, h)| h as *mut gc_heap_t)
}

/// At exit, with `GC_CORE_STATS_FILE=path`: the default heap's statistics as one JSON
/// object in `path`, for programs that cannot ask (a C client's benchmark, GAP).
extern "C" fn write_default_stats() {
    let (Some(path), Some((h, _))) = (std::env::var_os("GC_CORE_STATS_FILE"), DEFAULT_HEAP.get())
    else {
        return;
    };
    let s = h.stats();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let (mut big_objects, mut big_bytes) = (0u64, 0u64);
    let _ = h.for_each_big_object(|_, size| {
        big_objects += 1;
        big_bytes += size as u64;
    });
    let json = format!(
        "{{\"big_objects\": {big_objects}, \"big_bytes\": {big_bytes}, \"full_collections\": {}, \"partial_collections\": {}, \"objects_allocated\": {}, \"bytes_allocated\": {}, \"bytes_freed\": {}, \"live_bytes\": {}, \"old_bytes\": {}, \"pages_in_use\": {}, \"mapped_bytes\": {}, \"total_pause_ms\": {:.3}, \"max_pause_ms\": {:.3}, \"p50_pause_ms\": {:.3}, \"p99_pause_ms\": {:.3}, \"total_weak_ms\": {:.3}, \"total_mark_ms\": {:.3}, \"objects_marked\": {}, \"total_sweep_ms\": {:.3}, \"sweep_functions_run\": {}, \"weak_refs_cleared\": {}, \"verify_errors\": {}, \"mark_threads\": {}, \"parallel_drains\": {}, {}}}\n",
        s.full_collections,
        s.partial_collections,
        s.objects_allocated,
        s.bytes_allocated,
        s.bytes_freed,
        s.live_bytes,
        s.old_bytes,
        s.pages_in_use,
        s.mapped_bytes,
        ms(s.total_pause),
        ms(s.max_pause),
        ms(s.p50_pause),
        ms(s.p99_pause),
        ms(s.total_weak_time),
        ms(s.total_mark_time),
        s.objects_marked,
        ms(s.total_sweep_time),
        s.sweep_functions_run,
        s.weak_refs_cleared,
        s.verify_errors,
        h.mark_threads(),
        s.parallel_drains,
        s.detail_json(),
    );
    if let Err(e) = std::fs::write(&path, json) {
        eprintln!("gc-core: cannot write GC_CORE_STATS_FILE {path:?}: {e}");
    }
}
