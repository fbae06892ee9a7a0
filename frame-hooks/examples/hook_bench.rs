//! The measuring side of `cargo xtask bench frame-hooks` (prints one flat JSON object).
//!
//! Workloads: `fib(25)` and a generator-heavy pipeline, each timed inside Python
//! (`perf_counter_ns`) under seven evaluators, interleaved round by round in a rotating
//! order: the default evaluator, a Rust pass-through hook (`Frame::pass_through`), a Rust
//! hook evaluating the frame inside itself (`Frame::eval`), a C pass-through hook (the
//! fixture `benches/c/passthrough.c`, compiled by xtask), the Rust profiler, `cProfile`,
//! and `sys.setprofile` with a no-op function. Overheads are taken against the default in
//! the same round; ratios are medians of per-round ratios. Then code-extra lookups:
//! the typed `CodeExtra::get`, the same through `_PyCode_GetExtra`, and a dict lookup
//! keyed by the code object, in ns per lookup.
//!
//! ```text
//! hook_bench --c-hook target/bench/libfh_passthrough.so [--python python3] [--rounds 21] [--smoke]
//! hook_bench --c-hook ... --callgrind MODE   # one fib(20) run for instruction counts
//! ```

use frame_hooks::cpython::profiler::Profiler;
use frame_hooks::cpython::{CodeExtra, CodeRef, EvalResult, Frame, FrameHook, Libpython, Python};
use std::collections::BTreeMap;
use std::ffi::{c_int, CString};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

/// The Rust pass-through hook: passes every frame on to the previous evaluator.
struct PassThrough;

impl FrameHook for PassThrough {
    #[inline]
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
        frame.pass_through()
    }
}

/// A hook that evaluates the frame inside itself (`Frame::eval`), as a hook with work to
/// do after the frame ran must: the full trampoline (guard set and lifted, result
/// returned through the hook).
struct EvalInside;

impl FrameHook for EvalInside {
    #[inline]
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
        frame.eval()
    }
}

const SETUP: &str = r#"
import sys, time, cProfile
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def numbers(n):
    for i in range(n):
        yield i
def pipeline(n):
    return sum(x * 2 for x in numbers(n) if x % 3)
def gens(rounds):
    t = 0
    for _ in range(rounds):
        t += pipeline(500)
    return t
def _noop(frame, event, arg):
    pass
"#;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    Default,
    Rust,
    RustEval,
    C,
    Profiler,
    CProfile,
    SetProfile,
}

const MODES: [Mode; 7] = [
    Mode::Default,
    Mode::Rust,
    Mode::RustEval,
    Mode::C,
    Mode::Profiler,
    Mode::CProfile,
    Mode::SetProfile,
];

impl Mode {
    fn key(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Rust => "rust",
            Mode::RustEval => "rust_eval",
            Mode::C => "c",
            Mode::Profiler => "profiler",
            Mode::CProfile => "cprofile",
            Mode::SetProfile => "setprofile",
        }
    }
}

struct Bench {
    py: Python,
    c_install: unsafe extern "C" fn() -> c_int,
    c_uninstall: unsafe extern "C" fn() -> c_int,
    profiler: Arc<Profiler>,
}

impl Bench {
    /// Runs `call` (a Python expression) under `mode`; returns the time in ns.
    fn time(&self, mode: Mode, call: &str) -> f64 {
        let (pre, post) = match mode {
            Mode::CProfile => ("_p = cProfile.Profile(); _p.enable()", "_p.disable()"),
            Mode::SetProfile => ("sys.setprofile(_noop)", "sys.setprofile(None)"),
            _ => ("pass", "pass"),
        };
        let code = format!(
            "_t0 = time.perf_counter_ns()\n{pre}\n{call}\n{post}\n_dt = time.perf_counter_ns() - _t0\n"
        );
        let mut rust = None;
        let mut rust_eval = None;
        let mut prof = None;
        match mode {
            Mode::Rust => rust = Some(self.py.install(Arc::new(PassThrough)).unwrap()),
            Mode::RustEval => rust_eval = Some(self.py.install(Arc::new(EvalInside)).unwrap()),
            // SAFETY: the fixture's install needs the GIL, which with_gil holds.
            Mode::C => assert_eq!(self.py.with_gil(|| unsafe { (self.c_install)() }), 0),
            Mode::Profiler => prof = Some(self.py.install(self.profiler.clone()).unwrap()),
            _ => {}
        }
        self.py.run(&code).unwrap();
        if let Some(mut h) = rust {
            h.uninstall().unwrap();
        }
        if let Some(mut h) = rust_eval {
            h.uninstall().unwrap();
        }
        if let Some(mut h) = prof {
            h.uninstall().unwrap();
        }
        if mode == Mode::C {
            // SAFETY: as above.
            assert_eq!(self.py.with_gil(|| unsafe { (self.c_uninstall)() }), 0);
        }
        assert!(self.py.eval_is_default());
        self.main_long("_dt") as f64
    }

    fn main_long(&self, name: &str) -> i64 {
        let api = self.py.api();
        let c = CString::new(name).unwrap();
        self.py.with_gil(|| {
            // SAFETY: GIL held; __main__ exists.
            unsafe {
                let m = (api.import_add_module)(c"__main__".as_ptr());
                api.attr_long(m, &c).expect("an int in __main__")
            }
        })
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn load(python: &str, c_hook: &str) -> Bench {
    // SAFETY: the path is the interpreter's own shared libpython (from its sysconfig).
    let lib = unsafe { Libpython::open(Libpython::find(python).unwrap()) }.unwrap();
    lib.initialize().unwrap();
    // SAFETY: dlsym on that library's handle finds that library's symbols.
    let py = unsafe { Python::new(&lib.resolver()) }.unwrap();
    std::mem::forget(lib);
    let path = CString::new(c_hook).unwrap();
    // SAFETY: loading the fixture library; its symbols have the declared signatures.
    let (c_install, c_uninstall) = unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "cannot load the C hook {c_hook}");
        let i = libc::dlsym(h, c"fh_c_install".as_ptr());
        let u = libc::dlsym(h, c"fh_c_uninstall".as_ptr());
        assert!(
            !i.is_null() && !u.is_null(),
            "{c_hook} lacks fh_c_install/uninstall"
        );
        (
            std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn() -> c_int>(i),
            std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn() -> c_int>(u),
        )
    };
    py.run(SETUP).unwrap();
    let profiler = Arc::new(Profiler::new(&py, true).unwrap());
    Bench {
        py,
        c_install,
        c_uninstall,
        profiler,
    }
}

/// The region callgrind counts (`--toggle-collect=fh_bench_region`).
#[no_mangle]
#[inline(never)]
fn fh_bench_region(bench: &Bench, mode: Mode) -> f64 {
    bench.time(mode, "fib(20)")
}

fn extra_lookups(b: &Bench, out: &mut BTreeMap<String, f64>, n: usize) {
    let py = &b.py;
    let api = py.api();
    let extra = CodeExtra::<u64>::request(py).unwrap();
    let code_ptr = py.with_gil(|| {
        // SAFETY: GIL held; fib exists in __main__.
        unsafe {
            let m = (api.import_add_module)(c"__main__".as_ptr());
            let f = (api.getattr)(m, c"fib".as_ptr());
            let c = (api.getattr)(f, c"__code__".as_ptr());
            (api.decref)(f);
            c
        }
    });
    py.with_gil(|| {
        // SAFETY: fib's code object is alive (held by the reference above); GIL held.
        let code = unsafe { CodeRef::from_ptr(py, code_ptr) };
        // SAFETY: nothing references a value of this index yet.
        unsafe { extra.set(code, 42) };
        // SAFETY: GIL held; a dict keyed by the code object, as a hook without co_extra
        // would keep its per-code data.
        let dict = unsafe {
            let d = (api.dict_new)();
            let v = (api.long_from_long)(42);
            (api.dict_set_item)(d, code_ptr, v);
            (api.decref)(v);
            d
        };
        let time = |f: &dyn Fn() -> usize| -> f64 {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                let mut acc = 0usize;
                for _ in 0..n {
                    acc = acc.wrapping_add(f());
                }
                black_box(acc);
                best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
            }
            best
        };
        let code_b = || black_box(code);
        out.insert(
            "extra_get_ns".into(),
            time(&|| *extra.get(code_b()).unwrap() as usize),
        );
        out.insert(
            "extra_get_api_ns".into(),
            time(&|| *extra.get_via_api(code_b()).unwrap() as usize),
        );
        out.insert(
            "dict_lookup_by_code_ns".into(),
            time(&|| {
                // SAFETY: GIL held; borrowed result.
                unsafe { (api.dict_get_item)(black_box(dict), black_box(code_ptr)) as usize }
            }),
        );
        // SAFETY: GIL held.
        unsafe {
            (api.decref)(dict);
            (api.decref)(code_ptr);
        }
    });
}

fn main() {
    let mut python = "python3".to_string();
    let mut c_hook = String::new();
    let mut rounds = 21usize;
    let mut smoke = false;
    let mut callgrind: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--python" => python = args.next().expect("--python value"),
            "--c-hook" => c_hook = args.next().expect("--c-hook value"),
            "--rounds" => rounds = args.next().expect("--rounds value").parse().unwrap(),
            "--smoke" => smoke = true,
            "--callgrind" => callgrind = Some(args.next().expect("--callgrind mode")),
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(!c_hook.is_empty(), "--c-hook PATH is required");
    let bench = load(&python, &c_hook);
    if let Some(mode) = callgrind {
        let mode = *MODES.iter().find(|m| m.key() == mode).expect("a mode name");
        // Warm up outside the counted region (code objects specialised, caches filled).
        bench.time(mode, "fib(20)");
        black_box(fh_bench_region(&bench, mode));
        return;
    }
    let (fib_call, gen_call, rounds) = if smoke {
        ("fib(15)", "gens(5)", 2)
    } else {
        ("fib(25)", "gens(200)", rounds)
    };
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for (name, call) in [("fib", fib_call), ("gen", gen_call)] {
        // Warm-up: one run of each mode.
        for m in MODES {
            bench.time(m, call);
        }
        let mut times: BTreeMap<Mode, Vec<f64>> = BTreeMap::new();
        let mut rust_over_c = Vec::new();
        let mut rust_eval_over_c = Vec::new();
        let mut prof_over_cprof = Vec::new();
        for r in 0..rounds {
            let mut t = BTreeMap::new();
            for i in 0..MODES.len() {
                let m = MODES[(i + r) % MODES.len()];
                t.insert(m, bench.time(m, call));
            }
            let d = t[&Mode::Default];
            rust_over_c.push((t[&Mode::Rust] - d) / (t[&Mode::C] - d));
            rust_eval_over_c.push((t[&Mode::RustEval] - d) / (t[&Mode::C] - d));
            prof_over_cprof.push((t[&Mode::Profiler] - d) / (t[&Mode::CProfile] - d));
            for (m, v) in t {
                times.entry(m).or_default().push(v);
            }
        }
        let med: BTreeMap<Mode, f64> = times.iter_mut().map(|(m, v)| (*m, median(v))).collect();
        let d = med[&Mode::Default];
        for (m, v) in &med {
            out.insert(format!("{name}_{}_ms", m.key()), v / 1e6);
            if *m != Mode::Default {
                out.insert(format!("{name}_{}_overhead_ms", m.key()), (v - d) / 1e6);
                out.insert(format!("{name}_{}_vs_default", m.key()), v / d);
            }
        }
        let spread = |m: Mode| {
            let v = &times[&m];
            let lo = v.iter().cloned().fold(f64::MAX, f64::min);
            let hi = v.iter().cloned().fold(0.0, f64::max);
            (hi - lo) / med[&m]
        };
        out.insert(format!("{name}_default_spread"), spread(Mode::Default));
        out.insert(format!("{name}_c_spread"), spread(Mode::C));
        out.insert(format!("{name}_rust_spread"), spread(Mode::Rust));
        out.insert(format!("{name}_rust_eval_spread"), spread(Mode::RustEval));
        out.insert(
            format!("{name}_rust_over_c_overhead_round_median"),
            median(&mut rust_over_c),
        );
        out.insert(
            format!("{name}_rust_eval_over_c_overhead_round_median"),
            median(&mut rust_eval_over_c),
        );
        out.insert(
            format!("{name}_profiler_over_cprofile_overhead_round_median"),
            median(&mut prof_over_cprof),
        );
    }
    extra_lookups(&bench, &mut out, if smoke { 10_000 } else { 2_000_000 });
    out.insert("rounds".into(), rounds as f64);
    println!("{}", serde_json::to_string(&out).unwrap());
}
