//! `gc-core-capi`: the C ABI of the `gc-core` crate: `include/gc_core.h` (native
//! names, explicit heaps; generated from this crate by cbindgen) and
//! `include/julia_gcext_compat.h` (the seed's names over a default heap, by hand).
//!
//! The functions check and convert their arguments and forward to gc-core's public API.
//! One module per concern:
//! - `entry.rs`: the way in: `entry` (ffi-support's panic guard, a
//!   refused argument becomes the entry's error return), the argument checks shared by
//!   every concern (`checked_object`, `registered`, `c_str`), the registry of C handles,
//!   the last error (`gc_last_error`);
//! - `config.rs` (`gc_config_t`), `heap.rs` (`gc_heap_t`, the default heap), `stats.rs`
//!   (`gc_stats_t`, stress and verify modes);
//! - `mutator.rs`: attaching threads, the `ptls` check (`checked_mutator`),
//!   collections, safepoints, GC-safe regions; `tasks.rs`: registered stacks;
//! - `alloc.rs`: allocation, the write barriers, `gc_typeof`; `types.rs`: foreign and
//!   layout types;
//! - `roots.rs`, `weak.rs` (weak-reference objects and weak handles), `finalizers.rs`,
//!   `refqueue.rs`, `callbacks.rs`;
//! - `marking.rs`: the mark-queue calls of mark functions, scanners and the
//!   weak-processing hook;
//! - `extend.rs`: items for the crates that extend this C ABI (gc-conservative-capi,
//!   gc-runtime): `heap_handle`, `heap_id_from_ptr`, `with_active_marker`,
//!   `task_from_ptr`, `set_gc_error`, `default_heap`;
//! - `julia/`: every name of the seed (`jl_*`), over the default heap.
//!
//! Handles: heaps, roots, weak handles and reference queues are opaque handles from
//! ffi-support's `HandleRegistry` (kind-checked): a NULL, unknown, deleted (a double
//! delete included) or wrong-kind handle is refused with `RT_ERR_ARG` (NULL, 0) and a
//! message naming the parameter and the kind expected, never dereferenced. Only the
//! per-thread `ptls` (`gc_mutator_t *`, the seed's `jl_ptls_t`) and object pointers stay
//! raw: the per-object hot paths take them. A `ptls` is checked by its magic and owning
//! thread (mutator memory is recycled, never freed); an object pointer is checked against
//! the heap's page table where the entry is not a hot path (`checked_object`). The
//! per-word lookups of gc-conservative read a heap handle's id with one load and no
//! registry lookup (`heap_id_from_ptr`; heap records are never freed, so a deleted heap
//! answers "no object").
//!
//! Decided here because they are C concerns: the `ptls` checks before a fast path,
//! `jl_symbol`'s table (interned names that live for the process), which mark stack a
//! `ptls` of another thread queues to (`marking_head`, for GAP's mark functions), and
//! the thread-local mutator of threads attached through C (`C_MUTATOR`).
//!
//! This crate is an rlib (gc-conservative-capi and gc-runtime link it, so that their
//! libraries carry gc-core's C ABI too); `artifact/` builds it as `libgc_core.so`.
//!
//! The workspace's C convention (`ffi_support`): failures return a null pointer or 0
//! (the seed's names keep Julia's signatures) or, from an int-returning `gc_*` function,
//! a shared `RT_ERR_*` code (argument errors `RT_ERR_ARG`, -1), and leave ffi-support's
//! thread-local status and message naming the problem, read by `gc_last_status()` /
//! `gc_last_error()` (and the `jl_gc_` names); a call never crashes on a null pointer, a
//! bad handle, an unattached thread, a type of another heap or a registration repeated.
//! Every entry runs in `ffi_support::guard` (through `entry`, or by forwarding to an
//! entry that does) except the per-object hot paths: the allocation fast path (its slow
//! path is guarded), the write barriers, the mark-queue calls, `gc_typeof`/`jl_typeof`,
//! `gc_is_young`/`gc_is_marked`, safepoints, `jl_get_ptls_states`, the trivial getters
//! and the naked `gc_safe_enter` (whose implementation is guarded). A panic there cannot
//! unwind into C either: Rust aborts the process, with a message, at an `extern "C"`
//! function's boundary.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![allow(non_camel_case_types)]

mod alloc;
mod callbacks;
mod config;
mod entry;
mod extend;
mod finalizers;
mod heap;
mod julia;
mod marking;
mod mutator;
mod refqueue;
mod roots;
mod stats;
mod tasks;
mod types;
mod weak;

pub use alloc::*;
pub use callbacks::*;
pub use config::*;
pub use entry::{gc_clear_error, gc_last_error, gc_last_status, set_error, set_status, status_of};
pub use extend::*;
pub use finalizers::*;
pub use heap::{gc_default_heap, gc_heap_delete, gc_heap_new, gc_heap_t, heap_id_from_ptr};
pub use julia::*;
pub use marking::*;
pub use mutator::*;
pub use refqueue::*;
pub use roots::*;
pub use stats::*;
pub use tasks::*;
pub use types::*;
pub use weak::*;
