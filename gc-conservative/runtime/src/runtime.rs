//! The runtime: its heap and GIL, each attached thread's state, the GIL hooks that make a
//! blocked thread GC-safe, the task scanner, and the operations the C entry points
//! (`capi.rs`) forward to.
//!
//! A thread attached to a runtime is either *inside* (it holds the GIL and runs, touching
//! the heap) or *outside* (no GIL; in a gc-core GC-safe region, so collections never wait
//! for it). A blocking region (`blocking_begin` .. `blocking_end`) is GC-safe and without
//! the GIL, from either state. While a thread waits inside a GIL call (taking the GIL,
//! a switch at a poll), the GIL's `on_block` hook enters a nested GC-safe region whose
//! lowest live stack address is the runtime entry point's spill area, so the waiting
//! thread's references, in its stack or in registers its caller held, are scanned.
//! Regions that outlive the call that entered them (outside, blocking) save the caller's
//! registers in the thread's [`ThreadRec`], which the runtime's task scanner scans with
//! the thread's stack.

use crate::gil_sys::{self, gil_t};
use crate::status::{
    GC_RUNTIME_ERR_ALREADY_ATTACHED, GC_RUNTIME_ERR_GC, GC_RUNTIME_ERR_GIL,
    GC_RUNTIME_ERR_INVALID_ARGUMENT, GC_RUNTIME_ERR_NOT_ATTACHED, GC_RUNTIME_ERR_SHUT_DOWN,
    GC_RUNTIME_ERR_STATE, GC_RUNTIME_ERR_STOPPED,
};
use gc_core::{Callback, Marker, ObjRef, Task};
use gc_core_capi::{self as gc, gc_config_t, gc_heap_t, gc_mutator_t, gc_task_t};
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Callee-saved registers of the x86-64 SysV ABI: rbx, rbp, r12, r13, r14, r15.
pub const SAVED_REGS: usize = 6;

/// What an entry point without a prologue spilled before calling its implementation:
/// its caller's callee-saved registers and the caller's stack pointer (the lowest address
/// of the caller's live frames once the entry point returns). It lives in the entry
/// point's frame, so its own address is a live stack address while the call runs.
#[repr(C)]
pub struct Saved {
    /// rbx, rbp, r12, r13, r14, r15 as the caller left them.
    pub regs: [usize; SAVED_REGS],
    /// The caller's stack pointer after the call returns.
    pub caller_sp: usize,
}

impl Saved {
    /// A stack address that stays live while the entry point's call runs.
    fn live_sp(&self) -> usize {
        self as *const Saved as usize
    }
}

/// A scan filter (`gc_runtime_filter_t`): non-zero keeps the object a stack word points
/// into.
pub type Filter = Option<unsafe extern "C" fn(data: *mut c_void, obj: *mut c_void) -> c_int>;

/// A failed operation: a `GC_RUNTIME_ERR_*` code and its message.
#[derive(Debug)]
pub struct Error {
    /// The code the C entry point returns.
    pub code: i32,
    /// The message `gc_runtime_last_error` returns.
    pub msg: String,
}

impl Error {
    pub fn new(code: i32, msg: impl Into<String>) -> Error {
        Error {
            code,
            msg: msg.into(),
        }
    }
}

type Result<T> = std::result::Result<T, Error>;

/// A C string the C ABIs below return (NULL or NUL-terminated), as text.
fn text(p: *const c_char) -> String {
    if p.is_null() {
        return "(no message)".into();
    }
    // SAFETY: gc_last_error / gil_last_error return NUL-terminated thread-local strings
    // valid until the thread's next failing call; copied at once.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn gc_error(what: &str) -> Error {
    Error::new(
        GC_RUNTIME_ERR_GC,
        format!("{what}: {}", text(gc::gc_last_error())),
    )
}

fn gil_error(what: &str, code: i32) -> Error {
    let runtime_code = match code {
        gil_sys::GIL_ERR_STOPPED => GC_RUNTIME_ERR_STOPPED,
        gil_sys::GIL_ERR_SHUT_DOWN => GC_RUNTIME_ERR_SHUT_DOWN,
        _ => GC_RUNTIME_ERR_GIL,
    };
    let msg = text(gil_sys::gil_last_error());
    Error::new(runtime_code, format!("{what}: {msg} (gil code {code})"))
}

/// One attached thread, as the task scanner sees it.
pub struct ThreadRec {
    /// The thread's gc-core task (`gc_current_task()` at attach), as an address.
    task: usize,
    /// The registers its last outliving region's entry point saved.
    regs: [AtomicUsize; SAVED_REGS],
    /// `regs` hold references of a thread now outside or in a blocking region.
    regs_valid: AtomicBool,
}

impl ThreadRec {
    fn new(task: usize) -> ThreadRec {
        ThreadRec {
            task,
            regs: Default::default(),
            regs_valid: AtomicBool::new(false),
        }
    }

    /// Saves `regs` for the scanner. Written before the thread enters its GC-safe region,
    /// whose handshake orders them before any collection that counts the thread stopped.
    fn save(&self, regs: &[usize; SAVED_REGS]) {
        for (slot, r) in self.regs.iter().zip(regs) {
            slot.store(*r, Ordering::Relaxed);
        }
        self.regs_valid.store(true, Ordering::Release);
    }

    /// The thread runs again: its registers are its own business.
    fn clear(&self) {
        self.regs_valid.store(false, Ordering::Relaxed);
    }

    fn saved(&self) -> Option<[usize; SAVED_REGS]> {
        if !self.regs_valid.load(Ordering::Acquire) {
            return None;
        }
        Some(std::array::from_fn(|i| {
            self.regs[i].load(Ordering::Relaxed)
        }))
    }
}

/// What the task scanner needs, shared with the heap's callback.
pub struct Shared {
    filter: Filter,
    /// The filter's `data` (a C pointer the caller vouches for; kept as an address).
    filter_data: usize,
    /// The runtime's scanner scans stacks itself (a filter is set); without a filter,
    /// gc-conservative's own scanner does (it also indexes big objects).
    scan_stacks: bool,
    threads: Mutex<Vec<Arc<ThreadRec>>>,
}

impl Shared {
    fn threads(&self) -> std::sync::MutexGuard<'_, Vec<Arc<ThreadRec>>> {
        self.threads.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn accept(&self, obj: ObjRef) -> bool {
        match self.filter {
            None => true,
            // SAFETY: the filter and its data come from the runtime's configuration, whose
            // contract (gc_runtime.h) is that it may be called with any object, from any
            // collector thread.
            Some(f) => (unsafe { f(self.filter_data as *mut c_void, obj.as_ptr().cast()) }) != 0,
        }
    }

    /// Scans `task`: its stack (filtered) when `stack`, and the registers the runtime
    /// saved for it. Returns the words accepted. `handed` says the heap handed the task
    /// to this runtime's task scanner (registered: its stack is scanned without looking
    /// it up); otherwise (`gc_runtime_scan_task`, given any pointer) a task no longer
    /// registered with the heap being collected scans as nothing (gc-conservative's
    /// `scan_task`).
    pub fn scan(&self, m: &mut Marker<'_>, task: &Task, stack: bool, handed: bool) -> usize {
        let mut found = 0;
        if stack {
            let mut accept = |o| self.accept(o);
            found += match (self.filter, handed) {
                (None, false) => gc_conservative::scan_task(m, task),
                (Some(_), false) => gc_conservative::scan_task_filtered(m, task, &mut accept),
                // SAFETY: the heap hands its task scanners its registered tasks.
                (None, true) => unsafe { gc_conservative::scan_task_unchecked(m, task) },
                // SAFETY: as above.
                (Some(_), true) => unsafe {
                    gc_conservative::scan_task_filtered_unchecked(m, task, &mut accept)
                },
            };
        }
        let key = task.c_handle() as usize;
        let regs = self
            .threads()
            .iter()
            .find(|t| t.task == key)
            .and_then(|t| t.saved());
        let heap = m.heap_id();
        for w in regs.into_iter().flatten() {
            if let Some(obj) = gc_conservative::base_ptr(heap, w) {
                if self.accept(obj) {
                    // SAFETY: base_ptr found an allocated object of the heap being marked.
                    unsafe { m.queue(obj) };
                    found += 1;
                }
            }
        }
        found
    }
}

/// A runtime: one heap, one GIL, the scanner's shared state.
pub struct Runtime {
    heap: *mut gc_heap_t,
    gil: *mut gil_t,
    shared: Arc<Shared>,
}

/// The configuration `Runtime::new` takes (the C `gc_runtime_config_t`, converted).
pub struct Config<'a> {
    pub gil_name: &'a CStr,
    pub switch_interval_us: u64,
    pub conservative: bool,
    pub filter: Filter,
    pub filter_data: *mut c_void,
}

/// Hooks nested deeper than this are counted, not given regions of their own (the
/// outermost ones already made the thread GC-safe).
const MAX_HOOK_DEPTH: usize = 8;

/// A blocking region in progress.
#[derive(Clone, Copy)]
struct Blocking {
    token: i32,
    /// What `gc_safe_enter_sp` returned at the start.
    state: i8,
    was_inside: bool,
    prev_live_sp: usize,
}

/// The calling thread's attachment (one runtime per thread).
struct Local {
    /// The runtime's address (0: not attached).
    rt: Cell<usize>,
    m: Cell<*mut gc_mutator_t>,
    att: RefCell<Option<(Arc<Shared>, Arc<ThreadRec>)>>,
    inside: Cell<bool>,
    outside_state: Cell<i8>,
    /// The lowest live stack address of the runtime call in progress (0: none): what the
    /// hooks give gc-core as the region's stack pointer.
    live_sp: Cell<usize>,
    hook_states: Cell<[i8; MAX_HOOK_DEPTH]>,
    hook_depth: Cell<usize>,
    hook_overflow: Cell<usize>,
    blocking: Cell<Option<Blocking>>,
}

impl Local {
    fn reset(&self) {
        self.rt.set(0);
        self.m.set(std::ptr::null_mut());
        self.inside.set(false);
        self.outside_state.set(0);
        self.live_sp.set(0);
        self.hook_depth.set(0);
        self.hook_overflow.set(0);
        self.blocking.set(None);
    }

    /// Runs `f` on the thread's record (no reference count touched).
    fn with_rec(&self, f: impl FnOnce(&ThreadRec)) {
        if let Some((_, rec)) = self.att.borrow().as_ref() {
            f(rec);
        }
    }
}

impl Drop for Local {
    /// A thread that exits attached leaves the runtime's list (gc-core and gil detach it
    /// through their own thread-locals).
    fn drop(&mut self) {
        if let Some((shared, rec)) = self.att.get_mut().take() {
            shared.threads().retain(|t| !Arc::ptr_eq(t, &rec));
        }
    }
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            rt: Cell::new(0),
            m: Cell::new(std::ptr::null_mut()),
            att: RefCell::new(None),
            inside: Cell::new(false),
            outside_state: Cell::new(0),
            live_sp: Cell::new(0),
            hook_states: Cell::new([0; MAX_HOOK_DEPTH]),
            hook_depth: Cell::new(0),
            hook_overflow: Cell::new(0),
            blocking: Cell::new(None),
        }
    };
}

fn with_local<R>(what: &str, f: impl FnOnce(&Local) -> Result<R>) -> Result<R> {
    LOCAL.try_with(f).unwrap_or_else(|_| {
        Err(Error::new(
            GC_RUNTIME_ERR_STATE,
            format!("{what}: the thread is exiting"),
        ))
    })
}

/// The GIL's `on_block` hook: the thread stops running managed code inside a GIL call;
/// make it GC-safe, with the runtime call's spill area as its live stack bottom.
unsafe extern "C" fn on_block(data: *mut c_void, _thread: u64, _reason: i32) {
    let _ = LOCAL.try_with(|l| {
        if l.rt.get() != data as usize {
            return; // a thread attached to the GIL only, or to another runtime
        }
        let depth = l.hook_depth.get();
        if depth >= MAX_HOOK_DEPTH {
            l.hook_overflow.set(l.hook_overflow.get() + 1);
            return;
        }
        let m = l.m.get();
        let sp = l.live_sp.get();
        let mut state = -1;
        if sp != 0 {
            // The spill area of the runtime call in progress on this thread: its frame
            // outlives the GIL call and holds the caller's registers.
            // SAFETY: m is this thread's attached mutator; gc_safe_enter_sp checks that sp
            // lies in this thread's live stack.
            state = unsafe { gc::gc_safe_enter_sp(m, sp as *mut c_void) };
        }
        if state < 0 {
            // A GIL call made through gil.h directly: this hook's own frame is live while
            // the thread waits inside it.
            // SAFETY: m is this thread's attached mutator (gc_safe_enter checks it).
            state = unsafe { gc::gc_safe_enter(m) };
        }
        let mut states = l.hook_states.get();
        states[depth] = state;
        l.hook_states.set(states);
        l.hook_depth.set(depth + 1);
    });
}

/// The GIL's `on_unblock` hook: leaves the region `on_block` entered.
unsafe extern "C" fn on_unblock(data: *mut c_void, _thread: u64, _reason: i32) {
    let _ = LOCAL.try_with(|l| {
        if l.rt.get() != data as usize {
            return;
        }
        if l.hook_overflow.get() > 0 {
            l.hook_overflow.set(l.hook_overflow.get() - 1);
            return;
        }
        let depth = l.hook_depth.get();
        if depth == 0 {
            return;
        }
        l.hook_depth.set(depth - 1);
        let state = l.hook_states.get()[depth - 1];
        if state >= 0 {
            // SAFETY: this thread's attached mutator, leaving the region on_block entered.
            unsafe { gc::gc_safe_leave(l.m.get(), state) };
        }
    });
}

impl Runtime {
    /// Makes the heap (`gc` NULL: the defaults), the scanner and the GIL; its hooks are
    /// installed by [`Runtime::install_hooks`] once the runtime has its final address.
    ///
    /// # Safety
    /// `gc` is null or points to a valid `gc_config_t`; the filter may be called with
    /// its data and any object, from any collector thread, while the heap lives.
    pub unsafe fn new(gc_cfg: *const gc_config_t, cfg: &Config<'_>) -> Result<Runtime> {
        // SAFETY: forwarded from the caller.
        let heap = unsafe { gc::gc_heap_new(gc_cfg) };
        if heap.is_null() {
            return Err(gc_error("gc_runtime_new: gc_heap_new"));
        }
        let shared = Arc::new(Shared {
            filter: cfg.filter,
            filter_data: cfg.filter_data as usize,
            scan_stacks: cfg.filter.is_some(),
            threads: Mutex::new(Vec::new()),
        });
        let fail = |e: Error| {
            gc::gc_heap_delete(heap);
            Err(e)
        };
        if cfg.conservative {
            let Some(h) = gc::heap_handle(heap, "gc_runtime_new") else {
                return fail(gc_error("gc_runtime_new"));
            };
            if !shared.scan_stacks {
                if let Err(e) = gc_conservative::enable_conservative_scanning(&h) {
                    return fail(Error::new(
                        GC_RUNTIME_ERR_GC,
                        format!("gc_runtime_new: {e}"),
                    ));
                }
            }
            let s = shared.clone();
            let scanner = Callback::TaskScanner(Arc::new(move |m, task, _| {
                s.scan(m, task, s.scan_stacks, true);
            }));
            if let Err(e) = h.add_callback(scanner) {
                return fail(Error::new(
                    GC_RUNTIME_ERR_GC,
                    format!("gc_runtime_new: {e}"),
                ));
            }
        }
        let mut gil = std::ptr::null_mut();
        // SAFETY: a NUL-terminated name and a writable out pointer.
        let r =
            unsafe { gil_sys::gil_new(cfg.gil_name.as_ptr(), cfg.switch_interval_us, &mut gil) };
        if r != gil_sys::GIL_OK {
            return fail(gil_error("gc_runtime_new: gil_new", r));
        }
        Ok(Runtime { heap, gil, shared })
    }

    /// Installs the GIL hooks, with the runtime's address (what `attached` compares with
    /// each thread's attachment) as their data: call it once the runtime has its final
    /// address (boxed in its C handle).
    pub fn install_hooks(&self) -> Result<()> {
        let data = self.key() as *mut c_void;
        // SAFETY: the runtime's own GIL; the hooks never dereference data (they compare
        // it with the calling thread's attachment), so they are sound from any thread.
        let r = unsafe { gil_sys::gil_set_hooks(self.gil, Some(on_block), Some(on_unblock), data) };
        if r != gil_sys::GIL_OK {
            return Err(gil_error("gc_runtime_new: gil_set_hooks", r));
        }
        Ok(())
    }

    /// Whether the runtime may be freed: no thread attached to it, or to its heap
    /// directly.
    pub fn check_deletable(&self) -> Result<()> {
        let threads = self.shared.threads().len();
        let heap_threads =
            gc::heap_handle(self.heap, "gc_runtime_delete").map_or(0, |h| h.attached_threads());
        if threads > 0 || heap_threads > 0 {
            return Err(Error::new(
                GC_RUNTIME_ERR_STATE,
                format!(
                    "gc_runtime_delete: {} thread(s) still attached; detach them first",
                    threads.max(heap_threads)
                ),
            ));
        }
        Ok(())
    }

    /// Frees the GIL and the heap.
    ///
    /// # Safety
    /// [`Runtime::check_deletable`] said yes, and no thread attaches meanwhile.
    pub unsafe fn free(self) {
        // The runtime's own GIL and heap, never used again; no thread attached (caller).
        gil_sys::gil_delete(self.gil);
        gc::gc_heap_delete(self.heap);
    }

    pub fn heap(&self) -> *mut gc_heap_t {
        self.heap
    }

    pub fn gil(&self) -> *mut gil_t {
        self.gil
    }

    fn key(&self) -> usize {
        self as *const Runtime as usize
    }

    /// This thread's mutator, if it is attached to this runtime.
    fn attached(&self, l: &Local, what: &str) -> Result<*mut gc_mutator_t> {
        match l.rt.get() {
            k if k == self.key() => Ok(l.m.get()),
            0 => Err(Error::new(
                GC_RUNTIME_ERR_NOT_ATTACHED,
                format!("{what}: the calling thread is not attached to this runtime"),
            )),
            _ => Err(Error::new(
                GC_RUNTIME_ERR_NOT_ATTACHED,
                format!("{what}: the calling thread is attached to another runtime"),
            )),
        }
    }

    /// Attaches the calling thread to the heap and the GIL; it starts outside.
    ///
    /// # Safety
    /// `saved` was spilled by the entry point this call runs under; `name` is null or
    /// NUL-terminated.
    pub unsafe fn attach(&self, saved: &Saved, name: *const c_char) -> Result<*mut gc_mutator_t> {
        const WHAT: &str = "gc_runtime_attach";
        with_local(WHAT, |l| {
            if l.rt.get() != 0 {
                return Err(Error::new(
                    GC_RUNTIME_ERR_ALREADY_ATTACHED,
                    format!("{WHAT}: the calling thread is already attached to a runtime"),
                ));
            }
            let m = gc::gc_thread_attach(self.heap);
            if m.is_null() {
                return Err(gc_error(WHAT));
            }
            // SAFETY: the runtime's own GIL; name null or NUL-terminated (caller).
            let r = unsafe { gil_sys::gil_attach(self.gil, name, std::ptr::null_mut()) };
            if r != gil_sys::GIL_OK {
                let e = gil_error(WHAT, r);
                gc::gc_thread_detach();
                return Err(e);
            }
            let rec = Arc::new(ThreadRec::new(gc::gc_current_task() as usize));
            rec.save(&saved.regs);
            self.shared.threads().push(rec.clone());
            // SAFETY: this thread's mutator; the caller's stack pointer is live for as
            // long as the caller's frame, and its registers are saved in `rec`.
            let state = unsafe { gc::gc_safe_enter_sp(m, saved.caller_sp as *mut c_void) };
            if state < 0 {
                let e = gc_error(WHAT);
                self.shared.threads().retain(|t| !Arc::ptr_eq(t, &rec));
                gil_sys::gil_detach(self.gil);
                gc::gc_thread_detach();
                return Err(e);
            }
            l.reset();
            l.rt.set(self.key());
            l.m.set(m);
            l.outside_state.set(state);
            *l.att.borrow_mut() = Some((self.shared.clone(), rec));
            Ok(m)
        })
    }

    /// Detaches the calling thread (outside, not in a blocking region) from both.
    pub fn detach(&self) -> Result<()> {
        const WHAT: &str = "gc_runtime_detach";
        with_local(WHAT, |l| {
            let m = self.attached(l, WHAT)?;
            if l.inside.get() || l.blocking.get().is_some() {
                return Err(Error::new(
                    GC_RUNTIME_ERR_STATE,
                    format!("{WHAT}: the thread is inside (or in a blocking region); call gc_runtime_leave first"),
                ));
            }
            let r = gil_sys::gil_detach(self.gil);
            if let Some((shared, rec)) = l.att.borrow_mut().take() {
                shared.threads().retain(|t| !Arc::ptr_eq(t, &rec));
            }
            // SAFETY: this thread's mutator, leaving the outside region.
            unsafe { gc::gc_safe_leave(m, l.outside_state.get()) };
            let gc_r = gc::gc_thread_detach();
            l.reset();
            if r != gil_sys::GIL_OK {
                return Err(gil_error(WHAT, r));
            }
            if gc_r != 0 {
                return Err(gc_error(WHAT));
            }
            Ok(())
        })
    }

    /// Takes the GIL (GC-safe while waiting) and leaves the outside region.
    pub fn enter(&self, saved: &Saved) -> Result<()> {
        const WHAT: &str = "gc_runtime_enter";
        with_local(WHAT, |l| {
            let m = self.attached(l, WHAT)?;
            if l.inside.get() || l.blocking.get().is_some() {
                return Err(Error::new(
                    GC_RUNTIME_ERR_STATE,
                    format!("{WHAT}: the thread is already inside (or in a blocking region)"),
                ));
            }
            let prev = l.live_sp.replace(saved.live_sp());
            let mut acquired = 0;
            // SAFETY: the runtime's own GIL; a writable out pointer.
            let r = unsafe { gil_sys::gil_acquire(self.gil, &mut acquired) };
            l.live_sp.set(prev);
            if r != gil_sys::GIL_OK {
                return Err(gil_error(WHAT, r));
            }
            // SAFETY: this thread's mutator, leaving the outside region it entered.
            unsafe { gc::gc_safe_leave(m, l.outside_state.get()) };
            l.with_rec(ThreadRec::clear);
            l.inside.set(true);
            Ok(())
        })
    }

    /// Enters the outside region (the caller's registers saved) and releases the GIL.
    pub fn leave(&self, saved: &Saved) -> Result<()> {
        const WHAT: &str = "gc_runtime_leave";
        with_local(WHAT, |l| {
            let m = self.attached(l, WHAT)?;
            if !l.inside.get() || l.blocking.get().is_some() {
                return Err(Error::new(
                    GC_RUNTIME_ERR_STATE,
                    format!("{WHAT}: the thread is not inside (or is in a blocking region)"),
                ));
            }
            l.with_rec(|rec| rec.save(&saved.regs));
            // SAFETY: this thread's mutator; the caller's frame stays live, its registers
            // are saved in the thread's record.
            let state = unsafe { gc::gc_safe_enter_sp(m, saved.caller_sp as *mut c_void) };
            if state < 0 {
                l.with_rec(ThreadRec::clear);
                return Err(gc_error(WHAT));
            }
            l.outside_state.set(state);
            l.inside.set(false);
            let r = gil_sys::gil_release(self.gil, 1);
            if r != gil_sys::GIL_OK {
                return Err(gil_error(WHAT, r));
            }
            Ok(())
        })
    }

    /// The GIL's safepoint (GC-safe if it waits).
    pub fn poll(&self, saved: &Saved) -> Result<()> {
        const WHAT: &str = "gc_runtime_poll";
        with_local(WHAT, |l| {
            self.attached(l, WHAT)?;
            let prev = l.live_sp.replace(saved.live_sp());
            let r = gil_sys::gil_poll(self.gil);
            l.live_sp.set(prev);
            if r != gil_sys::GIL_OK {
                return Err(gil_error(WHAT, r));
            }
            Ok(())
        })
    }

    /// Enters a blocking region: GC-safe (the caller's registers saved), GIL released.
    pub fn blocking_begin(&self, saved: &Saved) -> Result<()> {
        const WHAT: &str = "gc_runtime_blocking_begin";
        with_local(WHAT, |l| {
            let m = self.attached(l, WHAT)?;
            if l.blocking.get().is_some() {
                return Err(Error::new(
                    GC_RUNTIME_ERR_STATE,
                    format!("{WHAT}: the thread is already in a blocking region"),
                ));
            }
            let was_inside = l.inside.get();
            l.with_rec(|rec| rec.save(&saved.regs));
            // SAFETY: this thread's mutator; the caller's frame stays live until
            // gc_runtime_blocking_end, its registers are saved in the thread's record.
            let state = unsafe { gc::gc_safe_enter_sp(m, saved.caller_sp as *mut c_void) };
            if state < 0 {
                if was_inside {
                    l.with_rec(ThreadRec::clear);
                }
                return Err(gc_error(WHAT));
            }
            // Hooks inside the region (its start included) use the caller's frame too.
            let prev = l.live_sp.replace(saved.caller_sp);
            let mut token = 0;
            // SAFETY: the runtime's own GIL; a writable out pointer.
            let r = unsafe { gil_sys::gil_blocking_enter(self.gil, &mut token) };
            if r != gil_sys::GIL_OK {
                l.live_sp.set(prev);
                // SAFETY: leaving the region entered above.
                unsafe { gc::gc_safe_leave(m, state) };
                if was_inside {
                    l.with_rec(ThreadRec::clear);
                }
                return Err(gil_error(WHAT, r));
            }
            l.blocking.set(Some(Blocking {
                token,
                state,
                was_inside,
                prev_live_sp: prev,
            }));
            Ok(())
        })
    }

    /// Ends the blocking region: re-takes the GIL if it was held (GC-safe while waiting),
    /// then leaves the GC-safe region.
    pub fn blocking_end(&self, saved: &Saved) -> Result<()> {
        const WHAT: &str = "gc_runtime_blocking_end";
        with_local(WHAT, |l| {
            let m = self.attached(l, WHAT)?;
            let Some(b) = l.blocking.take() else {
                return Err(Error::new(
                    GC_RUNTIME_ERR_STATE,
                    format!("{WHAT}: the thread is not in a blocking region"),
                ));
            };
            l.live_sp.set(saved.live_sp());
            let r = gil_sys::gil_blocking_leave(self.gil, b.token);
            l.live_sp.set(b.prev_live_sp);
            let holds = r == gil_sys::GIL_OK || gil_sys::gil_holds(self.gil) != 0;
            if b.was_inside && !holds {
                // The GIL was not taken back: the thread is outside now (still GC-safe).
                l.inside.set(false);
                l.outside_state.set(b.state);
            } else {
                // SAFETY: this thread's mutator, leaving the region blocking_begin entered.
                unsafe { gc::gc_safe_leave(m, b.state) };
                if b.was_inside {
                    l.with_rec(ThreadRec::clear);
                }
            }
            if r != gil_sys::GIL_OK {
                return Err(gil_error(WHAT, r));
            }
            Ok(())
        })
    }

    /// What the runtime's task scanner does for `task`, for a task scanner of the
    /// caller's own (`conservative = 0`): the stack, filtered, and the saved registers.
    ///
    /// # Safety
    /// `task` is null or the task a task scanner of this runtime's heap was given.
    pub unsafe fn scan_task(&self, task: *mut gc_task_t) -> Result<isize> {
        const WHAT: &str = "gc_runtime_scan_task";
        if task.is_null() {
            return Err(Error::new(
                GC_RUNTIME_ERR_INVALID_ARGUMENT,
                format!("{WHAT}: task is NULL"),
            ));
        }
        // SAFETY: a task handed to a task scanner is registered and alive (caller).
        let task = unsafe { gc::task_from_ptr(task) };
        // SAFETY: gc_current_mutator() is null or this thread's own ptls.
        unsafe {
            gc::with_active_marker(gc::gc_current_mutator(), WHAT, |mk| {
                self.shared.scan(mk, task, true, false) as isize
            })
        }
        .ok_or_else(|| gc_error(WHAT))
    }
}
