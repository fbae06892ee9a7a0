# multipy bootstrap: run once in each interpreter right after initialisation, as the body
# of the `_multipy_host` module (which runner.c created and gave `write` and
# `SharedBuffer`). It replaces sys.stdout/sys.stderr with writers that capture output per
# call (per thread, so concurrent calls in one interpreter keep their output apart) and
# send anything written outside a call to the host, and defines dispatch(), the one entry
# point the Rust side calls.
import io
import os
import sys
import threading

_tls = threading.local()
buffers = {}
# Set by the host when all output goes straight to its sink (no per-call capture).
FORWARD = False
# Globals the host set (set_global): in __main__, and given to files and modules run.
init_globals = {}


class _BytesWriter(io.RawIOBase):
    """`sys.stdout.buffer`: bytes written are decoded (UTF-8) and captured as text."""

    def __init__(self, text):
        self._text = text

    def writable(self):
        return True

    def write(self, b):
        b = bytes(b)
        self._text.write(b.decode("utf-8", "surrogateescape"))
        return len(b)


class _Writer(io.TextIOBase):
    """sys.stdout / sys.stderr of this interpreter: text goes to the current call's
    capture on this thread, or to the host's sink (stream 1 or 2) outside any call."""

    def __init__(self, stream, name):
        self._stream = stream
        self._name = name
        self._errors = "surrogateescape"
        self.buffer = _BytesWriter(self)

    mode = "w"
    line_buffering = False
    write_through = True

    def reconfigure(self, *, encoding=None, errors=None, newline=None,
                    line_buffering=None, write_through=None):
        """Accepted for compatibility (the text is always captured as str)."""
        if errors is not None:
            self._errors = errors

    @property
    def name(self):
        return self._name

    @property
    def encoding(self):
        return "utf-8"

    @property
    def errors(self):
        return self._errors

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
            return len(s)
        # To the host: whole lines per thread, so that lines written by threads of one
        # interpreter at once never interleave inside a line.
        pending = getattr(_tls, "pending", None)
        if pending is None:
            pending = _tls.pending = {1: "", 2: ""}
        text = pending[self._stream] + s
        head, nl, tail = text.rpartition("\n")
        if nl:
            write(self._stream, head + nl)
        pending[self._stream] = tail
        return len(s)

    def flush(self):
        pending = getattr(_tls, "pending", None)
        if pending and pending[self._stream]:
            text, pending[self._stream] = pending[self._stream], ""
            write(self._stream, text)


sys.stdout = _STDOUT = _Writer(1, "<multipy stdout>")
sys.stderr = _STDERR = _Writer(2, "<multipy stderr>")


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
    if op == "set_global":
        import json

        name, value = args[0], json.loads(args[1])
        init_globals[name] = value
        setattr(__main__, name, value)
        return None
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
        runpy.run_path(path, init_globals=dict(init_globals), run_name="__main__")
        return None
    if op == "module":
        import json
        import runpy

        name, argv = args[0], json.loads(args[1])
        sys.argv[:] = [name] + list(argv)
        if not sys.path or sys.path[0] != "":
            sys.path.insert(0, "")
        runpy.run_module(name, init_globals=dict(init_globals), run_name="__main__", alter_sys=True)
        return None
    if op == "call":
        import importlib
        import json

        module, function, argv = args[0], args[1], json.loads(args[2])
        m = importlib.import_module(module)
        f = getattr(m, function)
        return f(*argv)
    raise ValueError(f"unknown multipy operation {op!r}")


def _json_value(v):
    if v is None:
        return "null"
    import json

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
            import traceback

            etb = "".join(traceback.format_exception(type(e), e, _user_frames(e.__traceback__)))
    finally:
        _tls.parts = outer
        if FORWARD:
            _STDOUT.flush()
            _STDERR.flush()
    return (status, "".join(parts[1]), "".join(parts[2]), etype, emsg, etb, code, value)


def before_finalize():
    """Threads other than the main one still alive (daemon threads)."""
    me = threading.main_thread()
    return sum(1 for t in threading.enumerate() if t is not me and t.is_alive())
