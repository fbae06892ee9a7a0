# multipy bootstrap: run once in each interpreter right after initialisation, as the body
# of the `_multipy_host` module (which runner.c created and gave `write` and
# `SharedBuffer`). It replaces sys.stdout/sys.stderr with writers that capture output per
# call (per thread, so concurrent calls in one interpreter keep their output apart) and
# send anything written outside a call to the host, and defines dispatch(), the one entry
# point the Rust side calls.
import io
import json
import os
import sys
import threading
import traceback

_tls = threading.local()
buffers = {}
# Set by the host when all output goes straight to its sink (no per-call capture).
FORWARD = False


class _Writer(io.TextIOBase):
    """sys.stdout / sys.stderr of this interpreter: text goes to the current call's
    capture on this thread, or to the host's sink (stream 1 or 2) outside any call."""

    def __init__(self, stream, name):
        self._stream = stream
        self._name = name

    @property
    def name(self):
        return self._name

    @property
    def encoding(self):
        return "utf-8"

    @property
    def errors(self):
        return "surrogateescape"

    def writable(self):
        return True

    def isatty(self):
        return False

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        parts = getattr(_tls, "parts", None)
        if parts is not None:
            parts[self._stream].append(s)
        else:
            write(self._stream, s)
        return len(s)

    def flush(self):
        pass


sys.stdout = _Writer(1, "<multipy stdout>")
sys.stderr = _Writer(2, "<multipy stderr>")


def register_buffer(name, obj):
    buffers[name] = obj
    import __main__

    setattr(__main__, name, obj)


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0, None
    if isinstance(code, int):
        return code, None
    return 1, str(code)


def _run(op, args):
    import __main__

    if op == "exec":
        (code, filename) = args
        exec(compile(code, filename, "exec"), __main__.__dict__)
        return None
    if op == "eval":
        (expr,) = args
        return eval(compile(expr, "<multipy>", "eval"), __main__.__dict__)
    if op == "forward":
        global FORWARD
        FORWARD = True
        return None
    if op == "file":
        import runpy

        (path,) = args
        d = os.path.dirname(os.path.abspath(path))
        if not sys.path or sys.path[0] != d:
            sys.path.insert(0, d)
        runpy.run_path(path, run_name="__main__")
        return None
    if op == "module":
        import runpy

        name, argv = args[0], json.loads(args[1])
        sys.argv[:] = [name] + list(argv)
        if not sys.path or sys.path[0] != "":
            sys.path.insert(0, "")
        runpy.run_module(name, run_name="__main__", alter_sys=True)
        return None
    if op == "call":
        import importlib

        module, function, argv = args[0], args[1], json.loads(args[2])
        m = importlib.import_module(module)
        f = getattr(m, function)
        return f(*argv)
    raise ValueError(f"unknown multipy operation {op!r}")


def _json_value(v):
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return json.dumps(repr(v))


def _user_frames(tb):
    """The traceback without this module's and runpy's frames."""
    import runpy

    skip = (globals(), runpy.__dict__)
    while tb is not None and any(tb.tb_frame.f_globals is g for g in skip):
        tb = tb.tb_next
    return tb


def dispatch(op, *args):
    """Runs one operation; returns (status, stdout, stderr, exc type, message, traceback,
    exit code, value as JSON). status: "ok", "exception" or "exit"."""
    outer = getattr(_tls, "parts", None)
    parts = {1: [], 2: []}
    _tls.parts = None if FORWARD else parts
    status, etype, emsg, etb, code, value = "ok", "", "", "", "", "null"
    try:
        try:
            value = _json_value(_run(op, args))
        except SystemExit as e:
            status = "exit"
            c, text = _exit_code(e)
            code = str(c)
            if text is not None:
                parts[2].append(text + "\n")
        except BaseException as e:
            status = "exception"
            etype = type(e).__module__ + "." + type(e).__qualname__
            if etype.startswith("builtins."):
                etype = etype[len("builtins."):]
            emsg = str(e)
            etb = "".join(traceback.format_exception(type(e), e, _user_frames(e.__traceback__)))
    finally:
        _tls.parts = outer
    return (status, "".join(parts[1]), "".join(parts[2]), etype, emsg, etb, code, value)


def before_finalize():
    """Threads other than the main one still alive (daemon threads)."""
    me = threading.main_thread()
    return sum(1 for t in threading.enumerate() if t is not me and t.is_alive())
