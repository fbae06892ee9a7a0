//! Rust hooks in CPython's eval-frame slot: monomorphised trampolines (one per hook type
//! and slot, so the hook is called directly, not through a vtable), the per-thread
//! recursion guard, skip marks, the throw flag, and panics turned into exceptions.

use super::api::{Api, EvalFrameFn, InterpreterFrame, PyObject, PyThreadState};
use super::layout::{word, Layout};
use super::{Error, Python};
use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_int, c_void, CStr, CString};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

/// How many hooks may be installed at once in the whole process (over all copies).
pub const MAX_HOOKS: usize = 8;

/// A frame-evaluation hook for CPython.
pub trait FrameHook: Send + Sync + 'static {
    /// Evaluates `frame`, usually by calling [`Frame::eval`] around its own work, or by
    /// returning [`Frame::pass_through`] when it has nothing to do after the frame ran.
    /// Must return the result of evaluating the frame (or of [`Frame::raise`] or
    /// [`Frame::pass_through`]). The result is tied to the frame (`'f`): a result of
    /// another frame cannot be returned, nor kept past the hook call (it could not be
    /// released without the GIL).
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f>;

    /// Whether frames resumed with the throw flag (`generator.throw()`, an exception
    /// thrown into a coroutine, closing a generator) reach the hook. By default they go
    /// straight to the previous evaluator, as torchdynamo does.
    const WANTS_THROWS: bool = false;
}

/// The part of an installed hook's state that is not generic.
pub(crate) struct HookCommon {
    api: &'static Api,
    layout: Layout,
    prev: EvalFrameFn,
    skip_index: isize,
    /// The trampoline must read the code object: on 3.13 (to check `f_executable` is a
    /// code object) and once a skip mark was set. One load and test while not.
    slow_checks: GilFlag,
    /// This hook has set a skip mark (its marks must be read).
    skip_marks: GilFlag,
    /// This hook's skip mark in the bitmask stored in code objects (in the code-extra
    /// index `skip_index` of its slot): the slot's 16 bits (`mark_mask`) holding the
    /// install's generation (`mark`), so that a mark left by an earlier hook of the same
    /// slot does not apply to this one (until the generation wraps, after 65,535
    /// installs in one slot).
    mark: usize,
    mark_mask: usize,
    python: Python,
    /// Set when `prev` is the trampoline of another hook of this crate: that hook's state
    /// as it was when this one was installed, called directly. A trampoline reads its
    /// slot's *current* state, and a slot is reused once its hook is uninstalled, while
    /// frames of this hook may still be running and calling `prev`.
    chain: Option<Chain>,
}

/// The entry of a hook's state captured by the hook installed over it. `extern "C"` (it
/// never unwinds: the hook's panics are caught inside), so that calling it lets the
/// compiler drop the unwinding paths of a hook that cannot panic, as it does for CPython's
/// evaluators.
/// The state comes last, so CPython's three arguments stay in their registers.
type ChainFn = unsafe extern "C" fn(
    *mut PyThreadState,
    *mut InterpreterFrame,
    c_int,
    *const c_void,
) -> *mut PyObject;

/// A hook of this crate as the next hook chains to it: its (never freed) state and the
/// monomorphised entry that runs it.
#[derive(Clone, Copy)]
struct Chain {
    state: usize,
    entry: ChainFn,
}

impl HookCommon {
    /// Calls the evaluator this hook was installed over.
    ///
    /// # Safety
    /// CPython's own arguments of the current call, the GIL held.
    #[inline(always)]
    unsafe fn call_prev(
        &self,
        tstate: *mut PyThreadState,
        frame: *mut InterpreterFrame,
        throw: c_int,
    ) -> *mut PyObject {
        match self.chain {
            // SAFETY: `state` is the leaked SlotState that `entry` was made for.
            Some(c) => unsafe { (c.entry)(tstate, frame, throw, c.state as *const c_void) },
            // SAFETY: the caller passes CPython's arguments; prev is an evaluator of this
            // copy that is not one of our trampolines.
            None => unsafe { (self.prev)(tstate, frame, throw) },
        }
    }
}

/// A flag read and written only with the GIL of the copy their hook is installed in held
/// (by the trampoline and by [`Frame::skip_code`]): a plain load on the trampoline's path,
/// which, unlike an atomic load, the compiler may drop when the hook's result does not
/// depend on it (a pass-through hook).
struct GilFlag(UnsafeCell<bool>);

// SAFETY: every access happens with the same interpreter's GIL held (see above), which
// orders them.
unsafe impl Sync for GilFlag {}

impl GilFlag {
    fn new(value: bool) -> GilFlag {
        GilFlag(UnsafeCell::new(value))
    }

    /// # Safety
    /// The GIL of the hook's interpreter is held.
    #[inline(always)]
    unsafe fn get(&self) -> bool {
        // SAFETY: the caller holds the GIL, under which every write happens.
        unsafe { *self.0.get() }
    }

    /// # Safety
    /// As for `get`.
    unsafe fn set(&self) {
        // SAFETY: as above.
        unsafe { *self.0.get() = true }
    }
}

struct SlotState<H> {
    common: HookCommon,
    hook: Arc<H>,
}

static SLOTS: [AtomicPtr<c_void>; MAX_HOOKS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_HOOKS];
static TAKEN: Mutex<[bool; MAX_HOOKS]> = Mutex::new([false; MAX_HOOKS]);
/// Per slot, while its hook is installed: its trampoline's address and how a hook
/// installed over it calls it. Changed under the GIL of the copy the hook is in.
static ACTIVE: Mutex<[Option<(usize, Chain)>; MAX_HOOKS]> = Mutex::new([None; MAX_HOOKS]);
/// Per slot, the generation of its latest install (1..=65535, 0 never used), under
/// `TAKEN`.
static GENERATION: Mutex<[u16; MAX_HOOKS]> = Mutex::new([0; MAX_HOOKS]);
/// Hook slots whose skip marks share one code-extra word (16 bits each).
const SLOTS_PER_MARK_WORD: usize = 4;
const _: () = assert!(
    SLOTS_PER_MARK_WORD * 16 <= usize::BITS as usize && MAX_HOOKS <= 2 * SLOTS_PER_MARK_WORD,
    "16 bits of skip marks per slot, in two code-extra words"
);

thread_local! {
    /// Bit `s` set: the hook of slot `s` runs its own code on this thread.
    static GUARD: Cell<u32> = const { Cell::new(0) };
}

/// A new reference returned by an evaluation (NULL with an exception set on error).
/// Dropping it releases the reference. The result of [`Frame::pass_through`] holds none
/// yet (NULL, but no exception set): the frame is evaluated after the hook returns.
///
/// It belongs to the hook call of its frame (`'f`): it can be neither returned for
/// another frame nor kept past the call, where it could only be released without the
/// GIL. Keeping one does not compile:
///
/// ```compile_fail
/// use frame_hooks::cpython::{EvalResult, Frame, FrameHook};
/// use std::cell::RefCell;
/// thread_local! {
///     static KEPT: RefCell<Option<EvalResult<'static>>> = const { RefCell::new(None) };
/// }
/// struct Keeper;
/// impl FrameHook for Keeper {
///     fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
///         let r = frame.eval();
///         KEPT.with(|k| *k.borrow_mut() = Some(r)); // `'f` does not outlive `'static`
///         frame.pass_through()
///     }
/// }
/// ```
#[must_use = "an evaluation's result is what the hook returns"]
pub struct EvalResult<'f> {
    obj: *mut PyObject,
    api: &'static Api,
    /// The lifetime of the [`Frame`] that made it, which is local to one hook call (the
    /// hook is generic over it): only that call can return it, and it cannot be kept.
    _frame: PhantomData<&'f ()>,
}

impl EvalResult<'_> {
    /// Whether the evaluation returned a value (not an exception; false for the result
    /// of [`Frame::pass_through`]).
    #[inline]
    pub fn is_ok(&self) -> bool {
        !self.obj.is_null()
    }

    /// The returned object (borrowed; NULL on error and for [`Frame::pass_through`]).
    pub fn as_ptr(&self) -> *mut PyObject {
        self.obj
    }

    #[inline]
    fn into_raw(self) -> *mut PyObject {
        let p = self.obj;
        std::mem::forget(self);
        p
    }
}

impl Drop for EvalResult<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.obj.is_null() {
            // SAFETY: we own one reference; results are dropped on the thread that holds
            // the GIL (inside the hook that made them).
            unsafe { (self.api.decref)(self.obj) }
        }
    }
}

/// A code object of the copy, borrowed for `'a`.
#[derive(Clone, Copy)]
pub struct CodeRef<'a> {
    ptr: *mut PyObject,
    api: &'static Api,
    _life: PhantomData<&'a PyObject>,
}

impl<'a> CodeRef<'a> {
    /// A reference to the code object at `ptr`.
    ///
    /// # Safety
    /// `ptr` is a live code object of the copy behind `python`, alive for `'a`, and the
    /// GIL is held while the reference is used.
    pub unsafe fn from_ptr(python: &Python, ptr: *mut PyObject) -> CodeRef<'a> {
        CodeRef {
            ptr,
            api: python.api(),
            _life: PhantomData,
        }
    }

    /// The code object's address (its identity).
    pub fn as_ptr(&self) -> *mut PyObject {
        self.ptr
    }

    /// The C API table of the copy the code object belongs to.
    pub fn api(&self) -> &'static Api {
        self.api
    }

    /// `co_qualname`.
    pub fn qualname(&self) -> String {
        // SAFETY: a live code object under the GIL (CodeRef's invariant).
        unsafe { self.api.attr_string(self.ptr, c"co_qualname") }.unwrap_or_default()
    }

    /// `co_name`.
    pub fn name(&self) -> String {
        // SAFETY: as above.
        unsafe { self.api.attr_string(self.ptr, c"co_name") }.unwrap_or_default()
    }

    /// `co_filename`.
    pub fn filename(&self) -> String {
        // SAFETY: as above.
        unsafe { self.api.attr_string(self.ptr, c"co_filename") }.unwrap_or_default()
    }

    /// `co_firstlineno`.
    pub fn first_line(&self) -> i64 {
        // SAFETY: as above.
        unsafe { self.api.attr_long(self.ptr, c"co_firstlineno") }.unwrap_or(0)
    }

    /// An integer attribute of the code object (`co_argcount`, `co_flags`, ...).
    pub fn attr_long(&self, name: &CStr) -> Option<i64> {
        // SAFETY: as above.
        unsafe { self.api.attr_long(self.ptr, name) }
    }

    /// The names of the parameters, in the order of the frame's first local slots.
    pub fn parameter_names(&self) -> Vec<String> {
        self.varnames(self.parameter_count())
    }

    /// The names of the plain local variables (`co_varnames`, parameters first), in the
    /// order of the frame's first `co_nlocals` slots.
    pub fn local_names(&self) -> Vec<String> {
        self.varnames(usize::MAX)
    }

    /// The first `n` names of `co_varnames`.
    fn varnames(&self, n: usize) -> Vec<String> {
        let api = self.api;
        // SAFETY: as above; co_varnames is a tuple of str whose entries name the first
        // local slots, parameters first (the layout of `localsplus` in 3.11-3.13).
        unsafe {
            let saved = api.save_error();
            let names = (api.getattr)(self.ptr, c"co_varnames".as_ptr());
            let mut out = Vec::new();
            if names.is_null() {
                (api.err_clear)();
            } else {
                let n = n.min((api.tuple_size)(names).max(0) as usize);
                for i in 0..n {
                    let item = (api.tuple_get_item)(names, i as isize);
                    if item.is_null() {
                        (api.err_clear)();
                        break;
                    }
                    out.push(api.str_of(item).unwrap_or_default());
                }
                (api.decref)(names);
            }
            api.restore_error(saved);
            out
        }
    }

    /// How many local slots hold parameters (positional, keyword-only, `*args`,
    /// `**kwargs`).
    pub fn parameter_count(&self) -> usize {
        let flags = self.attr_long(c"co_flags").unwrap_or(0);
        let n = self.attr_long(c"co_argcount").unwrap_or(0)
            + self.attr_long(c"co_kwonlyargcount").unwrap_or(0)
            + i64::from(flags & 0x4 != 0)
            + i64::from(flags & 0x8 != 0);
        n.max(0) as usize
    }
}

/// `_PyInterpreterFrame.owner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameOwner {
    /// On the thread's frame stack (`FRAME_OWNED_BY_THREAD`).
    Thread,
    /// Inside a generator, coroutine or async generator (`FRAME_OWNED_BY_GENERATOR`).
    Generator,
    /// Inside a frame object (`FRAME_OWNED_BY_FRAME_OBJECT`).
    FrameObject,
    /// A C-stack shim frame (`FRAME_OWNED_BY_CSTACK`, 3.12+).
    CStack,
    /// A value this crate does not know.
    Unknown(u8),
}

/// `co_flags` bits of generator, coroutine and async-generator code.
pub const CO_GENERATOR_LIKE: i64 = 0x20 | 0x80 | 0x100 | 0x200;

/// `Frame::consumed`: the hook has not evaluated the frame yet.
const NOT_EVALUATED: u8 = 0;
/// The hook evaluated (or raised in) the frame.
const EVALUATED: u8 = 1;
/// The hook returned [`Frame::pass_through`]'s promise: the trampoline evaluates the frame.
const PASSED: u8 = 2;

/// The frame a hook is asked to evaluate.
pub struct Frame<'a> {
    common: &'a HookCommon,
    tstate: *mut PyThreadState,
    frame: *mut InterpreterFrame,
    throw: c_int,
    /// [`NOT_EVALUATED`], [`EVALUATED`] or [`PASSED`].
    consumed: &'a Cell<u8>,
    /// This hook's guard bit (a constant of the trampoline, so the compiler can see that
    /// lifting the guard around `eval` restores the value it found).
    bit: u32,
    /// The guard word when the trampoline entered the hook (our bit clear).
    entry_guard: u32,
}

impl<'a> Frame<'a> {
    /// The frame's code object (kept alive by the frame while the hook runs).
    #[inline]
    pub fn code(&self) -> CodeRef<'a> {
        CodeRef {
            ptr: self.code_ptr(),
            api: self.common.api,
            _life: PhantomData,
        }
    }

    #[inline(always)]
    fn code_ptr(&self) -> *mut PyObject {
        // SAFETY: a live frame; f_code/f_executable is at the checked offset (and the
        // trampoline checked it is a code object on 3.13).
        unsafe { word(self.frame as *const c_void, self.common.layout.f_code) as *mut PyObject }
    }

    /// Who owns the frame: the thread's frame stack for a plain call (and for the call
    /// that creates a generator or coroutine), the generator for its resumptions.
    pub fn owner(&self) -> FrameOwner {
        // SAFETY: `owner` is a char at the checked offset of a live frame.
        let raw = unsafe { *(self.frame as *const u8).add(self.common.layout.owner) };
        match raw {
            0 => FrameOwner::Thread,
            1 => FrameOwner::Generator,
            2 => FrameOwner::FrameObject,
            3 => FrameOwner::CStack,
            other => FrameOwner::Unknown(other),
        }
    }

    /// Whether the frame is resumed to raise (generator/coroutine `throw`).
    #[inline]
    pub fn throw_flag(&self) -> bool {
        self.throw != 0
    }

    /// The copy this frame belongs to.
    pub fn python(&self) -> &Python {
        &self.common.python
    }

    /// The raw `_PyInterpreterFrame` (valid during this call only).
    pub fn as_ptr(&self) -> *mut InterpreterFrame {
        self.frame
    }

    /// The thread state the frame runs on.
    pub fn tstate(&self) -> *mut PyThreadState {
        self.tstate
    }

    /// Whether this frame was already evaluated (or raised, or passed through) by this
    /// hook.
    pub fn is_consumed(&self) -> bool {
        self.consumed.get() != NOT_EVALUATED
    }

    #[inline(always)]
    fn consume(&self, how: u8) {
        assert!(
            self.consumed.replace(how) == NOT_EVALUATED,
            "a frame was evaluated twice by one hook"
        );
    }

    #[inline]
    fn run(&mut self, default: bool, throw: c_int) -> EvalResult<'a> {
        self.consume(EVALUATED);
        let entry = self.entry_guard;
        // Lift the guard around the evaluation, and set it again after it: the word is the
        // entry word plus our bit here (trampolines, `eval` and `reentrant` leave the word
        // as they found it), so lifting stores the entry word (which, for a hook the
        // compiler sees through, is the word the trampoline loaded: the store is dropped).
        GUARD.with(|c| c.set(entry));
        // SAFETY: the frame and thread state CPython gave the trampoline, evaluated once.
        let obj = unsafe {
            if default {
                (self.common.api.eval_default)(self.tstate, self.frame, throw)
            } else {
                self.common.call_prev(self.tstate, self.frame, throw)
            }
        };
        let bit = self.bit;
        GUARD.with(|c| c.set(c.get() | bit));
        EvalResult {
            obj,
            api: self.common.api,
            _frame: PhantomData,
        }
    }

    /// Evaluates the frame with the evaluator this hook was installed over (the copy's
    /// default or an earlier hook), throw flag passed through. Frames it calls are hooked.
    #[inline]
    pub fn eval(&mut self) -> EvalResult<'a> {
        self.run(false, self.throw)
    }

    /// Passes the frame on: once the hook has returned, the frame is evaluated with the
    /// evaluator this hook was installed over (throw flag passed through), as
    /// [`Frame::eval`] would, with the recursion guard lifted. For a hook with nothing to
    /// do after the frame ran (a filter, an entry counter, a breakpoint): the trampoline
    /// jumps to the evaluator rather than calling it, so neither the hook nor the
    /// trampoline keeps a stack frame while the evaluated one runs, and a hook that passes
    /// every frame through costs about what a C pass-through hook does. The hook's own
    /// code up to its return still runs under the recursion guard. The result holds no
    /// object; whatever the hook returns after calling this is released, and the frame
    /// evaluated. A hook that panics after calling it leaves the frame unevaluated (a
    /// `RuntimeError` is raised in it).
    #[inline(always)]
    pub fn pass_through(&mut self) -> EvalResult<'a> {
        self.consume(PASSED);
        EvalResult {
            obj: std::ptr::null_mut(),
            api: self.common.api,
            _frame: PhantomData,
        }
    }

    /// Evaluates the frame with this copy's own `_PyEval_EvalFrameDefault`.
    #[inline]
    pub fn eval_default(&mut self) -> EvalResult<'a> {
        self.run(true, self.throw)
    }

    /// Raises `RuntimeError(message)` in this frame instead of running it: the exception
    /// is thrown into the frame, so the copy's own evaluator unwinds and clears it.
    pub fn raise(&mut self, message: &str) -> EvalResult<'a> {
        set_runtime_error(self.common.api, message);
        self.run(false, 1)
    }

    /// The object in local slot `i` (borrowed; `None` if unset or if `i` is not below
    /// `co_nlocals`). Parameters occupy the first slots; before `RESUME`, cell parameters
    /// are still plain values.
    pub fn local(&self, i: usize) -> Option<*mut PyObject> {
        let nlocals = self.code().attr_long(c"co_nlocals").unwrap_or(0).max(0) as usize;
        if i >= nlocals {
            return None;
        }
        // SAFETY: slot i < co_nlocals is a live word of the frame's localsplus.
        let p = unsafe {
            word(
                self.frame as *const c_void,
                self.common.layout.localsplus + 8 * i,
            )
        };
        (p != 0).then_some(p as *mut PyObject)
    }

    /// The parameters as `(name, repr)` pairs. `repr` runs Python code, which is not
    /// hooked by this hook (the recursion guard).
    pub fn arguments(&self) -> Vec<(String, String)> {
        self.named_reprs(self.code().parameter_names())
            .into_iter()
            .map(|(name, value)| (name, value.unwrap_or_else(|| "<unset>".into())))
            .collect()
    }

    /// Every plain local variable as `(name, repr)`, `None` for one not bound yet (at the
    /// hook's call only the parameters are). `repr` runs unhooked by this hook.
    pub fn locals(&self) -> Vec<(String, Option<String>)> {
        self.named_reprs(self.code().local_names())
    }

    fn named_reprs(&self, names: Vec<String>) -> Vec<(String, Option<String>)> {
        names
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                // SAFETY: a live object in the frame's locals; GIL held.
                let value = self
                    .local(i)
                    .map(|obj| unsafe { self.common.api.repr_of(obj) });
                (name, value)
            })
            .collect()
    }

    /// Marks the frame's code object: its later frames bypass this hook.
    pub fn skip_code(&self) {
        let api = self.common.api;
        // SAFETY: GIL held; our own index holds an integer bitmask (NULL free function).
        unsafe {
            self.common.skip_marks.set();
            self.common.slow_checks.set();
            let code = self.code_ptr();
            let old = skip_bits(&self.common.layout, code, self.common.skip_index);
            let new = (old & !self.common.mark_mask) | self.common.mark;
            (api.code_set_extra)(code, self.common.skip_index, new as *mut c_void);
        }
    }

    /// Runs `f` with the recursion guard lifted: frames `f` evaluates reach this hook.
    pub fn reentrant<R>(&self, f: impl FnOnce() -> R) -> R {
        let bit = self.bit;
        let g = GUARD.with(|g| g.get());
        GUARD.with(|c| c.set(g & !bit));
        struct Restore(u32);
        impl Drop for Restore {
            fn drop(&mut self) {
                GUARD.with(|c| c.set(self.0));
            }
        }
        let _r = Restore(g);
        f()
    }
}

/// The skip bitmask stored in our extra index of `code` (0 if none).
///
/// # Safety
/// `code` is a live code object of the copy whose checked layout is `layout`.
#[inline(always)]
unsafe fn skip_bits(layout: &Layout, code: *mut PyObject, index: isize) -> usize {
    // SAFETY: co_extra is at the checked offset; it is NULL or a {size, extras[size]}.
    unsafe {
        let ce = word(code as *const c_void, layout.co_extra) as *const isize;
        if ce.is_null() || *ce <= index {
            0
        } else {
            *ce.add(1 + index as usize) as usize
        }
    }
}

fn set_runtime_error(api: &Api, message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // SAFETY: GIL held (we are inside a hook); a valid exception type and message.
    unsafe { (api.err_set_string)(api.exc_runtime_error, c.as_ptr()) }
}

/// CPython's entry for the hook of slot `S`.
unsafe extern "C" fn trampoline<H: FrameHook, const S: usize>(
    tstate: *mut PyThreadState,
    frame: *mut InterpreterFrame,
    throw: c_int,
) -> *mut PyObject {
    // CPython calls this trampoline only while it is the interpreter's evaluator, that is
    // while the install that put it there is active (hooks of ours chained over it do not
    // come through here but through `chained`, with the state they captured).
    // SAFETY: so slot S holds that install's SlotState<H> (states are never freed, so one
    // read at entry stays valid however long the frame runs).
    let st = unsafe { &*(SLOTS[S].load(Ordering::Acquire) as *const SlotState<H>) };
    // SAFETY: CPython's own arguments.
    unsafe { enter::<H, S>(st, tstate, frame, throw) }
}

/// The entry of the hook of slot `S` for the hook installed over it: `state` is the
/// state captured at that install, whatever slot S holds now. (If the hook was since
/// uninstalled and slot S reused, the two share the slot's recursion-guard bit.)
///
/// # Safety
/// `state` is a leaked `SlotState<H>` of slot `S`; CPython's own arguments, GIL held.
unsafe extern "C" fn chained<H: FrameHook, const S: usize>(
    tstate: *mut PyThreadState,
    frame: *mut InterpreterFrame,
    throw: c_int,
    state: *const c_void,
) -> *mut PyObject {
    // SAFETY: the caller's contract.
    unsafe { enter::<H, S>(&*(state as *const SlotState<H>), tstate, frame, throw) }
}

/// Whether the frame must bypass the hook: its code is marked skipped for this hook, or
/// (3.13) `f_executable` is not a code object.
///
/// # Safety
/// A live frame of the hook's copy; the GIL held.
#[inline(always)]
unsafe fn bypassed(c: &HookCommon, frame: *mut InterpreterFrame) -> bool {
    // SAFETY: the GIL is held.
    if !unsafe { c.slow_checks.get() } {
        return false;
    }
    // SAFETY: a live frame; f_code/f_executable is at the checked offset.
    let code = unsafe { word(frame as *const c_void, c.layout.f_code) } as *mut PyObject;
    if c.layout.executable_may_not_be_code {
        // SAFETY: `code` is a live object (a strong reference held by the frame): its
        // type is the word after the reference count.
        let ty = unsafe { word(code as *const c_void, 8) };
        if ty != c.api.code_type as usize {
            return true;
        }
    }
    // SAFETY: the GIL is held.
    if !unsafe { c.skip_marks.get() } {
        return false;
    }
    // SAFETY: `code` is a live code object of this copy.
    let marks = unsafe { skip_bits(&c.layout, code, c.skip_index) };
    marks & c.mark_mask == c.mark
}

/// Runs the hook of `st` (slot `S`) on a frame.
///
/// Every way of handing the frame to the previous evaluator unchanged (guard set, throw
/// flag, skip mark, [`Frame::pass_through`]) ends at the one call at the bottom, with
/// nothing live after it: it compiles to a jump, and for a hook that passes every frame
/// through the compiler folds the rest away.
///
/// # Safety
/// CPython's own arguments of the current call, the GIL held.
#[inline(always)]
unsafe fn enter<H: FrameHook, const S: usize>(
    st: &SlotState<H>,
    tstate: *mut PyThreadState,
    frame: *mut InterpreterFrame,
    throw: c_int,
) -> *mut PyObject {
    let c = &st.common;
    let bit = 1u32 << S;
    let g = GUARD.with(|g| g.get());
    // Not re-entered while the hook's own code runs on this thread; frames resumed to
    // throw go to the previous evaluator unless the hook asks for them.
    // SAFETY: a live frame of this copy, the GIL held.
    if g & bit == 0 && (throw == 0 || H::WANTS_THROWS) && !unsafe { bypassed(c, frame) } {
        GUARD.with(|cell| cell.set(g | bit));
        let consumed = Cell::new(NOT_EVALUATED);
        let mut f = Frame {
            common: c,
            tstate,
            frame,
            throw,
            consumed: &consumed,
            bit,
            entry_guard: g,
        };
        let r = catch_unwind(AssertUnwindSafe(|| st.hook.eval_frame(&mut f)));
        // Back to the word found on entry (`g`, our bit clear): whoever changed it since
        // (a nested trampoline, `Frame::eval`, `Frame::reentrant`) restored it, so both
        // stores below change only our bit. Clearing the bit needs no register kept
        // across the call in `Frame::eval`; storing `g` lets the compiler see, for a hook
        // that only passes through, that the word never changed, and drop the stores.
        match (r, consumed.get()) {
            (Ok(res), EVALUATED) => {
                GUARD.with(|cell| cell.set(cell.get() & !bit));
                return res.into_raw();
            }
            (Ok(res), PASSED) => {
                GUARD.with(|cell| cell.set(g));
                // Passed through: evaluated below.
                drop(res);
            }
            (r, state) => {
                GUARD.with(|cell| cell.set(g));
                // SAFETY: CPython's arguments; `state` says whether the frame ran.
                return unsafe { not_evaluated(c, r, state, tstate, frame) };
            }
        };
    }
    // SAFETY: CPython's own arguments, the frame not evaluated yet, the guard as found.
    unsafe { c.call_prev(tstate, frame, throw) }
}

/// The end of a hook that panicked or returned without evaluating its frame: a
/// `RuntimeError` raised in the frame (thrown into it if it did not run yet).
///
/// # Safety
/// CPython's arguments of the current call, GIL held; `state` is the frame's `consumed`.
#[cold]
#[inline(never)]
unsafe fn not_evaluated(
    c: &HookCommon,
    r: std::thread::Result<EvalResult<'_>>,
    state: u8,
    tstate: *mut PyThreadState,
    frame: *mut InterpreterFrame,
) -> *mut PyObject {
    match r {
        Ok(res) => {
            // The hook returned without evaluating: the frame would leak (3.12+) or run
            // nowhere. Raise in it instead.
            drop(res);
            set_runtime_error(c.api, "frame hook returned without evaluating the frame");
        }
        Err(payload) => {
            let msg = format!("panic in frame hook: {}", super::panic_message(&*payload));
            tracing::warn!(%msg, "frame hook panicked; raising RuntimeError in the frame");
            set_runtime_error(c.api, &msg);
            if state == EVALUATED {
                // The frame ran (and CPython cleared it as usual); its result, if any,
                // was released while unwinding.
                return std::ptr::null_mut();
            }
        }
    }
    // SAFETY: the frame was not evaluated yet; throwing into it makes the evaluator
    // unwind and clear it (3.12+) and record the traceback.
    unsafe { c.call_prev(tstate, frame, 1) }
}

/// The trampoline of `H` in `slot`, and the entry for a hook chained over it.
fn entries_for<H: FrameHook>(slot: usize) -> (EvalFrameFn, ChainFn) {
    match slot {
        0 => (trampoline::<H, 0>, chained::<H, 0>),
        1 => (trampoline::<H, 1>, chained::<H, 1>),
        2 => (trampoline::<H, 2>, chained::<H, 2>),
        3 => (trampoline::<H, 3>, chained::<H, 3>),
        4 => (trampoline::<H, 4>, chained::<H, 4>),
        5 => (trampoline::<H, 5>, chained::<H, 5>),
        6 => (trampoline::<H, 6>, chained::<H, 6>),
        7 => (trampoline::<H, 7>, chained::<H, 7>),
        _ => unreachable!("slot {slot} >= MAX_HOOKS"),
    }
}

/// An installed hook; uninstalled by [`Installed::uninstall`] or on drop.
pub struct Installed<H: FrameHook> {
    python: Python,
    slot: usize,
    hook: Arc<H>,
    tramp: EvalFrameFn,
    prev: EvalFrameFn,
    active: bool,
}

impl Python {
    /// Installs `hook` in front of the copy's current evaluator (which it chains to).
    /// Refused while the interpreter is finalising or when all [`MAX_HOOKS`] trampolines
    /// are in use. Takes the GIL.
    pub fn install<H: FrameHook>(&self, hook: Arc<H>) -> Result<Installed<H>, Error> {
        let api = self.api();
        // SAFETY: callable at any time.
        if unsafe { (api.is_finalizing)() } != 0 {
            return Err(Error::Finalizing);
        }
        // SAFETY: callable at any time.
        if unsafe { (api.is_initialized)() } == 0 {
            return Err(Error::NotInitialized);
        }
        let (slot, generation) = {
            let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
            let slot = taken
                .iter()
                .position(|t| !t)
                .ok_or(Error::NoFreeSlot(MAX_HOOKS))?;
            taken[slot] = true;
            let mut generations = GENERATION.lock().unwrap_or_else(|e| e.into_inner());
            let g = &mut generations[slot];
            *g = g.checked_add(1).unwrap_or(1);
            (slot, *g)
        };
        self.with_gil(|| {
            // SAFETY: GIL held.
            let interp = unsafe { (api.interp_get)() };
            // SAFETY: GIL held; reading this interpreter's eval function (the one a
            // layout check in progress on another thread stands in for, if it is that
            // check's probe).
            let prev = super::layout::unprobed(interp as usize, unsafe { (api.get_eval)(interp) });
            let mut active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
            // Over a hook of ours: capture its state now (its slot may be reused by
            // another hook while frames of this one still call it).
            let chain = active
                .iter()
                .flatten()
                .find(|(tramp, _)| *tramp == prev as usize)
                .map(|(_, chain)| *chain);
            let state = Box::new(SlotState {
                common: HookCommon {
                    api,
                    layout: self.inner.layout,
                    prev,
                    skip_index: self.inner.skip_index[slot / SLOTS_PER_MARK_WORD],
                    slow_checks: GilFlag::new(self.inner.layout.executable_may_not_be_code),
                    skip_marks: GilFlag::new(false),
                    mark: usize::from(generation) << (16 * (slot % SLOTS_PER_MARK_WORD)),
                    mark_mask: 0xffff << (16 * (slot % SLOTS_PER_MARK_WORD)),
                    python: self.clone(),
                    chain,
                },
                hook: hook.clone(),
            });
            // States are never freed: a frame entered through this trampoline may still
            // be running on some thread when the hook is uninstalled.
            let state = Box::into_raw(state);
            SLOTS[slot].store(state.cast(), Ordering::Release);
            let (tramp, entry) = entries_for::<H>(slot);
            active[slot] = Some((
                tramp as usize,
                Chain {
                    state: state as usize,
                    entry,
                },
            ));
            drop(active);
            // SAFETY: GIL held; the trampoline is a valid _PyFrameEvalFunction.
            unsafe { (api.set_eval)(interp, tramp) };
            tracing::debug!(slot, "frame hook installed");
            Ok(Installed {
                python: self.clone(),
                slot,
                hook,
                tramp,
                prev,
                active: true,
            })
        })
    }
}

impl<H: FrameHook> Installed<H> {
    /// The hook.
    pub fn hook(&self) -> &Arc<H> {
        &self.hook
    }

    /// The copy the hook is installed in.
    pub fn python(&self) -> &Python {
        &self.python
    }

    /// The evaluator this hook chains to (what `_PyInterpreterState_GetEvalFrameFunc`
    /// returned when it was installed).
    pub fn previous(&self) -> EvalFrameFn {
        self.prev
    }

    /// Whether the hook is still installed.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Restores the evaluator this hook was installed over. Refused with
    /// [`Error::NotCurrent`] if another hook was installed after this one. May be called
    /// from inside a hooked call (the frames already running finish normally).
    pub fn uninstall(&mut self) -> Result<(), Error> {
        if !self.active {
            return Ok(());
        }
        let api = self.python.api();
        self.python.with_gil(|| {
            // SAFETY: GIL held.
            let interp = unsafe { (api.interp_get)() };
            // SAFETY: GIL held.
            let cur = unsafe { (api.get_eval)(interp) };
            if cur as usize == self.tramp as usize {
                // `prev` is this copy's own evaluator (its own `_PyEval_EvalFrameDefault`
                // when nothing else was installed), which the setter recognises as
                // "default".
                // SAFETY: GIL held; prev is a valid eval function of this copy.
                unsafe { (api.set_eval)(interp, self.prev) };
            } else if !super::layout::unprobe_hook(interp as usize, cur, self.tramp, self.prev) {
                return Err(Error::NotCurrent);
            }
            // (Else a layout check on another thread (`Python::new`) has its probe in
            // front of this hook: the check restores `prev` instead of the hook.)
            // No hook can be installed over this one from now on.
            ACTIVE.lock().unwrap_or_else(|e| e.into_inner())[self.slot] = None;
            Ok(())
        })?;
        self.active = false;
        TAKEN.lock().unwrap_or_else(|e| e.into_inner())[self.slot] = false;
        tracing::debug!(slot = self.slot, "frame hook uninstalled");
        Ok(())
    }
}

impl<H: FrameHook> Drop for Installed<H> {
    fn drop(&mut self) {
        if self.active {
            let api = self.python.api();
            // SAFETY: both are callable at any time.
            let gone = unsafe { (api.is_finalizing)() != 0 || (api.is_initialized)() == 0 };
            if gone {
                // The interpreter is finalising or finalised: its eval function no longer
                // matters and its GIL can no longer be taken.
                return;
            }
            if let Err(e) = self.uninstall() {
                tracing::warn!(error = %e, "frame hook left installed on drop");
            }
        }
    }
}

// SAFETY: Installed holds an Arc<H> (H: Send + Sync), a Python handle and function
// pointers; uninstalling takes the GIL on whatever thread calls it.
unsafe impl<H: FrameHook> Send for Installed<H> {}
// SAFETY: &Installed only reads plain fields.
unsafe impl<H: FrameHook> Sync for Installed<H> {}
