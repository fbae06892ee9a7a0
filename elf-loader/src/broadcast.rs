//! A copy into every other thread's static TLS, for a library with initialised
//! initial-exec TLS loaded while threads run. glibc's `dlopen` does this through its own
//! thread list (`_dl_init_static_tls` writes into each thread's block); that list is
//! private, and only a thread knows its own thread pointer, so here each thread of
//! `/proc/self/task` is sent a signal whose handler copies the image into its own
//! static TLS and says so. The loader's TLS init image is written before (`tls/static_tls.rs`), so
//! a thread started meanwhile has the image already; `/proc/self/task` is read again
//! until no thread is new, so one that started from the old init image is reached too.
//!
//! The signal is the highest real-time signal whose disposition is the default (none of
//! the process's handlers is replaced), installed for the broadcast only. A thread that
//! blocks it does not answer: after [`TIMEOUT`] the broadcast fails naming the threads,
//! and the load with it; the signal is then ignored for a moment, which discards what is
//! still pending, before the default disposition comes back. A thread that exits without
//! answering (exiting threads block signals) needs no copy.

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the threads have to answer.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(1);

/// One broadcast at a time.
static SERIAL: Mutex<()> = Mutex::new(());
/// The copy asked for: the block's offset from the thread pointer, the image, its size,
/// the block's size. `SRC` is 0 outside a broadcast (the handler then does nothing).
static TPOFF: AtomicU64 = AtomicU64::new(0);
static SRC: AtomicUsize = AtomicUsize::new(0);
static FILESZ: AtomicUsize = AtomicUsize::new(0);
static MEMSZ: AtomicUsize = AtomicUsize::new(0);
/// The threads (kernel ids) that made the copy, in answer order.
const MAX_ANSWERS: usize = 4096;
static ANSWERS: [AtomicU32; MAX_ANSWERS] = [const { AtomicU32::new(0) }; MAX_ANSWERS];
static NANSWERS: AtomicUsize = AtomicUsize::new(0);
/// Handlers between their look at `SRC` and the end of their copy: the broadcast waits
/// for none to be left before the image may go (a late handler then sees `SRC` 0).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's id (async-signal-safe: one system call).
fn gettid() -> u32 {
    crate::kthread::current() as u32
}

/// The signal handler: copies the image into the calling thread's block, then records
/// its id. Async-signal-safe: atomics, a copy and a system call.
extern "C" fn on_signal(_sig: libc::c_int) {
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let src = SRC.load(Ordering::SeqCst);
    if src == 0 {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    let (off, filesz, memsz) = (
        TPOFF.load(Ordering::Relaxed),
        FILESZ.load(Ordering::Relaxed),
        MEMSZ.load(Ordering::Relaxed),
    );
    let tp: usize;
    // SAFETY: on x86_64 Linux %fs:0 holds the thread's TCB self pointer.
    unsafe {
        std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    let dst = tp.wrapping_add(off as usize) as *mut u8;
    // SAFETY: the block is this thread's part of the loader's static pool (the same
    // offset in every thread), `memsz` bytes; the image has `filesz` readable bytes in
    // the library being loaded, mapped until the broadcast ends.
    unsafe {
        std::ptr::copy_nonoverlapping(src as *const u8, dst, filesz);
        std::ptr::write_bytes(dst.add(filesz), 0, memsz - filesz);
    }
    let i = NANSWERS.fetch_add(1, Ordering::AcqRel);
    if i < MAX_ANSWERS {
        ANSWERS[i].store(gettid(), Ordering::Release);
    }
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
}

/// The kernel ids of the process's threads but the calling one.
fn other_threads(me: u32) -> Result<BTreeSet<u32>, String> {
    let dir = std::fs::read_dir("/proc/self/task")
        .map_err(|e| format!("/proc/self/task (to reach the other threads): {e}"))?;
    Ok(dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&t| t != me)
        .collect())
}

/// Installs the handler on the highest real-time signal whose disposition is the
/// default and that can be installed (a tool like valgrind may keep one for itself);
/// returns it with its previous disposition.
fn install_on_free_signal() -> Result<(libc::c_int, libc::sigaction), String> {
    for sig in (libc::SIGRTMIN()..=libc::SIGRTMAX()).rev() {
        // SAFETY: a zeroed sigaction is a valid out-parameter.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reads the disposition only.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0
            && old.sa_sigaction == libc::SIG_DFL
            && set_action(sig, on_signal as *const () as libc::sighandler_t)
        {
            return Ok((sig, old));
        }
    }
    Err("every real-time signal has a handler (none is free to reach the other threads)".into())
}

/// Sets `sig`'s disposition; false if the system refused.
fn set_action(sig: libc::c_int, handler: libc::sighandler_t) -> bool {
    // SAFETY: a zeroed sigaction with an empty mask is valid; `handler` is SIG_IGN,
    // SIG_DFL or `on_signal`.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut()) == 0
    }
}

/// Makes every other thread copy `filesz` bytes from `src`, then zeros up to `memsz`,
/// into its block at `tpoff` from its thread pointer; returns how many threads did.
pub(crate) fn copy_into_other_threads(
    tpoff: u64,
    src: usize,
    filesz: usize,
    memsz: usize,
) -> Result<usize, String> {
    let _serial = SERIAL.lock();
    let me = gettid();
    if other_threads(me)?.is_empty() {
        return Ok(0);
    }
    NANSWERS.store(0, Ordering::Relaxed);
    TPOFF.store(tpoff, Ordering::Relaxed);
    FILESZ.store(filesz, Ordering::Relaxed);
    MEMSZ.store(memsz, Ordering::Relaxed);
    SRC.store(src, Ordering::SeqCst);
    let (sig, old) = match install_on_free_signal() {
        Ok(found) => found,
        Err(e) => {
            SRC.store(0, Ordering::SeqCst);
            return Err(e);
        }
    };
    let result = reach_all(me, sig);
    SRC.store(0, Ordering::SeqCst);
    while IN_FLIGHT.load(Ordering::SeqCst) != 0 {
        std::hint::spin_loop();
    }
    if result.is_err() {
        // Discards what is still pending in threads that block it.
        let _ = set_action(sig, libc::SIG_IGN);
    }
    // SAFETY: restores the disposition read by free_signal (the default).
    unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
    result
}

fn reach_all(me: u32, sig: libc::c_int) -> Result<usize, String> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let deadline = Instant::now() + TIMEOUT;
    let mut signalled = BTreeSet::new();
    loop {
        let new: Vec<u32> = other_threads(me)?
            .into_iter()
            .filter(|t| !signalled.contains(t))
            .collect();
        if new.is_empty() {
            return Ok(signalled.len());
        }
        for tid in new {
            // SAFETY: tgkill sends a signal whose handler is installed; a thread that
            // exited meanwhile gives ESRCH.
            let rc = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, sig) };
            if rc == 0 {
                signalled.insert(tid);
            } else {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::ESRCH) {
                    return Err(format!("tgkill of thread {tid}: {e}"));
                }
            }
        }
        // Wait until each signalled thread answered or is gone.
        loop {
            let n = NANSWERS.load(Ordering::Acquire).min(MAX_ANSWERS);
            let answered: BTreeSet<u32> = ANSWERS[..n]
                .iter()
                .map(|a| a.load(Ordering::Acquire))
                .collect();
            let waiting: Vec<u32> = signalled
                .iter()
                .copied()
                .filter(|t| !answered.contains(t))
                .filter(|t| std::path::Path::new(&format!("/proc/self/task/{t}")).exists())
                .collect();
            if waiting.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} of the process's other threads (ids {waiting:?}) did not take signal {sig} within {TIMEOUT:?} (do they block it?); their copies of the static pool lack the init image",
                    waiting.len()
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}
