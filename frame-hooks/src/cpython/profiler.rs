//! A call-counting profiler written as an eval-frame hook: calls, total and own time per
//! code object, from every thread.
//!
//! Per-code statistics live in a [`CodeExtra`], so finding them on a call is a direct
//! read of `co_extra`; the function's name, file and line are read once, at its first
//! call. A call is what CPython's own profilers count as one: a frame evaluation, except
//! the evaluation that only creates a generator or coroutine; so a generator counts every
//! resumption, including those that throw into it or close it, as `cProfile` does.
//! Time comes from the [`Clock`] around the evaluation; own time subtracts the time of the
//! calls it made; total time of a recursive function counts its outermost activation only
//! (as `cProfile`). The recursion count is per function, not per thread: while two
//! threads run the same function, the one that entered second is not counted in the total.
//!
//! The counters are updated with plain loads and stores: hooks run with the GIL held, so
//! updates of one function's counters never overlap.

use super::{
    CodeExtra, CodeRef, Error, EvalResult, Frame, FrameHook, FrameOwner, Python, CO_GENERATOR_LIKE,
};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One function's figures.
#[derive(Debug)]
pub struct FuncStats {
    /// `co_qualname`.
    pub function: String,
    /// `co_filename`.
    pub file: String,
    /// `co_firstlineno`.
    pub line: i64,
    /// Generator, coroutine or async generator code: its creation call is not a call.
    generator_like: bool,
    calls: AtomicU64,
    /// In clock ticks (see [`Clock`]).
    total: AtomicU64,
    own: AtomicU64,
    /// Activations running now (to count a recursive function's outermost one only).
    active: AtomicU64,
    ns_per_tick: f64,
}

impl FuncStats {
    /// Frame evaluations of this code object.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
    /// Time inside it, outermost activations only, in nanoseconds.
    pub fn total_ns(&self) -> u64 {
        (self.total.load(Ordering::Relaxed) as f64 * self.ns_per_tick) as u64
    }
    /// Time inside it minus its callees', in nanoseconds.
    pub fn own_ns(&self) -> u64 {
        (self.own.load(Ordering::Relaxed) as f64 * self.ns_per_tick) as u64
    }
}

fn bump(a: &AtomicU64, by: u64) {
    // Not an atomic read-modify-write: writers hold the GIL (see the module docs).
    a.store(
        a.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

thread_local! {
    /// Per activation on this thread: the ticks its callees took.
    static STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The profiler's clock: the time-stamp counter on x86_64 (a few ns to read, against
/// ~20 ns for `clock_gettime`), converted to ns with the rate measured against
/// `CLOCK_MONOTONIC` over the profile's own duration; `CLOCK_MONOTONIC` elsewhere.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start_ticks: u64,
    start_ns: u64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            start_ticks: ticks(),
            start_ns: monotonic_ns(),
        }
    }

    /// Nanoseconds per tick, measured from the clock's creation to now.
    pub fn ns_per_tick(&self) -> f64 {
        let (t, n) = (ticks(), monotonic_ns());
        if t <= self.start_ticks {
            return 1.0;
        }
        (n - self.start_ns) as f64 / (t - self.start_ticks) as f64
    }
}

#[inline(always)]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc is available on every x86_64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

/// The profiler hook.
pub struct Profiler {
    stats: CodeExtra<Arc<FuncStats>>,
    all: Mutex<Vec<Arc<FuncStats>>>,
    timing: bool,
    clock: Clock,
}

impl Profiler {
    /// A profiler for `python` (takes one code-extra index of that copy). With `timing`
    /// false it only counts calls.
    pub fn new(python: &Python, timing: bool) -> Result<Profiler, Error> {
        Ok(Profiler {
            stats: CodeExtra::request(python)?,
            all: Mutex::new(Vec::new()),
            timing,
            clock: Clock::new(),
        })
    }

    /// Every function seen so far, in first-call order (times converted with the clock
    /// rate measured up to now).
    pub fn stats(&self) -> Vec<Arc<FuncStats>> {
        let rate = self.clock.ns_per_tick();
        let all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        all.iter()
            .map(|s| {
                Arc::new(FuncStats {
                    function: s.function.clone(),
                    file: s.file.clone(),
                    line: s.line,
                    generator_like: s.generator_like,
                    calls: AtomicU64::new(s.calls()),
                    total: AtomicU64::new(s.total.load(Ordering::Relaxed)),
                    own: AtomicU64::new(s.own.load(Ordering::Relaxed)),
                    active: AtomicU64::new(0),
                    ns_per_tick: rate,
                })
            })
            .collect()
    }

    #[cold]
    fn first_sight<'c>(&self, code: CodeRef<'c>) -> &'c Arc<FuncStats> {
        self.stats.get_or_init(code, || {
            let s = Arc::new(FuncStats {
                function: code.qualname(),
                file: code.filename(),
                line: code.first_line(),
                generator_like: code.attr_long(c"co_flags").unwrap_or(0) & CO_GENERATOR_LIKE != 0,
                calls: AtomicU64::new(0),
                total: AtomicU64::new(0),
                own: AtomicU64::new(0),
                active: AtomicU64::new(0),
                ns_per_tick: 1.0,
            });
            self.all
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(s.clone());
            s
        })
    }
}

impl FrameHook for Profiler {
    #[inline]
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
        let code = frame.code();
        let st = match self.stats.get(code) {
            Some(s) => s,
            None => self.first_sight(code),
        };
        // Calling a generator function runs a frame that only builds the generator;
        // profilers count the generator's resumptions, not that creation.
        if st.generator_like && frame.owner() == FrameOwner::Thread {
            return frame.pass_through();
        }
        bump(&st.calls, 1);
        if !self.timing {
            return frame.pass_through();
        }
        let outermost = st.active.load(Ordering::Relaxed) == 0;
        bump(&st.active, 1);
        STACK.with(|s| s.borrow_mut().push(0));
        let t0 = ticks();
        let r = frame.eval();
        let dt = ticks().wrapping_sub(t0);
        let children = STACK.with(|s| {
            let mut s = s.borrow_mut();
            let children = s.pop().unwrap_or(0);
            if let Some(parent) = s.last_mut() {
                *parent += dt;
            }
            children
        });
        st.active
            .store(st.active.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        if outermost {
            bump(&st.total, dt);
        }
        bump(&st.own, dt.saturating_sub(children));
        r
    }

    const WANTS_THROWS: bool = true;
}
