//! A call-counting profiler written as an eval-frame hook: calls, total and own time per
//! code object, from every thread.
//!
//! Per-code statistics live in a [`CodeExtra`], so finding them on a call is a direct
//! read of `co_extra`; the function's name, file and line are read once, at its first
//! call. A call is what CPython's own profilers count as one: a frame evaluation, except
//! the evaluation that only creates a generator or coroutine; so a generator counts every
//! resumption, including those that throw into it or close it, as `cProfile` does. Time comes from the monotonic
//! clock around the evaluation; own time subtracts the time of the calls it made; total
//! time of a recursive function counts its outermost activation only (as `cProfile`).
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
    total_ns: AtomicU64,
    own_ns: AtomicU64,
}

impl FuncStats {
    /// Frame evaluations of this code object.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
    /// Time inside it, outermost activations only, in nanoseconds.
    pub fn total_ns(&self) -> u64 {
        self.total_ns.load(Ordering::Relaxed)
    }
    /// Time inside it minus its callees', in nanoseconds.
    pub fn own_ns(&self) -> u64 {
        self.own_ns.load(Ordering::Relaxed)
    }
}

fn bump(a: &AtomicU64, by: u64) {
    // Not an atomic read-modify-write: writers hold the GIL (see the module docs).
    a.store(
        a.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

struct Active {
    code: usize,
    children_ns: u64,
}

thread_local! {
    static STACK: RefCell<Vec<Active>> = const { RefCell::new(Vec::new()) };
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The profiler hook.
pub struct Profiler {
    stats: CodeExtra<Arc<FuncStats>>,
    all: Mutex<Vec<Arc<FuncStats>>>,
    timing: bool,
}

impl Profiler {
    /// A profiler for `python` (takes one code-extra index of that copy). With `timing`
    /// false it only counts calls.
    pub fn new(python: &Python, timing: bool) -> Result<Profiler, Error> {
        Ok(Profiler {
            stats: CodeExtra::request(python)?,
            all: Mutex::new(Vec::new()),
            timing,
        })
    }

    /// Every function seen so far, in first-call order.
    pub fn stats(&self) -> Vec<Arc<FuncStats>> {
        self.all.lock().unwrap_or_else(|e| e.into_inner()).clone()
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
                total_ns: AtomicU64::new(0),
                own_ns: AtomicU64::new(0),
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
    fn eval_frame(&self, frame: &mut Frame<'_>) -> EvalResult {
        let code = frame.code();
        let st = match self.stats.get(code) {
            Some(s) => s,
            None => self.first_sight(code),
        };
        // Calling a generator function runs a frame that only builds the generator;
        // profilers count the generator's resumptions, not that creation.
        if st.generator_like && frame.owner() == FrameOwner::Thread {
            return frame.eval();
        }
        bump(&st.calls, 1);
        if !self.timing {
            return frame.eval();
        }
        let key = code.as_ptr() as usize;
        STACK.with(|s| {
            s.borrow_mut().push(Active {
                code: key,
                children_ns: 0,
            })
        });
        let t0 = now_ns();
        let r = frame.eval();
        let dt = now_ns().saturating_sub(t0);
        let (children, recursive) = STACK.with(|s| {
            let mut s = s.borrow_mut();
            let me = s.pop().expect("profiler stack");
            let recursive = s.iter().any(|a| a.code == key);
            if let Some(parent) = s.last_mut() {
                parent.children_ns += dt;
            }
            (me.children_ns, recursive)
        });
        if !recursive {
            bump(&st.total_ns, dt);
        }
        bump(&st.own_ns, dt.saturating_sub(children));
        r
    }

    const WANTS_THROWS: bool = true;
}
