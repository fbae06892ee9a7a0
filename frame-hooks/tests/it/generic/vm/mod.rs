//! A small stack-bytecode interpreter written for the tests: code objects with embedded
//! code extras, frames evaluated through the hook slot, lazy frames for `current_frames`
//! and tracebacks, and a second evaluator (closure-compiled code) for Pyjion's algorithm.

#![allow(dead_code)]

use frame_hooks::{
    eval_frame, CodeExtras, ExtraRegistry, FrameRef, HookSlot, Interpreter, LiveFrame, PFrame,
    SkipMarks,
};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One instruction.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Const(i64),
    Load(usize),
    Store(usize),
    Add,
    Sub,
    Mul,
    Lt,
    /// Pops; jumps when zero.
    JumpIfFalse(usize),
    Jump(usize),
    /// Calls code `.0` with `.1` arguments popped (first argument deepest).
    Call(usize, usize),
    Ret,
    Raise(&'static str),
    /// Records the materialised stack of frames (a `sys._getframe` walk); pushes its depth.
    Frames,
    Pop,
}

/// A code object: bytecode plus the scratch space hooks use.
pub struct Code {
    pub name: &'static str,
    pub nargs: usize,
    pub nlocals: usize,
    pub ops: Vec<Op>,
    pub extras: CodeExtras,
}

/// What a materialised frame shows.
#[derive(Clone, Debug, PartialEq)]
pub struct FrameInfo {
    pub name: &'static str,
    pub pc: usize,
    pub locals: Vec<i64>,
}

/// An error with its traceback (innermost first).
#[derive(Debug)]
pub struct VmError {
    pub message: String,
    pub traceback: Vec<Arc<PFrame<FrameInfo>>>,
}

pub type Output = Result<i64, VmError>;

/// A running activation's state, readable by lazy frames.
pub struct Activation {
    pub code: Arc<Code>,
    pub locals: RefCell<Vec<i64>>,
    pub pc: Cell<usize>,
    pub snapshots: Arc<AtomicU64>,
}

impl LiveFrame for Activation {
    type Data = FrameInfo;
    fn snapshot(&self) -> FrameInfo {
        self.snapshots.fetch_add(1, Ordering::Relaxed);
        FrameInfo {
            name: self.code.name,
            pc: self.pc.get(),
            locals: self.locals.borrow().clone(),
        }
    }
}

/// A frame about to be evaluated: the activation and the caller's lazy reference.
pub struct Frame<'a> {
    pub act: Activation,
    pub caller: Option<&'a FrameRef<'a, FrameInfo>>,
}

impl Frame<'_> {
    pub fn code(&self) -> &Arc<Code> {
        &self.act.code
    }
    pub fn args(&self) -> Vec<i64> {
        self.act.locals.borrow()[..self.act.code.nargs].to_vec()
    }
}

/// The interpreter.
pub struct Vm {
    pub codes: Vec<Arc<Code>>,
    pub hooks: HookSlot<Vm>,
    pub registry: ExtraRegistry,
    /// Stacks recorded by `Frames` instructions.
    pub recorded: Mutex<Vec<Vec<Arc<PFrame<FrameInfo>>>>>,
    /// How many times a live activation was snapshotted (frames materialised or synced).
    pub snapshots: Arc<AtomicU64>,
    /// Instructions run by the default evaluator.
    pub default_ops: AtomicU64,
}

impl Interpreter for Vm {
    type Frame<'f> = Frame<'f>;
    type Output = Output;

    fn hook_slot(&self) -> &HookSlot<Self> {
        &self.hooks
    }

    fn skip_marks<'a>(&self, frame: &'a Frame<'_>) -> &'a SkipMarks {
        frame.act.code.extras.skip_marks()
    }

    fn eval_frame_default(&self, frame: &mut Frame<'_>, throw: bool) -> Output {
        let me = match frame.caller {
            Some(c) => c.callee(&frame.act),
            None => FrameRef::root(&frame.act),
        };
        if throw {
            return Err(self.error("thrown into frame", &me));
        }
        self.run(&me, &frame.act)
    }
}

impl Vm {
    /// An interpreter for `codes` (built with the registry so their extras belong to it).
    pub fn new(build: impl FnOnce(&ExtraRegistry) -> Vec<Code>) -> Vm {
        let registry = ExtraRegistry::new();
        let codes = build(&registry).into_iter().map(Arc::new).collect();
        Vm {
            codes,
            hooks: HookSlot::new(),
            registry,
            recorded: Mutex::new(Vec::new()),
            snapshots: Arc::new(AtomicU64::new(0)),
            default_ops: AtomicU64::new(0),
        }
    }

    pub fn code(&self, name: &str) -> &Arc<Code> {
        self.codes
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no code named {name}"))
    }

    pub fn new_frame<'a>(
        &self,
        code: &Arc<Code>,
        args: &[i64],
        caller: Option<&'a FrameRef<'a, FrameInfo>>,
    ) -> Frame<'a> {
        assert_eq!(
            args.len(),
            code.nargs,
            "{} takes {} arguments",
            code.name,
            code.nargs
        );
        let mut locals = vec![0; code.nlocals.max(code.nargs)];
        locals[..args.len()].copy_from_slice(args);
        Frame {
            act: Activation {
                code: code.clone(),
                locals: RefCell::new(locals),
                pc: Cell::new(0),
                snapshots: self.snapshots.clone(),
            },
            caller,
        }
    }

    /// Calls the code named `name` from outside (an outermost frame).
    pub fn call(&self, name: &str, args: &[i64]) -> Output {
        let mut frame = self.new_frame(self.code(name), args, None);
        eval_frame(self, &mut frame, false)
    }

    /// Resumes a fresh frame of `name` with the throw flag set.
    pub fn call_throw(&self, name: &str, args: &[i64]) -> Output {
        let mut frame = self.new_frame(self.code(name), args, None);
        eval_frame(self, &mut frame, true)
    }

    fn error(&self, message: &str, me: &FrameRef<'_, FrameInfo>) -> VmError {
        VmError {
            message: message.to_string(),
            traceback: vec![me.materialize()],
        }
    }

    fn run(&self, me: &FrameRef<'_, FrameInfo>, act: &Activation) -> Output {
        let code = &act.code;
        let mut stack: Vec<i64> = Vec::with_capacity(8);
        let mut pc = 0;
        loop {
            self.default_ops.fetch_add(1, Ordering::Relaxed);
            act.pc.set(pc);
            let op = code.ops[pc];
            pc += 1;
            match op {
                Op::Const(v) => stack.push(v),
                Op::Load(i) => stack.push(act.locals.borrow()[i]),
                Op::Store(i) => act.locals.borrow_mut()[i] = stack.pop().unwrap(),
                Op::Add | Op::Sub | Op::Mul | Op::Lt => {
                    let b = stack.pop().unwrap();
                    let a = stack.pop().unwrap();
                    stack.push(match op {
                        Op::Add => a + b,
                        Op::Sub => a - b,
                        Op::Mul => a * b,
                        _ => (a < b) as i64,
                    });
                }
                Op::JumpIfFalse(t) => {
                    if stack.pop().unwrap() == 0 {
                        pc = t;
                    }
                }
                Op::Jump(t) => pc = t,
                Op::Call(callee, argc) => {
                    let args = stack.split_off(stack.len() - argc);
                    let mut frame = self.new_frame(&self.codes[callee], &args, Some(me));
                    match eval_frame(self, &mut frame, false) {
                        Ok(v) => stack.push(v),
                        Err(mut e) => {
                            // The traceback grows as the error leaves each frame.
                            e.traceback.push(me.materialize());
                            return Err(e);
                        }
                    }
                }
                Op::Ret => return Ok(stack.pop().unwrap_or(0)),
                Op::Raise(msg) => return Err(self.error(msg, me)),
                Op::Frames => {
                    let frames = me.stack();
                    stack.push(frames.len() as i64);
                    self.recorded.lock().unwrap().push(frames);
                }
                Op::Pop => {
                    stack.pop();
                }
            }
        }
    }
}

/// A code object builder.
pub fn code(
    reg: &ExtraRegistry,
    name: &'static str,
    nargs: usize,
    nlocals: usize,
    ops: Vec<Op>,
) -> Code {
    Code {
        name,
        nargs,
        nlocals,
        ops,
        extras: reg.new_extras(),
    }
}

/// `fib(n) = n < 2 ? n : fib(n-1) + fib(n-2)` as code index `me`.
pub fn fib_code(reg: &ExtraRegistry, me: usize) -> Code {
    use Op::*;
    code(
        reg,
        "fib",
        1,
        1,
        vec![
            Load(0),
            Const(2),
            Lt,
            JumpIfFalse(6),
            Load(0),
            Ret,
            Load(0),
            Const(1),
            Sub,
            Call(me, 1),
            Load(0),
            Const(2),
            Sub,
            Call(me, 1),
            Add,
            Ret,
        ],
    )
}

/// The second evaluator of the Pyjion test: bytecode compiled to a vector of closures
/// (closure-threaded code). Codes with `Frames` or `Raise` are refused (compile failure).
/// One compiled instruction.
pub type StepFn = Box<dyn Fn(&Vm, &mut Machine<'_, '_>) -> Step + Send + Sync>;

pub struct Compiled {
    steps: Vec<StepFn>,
    pub runs: AtomicU64,
}

pub struct Machine<'m, 'a> {
    locals: Vec<i64>,
    stack: Vec<i64>,
    me: &'m FrameRef<'a, FrameInfo>,
}

pub enum Step {
    Next,
    Jump(usize),
    Return(i64),
    Fail(VmError),
}

impl Compiled {
    pub fn compile(code: &Code) -> Option<Compiled> {
        let mut steps: Vec<StepFn> = Vec::new();
        for &op in &code.ops {
            steps.push(match op {
                Op::Const(v) => Box::new(move |_, m| {
                    m.stack.push(v);
                    Step::Next
                }),
                Op::Load(i) => Box::new(move |_, m| {
                    m.stack.push(m.locals[i]);
                    Step::Next
                }),
                Op::Store(i) => Box::new(move |_, m| {
                    m.locals[i] = m.stack.pop().unwrap();
                    Step::Next
                }),
                Op::Add => bin(|a, b| a + b),
                Op::Sub => bin(|a, b| a - b),
                Op::Mul => bin(|a, b| a * b),
                Op::Lt => bin(|a, b| (a < b) as i64),
                Op::JumpIfFalse(t) => Box::new(move |_, m| {
                    if m.stack.pop().unwrap() == 0 {
                        Step::Jump(t)
                    } else {
                        Step::Next
                    }
                }),
                Op::Jump(t) => Box::new(move |_, _| Step::Jump(t)),
                Op::Call(callee, argc) => Box::new(move |vm: &Vm, m: &mut Machine<'_, '_>| {
                    let args = m.stack.split_off(m.stack.len() - argc);
                    let mut frame = vm.new_frame(&vm.codes[callee], &args, Some(m.me));
                    match eval_frame(vm, &mut frame, false) {
                        Ok(v) => {
                            m.stack.push(v);
                            Step::Next
                        }
                        Err(e) => Step::Fail(e),
                    }
                }),
                Op::Ret => Box::new(|_, m| Step::Return(m.stack.pop().unwrap_or(0))),
                Op::Pop => Box::new(|_, m| {
                    m.stack.pop();
                    Step::Next
                }),
                Op::Raise(_) | Op::Frames => return None,
            });
        }
        Some(Compiled {
            steps,
            runs: AtomicU64::new(0),
        })
    }

    /// Runs `frame` with the compiled code.
    pub fn eval(&self, vm: &Vm, frame: &mut Frame<'_>) -> Output {
        self.runs.fetch_add(1, Ordering::Relaxed);
        let me = match frame.caller {
            Some(c) => c.callee(&frame.act),
            None => FrameRef::root(&frame.act),
        };
        let mut m = Machine {
            locals: frame.act.locals.borrow().clone(),
            stack: Vec::with_capacity(8),
            me: &me,
        };
        let mut pc = 0;
        loop {
            match (self.steps[pc])(vm, &mut m) {
                Step::Next => pc += 1,
                Step::Jump(t) => pc = t,
                Step::Return(v) => return Ok(v),
                Step::Fail(e) => return Err(e),
            }
        }
    }
}

fn bin(f: fn(i64, i64) -> i64) -> StepFn {
    Box::new(move |_, m| {
        let b = m.stack.pop().unwrap();
        let a = m.stack.pop().unwrap();
        m.stack.push(f(a, b));
        Step::Next
    })
}
