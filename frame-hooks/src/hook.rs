//! The eval-frame hook slot for interpreters written in Rust (PEP 523's
//! `interp->eval_frame`).
//!
//! An interpreter implements [`Interpreter`] and routes every frame evaluation through
//! [`eval_frame`]: with no hook installed that is one atomic load and one pointer
//! comparison before the interpreter's own evaluator runs. [`HookSlot::install`] puts an
//! [`EvalHook`] in front, chained to whatever was current (the hook reaches it with
//! [`HookCx::eval_next`]); [`HookSlot::uninstall`] restores it.
//!
//! While a hook's own code runs on a thread, frames that code evaluates (directly or
//! through the interpreter) go to the next evaluator instead of re-entering the same hook:
//! the per-thread recursion guard. The guard is lifted while the hook evaluates the frame
//! it was given ([`HookCx::eval_next`], [`HookCx::eval_default`]) and inside
//! [`HookCx::reentrant`], for a hook that asks to see its own evaluations. A hook can mark
//! a code object skipped ([`HookCx::skip_code`]): later frames of that code bypass it.
//! The throw flag (resume-with-exception, as for `generator.throw()`) is passed through;
//! a hook that replaces evaluation must leave throwing frames to the default path.

use crate::extra::SkipMarks;
use std::cell::RefCell;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Mutex;

/// What the generic layer needs from an interpreter.
pub trait Interpreter: Sized + 'static {
    /// The interpreter's frame (an activation about to be evaluated).
    type Frame<'f>;
    /// What evaluating a frame gives (a value or an error).
    type Output;

    /// The interpreter's hook slot.
    fn hook_slot(&self) -> &HookSlot<Self>;
    /// The skip marks of the code object `frame` runs (usually its `CodeExtras`).
    fn skip_marks<'a>(&self, frame: &'a Self::Frame<'_>) -> &'a SkipMarks;
    /// The interpreter's own evaluator (PEP 523's `_PyEval_EvalFrameDefault`).
    fn eval_frame_default(&self, frame: &mut Self::Frame<'_>, throw: bool) -> Self::Output;
}

/// A frame evaluation hook.
pub trait EvalHook<I: Interpreter>: Send + Sync + 'static {
    /// Evaluates `cx.frame()`, usually by calling [`HookCx::eval_next`] around its own work.
    fn eval_frame(&self, cx: &mut HookCx<'_, '_, '_, I>) -> I::Output;
}

impl<I: Interpreter, F> EvalHook<I> for F
where
    F: for<'a, 'b, 'c> Fn(&mut HookCx<'a, 'b, 'c, I>) -> I::Output + Send + Sync + 'static,
{
    fn eval_frame(&self, cx: &mut HookCx<'_, '_, '_, I>) -> I::Output {
        self(cx)
    }
}

/// Identifies an installed hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HookId(*const ());

// SAFETY: a HookId is an opaque identity (never dereferenced through the id itself).
unsafe impl Send for HookId {}
// SAFETY: as above.
unsafe impl Sync for HookId {}

/// Errors of the hook slot.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HookError {
    /// The hook to uninstall is not the current one (another was installed after it).
    #[error("hook {0:?} is not the current hook of this slot (another hook was installed after it); uninstall that one first")]
    NotCurrent(HookId),
    /// The slot already had its 64 hooks with skip marks.
    #[error("this hook slot has had 64 hooks installed; no skip-mark bit is left")]
    TooManyHooks,
}

struct HookNode<I: Interpreter> {
    hook: Box<dyn EvalHook<I>>,
    prev: *const HookNode<I>,
    skip_bit: u64,
}

/// The per-interpreter hook slot. Installed hooks stay allocated until the slot is
/// dropped (frames evaluated through a hook may still be running when it is replaced;
/// hooks are few and installing them is rare).
pub struct HookSlot<I: Interpreter> {
    current: AtomicPtr<HookNode<I>>,
    nodes: Mutex<Vec<*mut HookNode<I>>>,
    next_bit: AtomicU32,
}

// SAFETY: the raw node pointers are owned by the slot (freed only in Drop) and the hooks
// they hold are Send + Sync.
unsafe impl<I: Interpreter> Send for HookSlot<I> {}
// SAFETY: as above; `current` is atomic and `nodes` behind a Mutex.
unsafe impl<I: Interpreter> Sync for HookSlot<I> {}

impl<I: Interpreter> Default for HookSlot<I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: Interpreter> Drop for HookSlot<I> {
    fn drop(&mut self) {
        for node in self
            .nodes
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            // SAFETY: every node was made by Box::into_raw in `install` and is freed once.
            drop(unsafe { Box::from_raw(node) });
        }
    }
}

impl<I: Interpreter> HookSlot<I> {
    /// An empty slot: frames go to the interpreter's own evaluator.
    pub fn new() -> Self {
        HookSlot {
            current: AtomicPtr::new(std::ptr::null_mut()),
            nodes: Mutex::new(Vec::new()),
            next_bit: AtomicU32::new(0),
        }
    }

    /// Whether no hook is installed (the PEP's "is it `_PyEval_EvalFrameDefault`?").
    pub fn is_default(&self) -> bool {
        self.current.load(Ordering::Acquire).is_null()
    }

    /// The current hook, if any (PEP 523's get).
    pub fn current(&self) -> Option<HookId> {
        let p = self.current.load(Ordering::Acquire);
        (!p.is_null()).then_some(HookId(p as *const ()))
    }

    /// Installs `hook` in front of the current evaluator, which it chains to.
    pub fn install(&self, hook: impl EvalHook<I>) -> Result<HookId, HookError> {
        let bit = self.next_bit.fetch_add(1, Ordering::Relaxed);
        if bit >= 64 {
            return Err(HookError::TooManyHooks);
        }
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let prev = self.current.load(Ordering::Acquire);
        let node = Box::into_raw(Box::new(HookNode {
            hook: Box::new(hook),
            prev,
            skip_bit: 1u64 << bit,
        }));
        nodes.push(node);
        self.current.store(node, Ordering::Release);
        Ok(HookId(node as *const ()))
    }

    /// Removes `id`, which must be the current hook; the evaluator it chained to becomes
    /// current again (PEP 523's set with the saved previous function).
    pub fn uninstall(&self, id: HookId) -> Result<(), HookError> {
        let _nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let cur = self.current.load(Ordering::Acquire);
        if cur as *const () != id.0 {
            return Err(HookError::NotCurrent(id));
        }
        // SAFETY: `cur` is a live node of this slot (nodes are freed only on drop).
        let prev = unsafe { (*cur).prev };
        self.current.store(prev.cast_mut(), Ordering::Release);
        Ok(())
    }
}

thread_local! {
    /// Hooks whose own code is running on this thread (the recursion guard).
    static GUARDED: RefCell<Vec<*const ()>> = const { RefCell::new(Vec::new()) };
}

fn guarded(node: *const ()) -> bool {
    GUARDED.with(|g| g.borrow().contains(&node))
}

/// Puts `node` under the guard until dropped.
struct Guard(*const ());

impl Guard {
    fn enter(node: *const ()) -> Guard {
        GUARDED.with(|g| g.borrow_mut().push(node));
        Guard(node)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        GUARDED.with(|g| {
            let mut g = g.borrow_mut();
            if let Some(pos) = g.iter().rposition(|&n| n == self.0) {
                g.remove(pos);
            }
        });
    }
}

/// Lifts the guard of `node` until dropped (restoring it if it was set).
struct Unguard(Option<*const ()>);

impl Unguard {
    fn lift(node: *const ()) -> Unguard {
        GUARDED.with(|g| {
            let mut g = g.borrow_mut();
            match g.iter().rposition(|&n| n == node) {
                Some(pos) => {
                    g.remove(pos);
                    Unguard(Some(node))
                }
                None => Unguard(None),
            }
        })
    }
}

impl Drop for Unguard {
    fn drop(&mut self) {
        if let Some(node) = self.0 {
            GUARDED.with(|g| g.borrow_mut().push(node));
        }
    }
}

/// Evaluates `frame` through the interpreter's hook slot: the interpreter calls this
/// wherever it would call its own evaluator.
#[inline]
pub fn eval_frame<I: Interpreter>(interp: &I, frame: &mut I::Frame<'_>, throw: bool) -> I::Output {
    let node = interp.hook_slot().current.load(Ordering::Acquire);
    if node.is_null() {
        interp.eval_frame_default(frame, throw)
    } else {
        dispatch(interp, node, frame, throw)
    }
}

#[inline(never)]
fn dispatch<I: Interpreter>(
    interp: &I,
    mut node: *const HookNode<I>,
    frame: &mut I::Frame<'_>,
    throw: bool,
) -> I::Output {
    // Walk past hooks that are guarded on this thread or skip this code object.
    loop {
        if node.is_null() {
            return interp.eval_frame_default(frame, throw);
        }
        // SAFETY: nodes stay allocated as long as the slot (the interpreter) lives.
        let n = unsafe { &*node };
        if guarded(node as *const ()) || interp.skip_marks(frame).contains(n.skip_bit) {
            node = n.prev;
            continue;
        }
        let _guard = Guard::enter(node as *const ());
        let mut cx = HookCx {
            interp,
            node: n,
            frame,
            throw,
        };
        return n.hook.eval_frame(&mut cx);
    }
}

/// What a hook gets: the frame, the throw flag, and the ways to evaluate the frame.
pub struct HookCx<'i, 'f, 'g, I: Interpreter> {
    interp: &'i I,
    node: &'i HookNode<I>,
    frame: &'f mut I::Frame<'g>,
    throw: bool,
}

impl<'i, 'f, 'g, I: Interpreter> HookCx<'i, 'f, 'g, I> {
    /// The interpreter.
    pub fn interp(&self) -> &'i I {
        self.interp
    }

    /// The frame to evaluate.
    pub fn frame(&self) -> &I::Frame<'g> {
        self.frame
    }

    /// The frame, mutably (a hook may rewrite it before evaluating).
    pub fn frame_mut(&mut self) -> &mut I::Frame<'g> {
        self.frame
    }

    /// Whether the frame is resumed to raise an exception (`generator.throw()`).
    pub fn throw_flag(&self) -> bool {
        self.throw
    }

    /// This hook's identity.
    pub fn hook_id(&self) -> HookId {
        HookId(self.node as *const HookNode<I> as *const ())
    }

    /// Evaluates the frame with the evaluator this hook chained to (the previous hook or
    /// the interpreter's own), with the throw flag passed through. Frames called from it
    /// are hooked again.
    pub fn eval_next(&mut self) -> I::Output {
        let _lift = Unguard::lift(self.node as *const HookNode<I> as *const ());
        let prev = self.node.prev;
        if prev.is_null() {
            self.interp.eval_frame_default(self.frame, self.throw)
        } else {
            dispatch(self.interp, prev, self.frame, self.throw)
        }
    }

    /// Evaluates the frame with the interpreter's own evaluator, bypassing any hooks this
    /// one chained to.
    pub fn eval_default(&mut self) -> I::Output {
        let _lift = Unguard::lift(self.node as *const HookNode<I> as *const ());
        self.interp.eval_frame_default(self.frame, self.throw)
    }

    /// Evaluates the frame with `evaluator` (e.g. compiled code) unless the throw flag is
    /// set, in which case the next evaluator handles the throw.
    pub fn eval_with(
        &mut self,
        evaluator: impl FnOnce(&I, &mut I::Frame<'g>) -> I::Output,
    ) -> I::Output {
        if self.throw {
            return self.eval_next();
        }
        let _lift = Unguard::lift(self.node as *const HookNode<I> as *const ());
        evaluator(self.interp, self.frame)
    }

    /// Runs `f` with this hook's recursion guard lifted: frames `f` evaluates come back
    /// to this hook.
    pub fn reentrant<R>(&self, f: impl FnOnce() -> R) -> R {
        let _lift = Unguard::lift(self.node as *const HookNode<I> as *const ());
        f()
    }

    /// Marks the frame's code object: its later frames bypass this hook.
    pub fn skip_code(&self) {
        self.interp
            .skip_marks(self.frame)
            .insert(self.node.skip_bit);
    }

    /// Clears this hook's skip mark on the frame's code object.
    pub fn unskip_code(&self) {
        self.interp
            .skip_marks(self.frame)
            .remove(self.node.skip_bit);
    }
}
