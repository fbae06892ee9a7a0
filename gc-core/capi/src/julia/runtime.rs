//! The Julia runtime names a julia-gcext client uses beyond the GC-extension API itself,
//! so that an unmodified client (GAP's `src/julia_gc.c`, configured `--with-gc=julia`)
//! compiles and links against gc-core with no libjulia: the globals `jl_any_type`,
//! `jl_datatype_type`, `jl_weakref_type`, `jl_nothing`, `jl_main_module`,
//! `jl_n_threads`, `jl_n_gcthreads`; the task queries `jl_get_current_task` and
//! `jl_active_task_stack`; attaching threads (`jl_init`, `jl_adopt_thread`,
//! `jl_gc_thread_detach`); `jl_ver_string`; and the calls that have
//! nothing to do here (`jl_set_const`, `jl_atexit_hook` runs the finalizers as Julia's
//! does). Declared in `include/julia_gcext_compat.h`; the Julia-compatibility prefix
//! (`cargo xtask julia-prefix`) wraps that header as `julia.h`.
//!
//! `jl_init()` in the prefix's `julia.h` expands to `jl_gc_compat_init(major, minor)`
//! with the Julia version the client was compiled for, and the runtime behaves as that
//! Julia's did:
//! - before 1.10 (GAP 4.12: Julia's collector marked on one thread): one mark thread
//!   unless the environment asks for more (`GC_CORE_MARK_THREADS`), because the client's
//!   mark functions may keep state in globals (GAP 4.12's `YoungRef`); task scanners on
//!   the collecting thread, once per task, at the roots (the seed's way);
//! - 1.10 and later (GAP 4.13+): parallel marking by default (one mark thread per core),
//!   mark functions given the `ptls` of the thread that marks (as always here), task
//!   scanners called as Julia 1.10 calls them: as mark work, by whichever marking
//!   thread takes the task, with "is its thread's root task" as second argument
//!   (`TaskScan::WhileMarking`); `jl_ver_string` answers the version.
//!
//! `jl_n_gcthreads` is the number of threads that mark (Julia 1.10 counts only its
//! helper threads, the collecting thread marking too): a client tests `jl_n_gcthreads >
//! 1` to know whether its task scanner may run on two threads at once (GAP 4.15's
//! mutex), which with Julia's count would be false for two marking threads.

use super::types::{jl_datatype_t, jl_module_t, jl_ptls_t, jl_sym_t, jl_task_t, jl_value_t};
use crate::alloc::gc_typeof;
use crate::entry::{entry, record, set_error};
use crate::finalizers::{gc_run_all_finalizers, gc_set_finalizers_at_safepoints};
use crate::heap::{default_heap_ref, set_default_mark_threads};
use crate::mutator::{attach, cur, gc_mutator_t, gc_thread_detach};
use crate::tasks::{gc_current_task, task_from_ptr};
use gc_core::ffi::current_ptls;
use gc_core::{ForeignTypeSpec, MarkProc, SweepProc, TaskScan};
use std::ffi::{c_char, c_int, CString};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use std::sync::{Once, OnceLock};

/// Storage behind `jl_main_module`: a module is opaque to clients and never read here.
static MAIN_MODULE: u64 = 0;

/// `jl_main_module`: an opaque module, accepted wherever a module is (`jl_set_const`,
/// `jl_new_foreign_type`).
#[no_mangle]
pub static jl_main_module: AtomicPtr<jl_module_t> =
    AtomicPtr::new(&MAIN_MODULE as *const u64 as *mut jl_module_t);

/// `jl_any_type`: a type with no pointers named `Any`, made by `jl_init`; the default
/// super type clients pass to `jl_new_foreign_type`. NULL before `jl_init`.
#[no_mangle]
pub static jl_any_type: AtomicPtr<jl_datatype_t> = AtomicPtr::new(std::ptr::null_mut());

/// `jl_datatype_type`: the meta type (`jl_typeof` of any type), set by `jl_init`.
#[no_mangle]
pub static jl_datatype_type: AtomicPtr<jl_datatype_t> = AtomicPtr::new(std::ptr::null_mut());

/// `jl_weakref_type`: the type of weak-reference objects (`jl_gc_new_weakref`), set by
/// `jl_init`.
#[no_mangle]
pub static jl_weakref_type: AtomicPtr<jl_datatype_t> = AtomicPtr::new(std::ptr::null_mut());

/// `jl_nothing`: what a cleared weak reference's `value` reads. NULL here (Julia: its
/// `nothing` singleton), so `wref->value == jl_nothing` tests "cleared" as in Julia; a
/// client must not dereference it.
#[no_mangle]
pub static jl_nothing: AtomicPtr<jl_value_t> = AtomicPtr::new(std::ptr::null_mut());

/// `jl_n_threads`: threads attached to the default heap (as Julia counts its threads,
/// adopted ones included); kept up to date by `jl_init`, `jl_adopt_thread` and
/// `jl_gc_thread_detach`.
#[no_mangle]
pub static jl_n_threads: AtomicI32 = AtomicI32::new(0);

/// `jl_n_gcthreads`: the threads that mark in a collection (the collecting thread and
/// the helpers; Julia 1.10 counts only the helpers, see the module documentation), set
/// by `jl_init` from the default heap's `mark_threads`.
#[no_mangle]
pub static jl_n_gcthreads: AtomicI32 = AtomicI32::new(0);

/// The version `jl_ver_string` reports before any `jl_init` (Julia's format, our build
/// tag).
const DEFAULT_VERSION: &std::ffi::CStr = c"1.6.0-gccore";

/// The version `jl_ver_string` reports: the one the first `jl_gc_compat_init` was given.
static VERSION: OnceLock<CString> = OnceLock::new();

/// Julia versions before this one marked on one thread and scanned tasks at the roots;
/// from it on, in parallel, tasks as mark work.
const PARALLEL_MARK_SINCE: (c_int, c_int) = (1, 10);

/// Whether the client initialised itself as Julia 1.10 or later (see
/// `jl_active_task_stack`).
static CLIENT_1_10: AtomicBool = AtomicBool::new(false);

/// What `jl_init()` expands to in the prefix's `julia.h`: `jl_init` for a client compiled
/// against Julia `major.minor`. A client written for a Julia before 1.10 gets one mark
/// thread (its mark functions may keep state in globals, as GAP 4.12's do) unless
/// `GC_CORE_MARK_THREADS` asks for more (parallel marking is then an explicit opt-in),
/// and its task scanner runs at the roots. A client written for 1.10 or later marks in
/// parallel (one thread per core unless `GC_CORE_MARK_THREADS` says otherwise), and its
/// task scanner runs as Julia 1.10 runs it (`TaskScan::WhileMarking`).
#[no_mangle]
pub extern "C" fn jl_gc_compat_init(major: c_int, minor: c_int) {
    entry("jl_gc_compat_init", || {
        VERSION.get_or_init(|| {
            CString::new(format!("{major}.{minor}.0-gccore"))
                .unwrap_or_else(|_| DEFAULT_VERSION.into())
        });
        let parallel = (major, minor) >= PARALLEL_MARK_SINCE;
        CLIENT_1_10.store(parallel, Ordering::Relaxed);
        if !parallel && std::env::var_os("GC_CORE_MARK_THREADS").is_none() {
            set_default_mark_threads(1);
        }
        default_heap_ref().set_task_scan(if parallel {
            TaskScan::WhileMarking
        } else {
            TaskScan::AtRoots
        });
        init_default();
        Ok(())
    })
}

/// `jl_init` proper: the default heap, the calling thread attached (finalizers run at its
/// safepoints), the built-in types and the thread counts published.
fn init_default() {
    if current_ptls().is_null() {
        adopt();
    }
    static TYPES: Once = Once::new();
    TYPES.call_once(publish_types);
    update_thread_count();
    let marking = default_heap_ref().mark_threads();
    jl_n_gcthreads.store(marking.min(i32::MAX as usize) as i32, Ordering::Release);
}

/// Sets `jl_any_type`, `jl_datatype_type` and `jl_weakref_type`.
fn publish_types() {
    let heap = default_heap_ref();
    let any = heap.new_foreign_type(ForeignTypeSpec {
        name: "Any",
        mark: MarkProc::None,
        sweep: SweepProc::None,
        has_pointers: false,
        large: false,
    });
    match any {
        Ok(t) => {
            let p = t.as_obj().as_ptr().cast::<jl_datatype_t>();
            jl_any_type.store(p, Ordering::Release);
            // SAFETY: a type object is a live, permanent object of the heap.
            let meta = unsafe { gc_typeof(p.cast()) };
            jl_datatype_type.store(meta.cast(), Ordering::Release);
        }
        Err(e) => set_error(format!("jl_init: creating the type Any: {e}")),
    }
    let weak = heap
        .weak_ref_type()
        .as_obj()
        .as_ptr()
        .cast::<jl_datatype_t>();
    jl_weakref_type.store(weak, Ordering::Release);
}

/// Refreshes `jl_n_threads` from the default heap.
fn update_thread_count() {
    let n = default_heap_ref().attached_threads();
    jl_n_threads.store(n.min(i32::MAX as usize) as i32, Ordering::Release);
}

/// Creates the default heap and attaches the calling thread (`jl_init`). Calling it
/// again on an attached thread does nothing.
#[no_mangle]
pub extern "C" fn jl_init() {
    entry("jl_init", || {
        init_default();
        Ok(())
    })
}

/// Attaches the calling thread to the default heap with finalizers run at its
/// safepoints (what `jl_init` and `jl_adopt_thread` do); NULL (the error recorded) if
/// that failed.
fn adopt() -> *mut gc_mutator_t {
    let m = match attach(default_heap_ref()) {
        Ok(m) => m,
        Err(e) => {
            record(e);
            return std::ptr::null_mut();
        }
    };
    // SAFETY: the mutator just attached.
    unsafe { gc_set_finalizers_at_safepoints(m, 1) };
    m
}

/// Attaches the calling thread to the default heap (Julia's `jl_adopt_thread`).
#[no_mangle]
pub extern "C" fn jl_adopt_thread() -> jl_ptls_t {
    entry("jl_adopt_thread", || {
        let current = current_ptls();
        if !current.is_null() {
            return Ok(current as jl_ptls_t);
        }
        let m = adopt();
        update_thread_count();
        Ok(m as jl_ptls_t)
    })
}

/// Detaches the calling thread.
#[no_mangle]
pub extern "C" fn jl_gc_thread_detach() -> c_int {
    entry("jl_gc_thread_detach", || {
        let r = gc_thread_detach();
        update_thread_count();
        Ok(r)
    })
}

/// `jl_get_current_task`: the task of the calling thread's own stack (as
/// `jl_gc_current_task`); NULL if the thread is not attached.
#[no_mangle]
pub extern "C" fn jl_get_current_task() -> *mut jl_task_t {
    gc_current_task().cast()
}

/// `jl_active_task_stack`: the stack of `task` in use (`[active_start, active_end)`) and
/// the whole stack (`[total_start, total_end)`). The calling thread's own task is in use
/// from the caller's frame. Another task, for a client written for Julia before 1.10:
/// from its saved stack pointer when its thread is stopped or the coroutine recorded
/// one, else the whole stack; for a 1.10 client: the whole stack, as Julia 1.10 reports
/// it (its stack buffer), because such a client skips the first 32 KiB of it as Julia's
/// guard pages (GAP 4.15's `jl_guard_size`), which from a saved stack pointer would skip
/// the task's innermost frames. All four are NULL for a NULL task.
///
/// # Safety
/// `task` null or a registered task; the four out-pointers null or writable.
#[no_mangle]
pub unsafe extern "C" fn jl_active_task_stack(
    task: *mut jl_task_t,
    active_start: *mut *mut c_char,
    active_end: *mut *mut c_char,
    total_start: *mut *mut c_char,
    total_end: *mut *mut c_char,
) {
    entry("jl_active_task_stack", || {
        let (mut a0, mut a1, mut t0, mut t1) = (0usize, 0usize, 0usize, 0usize);
        if task.is_null() {
            set_error("jl_active_task_stack: task is NULL");
        } else {
            // SAFETY: a registered task per the caller.
            let t = unsafe { task_from_ptr(task.cast()) };
            (t0, t1) = t.stack_bounds();
            let own = task == jl_get_current_task();
            let sp = if own {
                // The caller's frame is below this one's locals.
                let here = 0u8;
                std::ptr::addr_of!(here) as usize
            } else if CLIENT_1_10.load(Ordering::Relaxed) {
                t0
            } else {
                t.saved_sp()
            };
            a0 = if sp > t0 && sp < t1 { sp } else { t0 };
            a1 = t1;
        }
        for (out, v) in [
            (active_start, a0),
            (active_end, a1),
            (total_start, t0),
            (total_end, t1),
        ] {
            if !out.is_null() {
                // SAFETY: writable when non-null (caller).
                unsafe { *out = v as *mut c_char };
            }
        }
        Ok(())
    })
}

/// `jl_ver_string`: the Julia version this library stands in for, with a build tag:
/// the version the client's `jl_init` gave (`1.10.0-gccore`), `1.6.0-gccore` before it.
#[no_mangle]
pub extern "C" fn jl_ver_string() -> *const c_char {
    VERSION
        .get()
        .map_or(DEFAULT_VERSION.as_ptr(), |v| v.as_ptr())
}

/// `jl_set_const`: nothing to do. Julia binds `value` in `module` (which also keeps it
/// alive); here modules are opaque and every type stays alive with its heap.
#[no_mangle]
pub extern "C" fn jl_set_const(
    _module: *mut jl_module_t,
    _name: *mut jl_sym_t,
    _value: *mut jl_value_t,
) {
}

/// `jl_atexit_hook`: runs every pending and registered finalizer of the calling
/// thread's heap, as Julia's does at exit (`status` is the exit status, unused). Does
/// nothing on a thread that is not attached.
#[no_mangle]
pub extern "C" fn jl_atexit_hook(_status: c_int) {
    entry("jl_atexit_hook", || {
        if !current_ptls().is_null() {
            // SAFETY: the calling thread's attached mutator (a failure is left for
            // jl_gc_last_error).
            unsafe { gc_run_all_finalizers(cur()) };
        }
        Ok(())
    })
}
