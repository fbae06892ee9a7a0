"""Functions the tests run in worker interpreters (found there by this module's name, as
pickle finds functions; kept free of pytest so that workers import it quickly)."""

import os
import sys
import threading
import time

_kept = {}


def add(a, b):
    return a + b


def square(x):
    return x * x


def fail(message):
    raise ValueError(message)


def nested_fail():
    def inner_frame_for_the_traceback():
        raise KeyError("deep")

    inner_frame_for_the_traceback()


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def spin_forever():
    """Pure-Python loop (interruptible at bytecode boundaries)."""
    n = 0
    while True:
        n += 1


def spin_forever_on(ident):
    """Spins forever on the host thread `ident` (`threading.get_ident()`: the same
    thread id in a worker interpreter); returns "elsewhere" on any other thread."""
    if threading.get_ident() != ident:
        return "elsewhere"
    spin_forever()


def identity_after(seconds):
    """`interpreter_identity` after a sleep (tasks that overlap, so several workers
    take them)."""
    time.sleep(seconds)
    return id(None)


def total(a):
    import numpy

    return float(numpy.sum(a))


def address_and_sum(a, lo, hi):
    """The worker's view of `a`: its data address and the sum of a[lo:hi]."""
    import numpy

    return a.__array_interface__["data"][0], float(numpy.sum(a[lo:hi]))


def write_first(a, value):
    a[0] = value
    return True


def wait_for_first(a, value, timeout):
    """Waits until a[0] == value (written by the host) or the timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if a[0] == value:
            return True
        time.sleep(0.001)
    return False


def keep(name, obj):
    _kept[name] = obj
    return True


def kept_sum(name):
    import numpy

    return float(numpy.sum(_kept[name]))


def drop(name):
    del _kept[name]
    import gc

    gc.collect()
    return True


def make_array(n):
    import numpy

    return numpy.arange(n, dtype=numpy.float64)


def scipy_solve(a, b):
    import scipy.linalg

    return scipy.linalg.solve(a, b)


def pandas_groupby(keys, values):
    import pandas

    df = pandas.DataFrame({"k": keys, "v": values})
    return df.groupby("k")["v"].sum()


def import_numpy_scipy_pandas_and_check():
    import numpy
    import pandas
    import scipy.linalg

    a = numpy.array([[3.0, 1.0], [1.0, 2.0]])
    x = scipy.linalg.solve(a, numpy.array([9.0, 8.0]))
    s = pandas.Series([1, 2, 3]).sum()
    return [round(float(v), 9) for v in x] + [int(s)]


def get_global(name):
    import __main__

    return getattr(__main__, name, None)


def set_global(name, value):
    import __main__

    setattr(__main__, name, value)


def failing_initializer():
    raise RuntimeError("initializer refuses")


def interpreter_identity():
    """Something that differs per interpreter: the id of None (each copy has its own)."""
    return id(None)


def pid():
    return os.getpid()


def print_line(text):
    print(text, flush=True)
    return True


def thread_ident():
    return threading.get_ident()


def python_version():
    return sys.version_info[:2]


def returns_lambda():
    return lambda: 1
