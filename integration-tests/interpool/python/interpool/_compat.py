"""Makes ``from concurrent.futures import InterpreterPoolExecutor`` work on 3.10-3.13.

Imported at start-up by ``interpool.pth`` (installed with the package). It only adds a
name to ``concurrent.futures``' lazy ``__getattr__``; the executor itself (and the
native extension) is imported the first time the name is used. On 3.14 and later the
standard library's own class is left alone.
"""

import sys


def _install():
    if sys.version_info >= (3, 14):
        return
    import concurrent.futures as cf

    previous = cf.__getattr__

    def __getattr__(name):
        if name == "InterpreterPoolExecutor":
            from interpool._executor import InterpreterPoolExecutor

            return InterpreterPoolExecutor
        return previous(name)

    cf.__getattr__ = __getattr__
    if "InterpreterPoolExecutor" not in cf.__all__:
        cf.__all__ = tuple(cf.__all__) + ("InterpreterPoolExecutor",)


_install()
