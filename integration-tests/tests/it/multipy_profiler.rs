//! frame-hooks on multipy: frame-hooks' call profiler installed on interpreter 0 only.
//! Both interpreters run the same code at the same time on several threads; the
//! profiler counts exactly interpreter 0's calls, interpreter 1 keeps its default
//! evaluator and its calls are never seen; uninstalling restores interpreter 0's own.

use crate::multipy_common::interp;
use frame_hooks::cpython::profiler::Profiler;
use std::sync::Arc;

#[test]
fn profiler_on_interpreter_zero_only() {
    let (a, b) = (interp(), interp());
    let (ha, hb) = (a.frame_hooks().unwrap(), b.frame_hooks().unwrap());
    assert_ne!(
        ha.api().eval_default as usize,
        hb.api().eval_default as usize,
        "each interpreter has its own evaluator"
    );
    let code = "import numpy as np\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\ndef work():\n    return fib(15) + int(np.arange(10).sum())\n";
    a.run(code).unwrap();
    b.run(code).unwrap();
    let profiler = Arc::new(Profiler::new(&ha, false).unwrap());
    let mut installed = ha.install(profiler.clone()).unwrap();
    assert!(!ha.eval_is_default());
    assert!(hb.eval_is_default(), "interpreter 1 runs unhooked");
    std::thread::scope(|s| {
        for t in 0..4 {
            let i = if t % 2 == 0 { &a } else { &b };
            s.spawn(move || {
                for _ in 0..3 {
                    assert_eq!(i.eval("work()").unwrap(), serde_json::json!(610 + 45));
                }
            });
        }
    });
    // Interpreter 0 ran work() 2 threads x 3 times: 6 calls of work, 6 x 1973 of fib.
    let stats = profiler.stats();
    let calls = |name: &str| {
        stats
            .iter()
            .filter(|s| s.function == name)
            .map(|s| s.calls())
            .sum::<u64>()
    };
    assert_eq!(calls("work"), 6);
    assert_eq!(calls("fib"), 6 * 1973);
    assert!(
        stats.iter().all(|s| s.file != "never"),
        "only interpreter 0's code objects"
    );
    assert!(hb.eval_is_default());
    // More calls in interpreter 1 alone change nothing.
    b.eval("work()").unwrap();
    assert_eq!(
        profiler
            .stats()
            .iter()
            .filter(|s| s.function == "fib")
            .map(|s| s.calls())
            .sum::<u64>(),
        6 * 1973
    );
    installed.uninstall().unwrap();
    assert!(
        ha.eval_is_default(),
        "interpreter 0's own evaluator is back"
    );
    a.eval("work()").unwrap();
    assert_eq!(
        profiler
            .stats()
            .iter()
            .filter(|s| s.function == "work")
            .map(|s| s.calls())
            .sum::<u64>(),
        6
    );
    drop(installed);
    drop(profiler);
}
