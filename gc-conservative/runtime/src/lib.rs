//! `gc-runtime`: gc-core + gc-conservative + gil composed for C users, in one library
//! (`libgc_runtime.so`) and one header (`include/gc_runtime.h`).
//!
//! A C runtime with raw pointers on its stacks (GAP's kernel, minigap) needs three things
//! together: a heap whose collections scan every attached thread's stack conservatively,
//! a GIL serialising its interpreter threads, and the glue that makes a thread the GIL
//! blocks (waiting for it, or inside a blocking call) count as stopped for the collector,
//! with its callee-saved registers and the live part of its stack saved for the
//! conservative scan. This crate is that glue, in Rust, over the three crates' C ABIs
//! (the same calls a C program makes): `gc_runtime_new` makes the heap, turns on the
//! runtime's conservative task scanner and makes a GIL whose block/unblock hooks enter and
//! leave gc-core GC-safe regions; `gc_runtime_attach` / `gc_runtime_detach` attach the
//! calling thread to both; `gc_runtime_enter` / `gc_runtime_leave` take and give up the
//! GIL (outside, a thread is in a GC-safe region); `gc_runtime_poll` is the GIL's
//! safepoint; `gc_runtime_blocking_begin` / `gc_runtime_blocking_end` bracket a blocking
//! call. `gc_runtime_heap` and `gc_runtime_gil` hand out the `gc_heap_t *` and `gil_t *`
//! behind a runtime, so every `gc_core.h`, `gc_conservative.h` and `gil.h` call works on
//! them.
//!
//! Entry points that may leave the thread GC-safe are written without a prologue
//! (x86-64): they spill the caller's callee-saved registers before anything can change
//! them, so a reference the C caller keeps only in a register survives a collection that
//! runs while the thread waits.
//!
//! The crate has no Rust API of its own: Rust code uses gc-core, gc-conservative and gil
//! directly. It is an rlib so that a Rust program linking C code written against
//! `gc_runtime.h` (integration-tests' minigap) links the C ABI; `extern crate gc_runtime;`
//! keeps it linked. `artifact/` (the `gc-runtime-artifact` crate) builds it as
//! `libgc_runtime.so`, which carries gc-core's, gc-conservative's and gil's C ABI too.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

#[cfg(not(target_arch = "x86_64"))]
compile_error!(
    "gc-runtime saves the caller's callee-saved registers in naked x86-64 entry points; \
     other architectures are not supported yet"
);

// The C ABIs this crate calls and that libgc_runtime.so re-exports: gc-core-capi,
// gc-conservative-capi (and gil-capi, through `gil_sys`).
extern crate gc_conservative_capi;
extern crate gc_core_capi;

mod capi;
mod gil_sys;
mod runtime;
mod status;
