"""The executor and the worker interpreters.

``InterpreterPoolExecutor`` is, as CPython 3.14's, a ``ThreadPoolExecutor`` whose
worker threads each own an interpreter: the futures, the work queue, ``shutdown``,
``cancel_futures`` and the exit hook are the standard library's own; a task goes from
the worker thread into that thread's interpreter as a protocol-5 pickle, and comes back
the same way. The host's GIL is released while the interpreter runs the task.
"""

import concurrent.futures
import functools
import io
import itertools
import multiprocessing.spawn
import os
import pickle
import sys
import threading
import types
import weakref
from concurrent.futures import thread as _thread

from . import _native

InterpreterError = _native.InterpreterError
RemoteBuffer = _native.RemoteBuffer

__all__ = [
    "InterpreterPoolExecutor",
    "BrokenInterpreterPool",
    "Interpreter",
    "InterpreterError",
    "RemoteBuffer",
    "writable",
]


class BrokenInterpreterPool(_thread.BrokenThreadPool):
    """The pool cannot run tasks any more: a worker interpreter could not start, its
    initializer failed, or a task broke its interpreter. (A crash in C code, such as a
    segmentation fault, ends the whole process, as it would a thread pool's.)"""


# ---------------------------------------------------------------------------------
# Out-of-band buffers: read-only unless asked otherwise.

_marks = threading.local()


class _Writable:
    """A value whose buffer the worker may write (see `writable`). Pickles exactly as
    the value it wraps, recording the value's memory region on the way."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __reduce_ex__(self, protocol):
        regions = getattr(_marks, "regions", None)
        if regions is not None:
            regions.add(_native.buffer_region(self.obj))
        if type(self.obj) is memoryview:
            return _Pickler.reducer_override(None, self.obj)
        return self.obj.__reduce_ex__(protocol)


def writable(obj):
    """Marks `obj` (a numpy array, `bytearray`, ... anything exporting a writable,
    contiguous buffer) as shared writable with the worker: the task sees the same
    memory and its writes are the caller's. Arguments are read-only in the worker
    otherwise."""
    return _Writable(obj)


class _Pickler(pickle.Pickler):
    """Protocol 5 with one addition: a contiguous `memoryview` (which pickle refuses)
    travels as an out-of-band buffer and arrives as a `memoryview` of the same memory.
    The worker pickles results the same way (multipy's bootstrap)."""

    def reducer_override(self, obj):
        if type(obj) is memoryview and obj.contiguous:
            return memoryview, (pickle.PickleBuffer(obj),)
        return NotImplemented


def _dumps(value):
    """`value` pickled with protocol 5: (data, out-of-band buffers, writable flags)."""
    found = []
    _marks.regions = set()
    try:
        f = io.BytesIO()
        _Pickler(f, protocol=5, buffer_callback=found.append).dump(value)
        data = f.getvalue()
        regions = _marks.regions
    finally:
        _marks.regions = None
    raws = [b.raw() for b in found]
    flags = [bool(regions) and _native.buffer_region(r) in regions for r in raws]
    return data, raws, flags


# ---------------------------------------------------------------------------------
# Helpers that must exist, under the same name, in the host and in every worker: the
# module is made from this source in both (pickle refers to its functions by name).

_TASKS_MODULE = "_interpool_tasks"
_TASKS_SOURCE = '''
"""interpool's helpers, made from the same source in the host and in every worker."""


def run_chunk(fn, chunk):
    """One chunk of `InterpreterPoolExecutor.map(..., chunksize=N)`."""
    return [fn(*args) for args in chunk]
'''


def _tasks_module():
    m = sys.modules.get(_TASKS_MODULE)
    if m is None:
        m = types.ModuleType(_TASKS_MODULE)
        exec(compile(_TASKS_SOURCE, f"<{_TASKS_MODULE}>", "exec"), m.__dict__)
        sys.modules[_TASKS_MODULE] = m
    return m


# A worker re-imports the host's main script (as the spawn start method does), which
# may import interpool: there `interpool._native` is this stand-in, so the import works
# and a pool made inside a worker fails with this message, instead of a second copy of
# the native extension being loaded into the worker.
_NATIVE_STANDIN = '''
"""interpool's native extension does not load in a worker interpreter."""

IN_WORKER = True
_WHY = (
    "interpool cannot start interpreters from inside one of its worker interpreters "
    "(if this is the host's main script, which each worker runs again as __mp_main__, "
    "make the pool under `if __name__ == '__main__':`, as with ProcessPoolExecutor)"
)


class InterpreterError(RuntimeError):
    pass


class RemoteBuffer:
    pass


class Interpreter:
    def __init__(self, *args, **kwargs):
        raise InterpreterError(_WHY)


def buffer_region(obj):
    raise InterpreterError(_WHY)
'''

_WORKER_SETUP = f"""
import sys, types
def _module(name, source):
    if name not in sys.modules:
        m = types.ModuleType(name)
        exec(compile(source, '<' + name + '>', 'exec'), m.__dict__)
        sys.modules[name] = m
_module({_TASKS_MODULE!r}, {_TASKS_SOURCE!r})
_module('interpool._native', {_NATIVE_STANDIN!r})
del _module
"""


def _host_executable():
    return getattr(sys, "_base_executable", None) or sys.executable


def _host_venv():
    return sys.prefix if sys.prefix != sys.base_prefix else None


# ---------------------------------------------------------------------------------
# One worker interpreter.


class Interpreter:
    """One interpreter of this process, of the same CPython as the host, seeing the same
    virtual environment, `sys.path` and `__main__` module (prepared as
    `multiprocessing`'s spawn start method prepares a child).

    `call(fn, *args, **kwargs)` runs `fn` there (found by qualified name, as pickle finds
    it) and returns its result or raises its exception, with the worker's traceback as
    `__cause__`; `run(code)` executes source in its `__main__`; `close()` finalises it.
    Its output goes to this process's standard output and error."""

    def __init__(self, *, writable_results=False, prepare=True):
        self._native = _native.Interpreter(
            _host_executable(), _host_venv(), writable_results
        )
        self._native.run(_WORKER_SETUP)
        if prepare:
            data = multiprocessing.spawn.get_preparation_data("interpool-worker")
            # An AuthenticationString refuses pickling outside multiprocessing's own
            # spawning; the worker gets the same key as plain bytes.
            if "authkey" in data:
                data["authkey"] = bytes(data["authkey"])
            self.call(multiprocessing.spawn.prepare, data)

    @property
    def id(self):
        """This interpreter's number in the process."""
        return self._native.id

    @property
    def closed(self):
        return self._native.closed

    def run(self, code):
        """Runs `code` (source text) in the interpreter's `__main__`; an exception there
        raises `InterpreterError` with its traceback."""
        self._native.run(code)

    def call(self, fn, /, *args, **kwargs):
        """`fn(*args, **kwargs)` in this interpreter."""
        return self._call(fn, args, kwargs)

    def _call(self, fn, args, kwargs, forward_sigint=False):
        """`call`; `forward_sigint`: this is the host's main thread, whose Ctrl-C must
        interrupt the call (see `_Future`)."""
        data, buffers, flags = _dumps((fn, args, kwargs))
        raised, payload, result_buffers = self._native.call_pickled(
            data, buffers, flags, forward_sigint
        )
        value = pickle.loads(payload, buffers=result_buffers)
        if raised:
            try:
                raise value
            finally:
                value = None
        return value

    def interrupt(self, thread_id):
        """Raises KeyboardInterrupt in the thread `thread_id` (`threading.get_ident()`)
        while it runs a call in this interpreter. Whether it was."""
        return self._native.interrupt(thread_id)

    def close(self):
        """Finalises and unloads the interpreter (result buffers it lent keep its memory
        until they are garbage). Idempotent."""
        self._native.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return repr(self._native)


# ---------------------------------------------------------------------------------
# The executor.

_worker = threading.local()


class _WorkerState:
    """A worker thread's interpreter; closed when the thread ends (its thread-local
    storage is freed) or when the pool shuts down."""

    def __init__(self, interp):
        self.interp = interp
        self.thread = threading.get_ident()
        self.running = False
        # A thread waiting for a result runs that task here (`_Future.result`).
        self.lent = False
        # Interrupted (Ctrl-C) since it started running: interrupted once only, so that
        # a second KeyboardInterrupt does not land in the task's own error handling.
        self.interrupted = False

    def __del__(self):
        try:
            self.interp.close()
        except Exception:
            pass


def _worker_interpreter(pool):
    """This worker thread's interpreter, started (and its initializer run) on the
    thread's first task, after the task was taken from the queue: a pool shut down
    with `cancel_futures=True` right after submitting still runs the tasks its threads
    took, as a thread pool does. If it cannot start or its initializer raises, the pool
    is broken (`BrokenInterpreterPool` for this and every pending task), as a thread
    pool's failing initializer breaks it."""
    state = getattr(_worker, "state", None)
    if state is not None:
        return state.interp
    try:
        interp = Interpreter(writable_results=pool._writable_results)
        state = _WorkerState(interp)
        with pool._states_lock:
            pool._states.append(state)
        if pool._user_initializer is not None:
            # Running: Ctrl-C in the host interrupts an initializer as it does a task.
            state.running = True
            try:
                if pool._interrupting:
                    raise KeyboardInterrupt("the host was interrupted")
                interp.call(pool._user_initializer, *pool._user_initargs)
            finally:
                state.running = False
                state.interrupted = False
    except BaseException as e:
        concurrent.futures._base.LOGGER.critical("Exception in initializer:", exc_info=True)
        pool._initializer_failed()
        raise BrokenInterpreterPool(pool._broken) from e
    _worker.state = state
    return interp


def _run_task(pool_ref, fn, args, kwargs):
    """Runs in a worker thread of the pool: the task, in that thread's interpreter."""
    pool = pool_ref()
    if pool is None:
        raise BrokenInterpreterPool("the pool is gone")
    if pool._broken:
        raise BrokenInterpreterPool(pool._broken)
    interp = _worker_interpreter(pool)
    state = _worker.state
    state.running = True
    try:
        # After `running` is set: either the host's Ctrl-C handling (which sets
        # `_interrupting` before it looks for running states) sees this task running and
        # interrupts it, or this task sees the flag and does not start.
        if pool._interrupting:
            raise KeyboardInterrupt("the host was interrupted before this task started")
        return _call_task(pool, interp, fn, args, kwargs)
    finally:
        state.running = False
        state.interrupted = False
        del pool


def _call_task(pool, interp, fn, args, kwargs, forward_sigint=False):
    """The task in `interp`; an interpreter that broke breaks the pool."""
    try:
        return interp._call(fn, args, kwargs, forward_sigint)
    except InterpreterError as e:
        pool._interpreter_broke(str(e))
        raise BrokenInterpreterPool(f"a task broke its worker interpreter: {e}") from e


class _Future(concurrent.futures.Future):
    """The executor's futures. `result()` without a timeout, called while no worker
    thread has taken the task yet and no other task waits for one, runs the task at once
    on the calling thread, in an idle worker interpreter of the pool: the caller would
    wait for it anyway, and the hand-off to a worker thread and back (two thread
    wake-ups) is most of a small task's round trip. No worker thread sees it (the work
    queue skips it). The task runs in the same interpreters as every other; only the
    host thread differs. Ctrl-C on the host's main thread interrupts it there as in a
    worker thread."""

    def __init__(self, pool_ref, call):
        super().__init__()
        self._pool_ref = pool_ref
        self._call = call
        # Taken from the work queue by a worker thread or claimed by a waiting one,
        # whichever comes first (`_native.WorkQueue` skips claimed items).
        self._claim = _native.Claim()
        # `submit` took one of the pool's idle-thread tokens for this task.
        self._token = False

    def _take(self, queue):
        """Claims the task (queued in `queue`) for the calling thread: whether no one
        had started it."""
        with self._condition:
            if self._state != concurrent.futures._base.PENDING or not queue.claim(self._claim):
                return False
            self.set_running_or_notify_cancel()
            return True

    def result(self, timeout=None):
        if timeout is None and self._state == concurrent.futures._base.PENDING:
            pool = self._pool_ref()
            if pool is not None:
                pool._run_here(self)
            del pool
        return super().result(timeout)

    result.__doc__ = concurrent.futures.Future.result.__doc__


def _chunks(chunksize, iterables):
    it = zip(*iterables)
    while True:
        chunk = tuple(itertools.islice(it, chunksize))
        if not chunk:
            return
        yield chunk


class InterpreterPoolExecutor(_thread.ThreadPoolExecutor):
    """An Executor running calls in a pool of at most `max_workers` interpreters of this
    process, each in a worker thread of its own (CPython 3.14's
    `concurrent.futures.InterpreterPoolExecutor`, here with any C extension).

    Callables, arguments and results are pickled (protocol 5): functions by qualified
    name, as `ProcessPoolExecutor` sends them, so they must be importable in the worker
    (defined in a module, or in the main script under `if __name__ == "__main__":`
    guard, as with the spawn start method). Out-of-band buffers are shared without a
    copy: read-only in the worker unless wrapped with `interpool.writable(...)`;
    a result's buffers are read-only views of the worker's memory unless
    `writable_results=True`.

    `initializer(*initargs)` runs in each worker interpreter when it starts; if it
    raises, or an interpreter cannot start, the pool is broken (`BrokenInterpreterPool`
    for pending and later tasks). A task's exception is raised by `Future.result()`
    with the worker's traceback as its `__cause__`.
    """

    _counter = itertools.count().__next__

    def __init__(
        self,
        max_workers=None,
        thread_name_prefix="",
        initializer=None,
        initargs=(),
        *,
        writable_results=False,
    ):
        if getattr(_native, "IN_WORKER", False):
            raise RuntimeError(_native._WHY)
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        thread_name_prefix = thread_name_prefix or (
            f"InterpreterPoolExecutor-{self._counter()}"
        )
        self._states = []
        self._states_lock = threading.Lock()
        self._user_initializer = initializer
        self._user_initargs = tuple(initargs)
        self._writable_results = writable_results
        self._interrupting = False
        _tasks_module()
        super().__init__(max_workers, thread_name_prefix)
        # Before any worker thread starts (each is given the queue).
        self._work_queue = _native.WorkQueue()

    def submit(self, fn, /, *args, **kwargs):
        # ThreadPoolExecutor.submit's checks and steps, with the executor's own future.
        with self._shutdown_lock, _thread._global_shutdown_lock:
            if self._broken:
                raise BrokenInterpreterPool(self._broken)
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if _thread._shutdown:
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")
            ref = weakref.ref(self)
            f = _Future(ref, (fn, args, kwargs))
            self._work_queue.put(_thread._WorkItem(f, _run_task, (ref, fn, args, kwargs), {}))
            # An idle worker thread will take it (its token), or one more is started.
            f._token = self._idle_semaphore.acquire(timeout=0)
            if not f._token:
                self._adjust_thread_count()
            return f

    submit.__doc__ = concurrent.futures.Executor.submit.__doc__

    def map(self, fn, *iterables, timeout=None, chunksize=1, buffersize=None):
        """As `Executor.map`; with `chunksize` > 1 the items go to the workers in
        chunks of that many (one task each), as with `ProcessPoolExecutor`."""
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if buffersize is not None:
            raise NotImplementedError("buffersize (3.14) is not supported on this Python")
        if chunksize == 1:
            return super().map(fn, *iterables, timeout=timeout)
        run_chunk = _tasks_module().run_chunk
        results = super().map(
            functools.partial(run_chunk, fn), _chunks(chunksize, iterables), timeout=timeout
        )
        return itertools.chain.from_iterable(results)

    def _run_here(self, future):
        """Runs `future`'s task on the calling thread in an idle worker interpreter, if
        one is idle and no worker thread took the task yet (`_Future.result`)."""
        # With other tasks queued, the worker threads have work: a task run here would
        # share an interpreter with the task its worker thread takes next (`map`).
        if self._broken or self._interrupting or self._work_queue.unclaimed() > 1:
            return
        with self._states_lock:
            state = next(
                (s for s in self._states if not (s.running or s.lent or s.interp.closed)),
                None,
            )
            if state is None:
                return
            state.lent = True
        try:
            if not future._take(self._work_queue):
                return
            fn, args, kwargs = future._call
            future._call = None
            main = threading.current_thread() is threading.main_thread()
            try:
                value = _call_task(self, state.interp, fn, args, kwargs, forward_sigint=main)
            except BaseException as e:
                future.set_exception(e)
            else:
                future.set_result(value)
            finally:
                fn = args = kwargs = value = None
            if future._token:
                # No worker thread sees the task (the work queue skips it): the idle
                # thread its token counted on is still idle.
                self._idle_semaphore.release()
        finally:
            state.lent = False

    def _initializer_failed(self):
        with self._shutdown_lock:
            self._broken = (
                "A worker interpreter failed to start or its initializer failed, "
                "the interpreter pool is not usable anymore"
            )
            self._fail_pending(self._broken)

    def _interpreter_broke(self, why):
        with self._shutdown_lock:
            self._broken = f"A worker interpreter broke ({why}), the pool is not usable anymore"
            self._fail_pending(self._broken)

    def _fail_pending(self, why):
        sentinel = False
        while True:
            try:
                item = self._work_queue.get_nowait()
            except Exception:
                break
            if item is not None:
                item.future.set_exception(BrokenInterpreterPool(why))
            else:
                sentinel = True
        if sentinel:
            # A shutdown's wake-up for the worker threads (None) stays queued: without it
            # they would wait for work forever.
            self._work_queue.put(None)

    def _interrupt_running(self):
        """Raises KeyboardInterrupt in every task (or initializer) running in a worker
        interpreter and not interrupted yet."""
        with self._states_lock:
            states = list(self._states)
        for s in states:
            if s.running and not s.interrupted and s.interp.interrupt(s.thread):
                s.interrupted = True

    def shutdown(self, wait=True, *, cancel_futures=False):
        super().shutdown(wait=wait, cancel_futures=cancel_futures)
        if wait:
            with self._states_lock:
                states, self._states = self._states, []
            for s in states:
                s.interp.close()

    shutdown.__doc__ = concurrent.futures.Executor.shutdown.__doc__

    def __exit__(self, exc_type, exc_val, exc_tb):
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            # Ctrl-C: pending work is cancelled, running tasks interrupted. A task that
            # a worker took but had not started (its interpreter still starting) does
            # not start; one interrupted before its thread entered the interpreter is
            # interrupted again, until every worker thread has ended.
            self._interrupting = True
            self.shutdown(wait=False, cancel_futures=True)
            while True:
                self._interrupt_running()
                alive = [t for t in list(self._threads) if t.is_alive()]
                if not alive:
                    break
                alive[0].join(0.05)
            self.shutdown(wait=True)
            return False
        return super().__exit__(exc_type, exc_val, exc_tb)
