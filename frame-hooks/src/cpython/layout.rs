//! The `_PyInterpreterFrame` and `PyCodeObject` offsets of each supported version,
//! checked against the running libpython before any hook is installed.
//!
//! The check runs a known function under a probe hook and requires that the words at the
//! version's offsets hold that function's code object, function, globals, builtins and
//! arguments; and it stores a marker with the copy's own `_PyCode_SetExtra` and requires
//! to find it through the version's `co_extra` offset. Any difference is an error naming
//! the field, the offset and the version. Other threads may run, check, install and
//! uninstall meanwhile (see [`check`]).

use super::api::{Api, EvalFrameFn, InterpreterFrame, PyObject, PyThreadState};
use super::Error;
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Offsets of one CPython version (LP64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `f_code` (3.11, 3.12) / `f_executable` (3.13).
    pub f_code: usize,
    /// `f_func` (3.11) / `f_funcobj` (3.12+).
    pub f_func: usize,
    /// `f_globals`.
    pub f_globals: usize,
    /// `f_builtins`.
    pub f_builtins: usize,
    /// `previous`.
    pub previous: usize,
    /// `owner` (a char).
    pub owner: usize,
    /// `localsplus[0]`.
    pub localsplus: usize,
    /// `PyCodeObject.co_extra`.
    pub co_extra: usize,
    /// Whether `f_code` may hold something other than a code object (3.13's
    /// `f_executable`), so the hook checks the type.
    pub executable_may_not_be_code: bool,
}

impl Layout {
    /// The layout of CPython 3.`minor` (from that version's `pycore_frame.h` and
    /// `cpython/code.h`).
    pub fn for_minor(minor: u32) -> Option<Layout> {
        match minor {
            11 => Some(Layout {
                f_func: 0,
                f_globals: 8,
                f_builtins: 16,
                f_code: 32,
                previous: 48,
                owner: 69,
                localsplus: 72,
                co_extra: 176,
                executable_may_not_be_code: false,
            }),
            12 | 13 => Some(Layout {
                f_code: 0,
                previous: 8,
                f_func: 16,
                f_globals: 24,
                f_builtins: 32,
                owner: 70,
                localsplus: 72,
                co_extra: if minor == 12 { 184 } else { 192 },
                executable_may_not_be_code: minor == 13,
            }),
            _ => None,
        }
    }
}

/// Reads the pointer-sized word at `base + offset`.
///
/// # Safety
/// `base + offset` is a readable, aligned word.
#[inline(always)]
pub unsafe fn word(base: *const c_void, offset: usize) -> usize {
    // SAFETY: per the caller's guarantee.
    unsafe { *(base.cast::<u8>().add(offset).cast::<usize>()) }
}

/// What the probe hook saw.
struct Probe {
    layout: Layout,
    code: usize,
    func: usize,
    globals: usize,
    builtins: usize,
    args: [usize; 2],
    interp: usize,
    prev: EvalFrameFn,
    seen: Cell<bool>,
    mismatches: std::cell::RefCell<Vec<String>>,
}

thread_local! {
    static PROBE: Cell<*const Probe> = const { Cell::new(std::ptr::null()) };
}

/// `PyThreadState.interp` (`struct _ts` starts with `prev`, `next`, `interp` in 3.11-3.13;
/// checked by the probe on the probing thread).
const TSTATE_INTERP: usize = 16;

/// The evaluator each interpreter had before its probe, while `check` runs: the probe is
/// then that interpreter's eval function for every thread, and the probe function's
/// `RESUME` may hand the GIL to another thread, whose frames must go where they went
/// before, and which may install or uninstall hooks meanwhile. One entry per check in
/// progress (two threads may check one interpreter), the latest last; an entry stays if
/// a hook was installed over the probe (anything chained to the probe keeps working).
/// Entries are read and changed only by threads holding the interpreter's GIL.
static PROBED: Mutex<Vec<Probed>> = Mutex::new(Vec::new());
static NEXT_PROBE: AtomicU64 = AtomicU64::new(1);

struct Probed {
    id: u64,
    interp: usize,
    /// The evaluator the probe stands for (what the check restores).
    prev: EvalFrameFn,
}

fn probed() -> std::sync::MutexGuard<'static, Vec<Probed>> {
    PROBED.lock().unwrap_or_else(|e| e.into_inner())
}

fn is_probe(eval: EvalFrameFn) -> bool {
    eval as usize == probe_eval as *const () as usize
}

/// The evaluator `interp`'s latest probe stands for.
fn probed_prev(interp: usize) -> Option<EvalFrameFn> {
    probed()
        .iter()
        .rfind(|p| p.interp == interp)
        .map(|p| p.prev)
}

/// `eval`, or the evaluator it stands for if it is the probe of a check in progress on
/// `interp` (so that a hook installed meanwhile never chains to the probe).
pub(crate) fn unprobed(interp: usize, eval: EvalFrameFn) -> EvalFrameFn {
    if is_probe(eval) {
        probed_prev(interp).unwrap_or(eval)
    } else {
        eval
    }
}

/// Uninstalling `hook` (which chained to `to`) while `current` is the probe of a check in
/// progress on `interp` that stands for `hook`: the check will restore `to` instead, and
/// other threads' frames go to `to` from now on. False if `current` is not such a probe.
pub(crate) fn unprobe_hook(
    interp: usize,
    current: EvalFrameFn,
    hook: EvalFrameFn,
    to: EvalFrameFn,
) -> bool {
    if !is_probe(current) {
        return false;
    }
    let mut found = false;
    for p in probed().iter_mut() {
        if p.interp == interp && p.prev as usize == hook as usize {
            p.prev = to;
            found = true;
        }
    }
    found
}

unsafe extern "C" fn probe_eval(
    tstate: *mut PyThreadState,
    frame: *mut InterpreterFrame,
    throw: c_int,
) -> *mut PyObject {
    let p = PROBE.with(|p| p.get());
    if p.is_null() {
        // Another thread of a probed interpreter: it took the GIL while the probe
        // function ran. Its frames go to the evaluator the interpreter had before.
        // SAFETY: CPython passes the thread's live thread state.
        let interp = unsafe { word(tstate as *const c_void, TSTATE_INTERP) };
        let Some(prev) = probed_prev(interp) else {
            // Unreachable: the entry is removed only after the probe is uninstalled,
            // under the same GIL, and kept if anything may still chain to the probe.
            eprintln!(
                "frame-hooks: layout probe called for an interpreter that is not being probed"
            );
            std::process::abort();
        };
        // SAFETY: CPython's own arguments, to the evaluator this interpreter had.
        return unsafe { prev(tstate, frame, throw) };
    }
    // SAFETY: `check` set PROBE to a Probe that outlives the call that runs this hook on
    // this thread.
    let probe = unsafe { &*p };
    // A panic while checking never unwinds into CPython: it is a mismatch of the check
    // (the probe's cells are only appended to, so a half-done check leaves them usable).
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: frames are live `_PyInterpreterFrame`s given by CPython.
        unsafe { check_frame(probe, tstate, frame) }
    }));
    if let Err(payload) = checked {
        let panic = super::panic_message(&*payload);
        let what = format!("panic in the layout probe: {panic}");
        probe.mismatches.borrow_mut().push(what);
    }
    // What the probe stands for now: another thread may have uninstalled that hook
    // while this one waited for the GIL (see `unprobe_hook`).
    let prev = probed_prev(probe.interp).unwrap_or(probe.prev);
    // SAFETY: CPython's own arguments, to the evaluator the probe stands for.
    unsafe { prev(tstate, frame, throw) }
}

/// Compares the words of `frame` with what the probe expects, if it is the probe
/// function's frame.
///
/// # Safety
/// `frame` and `tstate` are CPython's live arguments of the current call.
unsafe fn check_frame(probe: &Probe, tstate: *mut PyThreadState, frame: *mut InterpreterFrame) {
    // SAFETY: the caller's contract; offsets of the layout under check.
    unsafe {
        let f = frame as *const c_void;
        let l = probe.layout;
        if word(f, l.f_code) == probe.code {
            let interp = word(tstate as *const c_void, TSTATE_INTERP);
            if interp != probe.interp {
                probe.mismatches.borrow_mut().push(format!(
                    "PyThreadState.interp at offset {TSTATE_INTERP}: found {interp:#x}, expected {:#x}",
                    probe.interp
                ));
            }
            probe.seen.set(true);
            let mut bad = probe.mismatches.borrow_mut();
            let checks = [
                ("f_func/f_funcobj", l.f_func, probe.func),
                ("f_globals", l.f_globals, probe.globals),
                ("f_builtins", l.f_builtins, probe.builtins),
                ("localsplus[0]", l.localsplus, probe.args[0]),
                ("localsplus[1]", l.localsplus + 8, probe.args[1]),
            ];
            for (name, off, want) in checks {
                let got = word(f, off);
                if got != want {
                    bad.push(format!(
                        "_PyInterpreterFrame.{name} at offset {off}: found {got:#x}, expected {want:#x}"
                    ));
                }
            }
        }
    }
}

/// Checks `layout` against the running copy behind `api`, using `extra_index` (an index
/// this copy gave us) for the `co_extra` check.
///
/// While the probe hook is the interpreter's evaluator, the probe function's `RESUME` may
/// hand the GIL to other threads: their frames go to the evaluator the probe stands for,
/// hooks they install chain to that evaluator, and uninstalling the hook it stands for
/// makes the check restore what that hook chained to.
///
/// # Safety
/// The GIL of this copy is held by the calling thread, and `extra_index` is an index this
/// copy gave out with a NULL free function (the check stores, then clears, an integer).
pub unsafe fn check(api: &Api, layout: Layout, extra_index: isize) -> Result<(), Error> {
    let version = super::version_string(api.version);
    let mismatch = |what: String| Error::LayoutMismatch {
        version: version.clone(),
        what,
    };
    // SAFETY: GIL held (caller); every object used is created and released here.
    unsafe {
        let globals = (api.dict_new)();
        if globals.is_null() {
            (api.err_clear)();
            return Err(mismatch("could not create the probe's globals".into()));
        }
        let builtins = (api.builtins)();
        (api.dict_set_item_string)(globals, c"__builtins__".as_ptr(), builtins);
        let src = c"def __frame_hooks_probe(a, b):\n    return b\n";
        let r = (api.run_string)(src.as_ptr(), 257, globals, globals, std::ptr::null_mut());
        if r.is_null() {
            (api.err_clear)();
            (api.decref)(globals);
            return Err(mismatch("the probe function did not compile".into()));
        }
        (api.decref)(r);
        let func = (api.dict_get_item_string)(globals, c"__frame_hooks_probe".as_ptr());
        let code = (api.getattr)(func, c"__code__".as_ptr());
        let a = (api.long_from_long)(1_234_567_891);
        let b = (api.long_from_long)(987_654_321);
        let result = (|| {
            // co_extra: the probe's code object is new, so its co_extra is NULL; storing
            // a marker through the API must change exactly that word from NULL to the
            // array holding the marker (only then is the word dereferenced).
            let marker = 0x5eed_f00d_usize as *mut c_void;
            let before = word(code as *const c_void, layout.co_extra);
            if (api.code_set_extra)(code, extra_index, marker) != 0 {
                (api.err_clear)();
                return Err(mismatch("_PyCode_SetExtra refused our index".into()));
            }
            let after = word(code as *const c_void, layout.co_extra);
            let ce = after as *const isize;
            let found = before == 0
                && after != 0
                && *ce > extra_index
                && *ce.add(1 + extra_index as usize) == marker as isize;
            (api.code_set_extra)(code, extra_index, std::ptr::null_mut());
            if !found {
                return Err(mismatch(format!(
                    "PyCodeObject.co_extra at offset {} does not hold the extra set through the API",
                    layout.co_extra
                )));
            }

            // The frame: run the probe function under a probe hook.
            let interp = (api.interp_get)();
            let prev = unprobed(interp as usize, (api.get_eval)(interp));
            let probe = Probe {
                layout,
                code: code as usize,
                func: func as usize,
                globals: globals as usize,
                builtins: builtins as usize,
                args: [a as usize, b as usize],
                interp: interp as usize,
                prev,
                seen: Cell::new(false),
                mismatches: Default::default(),
            };
            let old = PROBE.with(|p| p.replace(&probe));
            let id = NEXT_PROBE.fetch_add(1, Ordering::Relaxed);
            probed().push(Probed {
                id,
                interp: interp as usize,
                prev,
            });
            (api.set_eval)(interp, probe_eval);
            let args = (api.tuple_new)(2);
            (api.incref)(a);
            (api.incref)(b);
            (api.tuple_set_item)(args, 0, a);
            (api.tuple_set_item)(args, 1, b);
            let r = (api.call)(func, args, std::ptr::null_mut());
            // GIL held again: restore the evaluator the probe stands for (a hook may
            // have been uninstalled meanwhile, see `unprobe_hook`) and forget the probe,
            // unless a hook was installed over it (ours chain to what it stood for, see
            // `unprobed`; another library's may chain to the probe, which then keeps
            // forwarding this interpreter's frames).
            if is_probe((api.get_eval)(interp)) {
                let mut p = probed();
                let k = p.iter().position(|e| e.id == id);
                let restore = k.map_or(prev, |k| p.remove(k).prev);
                drop(p);
                (api.set_eval)(interp, restore);
            }
            PROBE.with(|p| p.set(old));
            (api.decref)(args);
            if r.is_null() {
                (api.err_clear)();
                return Err(mismatch("the probe function raised".into()));
            }
            let returned = r as usize;
            (api.decref)(r);
            if returned != b as usize {
                return Err(mismatch(
                    "the probe function returned the wrong object".into(),
                ));
            }
            if !probe.seen.get() {
                return Err(mismatch(format!(
                    "_PyInterpreterFrame.f_code at offset {} never held the probe's code object",
                    layout.f_code
                )));
            }
            let bad = probe.mismatches.into_inner();
            if !bad.is_empty() {
                return Err(mismatch(bad.join("; ")));
            }
            Ok(())
        })();
        (api.decref)(a);
        (api.decref)(b);
        (api.decref)(code);
        (api.decref)(globals);
        result
    }
}
