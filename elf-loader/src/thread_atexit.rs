//! What keeps a dropped namespace mapped: C++ `thread_local` destructors registered by
//! its code, and threads its code started.
//!
//! A C++ `thread_local` object with a destructor is registered, when first constructed
//! in a thread, through `__cxa_thread_atexit(dtor, obj, &__dso_handle)` (libstdc++),
//! which glibc's `__cxa_thread_atexit_impl` implements: the destructor runs when the
//! thread exits, and glibc pins the object's library meanwhile (`l_tls_dtor_count`): a
//! `dlclose` leaves it loaded, and only a later `dlclose` unloads it, once the count
//! is zero.
//!
//! Custom libraries are not glibc's, so custom code's references to both names bind to
//! the loader's entry (`dlfcn.rs`), which calls [`register`]: it registers a trampoline with glibc instead (the same
//! per-thread list, so the order of destructors is unchanged) and pins the custom image
//! and its namespace's [`Pins`].
//!
//! Threads: custom code's `pthread_create` is the loader's too (`dlfcn.rs`); a thread
//! whose start routine is a namespace's code is recorded in that namespace's [`Pins`]
//! (its kernel id, once it runs). Such threads outlive their namespace when nobody
//! stops them: jemalloc's background thread (bundled by pyarrow) runs until the
//! process exits, and unmapping its code under it crashed the process when a
//! `multipy` interpreter was dropped. glibc's `dlclose` would unmap it all the same (a
//! `dlopen`ed library is expected to stop its threads in its fini functions); the end of
//! a namespace, which glibc has no counterpart of, waits for them instead.
//!
//! A namespace dropped while destructors are pending or its threads run becomes a
//! *zombie*: still mapped, its fini not run. It is unloaded by the next load or unload
//! of the loader (any namespace, under the load lock, never from a dying thread) once
//! every pending destructor has run and the threads that ran them, and the threads its
//! code started, have exited (a thread may still run the library's code after the
//! destructor: pthread key destructors come later in a thread's exit). A thread that
//! never ends keeps its namespace mapped until the process exits (logged).

use crate::image::Image;
use parking_lot::Mutex;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Unload work of a dropped namespace, waiting for pending destructors.
type Deferred = Box<dyn FnOnce() + Send>;

/// A namespace's pending `thread_local` destructors and, once the namespace is
/// dropped with some pending, its unload.
#[derive(Default)]
pub(crate) struct Pins {
    state: Mutex<PinState>,
}

#[derive(Default)]
struct PinState {
    pending: usize,
    /// The unload of a dropped namespace (a zombie) waiting for `pending` to reach 0
    /// and its threads to end.
    zombie: Option<Deferred>,
    /// Threads that ran a destructor of the zombie (kernel thread ids).
    threads: Vec<libc::pid_t>,
    /// Threads the namespace's code started that may still run (kernel thread ids),
    /// and how many were created but have not reported their id yet.
    own_threads: Vec<libc::pid_t>,
    starting: usize,
}

impl PinState {
    /// Nothing keeps the namespace mapped any more.
    fn unpinned(&self) -> bool {
        self.pending == 0
            && self.starting == 0
            && self.threads.iter().all(|&t| !crate::kthread::alive(t))
            && self.own_threads.iter().all(|&t| !crate::kthread::alive(t))
    }
}

/// Dropped namespaces kept loaded for pending destructors.
static ZOMBIES: Mutex<Vec<Arc<Pins>>> = Mutex::new(Vec::new());
static ANY_ZOMBIE: AtomicBool = AtomicBool::new(false);

impl Pins {
    /// Runs `unload` now if no destructor is pending; otherwise keeps the namespace
    /// loaded as a zombie that [`reap`] unloads once that is safe.
    pub(crate) fn unload_when_unpinned(self: &Arc<Self>, unload: Deferred) {
        let mut st = self.state.lock();
        if st.unpinned() {
            drop(st);
            unload();
            return;
        }
        let live = st
            .own_threads
            .iter()
            .filter(|&&t| crate::kthread::alive(t))
            .count()
            + st.starting;
        tracing::info!(
            pending_destructors = st.pending,
            running_threads = live,
            "namespace kept loaded until its thread_local destructors have run and the threads its code started have ended"
        );
        st.zombie = Some(unload);
        drop(st);
        ZOMBIES.lock().push(self.clone());
        ANY_ZOMBIE.store(true, Ordering::Release);
    }
}

/// Unloads the zombies whose destructors have all run, in threads that have exited.
/// Called by the loader's load and unload paths (under the load lock).
pub(crate) fn reap() {
    if !ANY_ZOMBIE.load(Ordering::Acquire) {
        return;
    }
    let ready: Vec<Deferred> = {
        let mut zombies = ZOMBIES.lock();
        let mut ready = Vec::new();
        zombies.retain(|p| {
            let mut st = p.state.lock();
            let done = st.unpinned();
            if done {
                ready.extend(st.zombie.take());
            }
            !done
        });
        ANY_ZOMBIE.store(!zombies.is_empty(), Ordering::Release);
        ready
    };
    for unload in ready {
        unload();
    }
}

impl Pins {
    /// A thread whose start routine is the namespace's code is being created.
    pub(crate) fn thread_starting(&self) {
        self.state.lock().starting += 1;
    }

    /// That thread runs: its kernel id (or, with `None`, it was not created).
    pub(crate) fn thread_started(&self, tid: Option<libc::pid_t>) {
        let mut st = self.state.lock();
        st.starting -= 1;
        if let Some(tid) = tid {
            if st.own_threads.len() >= 64 {
                st.own_threads.retain(|&t| crate::kthread::alive(t));
            }
            st.own_threads.push(tid);
        }
    }
}

/// One registered destructor.
struct Pending {
    dtor: unsafe extern "C" fn(*mut c_void),
    obj: *mut c_void,
    /// Keeps the image mapped until the destructor has run.
    image: Arc<Image>,
    pins: Arc<Pins>,
}

type CxaThreadAtexitImpl =
    unsafe extern "C" fn(unsafe extern "C" fn(*mut c_void), *mut c_void, *mut c_void) -> c_int;

fn system_impl() -> Option<CxaThreadAtexitImpl> {
    static IMPL: OnceLock<usize> = OnceLock::new();
    let a =
        *IMPL.get_or_init(|| crate::phdr::global_symbol(c"__cxa_thread_atexit_impl").unwrap_or(0));
    // SAFETY: glibc's __cxa_thread_atexit_impl has this signature (GLIBC_2.18).
    (a != 0).then(|| unsafe { std::mem::transmute::<usize, CxaThreadAtexitImpl>(a) })
}

/// Something of ours for glibc to pin: this loader's own code stays loaded while custom
/// code's destructors are pending.
static ANCHOR: u8 = 0;

/// Registers `dtor(obj)` to run at the calling thread's exit (`__cxa_thread_atexit`):
/// for custom-loaded code (`owner`: the image containing `dso` and its namespace's
/// [`Pins`]) through a trampoline that pins both until it has run; otherwise the
/// system's registration as it is.
///
/// # Safety
/// The contract of `__cxa_thread_atexit`: `dtor(obj)` must be callable at thread exit.
pub(crate) unsafe fn register(
    dtor: unsafe extern "C" fn(*mut c_void),
    obj: *mut c_void,
    dso: *mut c_void,
    owner: Option<(Arc<Image>, Arc<Pins>)>,
) -> c_int {
    let Some(sys) = system_impl() else {
        return -1;
    };
    let Some((image, pins)) = owner else {
        // Not custom-loaded code's handle: the system's registration as it is.
        // SAFETY: forwarding the caller's arguments.
        return unsafe { sys(dtor, obj, dso) };
    };
    image.tls_dtors.fetch_add(1, Ordering::AcqRel);
    pins.state.lock().pending += 1;
    let rec = Box::into_raw(Box::new(Pending {
        dtor,
        obj,
        image,
        pins,
    }));
    // SAFETY: `trampoline` takes back the box; ANCHOR lies in this loader's image.
    let rc = unsafe {
        sys(
            trampoline,
            rec as *mut c_void,
            &ANCHOR as *const u8 as *mut c_void,
        )
    };
    if rc != 0 {
        // SAFETY: not registered: we still own the box.
        let rec = unsafe { Box::from_raw(rec) };
        unpin(*rec);
    }
    rc
}

unsafe extern "C" fn trampoline(p: *mut c_void) {
    crate::boundary::or_abort("thread-exit destructor", || {
        // SAFETY: `p` is the box registered by `thread_atexit`, passed back exactly once.
        let rec = unsafe { Box::from_raw(p as *mut Pending) };
        // SAFETY: the destructor registered by the custom code, whose image is pinned.
        unsafe { (rec.dtor)(rec.obj) };
        unpin(*rec);
    })
}

fn unpin(rec: Pending) {
    rec.image.tls_dtors.fetch_sub(1, Ordering::AcqRel);
    {
        let mut st = rec.pins.state.lock();
        st.pending -= 1;
        if st.zombie.is_some() {
            let tid = crate::kthread::current();
            if !st.threads.contains(&tid) {
                st.threads.push(tid);
            }
        }
    }
    drop(rec);
}
