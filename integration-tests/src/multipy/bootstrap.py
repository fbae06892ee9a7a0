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
import weakref

_tls = threading.local()
buffers = {}
# Every thread's _Pending (see below), for the flush before finalisation.
_all_pending = weakref.WeakSet()


class _Pending:
    """Text a thread wrote outside any call and not yet ended by a newline, per stream.
    Whole lines go to the host as they complete, so that lines written by threads of one
    interpreter at once never interleave inside a line; the rest goes on `flush()` by
    that thread, at the end of each call on it, and when the thread ends (its
    thread-local state, which holds this object, is freed then)."""

    __slots__ = ("text", "__weakref__")

    def __init__(self):
        self.text = {1: "", 2: ""}

    def flush(self, stream):
        text, self.text[stream] = self.text[stream], ""
        if text:
            _host_write(stream, text)

    def __del__(self):
        try:
            self.flush(1)
            self.flush(2)
        except BaseException:
            pass


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

    def fileno(self):
        """The process's own descriptor (1 or 2), for code that needs a real file
        (`faulthandler.enable()`, `subprocess.run(..., stdout=sys.stdout)`): what is
        written there bypasses this interpreter's capture, like C code's output."""
        return self._stream

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        parts = getattr(_tls, "parts", None)
        if parts is not None:
            parts[self._stream].append(s)
            return len(s)
        pending = getattr(_tls, "pending", None)
        if pending is None:
            pending = _tls.pending = _Pending()
            _all_pending.add(pending)
        text = pending.text[self._stream] + s
        head, nl, tail = text.rpartition("\n")
        pending.text[self._stream] = tail
        if nl:
            _host_write(self._stream, head + nl)
        return len(s)

    def flush(self):
        pending = getattr(_tls, "pending", None)
        if pending is not None:
            pending.flush(self._stream)


def _host_write(stream, text):
    """To the host's sink as UTF-8: bytes written to `sys.stdout.buffer` that are not
    UTF-8 (carried here as surrogate escapes) go as they were written."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "backslashreplace")
    write(stream, data)


sys.stdout = _STDOUT = _Writer(1, "<multipy stdout>")
sys.stderr = _STDERR = _Writer(2, "<multipy stderr>")


class _NoStdin(io.TextIOBase):
    """sys.stdin of an interpreter that was not given the process's stdin: the process
    has one standard input, and interpreters reading it at once would each take an
    unpredictable part of it (their buffered readers read ahead)."""

    name = "<multipy: no stdin>"
    encoding = "utf-8"
    errors = "strict"

    def readable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        raise io.UnsupportedOperation("multipy: this interpreter has no stdin")

    def _refuse(self, *args, **kwargs):
        raise OSError(
            "multipy: this interpreter was not given the process's stdin (one interpreter "
            "at a time may have it: Config::inherit_stdin; interpreter 0 in the multipy CLI)"
        )

    read = readline = readlines = _refuse

    def __iter__(self):
        self._refuse()


def register_buffer(name, obj):
    buffers[name] = obj
    import __main__

    setattr(__main__, name, obj)


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0, None
    if isinstance(code, int):
        # As `python` computes it: (int)PyLong_AsLong(code), so -1 beyond a C long (exit
        # status 255) and the low 32 bits, signed, within one.
        if not -(1 << 63) <= code < (1 << 63):
            return -1, None
        return ((code + (1 << 31)) % (1 << 32)) - (1 << 31), None
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
    if op == "no_stdin":
        sys.stdin = sys.__stdin__ = _NoStdin()
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


def _is_json(v, depth=0):
    """Whether `v` is exactly representable in JSON as the host reads it: None, bool,
    str (without lone surrogates), integers of 64 bits, finite floats, and lists, tuples
    and str-keyed dicts of those."""
    if depth > 200:
        return False
    if v is None or isinstance(v, bool):
        return True
    if isinstance(v, int):
        return -(1 << 63) <= v < (1 << 64)
    if isinstance(v, float):
        return v == v and v not in (float("inf"), float("-inf"))
    if isinstance(v, str):
        try:
            v.encode("utf-8")
            return True
        except UnicodeEncodeError:
            return False
    if isinstance(v, (list, tuple)):
        return all(_is_json(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _is_json(k) and _is_json(x, depth + 1) for k, x in v.items())
    return False


def _json_value(v):
    """The value as JSON, or its repr() as a JSON string when JSON cannot carry it."""
    if v is None:
        return "null"
    import json

    if _is_json(v):
        return json.dumps(v)
    try:
        text = repr(v)
    except BaseException as e:
        text = f"<repr() failed: {type(e).__name__}>"
    return json.dumps(text.encode("utf-8", "backslashreplace").decode("utf-8"))


def _user_frames(tb):
    """The traceback without this module's and runpy's frames."""
    import runpy

    skip = (globals(), runpy.__dict__)
    while tb is not None and any(tb.tb_frame.f_globals is g for g in skip):
        tb = tb.tb_next
    # And this module's frames at the end (its stdin object refusing a read).
    last, t = None, tb
    while t is not None:
        if t.tb_frame.f_globals is not globals():
            last = t
        t = t.tb_next
    if last is not None:
        last.tb_next = None
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
                if FORWARD:
                    _STDERR.write(text + "\n")
                else:
                    parts[2].append(text + "\n")
        except BaseException as e:
            status = "exception"
            etype = type(e).__module__ + "." + type(e).__qualname__
            if etype.startswith("builtins."):
                etype = etype[len("builtins."):]
            try:
                emsg = str(e)
            except BaseException:
                emsg = f"<exception str() failed>"
            try:
                import traceback

                etb = "".join(traceback.format_exception(type(e), e, _user_frames(e.__traceback__)))
            except BaseException as f:
                etb = f"{etype}: {emsg}\n(the traceback could not be formatted: {type(f).__name__})\n"
    finally:
        _tls.parts = outer
        _STDOUT.flush()
        _STDERR.flush()
    return (status, "".join(parts[1]), "".join(parts[2]), etype, emsg, etb, code, value)


def _remote_exception(e):
    """`e` with its formatted traceback, pickled as ProcessPoolExecutor's workers pickle
    a task's exception: unpickled, it is `e` again with `__cause__` set to a
    `_RemoteTraceback` holding the worker's traceback text."""
    from concurrent.futures.process import _ExceptionWithTraceback

    return _ExceptionWithTraceback(e, e.__traceback__)


_pickler = None


def _pickler_class():
    """A protocol-5 pickler whose one addition is that a contiguous memoryview (which
    pickle refuses) travels out of band (made once)."""
    global _pickler
    if _pickler is None:
        import pickle

        class Pickler(pickle.Pickler):
            def reducer_override(self, obj):
                if type(obj) is memoryview and obj.contiguous:
                    return memoryview, (pickle.PickleBuffer(obj),)
                return NotImplemented

        _pickler = Pickler
    return _pickler


def call_pickled(payload, buffers):
    """Runs one task of the host: `payload` is `(function, args, kwargs)` pickled with
    protocol 5, its out-of-band buffers the objects in `buffers` (views of the host's
    memory, no copy). Returns (status, data, views): status 0 and the pickled result,
    or 1 and the pickled exception (with its traceback, see `_remote_exception`); views
    are the out-of-band buffers of that pickle, lent to the host until it releases
    them. Output goes where the interpreter's output goes (no per-call capture)."""
    import io
    import pickle

    def dumps(value, out):
        f = io.BytesIO()
        _pickler_class()(f, protocol=5, buffer_callback=out.append).dump(value)
        return f.getvalue()

    try:
        fn, args, kwargs = pickle.loads(payload, buffers=buffers)
        value, status = fn(*args, **kwargs), 0
    except BaseException as e:
        value, status = _remote_exception(e), 1
    out = []
    try:
        data = dumps(value, out)
    except BaseException as e:
        err = (type(e).__name__ + ": " + str(e)) if status == 0 else repr(value.exc)
        what = "result" if status == 0 else "exception"
        out = []
        value, status = (
            _remote_exception(RuntimeError(f"the task's {what} could not be pickled ({err})")),
            1,
        )
        data = pickle.dumps(value, protocol=5)
    return status, data, [b.raw() for b in out]


def before_finalize():
    """Threads other than the main one still alive (daemon threads)."""
    me = threading.main_thread()
    live = sum(1 for t in threading.enumerate() if t is not me and t.is_alive())
    # Partial lines of threads still running (daemon threads) go out now, as a plain
    # process's final flush of its shared stream would write them.
    for pending in list(_all_pending):
        pending.flush(1)
        pending.flush(2)
    return live
