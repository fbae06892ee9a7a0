//! The generic layer on a small bytecode interpreter (`tests/it/generic/vm`): Pyjion's algorithm
//! from the PEP, a call tracer, a breakpoint by code identity, chaining, the recursion
//! guard, skip marks, the throw flag, code extras, and lazy frames.

mod vm;

use frame_hooks::{ExtraError, ExtraRegistry, HookCx, HookError};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use vm::{code, fib_code, Compiled, Op, Vm};

fn fib_vm() -> Vm {
    Vm::new(|reg| vec![fib_code(reg, 0)])
}

fn fib(n: i64) -> i64 {
    if n < 2 {
        n
    } else {
        fib(n - 1) + fib(n - 2)
    }
}

fn calls_of_fib(n: u64) -> u64 {
    if n < 2 {
        1
    } else {
        1 + calls_of_fib(n - 1) + calls_of_fib(n - 2)
    }
}

#[test]
fn unset_slot_runs_the_default_evaluator() {
    let vm = fib_vm();
    assert!(vm.hooks.is_default());
    assert_eq!(vm.hooks.current(), None);
    assert_eq!(vm.call("fib", &[15]).unwrap(), fib(15));
    assert_eq!(
        vm.snapshots.load(Ordering::Relaxed),
        0,
        "no frame was materialised"
    );
}

/// The PEP's Pyjion algorithm: an execution count in code extra, a switch to a second
/// evaluator (compiled code) after N calls, and a failed compile remembered.
struct PyjionCode {
    exec_count: AtomicU64,
    jit_failed: AtomicBool,
    jit_code: OnceLock<Compiled>,
}

#[test]
fn pyjion_switches_to_the_second_evaluator_after_n_calls() {
    const N: u64 = 20;
    let vm = Arc::new(Vm::new(|reg| {
        vec![
            fib_code(reg, 0),
            code(reg, "frames", 0, 0, vec![Op::Frames, Op::Ret]),
            code(reg, "many", 0, 0, vec![Op::Call(1, 0), Op::Ret]),
        ]
    }));
    let freed = Arc::new(AtomicUsize::new(0));
    let f = freed.clone();
    let index = vm
        .registry
        .request_code_extra_index::<PyjionCode>(move |_| {
            f.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    vm.hooks
        .install(move |cx: &mut HookCx<'_, '_, '_, Vm>| {
            let code = cx.frame().code().clone();
            let Some(pj) = index.get(&code.extras) else {
                index.get_or_init(&code.extras, || PyjionCode {
                    exec_count: AtomicU64::new(1),
                    jit_failed: AtomicBool::new(false),
                    jit_code: OnceLock::new(),
                });
                return cx.eval_next();
            };
            if !pj.jit_failed.load(Ordering::Relaxed) {
                if let Some(jit) = pj.jit_code.get() {
                    return cx.eval_with(|vm, frame| jit.eval(vm, frame));
                } else if pj.exec_count.load(Ordering::Relaxed) > N {
                    match Compiled::compile(&code) {
                        Some(c) => {
                            let jit = pj.jit_code.get_or_init(|| c);
                            return cx.eval_with(|vm, frame| jit.eval(vm, frame));
                        }
                        None => pj.jit_failed.store(true, Ordering::Relaxed),
                    }
                }
            }
            pj.exec_count.fetch_add(1, Ordering::Relaxed);
            cx.eval_next()
        })
        .unwrap();

    let before = vm.default_ops.load(Ordering::Relaxed);
    assert_eq!(vm.call("fib", &[18]).unwrap(), fib(18));
    let fib_code = vm.code("fib");
    let pj = index
        .get(&fib_code.extras)
        .expect("fib has its Pyjion data");
    // The first N+1 calls ran on the default evaluator, every later one compiled.
    assert_eq!(pj.exec_count.load(Ordering::Relaxed), N + 1);
    let jit = pj.jit_code.get().expect("fib was compiled");
    assert_eq!(jit.runs.load(Ordering::Relaxed), calls_of_fib(18) - (N + 1));
    let default_ops = vm.default_ops.load(Ordering::Relaxed) - before;
    assert!(
        default_ops < 16 * (N + 1),
        "{default_ops} ops on the default evaluator"
    );

    // A code the second evaluator cannot compile: remembered as failed, default after.
    for _ in 0..(N + 5) {
        assert_eq!(vm.call("many", &[]).unwrap(), 2);
    }
    let frames = index.get(&vm.code("frames").extras).unwrap();
    assert!(frames.jit_failed.load(Ordering::Relaxed));
    assert!(frames.jit_code.get().is_none());
    assert_eq!(frames.exec_count.load(Ordering::Relaxed), N + 5);
    // `many` itself compiles, and its compiled code still calls `frames` through the hook.
    assert!(index
        .get(&vm.code("many").extras)
        .unwrap()
        .jit_code
        .get()
        .is_some());

    // Dropping the interpreter drops its code objects, which free their Pyjion data.
    drop(vm);
    assert_eq!(freed.load(Ordering::Relaxed), 3);
}

#[test]
fn call_tracer_sees_every_call_with_its_depth() {
    use Op::*;
    let vm = Vm::new(|reg| {
        vec![
            code(reg, "main", 0, 0, vec![Call(1, 0), Pop, Call(2, 0), Ret]),
            code(reg, "a", 0, 0, vec![Call(2, 0), Ret]),
            code(reg, "b", 0, 0, vec![Const(7), Ret]),
        ]
    });
    let log = Arc::new(Mutex::new(Vec::new()));
    let depth = Arc::new(AtomicUsize::new(0));
    let (l, d) = (log.clone(), depth.clone());
    vm.hooks
        .install(move |cx: &mut HookCx<'_, '_, '_, Vm>| {
            let level = d.fetch_add(1, Ordering::Relaxed);
            l.lock()
                .unwrap()
                .push(format!("{}{}", "  ".repeat(level), cx.frame().code().name));
            let r = cx.eval_next();
            d.fetch_sub(1, Ordering::Relaxed);
            r
        })
        .unwrap();
    assert_eq!(vm.call("main", &[]).unwrap(), 7);
    assert_eq!(
        *log.lock().unwrap(),
        ["main", "  a", "    b", "  b"],
        "tracer output"
    );
}

#[test]
fn breakpoint_by_code_identity_sees_the_arguments() {
    use Op::*;
    let vm = Vm::new(|reg| {
        vec![
            code(
                reg,
                "main",
                0,
                0,
                vec![
                    Const(3),
                    Const(4),
                    Call(1, 2),
                    Const(5),
                    Const(6),
                    Call(2, 2),
                    Add,
                    Ret,
                ],
            ),
            code(reg, "target", 2, 2, vec![Load(0), Load(1), Mul, Ret]),
            // Same name and bytecode, another code object: not the breakpoint.
            code(reg, "target", 2, 2, vec![Load(0), Load(1), Mul, Ret]),
        ]
    });
    let target = Arc::as_ptr(&vm.codes[1]) as usize;
    let hits = Arc::new(Mutex::new(Vec::new()));
    let h = hits.clone();
    vm.hooks
        .install(move |cx: &mut HookCx<'_, '_, '_, Vm>| {
            if Arc::as_ptr(cx.frame().code()) as usize == target {
                h.lock().unwrap().push(cx.frame().args());
            }
            cx.eval_next()
        })
        .unwrap();
    assert_eq!(vm.call("main", &[]).unwrap(), 12 + 30);
    assert_eq!(*hits.lock().unwrap(), vec![vec![3, 4]]);
}

#[test]
fn hooks_chain_and_uninstall_in_order() {
    let vm = fib_vm();
    let order = Arc::new(Mutex::new(Vec::new()));
    let (o1, o2) = (order.clone(), order.clone());
    let first = vm
        .hooks
        .install(move |cx: &mut HookCx<'_, '_, '_, Vm>| {
            o1.lock().unwrap().push("first");
            cx.eval_next()
        })
        .unwrap();
    let second = vm
        .hooks
        .install(move |cx: &mut HookCx<'_, '_, '_, Vm>| {
            o2.lock().unwrap().push("second");
            cx.eval_next()
        })
        .unwrap();
    assert_eq!(vm.hooks.current(), Some(second));
    assert_eq!(vm.call("fib", &[1]).unwrap(), 1);
    assert_eq!(*order.lock().unwrap(), ["second", "first"]);
    assert_eq!(vm.hooks.uninstall(first), Err(HookError::NotCurrent(first)));
    vm.hooks.uninstall(second).unwrap();
    assert_eq!(vm.hooks.current(), Some(first));
    vm.hooks.uninstall(first).unwrap();
    assert!(vm.hooks.is_default());
    order.lock().unwrap().clear();
    assert_eq!(vm.call("fib", &[5]).unwrap(), 5);
    assert!(order.lock().unwrap().is_empty());
}

#[test]
fn recursion_guard_keeps_a_hooks_own_evaluations_out_unless_asked() {
    use Op::*;
    let vm = Arc::new(Vm::new(|reg| {
        vec![
            code(reg, "main", 0, 0, vec![Call(1, 0), Ret]),
            code(reg, "leaf", 0, 0, vec![Const(1), Ret]),
            code(reg, "helper", 0, 0, vec![Const(2), Ret]),
        ]
    }));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reenter = Arc::new(AtomicBool::new(false));
    let (s, r, v) = (seen.clone(), reenter.clone(), Arc::downgrade(&vm));
    vm.hooks
        .install(move |cx: &mut HookCx<'_, '_, '_, Vm>| {
            let name = cx.frame().code().name;
            s.lock().unwrap().push(name);
            if name != "helper" {
                // The hook's own work evaluates code of the same interpreter.
                let vm = v.upgrade().unwrap();
                let got = if r.load(Ordering::Relaxed) {
                    cx.reentrant(|| vm.call("helper", &[]))
                } else {
                    vm.call("helper", &[])
                };
                assert_eq!(got.unwrap(), 2);
            }
            cx.eval_next()
        })
        .unwrap();
    assert_eq!(vm.call("main", &[]).unwrap(), 1);
    assert_eq!(
        *seen.lock().unwrap(),
        ["main", "leaf"],
        "helper ran unhooked"
    );
    seen.lock().unwrap().clear();
    reenter.store(true, Ordering::Relaxed);
    assert_eq!(vm.call("main", &[]).unwrap(), 1);
    assert_eq!(
        *seen.lock().unwrap(),
        ["main", "helper", "leaf", "helper"],
        "with reentrant() the hook sees its own evaluations"
    );
}

#[test]
fn guard_is_per_thread() {
    let vm = Arc::new(fib_vm());
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    vm.hooks
        .install(move |cx: &mut HookCx<'_, '_, '_, Vm>| {
            c.fetch_add(1, Ordering::Relaxed);
            cx.eval_next()
        })
        .unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| assert_eq!(vm.call("fib", &[12]).unwrap(), fib(12)));
        }
    });
    assert_eq!(calls.load(Ordering::Relaxed), 4 * calls_of_fib(12));
}

#[test]
fn skip_mark_bypasses_only_the_hook_that_set_it() {
    use Op::*;
    let vm = Vm::new(|reg| {
        vec![
            code(
                reg,
                "main",
                0,
                0,
                vec![Call(1, 0), Call(1, 0), Add, Call(1, 0), Add, Ret],
            ),
            code(reg, "noisy", 0, 0, vec![Const(1), Ret]),
        ]
    });
    let inner_seen = Arc::new(AtomicU64::new(0));
    let outer_seen = Arc::new(AtomicU64::new(0));
    let (i, o) = (inner_seen.clone(), outer_seen.clone());
    vm.hooks
        .install(move |cx: &mut HookCx<'_, '_, '_, Vm>| {
            if cx.frame().code().name == "noisy" {
                i.fetch_add(1, Ordering::Relaxed);
            }
            cx.eval_next()
        })
        .unwrap();
    vm.hooks
        .install(move |cx: &mut HookCx<'_, '_, '_, Vm>| {
            if cx.frame().code().name == "noisy" {
                o.fetch_add(1, Ordering::Relaxed);
                cx.skip_code();
            }
            cx.eval_next()
        })
        .unwrap();
    assert_eq!(vm.call("main", &[]).unwrap(), 3);
    assert_eq!(
        outer_seen.load(Ordering::Relaxed),
        1,
        "skipped after its first call"
    );
    assert_eq!(
        inner_seen.load(Ordering::Relaxed),
        3,
        "the other hook still sees it"
    );
}

#[test]
fn throw_flag_is_passed_through_and_replacement_evaluators_stay_out() {
    let vm = fib_vm();
    let flags = Arc::new(Mutex::new(Vec::new()));
    let compiled_ran = Arc::new(AtomicBool::new(false));
    let (f, c) = (flags.clone(), compiled_ran.clone());
    vm.hooks
        .install(move |cx: &mut HookCx<'_, '_, '_, Vm>| {
            f.lock().unwrap().push(cx.throw_flag());
            let c = c.clone();
            cx.eval_with(move |vm, frame| {
                c.store(true, Ordering::Relaxed);
                vm::Compiled::compile(frame.code()).unwrap().eval(vm, frame)
            })
        })
        .unwrap();
    let err = vm.call_throw("fib", &[3]).unwrap_err();
    assert_eq!(err.message, "thrown into frame");
    assert_eq!(*flags.lock().unwrap(), [true]);
    assert!(!compiled_ran.load(Ordering::Relaxed));
    assert_eq!(vm.call("fib", &[3]).unwrap(), 2);
    assert!(compiled_ran.load(Ordering::Relaxed));
}

#[test]
fn code_extras_free_on_replace_and_drop_and_report_the_limit() {
    let reg: ExtraRegistry<3> = ExtraRegistry::new();
    let freed = Arc::new(Mutex::new(Vec::new()));
    let f = freed.clone();
    let names = reg
        .request_code_extra_index::<String>(move |s| f.lock().unwrap().push(s))
        .unwrap();
    let counts = reg.request_code_extra_index::<u64>(|_| {}).unwrap();
    let _third = reg.request_code_extra_index::<()>(|_| {}).unwrap();
    assert_eq!(
        reg.request_code_extra_index::<u8>(|_| {}).unwrap_err(),
        ExtraError::Exhausted { capacity: 3 }
    );
    assert_eq!(
        ExtraError::Exhausted { capacity: 3 }.to_string(),
        "code extra indices exhausted: all 3 indices of this interpreter's registry are taken"
    );
    assert_eq!(reg.used(), 3);

    let mut extras = reg.new_extras();
    assert_eq!(names.get(&extras), None);
    assert_eq!(counts.get(&extras), None);
    assert_eq!(names.get_or_init(&extras, || "first".into()), "first");
    assert_eq!(names.get_or_init(&extras, || "ignored".into()), "first");
    assert!(freed.lock().unwrap().is_empty());
    names.replace(&mut extras, "second".into());
    assert_eq!(*freed.lock().unwrap(), ["first"]);
    counts.replace(&mut extras, 9);
    assert_eq!(counts.get(&extras), Some(&9));
    assert_eq!(counts.take(&mut extras), Some(9));
    assert_eq!(counts.get(&extras), None);
    drop(extras);
    assert_eq!(*freed.lock().unwrap(), ["first", "second"]);
}

#[test]
fn get_or_init_race_keeps_one_value_and_frees_the_others() {
    let reg: ExtraRegistry = ExtraRegistry::new();
    let freed = Arc::new(AtomicUsize::new(0));
    let f = freed.clone();
    let idx = reg
        .request_code_extra_index::<usize>(move |_| {
            f.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    let inits = AtomicUsize::new(0);
    for _ in 0..50 {
        let extras = reg.new_extras();
        let barrier = std::sync::Barrier::new(4);
        let winners: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|t| {
                    let (extras, barrier, inits) = (&extras, &barrier, &inits);
                    s.spawn(move || {
                        barrier.wait();
                        *idx.get_or_init(extras, || {
                            inits.fetch_add(1, Ordering::Relaxed);
                            t
                        })
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(winners.iter().all(|&w| w == winners[0]), "{winners:?}");
    }
    drop(reg);
    // Every value made was freed exactly once: losers at once, winners with their code.
    assert_eq!(freed.load(Ordering::Relaxed), inits.load(Ordering::Relaxed));
    assert!(inits.load(Ordering::Relaxed) >= 50);
}

#[test]
#[should_panic(expected = "used with a code object of another interpreter's registry")]
fn an_index_of_another_registry_is_refused() {
    let a: ExtraRegistry = ExtraRegistry::new();
    let b: ExtraRegistry = ExtraRegistry::new();
    let idx = a.request_code_extra_index::<u8>(|_| {}).unwrap();
    let extras = b.new_extras();
    let _ = idx.get(&extras);
}

#[test]
fn lazy_frames_traceback_keeps_every_frames_locals_after_return() {
    use Op::*;
    let vm = Vm::new(|reg| {
        vec![
            // main: x = 10; r = outer(x); (never reached)
            code(
                reg,
                "main",
                0,
                1,
                vec![Const(10), Store(0), Load(0), Call(1, 1), Ret],
            ),
            // outer(a): b = a * 2; inner(b)
            code(
                reg,
                "outer",
                1,
                2,
                vec![Load(0), Const(2), Mul, Store(1), Load(1), Call(2, 1), Ret],
            ),
            // inner(c): d = c + 1; raise
            code(
                reg,
                "inner",
                1,
                2,
                vec![Load(0), Const(1), Add, Store(1), Raise("boom")],
            ),
        ]
    });
    let err = vm.call("main", &[]).unwrap_err();
    assert_eq!(err.message, "boom");
    let tb: Vec<_> = err
        .traceback
        .iter()
        .map(|f| {
            assert!(f.returned(), "every frame's call returned");
            let d = f.data();
            (d.name, d.locals.clone())
        })
        .collect();
    assert_eq!(
        tb,
        [
            ("inner", vec![20, 21]),
            ("outer", vec![10, 20]),
            ("main", vec![10]),
        ]
    );
    // The innermost frame's caller chain is the same materialised frames.
    let back: Vec<_> = std::iter::successors(Some(err.traceback[0].clone()), |f| f.back().cloned())
        .map(|f| f.data().name)
        .collect();
    assert_eq!(back, ["inner", "outer", "main"]);
}

#[test]
fn lazy_frames_are_built_only_when_asked_and_filled_in_on_return() {
    use Op::*;
    let vm = Vm::new(|reg| {
        vec![
            // main: v = 1; leaf(); v = fib-like work without frames; v = 2; probe(); v = 3
            code(
                reg,
                "main",
                0,
                1,
                vec![
                    Const(1),
                    Store(0),
                    Call(2, 0),
                    Pop,
                    Const(2),
                    Store(0),
                    Call(1, 0),
                    Pop,
                    Const(3),
                    Store(0),
                    Ret,
                ],
            ),
            // probe: w = 5; frames(); w = 6
            code(
                reg,
                "probe",
                0,
                1,
                vec![
                    Const(5),
                    Store(0),
                    Frames,
                    Pop,
                    Const(6),
                    Store(0),
                    Const(0),
                    Ret,
                ],
            ),
            code(reg, "leaf", 0, 0, vec![Const(0), Ret]),
        ]
    });
    vm.call("main", &[]).unwrap();
    let recorded = vm.recorded.lock().unwrap();
    let stack = &recorded[0];
    let names: Vec<_> = stack.iter().map(|f| f.data().name).collect();
    assert_eq!(
        names,
        ["probe", "main"],
        "leaf returned before anyone asked"
    );
    // Filled in when each call returned: the final locals, not those at the walk.
    assert_eq!(stack[0].data().locals, [6]);
    assert_eq!(stack[1].data().locals, [3]);
    assert!(stack.iter().all(|f| f.returned()));
    // Two snapshots at the walk, two when the escaped calls returned; none for leaf.
    assert_eq!(vm.snapshots.load(Ordering::Relaxed), 4);
}

mod model {
    //! Random sequences of hook installs, uninstalls, calls and extra operations checked
    //! against a simple model.

    use super::vm::{code, Op, Vm};
    use frame_hooks::{ExtraRegistry, HookCx, HookError, HookId};
    use proptest::prelude::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Debug)]
    enum HookOp {
        Install,
        /// Uninstall the k-th installed hook (mod the number installed).
        Uninstall(usize),
        Call,
    }

    fn hook_op() -> impl Strategy<Value = HookOp> {
        prop_oneof![
            Just(HookOp::Install),
            (0usize..8).prop_map(HookOp::Uninstall),
            Just(HookOp::Call),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn hook_chain_matches_a_stack(ops in proptest::collection::vec(hook_op(), 1..40)) {
            let vm = Vm::new(|reg| vec![code(reg, "f", 0, 0, vec![Op::Const(1), Op::Ret])]);
            let log: Arc<Mutex<Vec<usize>>> = Arc::default();
            // The model: the installed hooks, outermost last.
            let mut stack: Vec<(usize, HookId)> = Vec::new();
            let mut next = 0usize;
            for op in ops {
                match op {
                    HookOp::Install => {
                        let (l, me) = (log.clone(), next);
                        let id = vm.hooks.install(move |cx: &mut HookCx<'_, '_, '_, Vm>| {
                            l.lock().unwrap().push(me);
                            cx.eval_next()
                        });
                        match id {
                            Ok(id) => {
                                stack.push((me, id));
                                next += 1;
                            }
                            Err(e) => {
                                prop_assert_eq!(e, HookError::TooManyHooks);
                                prop_assert!(next >= 64);
                            }
                        }
                    }
                    HookOp::Uninstall(k) => {
                        if stack.is_empty() {
                            continue;
                        }
                        let k = k % stack.len();
                        let (_, id) = stack[k];
                        let r = vm.hooks.uninstall(id);
                        if k == stack.len() - 1 {
                            prop_assert_eq!(r, Ok(()));
                            stack.pop();
                        } else {
                            prop_assert_eq!(r, Err(HookError::NotCurrent(id)));
                        }
                    }
                    HookOp::Call => {
                        log.lock().unwrap().clear();
                        prop_assert_eq!(vm.call("f", &[]).unwrap(), 1);
                        let want: Vec<usize> = stack.iter().rev().map(|(n, _)| *n).collect();
                        prop_assert_eq!(&*log.lock().unwrap(), &want);
                    }
                }
                prop_assert_eq!(vm.hooks.is_default(), stack.is_empty());
                prop_assert_eq!(vm.hooks.current(), stack.last().map(|(_, id)| *id));
            }
        }

        #[test]
        fn extras_free_every_value_exactly_once(
            ops in proptest::collection::vec((0u8..4, 0usize..3, any::<u16>()), 1..60)
        ) {
            let reg: ExtraRegistry<4> = ExtraRegistry::new();
            let freed: Arc<Mutex<Vec<u16>>> = Arc::default();
            let f = freed.clone();
            let idx = reg
                .request_code_extra_index::<u16>(move |v| f.lock().unwrap().push(v))
                .unwrap();
            let mut codes: Vec<_> = (0..3).map(|_| reg.new_extras()).collect();
            let mut model: Vec<Option<u16>> = vec![None; 3];
            let mut made = Vec::new();
            let mut taken = Vec::new();
            for (op, c, v) in ops {
                match op {
                    0 => {
                        let got = *idx.get_or_init(&codes[c], || {
                            made.push(v);
                            v
                        });
                        prop_assert_eq!(got, *model[c].get_or_insert(v));
                    }
                    1 => {
                        idx.replace(&mut codes[c], v);
                        made.push(v);
                        model[c] = Some(v);
                    }
                    2 => {
                        let t = idx.take(&mut codes[c]);
                        prop_assert_eq!(t, model[c].take());
                        taken.extend(t);
                    }
                    _ => prop_assert_eq!(idx.get(&codes[c]).copied(), model[c]),
                }
            }
            codes.clear();
            // Every value made was freed once, except those taken out.
            let mut freed = freed.lock().unwrap().clone();
            freed.extend(taken);
            freed.sort();
            made.sort();
            prop_assert_eq!(freed, made);
        }
    }
}
