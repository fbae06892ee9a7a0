"""The benchmark's tasks (importable by name in worker interpreters and processes)."""

import time


def noop(x):
    return x


def wait(seconds):
    """Keeps a worker busy, so that tasks submitted at once reach distinct workers."""
    time.sleep(seconds)
    return seconds


def total(a):
    import numpy

    return float(numpy.sum(a))


def cpu(n):
    """Pure-Python work, about a quarter of a second for n = 2_000_000."""
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


def import_stack():
    import numpy
    import pandas
    import scipy.linalg

    a = numpy.array([[2.0, 1.0], [1.0, 3.0]])
    x = scipy.linalg.solve(a, numpy.array([3.0, 5.0]))
    return float(pandas.Series(x).sum())


def import_stack_and_wait(seconds):
    """Makes sure a distinct worker takes each of N such tasks submitted at once."""
    r = import_stack()
    time.sleep(seconds)
    return r
