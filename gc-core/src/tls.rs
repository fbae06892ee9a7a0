//! Per-thread records that C code reads, and what every collector or mutator thread
//! needs before the heap's own types: the saved-register buffer ([`SAVED_REGS`],
//! [`save_registers`]), the `ptls` head ([`TlsHead`]) and its magic words, the calling
//! thread's id, the `ptls` record of a collector helper thread, and the abort after a
//! callback panicked during a collection.
//!
//! At the bottom of the crate: depends on no other module of it.

use std::ffi::c_void;

/// Registers saved when the thread stops (rbx, rbp, r12-r15, rsp on x86_64), so that a
/// conservative scanner sees references held only in callee-saved registers.
pub const SAVED_REGS: usize = 7;

/// The body of a C entry point without a prologue (x86-64, `#[unsafe(naked)]`): spills
/// its caller's callee-saved registers (rbx, rbp, r12-r15) and stack pointer into a
/// [`SAVED_REGS`]-word record in its own frame, calls `$imp(&record, <the entry point's
/// first three arguments>)`, clears the record and returns what `$imp` returned. The
/// registers are the caller's and the stack pointer is the one after the entry point
/// returns, so they stay valid while the caller blocks; clearing keeps the caller's
/// register values out of dead stack, where a conservative scan would find them later.
/// `$imp` is an `extern "C"` function taking `*const [usize; SAVED_REGS]` (or a
/// `#[repr(C)]` record of that layout) and up to three more arguments.
///
/// At entry rsp is 8 mod 16 (the return address); the 56-byte record realigns it.
#[cfg(target_arch = "x86_64")]
#[doc(hidden)]
#[macro_export]
macro_rules! spill_and_call {
    ($imp:path) => {
        ::std::arch::naked_asm!(
            "sub rsp, 56",
            "mov [rsp], rbx",
            "mov [rsp + 8], rbp",
            "mov [rsp + 16], r12",
            "mov [rsp + 24], r13",
            "mov [rsp + 32], r14",
            "mov [rsp + 40], r15",
            "lea rax, [rsp + 64]",
            "mov [rsp + 48], rax",
            "mov rcx, rdx",
            "mov rdx, rsi",
            "mov rsi, rdi",
            "mov rdi, rsp",
            "call {imp}",
            "xor ecx, ecx",
            "mov [rsp], rcx",
            "mov [rsp + 8], rcx",
            "mov [rsp + 16], rcx",
            "mov [rsp + 24], rcx",
            "mov [rsp + 32], rcx",
            "mov [rsp + 40], rcx",
            "mov [rsp + 48], rcx",
            "add rsp, 56",
            "ret",
            imp = sym $imp,
        )
    };
}

/// Copies the callee-saved registers and the stack pointer into `buf`.
///
/// Inlined into the caller, so the values are those of the frame that stays live while
/// the thread is stopped. It writes only into `buf` (a raw pointer is not accepted):
///
/// ```compile_fail,E0308
/// gc_core::save_registers(std::ptr::null_mut());
/// ```
#[inline(always)]
pub fn save_registers(buf: &mut [usize; SAVED_REGS]) {
    let buf: *mut [usize; SAVED_REGS] = buf;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: only stores to the 56-byte buffer the caller owns; no other effect.
    unsafe {
        std::arch::asm!(
            "mov [{b}], rbx",
            "mov [{b} + 8], rbp",
            "mov [{b} + 16], r12",
            "mov [{b} + 24], r13",
            "mov [{b} + 32], r14",
            "mov [{b} + 40], r15",
            "mov [{b} + 48], rsp",
            b = in(reg) buf,
            options(nostack, preserves_flags)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let marker = 0usize;
        // SAFETY: the caller owns the buffer.
        unsafe { *buf = [0, 0, 0, 0, 0, 0, &marker as *const usize as usize] };
    }
}

/// The calling thread's id, as stored in `MutatorShared::thread`.
#[inline]
pub(crate) fn thread_id() -> usize {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    {
        // glibc's pthread_self() on x86_64 is the thread pointer's self field, %fs:0x10
        // (what the compat header's inline jl_get_ptls_states reads too): one load, so
        // that every C entry point can afford to check the calling thread.
        let id: usize;
        // SAFETY: reads the current thread's TCB, which glibc keeps mapped for the
        // thread's lifetime; no memory is written and no flags are changed.
        unsafe {
            std::arch::asm!("mov {}, fs:0x10", out(reg) id, options(nostack, readonly, preserves_flags, pure))
        };
        id
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
    // SAFETY: pthread_self has no preconditions.
    unsafe {
        libc::pthread_self() as usize
    }
}

/// `TlsHead::magic` of an attached mutator (`GC_TLS_MUTATOR_MAGIC` in the C headers).
pub const MUTATOR_MAGIC: u64 = 0x4D55_5441_544F_5221;
/// `MutatorShared::magic` of a detached one.
pub(crate) const MUTATOR_DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// The part of a collector thread's `ptls` that C code reads (`gc_tls_head_t`): the
/// mutator of the collecting thread ([`crate::MutatorShared`]) and the helper threads'
/// records start with it. Layout checked by `capi/tests/it/headers.rs`.
#[repr(C)]
pub struct TlsHead {
    /// Callee-saved registers and stack pointer saved when a mutator stops.
    pub regs: std::cell::UnsafeCell<[usize; SAVED_REGS]>,
    /// `MUTATOR_MAGIC` (attached mutator), `HELPER_MAGIC` (collector helper thread) or
    /// `MUTATOR_DEAD`.
    pub magic: std::sync::atomic::AtomicU64,
    /// `pthread_self()` of the owning thread; 0 once a mutator detached (the compat
    /// header's cached `jl_get_ptls_states` relies on it).
    pub thread: std::sync::atomic::AtomicUsize,
    /// The marker this thread marks with (null outside marking).
    pub marker: std::sync::atomic::AtomicPtr<c_void>,
    /// Verify mode: C entry points check every argument.
    pub checked: std::sync::atomic::AtomicBool,
    /// An attached mutator's allocation state (`gc_alloc_fast_t`), which the compat
    /// header's inline `jl_gc_alloc_typed` uses on the owning thread; null on helper
    /// threads and in verify mode (every allocation then goes through the checked
    /// entry point). Layout: `ffi::ALLOC_FAST_LAYOUT`.
    pub alloc: std::sync::atomic::AtomicPtr<c_void>,
}

/// `TlsHead::magic` of a collector helper thread (`GC_TLS_HELPER_MAGIC` in the C
/// headers).
pub const HELPER_MAGIC: u64 = 0x4743_4845_4C50_4552;

thread_local! {
    /// On a collector helper thread: its `ptls` record (lives as long as the thread).
    static HELPER: std::cell::Cell<*const TlsHead> = const { std::cell::Cell::new(std::ptr::null()) };
}

/// Called by each helper thread when it starts: makes its `ptls` record, which
/// [`exit_helper_thread`] frees.
pub(crate) fn enter_helper_thread() {
    let head: *const TlsHead = Box::into_raw(Box::new(TlsHead {
        regs: std::cell::UnsafeCell::new([0; SAVED_REGS]),
        magic: std::sync::atomic::AtomicU64::new(HELPER_MAGIC),
        thread: std::sync::atomic::AtomicUsize::new(thread_id()),
        marker: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
        checked: std::sync::atomic::AtomicBool::new(false),
        alloc: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
    }));
    HELPER.with(|h| h.set(head));
}

/// Called by each helper thread when it ends.
pub(crate) fn exit_helper_thread() {
    let head = HELPER.with(|h| h.replace(std::ptr::null()));
    if !head.is_null() {
        // SAFETY: made by Box::into_raw in enter_helper_thread on this thread; no job
        // runs any more, so nothing refers to it.
        drop(unsafe { Box::from_raw(head as *mut TlsHead) });
    }
}

/// The `ptls` of the calling thread if it is a collector helper thread, else null.
pub(crate) fn helper_ptls() -> *const TlsHead {
    HELPER.with(|h| h.get())
}

/// A callback run during a collection (a mark or sweep function, a root or task
/// scanner, a GC or weak-processing callback) panicked: the heap is half marked or half
/// swept, the world stopped and the other threads parked, so nothing can continue or
/// unwind safely. Says so and aborts (unwinding on used to leave every later collection
/// and attach waiting forever).
pub(crate) fn abort_after_panic(thread: &str, payload: &(dyn std::any::Any + Send)) -> ! {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into());
    eprintln!(
        "gc-core: a callback panicked during a collection on {thread} (mark or sweep function, root or task scanner, GC or weak-processing callback): {msg}; the heap cannot continue, aborting"
    );
    std::process::abort()
}
