//! Julia's safe-restore points (`jl_set_safe_restore`, `jl_get_safe_restore`): while a
//! thread has one set, a SIGSEGV or SIGBUS on it jumps back to it instead of killing
//! the process (how Julia's clients read memory that may be unmapped: GAP scans other
//! tasks' stacks towards their guard pages). The fault handler is installed at the
//! first use and passes every other fault on to the handler it replaced.

use std::ffi::{c_int, c_void};
use std::sync::Once;

/// `jl_jmp_buf`: a `sigjmp_buf` (`jl_setjmp` is `sigsetjmp`); opaque here.
pub type jl_jmp_buf = c_void;

thread_local! {
    /// The calling thread's restore point (`jl_set_safe_restore`), read by the fault
    /// handler: a const-initialised cell with no destructor, a plain TLS slot.
    static SAFE_RESTORE: std::cell::Cell<*mut c_void> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// `jl_get_safe_restore`: the calling thread's restore point, NULL if none.
#[no_mangle]
pub extern "C" fn jl_get_safe_restore() -> *mut jl_jmp_buf {
    SAFE_RESTORE.with(|c| c.get())
}

/// `jl_set_safe_restore`: while `buf` (a `jl_jmp_buf`, i.e. a `sigjmp_buf` filled by
/// `jl_setjmp`) is set, a SIGSEGV or SIGBUS on the calling thread jumps there
/// (`siglongjmp(buf, 1)`) instead of killing the process: how Julia's clients read
/// memory that may be unmapped (GAP scans other tasks' stacks towards their guard
/// pages). NULL clears it. The handler is installed at the first non-NULL call and
/// passes every other fault on to the handler it replaced (or the default action).
///
/// # Safety
/// `buf` null or a `sigjmp_buf` filled by `sigsetjmp` in a frame that is still active
/// whenever a fault can happen.
#[no_mangle]
pub unsafe extern "C" fn jl_set_safe_restore(buf: *mut jl_jmp_buf) {
    if !buf.is_null() {
        install_fault_handler();
    }
    SAFE_RESTORE.with(|c| c.set(buf));
}

/// The SIGSEGV and SIGBUS actions the fault handler replaced (it passes them faults
/// that are not its own).
static PREVIOUS: std::sync::OnceLock<[libc::sigaction; 2]> = std::sync::OnceLock::new();

extern "C" {
    /// glibc's `siglongjmp` (the libc crate does not bind it; kept out of the
    /// generated header by tests/it/headers.rs).
    fn siglongjmp(env: *mut c_void, val: c_int) -> !;
}

fn install_fault_handler() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: sigaction with zeroed structs filled in here: first the current
        // actions are read (and published before the handler can run), then ours is
        // installed.
        unsafe {
            let mut prev: [libc::sigaction; 2] = std::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut prev[0]);
            libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut prev[1]);
            prev
        }
    });
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: installing a handler described by a zeroed struct filled in here.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fault as *const () as usize;
            // SA_NODEFER: the signal stays unblocked in the handler, so that jumping out
            // of it leaves the thread's mask as it was (sigsetjmp(buf, 0) saves none).
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
            libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
        }
    });
}

/// The fault handler: to the restore point if the thread set one, else on to the
/// handler it replaced.
extern "C" fn on_fault(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let restore = SAFE_RESTORE.with(|c| c.get());
    if !restore.is_null() {
        SAFE_RESTORE.with(|c| c.set(std::ptr::null_mut()));
        // SAFETY: the thread's restore point, set with jl_set_safe_restore by a frame
        // that is still active (its contract); only C frames and this handler lie above.
        unsafe { siglongjmp(restore, 1) };
    }
    let Some(prev) = PREVIOUS.get() else {
        return;
    };
    let prev = &prev[(sig == libc::SIGBUS) as usize];
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // Back to the previous disposition; returning re-runs the faulting instruction,
        // which then takes the default action (a core dump naming the signal).
        // SAFETY: restoring a disposition read from the kernel.
        unsafe { libc::sigaction(sig, prev, std::ptr::null_mut()) };
        return;
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler's own type, as the kernel would have called it.
        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: as above, a plain handler.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}
