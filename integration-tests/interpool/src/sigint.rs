//! Ctrl-C for a task the host's main thread runs itself (`Future.result()` running a
//! task that no worker thread had taken yet, in an idle worker interpreter).
//!
//! Python's SIGINT handler only marks the signal for the host's main thread, which
//! raises `KeyboardInterrupt` at its next bytecode of host code; while that thread runs
//! a task in a worker interpreter, the mark would wait for the task to end. So while
//! such a call runs, SIGINT reaches [`on_sigint`] first: it wakes a watcher thread
//! (through an eventfd, async-signal-safe), which interrupts the call in the worker
//! interpreter (`KeyboardInterrupt` there, as `InterpreterPoolExecutor` does to a
//! running task on Ctrl-C), then calls the handler it stands in for, so the host sees
//! the signal as before. The handler is installed for the call only, and only where
//! SIGINT has a handler function (not `SIG_DFL`, `SIG_IGN`).

use crate::Worker;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The handler `on_sigint` stands in for (its address), and whether it takes three
/// arguments (`SA_SIGINFO`).
static PREVIOUS: AtomicUsize = AtomicUsize::new(0);
static PREVIOUS_SIGINFO: AtomicUsize = AtomicUsize::new(0);

/// The call the watcher interrupts: the worker and the host thread running in it.
static TARGET: Mutex<Option<(Arc<Worker>, u64)>> = Mutex::new(None);

/// The watcher's eventfd (started on first use).
static WATCHER: OnceLock<Option<c_int>> = OnceLock::new();

extern "C" fn on_sigint(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if let Some(Some(fd)) = WATCHER.get() {
        let one: u64 = 1;
        // SAFETY: write(2) is async-signal-safe; 8 bytes from a live local.
        unsafe { libc::write(*fd, (&one as *const u64).cast(), 8) };
    }
    let prev = PREVIOUS.load(Ordering::Acquire);
    if prev == 0 {
        return;
    }
    if PREVIOUS_SIGINFO.load(Ordering::Acquire) != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this
        // signature; it is called as the kernel would have called it.
        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(prev) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a one-argument handler (`sa_handler`), as installed.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(prev) };
        f(sig);
    }
}

/// The eventfd the watcher thread waits on, starting it the first time.
fn watcher() -> Option<c_int> {
    *WATCHER.get_or_init(|| {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        let started = std::thread::Builder::new()
            .name("interpool-sigint".into())
            .spawn(move || loop {
                let mut n: u64 = 0;
                // SAFETY: reads 8 bytes into a live local from our eventfd.
                let r = unsafe { libc::read(fd, (&mut n as *mut u64).cast(), 8) };
                if r != 8 {
                    continue;
                }
                // Interrupt the call now running, retrying while its thread has not
                // entered the interpreter yet.
                loop {
                    let target = TARGET.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let Some((worker, ident)) = target else { break };
                    let done = worker
                        .interp
                        .try_read()
                        .ok()
                        .and_then(|g| g.as_ref().map(|i| i.interrupt(ident)))
                        .unwrap_or(false);
                    if done {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            });
        started.is_ok().then_some(fd)
    })
}

/// While alive, SIGINT interrupts the call of the host thread `ident` in `worker`.
pub(crate) struct Forward {
    previous: Option<libc::sigaction>,
}

impl Forward {
    /// Starts forwarding (nothing happens if SIGINT has no handler function, or the
    /// watcher cannot start).
    pub(crate) fn new(worker: Arc<Worker>, ident: u64) -> Forward {
        let none = Forward { previous: None };
        if watcher().is_none() {
            return none;
        }
        // SAFETY: an all-zero sigaction is a valid value to be overwritten.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: with a null new action sigaction only reads the current one.
        if unsafe { libc::sigaction(libc::SIGINT, std::ptr::null(), &mut old) } != 0 {
            return none;
        }
        if old.sa_sigaction == libc::SIG_DFL || old.sa_sigaction == libc::SIG_IGN {
            return none;
        }
        *TARGET.lock().unwrap_or_else(|e| e.into_inner()) = Some((worker, ident));
        PREVIOUS.store(old.sa_sigaction, Ordering::Release);
        PREVIOUS_SIGINFO.store(
            usize::from(old.sa_flags & libc::SA_SIGINFO != 0),
            Ordering::Release,
        );
        // SAFETY: a zeroed sigaction filled with our handler, the old mask and flags
        // (SA_SIGINFO for our three-argument handler).
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        new.sa_sigaction = on_sigint as *const () as usize;
        new.sa_mask = old.sa_mask;
        new.sa_flags = (old.sa_flags | libc::SA_SIGINFO) & !libc::SA_RESETHAND;
        // SAFETY: installs a valid action for SIGINT.
        if unsafe { libc::sigaction(libc::SIGINT, &new, std::ptr::null_mut()) } != 0 {
            *TARGET.lock().unwrap_or_else(|e| e.into_inner()) = None;
            return none;
        }
        Forward {
            previous: Some(old),
        }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        if let Some(old) = self.previous.take() {
            // SAFETY: puts back the action read in `new`.
            unsafe { libc::sigaction(libc::SIGINT, &old, std::ptr::null_mut()) };
            *TARGET.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}
