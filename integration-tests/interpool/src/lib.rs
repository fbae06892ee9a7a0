//! `interpool._native`: the Rust side of the `interpool` Python package. One class per
//! concern, each over `integration_tests::multipy`:
//!
//! - `PyInterpreter` (`interpool._native.Interpreter`): one worker interpreter, a
//!   fresh copy of the host's own libpython loaded by elf-loader into a namespace of its
//!   own, in this process. `call_pickled` runs a task given as a protocol-5 pickle: the
//!   pickle's out-of-band buffers (numpy arrays, `bytes`, anything exporting the buffer
//!   protocol) are lent to the worker as views of the same memory, never copied; the
//!   result's out-of-band buffers come back as `RemoteBuffer`s, views of the worker's
//!   memory. The host's GIL is released while the worker runs.
//! - `RemoteBuffer`: a buffer-protocol object over memory a worker lent to the host.
//!
//! Ownership: a host buffer lent to a worker stays referenced (its `Py_buffer` held)
//! until the worker's last view of it is gone; the reference is then dropped under the
//! host's GIL (at the next call, or from a pending call the host's main thread runs). A
//! `RemoteBuffer` keeps its worker's memory lent, and its worker interpreter loaded
//! (though closed to new work), until it is garbage: the worker gets the memory back at
//! its next call or `release_pending`.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod queue;
mod sigint;

use integration_tests::multipy::{
    self, BorrowedBuffer, Config, Interpreter, KeepAlive, LentBuffer, PythonSpec, Stream,
};
use pyo3::exceptions::{PyBufferError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{create_exception, ffi};
use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

create_exception!(
    _native,
    InterpreterError,
    PyRuntimeError,
    "A worker interpreter failed (could not start, or its runtime reported an error)."
);

/// A host `Py_buffer` lent to a worker (the `keep` of its [`LentBuffer`]). Released
/// under the host's GIL: dropping it (from whatever thread the worker's last view died
/// on) queues it.
struct HostView(Option<Box<ffi::Py_buffer>>);

/// A `Py_buffer` waiting for the host's GIL to be released.
struct Released(Box<ffi::Py_buffer>);

// SAFETY: the Py_buffer is only released (PyBuffer_Release) under the host's GIL, by
// `drain_released`; until then it is an inert record.
unsafe impl Send for HostView {}
// SAFETY: as above; nothing reads it through a shared reference.
unsafe impl Sync for HostView {}
// SAFETY: as above.
unsafe impl Send for Released {}

/// Host buffers whose last worker view is gone, waiting for the host's GIL.
static RELEASED: Mutex<Vec<Released>> = Mutex::new(Vec::new());
/// A pending call to drain [`RELEASED`] is scheduled on the host's main thread.
static SCHEDULED: AtomicBool = AtomicBool::new(false);

impl Drop for HostView {
    fn drop(&mut self) {
        let Some(view) = self.0.take() else { return };
        RELEASED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Released(view));
        if !SCHEDULED.swap(true, Ordering::AcqRel) {
            // SAFETY: Py_AddPendingCall may be called from any thread without a thread
            // state; `drain_pending` has the signature it expects. A full queue only
            // leaves the buffers for the next call to drain.
            if unsafe { ffi::Py_AddPendingCall(Some(drain_pending), std::ptr::null_mut()) } != 0 {
                SCHEDULED.store(false, Ordering::Release);
            }
        }
    }
}

/// An all-zero `Py_buffer` (nothing to release).
fn empty_view() -> ffi::Py_buffer {
    // SAFETY: Py_buffer is plain data; all-zero (a null `obj`) is the state
    // PyBuffer_Release leaves and ignores.
    unsafe { std::mem::zeroed() }
}

/// The pending call: runs on the host's main thread with its GIL held.
extern "C" fn drain_pending(_: *mut c_void) -> c_int {
    SCHEDULED.store(false, Ordering::Release);
    // SAFETY: pending calls run with the GIL held.
    unsafe { drain_released_with_gil() };
    0
}

/// Releases the queued host buffers.
///
/// # Safety
/// The calling thread holds the host's GIL.
unsafe fn drain_released_with_gil() {
    let views = std::mem::take(&mut *RELEASED.lock().unwrap_or_else(|e| e.into_inner()));
    for Released(mut v) in views {
        // SAFETY: a buffer obtained with PyObject_GetBuffer, released once; GIL held.
        unsafe { ffi::PyBuffer_Release(&mut *v) };
    }
}

fn drain_released(_py: Python<'_>) {
    // SAFETY: `_py` proves the GIL is held.
    unsafe { drain_released_with_gil() };
}

/// One worker interpreter and what the host owes it.
struct Worker {
    /// The interpreter (`None` once closed and unloaded).
    interp: RwLock<Option<Interpreter>>,
    /// Ids of buffers it lent whose host objects are gone: given back at its next call.
    returned: Mutex<Vec<u64>>,
    /// Closed to new work.
    closed: AtomicBool,
    /// Results' buffers are lent writable when the worker's memory is writable.
    writable_results: bool,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // The last reference (a RemoteBuffer, maybe dropped by a thread holding the
        // host's GIL): finalise and unload on a thread of its own, not blocking that one.
        let interp = self
            .interp
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(interp) = interp {
            let _ = std::thread::Builder::new()
                .name("interpool-unload".into())
                .spawn(move || drop(interp));
        }
    }
}

fn interpreter_error(e: multipy::Error) -> PyErr {
    InterpreterError::new_err(e.to_string())
}

fn closed_error() -> PyErr {
    InterpreterError::new_err("the interpreter is closed")
}

/// `interpool._native.Interpreter`: a worker interpreter of this process.
#[pyclass(module = "interpool._native", name = "Interpreter", frozen)]
struct PyInterpreter {
    worker: Arc<Worker>,
    id: usize,
    version: String,
}

/// Writes a worker's output to the process's own standard output or error, as a child
/// process of `ProcessPoolExecutor` would (straight to the file descriptor).
fn forward_to_fds() -> multipy::Sink {
    Arc::new(|_id, stream, text: &str| {
        let fd = match stream {
            Stream::Stdout => 1,
            Stream::Stderr => 2,
        };
        let mut rest = text.as_bytes();
        while !rest.is_empty() {
            // SAFETY: writes initialised bytes from a live slice.
            let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
            if n <= 0 {
                if n < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                {
                    continue;
                }
                break;
            }
            rest = &rest[n as usize..];
        }
    })
}

#[pymethods]
impl PyInterpreter {
    /// Starts a worker interpreter: `executable` is the CPython whose shared library is
    /// loaded (the host's own by default, passed by the package), `venv` the virtual
    /// environment whose `site-packages` it sees. Blocks (without the host's GIL) until
    /// the interpreter is initialised.
    #[new]
    #[pyo3(signature = (executable, venv=None, writable_results=false))]
    fn new(
        py: Python<'_>,
        executable: PathBuf,
        venv: Option<PathBuf>,
        writable_results: bool,
    ) -> PyResult<Self> {
        let mut config = Config::new()
            .python(PythonSpec::Path(executable))
            .forward(forward_to_fds());
        if let Some(v) = venv {
            config = config.venv(v);
        }
        let interp = py
            .detach(move || Interpreter::new(config))
            .map_err(interpreter_error)?;
        let id = interp.id();
        let version = interp.python().version_string.clone();
        Ok(PyInterpreter {
            worker: Arc::new(Worker {
                interp: RwLock::new(Some(interp)),
                returned: Mutex::new(Vec::new()),
                closed: AtomicBool::new(false),
                writable_results,
            }),
            id,
            version,
        })
    }

    /// The interpreter's number in this process.
    #[getter]
    fn id(&self) -> usize {
        self.id
    }

    /// Its CPython version (`3.11.7`).
    #[getter]
    fn version(&self) -> &str {
        &self.version
    }

    /// Closed (by `close`).
    #[getter]
    fn closed(&self) -> bool {
        self.worker.closed.load(Ordering::Acquire)
    }

    /// Runs `code` in the interpreter's `__main__` (output goes to this process's
    /// standard output and error). A Python exception there raises `InterpreterError`
    /// with its traceback.
    fn run(&self, py: Python<'_>, code: String) -> PyResult<()> {
        let worker = self.worker.clone();
        py.detach(move || {
            let g = worker.interp.read().unwrap_or_else(|e| e.into_inner());
            match (&*g, worker.closed.load(Ordering::Acquire)) {
                (Some(i), false) => i.run(&code).map(drop).map_err(|e| e.to_string()),
                _ => Err("the interpreter is closed".to_string()),
            }
        })
        .map_err(InterpreterError::new_err)
    }

    /// Runs the task `payload` (a protocol-5 pickle of `(function, args, kwargs)`) whose
    /// out-of-band buffers are `buffers` (objects exporting the buffer protocol,
    /// contiguous), lent writable where `writable` says so, read-only otherwise. Returns
    /// `(raised, pickled result or exception, result buffers)`.
    ///
    /// `forward_sigint`: the calling thread is the host's main thread, whose Ctrl-C must
    /// interrupt the call (`sigint.rs`).
    #[pyo3(signature = (payload, buffers, writable, forward_sigint=false))]
    fn call_pickled<'py>(
        &self,
        py: Python<'py>,
        payload: &[u8],
        buffers: Vec<Bound<'py, PyAny>>,
        writable: Vec<bool>,
        forward_sigint: bool,
    ) -> PyResult<(bool, Bound<'py, PyBytes>, Vec<RemoteBuffer>)> {
        drain_released(py);
        if writable.len() != buffers.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "one writable flag per buffer",
            ));
        }
        let mut lent = Vec::with_capacity(buffers.len());
        for (obj, w) in buffers.iter().zip(&writable) {
            let mut view = Box::new(empty_view());
            let flags = if *w {
                ffi::PyBUF_WRITABLE
            } else {
                ffi::PyBUF_SIMPLE
            };
            // SAFETY: `obj` is a live object (GIL held); `view` is a Py_buffer to fill.
            if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } != 0 {
                return Err(PyErr::fetch(py));
            }
            let (ptr, len) = (view.buf as *const u8, view.len.max(0) as usize);
            let keep: KeepAlive = Arc::new(HostView(Some(view)));
            lent.push(LentBuffer {
                ptr,
                len,
                readonly: !*w,
                keep,
            });
        }
        let returned = std::mem::take(
            &mut *self
                .worker
                .returned
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let worker = self.worker.clone();
        let payload = payload.to_vec();
        // SAFETY: pthread_self has no preconditions.
        let ident = unsafe { libc::pthread_self() } as u64;
        let _forward = forward_sigint.then(|| sigint::Forward::new(worker.clone(), ident));
        let reply = py.detach(move || {
            let g = worker.interp.read().unwrap_or_else(|e| e.into_inner());
            match (&*g, worker.closed.load(Ordering::Acquire)) {
                (Some(i), false) => {
                    // SAFETY: each lent buffer's memory is held by its Py_buffer (kept
                    // by `keep` until the worker's last view dies); writable only where
                    // the exporter granted PyBUF_WRITABLE.
                    unsafe { i.call_pickled(&payload, lent, &returned) }.map_err(interpreter_error)
                }
                _ => {
                    // Not sent: the ids go back for the next call (the lent views drop).
                    worker
                        .returned
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(returned);
                    Err(closed_error())
                }
            }
        })?;
        let bufs = reply
            .buffers
            .into_iter()
            .map(|b: BorrowedBuffer| RemoteBuffer {
                worker: self.worker.clone(),
                ptr: b.ptr as usize,
                len: b.len,
                readonly: b.readonly || !self.worker.writable_results,
                id: b.id,
            })
            .collect();
        Ok((reply.raised, PyBytes::new(py, &reply.payload), bufs))
    }

    /// Gives the worker back the memory of result buffers that are garbage now (done at
    /// every call too).
    fn release_pending(&self, py: Python<'_>) {
        drain_released(py);
        let ids = std::mem::take(
            &mut *self
                .worker
                .returned
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        if ids.is_empty() {
            return;
        }
        let worker = self.worker.clone();
        py.detach(move || {
            if let Some(i) = &*worker.interp.read().unwrap_or_else(|e| e.into_inner()) {
                i.release_borrowed(&ids);
            }
        });
    }

    /// Raises `KeyboardInterrupt` in the thread `ident` (`threading.get_ident()` of the
    /// host thread running a task in this interpreter) at its next bytecode boundary.
    /// Whether the thread was running in it.
    fn interrupt(&self, py: Python<'_>, ident: u64) -> bool {
        let worker = self.worker.clone();
        py.detach(move || {
            worker
                .interp
                .try_read()
                .ok()
                .and_then(|g| g.as_ref().map(|i| i.interrupt(ident)))
                .unwrap_or(false)
        })
    }

    /// Closes the interpreter: finalised and unloaded now (waiting for running calls),
    /// or, while result buffers it lent are still alive, as soon as the last is gone.
    /// Idempotent.
    fn close(&self, py: Python<'_>) {
        drain_released(py);
        if self.worker.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let worker = self.worker.clone();
        py.detach(move || {
            let mut g = worker.interp.write().unwrap_or_else(|e| e.into_inner());
            // Only `self` and `worker` hold it: no RemoteBuffer is alive.
            if Arc::strong_count(&worker) <= 2 {
                drop(g.take());
            }
        });
    }

    fn __repr__(&self) -> String {
        format!(
            "<interpool.Interpreter {} (CPython {}){}>",
            self.id,
            self.version,
            if self.closed() { " closed" } else { "" }
        )
    }
}

/// `interpool._native.RemoteBuffer`: memory a worker interpreter lent to the host (an
/// out-of-band buffer of a result), exported through the buffer protocol without a
/// copy. Read-only unless the pool was made with `writable_results=True`.
#[pyclass(module = "interpool._native", frozen)]
struct RemoteBuffer {
    worker: Arc<Worker>,
    ptr: usize,
    len: usize,
    readonly: bool,
    id: u64,
}

impl Drop for RemoteBuffer {
    fn drop(&mut self) {
        self.worker
            .returned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.id);
    }
}

#[pymethods]
impl RemoteBuffer {
    /// # Safety
    /// Called by Python's buffer protocol with a `Py_buffer` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let me = slf.get();
        if flags & ffi::PyBUF_WRITABLE != 0 && me.readonly {
            return Err(PyBufferError::new_err(
                "the worker interpreter lent this buffer read-only",
            ));
        }
        // SAFETY: `view` is the caller's Py_buffer; the memory stays lent while this
        // object lives, and PyBuffer_FillInfo makes the view hold a reference to it.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                me.ptr as *mut c_void,
                me.len as ffi::Py_ssize_t,
                c_int::from(me.readonly),
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// Read-only.
    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }

    fn __repr__(&self) -> String {
        format!(
            "<interpool.RemoteBuffer {} bytes{}>",
            self.len,
            if self.readonly { ", read-only" } else { "" }
        )
    }
}

/// The address and length of `obj`'s buffer (contiguous), to recognise one buffer
/// among a pickle's out-of-band buffers.
#[pyfunction]
fn buffer_region(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    let mut view = empty_view();
    // SAFETY: `obj` is live (GIL held); the view is released right after.
    unsafe {
        if ffi::PyObject_GetBuffer(obj.as_ptr(), &mut view, ffi::PyBUF_SIMPLE) != 0 {
            return Err(PyErr::fetch(py));
        }
        let region = (view.buf as usize, view.len.max(0) as usize);
        ffi::PyBuffer_Release(&mut view);
        Ok(region)
    }
}

/// Host buffers lent to workers whose release waits for the host's GIL (for tests).
#[pyfunction]
fn pending_host_releases() -> usize {
    RELEASED.lock().unwrap_or_else(|e| e.into_inner()).len()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyInterpreter>()?;
    m.add_class::<RemoteBuffer>()?;
    m.add_class::<queue::WorkQueue>()?;
    m.add_class::<queue::Claim>()?;
    m.add_function(wrap_pyfunction!(buffer_region, m)?)?;
    m.add_function(wrap_pyfunction!(pending_host_releases, m)?)?;
    m.add("InterpreterError", m.py().get_type::<InterpreterError>())?;
    Ok(())
}
