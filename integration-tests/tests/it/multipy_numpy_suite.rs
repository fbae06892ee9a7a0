//! numpy's own test suite in two interpreters at once, compared with a plain
//! `python -m pytest` of the same modules in the same venv: each interpreter's counts
//! (passed, failed, skipped, xfailed, xpassed, errors) and the list of every test that
//! did not pass, with its reason, must equal the plain run's.
//!
//! CI runs a subset covering ufuncs, linalg (OpenBLAS), random, fft, and the buffer
//! protocol (~2,300 tests); `MULTIPY_FULL=1` (or `cargo xtask test --full`) runs the
//! full comparison: umath, ufunc, all of multiarray, einsum, linalg, random, fft
//! (~20,800 tests).
//!
//! The comparison and pytest's options are `multipy_common::pytest`'s. Tests that need 6
//! and 18 GB of free memory are deselected in both runs (see `DESELECTED`).

use crate::multipy_common::{interp, pytest, venv};

const CI_MODULES: &[&str] = &[
    "numpy/_core/tests/test_ufunc.py",
    "numpy/_core/tests/test_scalarbuffer.py",
    "numpy/_core/tests/test_multiarray.py::TestNewBufferProtocol",
    "numpy/_core/tests/test_multiarray.py::TestDot",
    "numpy/linalg/tests/test_linalg.py",
    "numpy/random/tests/test_generator_mt19937.py",
    "numpy/fft/tests/test_pocketfft.py",
];

const FULL_MODULES: &[&str] = &[
    "numpy/_core/tests/test_umath.py",
    "numpy/_core/tests/test_ufunc.py",
    "numpy/_core/tests/test_multiarray.py",
    "numpy/_core/tests/test_scalarbuffer.py",
    "numpy/_core/tests/test_einsum.py",
    "numpy/linalg/tests/test_linalg.py",
    "numpy/random/tests/test_generator_mt19937.py",
    "numpy/fft/tests/test_pocketfft.py",
];

/// Tests deselected in both runs (plain and interpreters), with the reason (also in the
/// README): they allocate 6 and 18 GB and run only when `requires_memory` finds that much
/// free at that instant, so their outcome depends on the machine's free memory at that
/// moment; two interpreters running them at once on a 24 GB machine would need twice
/// that.
const DESELECTED: &[&str] = &[
    "numpy/_core/tests/test_multiarray.py::TestDot::test_huge_vectordot[float64]",
    "numpy/_core/tests/test_multiarray.py::TestDot::test_huge_vectordot[complex128]",
    "numpy/_core/tests/test_ufunc.py::TestUfunc::test_identityless_reduction_huge_array",
];

/// Tests whose outcome may differ from the plain run because they touch process-wide
/// state, each with the reason (also listed in the README). A difference in any other
/// test fails.
const PROCESS_WIDE: &[(&str, &str)] = &[
    (
        "test_linalg.py:2043: Numpy xerbla not linked in",
        "test_xerbla_override forks and then calls os.wait(), which reaps *any* child of the \
         process: when both interpreters run it at the same moment, one may reap the other's \
         child, see the wrong exit status and skip",
    ),
    (
        "test_xerbla_override - ChildProcessError",
        "the same os.wait() race the other way: the other interpreter's os.wait() reaped \
         both children, so this one finds none (ECHILD)",
    ),
];

#[test]
fn numpy_tests_in_two_interpreters_match_a_plain_process() {
    let full = std::env::var_os("MULTIPY_FULL").is_some();
    let modules = if full { FULL_MODULES } else { CI_MODULES };
    let site = venv().join("lib/python3.11/site-packages");
    let args = pytest::args(&site, modules, DESELECTED);
    let (want, want_code, plain_secs) = pytest::plain(&venv(), &args);
    assert_eq!(
        want.count("deselected"),
        DESELECTED
            .iter()
            .filter(|d| modules
                .iter()
                .any(|m| d.starts_with(m.split("::").next().unwrap())))
            .count() as u64,
        "the memory-hungry tests are deselected: {want:?}"
    );
    assert!(
        want.count("passed") > if full { 20_000 } else { 1_500 },
        "{want:?}"
    );
    let (a, b) = (interp(), interp());
    let (outs, both_secs) = pytest::in_interpreters(&[&a, &b], &args);
    eprintln!(
        "numpy suite ({} modules): plain process {plain_secs:.1} s; two interpreters at once {both_secs:.1} s",
        modules.len()
    );
    pytest::assert_same("numpy", &outs, &want, want_code, PROCESS_WIDE);
}
