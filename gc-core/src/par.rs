//! Parallel marking: the collector threads of a heap and the termination protocol of a
//! parallel mark.
//!
//! A heap with `mark_threads > 1` keeps `mark_threads - 1` helper threads, started on
//! its first collection and parked between jobs. A *job* is one parallel drain of the
//! mark stacks: the collecting thread publishes it, helpers that wake in time join it,
//! and every participant marks with its own [`crate::Marker`] (its own mark stack, its
//! own deque for others to steal from). A helper that wakes after the job ended does
//! nothing.
//!
//! # Termination
//! [`Termination`] counts the participants that may still produce work (`active`).
//! A participant goes idle only when its own mark stack and its own deque are empty;
//! only a deque's owner pushes to it, so an idle participant's deque stays empty.
//! An idle participant that sees work in another's deque becomes active again
//! ([`Termination::try_wake`]) before stealing. When `active` reaches 0, no stack and no
//! deque holds work and nobody can make more: the first idle participant to see it
//! closes the job ([`Termination::try_close`]); from then on nobody can join or wake.
//! `loom_tests` model-checks this protocol with the real code.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};

/// Set in `Termination::active` once the job is over.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// The termination state of one parallel job.
pub(crate) struct Termination {
    /// Participants not idle, | `CLOSED` once the job ended.
    active: AtomicUsize,
    /// Participants idle (a hint for the busy ones to share work).
    idle: AtomicUsize,
}

impl Termination {
    /// A job with `initial` participants already active (the collecting thread).
    pub(crate) fn new(initial: usize) -> Self {
        Termination {
            active: AtomicUsize::new(initial),
            idle: AtomicUsize::new(0),
        }
    }

    /// A new participant joins; false if the job already ended.
    pub(crate) fn join(&self) -> bool {
        self.try_wake_inner()
    }

    /// Whether some participant is idle (and would take shared work).
    #[inline]
    pub(crate) fn someone_idle(&self) -> bool {
        self.idle.load(Ordering::Relaxed) != 0
    }

    /// The caller has no work left (its stack and its deque are empty).
    pub(crate) fn go_idle(&self) {
        self.idle.fetch_add(1, Ordering::SeqCst);
        let prev = self.active.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(prev & !CLOSED != 0 && prev & CLOSED == 0);
    }

    /// An idle participant that saw work becomes active again; false if the job ended.
    pub(crate) fn try_wake(&self) -> bool {
        let ok = self.try_wake_inner();
        if ok {
            self.idle.fetch_sub(1, Ordering::SeqCst);
        }
        ok
    }

    fn try_wake_inner(&self) -> bool {
        let mut cur = self.active.load(Ordering::SeqCst);
        loop {
            if cur & CLOSED != 0 {
                return false;
            }
            match self.active.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// An idle participant checks whether the job is over (nobody active): closes it if
    /// so. True when the job is over (closed by this call or before).
    pub(crate) fn try_close(&self) -> bool {
        match self
            .active
            .compare_exchange(0, CLOSED, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => true,
            Err(now) => now & CLOSED != 0,
        }
    }

    /// Whether the job is over.
    #[cfg_attr(not(loom), allow(dead_code))]
    pub(crate) fn is_closed(&self) -> bool {
        self.active.load(Ordering::SeqCst) & CLOSED != 0
    }
}

/// What a participant does once its own work is gone: `has_work` tells whether any other
/// participant's deque holds work. Returns true to go back to work (work was seen and
/// the participant is active again), false when the job is over.
pub(crate) fn idle_loop(t: &Termination, mut has_work: impl FnMut() -> bool) -> bool {
    t.go_idle();
    let mut spins = 0u32;
    loop {
        if t.try_close() {
            return false;
        }
        if has_work() {
            if t.try_wake() {
                return true;
            }
            return false;
        }
        spins += 1;
        backoff(spins);
    }
}

#[cfg(not(loom))]
fn backoff(spins: u32) {
    if spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

#[cfg(loom)]
fn backoff(_spins: u32) {
    loom::thread::yield_now();
}

// The pool is plain threads and parking_lot in every build (the loom build compiles it
// too, but only the termination protocol is model-checked).
pub(crate) use pool::MarkPool;

mod pool {
    use parking_lot::{Condvar, Mutex};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::thread::JoinHandle;

    /// The work of one job for helper `index` (1-based; the collecting thread is 0).
    pub(crate) type JobFn<'a> = &'a (dyn Fn(usize) + Sync);

    /// Background work for one helper; it should return soon once the flag is set.
    pub(crate) type BackgroundFn = Box<dyn FnOnce(&AtomicBool) + Send>;

    struct State {
        /// Background work not yet taken by a helper.
        background: Option<BackgroundFn>,
        /// The current job (a `JobFn` with its lifetime erased), while it is published.
        job: Option<&'static (dyn Fn(usize) + Sync)>,
        epoch: u64,
        /// Helpers inside the current job's function.
        running: usize,
        shutdown: bool,
    }

    struct Shared {
        /// Set when the pool shuts down: background work stops.
        stop: AtomicBool,
        state: Mutex<State>,
        wake: Condvar,
        done: Condvar,
    }

    /// A heap's helper threads for parallel marking (and lazy sweeping).
    pub(crate) struct MarkPool {
        shared: Arc<Shared>,
        threads: Vec<JoinHandle<()>>,
    }

    impl MarkPool {
        /// Starts `helpers` threads, parked until a job comes.
        pub(crate) fn new(helpers: usize) -> std::io::Result<MarkPool> {
            let shared = Arc::new(Shared {
                stop: AtomicBool::new(false),
                state: Mutex::new(State {
                    background: None,
                    job: None,
                    epoch: 0,
                    running: 0,
                    shutdown: false,
                }),
                wake: Condvar::new(),
                done: Condvar::new(),
            });
            let mut threads = Vec::with_capacity(helpers);
            for i in 0..helpers {
                let sh = shared.clone();
                let t = std::thread::Builder::new()
                    .name(format!("gc-mark-{}", i + 1))
                    .spawn(move || helper_main(&sh, i + 1))?;
                threads.push(t);
            }
            Ok(MarkPool { shared, threads })
        }

        /// Number of helper threads.
        pub(crate) fn helpers(&self) -> usize {
            self.threads.len()
        }

        /// Hands `f` to one helper thread, to run after the calling thread went on (lazy
        /// sweeping); replaces background work not yet started.
        pub(crate) fn start_background(&self, f: BackgroundFn) {
            self.shared.state.lock().background = Some(f);
            self.shared.wake.notify_one();
        }

        /// Runs `f(0)` on the calling thread and `f(i)` on every helper `i` that wakes
        /// before `f(0)` returns and the job is withdrawn; returns once no helper runs
        /// `f` any more. `f` decides for itself whether there is anything left to do
        /// when it is called late (the termination protocol).
        pub(crate) fn run(&self, f: JobFn<'_>) {
            // SAFETY: the reference is withdrawn (and every helper has left it) before
            // this function returns, so it never outlives `f`.
            let erased: &'static (dyn Fn(usize) + Sync) = unsafe {
                std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f)
            };
            {
                let mut st = self.shared.state.lock();
                st.job = Some(erased);
                st.epoch += 1;
            }
            self.shared.wake.notify_all();
            f(0);
            let mut st = self.shared.state.lock();
            st.job = None;
            while st.running > 0 {
                self.shared.done.wait(&mut st);
            }
        }
    }

    fn helper_main(sh: &Shared, index: usize) {
        crate::tls::enter_helper_thread();
        if let Err(payload) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| helper_loop(sh, index)))
        {
            // A mark function panicked here: the collecting thread would wait for this
            // thread's share of the work forever.
            crate::tls::abort_after_panic("a collector helper thread", payload.as_ref());
        }
        crate::tls::exit_helper_thread();
    }

    fn helper_loop(sh: &Shared, index: usize) {
        let mut seen = 0u64;
        loop {
            let job = {
                let mut st = sh.state.lock();
                loop {
                    if st.shutdown {
                        return;
                    }
                    if let Some(bg) = st.background.take() {
                        st.running += 1;
                        drop(st);
                        bg(&sh.stop);
                        st = sh.state.lock();
                        st.running -= 1;
                        if st.running == 0 {
                            sh.done.notify_all();
                        }
                        continue;
                    }
                    if st.epoch != seen {
                        seen = st.epoch;
                        if let Some(job) = st.job {
                            st.running += 1;
                            break job;
                        }
                    }
                    sh.wake.wait(&mut st);
                }
            };
            job(index);
            let mut st = sh.state.lock();
            st.running -= 1;
            if st.running == 0 {
                sh.done.notify_all();
            }
        }
    }

    impl Drop for MarkPool {
        fn drop(&mut self) {
            self.shared
                .stop
                .store(true, std::sync::atomic::Ordering::SeqCst);
            self.shared.state.lock().shutdown = true;
            self.shared.wake.notify_all();
            for t in self.threads.drain(..) {
                let _ = t.join();
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The termination protocol with real threads under loom: every unit of work is
    //! processed exactly once and nobody leaves while work remains. Deques are modelled
    //! by mutex-protected vectors (only their owner pushes, anyone pops).
    use super::*;
    use loom::sync::{Arc, Mutex};

    struct Model {
        t: Termination,
        deques: Vec<Mutex<Vec<u32>>>,
        done: AtomicUsize,
    }

    /// Participant `me` works: each item `n > 0` it takes spawns item `n - 1` into its
    /// own deque (shared work), item 0 is a leaf.
    fn participant(m: &Model, me: usize) {
        loop {
            let item = m.deques[me].lock().unwrap().pop();
            if let Some(n) = item {
                m.done.fetch_add(1, Ordering::SeqCst);
                if n > 0 {
                    m.deques[me].lock().unwrap().push(n - 1);
                }
                continue;
            }
            // Steal one item from another participant (while still active).
            let mut stolen = None;
            for (i, d) in m.deques.iter().enumerate() {
                if i != me {
                    if let Some(x) = d.lock().unwrap().pop() {
                        stolen = Some(x);
                        break;
                    }
                }
            }
            if let Some(x) = stolen {
                m.deques[me].lock().unwrap().push(x);
                continue;
            }
            let others_have_work = || {
                m.deques
                    .iter()
                    .enumerate()
                    .any(|(i, d)| i != me && !d.lock().unwrap().is_empty())
            };
            if !idle_loop(&m.t, others_have_work) {
                return;
            }
        }
    }

    #[test]
    fn loom_every_item_is_processed_before_termination() {
        loom::model(|| {
            let m = Arc::new(Model {
                t: Termination::new(1),
                deques: vec![Mutex::new(vec![2]), Mutex::new(Vec::new())],
                done: AtomicUsize::new(0),
            });
            let m2 = m.clone();
            let helper = loom::thread::spawn(move || {
                if m2.t.join() {
                    participant(&m2, 1);
                }
            });
            participant(&m, 0);
            assert!(m.t.is_closed());
            // The job is over for the collecting thread: everything was processed
            // (item 2 makes 1 makes 0: three units), whoever did it.
            assert_eq!(m.done.load(Ordering::SeqCst), 3);
            helper.join().unwrap();
            assert_eq!(m.done.load(Ordering::SeqCst), 3);
        });
    }

    #[test]
    fn loom_a_late_helper_does_nothing() {
        loom::model(|| {
            let t = Arc::new(Termination::new(1));
            let t2 = t.clone();
            let helper = loom::thread::spawn(move || {
                // A helper with no work of its own: joins if it can, then goes idle.
                t2.join() && idle_loop(&t2, || false)
            });
            assert!(!idle_loop(&t, || false));
            assert!(t.is_closed());
            // However late it came, the helper never went back to work.
            assert!(!helper.join().unwrap());
        });
    }
}
