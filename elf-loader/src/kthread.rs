//! Kernel threads of this process: the calling thread's id, and whether a thread has
//! exited. The loader frees what a thread used (its TLS blocks, a namespace pinned by
//! its `thread_local` destructors) only once the kernel reports the thread gone, which
//! is after everything glibc runs at thread exit (`thread_local` destructors, pthread
//! key destructors, `__libc_thread_freeres`).

/// The calling thread's kernel id (`gettid`).
pub(crate) fn current() -> libc::pid_t {
    // SAFETY: plain system call without arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::pid_t }
}

/// Whether the kernel thread `tid` of this process still exists: `tgkill(pid, tid, 0)`
/// (no signal is sent) fails with `ESRCH` only once the thread has exited; any other
/// answer counts as alive, so nothing is freed on a doubt. A thread id reused by a
/// newer thread only delays the answer.
pub(crate) fn alive(tid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the thread exists.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}
