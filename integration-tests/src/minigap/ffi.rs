//! The kernels' C ABI (`minigap/minigap.h`), one table of function pointers per backend.
#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_void};

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct mg_config {
    pub gc_stress: u64,
    pub conservative: c_int,
    pub track_bags: c_int,
    pub verify: c_int,
    pub debug_newly_marked: c_int,
    pub debug_skip_stopped_stacks_in_partial: c_int,
    pub switch_interval_us: u64,
    pub min_interval: usize,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct mg_stats {
    pub full_collections: u64,
    pub partial_collections: u64,
    pub total_pause_ns: u64,
    pub max_pause_ns: u64,
    pub p50_pause_ns: u64,
    pub bytes_allocated: u64,
    pub live_bytes: u64,
    pub heap_bytes: u64,
    pub bags_allocated: u64,
    pub bags_freed: u64,
    pub free_functions_run: u64,
    pub double_sweeps: u64,
    pub ext_mallocs: u64,
    pub ext_frees: u64,
    pub host_releases: u64,
    pub verify_errors: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct mg_live_report {
    pub live_bags: u64,
    pub reachable_bags: u64,
    pub ext_live: u64,
    pub ext_reachable: u64,
}

pub type mg_output_fn = unsafe extern "C" fn(data: *mut c_void, text: *const c_char, len: usize);
pub type mg_host_release_fn = unsafe extern "C" fn(handle: *mut c_void);

/// One backend's entry points.
pub struct Api {
    pub config_default: unsafe extern "C" fn(*mut mg_config),
    pub init: unsafe extern "C" fn(*const mg_config) -> c_int,
    pub last_error: unsafe extern "C" fn() -> *const c_char,
    pub thread_attach:
        unsafe extern "C" fn(*const c_char, Option<mg_output_fn>, *mut c_void) -> c_int,
    pub thread_detach: unsafe extern "C" fn() -> c_int,
    pub eval: unsafe extern "C" fn(*const c_char, *const c_char) -> c_int,
    pub collect: unsafe extern "C" fn(c_int) -> c_int,
    pub stats: unsafe extern "C" fn(*mut mg_stats) -> c_int,
    pub check_live: unsafe extern "C" fn(*mut mg_live_report) -> c_int,
    pub set_host_release: unsafe extern "C" fn(Option<mg_host_release_fn>) -> c_int,
    pub bind_host: unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int,
    pub root_global: unsafe extern "C" fn(*const c_char) -> i64,
    pub root_to_global: unsafe extern "C" fn(i64, *const c_char) -> c_int,
    pub root_release: unsafe extern "C" fn(i64) -> c_int,
    pub root_count: unsafe extern "C" fn() -> i64,
    pub scenario_young_counting: unsafe extern "C" fn() -> c_int,
    pub scenario_stopped_stack_hold: unsafe extern "C" fn(u64, c_int) -> c_int,
}

extern "C" {
    fn mg_ours_config_default(cfg: *mut mg_config);
    fn mg_ours_init(cfg: *const mg_config) -> c_int;
    fn mg_ours_last_error() -> *const c_char;
    fn mg_ours_thread_attach(
        name: *const c_char,
        out: Option<mg_output_fn>,
        data: *mut c_void,
    ) -> c_int;
    fn mg_ours_thread_detach() -> c_int;
    fn mg_ours_eval(code: *const c_char, file: *const c_char) -> c_int;
    fn mg_ours_collect(full: c_int) -> c_int;
    fn mg_ours_stats(out: *mut mg_stats) -> c_int;
    fn mg_ours_check_live(out: *mut mg_live_report) -> c_int;
    fn mg_ours_set_host_release(f: Option<mg_host_release_fn>) -> c_int;
    fn mg_ours_bind_host(name: *const c_char, handle: *mut c_void) -> c_int;
    fn mg_ours_root_global(name: *const c_char) -> i64;
    fn mg_ours_root_to_global(root: i64, name: *const c_char) -> c_int;
    fn mg_ours_root_release(root: i64) -> c_int;
    fn mg_ours_root_count() -> i64;
    fn mg_ours_scenario_young_counting() -> c_int;
    fn mg_ours_scenario_stopped_stack_hold(hold_us: u64, in_gil_wait: c_int) -> c_int;
}

/// The entry points of the `ours` kernel.
pub static OURS: Api = Api {
    config_default: mg_ours_config_default,
    init: mg_ours_init,
    last_error: mg_ours_last_error,
    thread_attach: mg_ours_thread_attach,
    thread_detach: mg_ours_thread_detach,
    eval: mg_ours_eval,
    collect: mg_ours_collect,
    stats: mg_ours_stats,
    check_live: mg_ours_check_live,
    set_host_release: mg_ours_set_host_release,
    bind_host: mg_ours_bind_host,
    root_global: mg_ours_root_global,
    root_to_global: mg_ours_root_to_global,
    root_release: mg_ours_root_release,
    root_count: mg_ours_root_count,
    scenario_young_counting: mg_ours_scenario_young_counting,
    scenario_stopped_stack_hold: mg_ours_scenario_stopped_stack_hold,
};

#[cfg(minigap_boehm)]
extern "C" {
    fn mg_boehm_config_default(cfg: *mut mg_config);
    fn mg_boehm_init(cfg: *const mg_config) -> c_int;
    fn mg_boehm_last_error() -> *const c_char;
    fn mg_boehm_thread_attach(
        name: *const c_char,
        out: Option<mg_output_fn>,
        data: *mut c_void,
    ) -> c_int;
    fn mg_boehm_thread_detach() -> c_int;
    fn mg_boehm_eval(code: *const c_char, file: *const c_char) -> c_int;
    fn mg_boehm_collect(full: c_int) -> c_int;
    fn mg_boehm_stats(out: *mut mg_stats) -> c_int;
    fn mg_boehm_check_live(out: *mut mg_live_report) -> c_int;
    fn mg_boehm_set_host_release(f: Option<mg_host_release_fn>) -> c_int;
    fn mg_boehm_bind_host(name: *const c_char, handle: *mut c_void) -> c_int;
    fn mg_boehm_root_global(name: *const c_char) -> i64;
    fn mg_boehm_root_to_global(root: i64, name: *const c_char) -> c_int;
    fn mg_boehm_root_release(root: i64) -> c_int;
    fn mg_boehm_root_count() -> i64;
    fn mg_boehm_scenario_young_counting() -> c_int;
    fn mg_boehm_scenario_stopped_stack_hold(hold_us: u64, in_gil_wait: c_int) -> c_int;
}

/// The entry points of the `boehm` kernel.
#[cfg(minigap_boehm)]
pub static BOEHM: Api = Api {
    config_default: mg_boehm_config_default,
    init: mg_boehm_init,
    last_error: mg_boehm_last_error,
    thread_attach: mg_boehm_thread_attach,
    thread_detach: mg_boehm_thread_detach,
    eval: mg_boehm_eval,
    collect: mg_boehm_collect,
    stats: mg_boehm_stats,
    check_live: mg_boehm_check_live,
    set_host_release: mg_boehm_set_host_release,
    bind_host: mg_boehm_bind_host,
    root_global: mg_boehm_root_global,
    root_to_global: mg_boehm_root_to_global,
    root_release: mg_boehm_root_release,
    root_count: mg_boehm_root_count,
    scenario_young_counting: mg_boehm_scenario_young_counting,
    scenario_stopped_stack_hold: mg_boehm_scenario_stopped_stack_hold,
};
