//! A live heap's statistics and settings from C: `gc_stats_t`/`gc_stats`, the stress
//! and verify modes, and the size limit of internal objects.

use crate::entry::{arg, entry};
use crate::heap::{gc_heap_t, heap_arg};
use std::ffi::c_int;

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

/// Copies the heap's statistics into `out`. From inside a collection (a callback, a
/// mark or sweep function) they are those as of the start of that collection.
///
/// # Safety
/// `heap` any pointer (checked against the live handles); `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn gc_stats(heap: *mut gc_heap_t, out: *mut gc_stats_t) -> c_int {
    entry("gc_stats", || {
        let heap = heap_arg(heap, "gc_stats")?;
        if out.is_null() {
            return Err(arg("gc_stats: out is NULL"));
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
        Ok(0)
    })
}

/// Sets the stress mode: collect every `every` allocations per thread (0: off).
#[no_mangle]
pub extern "C" fn gc_set_stress(heap: *mut gc_heap_t, every: u64) -> c_int {
    entry("gc_set_stress", || {
        heap_arg(heap, "gc_set_stress")?.set_stress((every != 0).then_some(every))?;
        Ok(0)
    })
}

/// Turns the verify mode on (non-zero) or off.
#[no_mangle]
pub extern "C" fn gc_set_verify(heap: *mut gc_heap_t, on: c_int) -> c_int {
    entry("gc_set_verify", || {
        heap_arg(heap, "gc_set_verify")?.set_verify(on != 0);
        Ok(0)
    })
}

/// `jl_gc_max_internal_obj_size`.
#[no_mangle]
pub extern "C" fn gc_max_internal_obj_size() -> usize {
    gc_core::max_internal_obj_size()
}
