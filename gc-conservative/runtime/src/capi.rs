//! The C ABI (`include/gc_runtime.h`, generated from this file by cbindgen): converts
//! arguments, checks handles, and forwards to `runtime.rs`.
//!
//! Every function returns `GC_RUNTIME_OK` or a `GC_RUNTIME_ERR_*` code (aliases of the
//! workspace's shared `RT_*` codes; the two constructors NULL) and leaves a status and
//! message, ffi-support's thread-local ones shared with gc-core's and gil's C layers in
//! this library, for `gc_runtime_last_status()` / `gc_runtime_last_error()`; a NULL or
//! foreign handle, a call in the wrong state or from a thread that is not attached is an
//! error, never a crash, and no panic crosses the boundary. The entry points that may
//! leave the calling thread GC-safe (`attach`, `enter`, `leave`, `poll`, `blocking_begin`,
//! `blocking_end`) have no prologue: they spill the caller's callee-saved registers and
//! stack pointer into a `Saved` record in their frame before calling their
//! implementation, so that the registers are exactly the caller's.
#![allow(non_camel_case_types)]

use crate::gil_sys::gil_t;
use crate::runtime::{Config, Error, Runtime, Saved};
use crate::status::*;
use ffi_support::{guard, Status};
use gc_core_capi::{gc_config_t, gc_heap_t, gc_mutator_t, gc_task_t};
use std::ffi::{c_char, c_int, c_void, CStr};

/// Marks a live runtime handle.
const MAGIC: u64 = 0x6763_5f72_756e_7469;

/// A runtime (opaque): a heap, its conservative task scanner and a GIL whose hooks make
/// blocked threads GC-safe.
pub struct gc_runtime_t {
    magic: u64,
    rt: Runtime,
}

/// A scan filter: called with the object a stack word (or saved register) of an attached
/// thread points into, and the configuration's `scan_filter_data`; non-zero keeps it.
/// It may run on any collector thread, concurrently, during a collection.
pub type gc_runtime_filter_t =
    Option<unsafe extern "C" fn(data: *mut c_void, obj: *mut c_void) -> c_int>;

/// The runtime's configuration (the heap's is a `gc_config_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gc_runtime_config_t {
    /// The GIL's name in messages (NULL: "gc-runtime").
    pub gil_name: *const c_char,
    /// The GIL's switch interval in microseconds (0: no switch requests).
    pub switch_interval_us: u64,
    /// Non-zero: every attached thread's stack, and the registers its runtime calls
    /// saved, are scanned conservatively in every collection. Zero: nothing is scanned
    /// unless the program installs a task scanner calling `gc_runtime_scan_task`.
    pub conservative: c_int,
    /// Which objects a stack word may keep (NULL: all, external objects included).
    /// With a filter, only pool objects (up to `gc_max_internal_obj_size()` bytes) are
    /// found from stack words.
    pub scan_filter: gc_runtime_filter_t,
    /// Passed to `scan_filter`.
    pub scan_filter_data: *mut c_void,
}

/// Records `msg` as the thread's last error with the status of `code` (ffi-support's
/// thread-local last error, which gc-core's and gil's C layers in this library share).
fn set_error(code: i32, msg: &str) {
    ffi_support::set_error(Status::from_code(code).unwrap_or(Status::Arg), msg);
}

fn fail(e: Error) -> i32 {
    set_error(e.code, &e.msg);
    e.code
}

/// Runs `f` in ffi-support's panic guard, turning an error into its code (message
/// kept) and a panic into `GC_RUNTIME_ERR_PANIC` (`RT_ERR_PANIC`).
fn guarded(what: &str, f: impl FnOnce() -> Result<(), Error>) -> i32 {
    guard(what, GC_RUNTIME_ERR_PANIC, || match f() {
        Ok(()) => GC_RUNTIME_OK,
        Err(e) => fail(e),
    })
}

/// The runtime behind a handle.
///
/// # Safety
/// `p` is null or a pointer from `gc_runtime_new` (deleted ones are recognised while
/// their memory is not reused).
unsafe fn runtime<'a>(p: *const gc_runtime_t, what: &str) -> Result<&'a Runtime, Error> {
    // SAFETY: null or a handle from gc_runtime_new (caller).
    match unsafe { p.as_ref() } {
        Some(h) if h.magic == MAGIC => Ok(&h.rt),
        Some(_) => Err(Error::new(
            GC_RUNTIME_ERR_INVALID_ARGUMENT,
            format!("{what}: {p:p} is not a live runtime (deleted, or another object)"),
        )),
        None => Err(Error::new(
            GC_RUNTIME_ERR_INVALID_ARGUMENT,
            format!("{what}: runtime is NULL"),
        )),
    }
}

/// The message of the calling thread's last failed call (empty if none). Valid until
/// the thread's next failing call.
#[no_mangle]
pub extern "C" fn gc_runtime_last_error() -> *const c_char {
    ffi_support::last_error_ptr()
}

/// The status (`GC_RUNTIME_ERR_*` / `RT_ERR_*`) of the calling thread's last failed
/// call, `GC_RUNTIME_OK` if none: what a NULL return meant.
#[no_mangle]
pub extern "C" fn gc_runtime_last_status() -> i32 {
    ffi_support::last_status().code()
}

/// Fills `cfg` with the defaults: GIL "gc-runtime" with a 5 ms switch interval,
/// conservative scanning on, no filter.
///
/// # Safety
/// `cfg` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_config_default(cfg: *mut gc_runtime_config_t) -> i32 {
    guard("gc_runtime_config_default", GC_RUNTIME_ERR_PANIC, || {
        if cfg.is_null() {
            set_error(
                GC_RUNTIME_ERR_INVALID_ARGUMENT,
                "gc_runtime_config_default: cfg is NULL",
            );
            return GC_RUNTIME_ERR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null and writable per the contract.
        unsafe {
            cfg.write(gc_runtime_config_t {
                gil_name: std::ptr::null(),
                switch_interval_us: 5000,
                conservative: 1,
                scan_filter: None,
                scan_filter_data: std::ptr::null_mut(),
            })
        };
        GC_RUNTIME_OK
    })
}

/// Creates a runtime: a heap configured by `gc` (NULL: `gc_config_default`'s), with the
/// runtime's conservative task scanner when `cfg->conservative`, and a GIL whose block
/// and unblock hooks enter and leave GC-safe regions. `cfg` NULL: the defaults. NULL on
/// error.
///
/// # Safety
/// `gc` is null or a valid `gc_config_t`; `cfg` is null or a valid
/// `gc_runtime_config_t` whose `gil_name` is null or NUL-terminated and whose filter may
/// be called with its data and any object, from any collector thread, while the runtime
/// lives.
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_new(
    gc: *const gc_config_t,
    cfg: *const gc_runtime_config_t,
) -> *mut gc_runtime_t {
    let mut out = std::ptr::null_mut();
    guarded("gc_runtime_new", || {
        let mut c = gc_runtime_config_t {
            gil_name: std::ptr::null(),
            switch_interval_us: 0,
            conservative: 0,
            scan_filter: None,
            scan_filter_data: std::ptr::null_mut(),
        };
        // SAFETY: a local to write to.
        unsafe { gc_runtime_config_default(&mut c) };
        if !cfg.is_null() {
            // SAFETY: non-null and valid per the contract.
            c = unsafe { *cfg };
        }
        let name = if c.gil_name.is_null() {
            c"gc-runtime"
        } else {
            // SAFETY: NUL-terminated per the contract.
            unsafe { CStr::from_ptr(c.gil_name) }
        };
        let config = Config {
            gil_name: name,
            switch_interval_us: c.switch_interval_us,
            conservative: c.conservative != 0,
            filter: c.scan_filter,
            filter_data: c.scan_filter_data,
        };
        // SAFETY: forwarded from the caller.
        let rt = unsafe { Runtime::new(gc, &config) }?;
        let handle = Box::into_raw(Box::new(gc_runtime_t { magic: MAGIC, rt }));
        // SAFETY: just allocated; its address is final.
        if let Err(e) = unsafe { &*handle }.rt.install_hooks() {
            // SAFETY: from Box::into_raw above, not shared yet.
            let h = unsafe { Box::from_raw(handle) };
            let gc_runtime_t { rt: inner, .. } = *h;
            // SAFETY: no thread could attach to a runtime not handed out yet.
            unsafe { inner.free() };
            return Err(e);
        }
        out = handle;
        Ok(())
    });
    out
}

/// Frees a runtime (its GIL and heap). Refused (`GC_RUNTIME_ERR_STATE`) while threads
/// are attached.
///
/// # Safety
/// `rt` is null or from `gc_runtime_new`, not used afterwards on success.
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_delete(rt: *mut gc_runtime_t) -> i32 {
    guarded("gc_runtime_delete", || {
        // SAFETY: null or from gc_runtime_new (caller).
        unsafe { runtime(rt, "gc_runtime_delete") }?.check_deletable()?;
        // SAFETY: a live handle (checked above), from Box::into_raw in gc_runtime_new and
        // not used by the caller afterwards: marked dead, then freed.
        let h = unsafe {
            (*rt).magic = 0;
            Box::from_raw(rt)
        };
        let gc_runtime_t { rt: inner, .. } = *h;
        // SAFETY: nothing is attached (checked above).
        unsafe { inner.free() };
        Ok(())
    })
}

/// The runtime's heap, for `gc_core.h` and `gc_conservative.h` calls (NULL for a bad
/// handle). Do not `gc_heap_delete` it.
///
/// # Safety
/// `rt` is null or from `gc_runtime_new`.
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_heap(rt: *const gc_runtime_t) -> *mut gc_heap_t {
    guard("gc_runtime_heap", std::ptr::null_mut(), || {
        // SAFETY: null or from gc_runtime_new (caller).
        match unsafe { runtime(rt, "gc_runtime_heap") } {
            Ok(r) => r.heap(),
            Err(e) => {
                fail(e);
                std::ptr::null_mut()
            }
        }
    })
}

/// The runtime's GIL, for `gil.h` calls (NULL for a bad handle). Do not `gil_delete` it.
/// `gil.h`'s blocking calls made directly on an attached thread still make it GC-safe
/// (the hooks), but without the caller's registers saved: prefer the runtime's calls.
///
/// # Safety
/// `rt` is null or from `gc_runtime_new`.
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_gil(rt: *const gc_runtime_t) -> *mut gil_t {
    guard("gc_runtime_gil", std::ptr::null_mut(), || {
        // SAFETY: null or from gc_runtime_new (caller).
        match unsafe { runtime(rt, "gc_runtime_gil") } {
            Ok(r) => r.gil(),
            Err(e) => {
                fail(e);
                std::ptr::null_mut()
            }
        }
    })
}

/// Attaches the calling thread to the runtime's heap (as a mutator) and GIL (as `name`,
/// NULL: the OS thread's name). The thread starts outside: call `gc_runtime_enter`
/// before touching the heap. Returns the thread's mutator for `gc_core.h` calls
/// (`gc_alloc`, ...), NULL on error (already attached, bad handle).
///
/// # Safety
/// `rt` is null or from `gc_runtime_new`; `name` is null or NUL-terminated.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_attach(
    rt: *mut gc_runtime_t,
    name: *const c_char,
) -> *mut gc_mutator_t {
    gc_core::spill_and_call!(attach_impl)
}

/// # Safety
/// Called by `gc_runtime_attach` only.
unsafe extern "C" fn attach_impl(
    saved: *const Saved,
    rt: *mut gc_runtime_t,
    name: *const c_char,
) -> *mut gc_mutator_t {
    let mut m = std::ptr::null_mut();
    guarded("gc_runtime_attach", || {
        // SAFETY: null or from gc_runtime_new (caller).
        let r = unsafe { runtime(rt, "gc_runtime_attach") }?;
        // SAFETY: spilled by the entry point; name per the caller's contract.
        m = unsafe { r.attach(&*saved, name) }?;
        Ok(())
    });
    m
}

/// Detaches the calling thread from the runtime's GIL and heap. It must be outside
/// (after `gc_runtime_leave`).
///
/// # Safety
/// `rt` is null or from `gc_runtime_new`.
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_detach(rt: *mut gc_runtime_t) -> i32 {
    guarded("gc_runtime_detach", || {
        // SAFETY: null or from gc_runtime_new (caller).
        unsafe { runtime(rt, "gc_runtime_detach") }?.detach()
    })
}

/// Enters: takes the GIL (GC-safe while waiting for it) and leaves the GC-safe region of
/// the outside; the thread may then touch the heap. On `GC_RUNTIME_ERR_STOPPED` or
/// `_SHUT_DOWN` the thread stays outside.
///
/// # Safety
/// `rt` is null or from `gc_runtime_new`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_enter(rt: *mut gc_runtime_t) -> i32 {
    gc_core::spill_and_call!(enter_impl)
}

/// # Safety
/// Called by `gc_runtime_enter` only.
unsafe extern "C" fn enter_impl(saved: *const Saved, rt: *mut gc_runtime_t) -> i32 {
    guarded("gc_runtime_enter", || {
        // SAFETY: null or from gc_runtime_new (caller); spilled by the entry point.
        unsafe { runtime(rt, "gc_runtime_enter") }?.enter(unsafe { &*saved })
    })
}

/// Leaves: enters a GC-safe region (the caller's frame and registers stay roots of the
/// conservative scan) and releases the GIL.
///
/// # Safety
/// `rt` is null or from `gc_runtime_new`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_leave(rt: *mut gc_runtime_t) -> i32 {
    gc_core::spill_and_call!(leave_impl)
}

/// # Safety
/// Called by `gc_runtime_leave` only.
unsafe extern "C" fn leave_impl(saved: *const Saved, rt: *mut gc_runtime_t) -> i32 {
    guarded("gc_runtime_leave", || {
        // SAFETY: null or from gc_runtime_new (caller); spilled by the entry point.
        unsafe { runtime(rt, "gc_runtime_leave") }?.leave(unsafe { &*saved })
    })
}

/// The GIL's safepoint: honours a switch request (GC-safe while waiting to get the GIL
/// back) and runs pending actions. `GC_RUNTIME_ERR_STOPPED` / `_SHUT_DOWN` tell the
/// thread to unwind. Costs a call into the GIL: call it every N loop iterations.
///
/// # Safety
/// `rt` is null or from `gc_runtime_new`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_poll(rt: *mut gc_runtime_t) -> i32 {
    gc_core::spill_and_call!(poll_impl)
}

/// # Safety
/// Called by `gc_runtime_poll` only.
unsafe extern "C" fn poll_impl(saved: *const Saved, rt: *mut gc_runtime_t) -> i32 {
    guarded("gc_runtime_poll", || {
        // SAFETY: null or from gc_runtime_new (caller); spilled by the entry point.
        unsafe { runtime(rt, "gc_runtime_poll") }?.poll(unsafe { &*saved })
    })
}

/// Begins a blocking region (a sleep, I/O, a lock): the thread enters a GC-safe region
/// whose roots are the caller's frame and the registers it held at this call, and
/// releases the GIL if it holds it. Until `gc_runtime_blocking_end`, called from the
/// same function, the thread must not touch the heap.
///
/// # Safety
/// `rt` is null or from `gc_runtime_new`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_blocking_begin(rt: *mut gc_runtime_t) -> i32 {
    gc_core::spill_and_call!(blocking_begin_impl)
}

/// # Safety
/// Called by `gc_runtime_blocking_begin` only.
unsafe extern "C" fn blocking_begin_impl(saved: *const Saved, rt: *mut gc_runtime_t) -> i32 {
    guarded("gc_runtime_blocking_begin", || {
        // SAFETY: null or from gc_runtime_new (caller); spilled by the entry point.
        unsafe { runtime(rt, "gc_runtime_blocking_begin") }?.blocking_begin(unsafe { &*saved })
    })
}

/// Ends the blocking region: re-takes the GIL if the thread held it (GC-safe while
/// waiting), then leaves the GC-safe region. If the GIL could not be taken back
/// (`GC_RUNTIME_ERR_STOPPED` / `_SHUT_DOWN`), the thread is outside.
///
/// # Safety
/// `rt` is null or from `gc_runtime_new`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_blocking_end(rt: *mut gc_runtime_t) -> i32 {
    gc_core::spill_and_call!(blocking_end_impl)
}

/// # Safety
/// Called by `gc_runtime_blocking_end` only.
unsafe extern "C" fn blocking_end_impl(saved: *const Saved, rt: *mut gc_runtime_t) -> i32 {
    guarded("gc_runtime_blocking_end", || {
        // SAFETY: null or from gc_runtime_new (caller); spilled by the entry point.
        unsafe { runtime(rt, "gc_runtime_blocking_end") }?.blocking_end(unsafe { &*saved })
    })
}

/// For a task scanner of the program's own (`conservative = 0`, installed with
/// `gc_set_callback(gc_runtime_heap(rt), GC_CB_TASK_SCANNER, ...)`): scans `task` as the
/// runtime's scanner would (its stack through the configured filter, and the registers
/// the runtime saved for its thread). Returns the words accepted (a task no longer
/// registered with the heap has its stack left unread: a look-up linear in the number
/// of tasks), a negative `GC_RUNTIME_ERR_*` code on error (outside a task scanner, NULL
/// task, bad handle).
///
/// # Safety
/// `rt` is null or from `gc_runtime_new`; `task` is null or the task the calling task
/// scanner was given.
#[no_mangle]
pub unsafe extern "C" fn gc_runtime_scan_task(
    rt: *const gc_runtime_t,
    task: *mut gc_task_t,
) -> isize {
    let mut found = 0;
    let code = guarded("gc_runtime_scan_task", || {
        // SAFETY: null or from gc_runtime_new (caller); task per the contract.
        found = unsafe { runtime(rt, "gc_runtime_scan_task")?.scan_task(task) }?;
        Ok(())
    });
    if code == GC_RUNTIME_OK {
        found
    } else {
        code as isize
    }
}
