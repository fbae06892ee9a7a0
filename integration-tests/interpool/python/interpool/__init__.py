"""interpool: ``concurrent.futures.InterpreterPoolExecutor`` for CPython 3.10-3.13.

Each worker is a CPython interpreter of this process: a fresh copy of the host's own
``libpython`` loaded by a custom ELF loader into a namespace of its own, with its own
copy of every C extension it imports (numpy, scipy, pandas, ...) and its own GIL, so
workers run Python code in parallel on the host's threads. Arguments and results travel
by pickle protocol 5, and out-of-band buffers (numpy arrays, ``bytes``, ``memoryview``,
anything exporting the buffer protocol) are shared, not copied.

    from interpool import InterpreterPoolExecutor

    with InterpreterPoolExecutor(max_workers=4) as pool:
        totals = list(pool.map(numpy.sum, arrays))

The names are importable lazily, so that importing ``interpool._compat`` (which the
package's ``.pth`` file does at start-up, to offer
``concurrent.futures.InterpreterPoolExecutor``) loads nothing heavy.
"""

__all__ = [
    "InterpreterPoolExecutor",
    "BrokenInterpreterPool",
    "Interpreter",
    "InterpreterError",
    "RemoteBuffer",
    "writable",
]


def __getattr__(name):
    if name in __all__:
        from . import _executor

        value = getattr(_executor, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
