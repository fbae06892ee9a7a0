"""CPython's own concurrent.futures tests, run against interpool's executor.

The executor-generic test families of this CPython's ``test.test_concurrent_futures``
(``ExecutorTest``, ``WaitTests``, ``AsCompletedTests``, ``ExecutorShutdownTest`` and
the initializer families), each parametrised by an executor mixin, are instantiated
with ``InterpreterPoolMixin`` (``interpool.InterpreterPoolExecutor``), as CPython 3.14
instantiates them for its own InterpreterPoolExecutor, plus the thread-pool-specific
shutdown tests (the executor is a ThreadPoolExecutor, as 3.14's is). Tests that cannot
apply are skipped, each with its reason (``NOT_APPLICABLE``).

    python cpython_futures_suite.py [--tests DIR]

``--tests DIR`` takes the test module from DIR (``test_concurrent_futures.py``) when
this CPython's own test package lacks it (pyenv's 3.11 and 3.12 builds do): for 3.11,
Debian's ``libpython3.11-testsuite`` carries 3.11.2's (see ``use_tests_from``). Exits 0 when every test passed
or was skipped with a reason.
"""

import argparse
import importlib
import os
import sys
import unittest

import interpool

# Tests that cannot apply to an executor whose workers are interpreters of this
# process, by name (the end of the test id), with the reason.
NOT_APPLICABLE = {}


def families(module_names):
    """The families (mixin classes whose name ends in Test/Tests/Mixin) and the base
    classes of the loaded test modules."""
    found = {}
    util = None
    for name in module_names:
        m = importlib.import_module(name)
        for attr in (
            "ExecutorTest",
            "WaitTests",
            "AsCompletedTests",
            "ExecutorShutdownTest",
            "InitializerMixin",
            "FailingInitializerMixin",
            "ThreadPoolShutdownTest",
        ):
            if hasattr(m, attr):
                found[attr] = (m, getattr(m, attr))
        if hasattr(m, "BaseTestCase") and hasattr(m, "ExecutorMixin"):
            util = m
    return found, util


def build_suite(module_names):
    found, util = families(module_names)
    if util is None:
        raise SystemExit(f"no BaseTestCase/ExecutorMixin in {module_names}")

    class InterpreterPoolMixin(util.ExecutorMixin):
        executor_type = interpool.InterpreterPoolExecutor

    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for attr, (module, family) in sorted(found.items()):
        if attr == "ThreadPoolShutdownTest":
            # Thread-pool shutdown tests (threads end, names, del): the thread mixin
            # replaced by ours.
            bases = tuple(b for b in family.__bases__ if b is not util.ThreadPoolMixin)
            cls = type(
                "InterpreterPoolThreadShutdownTest",
                (InterpreterPoolMixin,) + bases,
                dict(family.__dict__),
            )
        else:
            name = "InterpreterPool" + attr.replace("Mixin", "").replace("Tests", "").replace("Test", "") + "Test"
            cls = type(name, (family, InterpreterPoolMixin, util.BaseTestCase), {})
        cls.__module__ = module.__name__
        for test in loader.loadTestsFromTestCase(cls):
            method = getattr(test, test._testMethodName)
            why = NOT_APPLICABLE.get(test._testMethodName)
            if why:
                setattr(
                    test,
                    test._testMethodName,
                    unittest.skip(f"not applicable: {why}")(method),
                )
            suite.addTest(test)
    return suite


PTH = "_interpool_cf_suite_tests.pth"


def use_tests_from(tests_dir):
    """Makes `test.test_concurrent_futures` of `tests_dir` importable as that name here,
    in the workers and in the child processes some tests start (with `-I`): a `.pth`
    file in this environment's site-packages extends the `test` package's path."""
    import sysconfig

    import test

    tests_dir = os.path.abspath(tests_dir)
    if tests_dir not in test.__path__:
        test.__path__.append(tests_dir)
    pth = os.path.join(sysconfig.get_paths()["purelib"], PTH)
    with open(pth, "w") as f:
        f.write(f"import test; test.__path__.append({tests_dir!r})\n")
    return pth


def module_names():
    try:
        importlib.import_module("test.test_concurrent_futures.util")
    except ImportError:
        pass
    else:
        return [
            "test.test_concurrent_futures.util",
            "test.test_concurrent_futures.executor",
            "test.test_concurrent_futures.test_wait",
            "test.test_concurrent_futures.test_as_completed",
            "test.test_concurrent_futures.test_shutdown",
            "test.test_concurrent_futures.test_init",
            "test.test_concurrent_futures.test_thread_pool",
        ]
    importlib.import_module("test.test_concurrent_futures")
    return ["test.test_concurrent_futures"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tests", help="a directory holding test_concurrent_futures.py")
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    pth = use_tests_from(args.tests) if args.tests else None
    try:
        names = module_names()
        suite = build_suite(names)
        print(
            f"CPython {sys.version.split()[0]}: {suite.countTestCases()} tests from "
            f"{', '.join(names)}",
            flush=True,
        )
        result = unittest.TextTestRunner(verbosity=2 if args.v else 1).run(suite)
    finally:
        if pth:
            os.remove(pth)
    for test, why in result.skipped:
        print(f"skipped: {test.id()}: {why}")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
