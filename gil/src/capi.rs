//! The C ABI (`include/gil.h`): a thin layer over the Rust API. Every function returns a
//! `GIL_OK`/`GIL_ERR_*` code (a few return a plain value) and leaves a message for
//! `gil_last_error()` on failure; null pointers and misuse are errors, never crashes;
//! panics never cross the boundary. Functions act on the calling thread (found through
//! its thread-local attachment), so C code needs no per-thread handle.
//!
//! The header is checked against this file by `tests/it/header.rs`: names, parameter
//! names and types, struct fields and constants must match.
#![allow(non_camel_case_types)]

use crate::{
    Action, ActionContext, ActionTarget, BlockReason, Config, EnsureState, Gil, GilError, GilHooks,
    ThreadFate, ThreadId,
};
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// Success.
pub const GIL_OK: i32 = 0;
/// A pointer argument was null or a value out of range.
pub const GIL_ERR_INVALID_ARGUMENT: i32 = -1;
/// The GIL is shut down; the thread must leave.
pub const GIL_ERR_SHUT_DOWN: i32 = -2;
/// The thread was asked to stop; it must unwind.
pub const GIL_ERR_STOPPED: i32 = -3;
/// The calling thread is not attached.
pub const GIL_ERR_NOT_ATTACHED: i32 = -4;
/// The calling thread is already attached.
pub const GIL_ERR_ALREADY_ATTACHED: i32 = -5;
/// The calling thread released a GIL it does not hold.
pub const GIL_ERR_NOT_HOLDER: i32 = -6;
/// No attached thread has the given id.
pub const GIL_ERR_UNKNOWN_THREAD: i32 = -7;
/// A wait ran out of time (actions, shutdown).
pub const GIL_ERR_TIMEOUT: i32 = -8;
/// A panic inside the library was caught at the boundary.
pub const GIL_ERR_PANIC: i32 = -9;
/// A configuration value is out of range.
pub const GIL_ERR_INVALID_CONFIG: i32 = -10;
/// The GIL was already shut down.
pub const GIL_ERR_ALREADY_SHUT_DOWN: i32 = -11;

/// The call is not allowed inside a safepoint action.
pub const GIL_ERR_INSIDE_ACTION: i32 = -12;
/// Not allowed inside an `on_block` / `on_unblock` hook.
pub const GIL_ERR_INSIDE_HOOK: i32 = -13;
/// Not allowed inside a blocking region (taking the GIL, a second region).
pub const GIL_ERR_INSIDE_REGION: i32 = -14;

/// Action target meaning every attached thread.
pub const GIL_ALL_THREADS: u64 = 0;
/// Hook reason: the thread waits for the GIL.
pub const GIL_BLOCK_WAITING_FOR_GIL: i32 = 1;
/// Hook reason: the thread is inside a blocking region.
pub const GIL_BLOCK_BLOCKING_REGION: i32 = 2;

/// Marks a token returned by `gil_blocking_enter` (bit 0: the GIL was held).
const TOKEN_MAGIC: i32 = 0x6100;

/// An opaque GIL (a reference to it; `gil_delete` drops the reference).
pub struct gil_t {
    gil: Gil,
}

/// An opaque submitted action.
pub struct gil_action_t {
    action: Action,
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

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

fn code_of(e: &GilError) -> i32 {
    match e {
        GilError::ShutDown { .. } => GIL_ERR_SHUT_DOWN,
        GilError::Stopped { .. } => GIL_ERR_STOPPED,
        GilError::NotAttached { .. } => GIL_ERR_NOT_ATTACHED,
        GilError::AlreadyAttached { .. } => GIL_ERR_ALREADY_ATTACHED,
        GilError::NotHolder { .. } => GIL_ERR_NOT_HOLDER,
        GilError::UnknownThread { .. } => GIL_ERR_UNKNOWN_THREAD,
        GilError::AlreadyShutDown { .. } => GIL_ERR_ALREADY_SHUT_DOWN,
        GilError::ActionTimeout { .. } | GilError::ShutdownIncomplete { .. } => GIL_ERR_TIMEOUT,
        GilError::InvalidConfig { .. } => GIL_ERR_INVALID_CONFIG,
        GilError::InsideAction { .. } => GIL_ERR_INSIDE_ACTION,
        GilError::InsideHook { .. } => GIL_ERR_INSIDE_HOOK,
        GilError::InsideRegion { .. } => GIL_ERR_INSIDE_REGION,
        GilError::NotInRegion { .. } => GIL_ERR_INVALID_ARGUMENT,
    }
}

fn fail(e: GilError) -> i32 {
    set_error(&e.to_string());
    code_of(&e)
}

fn invalid(msg: &str) -> i32 {
    set_error(msg);
    GIL_ERR_INVALID_ARGUMENT
}

/// Runs `f`, turning a panic into `GIL_ERR_PANIC`.
fn guarded(name: &str, f: impl FnOnce() -> i32) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(_) => {
            set_error(&format!(
                "{name}: internal panic (caught at the C boundary)"
            ));
            GIL_ERR_PANIC
        }
    }
}

/// # Safety
/// `gil` is null or a pointer from `gil_new` not yet deleted.
unsafe fn gil_ref<'a>(gil: *const gil_t, func: &str) -> Result<&'a Gil, i32> {
    // SAFETY: the caller passes null or a live pointer from gil_new.
    match unsafe { gil.as_ref() } {
        Some(g) => Ok(&g.gil),
        None => Err(invalid(&format!("{func}: gil is NULL"))),
    }
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
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
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
                let p = Box::into_raw(Box::new(gil_t { gil }));
                // SAFETY: out is non-null and writable per the contract.
                unsafe { out.write(p) };
                GIL_OK
            }
            Err(e) => fail(e),
        }
    })
}

/// Frees this handle: no thread may pass the pointer to any call afterwards
/// (`gil_release` and `gil_detach` included); a thread blocked inside a call at that
/// moment finishes it (the GIL's state lives until no thread needs it). Call
/// `gil_shutdown` first, then delete once every thread has detached. NULL is ignored.
///
/// # Safety
/// `gil` is null or from `gil_new` and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn gil_delete(gil: *mut gil_t) {
    if !gil.is_null() {
        // SAFETY: from Box::into_raw in gil_new, deleted once per the contract.
        drop(unsafe { Box::from_raw(gil) });
    }
}

/// Attaches the calling thread under `name` (NULL: the OS thread name).
///
/// # Safety
/// `gil` from `gil_new`; `name` null or NUL-terminated; `thread_id_out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn gil_attach(
    gil: *mut gil_t,
    name: *const c_char,
    thread_id_out: *mut u64,
) -> i32 {
    guarded("gil_attach", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_attach") } {
            Ok(g) => g,
            Err(c) => return c,
        };
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
            Err(e) => fail(e),
        }
    })
}

/// Detaches the calling thread (releasing the GIL if it holds it).
///
/// # Safety
/// `gil` from `gil_new`.
#[no_mangle]
pub unsafe extern "C" fn gil_detach(gil: *mut gil_t) -> i32 {
    guarded("gil_detach", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_detach") } {
            Ok(g) => g,
            Err(c) => return c,
        };
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
    set_error(&format!(
        "{func}: the calling thread is not attached to GIL {}",
        gil.name()
    ));
    GIL_ERR_NOT_ATTACHED
}

/// The calling thread's id within the GIL.
///
/// # Safety
/// `gil` from `gil_new`; `thread_id_out` writable.
#[no_mangle]
pub unsafe extern "C" fn gil_current_thread(gil: *const gil_t, thread_id_out: *mut u64) -> i32 {
    guarded("gil_current_thread", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_current_thread") } {
            Ok(g) => g,
            Err(c) => return c,
        };
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
/// `gil` from `gil_new`; `acquired_out` writable.
#[no_mangle]
pub unsafe extern "C" fn gil_acquire(gil: *mut gil_t, acquired_out: *mut i32) -> i32 {
    guarded("gil_acquire", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_acquire") } {
            Ok(g) => g,
            Err(c) => return c,
        };
        if acquired_out.is_null() {
            return invalid("gil_acquire: acquired_out is NULL");
        }
        match gil.acquire() {
            Ok(a) => {
                // SAFETY: non-null and writable per the contract.
                unsafe { acquired_out.write(i32::from(a)) };
                GIL_OK
            }
            Err(e) => fail(e),
        }
    })
}

/// Releases the GIL if `acquired` is non-zero (what `gil_acquire` reported).
///
/// # Safety
/// `gil` from `gil_new`.
#[no_mangle]
pub unsafe extern "C" fn gil_release(gil: *mut gil_t, acquired: i32) -> i32 {
    guarded("gil_release", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_release") } {
            Ok(g) => g,
            Err(c) => return c,
        };
        match gil.release(acquired != 0) {
            Ok(()) => GIL_OK,
            Err(e) => fail(e),
        }
    })
}

/// Takes the GIL from any thread, attaching it if needed (`PyGILState_Ensure`).
///
/// # Safety
/// `gil` from `gil_new`; `state_out` writable.
#[no_mangle]
pub unsafe extern "C" fn gil_ensure(gil: *mut gil_t, state_out: *mut gil_ensure_state_t) -> i32 {
    guarded("gil_ensure", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_ensure") } {
            Ok(g) => g,
            Err(c) => return c,
        };
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
            Err(e) => fail(e),
        }
    })
}

/// Undoes `gil_ensure` (`PyGILState_Release`).
///
/// # Safety
/// `gil` from `gil_new`.
#[no_mangle]
pub unsafe extern "C" fn gil_ensure_release(gil: *mut gil_t, state: gil_ensure_state_t) -> i32 {
    guarded("gil_ensure_release", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_ensure_release") } {
            Ok(g) => g,
            Err(c) => return c,
        };
        if state.acquired > 1 || state.attached > 1 {
            return invalid("gil_ensure_release: state was not produced by gil_ensure");
        }
        let s = EnsureState {
            acquired: state.acquired == 1,
            attached: state.attached == 1,
        };
        match gil.ensure_release(s) {
            Ok(()) => GIL_OK,
            Err(e) => fail(e),
        }
    })
}

/// A safepoint: runs pending actions, honours switch requests; `GIL_ERR_STOPPED` /
/// `GIL_ERR_SHUT_DOWN` tell the thread to unwind.
///
/// # Safety
/// `gil` from `gil_new`.
#[no_mangle]
pub unsafe extern "C" fn gil_poll(gil: *mut gil_t) -> i32 {
    guarded("gil_poll", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_poll") } {
            Ok(g) => g,
            Err(c) => return c,
        };
        match gil.poll() {
            Ok(()) => GIL_OK,
            Err(e) => fail(e),
        }
    })
}

/// 1 if the calling thread holds the GIL, else 0 (also for a NULL gil).
///
/// # Safety
/// `gil` null or from `gil_new`.
#[no_mangle]
pub unsafe extern "C" fn gil_holds(gil: *const gil_t) -> i32 {
    // SAFETY: per the contract.
    match unsafe { gil.as_ref() } {
        Some(g) => i32::from(g.gil.current().is_some_and(|h| h.holds_gil())),
        None => 0,
    }
}

/// Enters a blocking region: releases the GIL if held. `*token_out` goes to
/// `gil_blocking_leave`. Inside, call `gil_poll` to run pending actions.
///
/// # Safety
/// `gil` from `gil_new`; `token_out` writable.
#[no_mangle]
pub unsafe extern "C" fn gil_blocking_enter(gil: *mut gil_t, token_out: *mut i32) -> i32 {
    guarded("gil_blocking_enter", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_blocking_enter") } {
            Ok(g) => g,
            Err(c) => return c,
        };
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
            Err(e) => fail(e),
        }
    })
}

/// Leaves a blocking region: runs pending actions and re-takes the GIL if it was held.
///
/// # Safety
/// `gil` from `gil_new`.
#[no_mangle]
pub unsafe extern "C" fn gil_blocking_leave(gil: *mut gil_t, token: i32) -> i32 {
    guarded("gil_blocking_leave", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_blocking_leave") } {
            Ok(g) => g,
            Err(c) => return c,
        };
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
            Err(e) => fail(e),
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
/// `gil` from `gil_new`; `fn_` callable from any attached thread with `data`; `out`
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
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_submit_action") } {
            Ok(g) => g,
            Err(c) => return c,
        };
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
                    let p = Box::into_raw(Box::new(gil_action_t { action }));
                    // SAFETY: non-null and writable per the contract.
                    unsafe { out.write(p) };
                }
                GIL_OK
            }
            Err(e) => fail(e),
        }
    })
}

/// Waits at most `timeout_us` for every target to run (or skip) the action; fills
/// `*report_out` (may be NULL) either way. `GIL_ERR_TIMEOUT` if targets are pending.
///
/// # Safety
/// `action` from `gil_submit_action`; `report_out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn gil_action_wait(
    action: *const gil_action_t,
    timeout_us: u64,
    report_out: *mut gil_action_report_t,
) -> i32 {
    guarded("gil_action_wait", || {
        // SAFETY: null or a live action per the contract.
        let Some(a) = (unsafe { action.as_ref() }) else {
            return invalid("gil_action_wait: action is NULL");
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
            Err(e) => fail(e),
        }
    })
}

/// Deletes an action handle (the action still runs where pending). NULL is ignored.
///
/// # Safety
/// `action` null or from `gil_submit_action`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn gil_action_delete(action: *mut gil_action_t) {
    if !action.is_null() {
        // SAFETY: from Box::into_raw in gil_submit_action, deleted once.
        drop(unsafe { Box::from_raw(action) });
    }
}

/// Asks thread `thread_id` to stop (its GIL calls then return `GIL_ERR_STOPPED`).
///
/// # Safety
/// `gil` from `gil_new`.
#[no_mangle]
pub unsafe extern "C" fn gil_request_stop(gil: *mut gil_t, thread_id: u64) -> i32 {
    guarded("gil_request_stop", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_request_stop") } {
            Ok(g) => g,
            Err(c) => return c,
        };
        match gil.request_stop(ThreadId::from_u64(thread_id)) {
            Ok(()) => GIL_OK,
            Err(e) => fail(e),
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
/// `gil` from `gil_new`; the hooks callable from any attached thread with `data`.
#[no_mangle]
pub unsafe extern "C" fn gil_set_hooks(
    gil: *mut gil_t,
    on_block: Option<gil_hook_fn>,
    on_unblock: Option<gil_hook_fn>,
    data: *mut c_void,
) -> i32 {
    guarded("gil_set_hooks", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_set_hooks") } {
            Ok(g) => g,
            Err(c) => return c,
        };
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
/// `gil` from `gil_new`; `report_out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn gil_shutdown(
    gil: *mut gil_t,
    timeout_us: u64,
    report_out: *mut gil_shutdown_report_t,
) -> i32 {
    guarded("gil_shutdown", || {
        // SAFETY: per the contract.
        let gil = match unsafe { gil_ref(gil, "gil_shutdown") } {
            Ok(g) => g,
            Err(c) => return c,
        };
        let report = match gil.shutdown(Duration::from_micros(timeout_us)) {
            Ok(r) => r,
            Err(e) => return fail(e),
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
            Err(e) => fail(e),
        }
    })
}
