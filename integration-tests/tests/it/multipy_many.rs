//! multipy at scale: 64 interpreters in one process, each importing numpy and computing
//! a checked result at the same time; and the OpenBLAS policy: each interpreter has its
//! own OpenBLAS copy (numpy.libs is loaded per namespace) running one BLAS thread, and
//! concurrent matmuls in every interpreter give correct results.

use crate::multipy_common::interp;
use integration_tests::multipy::{thread_count, Interpreter};

/// One test function: the thread counts below are process-wide, so the two parts must
/// not run beside each other.
#[test]
fn openblas_policy_then_sixty_four_interpreters() {
    openblas_per_copy_one_thread_each_and_concurrent_matmuls_are_right();
    sixty_four_interpreters_each_import_numpy_and_compute();
}

fn sixty_four_interpreters_each_import_numpy_and_compute() {
    const N: usize = 64;
    let interps: Vec<Interpreter> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| (0..N / 4).map(|_| interp()).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(interps.len(), N);
    let results: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = interps
            .iter()
            .enumerate()
            .map(|(k, i)| {
                s.spawn(move || {
                    i.run(&format!(
                        "import numpy as np\nx = np.arange({k}, {k} + 100, dtype=np.int64)\nprint(int((x * x).sum()), id(np))"
                    ))
                    .unwrap()
                    .stdout
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut module_ids = std::collections::HashSet::new();
    for (k, line) in results.iter().enumerate() {
        let (sum, id) = line.trim().split_once(' ').unwrap();
        let k = k as i64;
        let want: i64 = (k..k + 100).map(|v| v * v).sum();
        assert_eq!(sum.parse::<i64>().unwrap(), want, "interpreter {k}");
        module_ids.insert(id.to_string());
    }
    assert_eq!(module_ids.len(), N, "64 distinct numpy module objects");
}

fn openblas_per_copy_one_thread_each_and_concurrent_matmuls_are_right() {
    let interps: Vec<Interpreter> = (0..4).map(|_| interp()).collect();
    let before = thread_count();
    for i in &interps {
        i.run("import numpy as np").unwrap();
        let blas: Vec<_> = i
            .namespace()
            .library_paths()
            .into_iter()
            .filter(|p| p.to_string_lossy().contains("openblas"))
            .collect();
        assert_eq!(
            blas.len(),
            1,
            "each interpreter loads its own OpenBLAS copy: {blas:?}"
        );
    }
    assert_eq!(
        thread_count(),
        before,
        "one BLAS thread per interpreter: OpenBLAS started none"
    );
    assert_eq!(std::env::var("OPENBLAS_NUM_THREADS").as_deref(), Ok("1"));
    let code = "rng = np.random.default_rng(SEED)\nok = True\nfor _ in range(10):\n    a = rng.random((200, 200)); b = rng.random((200, 200))\n    ok &= bool(np.allclose(a @ b, np.einsum('ij,jk->ik', a, b)))\n    ok &= bool(np.allclose(np.linalg.solve(a, b) @ np.linalg.inv(b), np.linalg.inv(a)))\nprint(ok)";
    std::thread::scope(|s| {
        for (k, i) in interps.iter().enumerate() {
            s.spawn(move || {
                let o = i.run(&code.replace("SEED", &k.to_string())).unwrap();
                assert_eq!(o.stdout, "True\n", "interpreter {k}");
            });
        }
    });
}
