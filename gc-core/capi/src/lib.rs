//! `gc-core-capi`: the C ABI of the `gc-core` crate: `include/gc_core.h` (native
//! names, explicit heap; generated from this crate by cbindgen) and
//! `include/julia_gcext_compat.h` (the seed's names over a default heap, by hand).
//!
//! The functions check and convert their arguments (every pointer before it is used:
//! the helpers that dereference one are `unsafe fn`s) and forward to gc-core's public
//! API. Per-object entry points (allocation, barriers, mark queueing, safepoints) take a
//! `ptls` and reach gc-core through its raw tier (`gc_core::ffi`: the `ptls` record
//! `MutatorShared`, its unchecked fast paths, the barrier tests, the current and helper
//! `ptls`); everything else through the handles (`Heap`, `Mutator`, `Marker`, ...).
//! Decided here because they are C concerns: the `ptls` checks before a fast path,
//! `jl_symbol`'s table (interned names that live for the process), which mark stack a
//! `ptls` of another thread queues to (`marking_head`, for GAP's mark functions), and
//! the thread-local mutator of threads attached through C (`C_MUTATOR`).
//!
//! This crate is an rlib (gc-conservative-capi and gc-runtime link it, so that their
//! libraries carry gc-core's C ABI too); `artifact/` builds it as `libgc_core.so`. The
//! last items (`set_error`, `heap_from_ptr`, `with_active_marker`, ...) are for those
//! crates, which extend this C ABI with their own names.
//!
//! The workspace's C convention (`ffi_support`): failures return a null pointer or 0
//! (the seed's names keep Julia's signatures) or, from an int-returning `gc_*` function,
//! a shared `RT_ERR_*` code (argument errors `RT_ERR_ARG`, -1), and leave ffi-support's
//! thread-local status and message naming the problem, read by `gc_last_status()` /
//! `gc_last_error()` (and the `jl_gc_` names); a call never crashes on a null pointer, an
//! unattached thread, a type of another heap or a registration repeated. Every entry
//! runs in `ffi_support::guard` (a panic becomes `RT_ERR_PANIC` and the entry's error
//! return) except the per-object hot paths: the allocation fast path (its slow path is
//! guarded), the write barriers, the mark-queue calls, `gc_typeof`/`jl_typeof`,
//! `gc_is_young`/`gc_is_marked`, safepoints, the trivial getters and the naked
//! `gc_safe_enter` (whose implementation is guarded). A panic there cannot unwind into C
//! either: Rust aborts the process, with a message, at an `extern "C"` function's
//! boundary. Heap pointers are not kept in an `ffi_support::HandleRegistry`: the hot
//! paths take mutator pointers (`ptls`) and reach their heap through them, so a registry
//! would check only the rare calls; the pointers' contracts are the functions' `# Safety`
//! sections.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![allow(non_camel_case_types)]

use ffi_support::{guard, Status};
use gc_core::ffi::{
    back_barrier_fires, barrier_fires, current_ptls, helper_ptls, thread_id, TlsHead, HELPER_MAGIC,
    MUTATOR_MAGIC,
};
use gc_core::{
    CMarkFn, Callback, CallbackKind, CollectionKind, ForeignTypeSpec, GcError, Heap, HeapConfig,
    HeapId, MarkProc, Marker, Mutator, MutatorShared, ObjRef, ReferenceQueue, Root, SafeState,
    SweepProc, Task, WeakRef,
};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

mod julia;

/// A heap (`gc_heap_t`).
pub struct gc_heap_t {
    heap: Heap,
    /// `heap.id()`, kept here so that lookups through the C ABI need one load for it.
    id: HeapId,
}

impl gc_heap_t {
    fn new(heap: Heap) -> gc_heap_t {
        let id = heap.id();
        gc_heap_t { heap, id }
    }

    /// The id of the heap behind a C heap pointer (see [`Heap::id`]); sets the last error
    /// for NULL.
    ///
    /// # Safety
    /// `p` is null or from `gc_heap_new`/`gc_default_heap` and not deleted.
    #[inline(always)]
    pub unsafe fn id_from_ptr(p: *mut gc_heap_t, what: &str) -> Option<HeapId> {
        if p.is_null() {
            return heap_ref_null(what).map(|h| h.id());
        }
        // SAFETY: forwarded from the caller.
        Some(unsafe { (*p).id })
    }
}

/// A mutator thread's state (opaque; the seed's `jl_ptls_t` points to one).
#[repr(C)]
pub struct gc_mutator_t {
    _opaque: [u8; 0],
}

/// A registered stack (opaque; the seed's `jl_task_t`).
#[repr(C)]
pub struct gc_task_t {
    _opaque: [u8; 0],
}

fn task_ptr(t: &std::sync::Arc<Task>) -> *mut gc_task_t {
    t.c_handle().cast()
}

/// A persistent root (`gc_root_t`).
pub struct gc_root_t {
    root: Root,
}

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
}

/// Collection statistics for `gc_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct gc_stats_t {
    /// Full collections.
    pub full_collections: u64,
    /// Partial collections.
    pub partial_collections: u64,
    /// Objects allocated (threads report at collections and when they detach).
    pub objects_allocated: u64,
    /// Bytes allocated.
    pub bytes_allocated: u64,
    /// Bytes freed.
    pub bytes_freed: u64,
    /// Bytes live after the last collection.
    pub live_bytes: u64,
    /// Sweep functions run.
    pub sweep_functions_run: u64,
    /// Verify-mode errors found.
    pub verify_errors: u64,
    /// Total pause, in nanoseconds.
    pub total_pause_ns: u64,
    /// Longest pause, in nanoseconds.
    pub max_pause_ns: u64,
    /// Median pause, in nanoseconds.
    pub p50_pause_ns: u64,
    /// 99th-percentile pause, in nanoseconds.
    pub p99_pause_ns: u64,
    /// Weak references (objects and handles) cleared.
    pub weak_refs_cleared: u64,
    /// Finalizers queued to run.
    pub finalizers_queued: u64,
    /// Finalizers run.
    pub finalizers_run: u64,
    /// Reference-queue tokens queued.
    pub tokens_queued: u64,
}

/// Mark function: queue the children of `obj` with `gc_mark_queue_obj(m, child)` and
/// return how many of those calls returned non-zero (young children). It may run on any
/// collector thread (`mark_threads`) and concurrently with other mark functions: `m` is
/// the thread it runs on (queue through that one only); it must keep no unsynchronised
/// state of its own.
pub type gc_markfunc_t =
    Option<unsafe extern "C" fn(m: *mut gc_mutator_t, obj: *mut c_void) -> usize>;
/// Sweep function: called once when a sweep finds a scheduled object dead.
pub type gc_sweepfunc_t = Option<unsafe extern "C" fn(obj: *mut c_void)>;

/// `gc_set_callback` kinds. pre_gc, `void (*)(int full)`: called once per collection on
/// the collecting thread with the world stopped, once the collection is decided full or
/// partial (`full`) and before anything is marked. The threads' remembered sets are
/// merged after the pre-GC callbacks (Julia's order), so a write barrier one issues
/// counts for the collection it runs in: `gc_wb_back` on an old object the program
/// stored young references into without barriers (GAP's PreGCHook does this for its
/// current local-variables bag) keeps them alive in that partial collection.
pub const GC_CB_PRE_GC: c_int = 0;
/// post_gc.
pub const GC_CB_POST_GC: c_int = 1;
/// root_scanner.
pub const GC_CB_ROOT_SCANNER: c_int = 2;
/// task_scanner.
pub const GC_CB_TASK_SCANNER: c_int = 3;
/// notify_external_alloc.
pub const GC_CB_NOTIFY_EXTERNAL_ALLOC: c_int = 4;
/// notify_external_free.
pub const GC_CB_NOTIFY_EXTERNAL_FREE: c_int = 5;
/// The weak-processing hook, `void (*)(int full)`: called between mark and sweep, before
/// weak references are cleared; it asks `gc_is_marked` and may keep objects alive with
/// `gc_mark_queue_obj`, through the collecting thread's mutator (`gc_current_mutator`).
pub const GC_CB_WEAK_PROCESSING: c_int = 6;

/// `gc_collect` kinds (same values as the seed's `jl_gc_collection_t`).
pub const GC_COLLECT_AUTO: c_int = 0;
/// Full collection.
pub const GC_COLLECT_FULL: c_int = 1;
/// Partial (young-generation) collection.
pub const GC_COLLECT_PARTIAL: c_int = 2;

thread_local! {
    /// Mutators attached through the C ABI; dropped (detached) at thread exit.
    static C_MUTATOR: RefCell<Option<Mutator>> = const { RefCell::new(None) };
}

/// The calling thread's mutator as a C pointer (null if not attached); on a collector
/// helper thread, its `ptls` record (for marking calls only).
fn cur() -> *mut gc_mutator_t {
    let m = current_ptls();
    if m.is_null() {
        return helper_ptls() as *mut gc_mutator_t;
    }
    m as *mut gc_mutator_t
}

/// The shared status of a [`GcError`] (`RT_ERR_*`, see `ffi_support::Status`).
pub fn status_of(e: &GcError) -> Status {
    match e {
        GcError::OutOfMemory { .. } => Status::Oom,
        GcError::AlreadyAttached => Status::AlreadyAttached,
        GcError::NotAttached => Status::NotAttached,
        GcError::InGcSafeRegion => Status::InsideRegion,
        GcError::DuringCollection { .. }
        | GcError::NotMarking { .. }
        | GcError::SweepAlreadyScheduled { .. }
        | GcError::CallbackAlreadyRegistered { .. }
        | GcError::FinalizersNotDisabled
        | GcError::AttachedElsewhere => Status::State,
        GcError::CallbackNotRegistered { .. } => Status::NotFound,
        _ => Status::Arg,
    }
}

/// Records `msg` as this thread's last C-API error with `status` (ffi-support's
/// thread-local last error: one per library, shared by every crate whose C ABI is linked
/// into it, so `gc_last_error` and `gil_last_error` see the same failure in
/// libgc_runtime).
pub fn set_status(status: Status, msg: impl std::fmt::Display) {
    ffi_support::set_error(status, &msg.to_string());
}

/// Records an argument error (`RT_ERR_ARG`): a NULL pointer, a bad kind, a bad value.
pub fn set_error(msg: impl std::fmt::Display) {
    set_status(Status::Arg, msg);
}

/// Records `err` (its status from [`status_of`]) and returns `value`.
fn fail<T>(err: GcError, value: T) -> T {
    set_status(status_of(&err), &err);
    value
}

/// Records `err` and returns its `RT_ERR_*` code (the int-returning entries).
fn fail_code(err: GcError) -> c_int {
    let status = status_of(&err);
    set_status(status, &err);
    status.code()
}

/// The code an int-returning entry returns after a helper recorded its failure: the
/// recorded status (`RT_ERR_ARG` if, unexpectedly, none was).
fn err_code() -> c_int {
    match ffi_support::last_status() {
        Status::Ok => Status::Arg.code(),
        s => s.code(),
    }
}

/// The C-boundary panic guard's value for an int-returning entry.
const PANIC: c_int = Status::Panic.code();

/// The message of the last failed call on this thread, or NULL if none failed since
/// the last `gc_clear_error` (gc-core's C users test it for NULL; the text is
/// ffi-support's thread-local message). Valid until the next failing call on this
/// thread.
#[no_mangle]
pub extern "C" fn gc_last_error() -> *const c_char {
    if ffi_support::last_status() == Status::Ok {
        return std::ptr::null();
    }
    ffi_support::last_error_ptr()
}

/// The status (`RT_ERR_*`, an `rt_status`) of the last failed call on this thread, or
/// `RT_OK` if none failed since the last `gc_clear_error`: what a NULL return meant.
#[no_mangle]
pub extern "C" fn gc_last_status() -> i32 {
    ffi_support::last_status().code()
}

/// Forgets the last error of this thread.
#[no_mangle]
pub extern "C" fn gc_clear_error() {
    ffi_support::clear_error();
}

/// Fills `cfg` with the default configuration, adjusted by the `GC_CORE_*` environment
/// variables when set (as for the default heap, see `gc_default_heap`).
///
/// # Safety
/// `cfg` is null or points to writable memory for a `gc_config_t`.
#[no_mangle]
pub unsafe extern "C" fn gc_config_default(cfg: *mut gc_config_t) -> c_int {
    guard("gc_config_default", PANIC, || {
        if cfg.is_null() {
            return fail_code(GcError::BadConfig("gc_config_default: cfg is NULL".into()));
        }
        let d = config_from_env();
        // SAFETY: non-null and writable per the caller.
        unsafe {
            cfg.write(gc_config_t {
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
            })
        };
        0
    })
}

/// Creates a heap; `cfg` may be NULL for the defaults. NULL on error.
///
/// # Safety
/// `cfg` is null or points to a valid `gc_config_t`.
#[no_mangle]
pub unsafe extern "C" fn gc_heap_new(cfg: *const gc_config_t) -> *mut gc_heap_t {
    guard("gc_heap_new", std::ptr::null_mut(), || {
        let config = if cfg.is_null() {
            HeapConfig::default()
        } else {
            // SAFETY: non-null and valid per the caller.
            let c = unsafe { *cfg };
            HeapConfig {
                min_interval: c.min_interval,
                growth: c.growth,
                max_interval: c.max_interval,
                full_growth: c.full_growth,
                stress_every: (c.stress_every != 0).then_some(c.stress_every),
                verify: c.verify != 0,
                keep_free_pages: c.keep_free_pages,
                mark_threads: c.mark_threads,
                task_scan: HeapConfig::default().task_scan,
                parallel_threshold: HeapConfig::default().parallel_threshold,
                lazy_sweep: c.lazy_sweep != 0,
                young_weight: c.young_weight,
                headroom: c.headroom,
                resident_reuse: c.resident_reuse,
                small_heap: c.small_heap,
            }
        };
        match Heap::new(config) {
            Ok(heap) => Box::into_raw(Box::new(gc_heap_t::new(heap))),
            Err(e) => fail(e, std::ptr::null_mut()),
        }
    })
}

/// Destroys a heap created by `gc_heap_new`. Refused (`RT_ERR_STATE`) while threads are attached.
///
/// # Safety
/// `heap` is null or was returned by `gc_heap_new` and not deleted.
#[no_mangle]
pub unsafe extern "C" fn gc_heap_delete(heap: *mut gc_heap_t) -> c_int {
    guard("gc_heap_delete", PANIC, || {
        if heap.is_null() {
            return fail_code(GcError::BadConfig("gc_heap_delete: heap is NULL".into()));
        }
        // SAFETY: valid per the caller.
        let attached = unsafe { &*heap }.heap.attached_threads();
        if attached > 0 {
            set_status(
                Status::State,
                format!("gc_heap_delete: {attached} thread(s) still attached; detach them first"),
            );
            return err_code();
        }
        // SAFETY: created by Box::into_raw in gc_heap_new.
        drop(unsafe { Box::from_raw(heap) });
        0
    })
}

static DEFAULT_HEAP: OnceLock<gc_heap_t> = OnceLock::new();

/// `mark_threads` for the default heap chosen by the library (0: the configuration's),
/// below the environment's `GC_CORE_MARK_THREADS`.
static DEFAULT_MARK_THREADS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Makes the default heap mark on `n` threads (unless `GC_CORE_MARK_THREADS` says
/// otherwise): before it exists, through its configuration, after, from its next
/// collection on.
fn set_default_mark_threads(n: usize) {
    DEFAULT_MARK_THREADS.store(n, Ordering::Relaxed);
    if let Some(h) = DEFAULT_HEAP.get() {
        if let Err(e) = h.heap.set_mark_threads(n) {
            fail(e, ());
        }
    }
}

/// The process's default heap (the one the `jl_*` names use), created on first use
/// with the default configuration, adjusted by environment variables (as Julia's
/// `JULIA_NUM_GC_THREADS`): `GC_CORE_MARK_THREADS` (collector threads, 0 = one per
/// core; `HeapConfig::mark_threads`), `GC_CORE_LAZY_SWEEP` (0 or 1;
/// `HeapConfig::lazy_sweep`) and the policy knobs `GC_CORE_MIN_INTERVAL`,
/// `GC_CORE_GROWTH`, `GC_CORE_YOUNG_WEIGHT`, `GC_CORE_HEADROOM` (bytes),
/// `GC_CORE_MAX_INTERVAL` (bytes),
/// `GC_CORE_RESIDENT_REUSE` and `GC_CORE_FULL_GROWTH` (the `HeapConfig` fields of those
/// names), `GC_CORE_STRESS` (collect every N allocations per thread) and
/// `GC_CORE_VERIFY` (0 or 1). A value that does not parse or is out of range is reported
/// on stderr and ignored. `GC_CORE_STATS_FILE=path` writes the heap's statistics there
/// as JSON at exit.
#[no_mangle]
pub extern "C" fn gc_default_heap() -> *mut gc_heap_t {
    guard("gc_default_heap", std::ptr::null_mut(), || {
        DEFAULT_HEAP.get_or_init(|| {
            let heap = gc_heap_t::new(default_heap_from_env());
            if std::env::var_os("GC_CORE_STATS_FILE").is_some() {
                // SAFETY: registering a function with no arguments that only reads the
                // default heap, which lives for the whole process.
                unsafe { libc::atexit(write_default_stats) };
            }
            heap
        }) as *const gc_heap_t as *mut gc_heap_t
    })
}

/// At exit, with `GC_CORE_STATS_FILE=path`: the default heap's statistics as one JSON
/// object in `path`, for programs that cannot ask (a C client's benchmark, GAP).
extern "C" fn write_default_stats() {
    let (Some(path), Some(h)) = (std::env::var_os("GC_CORE_STATS_FILE"), DEFAULT_HEAP.get()) else {
        return;
    };
    let s = h.heap.stats();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let (mut big_objects, mut big_bytes) = (0u64, 0u64);
    let _ = h.heap.for_each_big_object(|_, size| {
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
        h.heap.mark_threads(),
        s.parallel_drains,
        s.detail_json(),
    );
    if let Err(e) = std::fs::write(&path, json) {
        eprintln!("gc-core: cannot write GC_CORE_STATS_FILE {path:?}: {e}");
    }
}

fn default_heap_from_env() -> Heap {
    Heap::new(config_from_env()).expect("the default configuration with valid knobs is valid")
}

/// The default configuration, with `gc_set_default_mark_threads`' count, then the
/// environment's knobs ([`HeapConfig::with_env`]) applied.
fn config_from_env() -> HeapConfig {
    let mut config = HeapConfig::default();
    match DEFAULT_MARK_THREADS.load(Ordering::Relaxed) {
        0 => {}
        n => config.mark_threads = n,
    }
    config.with_env()
}

/// # Safety
/// The pointer arguments are null or what their C types promise: a live heap from
/// `gc_heap_new`/`gc_default_heap`, a `ptls` this library handed out, a
/// NUL-terminated string.
#[inline(always)]
pub(crate) unsafe fn heap_ref<'a>(heap: *mut gc_heap_t, what: &str) -> Option<&'a Heap> {
    if heap.is_null() {
        return heap_ref_null(what);
    }
    // SAFETY: non-null heaps come from gc_heap_new or gc_default_heap (caller's contract).
    Some(&unsafe { &*heap }.heap)
}

#[cold]
fn heap_ref_null<'a>(what: &str) -> Option<&'a Heap> {
    set_error(format!("{what}: heap is NULL"));
    None
}

/// Attaches the calling thread to `heap`; returns its mutator (`ptls`), NULL on error
/// (already attached, bad heap). The thread detaches at exit or with `gc_thread_detach`.
///
/// # Safety
/// `heap` is null or a live heap.
#[no_mangle]
pub unsafe extern "C" fn gc_thread_attach(heap: *mut gc_heap_t) -> *mut gc_mutator_t {
    guard("gc_thread_attach", std::ptr::null_mut(), || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_thread_attach") }) else {
            return std::ptr::null_mut();
        };
        match heap.attach() {
            Ok(m) => {
                let p = m.ptls() as *mut gc_mutator_t;
                C_MUTATOR.with(|c| *c.borrow_mut() = Some(m));
                p
            }
            Err(e) => fail(e, std::ptr::null_mut()),
        }
    })
}

/// Detaches the calling thread (attached with `gc_thread_attach` or `jl_init`); its
/// reachable objects stay alive. `RT_ERR_NOT_ATTACHED` if it was not attached through the C ABI.
#[no_mangle]
pub extern "C" fn gc_thread_detach() -> c_int {
    guard("gc_thread_detach", PANIC, || {
        match C_MUTATOR.with(|c| c.borrow_mut().take()) {
            Some(m) => {
                drop(m);
                0
            }
            None => fail_code(GcError::NotAttached),
        }
    })
}

/// The calling thread's mutator, NULL if it is not attached.
#[no_mangle]
pub extern "C" fn gc_current_mutator() -> *mut gc_mutator_t {
    cur()
}

/// Checks that `m` is the calling thread's own, attached mutator: without a
/// thread-local lookup (costly in a shared library) when it is.
/// # Safety
/// The pointer arguments are null or what their C types promise: a live heap from
/// `gc_heap_new`/`gc_default_heap`, a `ptls` this library handed out, a
/// NUL-terminated string.
#[inline(always)]
unsafe fn mutator_ref<'a>(m: *mut gc_mutator_t, what: &'static str) -> Option<&'a MutatorShared> {
    let ms = m as *const MutatorShared;
    if !ms.is_null() {
        // The owning thread is always compared (one load of the thread pointer): a
        // ptls of another thread would otherwise allocate from, or queue into, that
        // thread's pages and corrupt them.
        // SAFETY: a non-null ptls is, by the documented contract, a pointer this library
        // handed out; mutator memory is recycled, never freed, so it stays readable; its
        // head is only read.
        let ok = unsafe {
            (*ms).head().magic.load(Ordering::Relaxed) == MUTATOR_MAGIC
                && (*ms).head().thread.load(Ordering::Relaxed) == thread_id()
        };
        if ok {
            // SAFETY: the calling thread's attached mutator.
            return Some(unsafe { &*ms });
        }
    }
    mutator_ref_slow(m, what)
}

#[cold]
fn mutator_ref_slow<'a>(m: *mut gc_mutator_t, what: &'static str) -> Option<&'a MutatorShared> {
    let current = current_ptls();
    if m.is_null() || current.is_null() {
        set_status(
            status_of(&GcError::NotAttached),
            format!("{what}: {}", GcError::NotAttached),
        );
        return None;
    }
    if !std::ptr::eq(m as *const MutatorShared, current) {
        set_error(format!(
            "{what}: ptls {m:p} is not the calling thread's ({current:p})"
        ));
        return None;
    }
    // SAFETY: it is the calling thread's attached mutator, alive while attached.
    Some(unsafe { &*current })
}

/// `jl_gc_max_internal_obj_size`.
#[no_mangle]
pub extern "C" fn gc_max_internal_obj_size() -> usize {
    gc_core::max_internal_obj_size()
}

/// # Safety
/// The pointer arguments are null or what their C types promise: a live heap from
/// `gc_heap_new`/`gc_default_heap`, a `ptls` this library handed out, a
/// NUL-terminated string.
unsafe fn c_str<'a>(s: *const c_char, what: &str) -> Option<&'a str> {
    if s.is_null() {
        set_error(format!("{what}: name is NULL"));
        return None;
    }
    // SAFETY: a NUL-terminated string per the caller's contract.
    match unsafe { CStr::from_ptr(s) }.to_str() {
        Ok(s) => Some(s),
        Err(_) => {
            set_error(format!("{what}: name is not UTF-8"));
            None
        }
    }
}

/// Creates a foreign type (`jl_new_foreign_type`). NULL on error (NULL name, pointers
/// without a mark function).
///
/// # Safety
/// `heap` is null or live; `name` null or NUL-terminated; the functions, if given, have
/// the documented signatures.
#[no_mangle]
pub unsafe extern "C" fn gc_new_foreign_type(
    heap: *mut gc_heap_t,
    name: *const c_char,
    markfunc: gc_markfunc_t,
    sweepfunc: gc_sweepfunc_t,
    haspointers: c_int,
    large: c_int,
) -> *mut c_void {
    guard("gc_new_foreign_type", std::ptr::null_mut(), || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_new_foreign_type") }) else {
            return std::ptr::null_mut();
        };
        // SAFETY: the name is null or NUL-terminated (this function's contract).
        let Some(name) = (unsafe { c_str(name, "gc_new_foreign_type") }) else {
            return std::ptr::null_mut();
        };
        if in_collection() {
            return fail(
                GcError::DuringCollection {
                    what: "creating a type",
                },
                std::ptr::null_mut(),
            );
        }
        // SAFETY: the C mark signature differs from CMarkFn only in a pointer type: same
        // ABI, same representation.
        let markfunc = unsafe { std::mem::transmute::<gc_markfunc_t, Option<CMarkFn>>(markfunc) };
        let spec = ForeignTypeSpec {
            name,
            // SAFETY: the C caller's functions are the seed's mark and sweep functions
            // (this function's contract), called as `MarkProc::c`/`SweepProc::c` require.
            mark: markfunc.map_or(MarkProc::None, |f| unsafe { MarkProc::c(f) }),
            // SAFETY: as above.
            sweep: sweepfunc.map_or(SweepProc::None, |f| unsafe { SweepProc::c(f) }),
            has_pointers: haspointers != 0,
            large: large != 0,
        };
        match heap.new_foreign_type(spec) {
            Ok(t) => t.as_obj().as_ptr().cast(),
            Err(e) => fail(e, std::ptr::null_mut()),
        }
    })
}

/// Creates a precise type: objects of at least `size` bytes with references at the
/// `n` byte offsets `offsets`. NULL on error.
///
/// # Safety
/// `heap` null or live; `name` null or NUL-terminated; `offsets` readable for `n`.
#[no_mangle]
pub unsafe extern "C" fn gc_new_layout_type(
    heap: *mut gc_heap_t,
    name: *const c_char,
    size: usize,
    offsets: *const u32,
    n: usize,
) -> *mut c_void {
    guard("gc_new_layout_type", std::ptr::null_mut(), || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_new_layout_type") }) else {
            return std::ptr::null_mut();
        };
        // SAFETY: the name is null or NUL-terminated (this function's contract).
        let Some(name) = (unsafe { c_str(name, "gc_new_layout_type") }) else {
            return std::ptr::null_mut();
        };
        if n > 0 && offsets.is_null() {
            set_error("gc_new_layout_type: offsets is NULL");
            return std::ptr::null_mut();
        }
        if in_collection() {
            return fail(
                GcError::DuringCollection {
                    what: "creating a type",
                },
                std::ptr::null_mut(),
            );
        }
        let offs: &[u32] = if n == 0 {
            &[]
        } else {
            // SAFETY: readable for n per the caller.
            unsafe { std::slice::from_raw_parts(offsets, n) }
        };
        match heap.new_layout_type(name, size, offs) {
            Ok(t) => t.as_obj().as_ptr().cast(),
            Err(e) => fail(e, std::ptr::null_mut()),
        }
    })
}

fn in_collection() -> bool {
    let m = current_ptls();
    // SAFETY: the current mutator is alive while attached.
    !m.is_null() && unsafe { &*m }.in_collection()
}

/// Allocates a zeroed object (`jl_gc_alloc_typed`). NULL on error (size 0, size over the
/// limit of a small foreign type, not a type, wrong thread, inside a collection).
///
/// # Safety
/// `m` is null or a mutator pointer; `ty` anything (it is validated).
#[no_mangle]
pub unsafe extern "C" fn gc_alloc(
    m: *mut gc_mutator_t,
    size: usize,
    ty: *mut c_void,
) -> *mut c_void {
    // The fast path: the calling thread's own mutator (its magic and owning thread: one
    // load of the thread pointer), running managed code (not in a GC-safe region), no
    // checked mode, a type it allocated before (the cache), a free cell of its current
    // page. Everything else, errors included, in `gc_alloc_slow`.
    let ms = m as *const MutatorShared;
    if !ms.is_null()
        // SAFETY: a non-null ptls is, by the documented contract, a pointer this library
        // handed out; mutator memory is recycled, never freed, so it stays readable; its
        // head is only read.
        && unsafe {
            (*ms).head().magic.load(Ordering::Relaxed) == MUTATOR_MAGIC
                && (*ms).head().thread.load(Ordering::Relaxed) == thread_id()
                && !(*ms).head().checked.load(Ordering::Relaxed)
                && (*ms).is_running()
        }
    {
        // SAFETY: the calling thread's attached mutator (the contract above).
        let ms = unsafe { &*ms };
        // SAFETY: ms is the calling thread's mutator.
        if let Some(t) = unsafe { ms.cached_type(ty as usize) } {
            // SAFETY: as above.
            if let Some(obj) = unsafe { ms.alloc_fast::<false>(size, t) } {
                return obj.as_ptr().cast();
            }
        }
    }
    // SAFETY: forwarded.
    unsafe { gc_alloc_slow(m, size, ty) }
}

/// Everything `gc_alloc`'s fast path does not do: checks, type validation, the
/// mutator's slow path, errors.
///
/// # Safety
/// As for `gc_alloc`.
#[cold]
#[inline(never)]
unsafe fn gc_alloc_slow(m: *mut gc_mutator_t, size: usize, ty: *mut c_void) -> *mut c_void {
    // The panic guard is here, off the fast path (which has none: a panic there aborts,
    // Rust's rule for an `extern "C"` function, rather than unwinding into C).
    guard("gc_alloc", std::ptr::null_mut(), || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { mutator_ref(m, "gc_alloc") }) else {
            return std::ptr::null_mut();
        };
        // SAFETY: ms is the calling thread's mutator.
        let t = match unsafe { ms.type_at_cached(ty as usize) } {
            Ok(t) => t,
            Err(e) => return fail(e, std::ptr::null_mut()),
        };
        if !ms.is_running() {
            // Checked before the thread's current page is used: a thread in a GC-safe region
            // counts as stopped, and a collection may be sweeping that page.
            return fail(GcError::InGcSafeRegion, std::ptr::null_mut());
        }
        // SAFETY: ms is the calling thread's mutator.
        match unsafe { ms.alloc(size, t) } {
            Ok(o) => o.as_ptr().cast(),
            Err(e) => fail(e, std::ptr::null_mut()),
        }
    })
}

/// Runs a collection (`GC_COLLECT_AUTO`, `_FULL` or `_PARTIAL`). 1 if this call ran
/// one, 0 if another thread's collection satisfied it, a negative `RT_ERR_*` code on error.
///
/// # Safety
/// `m` is null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_collect(m: *mut gc_mutator_t, kind: c_int) -> c_int {
    guard("gc_collect", PANIC, || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { mutator_ref(m, "gc_collect") }) else {
            return err_code();
        };
        let kind = match kind {
            GC_COLLECT_AUTO => CollectionKind::Auto,
            GC_COLLECT_FULL => CollectionKind::Full,
            GC_COLLECT_PARTIAL => CollectionKind::Partial,
            other => {
                set_error(format!("gc_collect: unknown collection kind {other}"));
                return err_code();
            }
        };
        // SAFETY: the calling thread's attached mutator (`mutator_ref` checked it).
        match unsafe { Mutator::borrowed(ms) }.collect(kind) {
            Ok(Some(_)) => 1,
            Ok(None) => 0,
            Err(e) => fail_code(e),
        }
    })
}

/// A safepoint poll.
///
/// # Safety
/// `m` is null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_safepoint(m: *mut gc_mutator_t) {
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    if let Some(ms) = unsafe { mutator_ref(m, "gc_safepoint") } {
        // SAFETY: the calling thread's attached mutator (`mutator_ref` checked it).
        unsafe { ms.safepoint() };
    }
}

/// Enters a GC-safe region (blocking call, waiting for a lock): collections may run and
/// this thread must not touch the heap until `gc_safe_leave`. Returns the previous
/// state, to pass to `gc_safe_leave`; -1 on error.
///
/// Copies the caller's callee-saved registers and stack pointer into a buffer in its own
/// frame, then calls `gc_safe_enter_impl` with `m` and the buffer, which checks `m`
/// before anything is written to the mutator. Written without a prologue so that the
/// registers saved are the caller's, and the stack pointer is the caller's (which stays
/// live for the whole GC-safe region, unlike this function's frame).
///
/// # Safety
/// `m` is null or a mutator pointer (it is checked).
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn gc_safe_enter(m: *mut gc_mutator_t) -> i8 {
    // At entry rsp is 8 mod 16 (the return address): 56 bytes of buffer realign it for
    // the call. The caller's stack pointer is the one after our return: rsp + 8 at entry.
    std::arch::naked_asm!(
        "sub rsp, 56",
        "mov [rsp], rbx",
        "mov [rsp + 8], rbp",
        "mov [rsp + 16], r12",
        "mov [rsp + 24], r13",
        "mov [rsp + 32], r14",
        "mov [rsp + 40], r15",
        "lea rax, [rsp + 64]",
        "mov [rsp + 48], rax",
        "mov rsi, rsp",
        "call {imp}",
        "add rsp, 56",
        "ret",
        imp = sym gc_safe_enter_impl,
    )
}

/// Enters a GC-safe region (blocking call, waiting for a lock): collections may run and
/// this thread must not touch the heap until `gc_safe_leave`. Returns the previous
/// state, to pass to `gc_safe_leave`; -1 on error.
///
/// # Safety
/// `m` is null or a mutator pointer (it is checked).
///
/// cbindgen:ignore
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub unsafe extern "C" fn gc_safe_enter(m: *mut gc_mutator_t) -> i8 {
    guard("gc_safe_enter", -1, || {
        let mut regs = [0; gc_core::SAVED_REGS];
        gc_core::tls::save_registers(&mut regs);
        // SAFETY: forwarded; `regs` is this call's.
        unsafe { gc_safe_enter_impl(m, &regs) }
    })
}

/// `gc_safe_enter` once the registers are saved: checks `m`, then forwards.
///
/// # Safety
/// `m` is null or a mutator pointer; `regs` points to the saved registers.
unsafe extern "C" fn gc_safe_enter_impl(
    m: *mut gc_mutator_t,
    regs: *const [usize; gc_core::SAVED_REGS],
) -> i8 {
    guard("gc_safe_enter", -1, || {
        // SAFETY: the ptls is null or one this library handed out (this function's
        // contract).
        let Some(ms) = (unsafe { mutator_ref(m, "gc_safe_enter") }) else {
            return -1;
        };
        // SAFETY: the calling thread's own mutator (checked); the C caller keeps off the
        // heap until gc_safe_leave (the function's documented contract); `regs` is the
        // buffer `gc_safe_enter` filled.
        unsafe { ms.enter_gc_safe(&*regs) as i8 }
    })
}

/// Enters a GC-safe region like `gc_safe_enter`, recording `sp` as the lowest stack
/// address in use during the region instead of the caller's stack pointer. For a
/// callback called deeper than the frame that stays live while the thread blocks (a GIL's
/// block hook): `sp` is the stack pointer of that frame, which must have spilled the
/// callee-saved registers that may hold references into itself, and must not return
/// before `gc_safe_leave`. The registers saved are this call's (their values only add
/// roots). Returns the previous state; -1 on error (`sp` not inside the thread's stack,
/// or below the caller's own stack pointer).
///
/// # Safety
/// `m` is null or a mutator pointer; `sp` satisfies the above.
#[no_mangle]
pub unsafe extern "C" fn gc_safe_enter_sp(m: *mut gc_mutator_t, sp: *mut c_void) -> i8 {
    guard("gc_safe_enter_sp", -1, || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { mutator_ref(m, "gc_safe_enter_sp") }) else {
            return -1;
        };
        // SAFETY: the calling thread's own mutator (checked); `sp` as documented.
        match unsafe { ms.enter_gc_safe_at(sp as usize) } {
            Ok(state) => state as i8,
            Err(e) => fail(e, -1),
        }
    })
}

/// Leaves a GC-safe region entered with `gc_safe_enter` (`state` is what it returned),
/// waiting for a running collection to finish first.
///
/// # Safety
/// `m` is null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_safe_leave(m: *mut gc_mutator_t, state: i8) {
    guard("gc_safe_leave", (), || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { mutator_ref(m, "gc_safe_leave") }) else {
            return;
        };
        let Some(state) = SafeState::from_raw(state) else {
            set_error(format!("gc_safe_leave: invalid state {state}"));
            return;
        };
        // SAFETY: the calling thread's own mutator (checked), with a state its entry
        // returned (the caller's contract).
        unsafe { ms.leave_gc_safe(state) };
    })
}

/// The write barrier: call after storing `child` into `parent` (either may be NULL).
///
/// # Safety
/// `m` null or a mutator pointer; `parent` and `child` null or live objects of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_wb(m: *mut gc_mutator_t, parent: *mut c_void, child: *mut c_void) {
    let (Some(p), Some(c)) = (
        ObjRef::from_ptr(parent.cast()),
        ObjRef::from_ptr(child.cast()),
    ) else {
        return;
    };
    // The common case (nothing to remember) needs no thread lookup at all.
    // SAFETY: live objects per the caller.
    if !unsafe { barrier_fires(p, c) } {
        return;
    }
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    if let Some(ms) = unsafe { mutator_ref(m, "gc_wb") } {
        // SAFETY: calling thread's mutator; live objects.
        unsafe { ms.wb(p, c) };
    }
}

/// The backward barrier: call after storing possibly young references into `parent`.
///
/// # Safety
/// As for `gc_wb`.
#[no_mangle]
pub unsafe extern "C" fn gc_wb_back(m: *mut gc_mutator_t, parent: *mut c_void) {
    let Some(p) = ObjRef::from_ptr(parent.cast()) else {
        return;
    };
    // SAFETY: live object per the caller.
    if !unsafe { back_barrier_fires(p) } {
        return;
    }
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    if let Some(ms) = unsafe { mutator_ref(m, "gc_wb_back") } {
        // SAFETY: as above.
        unsafe { ms.wb_back(p) };
    }
}

/// Schedules the sweep function of `obj` (once; a second call returns `RT_ERR_STATE` and never
/// causes a second sweep).
///
/// # Safety
/// `m` null or a mutator pointer; `obj` null or a live object of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_schedule_sweep(m: *mut gc_mutator_t, obj: *mut c_void) -> c_int {
    guard("gc_schedule_sweep", PANIC, || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { mutator_ref(m, "gc_schedule_sweep") }) else {
            return err_code();
        };
        let Some(o) = ObjRef::from_ptr(obj.cast()) else {
            set_error("gc_schedule_sweep: object is NULL");
            return err_code();
        };
        // SAFETY: calling thread's mutator; live object per the caller.
        match unsafe { ms.schedule_sweep(o) } {
            Ok(()) => 0,
            Err(e) => fail_code(e),
        }
    })
}

/// # Safety
/// The pointer arguments are null or what their C types promise: a live heap from
/// `gc_heap_new`/`gc_default_heap`, a `ptls` this library handed out, a
/// NUL-terminated string.
pub(crate) unsafe fn active_marker<'a>(
    m: *mut gc_mutator_t,
    what: &'static str,
) -> Option<&'a mut Marker<'a>> {
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    let head = (unsafe { marking_head(m, what) })?;
    let p = head.marker.load(Ordering::Acquire) as *mut Marker<'a>;
    if p.is_null() {
        set_status(Status::State, GcError::NotMarking { what });
        return None;
    }
    // SAFETY: set by the collector on this thread for the mark phase; mark functions and
    // scanners run with no other reference to it alive.
    Some(unsafe { &mut *p })
}

/// The `ptls` of a thread that may be marking: the calling thread's attached mutator, or
/// the calling collector helper thread's record.
#[inline]
/// # Safety
/// The pointer arguments are null or what their C types promise: a live heap from
/// `gc_heap_new`/`gc_default_heap`, a `ptls` this library handed out, a
/// NUL-terminated string.
unsafe fn marking_head<'a>(m: *mut gc_mutator_t, what: &'static str) -> Option<&'a TlsHead> {
    let head = m as *const TlsHead;
    if !head.is_null() {
        // SAFETY: a non-null ptls is, by the documented contract, a pointer this library
        // handed out (mutator or helper record), which stays readable.
        let h = unsafe { &*head };
        let magic = h.magic.load(Ordering::Relaxed);
        if magic == MUTATOR_MAGIC || magic == HELPER_MAGIC {
            if h.thread.load(Ordering::Relaxed) == thread_id() {
                return Some(h);
            }
            // A ptls of another thread. GAP keeps the collecting thread's ptls in a
            // global (set in its pre-GC callback) and passes that from its mark
            // functions, which here run on every collector thread: the reference goes
            // on the calling collector thread's own mark stack instead of racing for
            // another thread's.
            if let Some(own) = own_marking_head() {
                return Some(own);
            }
        }
    }
    if helper_ptls().is_null() {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        // SAFETY: the head is only read (here and by the callers of marking_head).
        (unsafe { mutator_ref(m, what) }).map(|ms| unsafe { ms.head() })
    } else {
        set_error(format!(
            "{what}: ptls {m:p} is not the calling collector thread's ({:p})",
            helper_ptls()
        ));
        None
    }
}

/// The calling thread's own record if it is marking now: a collector helper thread's,
/// or the collecting thread's while its marker is set.
fn own_marking_head<'a>() -> Option<&'a TlsHead> {
    let helper = helper_ptls();
    if !helper.is_null() {
        // SAFETY: a helper thread's record lives as long as the thread.
        return Some(unsafe { &*helper });
    }
    let cur = current_ptls();
    if cur.is_null() {
        return None;
    }
    // SAFETY: the calling thread's attached mutator is alive while attached; its head
    // is only read (here, and by C through `jl_gc_mark_ptls`-style callers).
    let head = unsafe { (*cur).head() };
    (!head.marker.load(Ordering::Acquire).is_null()).then_some(head)
}

/// The calling thread's own `ptls` while it marks (a collector helper thread's record,
/// or the collecting thread's mutator while its marker is set), NULL otherwise. The
/// compat header's inline `jl_gc_mark_queue_obj` caches it per thread, so that a
/// reference queued with another thread's `ptls` (GAP passes a saved one from mark
/// functions that run on every collector thread) needs no call out of line.
#[no_mangle]
pub extern "C" fn gc_marking_ptls() -> *mut c_void {
    own_marking_head().map_or(std::ptr::null_mut(), |h| h as *const TlsHead as *mut c_void)
}

/// Queues `obj` for marking (`jl_gc_mark_queue_obj`): 1 if it is young, 0 if old, NULL
/// or on error (outside the mark phase, wrong thread).
///
/// # Safety
/// `m` null or a mutator pointer; `obj` null or a live object of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_mark_queue_obj(m: *mut gc_mutator_t, obj: *mut c_void) -> c_int {
    let Some(o) = ObjRef::from_ptr(obj.cast()) else {
        return 0;
    };
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    match unsafe { active_marker(m, "gc_mark_queue_obj") } {
        // SAFETY: a live object of the marker's heap (the caller's contract).
        Some(mk) => (unsafe { mk.queue(o) }) as c_int,
        None => 0,
    }
}

/// Queues the `n` references at `objs`, inside `parent`, with one mark-stack entry
/// (`jl_gc_mark_queue_objarray`).
///
/// # Safety
/// As for `gc_mark_queue_obj`; `objs` readable for `n` words inside `parent`.
#[no_mangle]
pub unsafe extern "C" fn gc_mark_queue_objarray(
    m: *mut gc_mutator_t,
    parent: *mut c_void,
    objs: *mut *mut c_void,
    n: usize,
) {
    let Some(p) = ObjRef::from_ptr(parent.cast()) else {
        set_error("gc_mark_queue_objarray: parent is NULL");
        return;
    };
    if objs.is_null() && n > 0 {
        set_error("gc_mark_queue_objarray: objs is NULL");
        return;
    }
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    if let Some(mk) = unsafe { active_marker(m, "gc_mark_queue_objarray") } {
        // SAFETY: the caller guarantees the array is inside the parent.
        unsafe { mk.queue_array(p, objs as *const Option<ObjRef>, n) };
    }
}

/// Per-kind C callback registrations, for the seed's set/remove-by-pointer semantics.
fn callback_of(kind: c_int, f: *mut c_void) -> Option<Callback> {
    // SAFETY: the caller passes a function of the kind's documented signature, to be
    // called as the seed documents the kind (the `Callback::c_*` constructors' contract);
    // a function pointer and a data pointer have the same size and representation here.
    unsafe {
        Some(match kind {
            GC_CB_PRE_GC => Callback::c_pre_gc(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(c_int),
            >(f)),
            GC_CB_POST_GC => Callback::c_post_gc(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(c_int),
            >(f)),
            GC_CB_ROOT_SCANNER => Callback::c_root_scanner(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(c_int),
            >(f)),
            GC_CB_TASK_SCANNER => Callback::c_task_scanner(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut c_void, c_int),
            >(f)),
            GC_CB_NOTIFY_EXTERNAL_ALLOC => Callback::c_external_alloc(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut c_void, usize),
            >(f)),
            GC_CB_NOTIFY_EXTERNAL_FREE => Callback::c_external_free(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut c_void),
            >(f)),
            GC_CB_WEAK_PROCESSING => Callback::c_weak_processing(std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(c_int),
            >(f)),
            _ => return None,
        })
    }
}

/// Registers (`enable` non-zero) or removes a C callback of `kind` (`GC_CB_*`). An
/// `RT_ERR_*` code if the function is NULL, already registered, or (on removal) not
/// registered.
///
/// # Safety
/// `heap` null or live; `f` null or a function of the kind's signature.
#[no_mangle]
pub unsafe extern "C" fn gc_set_callback(
    heap: *mut gc_heap_t,
    kind: c_int,
    f: *mut c_void,
    enable: c_int,
) -> c_int {
    guard("gc_set_callback", PANIC, || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_set_callback") }) else {
            return err_code();
        };
        if f.is_null() {
            set_error("gc_set_callback: callback is NULL");
            return err_code();
        }
        let Some(cb) = callback_of(kind, f) else {
            set_error(format!("gc_set_callback: unknown callback kind {kind}"));
            return err_code();
        };
        let result = if enable != 0 {
            heap.add_callback(cb).map(|_| ())
        } else {
            heap.remove_c_callback(cb.kind(), f as usize)
        };
        match result {
            Ok(()) => 0,
            Err(e) => fail_code(e),
        }
    })
}

/// Number of callbacks of `kind` registered on `heap` (a negative `RT_ERR_*` code on error).
///
/// # Safety
/// `heap` null or live.
#[no_mangle]
pub unsafe extern "C" fn gc_callback_count(heap: *mut gc_heap_t, kind: c_int) -> c_int {
    guard("gc_callback_count", PANIC, || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_callback_count") }) else {
            return err_code();
        };
        let k = match kind {
            GC_CB_PRE_GC => CallbackKind::PreGc,
            GC_CB_POST_GC => CallbackKind::PostGc,
            GC_CB_ROOT_SCANNER => CallbackKind::RootScanner,
            GC_CB_TASK_SCANNER => CallbackKind::TaskScanner,
            GC_CB_NOTIFY_EXTERNAL_ALLOC => CallbackKind::ExternalAlloc,
            GC_CB_NOTIFY_EXTERNAL_FREE => CallbackKind::ExternalFree,
            GC_CB_WEAK_PROCESSING => CallbackKind::WeakProcessing,
            _ => {
                set_error(format!("gc_callback_count: unknown callback kind {kind}"));
                return err_code();
            }
        };
        heap.callback_count(k) as c_int
    })
}

/// Roots `obj` until `gc_root_delete`. NULL on error.
///
/// # Safety
/// `heap` null or live; `obj` a live object of it.
#[no_mangle]
pub unsafe extern "C" fn gc_root_new(heap: *mut gc_heap_t, obj: *mut c_void) -> *mut gc_root_t {
    guard("gc_root_new", std::ptr::null_mut(), || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_root_new") }) else {
            return std::ptr::null_mut();
        };
        let Some(o) = ObjRef::from_ptr(obj.cast()) else {
            set_error("gc_root_new: object is NULL");
            return std::ptr::null_mut();
        };
        if let Err(e) = heap.check_object(o, "gc_root_new") {
            return fail(e, std::ptr::null_mut());
        }
        Box::into_raw(Box::new(gc_root_t {
            // SAFETY: check_object accepted it just above.
            root: unsafe { heap.root_unchecked(o) },
        }))
    })
}

/// The object a root holds.
///
/// # Safety
/// `root` null or from `gc_root_new`, not deleted.
#[no_mangle]
pub unsafe extern "C" fn gc_root_get(root: *mut gc_root_t) -> *mut c_void {
    guard("gc_root_get", std::ptr::null_mut(), || {
        if root.is_null() {
            set_error("gc_root_get: root is NULL");
            return std::ptr::null_mut();
        }
        // SAFETY: valid per the caller.
        unsafe { &*root }.root.get().as_ptr().cast()
    })
}

/// Unroots and frees a root.
///
/// # Safety
/// `root` null or from `gc_root_new`, not deleted.
#[no_mangle]
pub unsafe extern "C" fn gc_root_delete(root: *mut gc_root_t) {
    guard("gc_root_delete", (), || {
        if !root.is_null() {
            // SAFETY: created by Box::into_raw in gc_root_new.
            drop(unsafe { Box::from_raw(root) });
        }
    })
}

/// Registers a stack `[lo, hi)` as a task. NULL on error (empty range).
///
/// # Safety
/// `heap` null or live; `[lo, hi)` readable memory for as long as the task stays
/// registered (conservative scanning reads it).
#[no_mangle]
pub unsafe extern "C" fn gc_register_task(
    heap: *mut gc_heap_t,
    lo: *mut c_void,
    hi: *mut c_void,
) -> *mut gc_task_t {
    guard("gc_register_task", std::ptr::null_mut(), || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_register_task") }) else {
            return std::ptr::null_mut();
        };
        // SAFETY: the C contract of gc_register_task: [lo, hi) stays mapped while registered.
        match unsafe { heap.register_task(lo as usize, hi as usize) } {
            Ok(t) => task_ptr(&t),
            Err(e) => fail(e, std::ptr::null_mut()),
        }
    })
}

/// Unregisters a task registered with `gc_register_task`. `RT_ERR_ARG` if unknown.
///
/// # Safety
/// `heap` null or live; `task` anything (it is looked up).
#[no_mangle]
pub unsafe extern "C" fn gc_unregister_task(heap: *mut gc_heap_t, task: *mut gc_task_t) -> c_int {
    guard("gc_unregister_task", PANIC, || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_unregister_task") }) else {
            return err_code();
        };
        let Some(t) = heap.task_from_addr(task as usize) else {
            return fail_code(GcError::BadTask {
                addr: task as usize,
                reason: "not a registered task of this heap",
            });
        };
        match heap.unregister_task(&t) {
            Ok(()) => 0,
            Err(e) => fail_code(e),
        }
    })
}

/// Records the lowest stack address in use by a suspended task (0: unknown).
///
/// # Safety
/// `task` null or a registered task.
#[no_mangle]
pub unsafe extern "C" fn gc_task_set_sp(task: *mut gc_task_t, sp: *mut c_void) {
    guard("gc_task_set_sp", (), || {
        if task.is_null() {
            set_error("gc_task_set_sp: task is NULL");
            return;
        }
        // SAFETY: a registered task per the caller.
        unsafe { task_from_ptr(task) }.set_saved_sp(sp as usize);
    })
}

/// The stack bounds of a task.
///
/// # Safety
/// `task` null or a registered task; `lo` and `hi` null or writable.
#[no_mangle]
pub unsafe extern "C" fn gc_task_stack(
    task: *mut gc_task_t,
    lo: *mut *mut c_void,
    hi: *mut *mut c_void,
) -> c_int {
    guard("gc_task_stack", PANIC, || {
        if task.is_null() {
            set_error("gc_task_stack: task is NULL");
            return err_code();
        }
        // SAFETY: a registered task per the caller.
        let (l, h) = unsafe { task_from_ptr(task) }.stack_bounds();
        // SAFETY: writable when non-null per the caller.
        unsafe {
            if !lo.is_null() {
                *lo = l as *mut c_void;
            }
            if !hi.is_null() {
                *hi = h as *mut c_void;
            }
        }
        0
    })
}

/// The calling thread's own task (its stack), NULL if not attached.
#[no_mangle]
pub extern "C" fn gc_current_task() -> *mut gc_task_t {
    guard("gc_current_task", std::ptr::null_mut(), || {
        let m = current_ptls();
        if m.is_null() {
            return fail(GcError::NotAttached, std::ptr::null_mut());
        }
        // SAFETY: the current thread's mutator is alive while attached.
        task_ptr(unsafe { &*m }.task())
    })
}

/// Copies the heap's statistics into `out`. From inside a collection (a callback, a
/// mark or sweep function) they are those as of the start of that collection.
///
/// # Safety
/// `heap` null or live; `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn gc_stats(heap: *mut gc_heap_t, out: *mut gc_stats_t) -> c_int {
    guard("gc_stats", PANIC, || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_stats") }) else {
            return err_code();
        };
        if out.is_null() {
            set_error("gc_stats: out is NULL");
            return err_code();
        }
        let s = heap.stats();
        let ns = |d: std::time::Duration| d.as_nanos().min(u64::MAX as u128) as u64;
        // SAFETY: writable per the caller.
        unsafe {
            out.write(gc_stats_t {
                full_collections: s.full_collections,
                partial_collections: s.partial_collections,
                objects_allocated: s.objects_allocated,
                bytes_allocated: s.bytes_allocated,
                bytes_freed: s.bytes_freed,
                live_bytes: s.live_bytes,
                sweep_functions_run: s.sweep_functions_run,
                verify_errors: s.verify_errors,
                total_pause_ns: ns(s.total_pause),
                max_pause_ns: ns(s.max_pause),
                p50_pause_ns: ns(s.p50_pause),
                p99_pause_ns: ns(s.p99_pause),
                weak_refs_cleared: s.weak_refs_cleared,
                finalizers_queued: s.finalizers_queued,
                finalizers_run: s.finalizers_run,
                tokens_queued: s.tokens_queued,
            })
        };
        0
    })
}

/// Sets the stress mode: collect every `every` allocations per thread (0: off).
///
/// # Safety
/// `heap` null or live.
#[no_mangle]
pub unsafe extern "C" fn gc_set_stress(heap: *mut gc_heap_t, every: u64) -> c_int {
    guard("gc_set_stress", PANIC, || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_set_stress") }) else {
            return err_code();
        };
        match heap.set_stress((every != 0).then_some(every)) {
            Ok(()) => 0,
            Err(e) => fail_code(e),
        }
    })
}

/// Turns the verify mode on (non-zero) or off.
///
/// # Safety
/// `heap` null or live.
#[no_mangle]
pub unsafe extern "C" fn gc_set_verify(heap: *mut gc_heap_t, on: c_int) -> c_int {
    guard("gc_set_verify", PANIC, || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_set_verify") }) else {
            return err_code();
        };
        heap.set_verify(on != 0);
        0
    })
}

/// The type of a live object (`jl_typeof`); NULL for NULL, and for a free or
/// never-used pool cell (whose header holds a free-list link or 0, never a type), so
/// that the seed's validity check `base_ptr(jl_typeof(obj)) != NULL` rejects them.
///
/// # Safety
/// `obj` null or a live object (or a cell `is_internal_obj_alloc` reported).
#[no_mangle]
pub unsafe extern "C" fn gc_typeof(obj: *mut c_void) -> *mut c_void {
    match ObjRef::from_ptr(obj.cast()) {
        // SAFETY: a live object or a pool cell per the caller.
        Some(o) => unsafe { o.type_ptr() }.cast(),
        None => std::ptr::null_mut(),
    }
}

/// 1 if a live object is young (not yet promoted), 0 if it is old or NULL: the answer
/// `gc_mark_queue_obj` gives during marking, available at any time (for tests and
/// runtimes that want to know which generation an object is in).
///
/// # Safety
/// `obj` null or a live object.
#[no_mangle]
pub unsafe extern "C" fn gc_is_young(obj: *mut c_void) -> c_int {
    match ObjRef::from_ptr(obj.cast()) {
        // SAFETY: a live object per the caller.
        Some(o) => (unsafe { o.is_young() }) as c_int,
        None => 0,
    }
}

// ---------------------------------------------------------------------------------
// Weak references, finalizers, the reference queue and the weak-processing hook.
// ---------------------------------------------------------------------------------

/// A weak-reference object (`gc_weakref_new`): a heap object whose one field reads the
/// referent, and reads NULL once a collection found the referent unreachable. Never a
/// root. C code reads `value` directly and may store a live object of the heap (or NULL)
/// into it directly, from the thread that owns the object, with no barrier needed (Julia
/// allows it; GAP's weakptr.c does it): every collection checks the referent of every
/// weak-reference object. `gc_weakref_set` does the same store after checking `wr`'s
/// type.
#[repr(C)]
pub struct gc_weakref_t {
    /// The referent, NULL once cleared.
    pub value: *mut c_void,
}

/// A weak handle for the embedder (`gc_weak_handle_new`), outside the heap.
pub struct gc_weak_handle_t {
    weak: WeakRef,
}

/// A reference queue (`gc_refqueue_new`).
pub struct gc_refqueue_t {
    queue: ReferenceQueue,
}

/// A finalizer: `f(obj)`, called once after a collection found `obj` unreachable.
pub type gc_finalizer_t = Option<unsafe extern "C" fn(obj: *mut c_void)>;
/// A reference queue's notification: `f(data)`, called after a collection queued tokens.
pub type gc_notify_t = Option<unsafe extern "C" fn(data: *mut c_void)>;

/// The calling thread's mutator, checked, running managed code and outside a collection.
/// # Safety
/// The pointer arguments are null or what their C types promise: a live heap from
/// `gc_heap_new`/`gc_default_heap`, a `ptls` this library handed out, a
/// NUL-terminated string.
unsafe fn running_mutator<'a>(
    m: *mut gc_mutator_t,
    what: &'static str,
) -> Option<&'a MutatorShared> {
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    let ms = (unsafe { mutator_ref(m, what) })?;
    if ms.in_collection() {
        set_status(
            Status::State,
            format!("{what}: {}", GcError::DuringCollection { what }),
        );
        return None;
    }
    if !ms.is_running() {
        set_status(
            status_of(&GcError::InGcSafeRegion),
            format!("{what}: {}", GcError::InGcSafeRegion),
        );
        return None;
    }
    Some(ms)
}

/// Allocates a weak-reference object pointing at `obj` (NULL allowed: a cleared one).
/// NULL on error. A safepoint: `obj` must be reachable across the call.
///
/// # Safety
/// `m` null or a mutator pointer; `obj` null or a live object of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_weakref_new(
    m: *mut gc_mutator_t,
    obj: *mut c_void,
) -> *mut gc_weakref_t {
    guard("gc_weakref_new", std::ptr::null_mut(), || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { mutator_ref(m, "gc_weakref_new") }) else {
            return std::ptr::null_mut();
        };
        // SAFETY: the calling thread's attached mutator.
        let mut mu = unsafe { Mutator::borrowed(ms) };
        match mu.new_weak_object(ObjRef::from_ptr(obj.cast())) {
            Ok(wr) => wr.as_ptr().cast(),
            Err(e) => fail(e, std::ptr::null_mut()),
        }
    })
}

/// The referent of a weak-reference object, NULL once cleared (or for NULL `wr`).
///
/// # Safety
/// `wr` null or a live weak-reference object.
#[no_mangle]
pub unsafe extern "C" fn gc_weakref_get(wr: *mut gc_weakref_t) -> *mut c_void {
    guard("gc_weakref_get", std::ptr::null_mut(), || {
        if wr.is_null() {
            set_error("gc_weakref_get: weak reference is NULL");
            return std::ptr::null_mut();
        }
        // SAFETY: a live weak-reference object: its first word is the referent, which the
        // collector writes atomically.
        unsafe { (*(wr as *const std::sync::atomic::AtomicPtr<c_void>)).load(Ordering::Acquire) }
    })
}

/// Points a weak-reference object at `obj` (NULL: at nothing). `RT_ERR_ARG` if `wr` is not a
/// weak-reference object or on a bad thread.
///
/// # Safety
/// `m` null or a mutator pointer; `wr` null or a live object; `obj` null or live.
#[no_mangle]
pub unsafe extern "C" fn gc_weakref_set(
    m: *mut gc_mutator_t,
    wr: *mut gc_weakref_t,
    obj: *mut c_void,
) -> c_int {
    guard("gc_weakref_set", PANIC, || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { mutator_ref(m, "gc_weakref_set") }) else {
            return err_code();
        };
        let Some(w) = ObjRef::from_ptr(wr.cast()) else {
            set_error("gc_weakref_set: weak reference is NULL");
            return err_code();
        };
        // SAFETY: the calling thread's attached mutator.
        let mut mu = unsafe { Mutator::borrowed(ms) };
        let target = ObjRef::from_ptr(obj.cast());
        for o in std::iter::once(w).chain(target) {
            if let Err(e) = mu.heap().check_object(o, "gc_weakref_set") {
                return fail_code(e);
            }
        }
        // SAFETY: both checked to be allocated objects of this heap just above.
        match unsafe { mu.weak_object_set(w, target) } {
            Ok(()) => 0,
            Err(e) => fail_code(e),
        }
    })
}

/// The type of weak-reference objects of `heap` (what `gc_typeof` returns for them).
///
/// # Safety
/// `heap` null or live.
#[no_mangle]
pub unsafe extern "C" fn gc_weakref_type(heap: *mut gc_heap_t) -> *mut c_void {
    guard("gc_weakref_type", std::ptr::null_mut(), || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        match unsafe { heap_ref(heap, "gc_weakref_type") } {
            Some(h) => h.weak_ref_type().as_obj().as_ptr().cast(),
            None => std::ptr::null_mut(),
        }
    })
}

/// A weak handle to `obj` for the embedder (lives outside the heap, never a root). NULL
/// on error (NULL heap or object).
///
/// # Safety
/// `heap` null or live; `obj` null or a live object of it.
#[no_mangle]
pub unsafe extern "C" fn gc_weak_handle_new(
    heap: *mut gc_heap_t,
    obj: *mut c_void,
) -> *mut gc_weak_handle_t {
    guard("gc_weak_handle_new", std::ptr::null_mut(), || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_weak_handle_new") }) else {
            return std::ptr::null_mut();
        };
        let Some(o) = ObjRef::from_ptr(obj.cast()) else {
            set_error("gc_weak_handle_new: object is NULL");
            return std::ptr::null_mut();
        };
        if let Err(e) = heap.check_object(o, "gc_weak_handle_new") {
            return fail(e, std::ptr::null_mut());
        }
        Box::into_raw(Box::new(gc_weak_handle_t {
            // SAFETY: check_object accepted it just above.
            weak: unsafe { heap.new_weak_ref_unchecked(o) },
        }))
    })
}

/// The object of a weak handle, NULL once a collection found it unreachable.
///
/// # Safety
/// `h` null or from `gc_weak_handle_new`, not deleted.
#[no_mangle]
pub unsafe extern "C" fn gc_weak_handle_get(h: *mut gc_weak_handle_t) -> *mut c_void {
    guard("gc_weak_handle_get", std::ptr::null_mut(), || {
        if h.is_null() {
            set_error("gc_weak_handle_get: handle is NULL");
            return std::ptr::null_mut();
        }
        // SAFETY: valid per the caller.
        unsafe { &*h }
            .weak
            .get()
            .map_or(std::ptr::null_mut(), |o| o.as_ptr().cast())
    })
}

/// Releases a weak handle.
///
/// # Safety
/// `h` null or from `gc_weak_handle_new`, not deleted.
#[no_mangle]
pub unsafe extern "C" fn gc_weak_handle_delete(h: *mut gc_weak_handle_t) {
    guard("gc_weak_handle_delete", (), || {
        if !h.is_null() {
            // SAFETY: created by Box::into_raw in gc_weak_handle_new.
            drop(unsafe { Box::from_raw(h) });
        }
    })
}

/// Registers finalizer `f` for `obj` (Julia's `jl_gc_add_ptr_finalizer`). An
/// `RT_ERR_*` code on error (NULL object or function, bad thread, during a collection).
///
/// # Safety
/// `m` null or a mutator pointer; `obj` null or a live object of its heap; `f` null or a
/// function of `gc_finalizer_t`'s type that may be called once with `obj` (it must not
/// free it).
#[no_mangle]
pub unsafe extern "C" fn gc_add_finalizer(
    m: *mut gc_mutator_t,
    obj: *mut c_void,
    f: gc_finalizer_t,
) -> c_int {
    guard("gc_add_finalizer", PANIC, || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { running_mutator(m, "gc_add_finalizer") }) else {
            return err_code();
        };
        let Some(o) = ObjRef::from_ptr(obj.cast()) else {
            set_error("gc_add_finalizer: object is NULL");
            return err_code();
        };
        let Some(f) = f else {
            set_error("gc_add_finalizer: finalizer function is NULL");
            return err_code();
        };
        // SAFETY: the calling thread's attached mutator.
        let mut m = unsafe { Mutator::borrowed(ms) };
        if let Err(e) = m.heap().check_object(o, "gc_add_finalizer") {
            return fail_code(e);
        }
        // SAFETY: check_object accepted it just above; `f` is a finalizer of Julia's
        // ptr-finalizer signature (this function's contract).
        unsafe { m.add_c_finalizer_unchecked(o, f) };
        0
    })
}

/// Runs the finalizers of `obj` now (`jl_finalize`); returns how many ran (0 inside a
/// finalizer: they are queued to run after it), a negative `RT_ERR_*` code on error.
///
/// # Safety
/// `m` null or a mutator pointer; `obj` null or a live object of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_finalize(m: *mut gc_mutator_t, obj: *mut c_void) -> c_int {
    guard("gc_finalize", PANIC, || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { running_mutator(m, "gc_finalize") }) else {
            return err_code();
        };
        let Some(o) = ObjRef::from_ptr(obj.cast()) else {
            set_error("gc_finalize: object is NULL");
            return err_code();
        };
        // SAFETY: the calling thread's attached mutator.
        let n = unsafe { Mutator::borrowed(ms) }.finalize(o);
        n.min(c_int::MAX as usize) as c_int
    })
}

/// Runs the pending finalizers on the calling thread; returns how many ran (0 inside a
/// finalizer), a negative `RT_ERR_*` code on error (bad thread, during a collection, in a GC-safe region).
///
/// # Safety
/// `m` null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_run_finalizers(m: *mut gc_mutator_t) -> c_int {
    guard("gc_run_finalizers", PANIC, || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { running_mutator(m, "gc_run_finalizers") }) else {
            return err_code();
        };
        // SAFETY: the calling thread's attached mutator.
        let n = unsafe { Mutator::borrowed(ms) }.run_finalizers();
        n.min(c_int::MAX as usize) as c_int
    })
}

/// Runs every registered finalizer (reachable objects included) and the pending ones:
/// for shutdown, before `gc_heap_delete` (finalizers never run at heap deletion).
/// Returns how many ran, a negative `RT_ERR_*` code on error.
///
/// # Safety
/// `m` null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_run_all_finalizers(m: *mut gc_mutator_t) -> c_int {
    guard("gc_run_all_finalizers", PANIC, || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { running_mutator(m, "gc_run_all_finalizers") }) else {
            return err_code();
        };
        // SAFETY: the calling thread's attached mutator.
        let n = unsafe { Mutator::borrowed(ms) }.run_all_finalizers();
        n.min(c_int::MAX as usize) as c_int
    })
}

/// Opts the calling thread in (non-zero) or out of running pending finalizers at its
/// safepoints (after collections it runs or stops for, when leaving a GC-safe region).
/// Off for `gc_thread_attach`, on for `jl_init`/`jl_adopt_thread`. An `RT_ERR_*` code on error.
///
/// # Safety
/// `m` null or a mutator pointer.
#[no_mangle]
pub unsafe extern "C" fn gc_set_finalizers_at_safepoints(m: *mut gc_mutator_t, on: c_int) -> c_int {
    guard("gc_set_finalizers_at_safepoints", PANIC, || {
        // SAFETY: the ptls is null or one this library handed out (this function's contract).
        let Some(ms) = (unsafe { mutator_ref(m, "gc_set_finalizers_at_safepoints") }) else {
            return err_code();
        };
        // SAFETY: the calling thread's attached mutator.
        unsafe { Mutator::borrowed(ms) }.set_finalizers_at_safepoints(on != 0);
        0
    })
}

/// Number of finalizers waiting to run on `heap` (0 and an error for NULL).
///
/// # Safety
/// `heap` null or live.
#[no_mangle]
pub unsafe extern "C" fn gc_pending_finalizers(heap: *mut gc_heap_t) -> usize {
    guard("gc_pending_finalizers", 0, || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        (unsafe { heap_ref(heap, "gc_pending_finalizers") }).map_or(0, |h| h.pending_finalizers())
    })
}

/// A new reference queue of `heap` (phantom semantics: a registered object's token is
/// queued by the collection that finds the object gone, which frees it). NULL on error.
///
/// # Safety
/// `heap` null or live.
#[no_mangle]
pub unsafe extern "C" fn gc_refqueue_new(heap: *mut gc_heap_t) -> *mut gc_refqueue_t {
    guard("gc_refqueue_new", std::ptr::null_mut(), || {
        // SAFETY: the heap pointer is null or live (this function's contract).
        let Some(heap) = (unsafe { heap_ref(heap, "gc_refqueue_new") }) else {
            return std::ptr::null_mut();
        };
        Box::into_raw(Box::new(gc_refqueue_t {
            queue: heap.new_reference_queue(),
        }))
    })
}

/// Registers `obj` with `token`. `RT_ERR_ARG` on error (NULL queue or object).
///
/// # Safety
/// `q` null or from `gc_refqueue_new`; `obj` null or a live object of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_refqueue_register(
    q: *mut gc_refqueue_t,
    obj: *mut c_void,
    token: usize,
) -> c_int {
    guard("gc_refqueue_register", PANIC, || {
        if q.is_null() {
            set_error("gc_refqueue_register: queue is NULL");
            return err_code();
        }
        let Some(o) = ObjRef::from_ptr(obj.cast()) else {
            set_error("gc_refqueue_register: object is NULL");
            return err_code();
        };
        // SAFETY: valid per the caller.
        let queue = &unsafe { &*q }.queue;
        if let Err(e) = queue.heap().check_object(o, "gc_refqueue_register") {
            return fail_code(e);
        }
        // SAFETY: check_object accepted it just above.
        unsafe { queue.register_unchecked(o, token) };
        0
    })
}

/// Takes up to `cap` available tokens, oldest first, into `out`; returns how many. Any
/// thread, outside collections.
///
/// # Safety
/// `q` null or from `gc_refqueue_new`; `out` writable for `cap` words (or NULL with 0).
#[no_mangle]
pub unsafe extern "C" fn gc_refqueue_drain(
    q: *mut gc_refqueue_t,
    out: *mut usize,
    cap: usize,
) -> usize {
    guard("gc_refqueue_drain", 0, || {
        if q.is_null() || (out.is_null() && cap > 0) {
            set_error("gc_refqueue_drain: queue or out is NULL");
            return 0;
        }
        // SAFETY: valid per the caller.
        let tokens = unsafe { &*q }.queue.drain_up_to(cap);
        for (i, t) in tokens.iter().enumerate() {
            // SAFETY: i < tokens.len() <= cap; writable per the caller.
            unsafe { out.add(i).write(*t) };
        }
        tokens.len()
    })
}

/// Number of tokens available (no lock: a flag to poll).
///
/// # Safety
/// `q` null or from `gc_refqueue_new`.
#[no_mangle]
pub unsafe extern "C" fn gc_refqueue_len(q: *mut gc_refqueue_t) -> usize {
    guard("gc_refqueue_len", 0, || {
        if q.is_null() {
            set_error("gc_refqueue_len: queue is NULL");
            return 0;
        }
        // SAFETY: valid per the caller.
        unsafe { &*q }.queue.len()
    })
}

/// Sets (NULL `f`: removes) the function a collecting thread calls with `data`, after
/// the world resumes, when a collection queued tokens on `q`.
///
/// # Safety
/// `q` null or from `gc_refqueue_new`; `f` null or a function of the documented type.
#[no_mangle]
pub unsafe extern "C" fn gc_refqueue_set_notify(
    q: *mut gc_refqueue_t,
    f: gc_notify_t,
    data: *mut c_void,
) -> c_int {
    guard("gc_refqueue_set_notify", PANIC, || {
        if q.is_null() {
            set_error("gc_refqueue_set_notify: queue is NULL");
            return err_code();
        }
        // SAFETY: `q` is valid and `f(data)` may be called from any attached thread
        // (this function's contract).
        unsafe { (*q).queue.set_c_notify(f, data) };
        0
    })
}

/// Deletes a queue: its registrations end, tokens not drained are lost.
///
/// # Safety
/// `q` null or from `gc_refqueue_new`, not deleted.
#[no_mangle]
pub unsafe extern "C" fn gc_refqueue_delete(q: *mut gc_refqueue_t) {
    guard("gc_refqueue_delete", (), || {
        if !q.is_null() {
            // SAFETY: created by Box::into_raw in gc_refqueue_new.
            drop(unsafe { Box::from_raw(q) });
        }
    })
}

/// In a weak-processing hook (or a mark function): 1 if `obj` is marked so far (it
/// survives this collection), 0 if not or on error (outside marking, wrong thread).
///
/// # Safety
/// `m` null or a mutator pointer; `obj` null or a live object of its heap.
#[no_mangle]
pub unsafe extern "C" fn gc_is_marked(m: *mut gc_mutator_t, obj: *mut c_void) -> c_int {
    let Some(o) = ObjRef::from_ptr(obj.cast()) else {
        return 0;
    };
    // SAFETY: the ptls is null or one this library handed out (this function's contract).
    match unsafe { active_marker(m, "gc_is_marked") } {
        // SAFETY: a live object of the marker's heap (the caller's contract).
        Some(mk) => (unsafe { mk.is_marked(o) }) as c_int,
        None => 0,
    }
}

// ---------------------------------------------------------------------------------
// The seed's names (julia_gcext_compat.h), over the default heap.
// ---------------------------------------------------------------------------------

/// Opaque `jl_value_t`: any object.
#[repr(C)]
pub struct jl_value_t {
    _opaque: [u8; 0],
}

/// Opaque `jl_datatype_t`: a type (itself an object).
#[repr(C)]
pub struct jl_datatype_t {
    _opaque: [u8; 0],
}

/// Opaque `jl_module_t`: kept for the caller, never used.
#[repr(C)]
pub struct jl_module_t {
    _opaque: [u8; 0],
}

/// Opaque `jl_task_t`: a registered stack.
#[repr(C)]
pub struct jl_task_t {
    _opaque: [u8; 0],
}

/// Opaque thread state behind `jl_ptls_t`.
#[repr(C)]
pub struct jl_tls_states_t {
    _opaque: [u8; 0],
}

/// `jl_ptls_t`: the calling thread's state.
pub type jl_ptls_t = *mut jl_tls_states_t;
/// `jl_gc_collection_t`: `JL_GC_AUTO` (0), `JL_GC_FULL` (1), `JL_GC_INCREMENTAL` (2).
pub type jl_gc_collection_t = std::ffi::c_uint;
/// `jl_markfunc_t`.
pub type jl_markfunc_t = Option<unsafe extern "C" fn(jl_ptls_t, *mut jl_value_t) -> usize>;
/// `jl_sweepfunc_t`.
pub type jl_sweepfunc_t = Option<unsafe extern "C" fn(*mut jl_value_t)>;
/// `jl_gc_cb_pre_gc_t`: see `GC_CB_PRE_GC` (a barrier it issues counts for the
/// collection it runs in).
pub type jl_gc_cb_pre_gc_t = Option<unsafe extern "C" fn(c_int)>;
/// `jl_gc_cb_post_gc_t`.
pub type jl_gc_cb_post_gc_t = Option<unsafe extern "C" fn(c_int)>;
/// `jl_gc_cb_root_scanner_t`.
pub type jl_gc_cb_root_scanner_t = Option<unsafe extern "C" fn(c_int)>;
/// `jl_gc_cb_task_scanner_t`.
pub type jl_gc_cb_task_scanner_t = Option<unsafe extern "C" fn(*mut jl_task_t, c_int)>;
/// `jl_gc_cb_notify_external_alloc_t`.
pub type jl_gc_cb_notify_external_alloc_t = Option<unsafe extern "C" fn(*mut c_void, usize)>;
/// `jl_gc_cb_notify_external_free_t`.
pub type jl_gc_cb_notify_external_free_t = Option<unsafe extern "C" fn(*mut c_void)>;

fn ptls(p: jl_ptls_t) -> *mut gc_mutator_t {
    p as *mut gc_mutator_t
}

/// Opaque `jl_sym_t`: an interned, immortal name.
pub struct jl_sym_t {
    name: CString,
}

static SYMBOLS: Mutex<Option<HashMap<String, &'static jl_sym_t>>> = Mutex::new(None);
/// The addresses `jl_symbol` handed out, so that a pointer given as a symbol can be
/// checked before it is read (a C string passed instead of `jl_symbol(...)` is a common
/// slip when porting).
static SYMBOL_ADDRS: Mutex<Option<std::collections::HashSet<usize>>> = Mutex::new(None);

/// Whether `sym` came from `jl_symbol`; records an error naming `what` if not.
fn is_symbol(sym: *const jl_sym_t, what: &str) -> bool {
    let known = SYMBOL_ADDRS
        .lock()
        .as_ref()
        .is_some_and(|s| s.contains(&(sym as usize)));
    if !known {
        set_error(format!(
            "{what}: {sym:p} is not a symbol from jl_symbol (a C string passed as the name?)"
        ));
    }
    known
}

/// Interns `name` (`jl_symbol`); NULL if `name` is NULL or not UTF-8.
///
/// # Safety
/// `name` null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn jl_symbol(name: *const c_char) -> *mut jl_sym_t {
    guard("jl_symbol", std::ptr::null_mut(), || {
        // SAFETY: the name is null or NUL-terminated (this function's contract).
        let Some(s) = (unsafe { c_str(name, "jl_symbol") }) else {
            return std::ptr::null_mut();
        };
        let mut table = SYMBOLS.lock();
        let map = table.get_or_insert_with(HashMap::new);
        let sym = *map.entry(s.to_string()).or_insert_with(|| {
            let sym: &'static jl_sym_t = Box::leak(Box::new(jl_sym_t {
                name: CString::new(s).expect("came from a C string"),
            }));
            SYMBOL_ADDRS
                .lock()
                .get_or_insert_with(Default::default)
                .insert(sym as *const jl_sym_t as usize);
            sym
        });
        sym as *const jl_sym_t as *mut jl_sym_t
    })
}

/// The text of a symbol.
///
/// # Safety
/// `sym` null or from `jl_symbol`.
#[no_mangle]
pub unsafe extern "C" fn jl_symbol_name(sym: *mut jl_sym_t) -> *const c_char {
    guard("jl_symbol_name", std::ptr::null(), || {
        if sym.is_null() || !is_symbol(sym, "jl_symbol_name") {
            return std::ptr::null();
        }
        // SAFETY: symbols are immortal.
        unsafe { &*sym }.name.as_ptr()
    })
}

/// Creates the default heap and attaches the calling thread (`jl_init`). Calling it
/// again on an attached thread does nothing.
#[no_mangle]
pub extern "C" fn jl_init() {
    guard("jl_init", (), || {
        julia::init_default();
    })
}

/// Attaches the calling thread to the default heap (Julia's `jl_adopt_thread`).
#[no_mangle]
pub extern "C" fn jl_adopt_thread() -> jl_ptls_t {
    guard("jl_adopt_thread", std::ptr::null_mut(), || {
        let current = current_ptls();
        if !current.is_null() {
            return current as jl_ptls_t;
        }
        // SAFETY: the default heap is live for the process.
        let m = unsafe { gc_thread_attach(gc_default_heap()) };
        if !m.is_null() {
            // SAFETY: the mutator just attached.
            unsafe { gc_set_finalizers_at_safepoints(m, 1) };
        }
        julia::update_thread_count();
        m as jl_ptls_t
    })
}

/// Detaches the calling thread.
#[no_mangle]
pub extern "C" fn jl_gc_thread_detach() -> c_int {
    guard("jl_gc_thread_detach", PANIC, || {
        let r = gc_thread_detach();
        julia::update_thread_count();
        r
    })
}

/// The calling thread's `ptls`: its attached mutator's, or, on one of a heap's collector
/// helper threads (a mark function or task scanner running there), that thread's own
/// record, as Julia's GC threads have a `ptls` of their own (GAP 4.15's task scanner
/// marks from `jl_get_ptls_states()` on whichever thread marks the task). NULL (and an
/// error) on any other thread.
#[no_mangle]
pub extern "C" fn jl_get_ptls_states() -> jl_ptls_t {
    let m = cur();
    if m.is_null() {
        set_status(Status::NotAttached, GcError::NotAttached);
    }
    m as jl_ptls_t
}

/// The last error on this thread, NULL if none.
#[no_mangle]
pub extern "C" fn jl_gc_last_error() -> *const c_char {
    gc_last_error()
}

/// The status of the last error on this thread (`gc_last_status`).
#[no_mangle]
pub extern "C" fn jl_gc_last_status() -> i32 {
    gc_last_status()
}

/// Forgets the last error.
#[no_mangle]
pub extern "C" fn jl_gc_clear_error() {
    gc_clear_error()
}

/// `jl_gc_max_internal_obj_size`.
#[no_mangle]
pub extern "C" fn jl_gc_max_internal_obj_size() -> usize {
    gc_max_internal_obj_size()
}

/// `jl_new_foreign_type`: module and super may be NULL (super, if given, must be a type
/// of the default heap). Neither is stored: this ABI has no call that reads a type's
/// module or supertype back (`jl_datatype_t` is opaque here).
///
/// # Safety
/// `name` null or from `jl_symbol`; the functions have the seed's signatures.
#[no_mangle]
pub unsafe extern "C" fn jl_new_foreign_type(
    name: *mut jl_sym_t,
    _module: *mut jl_module_t,
    super_: *mut jl_datatype_t,
    markfunc: jl_markfunc_t,
    sweepfunc: jl_sweepfunc_t,
    haspointers: c_int,
    large: c_int,
) -> *mut jl_datatype_t {
    guard("jl_new_foreign_type", std::ptr::null_mut(), || {
        // SAFETY: the seed's function types take pointers where ours take void pointers:
        // same ABI, same representation.
        let (markfunc, sweepfunc) = unsafe {
            (
                std::mem::transmute::<jl_markfunc_t, gc_markfunc_t>(markfunc),
                std::mem::transmute::<jl_sweepfunc_t, gc_sweepfunc_t>(sweepfunc),
            )
        };
        if name.is_null() {
            set_error("jl_new_foreign_type: name is NULL");
            return std::ptr::null_mut();
        }
        if !is_symbol(name, "jl_new_foreign_type") {
            return std::ptr::null_mut();
        }
        let heap = gc_default_heap();
        if !super_.is_null() {
            // SAFETY: the default heap is live.
            let h = &unsafe { &*heap }.heap;
            if h.type_from_addr(super_ as usize).is_err() {
                return fail(
                    GcError::NotAType {
                        addr: super_ as usize,
                    },
                    std::ptr::null_mut(),
                );
            }
        }
        // SAFETY: symbols are immortal; the default heap is live.
        let ty = unsafe {
            gc_new_foreign_type(
                heap,
                (*name).name.as_ptr(),
                markfunc,
                sweepfunc,
                haspointers,
                large,
            )
        };
        ty.cast()
    })
}

/// `jl_gc_alloc_typed`.
///
/// # Safety
/// As for `gc_alloc`.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_alloc_typed(
    ptls: jl_ptls_t,
    sz: usize,
    ty: *mut c_void,
) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { gc_alloc(self::ptls(ptls), sz, ty) }
}

/// `jl_gc_schedule_foreign_sweepfunc` (errors are reported by `jl_gc_last_error`).
///
/// # Safety
/// As for `gc_schedule_sweep`.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_schedule_foreign_sweepfunc(ptls: jl_ptls_t, obj: *mut jl_value_t) {
    guard("jl_gc_schedule_foreign_sweepfunc", (), || {
        // SAFETY: forwarded.
        unsafe { gc_schedule_sweep(self::ptls(ptls), obj.cast()) };
    })
}

/// `jl_gc_mark_queue_obj`.
///
/// # Safety
/// As for `gc_mark_queue_obj`.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_mark_queue_obj(ptls: jl_ptls_t, obj: *mut jl_value_t) -> c_int {
    // SAFETY: forwarded.
    unsafe { gc_mark_queue_obj(self::ptls(ptls), obj.cast()) }
}

/// `jl_gc_mark_queue_objarray`.
///
/// # Safety
/// As for `gc_mark_queue_objarray`.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_mark_queue_objarray(
    ptls: jl_ptls_t,
    parent: *mut jl_value_t,
    objs: *mut *mut jl_value_t,
    nobjs: usize,
) {
    // SAFETY: forwarded.
    unsafe { gc_mark_queue_objarray(self::ptls(ptls), parent.cast(), objs.cast(), nobjs) }
}

macro_rules! set_cb {
    ($name:ident, $kind:expr, $ty:ty) => {
        /// The seed's callback setter: `enable` non-zero registers (at most once; a repeat
        /// is refused with an error), zero removes.
        #[no_mangle]
        pub extern "C" fn $name(cb: $ty, enable: c_int) {
            guard(stringify!($name), (), || {
                let f = cb.map_or(std::ptr::null_mut(), |f| f as *mut c_void);
                // SAFETY: the default heap is live; f has the kind's signature (typed
                // above).
                unsafe { gc_set_callback(gc_default_heap(), $kind, f, enable) };
            })
        }
    };
}

set_cb!(jl_gc_set_cb_pre_gc, GC_CB_PRE_GC, jl_gc_cb_pre_gc_t);
set_cb!(jl_gc_set_cb_post_gc, GC_CB_POST_GC, jl_gc_cb_post_gc_t);
set_cb!(
    jl_gc_set_cb_root_scanner,
    GC_CB_ROOT_SCANNER,
    jl_gc_cb_root_scanner_t
);
set_cb!(
    jl_gc_set_cb_task_scanner,
    GC_CB_TASK_SCANNER,
    jl_gc_cb_task_scanner_t
);
set_cb!(
    jl_gc_set_cb_notify_external_alloc,
    GC_CB_NOTIFY_EXTERNAL_ALLOC,
    jl_gc_cb_notify_external_alloc_t
);
set_cb!(
    jl_gc_set_cb_notify_external_free,
    GC_CB_NOTIFY_EXTERNAL_FREE,
    jl_gc_cb_notify_external_free_t
);

/// `jl_gc_collect(JL_GC_AUTO | JL_GC_FULL | JL_GC_INCREMENTAL)` on the calling thread.
#[no_mangle]
pub extern "C" fn jl_gc_collect(kind: jl_gc_collection_t) {
    guard("jl_gc_collect", (), || {
        // SAFETY: gc_collect validates the mutator.
        unsafe { gc_collect(cur(), kind.min(c_int::MAX as jl_gc_collection_t) as c_int) };
    })
}

/// `jl_gc_wb`: call after storing `ptr` into `parent`.
///
/// # Safety
/// As for `gc_wb`, on the calling thread.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_wb(parent: *mut c_void, ptr: *mut c_void) {
    let (Some(p), Some(c)) = (
        ObjRef::from_ptr(parent.cast()),
        ObjRef::from_ptr(ptr.cast()),
    ) else {
        return;
    };
    // The thread's mutator is looked up only when something must be remembered.
    // SAFETY: live objects per the caller.
    if !unsafe { barrier_fires(p, c) } {
        return;
    }
    // SAFETY: forwarded.
    unsafe { gc_wb(cur(), parent, ptr) }
}

/// `jl_gc_wb_back`.
///
/// # Safety
/// As for `gc_wb_back`, on the calling thread.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_wb_back(ptr: *mut c_void) {
    let Some(p) = ObjRef::from_ptr(ptr.cast()) else {
        return;
    };
    // SAFETY: live object per the caller.
    if !unsafe { back_barrier_fires(p) } {
        return;
    }
    // SAFETY: forwarded.
    unsafe { gc_wb_back(cur(), ptr) }
}

/// `jl_typeof`.
///
/// # Safety
/// As for `gc_typeof`.
#[no_mangle]
pub unsafe extern "C" fn jl_typeof(v: *mut jl_value_t) -> *mut jl_value_t {
    // SAFETY: forwarded.
    unsafe { gc_typeof(v.cast()).cast() }
}

/// `jl_gc_safepoint` on the calling thread.
#[no_mangle]
pub extern "C" fn jl_gc_safepoint() {
    // SAFETY: gc_safepoint validates the mutator.
    unsafe { gc_safepoint(cur()) }
}

/// Registers a task's stack `[lo, hi)` with the default heap.
///
/// # Safety
/// As for `gc_register_task`: the range stays mapped and readable while registered
/// (conservative scans read it).
#[no_mangle]
pub unsafe extern "C" fn jl_gc_register_task(lo: *mut c_void, hi: *mut c_void) -> *mut jl_task_t {
    guard("jl_gc_register_task", std::ptr::null_mut(), || {
        // SAFETY: the default heap is live; the range as the caller guarantees.
        unsafe { gc_register_task(gc_default_heap(), lo, hi).cast() }
    })
}

/// Unregisters a task of the default heap.
#[no_mangle]
pub extern "C" fn jl_gc_unregister_task(task: *mut jl_task_t) -> c_int {
    guard("jl_gc_unregister_task", PANIC, || {
        // SAFETY: the default heap is live; the task is looked up.
        unsafe { gc_unregister_task(gc_default_heap(), task.cast()) }
    })
}

/// Julia's `jl_task_stack_buffer`: the task's stack start and size; `tid` gets -1.
///
/// # Safety
/// `task` null or registered; `size` and `tid` null or writable.
#[no_mangle]
pub unsafe extern "C" fn jl_task_stack_buffer(
    task: *mut jl_task_t,
    size: *mut usize,
    tid: *mut c_int,
) -> *mut c_void {
    guard("jl_task_stack_buffer", std::ptr::null_mut(), || {
        if task.is_null() {
            set_error("jl_task_stack_buffer: task is NULL");
            return std::ptr::null_mut();
        }
        // SAFETY: registered task per the caller.
        let (lo, hi) = unsafe { task_from_ptr(task.cast()) }.stack_bounds();
        // SAFETY: writable when non-null.
        unsafe {
            if !size.is_null() {
                *size = hi - lo;
            }
            if !tid.is_null() {
                *tid = -1;
            }
        }
        lo as *mut c_void
    })
}

/// `jl_gc_safe_enter`: as `gc_safe_enter` (it jumps there, so the caller's registers and
/// stack pointer are the ones saved).
///
/// # Safety
/// As for `gc_safe_enter`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn jl_gc_safe_enter(ptls: jl_ptls_t) -> i8 {
    std::arch::naked_asm!("jmp {target}", target = sym gc_safe_enter)
}

/// `jl_gc_safe_enter` (non-x86_64: registers are saved in the callee).
///
/// # Safety
/// As for `gc_safe_enter`.
///
/// cbindgen:ignore
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub unsafe extern "C" fn jl_gc_safe_enter(ptls: jl_ptls_t) -> i8 {
    guard("jl_gc_safe_enter", -1, || {
        // SAFETY: forwarded (the ptls is checked there).
        unsafe { gc_safe_enter(ptls as *mut gc_mutator_t) }
    })
}

/// `jl_gc_safe_leave`.
///
/// # Safety
/// As for `gc_safe_leave`.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_safe_leave(ptls: jl_ptls_t, state: i8) {
    guard("jl_gc_safe_leave", (), || {
        // SAFETY: forwarded.
        unsafe { gc_safe_leave(self::ptls(ptls), state) }
    })
}

/// The task of the calling thread's own stack.
#[no_mangle]
pub extern "C" fn jl_gc_current_task() -> *mut jl_task_t {
    guard("jl_gc_current_task", std::ptr::null_mut(), || {
        gc_current_task().cast()
    })
}

/// `jl_weakref_t`: a weak-reference object; `value` reads the referent, NULL once
/// cleared (Julia reads `nothing`). C may store into `value` directly (no barrier
/// needed), as Julia allows.
#[repr(C)]
pub struct jl_weakref_t {
    /// The referent, NULL once cleared.
    pub value: *mut jl_value_t,
}

/// `jl_gc_new_weakref`: a weak-reference object on the calling thread. NULL on error.
///
/// # Safety
/// `value` null or a live object of the default heap.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_new_weakref(value: *mut jl_value_t) -> *mut jl_weakref_t {
    guard("jl_gc_new_weakref", std::ptr::null_mut(), || {
        // SAFETY: forwarded; the mutator is validated.
        unsafe { gc_weakref_new(cur(), value.cast()).cast() }
    })
}

/// `jl_gc_add_ptr_finalizer`: `f` is a `void (*)(void *)` called once with `v` after a
/// collection found `v` unreachable (`v` and what it reaches stay alive until then).
///
/// # Safety
/// `v` null or a live object; `f` null or a function of that type.
#[no_mangle]
pub unsafe extern "C" fn jl_gc_add_ptr_finalizer(
    ptls: jl_ptls_t,
    v: *mut jl_value_t,
    f: *mut c_void,
) {
    guard("jl_gc_add_ptr_finalizer", (), || {
        // SAFETY: a function pointer and a data pointer have the same size and
        // representation here; the caller passes a `void (*)(void *)` (or NULL).
        let f = unsafe { std::mem::transmute::<*mut c_void, gc_finalizer_t>(f) };
        // SAFETY: forwarded.
        unsafe { gc_add_finalizer(self::ptls(ptls), v.cast(), f) };
    })
}

/// `jl_finalize`: runs the finalizers of `o` now, once, on the calling thread.
///
/// # Safety
/// `o` null or a live object of the default heap.
#[no_mangle]
pub unsafe extern "C" fn jl_finalize(o: *mut jl_value_t) {
    guard("jl_finalize", (), || {
        // SAFETY: forwarded.
        unsafe { gc_finalize(cur(), o.cast()) };
    })
}

/// Checks that `ct` is NULL or the calling thread's own task.
fn own_task(ct: *mut jl_task_t, what: &str) -> bool {
    if ct.is_null() || ct.cast() == gc_current_task() {
        return true;
    }
    set_error(format!("{what}: task {ct:p} is not the calling thread's"));
    false
}

/// The calling thread's mutator as a handle, for the functions below; `None` (and the
/// last error set) if the thread is not attached.
fn current_handle(what: &'static str) -> Option<Mutator> {
    let m = current_ptls();
    if m.is_null() {
        set_status(
            status_of(&GcError::NotAttached),
            format!("{what}: {}", GcError::NotAttached),
        );
        return None;
    }
    // SAFETY: the calling thread's attached mutator, alive while attached.
    Some(unsafe { Mutator::borrowed(&*m) })
}

/// `jl_gc_run_pending_finalizers`: runs the pending finalizers on the calling thread
/// (`ct` NULL or its own task), unless inside a finalizer or while finalizers are
/// disabled on it with `jl_gc_enable_finalizers`.
#[no_mangle]
pub extern "C" fn jl_gc_run_pending_finalizers(ct: *mut jl_task_t) {
    guard("jl_gc_run_pending_finalizers", (), || {
        if !own_task(ct, "jl_gc_run_pending_finalizers") {
            return;
        }
        if current_handle("jl_gc_run_pending_finalizers").is_some_and(|m| m.finalizers_disabled()) {
            return;
        }
        // SAFETY: gc_run_finalizers validates the mutator.
        unsafe { gc_run_finalizers(cur()) };
    })
}

/// `jl_gc_enable_finalizers`: `on == 0` disables running finalizers on the calling thread
/// (nesting: each disable needs an enable), `on != 0` re-enables them and runs those
/// pending. Enabling more often than disabling is refused with an error.
#[no_mangle]
pub extern "C" fn jl_gc_enable_finalizers(ct: *mut jl_task_t, on: c_int) {
    guard("jl_gc_enable_finalizers", (), || {
        if !own_task(ct, "jl_gc_enable_finalizers") {
            return;
        }
        let Some(mut m) = current_handle("jl_gc_enable_finalizers") else {
            return;
        };
        if on == 0 {
            m.disable_finalizers();
            return;
        }
        match m.enable_finalizers() {
            // SAFETY: gc_run_finalizers validates the mutator (running, not collecting).
            Ok(true) => drop(unsafe { gc_run_finalizers(cur()) }),
            Ok(false) => {}
            Err(e) => set_error(format!("jl_gc_enable_finalizers: {e}")),
        }
    })
}

// ---- For crates that extend this C ABI (gc-conservative-capi, gc-runtime) ----

/// Records a [`GcError`] with its status ([`status_of`]) and returns
/// the status's code (`RT_ERR_*`).
pub fn set_gc_error(err: &gc_core::GcError) -> i32 {
    let status = status_of(err);
    set_status(status, err);
    status.code()
}

/// The process's default heap (`gc_default_heap`, what the seed's `jl_*` names use),
/// made on first use from the `GC_CORE_*` environment variables.
pub fn default_heap() -> *mut gc_heap_t {
    gc_default_heap()
}

/// The Rust heap behind a C heap pointer; `None` (and the last error set, naming
/// `what`) for NULL.
///
/// # Safety
/// `p` is null or from `gc_heap_new`/`gc_default_heap` and not deleted while the
/// returned reference is used.
#[inline(always)]
pub unsafe fn heap_from_ptr<'a>(p: *mut gc_heap_t, what: &str) -> Option<&'a Heap> {
    // SAFETY: forwarded from the caller.
    unsafe { heap_ref(p, what) }
}

/// The id of the heap behind a C heap pointer (one load); `None` (and the last error
/// set) for NULL.
///
/// # Safety
/// As for [`heap_from_ptr`].
#[inline(always)]
pub unsafe fn heap_id_from_ptr(p: *mut gc_heap_t, what: &str) -> Option<HeapId> {
    // SAFETY: forwarded from the caller.
    unsafe { gc_heap_t::id_from_ptr(p, what) }
}

/// Runs `f` with the marker of the collection the calling thread is marking for, if `m`
/// is the `ptls` of the calling thread (or of the collector thread it runs on) and it is
/// marking; otherwise sets the last error (naming `what`) and returns `None`.
///
/// # Safety
/// `m` is null or a `ptls` this library handed out (a mutator or a collector thread's
/// record; their memory stays readable for the process's lifetime).
pub unsafe fn with_active_marker<R>(
    m: *mut gc_mutator_t,
    what: &'static str,
    f: impl FnOnce(&mut Marker<'_>) -> R,
) -> Option<R> {
    // SAFETY: forwarded from the caller.
    unsafe { active_marker(m, what) }.map(f)
}

/// A task pointer handed to a task scanner (`gc_task_t`) as the Rust task.
///
/// # Safety
/// `task` is non-null and a registered, live task (what a task scanner is given), for
/// as long as the returned reference is used.
pub unsafe fn task_from_ptr<'a>(task: *mut gc_task_t) -> &'a gc_core::Task {
    // SAFETY: forwarded from the caller: gc_task_t pointers are tasks' C handles.
    unsafe { gc_core::Task::from_c_handle(task as *const c_void) }
}
