//! Model-based random tests (proptest): random operation sequences on one thread checked
//! against a model of who holds the GIL and what each call must return; and random
//! per-thread programs run concurrently, whose unsynchronised total must come out exact.

use gil::{ActionOutcome, ActionTarget, Config, Gil, GilError};
use proptest::prelude::*;
use std::cell::UnsafeCell;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
    Acquire,
    ReleaseLast,
    ReleaseStray,
    Poll,
    Yield,
    Region,
    ActionOnSelf,
    Ensure,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Acquire),
        3 => Just(Op::ReleaseLast),
        1 => Just(Op::ReleaseStray),
        2 => Just(Op::Poll),
        1 => Just(Op::Yield),
        1 => Just(Op::Region),
        1 => Just(Op::ActionOnSelf),
        1 => Just(Op::Ensure),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn single_thread_matches_model(ops in prop::collection::vec(op(), 1..60)) {
        let gil = Gil::new();
        let h = gil.attach("model").unwrap();
        // The model: results of acquire calls not yet released; the GIL is held iff
        // one of them is `true`.
        let mut stack: Vec<bool> = Vec::new();
        for op in ops {
            let holds = stack.contains(&true);
            prop_assert_eq!(h.holds_gil(), holds);
            match op {
                Op::Acquire => {
                    let took = h.acquire().unwrap();
                    prop_assert_eq!(took, !holds);
                    stack.push(took);
                }
                Op::ReleaseLast => {
                    if let Some(r) = stack.pop() {
                        h.release(r).unwrap();
                    }
                }
                Op::ReleaseStray => {
                    if !holds {
                        let is_not_holder = matches!(h.release(true), Err(GilError::NotHolder { .. }));
                        prop_assert!(is_not_holder);
                    }
                }
                Op::Poll => h.poll().unwrap(),
                Op::Yield => {
                    let r = h.yield_now();
                    prop_assert_eq!(r.is_ok(), holds);
                }
                Op::Region => {
                    let inside = h.allow_threads(|| h.holds_gil()).unwrap();
                    prop_assert!(!inside);
                }
                Op::ActionOnSelf => {
                    let a = gil.submit(ActionTarget::Thread(h.id()), |_| ()).unwrap();
                    h.poll().unwrap();
                    let report = a.wait(Duration::from_secs(5)).unwrap();
                    prop_assert_eq!(&report.outcomes[0].1, &ActionOutcome::Ran { held_gil: holds });
                }
                Op::Ensure => {
                    let g = gil.ensure().unwrap();
                    prop_assert_eq!(g.state().acquired, !holds);
                    prop_assert!(!g.state().attached);
                    prop_assert!(h.holds_gil());
                }
            }
        }
        prop_assert_eq!(h.holds_gil(), stack.contains(&true));
        while let Some(r) = stack.pop() {
            h.release(r).unwrap();
        }
        prop_assert_eq!(gil.holder(), None);
    }
}

#[derive(Debug, Clone)]
enum Step {
    Critical(u8),
    Region,
    Poll,
    Yield,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u8..20).prop_map(Step::Critical),
        1 => Just(Step::Region),
        2 => Just(Step::Poll),
        1 => Just(Step::Yield),
    ]
}

struct Total(UnsafeCell<u64>);
// SAFETY: only touched with the GIL held; a broken GIL shows as a wrong total.
unsafe impl Sync for Total {}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn concurrent_programs_sum_exactly(
        programs in prop::collection::vec(prop::collection::vec(step(), 1..80), 2..5)
    ) {
        let gil = Gil::with_config(Config {
            switch_interval: Some(Duration::from_micros(200)),
            ..Config::default()
        }).unwrap();
        let total = Arc::new(Total(UnsafeCell::new(0)));
        let expected: u64 = programs
            .iter()
            .flatten()
            .map(|s| if let Step::Critical(n) = s { u64::from(*n) } else { 0 })
            .sum();
        let joins: Vec<_> = programs
            .into_iter()
            .enumerate()
            .map(|(i, program)| {
                let total = total.clone();
                gil.spawn(&format!("p{i}"), move |h| {
                    let a = h.acquire().unwrap();
                    for s in program {
                        match s {
                            Step::Critical(n) => {
                                for _ in 0..n {
                                    // SAFETY: the GIL is held here.
                                    unsafe {
                                        let v = *total.0.get();
                                        std::hint::black_box(v);
                                        *total.0.get() = v + 1;
                                    }
                                }
                            }
                            Step::Region => {
                                h.allow_threads(std::thread::yield_now).unwrap();
                            }
                            Step::Poll => h.poll().unwrap(),
                            Step::Yield => h.yield_now().unwrap(),
                        }
                    }
                    h.release(a).unwrap();
                })
                .unwrap()
            })
            .collect();
        for j in joins {
            j.join_timeout(Duration::from_secs(30)).unwrap();
        }
        let h = gil.attach("check").unwrap();
        let _g = h.lock().unwrap();
        // SAFETY: the GIL is held and the workers are done.
        prop_assert_eq!(unsafe { *total.0.get() }, expected);
    }
}
