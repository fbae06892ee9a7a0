//! The CPython backend on the machine's real CPython 3.11, 3.12 and 3.13 (each case in a
//! child process per version; an absent version is skipped with the reason printed).

use crate::pythons;

use frame_hooks::cpython::{
    layout, Api, CodeExtra, CodeRef, Error, EvalResult, Frame, FrameHook, Installed, Layout,
    Libpython, Python,
};
use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Counts calls per qualified name; optional behaviours per test.
#[derive(Default)]
struct Counter {
    calls: Mutex<HashMap<String, u64>>,
    throws: Mutex<Vec<String>>,
    /// Panic before evaluating frames of this function.
    panic_before: Option<&'static str>,
    /// Panic after evaluating frames of this function.
    panic_after: Option<&'static str>,
    /// Mark this function skipped on its first call.
    skip: Option<&'static str>,
    /// repr() the first argument of frames of this function (runs Python code).
    repr_arg_of: Option<&'static str>,
    reentrant_repr: bool,
    /// Uninstall the hook from inside a call of this function.
    uninstall_in: Option<&'static str>,
}

static UNINSTALL: Mutex<Option<Installed<Counter>>> = Mutex::new(None);

impl Counter {
    fn count(&self, name: &str) -> u64 {
        self.calls.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

impl FrameHook for Counter {
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
        let name = frame.code().qualname();
        if frame.throw_flag() {
            self.throws.lock().unwrap().push(name.clone());
        }
        *self.calls.lock().unwrap().entry(name.clone()).or_default() += 1;
        if self.panic_before == Some(name.as_str()) {
            panic!("refusing to run {name}");
        }
        if self.skip == Some(name.as_str()) {
            frame.skip_code();
        }
        if self.repr_arg_of == Some(name.as_str()) {
            let args = if self.reentrant_repr {
                frame.reentrant(|| frame.arguments())
            } else {
                frame.arguments()
            };
            assert_eq!(args[0].0, "x");
            assert!(frame.local(0).is_some());
            assert!(
                frame.local(10_000).is_none(),
                "slots past co_nlocals are refused"
            );
            let locals = frame.locals();
            assert_eq!(locals[0].0, "x");
            assert!(locals[0].1.as_deref().unwrap().starts_with("Loud("));
            assert_eq!(locals[1], ("unbound_yet".to_string(), None));
        }
        if self.uninstall_in == Some(name.as_str()) {
            let mut inst = UNINSTALL.lock().unwrap().take().expect("installed");
            inst.uninstall()
                .expect("uninstall from inside a hooked call");
        }
        let r = frame.eval();
        if self.panic_after == Some(name.as_str()) {
            panic!("after running {name}");
        }
        r
    }
}

/// The same counter, asking for frames resumed with the throw flag.
struct WantsThrows(Counter);

impl FrameHook for WantsThrows {
    const WANTS_THROWS: bool = true;
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
        self.0.eval_frame(frame)
    }
}

/// Passes frames on with `Frame::pass_through` (the trampoline's tail-call path), after
/// optional work of its own at entry.
#[derive(Default)]
struct Passer {
    counter: Counter,
    /// repr() the arguments of frames of this function before passing them on (runs
    /// Python code under the recursion guard, or with it lifted by `reentrant`).
    repr_args_of: Option<&'static str>,
    reentrant_repr: bool,
    /// Panic after calling pass_through for frames of this function.
    panic_after_pass: Option<&'static str>,
    /// Call eval after pass_through for frames of this function (a misuse: panics).
    eval_after_pass: Option<&'static str>,
    /// The argument reprs seen.
    seen_args: Mutex<Vec<String>>,
}

impl FrameHook for Passer {
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
        let c = &self.counter;
        let name = frame.code().qualname();
        if frame.throw_flag() {
            c.throws.lock().unwrap().push(name.clone());
        }
        *c.calls.lock().unwrap().entry(name.clone()).or_default() += 1;
        if c.skip == Some(name.as_str()) {
            frame.skip_code();
        }
        assert!(!frame.is_consumed());
        let r = frame.pass_through();
        assert!(frame.is_consumed() && !r.is_ok() && r.as_ptr().is_null());
        // The hook's own code after pass_through still runs under the guard.
        if self.repr_args_of == Some(name.as_str()) {
            let args = if self.reentrant_repr {
                frame.reentrant(|| frame.arguments())
            } else {
                frame.arguments()
            };
            let mut seen = self.seen_args.lock().unwrap();
            seen.extend(args.into_iter().map(|(n, v)| format!("{n}={v}")));
        }
        if self.panic_after_pass == Some(name.as_str()) {
            panic!("after passing {name} on");
        }
        if self.eval_after_pass == Some(name.as_str()) {
            return frame.eval();
        }
        r
    }
}

/// The same, asking for frames resumed with the throw flag.
#[derive(Default)]
struct PasserWantsThrows(Passer);

impl FrameHook for PasserWantsThrows {
    const WANTS_THROWS: bool = true;
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
        self.0.eval_frame(frame)
    }
}

struct Ctx {
    lib: Libpython,
    py: Python,
}

impl Ctx {
    fn new() -> Ctx {
        let path = std::env::var("FRAME_HOOKS_LIBPYTHON").unwrap();
        // SAFETY: the parent found this path with Libpython::find.
        let lib = unsafe { Libpython::open(&path) }.unwrap();
        lib.initialize().unwrap();
        // SAFETY: dlsym on that library's handle finds that library's symbols.
        let py = unsafe { Python::new(&lib.resolver()) }.unwrap();
        Ctx { lib, py }
    }

    fn api(&self) -> &'static Api {
        self.py.api()
    }

    /// Runs `code` in `__main__` and returns `repr(result)`.
    fn eval(&self, code: &str) -> String {
        self.py.run(code).unwrap_or_else(|e| panic!("{e}: {code}"));
        let api = self.api();
        self.py.with_gil(|| {
            // SAFETY: GIL held; __main__ exists; result set by the code above.
            unsafe {
                let m = (api.import_add_module)(c"__main__".as_ptr());
                let r = (api.getattr)(m, c"result".as_ptr());
                assert!(!r.is_null(), "no result after: {code}");
                let s = api.repr_of(r);
                (api.decref)(r);
                s
            }
        })
    }

    /// The code object of `__main__.<func>` (kept alive by the function).
    fn code_of(&self, func: &str) -> usize {
        let api = self.api();
        let name = std::ffi::CString::new(func).unwrap();
        self.py.with_gil(|| {
            // SAFETY: GIL held; the function exists in __main__.
            unsafe {
                let m = (api.import_add_module)(c"__main__".as_ptr());
                let f = (api.getattr)(m, name.as_ptr());
                assert!(!f.is_null(), "no function {func}");
                let c = (api.getattr)(f, c"__code__".as_ptr());
                (api.decref)(c);
                (api.decref)(f);
                c as usize
            }
        })
    }

    fn install(&self, c: Counter) -> Installed<Counter> {
        self.py.install(Arc::new(c)).unwrap()
    }
}

const FIB: &str = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n";

fn case_calls_and_restore(cx: &Ctx) {
    cx.py.run(FIB).unwrap();
    assert!(cx.py.eval_is_default());
    let mut inst = cx.install(Counter::default());
    assert!(!cx.py.eval_is_default());
    assert_eq!(cx.eval("result = fib(15)"), "610");
    assert_eq!(inst.hook().count("fib"), 1973);
    // Chaining: a second hook in front of the first; both see every call.
    let mut second = cx.install(Counter::default());
    assert_eq!(cx.eval("result = fib(10)"), "55");
    assert_eq!(second.hook().count("fib"), 177);
    assert_eq!(inst.hook().count("fib"), 1973 + 177);
    assert!(matches!(inst.uninstall(), Err(Error::NotCurrent)));
    second.uninstall().unwrap();
    inst.uninstall().unwrap();
    assert!(
        cx.py.eval_is_default(),
        "the copy's own default evaluator is back"
    );
    assert_eq!(cx.eval("result = fib(10)"), "55");
    assert_eq!(inst.hook().count("fib"), 1973 + 177);
}

const GENERATORS: &str = r#"
def gen(n):
    for i in range(n):
        try:
            yield i
        except KeyError:
            yield -1

def consume():
    return sum(gen(5))

def thrower():
    g = gen(3)
    first = next(g)
    caught = g.throw(KeyError("k"))
    rest = list(g)
    return (first, caught, rest)

async def inner(x):
    return x * 2

async def outer():
    total = 0
    for i in range(3):
        total += await inner(i)
    return total

def drive(coro):
    try:
        coro.send(None)
    except StopIteration as e:
        return e.value

def throw_into_coroutine():
    import types
    @types.coroutine
    def suspend():
        yield "suspended"
    async def waiter():
        try:
            await suspend()
        except ValueError as e:
            return "caught " + str(e)
    c = waiter()
    assert c.send(None) == "suspended"
    try:
        c.throw(ValueError("v"))
    except StopIteration as e:
        return e.value

import asyncio
async def sleeper():
    await asyncio.sleep(0)
    return [x * x for x in range(4)]
"#;

/// Runs the GENERATORS workload and checks its results.
fn check_generators(cx: &Ctx) {
    assert_eq!(cx.eval("result = consume()"), "10");
    assert_eq!(cx.eval("result = thrower()"), "(0, -1, [1, 2])");
    assert_eq!(cx.eval("result = drive(outer())"), "6");
    assert_eq!(cx.eval("result = throw_into_coroutine()"), "'caught v'");
    assert_eq!(cx.eval("result = asyncio.run(sleeper())"), "[0, 1, 4, 9]");
}

fn case_generators_coroutines_and_throw(cx: &Ctx) {
    let check = check_generators;
    cx.py.run(GENERATORS).unwrap();
    check(cx);
    // Throws go to the default evaluator by default...
    let mut plain = cx.install(Counter::default());
    check(cx);
    assert!(plain.hook().throws.lock().unwrap().is_empty());
    // gen(5): the call that makes the generator, 6 resumptions.
    assert!(plain.hook().count("gen") >= 6);
    plain.uninstall().unwrap();
    // ... and reach a hook that asks for them, which passes the flag through.
    let mut throws = cx
        .py
        .install(Arc::new(WantsThrows(Counter::default())))
        .unwrap();
    check(cx);
    let seen = throws.hook().0.throws.lock().unwrap().clone();
    // g.throw, c.throw, and the GeneratorExit that closing a generator throws.
    assert!(seen.contains(&"gen".to_string()), "{seen:?}");
    assert!(
        seen.contains(&"throw_into_coroutine.<locals>.waiter".to_string()),
        "{seen:?}"
    );
    throws.uninstall().unwrap();
}

const PANICS: &str = r#"
ran = []
def boom_target(x):
    ran.append(x)
    return x
def after_target(x):
    ran.append(x)
    return x
def gen_target():
    ran.append("gen")
    yield 1
def call(f, *a):
    try:
        f(*a)
        return "no exception"
    except RuntimeError as e:
        return type(e).__name__ + ": " + str(e)
def call_gen():
    try:
        g = gen_target()
        return next(g)
    except RuntimeError as e:
        return "RuntimeError: " + str(e)
"#;

fn case_panic_becomes_exception(cx: &Ctx) {
    // The panics are expected: keep their messages (and backtraces) out of the log.
    std::panic::set_hook(Box::new(|_| {}));
    cx.py.run(PANICS).unwrap();
    let mut inst = cx.install(Counter {
        panic_before: Some("boom_target"),
        panic_after: Some("after_target"),
        ..Default::default()
    });
    assert_eq!(
        cx.eval("result = call(boom_target, 1)"),
        "'RuntimeError: panic in frame hook: refusing to run boom_target'"
    );
    assert_eq!(
        cx.eval("result = call(after_target, 2)"),
        "'RuntimeError: panic in frame hook: after running after_target'"
    );
    assert_eq!(
        cx.eval("result = ran"),
        "[2]",
        "boom_target never ran, after_target did"
    );
    // The exception comes from the call; the refused frame was unwound by CPython
    // before its RESUME, which 3.11 and 3.12 leave out of tracebacks and 3.13 shows.
    let tb = cx.eval(
        "import traceback\ntry:\n    boom_target(3)\nexcept RuntimeError as e:\n    result = [f.name for f in traceback.extract_tb(e.__traceback__)]",
    );
    let want = if cx.py.version().1 >= 13 {
        "['<module>', 'boom_target']"
    } else {
        "['<module>']"
    };
    assert_eq!(tb, want);
    // Panicking for a generator function's frame, many times: the frames are cleared
    // (a leak or a corrupted frame stack would show up as a crash or a recursion error).
    cx.py.run("import gc\ngen_target_ok = 0").unwrap();
    drop(inst.uninstall());
    let mut gen_inst = cx.install(Counter {
        panic_before: Some("gen_target"),
        ..Default::default()
    });
    for _ in 0..500 {
        cx.py
            .run("r = call_gen()\nassert r.startswith('RuntimeError: panic in frame hook'), r")
            .unwrap();
    }
    assert_eq!(cx.eval("result = ran"), "[2]");
    gen_inst.uninstall().unwrap();
    assert_eq!(cx.eval("result = call_gen()"), "1");
    assert_eq!(cx.eval("result = fib_ok = sum(range(10))"), "45");
}

fn case_skip_marker(cx: &Ctx) {
    cx.py
        .run("def skipme():\n    return 1\ndef other():\n    return skipme()\n")
        .unwrap();
    let mut inst = cx.install(Counter {
        skip: Some("skipme"),
        ..Default::default()
    });
    assert_eq!(cx.eval("result = sum(other() for _ in range(10))"), "10");
    assert_eq!(inst.hook().count("skipme"), 1);
    assert_eq!(inst.hook().count("other"), 10);
    inst.uninstall().unwrap();
    // A skip mark belongs to the hook that set it: a later hook in the same trampoline
    // slot (which also marks code, so that it reads the marks) sees every call.
    let mut next = cx.install(Counter {
        skip: Some("other"),
        ..Default::default()
    });
    assert_eq!(cx.eval("result = sum(other() for _ in range(10))"), "10");
    assert_eq!(next.hook().count("other"), 1);
    assert_eq!(
        next.hook().count("skipme"),
        10,
        "the previous hook's skip mark does not apply to this one"
    );
    next.uninstall().unwrap();
    // Still so 255 installs later in the same slot (its generation had 8 bits, wrapping
    // over 1..=255: the 255th install after the marking one got its generation, and the
    // old mark applied to the new hook).
    let mut marking = cx.install(Counter {
        skip: Some("skipme"),
        ..Default::default()
    });
    assert_eq!(cx.eval("result = sum(other() for _ in range(10))"), "10");
    marking.uninstall().unwrap();
    for _ in 0..254 {
        cx.install(Counter::default()).uninstall().unwrap();
    }
    let mut last = cx.install(Counter {
        skip: Some("other"),
        ..Default::default()
    });
    assert_eq!(cx.eval("result = sum(other() for _ in range(10))"), "10");
    assert_eq!(
        last.hook().count("skipme"),
        10,
        "a skip mark from 255 installs ago does not apply"
    );
    last.uninstall().unwrap();
}

const REPRS: &str = r#"
class Loud:
    def __repr__(self):
        return "Loud(" + helper() + ")"
def helper():
    return "h"
def target(x):
    unbound_yet = 2
    return 1
"#;

fn case_recursion_guard(cx: &Ctx) {
    cx.py.run(REPRS).unwrap();
    let mut inst = cx.install(Counter {
        repr_arg_of: Some("target"),
        ..Default::default()
    });
    assert_eq!(cx.eval("result = target(Loud())"), "1");
    assert_eq!(inst.hook().count("target"), 1);
    assert_eq!(
        inst.hook().count("Loud.__repr__"),
        0,
        "the hook's own repr is not hooked"
    );
    assert_eq!(inst.hook().count("helper"), 0);
    inst.uninstall().unwrap();
    let mut re = cx.install(Counter {
        repr_arg_of: Some("target"),
        reentrant_repr: true,
        ..Default::default()
    });
    assert_eq!(cx.eval("result = target(Loud())"), "1");
    assert_eq!(
        re.hook().count("Loud.__repr__"),
        1,
        "reentrant() lets it through"
    );
    assert_eq!(re.hook().count("helper"), 1);
    re.uninstall().unwrap();
}

/// `Frame::pass_through`: the frame is evaluated after the hook returns, with the guard
/// lifted (its callees reach the hook) while the hook's own code, before and after the
/// call, runs under the guard; chaining both ways; skip marks; the throw flag; panics and
/// misuse after passing on; generators and coroutines.
fn case_pass_through(cx: &Ctx) {
    std::panic::set_hook(Box::new(|_| {}));
    cx.py.run(FIB).unwrap();
    cx.py.run(REPRS).unwrap();
    cx.py.run(PANICS).unwrap();
    cx.py.run(GENERATORS).unwrap();
    let p = |passer: Passer| cx.py.install(Arc::new(passer)).unwrap();

    // Every call is seen, callees of passed-on frames included.
    let mut inst = p(Passer::default());
    assert_eq!(cx.eval("result = fib(15)"), "610");
    assert_eq!(inst.hook().counter.count("fib"), 1973);
    inst.uninstall().unwrap();

    // The hook's code runs guarded: the repr it calls after pass_through (Loud.__repr__,
    // helper) is not hooked, and the guard is restored for what follows.
    let mut inst = p(Passer {
        repr_args_of: Some("target"),
        ..Default::default()
    });
    assert_eq!(
        cx.eval("result = (target(Loud()), helper(), target(Loud()))"),
        "(1, 'h', 1)"
    );
    let h = inst.hook();
    assert_eq!(h.counter.count("target"), 2);
    assert_eq!(h.counter.count("Loud.__repr__"), 0, "the hook's own repr");
    assert_eq!(
        h.counter.count("helper"),
        1,
        "only the call from Python code, not the repr's"
    );
    assert_eq!(*h.seen_args.lock().unwrap(), ["x=Loud(h)", "x=Loud(h)"]);
    inst.uninstall().unwrap();
    let mut inst = p(Passer {
        repr_args_of: Some("target"),
        reentrant_repr: true,
        ..Default::default()
    });
    assert_eq!(cx.eval("result = target(Loud())"), "1");
    assert_eq!(inst.hook().counter.count("Loud.__repr__"), 1, "reentrant()");
    assert_eq!(inst.hook().counter.count("helper"), 1);
    inst.uninstall().unwrap();

    // Chaining, both ways round with a hook that evaluates inside itself.
    let mut under = cx.install(Counter::default());
    let mut over = p(Passer::default());
    assert_eq!(cx.eval("result = fib(10)"), "55");
    assert_eq!(over.hook().counter.count("fib"), 177);
    assert_eq!(under.hook().count("fib"), 177);
    over.uninstall().unwrap();
    under.uninstall().unwrap();
    let mut under = p(Passer::default());
    let mut over = cx.install(Counter::default());
    assert_eq!(cx.eval("result = fib(10)"), "55");
    assert_eq!(over.hook().count("fib"), 177);
    assert_eq!(under.hook().counter.count("fib"), 177);
    over.uninstall().unwrap();
    under.uninstall().unwrap();
    assert!(cx.py.eval_is_default());

    // A skip mark set before passing on.
    cx.py
        .run("def skipme():\n    return 1\ndef other():\n    return skipme()\n")
        .unwrap();
    let mut inst = p(Passer {
        counter: Counter {
            skip: Some("skipme"),
            ..Default::default()
        },
        ..Default::default()
    });
    assert_eq!(cx.eval("result = sum(other() for _ in range(10))"), "10");
    assert_eq!(inst.hook().counter.count("skipme"), 1);
    assert_eq!(inst.hook().counter.count("other"), 10);
    inst.uninstall().unwrap();

    // Generators, coroutines, throws: the throw flag reaches the evaluator it was
    // passed on to.
    let check = check_generators;
    let mut inst = p(Passer::default());
    check(cx);
    assert!(inst.hook().counter.throws.lock().unwrap().is_empty());
    assert!(inst.hook().counter.count("gen") >= 6);
    inst.uninstall().unwrap();
    let mut inst = cx
        .py
        .install(Arc::new(PasserWantsThrows::default()))
        .unwrap();
    check(cx);
    let seen = inst.hook().0.counter.throws.lock().unwrap().clone();
    assert!(seen.contains(&"gen".to_string()), "{seen:?}");
    inst.uninstall().unwrap();

    // A panic after passing on, and evaluating after passing on: the frame never runs,
    // a RuntimeError is raised in it; the hook keeps working.
    let mut inst = p(Passer {
        panic_after_pass: Some("boom_target"),
        eval_after_pass: Some("after_target"),
        ..Default::default()
    });
    assert_eq!(
        cx.eval("result = call(boom_target, 1)"),
        "'RuntimeError: panic in frame hook: after passing boom_target on'"
    );
    assert_eq!(
        cx.eval("result = call(after_target, 2)"),
        "'RuntimeError: panic in frame hook: a frame was evaluated twice by one hook'"
    );
    assert_eq!(cx.eval("result = ran"), "[]", "neither frame ran");
    assert_eq!(cx.eval("result = fib(10)"), "55");
    assert_eq!(inst.hook().counter.count("fib"), 177);
    inst.uninstall().unwrap();
    assert!(cx.py.eval_is_default());
}

static DROPS: AtomicUsize = AtomicUsize::new(0);

struct Tracked(#[allow(dead_code)] u64);
impl Drop for Tracked {
    fn drop(&mut self) {
        DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

fn case_code_extra(cx: &Ctx) {
    let extra = CodeExtra::<Tracked>::request(&cx.py).unwrap();
    let names = CodeExtra::<String>::request(&cx.py).unwrap();
    assert_eq!(
        names.index(),
        extra.index() + 1,
        "one index per request, per interpreter"
    );
    cx.py
        .run("def f():\n    return 1\ndef g():\n    return 2\n")
        .unwrap();
    let (f, g) = (cx.code_of("f"), cx.code_of("g"));
    cx.py.with_gil(|| {
        // SAFETY: f and g are live code objects of this copy; GIL held.
        let (f, g) = unsafe {
            (
                CodeRef::from_ptr(&cx.py, f as *mut _),
                CodeRef::from_ptr(&cx.py, g as *mut _),
            )
        };
        assert!(extra.get(f).is_none());
        assert!(extra.get_via_api(f).is_none());
        let v = extra.get_or_init(f, || Tracked(7));
        assert_eq!(v.0, 7);
        assert!(std::ptr::eq(
            extra.get(f).unwrap(),
            extra.get_via_api(f).unwrap()
        ));
        // Replacing drops the old value.
        // SAFETY: no reference from get is used after this point.
        unsafe { extra.set(f, Tracked(8)) };
        assert_eq!(DROPS.load(Ordering::SeqCst), 1);
        assert_eq!(extra.get(f).unwrap().0, 8);
        // `names` is unset on f, whose extra array exists: its free function will be
        // called with NULL when f dies (gh-122491) and must accept it.
        assert!(names.get(f).is_none());
        // SAFETY: as above.
        unsafe { names.set(g, "g's name".to_string()) };
        assert_eq!(names.get(g).map(String::as_str), Some("g's name"));
        assert!(extra.get(g).is_none());
    });
    // The code object dies with its function: the value is dropped by CPython.
    cx.py.run("del f\nimport gc\ngc.collect()").unwrap();
    assert_eq!(
        DROPS.load(Ordering::SeqCst),
        2,
        "dropped with its code object"
    );

    // One index shared by every thread: values set from Python threads through a hook.
    struct Stamp {
        extra: CodeExtra<AtomicU64>,
    }
    impl FrameHook for Stamp {
        fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
            if frame.code().name() == "work" {
                self.extra
                    .get_or_init(frame.code(), || AtomicU64::new(0))
                    .fetch_add(1, Ordering::Relaxed);
            }
            frame.eval()
        }
    }
    let counts = CodeExtra::<AtomicU64>::request(&cx.py).unwrap();
    let mut inst = cx.py.install(Arc::new(Stamp { extra: counts })).unwrap();
    cx.py
        .run("import threading\ndef work():\n    return 0\nts = [threading.Thread(target=lambda: [work() for _ in range(100)]) for _ in range(4)]\nfor t in ts: t.start()\nfor t in ts: t.join()\n")
        .unwrap();
    let work = cx.code_of("work");
    cx.py.with_gil(|| {
        // SAFETY: live code object, GIL held.
        let work = unsafe { CodeRef::from_ptr(&cx.py, work as *mut _) };
        assert_eq!(counts.get(work).unwrap().load(Ordering::Relaxed), 400);
    });
    inst.uninstall().unwrap();
    let next = CodeExtra::<u8>::request(&cx.py).unwrap();
    assert_eq!(
        next.index(),
        counts.index() + 1,
        "threads took no index of their own"
    );
}

fn case_index_budget(cx: &Ctx) {
    let mut got = 0;
    let err = loop {
        match CodeExtra::<u8>::request(&cx.py) {
            Ok(_) => got += 1,
            Err(e) => break e,
        }
        assert!(got < 1000, "no limit");
    };
    // 254 per interpreter (MAX_CO_EXTRA_USERS - 1), two taken by Python::new for skip
    // marks (16 bits per hook slot, four slots per index).
    assert_eq!(got, 254 - 2, "indices handed out before the refusal");
    assert!(matches!(err, Error::ExtraIndexExhausted { .. }));
    assert!(err.to_string().contains("254 indices are used up"), "{err}");
    // The interpreter still works and hooks still install.
    cx.py.run(FIB).unwrap();
    let mut inst = cx.install(Counter::default());
    assert_eq!(cx.eval("result = fib(5)"), "5");
    inst.uninstall().unwrap();
}

static CTX_PY: OnceLock<Python> = OnceLock::new();
static MID: Mutex<Option<Installed<Counter>>> = Mutex::new(None);

extern "C" fn install_now() {
    let py = CTX_PY.get().unwrap();
    *MID.lock().unwrap() = Some(py.install(Arc::new(Counter::default())).unwrap());
}

fn case_install_mid_run_and_uninstall_inside(cx: &Ctx) {
    CTX_PY.set(cx.py.clone()).unwrap();
    cx.py.run(FIB).unwrap();
    cx.py
        .run(&format!(
            "import ctypes\ninstall = ctypes.PYFUNCTYPE(None)({})\n",
            install_now as *const () as usize
        ))
        .unwrap();
    // Frames of the default evaluator are on the stack when the hook arrives.
    let out = cx.eval(
        "def outer():\n    a = fib(5)\n    install()\n    b = fib(5)\n    return a + b\nresult = outer()",
    );
    assert_eq!(out, "10");
    let mut inst = MID.lock().unwrap().take().unwrap();
    assert_eq!(
        inst.hook().count("fib"),
        15,
        "only the calls after installing"
    );
    assert_eq!(
        inst.hook().count("outer"),
        0,
        "outer started before the hook"
    );
    inst.uninstall().unwrap();

    // Uninstalling from inside a hooked call: the frames already running finish, later
    // calls are not seen.
    let inst = cx
        .py
        .install(Arc::new(Counter {
            uninstall_in: Some("leave"),
            ..Default::default()
        }))
        .unwrap();
    let hook = inst.hook().clone();
    *UNINSTALL.lock().unwrap() = Some(inst);
    let out = cx.eval("def leave():\n    return fib(4)\nresult = (leave(), fib(6))");
    assert_eq!(out, "(3, 8)");
    assert_eq!(hook.count("leave"), 1);
    assert_eq!(
        hook.count("fib"),
        0,
        "uninstalled before leave() called fib"
    );
    assert!(cx.py.eval_is_default());
}

/// Runs a closure (once) before evaluating frames of `pivot`, then chains as usual.
#[derive(Default)]
struct Pivot {
    counter: Counter,
    action: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl FrameHook for Pivot {
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
        if frame.code().qualname() == "pivot" {
            if let Some(f) = self.action.lock().unwrap().take() {
                f();
            }
        }
        self.counter.eval_frame(frame)
    }
}

/// A hook chained over another keeps calling *that* hook, even after it is uninstalled
/// and its trampoline slot is taken by a hook of another type (`C`) or of the same one.
fn chain_after_slot_reuse<C: FrameHook>(cx: &Ctx, make: fn() -> C, count: fn(&C, &str) -> u64) {
    let a = cx.install(Counter::default());
    let a_hook = a.hook().clone();
    let b = cx.py.install(Arc::new(Pivot::default())).unwrap();
    let b_hook = b.hook().clone();
    let c_slot: Arc<Mutex<Option<Installed<C>>>> = Arc::default();
    let py = cx.py.clone();
    let out = c_slot.clone();
    *b_hook.action.lock().unwrap() = Some(Box::new(move || {
        // Inside B's call of pivot, before B evaluates the frame through A.
        let (mut a, mut b) = (a, b);
        b.uninstall().unwrap();
        a.uninstall().unwrap();
        // A's slot (the first free one) goes to C.
        *out.lock().unwrap() = Some(py.install(Arc::new(make())).unwrap());
    }));
    assert_eq!(
        cx.eval("def pivot():\n    return fib(5)\nresult = pivot()"),
        "5"
    );
    let mut c = c_slot.lock().unwrap().take().expect("C installed");
    assert_eq!(b_hook.counter.count("pivot"), 1);
    assert_eq!(
        a_hook.count("pivot"),
        1,
        "B's frame of pivot went to the hook B was installed over"
    );
    assert_eq!(
        count(c.hook(), "pivot"),
        0,
        "the hook that took A's slot was not called for B's frame"
    );
    // The calls pivot makes go to the evaluator current then: C alone.
    assert_eq!(count(c.hook(), "fib"), 15);
    assert_eq!(a_hook.count("fib"), 0);
    assert_eq!(b_hook.counter.count("fib"), 0);
    c.uninstall().unwrap();
    assert!(cx.py.eval_is_default());
}

fn case_chain_after_slot_reuse(cx: &Ctx) {
    cx.py.run(FIB).unwrap();
    // A hook of another type in the reused slot (before the fix, A's trampoline read
    // that hook's state as its own).
    chain_after_slot_reuse(cx, || WantsThrows(Counter::default()), |h, n| h.0.count(n));
    // A hook of the same type in the reused slot.
    chain_after_slot_reuse(cx, Counter::default, Counter::count);
}

static REFUSED: Mutex<Option<String>> = Mutex::new(None);

extern "C" fn install_while_finalizing() {
    let py = CTX_PY.get().unwrap();
    let r = py.install(Arc::new(Counter::default()));
    *REFUSED.lock().unwrap() = Some(match r {
        Ok(i) => {
            std::mem::forget(i);
            "installed".into()
        }
        Err(e) => e.to_string(),
    });
}

fn case_finalizing_refused(cx: &Ctx) {
    CTX_PY.set(cx.py.clone()).unwrap();
    cx.py
        .run(&format!(
            "import ctypes, sys\nclass AtTeardown:\n    def __init__(self):\n        self.cb = ctypes.PYFUNCTYPE(None)({})\n        self.sys = sys\n    def __del__(self):\n        if self.sys.is_finalizing():\n            self.cb()\n_keeper = AtTeardown()\n",
            install_while_finalizing as *const () as usize
        ))
        .unwrap();
    // SAFETY: no other thread runs Python; only REFUSED is read afterwards.
    unsafe { cx.lib.finalize() }.unwrap();
    let got = REFUSED.lock().unwrap().clone();
    assert_eq!(
        got.as_deref(),
        Some("the interpreter is finalising; refusing to install a frame hook")
    );
}

fn case_layout_mismatch_is_named(cx: &Ctx) {
    let good = cx.py.layout();
    assert_eq!(Layout::for_minor(cx.py.version().1), Some(good));
    let api = cx.api();
    let index = cx.py.with_gil(|| {
        // SAFETY: GIL held.
        unsafe { (api.request_extra_index)(None) }
    });
    let check = |l: Layout| -> String {
        cx.py.with_gil(|| {
            // SAFETY: GIL held, no other install in progress.
            unsafe { layout::check(api, l, index) }
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        })
    };
    assert_eq!(check(good), "");
    let bad_code = check(Layout {
        f_code: good.f_code + 8,
        ..good
    });
    assert!(
        bad_code.contains(&format!("f_code at offset {} never held", good.f_code + 8)),
        "{bad_code}"
    );
    let bad_locals = check(Layout {
        localsplus: good.localsplus + 8,
        ..good
    });
    assert!(bad_locals.contains("localsplus[0]"), "{bad_locals}");
    let bad_extra = check(Layout {
        co_extra: good.co_extra - 8,
        ..good
    });
    assert!(bad_extra.contains("co_extra at offset"), "{bad_extra}");
    assert!(
        bad_extra.starts_with("frame layout mismatch in CPython 3."),
        "{bad_extra}"
    );
}

static CHECK_INDEX: OnceLock<isize> = OnceLock::new();
static CHECKS_FROM_PYTHON: AtomicUsize = AtomicUsize::new(0);

/// Runs the layout check from a Python thread (ctypes holds the GIL for the call).
extern "C" fn check_from_python() {
    let py = CTX_PY.get().unwrap();
    // SAFETY: the GIL is held by the calling Python thread.
    unsafe { layout::check(py.api(), py.layout(), *CHECK_INDEX.get().unwrap()) }.unwrap();
    CHECKS_FROM_PYTHON.fetch_add(1, Ordering::SeqCst);
}

fn case_check_while_threads_run(cx: &Ctx) {
    CTX_PY.set(cx.py.clone()).unwrap();
    let api = cx.api();
    let index = cx.py.with_gil(|| {
        // SAFETY: GIL held.
        unsafe { (api.request_extra_index)(None) }
    });
    CHECK_INDEX.set(index).unwrap();
    // The probe function's RESUME hands the GIL to these threads (a switch interval of
    // 1 us makes that nearly certain), while the probe is the interpreter's evaluator:
    // their frames must reach the evaluator it replaced, and their own checks (from
    // Python, through ctypes) must not chain to it.
    cx.py
        .run(&format!(
            "import sys, threading, ctypes\nsys.setswitchinterval(1e-6)\ncheck = ctypes.PYFUNCTYPE(None)({})\nstop = False\ndef leaf(i):\n    return i + 1\ndef spin(k):\n    n = 0\n    while not stop:\n        n = leaf(n)\n        if k == 0 and n % 50 == 0:\n            check()\nts = [threading.Thread(target=spin, args=(k,)) for k in range(4)]\nfor t in ts: t.start()\n",
            check_from_python as *const () as usize
        ))
        .unwrap();
    for round in 0..1000 {
        cx.py.with_gil(|| {
            // SAFETY: GIL held, as `Python::new` runs it.
            unsafe { layout::check(api, cx.py.layout(), index) }.unwrap();
        });
        if round % 25 == 0 {
            let mut inst = cx.install(Counter::default());
            cx.py.run("leaf(1)").unwrap();
            inst.uninstall().unwrap();
        }
    }
    cx.py
        .run("stop = True\nfor t in ts: t.join()\nsys.setswitchinterval(0.005)")
        .unwrap();
    assert!(CHECKS_FROM_PYTHON.load(Ordering::SeqCst) > 0);
    assert!(cx.py.eval_is_default(), "every probe was uninstalled");
}

static RESOLVER: OnceLock<frame_hooks::cpython::Dlsym> = OnceLock::new();
static PROBE_HELD: AtomicUsize = AtomicUsize::new(0);
static LET_PROBE_GO: AtomicUsize = AtomicUsize::new(0);

/// `Python::new` from a Python thread (ctypes holds the GIL for the call).
extern "C" fn python_new_from_python() {
    // SAFETY: dlsym on the copy's own handle.
    unsafe { Python::new(RESOLVER.get().unwrap()) }.unwrap();
}

/// Holds the layout probe's frame (releasing the GIL in `time.sleep`) until told to go.
struct HoldProbe;
impl FrameHook for HoldProbe {
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
        if frame.code().name() == "__frame_hooks_probe" {
            PROBE_HELD.store(1, Ordering::SeqCst);
            frame
                .python()
                .run("import time\nwhile not let_go():\n    time.sleep(0.001)")
                .unwrap();
        }
        frame.eval()
    }
}

extern "C" fn let_go() -> bool {
    LET_PROBE_GO.load(Ordering::SeqCst) != 0
}

fn case_hooks_change_during_check(cx: &Ctx) {
    RESOLVER.set(cx.lib.resolver()).unwrap();
    cx.py.run(FIB).unwrap();
    cx.py
        .run(&format!(
            "import ctypes, threading\nnew_python = ctypes.PYFUNCTYPE(None)({})\nlet_go = ctypes.PYFUNCTYPE(ctypes.c_bool)({})\n",
            python_new_from_python as *const () as usize,
            let_go as *const () as usize
        ))
        .unwrap();
    // Another thread's `Python::new` puts its probe in front of the hook; the probe
    // function's frame reaches the hook, which holds it (GIL released).
    let hold = |cx: &Ctx| {
        PROBE_HELD.store(0, Ordering::SeqCst);
        LET_PROBE_GO.store(0, Ordering::SeqCst);
        let inst = cx.py.install(Arc::new(HoldProbe)).unwrap();
        cx.py
            .run("t = threading.Thread(target=new_python)\nt.start()")
            .unwrap();
        test_support::wait_until("the probe held by the hook", || {
            PROBE_HELD.load(Ordering::SeqCst) != 0
        });
        inst
    };
    let release = |cx: &Ctx| {
        LET_PROBE_GO.store(1, Ordering::SeqCst);
        cx.py.run("t.join()").unwrap();
    };

    // Uninstalling the hook the probe stands in front of.
    let mut inst = hold(cx);
    inst.uninstall()
        .expect("uninstalling while another thread's layout probe is in front of the hook");
    // This thread's frames go through the probe to what the hook chained to.
    assert_eq!(cx.eval("result = fib(5)"), "5");
    release(cx);
    assert!(
        cx.py.eval_is_default(),
        "the check restored what the uninstalled hook chained to"
    );

    // Installing over the probe: the new hook chains to the hook behind the probe.
    let mut inst = hold(cx);
    let mut counter = cx.install(Counter::default());
    assert_eq!(cx.eval("result = fib(5)"), "5");
    assert_eq!(counter.hook().count("fib"), 15);
    release(cx);
    counter.uninstall().unwrap();
    inst.uninstall()
        .expect("the hook the probe stood in front of is current again");
    assert!(cx.py.eval_is_default());
}

fn case_refusals(cx: &Ctx) {
    // A resolver missing a symbol.
    let lib = cx.lib.resolver();
    let missing = |name: &CStr| -> Option<usize> {
        if name == c"_PyInterpreterState_SetEvalFrameFunc" {
            None
        } else {
            frame_hooks::cpython::Resolver::resolve(&lib, name)
        }
    };
    // SAFETY: the real copy's addresses, one reported missing.
    let e = unsafe { Python::new(&missing) }.unwrap_err();
    assert_eq!(
        e.to_string(),
        "symbol _PyInterpreterState_SetEvalFrameFunc not found in this libpython"
    );
    // Another version number behind Py_Version.
    static FAKE_VERSION: u64 = 0x030A_0DF0;
    let fake = |name: &CStr| -> Option<usize> {
        if name == c"Py_Version" {
            Some(&FAKE_VERSION as *const u64 as usize)
        } else {
            frame_hooks::cpython::Resolver::resolve(&lib, name)
        }
    };
    // SAFETY: the real copy's addresses, and a real `unsigned long` for Py_Version.
    let e = unsafe { Python::new(&fake) }.unwrap_err();
    assert_eq!(
        e.to_string(),
        "CPython 3.10.13 is not supported (3.11, 3.12 and 3.13 are)"
    );
    // All trampolines taken.
    let mut held = Vec::new();
    let err = loop {
        match cx.py.install(Arc::new(Counter::default())) {
            Ok(i) => held.push(i),
            Err(e) => break e,
        }
    };
    assert_eq!(held.len(), frame_hooks::cpython::MAX_HOOKS);
    assert!(matches!(err, Error::NoFreeSlot(8)));
    while let Some(mut i) = held.pop() {
        i.uninstall().unwrap();
    }
    assert!(cx.py.eval_is_default());
}

type Case = (&'static str, fn(&Ctx));

const CASES: &[Case] = &[
    ("calls_and_restore", case_calls_and_restore),
    (
        "generators_coroutines_and_throw",
        case_generators_coroutines_and_throw,
    ),
    ("panic_becomes_exception", case_panic_becomes_exception),
    ("skip_marker", case_skip_marker),
    ("recursion_guard", case_recursion_guard),
    ("code_extra", case_code_extra),
    ("index_budget", case_index_budget),
    (
        "install_mid_run_and_uninstall_inside",
        case_install_mid_run_and_uninstall_inside,
    ),
    ("finalizing_refused", case_finalizing_refused),
    ("layout_mismatch_is_named", case_layout_mismatch_is_named),
    ("refusals", case_refusals),
    ("check_while_threads_run", case_check_while_threads_run),
    ("hooks_change_during_check", case_hooks_change_during_check),
    ("chain_after_slot_reuse", case_chain_after_slot_reuse),
    ("pass_through", case_pass_through),
];

/// The child side: runs the case named by FRAME_HOOKS_CASE (does nothing otherwise).
#[test]
fn child() {
    let Ok(case) = std::env::var("FRAME_HOOKS_CASE") else {
        return;
    };
    let (_, f) = CASES
        .iter()
        .find(|(n, _)| *n == case)
        .unwrap_or_else(|| panic!("no case {case}"));
    let cx = Ctx::new();
    f(&cx);
    println!("case {case} passed");
}

macro_rules! versions {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                #[test]
                fn py311() {
                    super::pythons::run_child(stringify!($case), 11);
                }
                #[test]
                fn py312() {
                    super::pythons::run_child(stringify!($case), 12);
                }
                #[test]
                fn py313() {
                    super::pythons::run_child(stringify!($case), 13);
                }
            }
        )*
    };
}

versions!(
    calls_and_restore,
    generators_coroutines_and_throw,
    panic_becomes_exception,
    skip_marker,
    recursion_guard,
    code_extra,
    index_budget,
    install_mid_run_and_uninstall_inside,
    finalizing_refused,
    layout_mismatch_is_named,
    refusals,
    check_while_threads_run,
    hooks_change_during_check,
    chain_after_slot_reuse,
    pass_through,
);

#[test]
fn cpython_3_10_is_refused_by_name() {
    let Ok(lib) = pythons::libpython(10) else {
        println!("skipped: no shared CPython 3.10 on this machine");
        return;
    };
    // Not initialised: the version gate comes first (3.10 exports no Py_Version; its
    // version is what its Py_GetVersion() reports).
    // SAFETY: a real shared libpython3.10 found through its sysconfig.
    let lib = unsafe { Libpython::open(lib) }.unwrap();
    // SAFETY: dlsym on that library's handle.
    let e = unsafe { Python::new(&lib.resolver()) }.unwrap_err();
    let msg = e.to_string();
    println!("refused: {msg}");
    assert!(matches!(e, Error::UnsupportedVersion { .. }), "{msg}");
    assert!(
        msg.starts_with("CPython 3.10.")
            && msg.ends_with(" is not supported (3.11, 3.12 and 3.13 are)"),
        "{msg}"
    );
}
