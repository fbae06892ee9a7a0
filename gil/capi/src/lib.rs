//! `gil-capi`: the C ABI of the `gil` crate (`gil/include/gil.h`), a thin layer over
//! gil's public Rust API in the workspace's one C convention (`ffi-support`): every
//! function returns a status (`GIL_OK`/`GIL_ERR_*`, aliases of the shared `RT_*` codes;
//! a few return a plain value) and leaves a message for `gil_last_error()` on failure;
//! handles (`gil_t`, `gil_action_t`) live in a registry that checks each one (NULL,
//! deleted or wrong-kind handles are `GIL_ERR_INVALID_ARGUMENT`, never dereferenced);
//! every entry runs through the shared panic guard, so no panic crosses. Functions act
//! on the calling thread (found through its thread-local attachment), so C code needs
//! no per-thread handle.
//!
//! This crate is an rlib (Rust programs with C parts, such as integration-tests' minigap
//! kernel, link it); `artifact/` builds it as `libgil.so`. The header is checked against
//! this file by `tests/it/header.rs`: names, parameter names and types, struct fields,
//! constants and the shared status block must match.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![allow(non_camel_case_types)]

use ffi_support::{fail, guard, Handle, HandleRegistry, Status};
use gil::{
    Action, ActionContext, ActionTarget, BlockReason, Config, EnsureState, Gil, GilError, GilHooks,
    ThreadFate, ThreadId,
};
use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;
use std::time::Duration;

/// Success (`RT_OK`).
pub const GIL_OK: i32 = Status::Ok.code();
/// A pointer argument was null, a handle invalid, or a value out of range (`RT_ERR_ARG`).
pub const GIL_ERR_INVALID_ARGUMENT: i32 = Status::Arg.code();
/// The GIL is shut down; the thread must leave (`RT_ERR_SHUT_DOWN`).
pub const GIL_ERR_SHUT_DOWN: i32 = Status::ShutDown.code();
/// The thread was asked to stop; it must unwind (`RT_ERR_STOPPED`).
pub const GIL_ERR_STOPPED: i32 = Status::Stopped.code();
/// The calling thread is not attached (`RT_ERR_NOT_ATTACHED`).
pub const GIL_ERR_NOT_ATTACHED: i32 = Status::NotAttached.code();
/// The calling thread is already attached (`RT_ERR_ALREADY_ATTACHED`).
pub const GIL_ERR_ALREADY_ATTACHED: i32 = Status::AlreadyAttached.code();
/// The calling thread released a GIL it does not hold (`RT_ERR_NOT_HOLDER`).
pub const GIL_ERR_NOT_HOLDER: i32 = Status::NotHolder.code();
/// No attached thread has the given id (`RT_ERR_NOT_FOUND`).
pub const GIL_ERR_UNKNOWN_THREAD: i32 = Status::NotFound.code();
/// A wait ran out of time (actions, shutdown) (`RT_ERR_TIMEOUT`).
pub const GIL_ERR_TIMEOUT: i32 = Status::Timeout.code();
/// A panic inside the library was caught at the boundary (`RT_ERR_PANIC`).
pub const GIL_ERR_PANIC: i32 = Status::Panic.code();
/// A configuration value is out of range (`RT_ERR_CONFIG`).
pub const GIL_ERR_INVALID_CONFIG: i32 = Status::Config.code();
/// The GIL was already shut down (`RT_ERR_ALREADY_SHUT_DOWN`).
pub const GIL_ERR_ALREADY_SHUT_DOWN: i32 = Status::AlreadyShutDown.code();
/// The call is not allowed inside a safepoint action (`RT_ERR_INSIDE_ACTION`).
pub const GIL_ERR_INSIDE_ACTION: i32 = Status::InsideAction.code();
/// Not allowed inside an `on_block` / `on_unblock` hook (`RT_ERR_INSIDE_HOOK`).
pub const GIL_ERR_INSIDE_HOOK: i32 = Status::InsideHook.code();
/// Not allowed inside a blocking region (taking the GIL, a second region)
/// (`RT_ERR_INSIDE_REGION`).
pub const GIL_ERR_INSIDE_REGION: i32 = Status::InsideRegion.code();

/// Action target meaning every attached thread.
pub const GIL_ALL_THREADS: u64 = 0;
/// Hook reason: the thread waits for the GIL.
pub const GIL_BLOCK_WAITING_FOR_GIL: i32 = 1;
/// Hook reason: the thread is inside a blocking region.
pub const GIL_BLOCK_BLOCKING_REGION: i32 = 2;

/// Marks a token returned by `gil_blocking_enter` (bit 0: the GIL was held).
const TOKEN_MAGIC: i32 = 0x6100;

/// The live `gil_t` and `gil_action_t` handles.
static HANDLES: HandleRegistry = HandleRegistry::new();

/// An opaque GIL (a reference to it; `gil_delete` drops the reference).
pub struct gil_t {
    gil: Gil,
}

impl Handle for gil_t {
    const KIND: &'static str = "GIL";
}

/// An opaque submitted action.
pub struct gil_action_t {
    action: Action,
}

impl Handle for gil_action_t {
    const KIND: &'static str = "action";
}

/// What `gil_ensure` did; pass it back to `gil_ensure_release`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct gil_ensure_state_t {
    /// 1 if the call took the GIL.
    pub acquired: u8,
    /// 1 if the call attached the thread.
    pub attached: u8,
}

/// Passed to an action function: where it runs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct gil_action_ctx_t {
    /// The thread running the action.
    pub thread_id: u64,
    /// 1 if the thread holds the GIL while running it.
    pub holds_gil: i32,
}

/// Progress of an action.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct gil_action_report_t {
    /// Target threads.
    pub targets: u32,
    /// Targets that ran it.
    pub ran: u32,
    /// Targets that detached first.
    pub skipped: u32,
    /// Targets still to run it.
    pub pending: u32,
}

/// What shutdown did with each thread (counts).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct gil_shutdown_report_t {
    /// Threads attached at the start (the caller included).
    pub threads: u32,
    /// Threads that detached.
    pub detached: u32,
    /// Threads that got an error and left the GIL.
    pub left_with_error: u32,
    /// Threads that were not inside the GIL.
    pub idle: u32,
    /// Threads still inside when the time ran out.
    pub stuck: u32,
}

/// An action body.
pub type gil_action_fn = unsafe extern "C" fn(data: *mut c_void, ctx: *const gil_action_ctx_t);
/// Frees an action's data once no thread can run it any more.
pub type gil_free_fn = unsafe extern "C" fn(data: *mut c_void);
/// A block/unblock hook (`reason`: `GIL_BLOCK_*`).
pub type gil_hook_fn = unsafe extern "C" fn(data: *mut c_void, thread_id: u64, reason: i32);

/// The shared status of a [`GilError`].
fn status_of(e: &GilError) -> Status {
    match e {
        GilError::ShutDown { .. } => Status::ShutDown,
        GilError::Stopped { .. } => Status::Stopped,
        GilError::NotAttached { .. } => Status::NotAttached,
        GilError::AlreadyAttached { .. } => Status::AlreadyAttached,
        GilError::NotHolder { .. } => Status::NotHolder,
        GilError::UnknownThread { .. } => Status::NotFound,
        GilError::AlreadyShutDown { .. } => Status::AlreadyShutDown,
        GilError::ActionTimeout { .. } | GilError::ShutdownIncomplete { .. } => Status::Timeout,
        GilError::InvalidConfig { .. } => Status::Config,
        GilError::InsideAction { .. } => Status::InsideAction,
        GilError::InsideHook { .. } => Status::InsideHook,
        GilError::InsideRegion { .. } => Status::InsideRegion,
        GilError::NotInRegion { .. } => Status::Arg,
        // `GilError` is non-exhaustive: a condition added later is a state error until
        // it gets a status of its own here.
        _ => Status::State,
    }
}

/// Records `e` as the thread's last error and returns its code.
fn fail_with(e: GilError) -> i32 {
    fail(status_of(&e), &e.to_string())
}

/// Records an invalid argument and returns `GIL_ERR_INVALID_ARGUMENT`.
fn invalid(msg: &str) -> i32 {
    fail(Status::Arg, msg)
}

/// Runs the body of the C entry `name` under the shared panic guard: a panic becomes
/// `GIL_ERR_PANIC` and a message naming it.
fn guarded(name: &str, f: impl FnOnce() -> i32) -> i32 {
    guard(name, GIL_ERR_PANIC, f)
}

/// The GIL behind a `gil_t` handle (the `Arc` keeps it alive for the call even if
/// another thread deletes the handle meanwhile), or `GIL_ERR_INVALID_ARGUMENT` with a
/// message for a NULL, deleted or wrong-kind handle.
fn gil_ref(gil: *const gil_t, func: &str) -> Result<Arc<gil_t>, i32> {
    HANDLES
        .get(gil)
        .map_err(|e| invalid(&format!("{func}: {}", e.for_param("gil"))))
}

/// # Safety
/// `s` is null or a NUL-terminated string.
unsafe fn opt_str(s: *const c_char) -> Option<String> {
    if s.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

/// The message of the calling thread's last error (empty if none). Valid until the
/// thread's next failing call.
#[no_mangle]
pub extern "C" fn gil_last_error() -> *const c_char {
    ffi_support::last_error_ptr()
}

/// Creates a GIL. `switch_interval_us` 0 means no switch requests.
///
/// # Safety
/// `name` is null or NUL-terminated; `out` is a valid pointer to write to.
#[no_mangle]
pub unsafe extern "C" fn gil_new(
    name: *const c_char,
    switch_interval_us: u64,
    out: *mut *mut gil_t,
) -> i32 {
    guarded("gil_new", || {
        if out.is_null() {
            return invalid("gil_new: out is NULL");
        }
        let mut config = Config::default();
        // SAFETY: null or NUL-terminated per the contract.
        if let Some(n) = unsafe { opt_str(name) } {
            config.name = n;
        }
        config.switch_interval = match switch_interval_us {
            0 => None,
            us => Some(Duration::from_micros(us)),
        };
        match Gil::with_config(config) {
            Ok(gil) => {
                let p = HANDLES.register(gil_t { gil });
                // SAFETY: out is non-null and writable per the contract.
                unsafe { out.write(p) };
                GIL_OK
            }
            Err(e) => fail_with(e),
        }
    })
}

/// Frees this handle: no thread may pass the pointer to any call afterwards
/// (`gil_release` and `gil_detach` included); a thread blocked inside a call at that
/// moment finishes it (the GIL's state lives until no thread needs it). Call
/// `gil_shutdown` first, then delete once every thread has detached. NULL is ignored; a
/// deleted or unknown handle is left alone with a message for `gil_last_error()` (and a
/// later call with a deleted handle gets `GIL_ERR_INVALID_ARGUMENT`, unless a new handle
/// reuses the address).
#[no_mangle]
pub extern "C" fn gil_delete(gil: *mut gil_t) {
    if gil.is_null() {
        return;
    }
    guard("gil_delete", (), || {
        if let Err(e) = HANDLES.remove(gil) {
            invalid(&format!("gil_delete: {}", e.for_param("gil")));
        }
    })
}

/// Attaches the calling thread under `name` (NULL: the OS thread name).
///
/// # Safety
/// `gil` any pointer (checked against the live handles); `name` null or NUL-terminated; `thread_id_out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn gil_attach(
    gil: *mut gil_t,
    name: *const c_char,
    thread_id_out: *mut u64,
) -> i32 {
    guarded("gil_attach", || {
        let handle = match gil_ref(gil, "gil_attach") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        // SAFETY: per the contract.
        let name = unsafe { opt_str(name) }.unwrap_or_else(|| {
            std::thread::current()
                .name()
                .unwrap_or("C thread")
                .to_string()
        });
        match gil.attach(&name) {
            Ok(h) => {
                if !thread_id_out.is_null() {
                    // SAFETY: non-null and writable per the contract.
                    unsafe { thread_id_out.write(h.id().as_u64()) };
                }
                GIL_OK
            }
            Err(e) => fail_with(e),
        }
    })
}

/// Detaches the calling thread (releasing the GIL if it holds it).
/// `gil` is checked against the live handles.
#[no_mangle]
pub extern "C" fn gil_detach(gil: *mut gil_t) -> i32 {
    guarded("gil_detach", || {
        let handle = match gil_ref(gil, "gil_detach") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        match gil.current() {
            Some(h) => {
                h.detach();
                GIL_OK
            }
            None => invalid_not_attached(gil, "gil_detach"),
        }
    })
}

fn invalid_not_attached(gil: &Gil, func: &str) -> i32 {
    fail(
        Status::NotAttached,
        &format!(
            "{func}: the calling thread is not attached to GIL {}",
            gil.name()
        ),
    )
}

/// The calling thread's id within the GIL.
///
/// # Safety
/// `gil` any pointer (checked against the live handles); `thread_id_out` writable.
#[no_mangle]
pub unsafe extern "C" fn gil_current_thread(gil: *const gil_t, thread_id_out: *mut u64) -> i32 {
    guarded("gil_current_thread", || {
        let handle = match gil_ref(gil, "gil_current_thread") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        if thread_id_out.is_null() {
            return invalid("gil_current_thread: thread_id_out is NULL");
        }
        match gil.current() {
            Some(h) => {
                // SAFETY: non-null and writable per the contract.
                unsafe { thread_id_out.write(h.id().as_u64()) };
                GIL_OK
            }
            None => invalid_not_attached(gil, "gil_current_thread"),
        }
    })
}

/// Takes the GIL; `*acquired_out` is 1 if this call took it, 0 if the thread held it.
///
/// # Safety
/// `gil` any pointer (checked against the live handles); `acquired_out` writable.
#[no_mangle]
pub unsafe extern "C" fn gil_acquire(gil: *mut gil_t, acquired_out: *mut i32) -> i32 {
    guarded("gil_acquire", || {
        let handle = match gil_ref(gil, "gil_acquire") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        if acquired_out.is_null() {
            return invalid("gil_acquire: acquired_out is NULL");
        }
        match gil.acquire() {
            Ok(a) => {
                // SAFETY: non-null and writable per the contract.
                unsafe { acquired_out.write(i32::from(a)) };
                GIL_OK
            }
            Err(e) => fail_with(e),
        }
    })
}

/// Releases the GIL if `acquired` is non-zero (what `gil_acquire` reported).
/// `gil` is checked against the live handles.
#[no_mangle]
pub extern "C" fn gil_release(gil: *mut gil_t, acquired: i32) -> i32 {
    guarded("gil_release", || {
        let handle = match gil_ref(gil, "gil_release") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        match gil.release(acquired != 0) {
            Ok(()) => GIL_OK,
            Err(e) => fail_with(e),
        }
    })
}

/// Takes the GIL from any thread, attaching it if needed (`PyGILState_Ensure`).
///
/// # Safety
/// `gil` any pointer (checked against the live handles); `state_out` writable.
#[no_mangle]
pub unsafe extern "C" fn gil_ensure(gil: *mut gil_t, state_out: *mut gil_ensure_state_t) -> i32 {
    guarded("gil_ensure", || {
        let handle = match gil_ref(gil, "gil_ensure") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        if state_out.is_null() {
            return invalid("gil_ensure: state_out is NULL");
        }
        match gil.ensure_raw() {
            Ok(s) => {
                let c = gil_ensure_state_t {
                    acquired: u8::from(s.acquired),
                    attached: u8::from(s.attached),
                };
                // SAFETY: non-null and writable per the contract.
                unsafe { state_out.write(c) };
                GIL_OK
            }
            Err(e) => fail_with(e),
        }
    })
}

/// Undoes `gil_ensure` (`PyGILState_Release`).
/// `gil` is checked against the live handles.
#[no_mangle]
pub extern "C" fn gil_ensure_release(gil: *mut gil_t, state: gil_ensure_state_t) -> i32 {
    guarded("gil_ensure_release", || {
        let handle = match gil_ref(gil, "gil_ensure_release") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        if state.acquired > 1 || state.attached > 1 {
            return invalid("gil_ensure_release: state was not produced by gil_ensure");
        }
        let s = EnsureState {
            acquired: state.acquired == 1,
            attached: state.attached == 1,
        };
        match gil.ensure_release(s) {
            Ok(()) => GIL_OK,
            Err(e) => fail_with(e),
        }
    })
}

/// A safepoint: runs pending actions, honours switch requests; `GIL_ERR_STOPPED` /
/// `GIL_ERR_SHUT_DOWN` tell the thread to unwind.
/// `gil` is checked against the live handles.
#[no_mangle]
pub extern "C" fn gil_poll(gil: *mut gil_t) -> i32 {
    guarded("gil_poll", || {
        let handle = match gil_ref(gil, "gil_poll") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        match gil.poll() {
            Ok(()) => GIL_OK,
            Err(e) => fail_with(e),
        }
    })
}

/// 1 if the calling thread holds the GIL, else 0 (also for a NULL or invalid gil, with a
/// message for `gil_last_error()` for an invalid one).
#[no_mangle]
pub extern "C" fn gil_holds(gil: *const gil_t) -> i32 {
    guard("gil_holds", 0, || {
        if gil.is_null() {
            return 0;
        }
        match gil_ref(gil, "gil_holds") {
            Ok(h) => i32::from(h.gil.current().is_some_and(|t| t.holds_gil())),
            Err(_) => 0,
        }
    })
}

/// Enters a blocking region: releases the GIL if held. `*token_out` goes to
/// `gil_blocking_leave`. Inside, call `gil_poll` to run pending actions.
///
/// # Safety
/// `gil` any pointer (checked against the live handles); `token_out` writable.
#[no_mangle]
pub unsafe extern "C" fn gil_blocking_enter(gil: *mut gil_t, token_out: *mut i32) -> i32 {
    guarded("gil_blocking_enter", || {
        let handle = match gil_ref(gil, "gil_blocking_enter") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        if token_out.is_null() {
            return invalid("gil_blocking_enter: token_out is NULL");
        }
        let Some(h) = gil.current() else {
            return invalid_not_attached(gil, "gil_blocking_enter");
        };
        let entered = h.enter_blocking().map(|region| {
            let held = region.held_gil();
            region.keep_open();
            held
        });
        match entered {
            Ok(held) => {
                // SAFETY: non-null and writable per the contract.
                unsafe { token_out.write(TOKEN_MAGIC | i32::from(held)) };
                GIL_OK
            }
            Err(e) => fail_with(e),
        }
    })
}

/// Leaves a blocking region: runs pending actions and re-takes the GIL if it was held.
/// `gil` is checked against the live handles.
#[no_mangle]
pub extern "C" fn gil_blocking_leave(gil: *mut gil_t, token: i32) -> i32 {
    guarded("gil_blocking_leave", || {
        let handle = match gil_ref(gil, "gil_blocking_leave") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        if token & !1 != TOKEN_MAGIC {
            return invalid(&format!(
                "gil_blocking_leave: token {token:#x} was not produced by gil_blocking_enter"
            ));
        }
        let Some(h) = gil.current() else {
            return invalid_not_attached(gil, "gil_blocking_leave");
        };
        let left = h.current_region().and_then(|region| region.leave());
        match left {
            Ok(()) => GIL_OK,
            Err(e) => fail_with(e),
        }
    })
}

struct CAction {
    f: gil_action_fn,
    data: *mut c_void,
    free_data: Option<gil_free_fn>,
}

// SAFETY: the C caller promises (gil.h) that `f` may be called from any attached thread
// with `data`, and `free_data` from whichever thread drops the last reference.
unsafe impl Send for CAction {}
// SAFETY: as above; the action may run on several threads at once.
unsafe impl Sync for CAction {}

impl CAction {
    fn call(&self, ctx: &gil_action_ctx_t) {
        // SAFETY: the caller's function with the caller's data, per gil_submit_action's
        // contract.
        unsafe { (self.f)(self.data, ctx) };
    }
}

impl Drop for CAction {
    fn drop(&mut self) {
        if let Some(free) = self.free_data {
            // SAFETY: the caller's free function for its own data, called exactly once.
            unsafe { free(self.data) };
        }
    }
}

/// Submits an action: `fn(data, ctx)` runs on thread `target` (or every attached
/// thread for `GIL_ALL_THREADS`) at its next safepoint. `free_data` (may be NULL) is
/// called once no thread can run it and `*out` was deleted. `out` may be NULL (the
/// action is not waited for).
///
/// # Safety
/// `gil` any pointer (checked against the live handles); `fn_` callable from any attached thread with `data`; `out`
/// null or writable.
#[no_mangle]
pub unsafe extern "C" fn gil_submit_action(
    gil: *mut gil_t,
    target: u64,
    fn_: Option<gil_action_fn>,
    data: *mut c_void,
    free_data: Option<gil_free_fn>,
    out: *mut *mut gil_action_t,
) -> i32 {
    guarded("gil_submit_action", || {
        let handle = match gil_ref(gil, "gil_submit_action") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        let Some(f) = fn_ else {
            return invalid("gil_submit_action: fn_ is NULL");
        };
        let c = CAction { f, data, free_data };
        let target = match target {
            GIL_ALL_THREADS => ActionTarget::AllThreads,
            id => ActionTarget::Thread(ThreadId::from_u64(id)),
        };
        let result = gil.submit(target, move |ctx: &ActionContext<'_>| {
            let cctx = gil_action_ctx_t {
                thread_id: ctx.thread.as_u64(),
                holds_gil: i32::from(ctx.holds_gil),
            };
            c.call(&cctx);
        });
        match result {
            Ok(action) => {
                if !out.is_null() {
                    let p = HANDLES.register(gil_action_t { action });
                    // SAFETY: non-null and writable per the contract.
                    unsafe { out.write(p) };
                }
                GIL_OK
            }
            Err(e) => fail_with(e),
        }
    })
}

/// Waits at most `timeout_us` for every target to run (or skip) the action; fills
/// `*report_out` (may be NULL) either way. `GIL_ERR_TIMEOUT` if targets are pending.
///
/// # Safety
/// `action` any pointer (checked against the live handles); `report_out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn gil_action_wait(
    action: *const gil_action_t,
    timeout_us: u64,
    report_out: *mut gil_action_report_t,
) -> i32 {
    guarded("gil_action_wait", || {
        let a = match HANDLES.get(action) {
            Ok(a) => a,
            Err(e) => return invalid(&format!("gil_action_wait: {}", e.for_param("action"))),
        };
        let result = a.action.wait(Duration::from_micros(timeout_us));
        let r = a.action.report();
        if !report_out.is_null() {
            let c = gil_action_report_t {
                targets: (r.outcomes.len() + r.pending.len()) as u32,
                ran: r.ran() as u32,
                skipped: r.skipped() as u32,
                pending: r.pending.len() as u32,
            };
            // SAFETY: non-null and writable per the contract.
            unsafe { report_out.write(c) };
        }
        match result {
            Ok(_) => GIL_OK,
            Err(e) => fail_with(e),
        }
    })
}

/// Deletes an action handle (the action still runs where pending). NULL is ignored; a
/// deleted or unknown handle is left alone with a message for `gil_last_error()`.
#[no_mangle]
pub extern "C" fn gil_action_delete(action: *mut gil_action_t) {
    if action.is_null() {
        return;
    }
    guard("gil_action_delete", (), || {
        if let Err(e) = HANDLES.remove(action) {
            invalid(&format!("gil_action_delete: {}", e.for_param("action")));
        }
    })
}

/// Asks thread `thread_id` to stop (its GIL calls then return `GIL_ERR_STOPPED`).
/// `gil` is checked against the live handles.
#[no_mangle]
pub extern "C" fn gil_request_stop(gil: *mut gil_t, thread_id: u64) -> i32 {
    guarded("gil_request_stop", || {
        let handle = match gil_ref(gil, "gil_request_stop") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        match gil.request_stop(ThreadId::from_u64(thread_id)) {
            Ok(()) => GIL_OK,
            Err(e) => fail_with(e),
        }
    })
}

struct CHooks {
    on_block: Option<gil_hook_fn>,
    on_unblock: Option<gil_hook_fn>,
    data: *mut c_void,
}

// SAFETY: the C caller promises (gil.h) that the hooks may be called from any attached
// thread with `data`.
unsafe impl Send for CHooks {}
// SAFETY: as above.
unsafe impl Sync for CHooks {}

fn reason_code(r: BlockReason) -> i32 {
    match r {
        BlockReason::WaitingForGil => GIL_BLOCK_WAITING_FOR_GIL,
        BlockReason::BlockingRegion => GIL_BLOCK_BLOCKING_REGION,
    }
}

impl GilHooks for CHooks {
    fn on_block(&self, thread: ThreadId, reason: BlockReason) {
        if let Some(f) = self.on_block {
            // SAFETY: the caller's hook with its data, per gil_set_hooks' contract.
            unsafe { f(self.data, thread.as_u64(), reason_code(reason)) };
        }
    }
    fn on_unblock(&self, thread: ThreadId, reason: BlockReason) {
        if let Some(f) = self.on_unblock {
            // SAFETY: as above.
            unsafe { f(self.data, thread.as_u64(), reason_code(reason)) };
        }
    }
}

/// Installs block/unblock hooks (either may be NULL; both NULL removes them).
///
/// # Safety
/// `gil` any pointer (checked against the live handles); the hooks callable from any attached thread with `data`.
#[no_mangle]
pub unsafe extern "C" fn gil_set_hooks(
    gil: *mut gil_t,
    on_block: Option<gil_hook_fn>,
    on_unblock: Option<gil_hook_fn>,
    data: *mut c_void,
) -> i32 {
    guarded("gil_set_hooks", || {
        let handle = match gil_ref(gil, "gil_set_hooks") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        if on_block.is_none() && on_unblock.is_none() {
            gil.set_hooks(None);
        } else {
            let hooks: Box<dyn GilHooks> = Box::new(CHooks {
                on_block,
                on_unblock,
                data,
            });
            gil.set_hooks(Some(hooks.into()));
        }
        GIL_OK
    })
}

/// Shuts the GIL down, waiting at most `timeout_us` for threads to leave; fills
/// `*report_out` (may be NULL). `GIL_ERR_TIMEOUT` if threads are stuck inside.
///
/// # Safety
/// `gil` any pointer (checked against the live handles); `report_out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn gil_shutdown(
    gil: *mut gil_t,
    timeout_us: u64,
    report_out: *mut gil_shutdown_report_t,
) -> i32 {
    guarded("gil_shutdown", || {
        let handle = match gil_ref(gil, "gil_shutdown") {
            Ok(h) => h,
            Err(c) => return c,
        };
        let gil = &handle.gil;
        let report = match gil.shutdown(Duration::from_micros(timeout_us)) {
            Ok(r) => r,
            Err(e) => return fail_with(e),
        };
        if !report_out.is_null() {
            let mut c = gil_shutdown_report_t {
                threads: report.threads.len() as u32,
                ..Default::default()
            };
            for t in &report.threads {
                match t.fate {
                    ThreadFate::Detached => c.detached += 1,
                    ThreadFate::LeftWithError => c.left_with_error += 1,
                    ThreadFate::Idle | ThreadFate::Caller => c.idle += 1,
                    ThreadFate::Stuck { .. } => c.stuck += 1,
                }
            }
            // SAFETY: non-null and writable per the contract.
            unsafe { report_out.write(c) };
        }
        match report.into_result() {
            Ok(_) => GIL_OK,
            Err(e) => fail_with(e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last_error() -> String {
        // SAFETY: the thread's message, valid until its next failure.
        unsafe { CStr::from_ptr(gil_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_in_an_entry_is_gil_err_panic_with_a_message() {
        std::panic::set_hook(Box::new(|_| {}));
        assert_eq!(guarded("gil_poll", || panic!("boom")), GIL_ERR_PANIC);
        assert_eq!(
            last_error(),
            "gil_poll: internal panic (caught at the C boundary): boom"
        );
    }

    #[test]
    fn handles_are_checked_and_the_codes_keep_their_values() {
        let mut g: *mut gil_t = std::ptr::null_mut();
        // SAFETY: a NULL name and a writable out pointer.
        assert_eq!(unsafe { gil_new(std::ptr::null(), 0, &mut g) }, GIL_OK);
        assert_eq!(gil_poll(g.cast()), GIL_ERR_NOT_ATTACHED);
        let action = g.cast::<gil_action_t>();
        // SAFETY: a pointer the registry checks; no report to write.
        let rc = unsafe { gil_action_wait(action, 0, std::ptr::null_mut()) };
        assert_eq!(rc, GIL_ERR_INVALID_ARGUMENT);
        assert!(
            last_error().contains("is a GIL handle where a action handle is expected"),
            "{}",
            last_error()
        );
        gil_delete(g);
        assert_eq!(gil_poll(g), GIL_ERR_INVALID_ARGUMENT);
        assert!(last_error().contains("not a live GIL handle"));
        // The values C programs compiled against the old header see.
        assert_eq!(
            [
                GIL_ERR_SHUT_DOWN,
                GIL_ERR_UNKNOWN_THREAD,
                GIL_ERR_PANIC,
                GIL_ERR_INSIDE_REGION
            ],
            [-2, -7, -9, -14]
        );
    }
}
