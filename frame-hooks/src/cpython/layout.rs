//! The `_PyInterpreterFrame` and `PyCodeObject` offsets of each supported version,
//! checked against the running libpython before any hook is installed.
//!
//! The check runs a known function under a probe hook and requires that the words at the
//! version's offsets hold that function's code object, function, globals, builtins and
//! arguments; and it stores a marker with the copy's own `_PyCode_SetExtra` and requires
//! to find it through the version's `co_extra` offset. Any difference is an error naming
//! the field, the offset and the version.

use super::api::{Api, EvalFrameFn, InterpreterFrame, PyObject, PyThreadState};
use super::Error;
use std::cell::Cell;
use std::ffi::{c_int, c_void};

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
    prev: EvalFrameFn,
    seen: Cell<bool>,
    mismatches: std::cell::RefCell<Vec<String>>,
}

thread_local! {
    static PROBE: Cell<*const Probe> = const { Cell::new(std::ptr::null()) };
}

unsafe extern "C" fn probe_eval(
    tstate: *mut PyThreadState,
    frame: *mut InterpreterFrame,
    throw: c_int,
) -> *mut PyObject {
    let p = PROBE.with(|p| p.get());
    // SAFETY: `check` set PROBE to a Probe that outlives the call that runs this hook on
    // this thread; frames are live `_PyInterpreterFrame`s given by CPython.
    unsafe {
        let probe = &*p;
        let f = frame as *const c_void;
        let l = probe.layout;
        if word(f, l.f_code) == probe.code {
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
        (probe.prev)(tstate, frame, throw)
    }
}

/// Checks `layout` against the running copy behind `api`, using `extra_index` (an index
/// this copy gave us) for the `co_extra` check.
///
/// # Safety
/// The GIL of this copy is held by the calling thread and no other hook of ours is being
/// installed on this interpreter concurrently.
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
            let prev = (api.get_eval)(interp);
            let probe = Probe {
                layout,
                code: code as usize,
                func: func as usize,
                globals: globals as usize,
                builtins: builtins as usize,
                args: [a as usize, b as usize],
                prev,
                seen: Cell::new(false),
                mismatches: Default::default(),
            };
            let old = PROBE.with(|p| p.replace(&probe));
            (api.set_eval)(interp, probe_eval);
            let args = (api.tuple_new)(2);
            (api.incref)(a);
            (api.incref)(b);
            (api.tuple_set_item)(args, 0, a);
            (api.tuple_set_item)(args, 1, b);
            let r = (api.call)(func, args, std::ptr::null_mut());
            (api.set_eval)(interp, prev);
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
