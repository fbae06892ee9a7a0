//! [`Interpreter`]: one CPython interpreter in a libpython copy of its own, with a main
//! thread of its own, callable from any thread.

use super::buffer::SharedBuffer;
use super::error::{Error, Output, PythonException, Result};
use super::python::{PythonInstall, PythonSpec};
use super::runner::{self, Loaded, MpConfig, MpResult, FIELDS};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Once};
use std::thread::JoinHandle;

/// The bootstrap run in every interpreter after initialisation.
const BOOTSTRAP: &str = include_str!("bootstrap.py");

/// Which of an interpreter's output streams text was written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// `sys.stdout`.
    Stdout,
    /// `sys.stderr`.
    Stderr,
}

/// Receives text written outside any call (by threads the Python code started, by
/// `atexit` functions at finalisation), or everything when `Config.forward` is set:
/// `(interpreter id, stream, text)`.
pub type Sink = Arc<dyn Fn(usize, Stream, &str) + Send + Sync>;

/// How an interpreter is created. `Config::default()` is CPython 3.11, no virtual
/// environment, `sys.argv == [""]`, isolated from the host's `PYTHON*` variables, no
/// signal handlers, no stdin, a main thread with a process's main-thread stack
/// ([`main_stack_size`]), one OpenBLAS thread.
#[derive(Clone, Default)]
pub struct Config {
    /// Which CPython.
    pub python: PythonSpec,
    /// A virtual environment (its `site-packages`, and its `bin/python` as `sys.executable`).
    pub venv: Option<PathBuf>,
    /// `sys.argv` (empty means `[""]`, as for an interactive `python`).
    pub argv: Vec<String>,
    /// Honour the host's `PYTHON*` environment variables (`PyConfig.use_environment`).
    pub use_environment: bool,
    /// Install CPython's signal handlers (SIGINT -> KeyboardInterrupt, ...). At most one
    /// live interpreter may: dispositions are process-wide.
    pub install_signal_handlers: bool,
    /// Give this interpreter the process's standard input as `sys.stdin`. At most one
    /// live interpreter may: the others' `sys.stdin` raises `OSError` naming this
    /// option when read (interpreters reading one descriptor at once would each take an
    /// unpredictable part of it).
    pub inherit_stdin: bool,
    /// Stack size of the interpreter's main thread; `None`: [`main_stack_size`], what a
    /// plain `python` process's main thread has, so that the same recursion depth works.
    pub stack_size: Option<usize>,
    /// Skip `import site` (no `site-packages` at all).
    pub no_site: bool,
    /// Send all output to this sink as it is written instead of capturing it per call.
    pub forward: Option<Sink>,
    /// Sink for output written outside calls (default: kept, see
    /// [`Interpreter::take_background_output`]).
    pub background: Option<Sink>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("python", &self.python)
            .field("venv", &self.venv)
            .field("argv", &self.argv)
            .field("use_environment", &self.use_environment)
            .field("install_signal_handlers", &self.install_signal_handlers)
            .field("inherit_stdin", &self.inherit_stdin)
            .field("stack_size", &self.stack_size)
            .field("no_site", &self.no_site)
            .field("forward", &self.forward.is_some())
            .finish()
    }
}

impl Config {
    /// The default configuration.
    pub fn new() -> Config {
        Config::default()
    }
    /// Sets the Python (version or path).
    pub fn python(mut self, python: PythonSpec) -> Config {
        self.python = python;
        self
    }
    /// Sets the virtual environment.
    pub fn venv(mut self, venv: impl Into<PathBuf>) -> Config {
        self.venv = Some(venv.into());
        self
    }
    /// Sets `sys.argv`.
    pub fn argv<S: Into<String>>(mut self, argv: impl IntoIterator<Item = S>) -> Config {
        self.argv = argv.into_iter().map(Into::into).collect();
        self
    }
    /// Honours the host's `PYTHON*` variables.
    pub fn use_environment(mut self, yes: bool) -> Config {
        self.use_environment = yes;
        self
    }
    /// Installs CPython's signal handlers in this interpreter.
    pub fn install_signal_handlers(mut self, yes: bool) -> Config {
        self.install_signal_handlers = yes;
        self
    }
    /// Gives this interpreter the process's stdin.
    pub fn inherit_stdin(mut self, yes: bool) -> Config {
        self.inherit_stdin = yes;
        self
    }
    /// Sets the main thread's stack size.
    pub fn stack_size(mut self, bytes: usize) -> Config {
        self.stack_size = Some(bytes);
        self
    }
    /// Forwards output as it is written.
    pub fn forward(mut self, sink: Sink) -> Config {
        self.forward = Some(sink);
        self
    }
}

/// What the host side of one interpreter keeps: the output sinks and the shared buffers
/// its Python objects hold. Boxed; its address is the runner's `host` pointer.
struct Host {
    id: usize,
    forward: Option<Sink>,
    background: Option<Sink>,
    orphan: Mutex<Output>,
    /// What keeps host memory alive while this interpreter has a view of it, by id.
    buffers: Mutex<HashMap<u64, KeepAlive>>,
}

/// What keeps host memory alive while an interpreter has a view of it (a
/// [`SharedBuffer`]'s block, or whatever owns a [`LentBuffer`]'s memory): dropped when
/// the interpreter's last view is gone, or after the interpreter is unloaded.
pub type KeepAlive = Arc<dyn std::any::Any + Send + Sync>;

/// Host memory lent to an interpreter for one [`Interpreter::call_pickled`]: an
/// out-of-band buffer of the task's pickle, seen there without a copy.
pub struct LentBuffer {
    /// Its first byte.
    pub ptr: *const u8,
    /// Its length in bytes.
    pub len: usize,
    /// Read-only in the interpreter.
    pub readonly: bool,
    /// Keeps `ptr..ptr+len` valid; dropped when the interpreter no longer sees it.
    pub keep: KeepAlive,
}

// SAFETY: a description of memory whose validity `keep` (Send + Sync) guarantees; the
// pointer is only dereferenced by the interpreter under its lending contract.
unsafe impl Send for LentBuffer {}

/// An out-of-band buffer of a pickled call's result: the interpreter's memory, lent to
/// the host until [`Interpreter::release_borrowed`] (or a later call's `release` list)
/// gives it back, or the interpreter is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BorrowedBuffer {
    /// Its first byte.
    pub ptr: *const u8,
    /// Its length in bytes.
    pub len: usize,
    /// The interpreter exported it read-only.
    pub readonly: bool,
    /// The interpreter's id for it, for the release.
    pub id: u64,
}

// SAFETY: a description of memory (address, length, id); using it is the holder's
// business, under the interpreter's lending contract.
unsafe impl Send for BorrowedBuffer {}

/// The answer of [`Interpreter::call_pickled`].
#[derive(Debug)]
pub struct PickledReply {
    /// The task raised: `payload` is the pickled exception (with the worker's traceback
    /// as ProcessPoolExecutor carries it), not its result.
    pub raised: bool,
    /// The result or exception, pickled with protocol 5.
    pub payload: Vec<u8>,
    /// The pickle's out-of-band buffers, lent by the interpreter.
    pub buffers: Vec<BorrowedBuffer>,
}

/// The runner's `write` callback.
unsafe extern "C" fn host_write(host: *mut c_void, stream: c_int, data: *const c_char, len: usize) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `host` is the Box<Host> this interpreter passed to mp_initialize, alive
        // until after the copy is unloaded; data..data+len is UTF-8 from Python.
        let (host, bytes) = unsafe {
            (
                &*(host as *const Host),
                std::slice::from_raw_parts(data.cast::<u8>(), len),
            )
        };
        let text = String::from_utf8_lossy(bytes);
        let stream = if stream == 2 {
            Stream::Stderr
        } else {
            Stream::Stdout
        };
        if let Some(sink) = host.forward.as_ref().or(host.background.as_ref()) {
            sink(host.id, stream, &text);
        } else {
            let mut o = host.orphan.lock().unwrap_or_else(|e| e.into_inner());
            match stream {
                Stream::Stdout => o.stdout.push_str(&text),
                Stream::Stderr => o.stderr.push_str(&text),
            }
        }
    }));
}

/// The runner's `release` callback: a shared-buffer object died.
unsafe extern "C" fn host_release(host: *mut c_void, id: u64) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: as in host_write.
        let host = unsafe { &*(host as *const Host) };
        host.buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }));
}

enum Job {
    Run(Box<dyn FnOnce() + Send>),
    Finalize(mpsc::Sender<(c_int, c_int)>),
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(0);
static NEXT_BUFFER: AtomicU64 = AtomicU64::new(1);
/// The interpreter that installed signal handlers, if any (id + 1, 0 = none).
static SIGNAL_OWNER: AtomicUsize = AtomicUsize::new(0);
/// The interpreter that has the process's stdin, if any (id + 1, 0 = none).
static STDIN_OWNER: AtomicUsize = AtomicUsize::new(0);

/// The stack a plain `python` process's main thread has: the soft `RLIMIT_STACK`
/// (8 MiB on most systems), or 8 MiB when that is unlimited, at least 2 MiB. Used for
/// each interpreter's main thread; give threads that call deep Python code through
/// `run` the same (`std::thread::Builder::stack_size`): calls run on the caller's stack,
/// and a thread spawned by Rust has 2 MiB, a third of the recursion depth `python` allows.
pub fn main_stack_size() -> usize {
    const DEFAULT: usize = 8 << 20;
    // SAFETY: getrlimit writes into the struct passed.
    let soft = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        (libc::getrlimit(libc::RLIMIT_STACK, &mut r) == 0).then_some(r.rlim_cur)
    };
    match soft {
        Some(l) if l != libc::RLIM_INFINITY => (l as usize).clamp(2 << 20, 1 << 30),
        _ => DEFAULT,
    }
}

/// Takes the process-wide role `slot` holds (signal handlers, stdin) for interpreter
/// `id`, or names the interpreter that has it.
fn claim(slot: &AtomicUsize, id: usize, what: &str) -> Result<()> {
    slot.compare_exchange(0, id + 1, Ordering::AcqRel, Ordering::Acquire)
        .map(drop)
        .map_err(|owner| {
            Error::InvalidArgument(format!(
                "interpreter {} already {what}; only one live interpreter may",
                owner - 1
            ))
        })
}

/// Gives back what `claim` took, if interpreter `id` holds it.
fn release(slot: &AtomicUsize, id: usize) {
    let _ = slot.compare_exchange(id + 1, 0, Ordering::AcqRel, Ordering::Acquire);
}

/// One CPython interpreter: a fresh copy of libpython in an elf-loader namespace of its
/// own, initialised with `PyConfig` by a thread it owns (its `threading.main_thread()`).
/// `run`, `run_file`, `run_module` and `call` may be called from any thread; each runs
/// on the calling thread under this copy's GIL, so calls into different interpreters
/// run in parallel. Dropping it finalises the interpreter and unloads the copy.
pub struct Interpreter {
    id: usize,
    install: PythonInstall,
    executable: PathBuf,
    loaded: Option<Loaded>,
    host: Box<Host>,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    main: Option<JoinHandle<()>>,
    signals_before: Vec<(c_int, libc::sigaction)>,
}

/// The interpreter's result of one call: its output and, for [`Interpreter::call`], the
/// returned value (as JSON; values JSON cannot express are given as their `repr`).
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// What the call wrote.
    pub output: Output,
    /// The return value of `call` (`null` for the others).
    pub value: serde_json::Value,
}

/// Sets `OPENBLAS_NUM_THREADS` to 1 in the process environment, once, before the first
/// interpreter starts, unless the host set it (the documented OpenBLAS policy: each
/// interpreter's numpy has its own OpenBLAS copy, and one BLAS thread per interpreter
/// keeps N interpreters from starting N x cores threads).
fn apply_blas_policy() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for var in ["OPENBLAS_NUM_THREADS"] {
            if std::env::var_os(var).is_none() {
                std::env::set_var(var, "1");
            }
        }
    });
}

fn venv_python(venv: &Path, install: &PythonInstall) -> Result<PathBuf> {
    let bad = |why: String| Error::BadVenv {
        venv: venv.to_path_buf(),
        why,
    };
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg"))
        .map_err(|e| bad(format!("pyvenv.cfg: {e}")))?;
    let exe = venv.join("bin").join("python");
    if !exe.exists() {
        return Err(bad(format!("{} missing", exe.display())));
    }
    let version = cfg
        .lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| matches!(k.trim(), "version" | "version_info"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let want = format!("{}.{}.", install.version.0, install.version.1);
    if !version.starts_with(&want) {
        return Err(bad(format!(
            "it was made by Python {version}, not {}",
            install.version_string
        )));
    }
    Ok(exe)
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::InvalidArgument(format!("{what} contains a NUL byte")))
}

fn signal_dispositions() -> Vec<(c_int, libc::sigaction)> {
    (1..=64)
        .filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP)
        .filter_map(|s| {
            // SAFETY: querying (not changing) a disposition into a zeroed struct.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                (libc::sigaction(s, std::ptr::null(), &mut old) == 0).then_some((s, old))
            }
        })
        .collect()
}

impl Interpreter {
    /// Loads a fresh copy of the configured CPython and initialises it on a new thread
    /// of its own.
    pub fn new(config: Config) -> Result<Interpreter> {
        // With a venv, its own base Python (pyvenv.cfg's `home`) when it is the version
        // asked for: no pyenv shim to run.
        let from_venv = match (&config.venv, &config.python) {
            (Some(v), PythonSpec::Default | PythonSpec::Version(..)) => {
                let want = match config.python {
                    PythonSpec::Version(a, b) => (a, b),
                    _ => (3, 11),
                };
                PythonInstall::from_venv(v).filter(|i| i.version == want)
            }
            _ => None,
        };
        let install = match from_venv {
            Some(i) => i,
            None => PythonInstall::find(&config.python)?,
        };
        let executable = match &config.venv {
            Some(v) => venv_python(v, &install)?,
            None => install.executable.clone(),
        };
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if config.install_signal_handlers {
            claim(&SIGNAL_OWNER, id, "installed signal handlers")?;
        }
        if config.inherit_stdin {
            if let Err(e) = claim(&STDIN_OWNER, id, "has the process's stdin") {
                release(&SIGNAL_OWNER, id);
                return Err(e);
            }
        }
        apply_blas_policy();
        let signals_before = signal_dispositions();
        let host = Box::new(Host {
            id,
            forward: config.forward.clone(),
            background: config.background.clone(),
            orphan: Mutex::new(Output::default()),
            buffers: Mutex::new(HashMap::new()),
        });
        let host_ptr = &*host as *const Host as usize;
        let exe_c = cstring("executable path", &executable.to_string_lossy())?;
        let mut argv = config.argv.clone();
        if argv.is_empty() {
            argv.push(String::new());
        }
        let argv_c = argv
            .iter()
            .map(|a| cstring("argv", a))
            .collect::<Result<Vec<_>>>()?;
        let (ready_tx, ready_rx) = mpsc::channel::<Result<Loaded>>();
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let name = format!("multipy-{id}");
        let install2 = install.clone();
        let cfg = (
            config.use_environment,
            config.install_signal_handlers,
            !config.no_site,
        );
        let main = std::thread::Builder::new()
            .name(name.clone())
            .stack_size(config.stack_size.unwrap_or_else(main_stack_size))
            .spawn(move || {
                let loaded = match runner::load(&install2, &name) {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let bootstrap = CString::new(BOOTSTRAP).expect("bootstrap has no NUL");
                let compiled = runner::BootstrapCache::get(&install2, BOOTSTRAP);
                let mut argv_ptrs: Vec<*mut c_char> =
                    argv_c.iter().map(|a| a.as_ptr() as *mut c_char).collect();
                let conf = MpConfig {
                    abi: runner::ABI,
                    executable: exe_c.as_ptr(),
                    argc: argv_ptrs.len() as c_int,
                    argv: argv_ptrs.as_mut_ptr(),
                    use_environment: cfg.0 as c_int,
                    install_signal_handlers: cfg.1 as c_int,
                    site_import: cfg.2 as c_int,
                    bootstrap: bootstrap.as_ptr(),
                    bootstrap_code: compiled
                        .as_ref()
                        .map_or(std::ptr::null(), |c| c.as_ptr().cast()),
                    bootstrap_code_len: compiled.as_ref().map_or(0, |c| c.len()),
                    host: host_ptr as *mut c_void,
                    write: host_write,
                    release: host_release,
                };
                let mut err: *mut c_char = std::ptr::null_mut();
                let (mut code, mut code_len): (*mut c_char, usize) = (std::ptr::null_mut(), 0);
                // SAFETY: first initialisation of this fresh copy, on this thread, with
                // a config whose strings and bootstrap code outlive the call.
                let rc =
                    unsafe { (loaded.fns.initialize)(&conf, &mut err, &mut code, &mut code_len) };
                if !code.is_null() {
                    // SAFETY: runner.c malloc'd code_len bytes at code; freed once below.
                    let bytes = unsafe { std::slice::from_raw_parts(code.cast::<u8>(), code_len) };
                    runner::BootstrapCache::put(&install2, BOOTSTRAP, bytes);
                    // SAFETY: allocated by runner.c with malloc.
                    unsafe { (loaded.fns.free)(code.cast()) };
                }
                if rc != 0 {
                    let message = take_c_string(&loaded, err);
                    // An interpreter that failed half-way cannot be finalised safely:
                    // keep the copy mapped (leaked) rather than unmap live code.
                    std::mem::forget(loaded);
                    let _ = ready_tx.send(Err(Error::Init {
                        interpreter: id,
                        message,
                    }));
                    return;
                }
                let finalize = loaded.fns.finalize;
                let _ = ready_tx.send(Ok(loaded));
                for job in job_rx {
                    match job {
                        Job::Run(f) => f(),
                        Job::Finalize(reply) => {
                            let mut live: c_int = 0;
                            // SAFETY: this is the thread that initialised the copy; no
                            // call is running (Drop has exclusive access).
                            let rc = unsafe { finalize(&mut live) };
                            let _ = reply.send((rc, live));
                            break;
                        }
                    }
                }
            })
            .map_err(|e| Error::Init {
                interpreter: id,
                message: format!("cannot start its main thread: {e}"),
            });
        let main = match main {
            Ok(m) => m,
            Err(e) => {
                release(&SIGNAL_OWNER, id);
                release(&STDIN_OWNER, id);
                return Err(e);
            }
        };
        let loaded = match ready_rx.recv() {
            Ok(Ok(l)) => l,
            failed => {
                let _ = main.join();
                release(&SIGNAL_OWNER, id);
                release(&STDIN_OWNER, id);
                return Err(match failed {
                    Ok(Err(e)) => e,
                    _ => Error::MainThreadGone(id),
                });
            }
        };
        let me = Interpreter {
            id,
            install,
            executable,
            loaded: Some(loaded),
            host,
            jobs: Mutex::new(Some(job_tx)),
            main: Some(main),
            signals_before,
        };
        if config.forward.is_some() {
            me.dispatch(&["forward"])?;
        }
        if !config.inherit_stdin {
            me.dispatch(&["no_stdin"])?;
        }
        tracing::info!(interpreter = id, python = %me.install.version_string, libraries = me.namespace().library_count(), "multipy interpreter ready");
        Ok(me)
    }

    /// This interpreter's number (unique in the process, from 0).
    pub fn id(&self) -> usize {
        self.id
    }

    /// The CPython installation it runs.
    pub fn python(&self) -> &PythonInstall {
        &self.install
    }

    /// Its `sys.executable`.
    pub fn executable(&self) -> &Path {
        &self.executable
    }

    /// The elf-loader namespace holding its libpython copy and extension modules.
    pub fn namespace(&self) -> &elf_loader::Namespace {
        &self.loaded().ns
    }

    /// The address of `name` in this interpreter's libpython copy.
    pub fn libpython_sym(&self, name: &str) -> Option<usize> {
        self.loaded().libpython.own_sym(name)
    }

    /// The libpython copy (a symbol provider for code that binds to this interpreter,
    /// e.g. frame-hooks).
    pub fn libpython(&self) -> &elf_loader::CustomLibrary {
        &self.loaded().libpython
    }

    /// frame-hooks' view of this interpreter's copy (PEP 523 hooks, code extras, the
    /// call profiler): bound to this copy's symbols only, so a hook installed through it
    /// sees this interpreter's calls and no other's. Drop hooks installed through it
    /// before the interpreter. frame-hooks checks the copy's frame layout and refuses a
    /// version it does not know.
    pub fn frame_hooks(
        &self,
    ) -> std::result::Result<frame_hooks::cpython::Python, frame_hooks::cpython::Error> {
        let lib = &self.loaded().libpython;
        let resolver = |name: &std::ffi::CStr| {
            use elf_loader::SymbolProvider;
            lib.sym(name.to_str().ok()?)
        };
        // SAFETY: the resolver answers with this interpreter's libpython copy's own
        // exports (or its search libraries'), by name, and nothing else; the copy is
        // initialised while `self` lives.
        unsafe { frame_hooks::cpython::Python::new(&resolver) }
    }

    fn loaded(&self) -> &Loaded {
        self.loaded.as_ref().expect("interpreter is alive")
    }

    /// Executes `code` in `__main__` (as `exec`), on the calling thread.
    pub fn run(&self, code: &str) -> Result<Output> {
        self.dispatch(&["exec", code, "<multipy>"])
            .map(|r| r.output)
    }

    /// Executes the file at `path` as `__main__` (as `python path` does; its directory
    /// goes first on `sys.path`).
    pub fn run_file(&self, path: impl AsRef<Path>) -> Result<Output> {
        let p = path.as_ref().to_string_lossy().into_owned();
        self.dispatch(&["file", &p]).map(|r| r.output)
    }

    /// Runs module `name` as `__main__` with `sys.argv = [name, *args]` (as `python -m`).
    pub fn run_module(&self, name: &str, args: &[&str]) -> Result<Output> {
        let argv = serde_json::to_string(args).expect("strings serialise");
        self.dispatch(&["module", name, &argv]).map(|r| r.output)
    }

    /// Calls `module.function(*args)`; the arguments are given as JSON values (numbers,
    /// strings, lists, dicts, booleans, null) and the result comes back as JSON.
    pub fn call(&self, module: &str, function: &str, args: &[serde_json::Value]) -> Result<Reply> {
        let argv = serde_json::to_string(args).expect("JSON values serialise");
        self.dispatch(&["call", module, function, &argv])
    }

    /// Evaluates the expression `expr` in `__main__`; the value comes back as JSON (its
    /// `repr` if JSON cannot express it).
    pub fn eval(&self, expr: &str) -> Result<serde_json::Value> {
        self.dispatch(&["eval", expr]).map(|r| r.value)
    }

    /// Sets the global `name` to `value` in `__main__`, and in the globals of every file
    /// and module run later with [`Interpreter::run_file`] / [`Interpreter::run_module`].
    pub fn set_global(&self, name: &str, value: &serde_json::Value) -> Result<()> {
        let v = serde_json::to_string(value).expect("JSON values serialise");
        self.dispatch(&["set_global", name, &v]).map(|_| ())
    }

    /// Runs `code` like [`Interpreter::run`], but on the interpreter's own main thread
    /// (where `signal.signal` works), waiting for it.
    pub fn run_on_main(&self, code: &str) -> Result<Output> {
        let code = code.to_string();
        self.on_main(move |me| me.dispatch(&["exec", &code, "<multipy>"]).map(|r| r.output))
    }

    /// Runs module `name` on the interpreter's main thread (see [`Interpreter::run_module`]).
    pub fn run_module_on_main(&self, name: &str, args: &[&str]) -> Result<Output> {
        let argv = serde_json::to_string(args).expect("strings serialise");
        let name = name.to_string();
        self.on_main(move |me| me.dispatch(&["module", &name, &argv]).map(|r| r.output))
    }

    /// Runs the file at `path` on the interpreter's main thread.
    pub fn run_file_on_main(&self, path: impl AsRef<Path>) -> Result<Output> {
        let p = path.as_ref().to_string_lossy().into_owned();
        self.on_main(move |me| me.dispatch(&["file", &p]).map(|r| r.output))
    }

    fn on_main<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Dispatcher) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let d = Dispatcher {
            id: self.id,
            fns: self.loaded().fns,
        };
        let (tx, rx) = mpsc::channel();
        let job = Job::Run(Box::new(move || {
            let _ = tx.send(f(&d));
        }));
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|j| j.send(job).is_ok())
            .unwrap_or(false);
        if !sent {
            return Err(Error::MainThreadGone(self.id));
        }
        rx.recv().map_err(|_| Error::MainThreadGone(self.id))?
    }

    fn dispatch(&self, args: &[&str]) -> Result<Reply> {
        Dispatcher {
            id: self.id,
            fns: self.loaded().fns,
        }
        .dispatch(args)
    }

    /// Exposes `buffer` to this interpreter as `__main__.<name>` (and
    /// `_multipy_host.buffers[name]`): an object supporting the buffer protocol over the
    /// same memory, writable unless `readonly`.
    pub fn share_buffer(&self, name: &str, buffer: &SharedBuffer, readonly: bool) -> Result<()> {
        if !name.chars().all(|c| c.is_alphanumeric() || c == '_')
            || name.is_empty()
            || name.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(Error::InvalidArgument(format!(
                "buffer name {name:?} is not a Python identifier"
            )));
        }
        let name_c = cstring("buffer name", name)?;
        let id = NEXT_BUFFER.fetch_add(1, Ordering::Relaxed);
        self.host
            .buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, buffer.block.clone() as KeepAlive);
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: the block stays allocated while the host holds it (until release(id)
        // or this interpreter is unloaded); the name outlives the call.
        let rc = unsafe {
            (self.loaded().fns.share_buffer)(
                name_c.as_ptr(),
                buffer.as_ptr() as *mut c_void,
                buffer.len(),
                readonly as c_int,
                id,
                &mut err,
            )
        };
        if rc != 0 {
            return Err(Error::Host {
                interpreter: self.id,
                message: take_c_string(self.loaded(), err),
            });
        }
        Ok(())
    }

    /// Runs a task sent as a pickle (protocol 5) of `(function, args, kwargs)` whose
    /// out-of-band buffers are `buffers` (seen in the interpreter as buffer-protocol
    /// objects over the same memory, read-only or not as each says): the function is
    /// found by its qualified name as pickle finds it, called on the calling thread under
    /// this interpreter's GIL, and its result (or exception) pickled back with its own
    /// out-of-band buffers lent to the host, not copied. `release` gives back the
    /// borrowed buffers of earlier replies the host is done with. Output goes to the
    /// interpreter's sink (no per-call capture).
    ///
    /// # Safety
    /// Each buffer's memory stays valid (and, if not read-only, writable) as long as its
    /// `keep` lives; the host must not write a read-only one while the interpreter may
    /// read it.
    pub unsafe fn call_pickled(
        &self,
        payload: &[u8],
        buffers: Vec<LentBuffer>,
        release: &[u64],
    ) -> Result<PickledReply> {
        let fns = self.loaded().fns;
        let mut lent = Vec::with_capacity(buffers.len());
        {
            let mut held = self.host.buffers.lock().unwrap_or_else(|e| e.into_inner());
            for b in buffers {
                let id = NEXT_BUFFER.fetch_add(1, Ordering::Relaxed);
                held.insert(id, b.keep);
                lent.push(runner::MpBuffer {
                    ptr: b.ptr as *mut c_void,
                    len: b.len,
                    readonly: c_int::from(b.readonly),
                    id,
                });
            }
        }
        let mut out = runner::MpPickled {
            status: -1,
            payload: std::ptr::null_mut(),
            payload_len: 0,
            buffers: std::ptr::null_mut(),
            nbuffers: 0,
            error: std::ptr::null_mut(),
        };
        // Each lent buffer's memory is kept alive by its `keep`, held in `host.buffers`
        // until the copy's release callback (the caller's contract for the memory).
        // SAFETY: the copy is alive (self is borrowed); the payload, buffer table and
        // release list outlive the call; the buffers as said above.
        let status = unsafe {
            (fns.call_pickled)(
                payload.as_ptr().cast(),
                payload.len(),
                lent.as_ptr(),
                lent.len(),
                release.as_ptr(),
                release.len(),
                &mut out,
            )
        };
        let borrowed: Vec<BorrowedBuffer> = (0..out.nbuffers)
            .map(|i| {
                // SAFETY: runner.c filled `nbuffers` entries of the array.
                let b = unsafe { *out.buffers.add(i) };
                BorrowedBuffer {
                    ptr: b.ptr as *const u8,
                    len: b.len,
                    readonly: b.readonly != 0,
                    id: b.id,
                }
            })
            .collect();
        let data = if out.payload.is_null() {
            Vec::new()
        } else {
            // SAFETY: payload_len bytes malloc'd by runner.c.
            unsafe { std::slice::from_raw_parts(out.payload.cast::<u8>(), out.payload_len) }
                .to_vec()
        };
        // SAFETY: both malloc'd by runner.c (or null), freed once.
        unsafe {
            (fns.free)(out.payload.cast());
            (fns.free)(out.buffers.cast());
        }
        if status < 0 {
            return Err(Error::Host {
                interpreter: self.id,
                message: take_c_string(self.loaded(), out.error),
            });
        }
        Ok(PickledReply {
            raised: status == 1,
            payload: data,
            buffers: borrowed,
        })
    }

    /// Gives back borrowed buffers of earlier [`Interpreter::call_pickled`] replies (by
    /// id; unknown ids are ignored). Takes this interpreter's GIL.
    pub fn release_borrowed(&self, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        // SAFETY: the copy is alive; the id list outlives the call.
        unsafe { (self.loaded().fns.release_lent)(ids.as_ptr(), ids.len()) };
    }

    /// Raises `KeyboardInterrupt` in the thread `ident` (its `threading.get_ident()`,
    /// the pthread id of a thread running this interpreter's code) at its next bytecode
    /// boundary. Whether such a thread was found.
    pub fn interrupt(&self, ident: u64) -> bool {
        // SAFETY: the copy is alive; plain integer argument.
        unsafe { (self.loaded().fns.interrupt)(ident as std::ffi::c_ulong) > 0 }
    }

    /// Number of shared buffers (views) this interpreter's Python objects hold.
    pub fn shared_buffer_views(&self) -> usize {
        self.host
            .buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Output written outside any call since the last time (when no sink is configured).
    pub fn take_background_output(&self) -> Output {
        std::mem::take(&mut *self.host.orphan.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// What a call needs: the interpreter's number and its runner's entry points (copyable
/// into jobs for the main thread).
#[derive(Clone, Copy)]
struct Dispatcher {
    id: usize,
    fns: runner::RunnerFns,
}

fn take_c_string(loaded: &Loaded, p: *mut c_char) -> String {
    take_raw(loaded.fns.free, p, None)
}

fn take_raw(free: unsafe extern "C" fn(*mut c_void), p: *mut c_char, len: Option<usize>) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: p is a NUL-terminated malloc'd string from runner.c (len bytes if given).
    let s = unsafe {
        match len {
            Some(n) => {
                String::from_utf8_lossy(std::slice::from_raw_parts(p.cast::<u8>(), n)).into_owned()
            }
            None => std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned(),
        }
    };
    // SAFETY: runner.c allocated it with malloc; freed once.
    unsafe { free(p.cast()) };
    s
}

impl Dispatcher {
    fn dispatch(&self, args: &[&str]) -> Result<Reply> {
        let ptrs: Vec<*const c_char> = args.iter().map(|a| a.as_ptr().cast()).collect();
        let lens: Vec<usize> = args.iter().map(|a| a.len()).collect();
        let mut r = MpResult {
            fields: [std::ptr::null_mut(); FIELDS],
            lens: [0; FIELDS],
        };
        // SAFETY: the copy is initialised and alive (the Interpreter is borrowed, or Drop
        // waits for the main thread's jobs); the strings outlive the call.
        let rc = unsafe {
            (self.fns.dispatch)(ptrs.as_ptr(), lens.as_ptr(), args.len() as c_int, &mut r)
        };
        let mut f: Vec<String> = (0..FIELDS)
            .map(|i| take_raw(self.fns.free, r.fields[i], Some(r.lens[i])))
            .collect();
        if rc != 0 {
            return Err(Error::Host {
                interpreter: self.id,
                message: std::mem::take(&mut f[4]),
            });
        }
        let output = Output {
            stdout: std::mem::take(&mut f[1]),
            stderr: std::mem::take(&mut f[2]),
        };
        match f[0].as_str() {
            "ok" => match serde_json::from_str(&f[7]) {
                Ok(value) => Ok(Reply { output, value }),
                Err(e) => Err(Error::Host {
                    interpreter: self.id,
                    message: format!("the call's value is not JSON the host can read: {e}"),
                }),
            },
            "exit" => Err(Error::SystemExit {
                interpreter: self.id,
                code: f[6].parse().unwrap_or(1),
                output: Box::new(output),
            }),
            _ => Err(Error::Exception(Box::new(PythonException {
                interpreter: self.id,
                type_name: std::mem::take(&mut f[3]),
                message: std::mem::take(&mut f[4]),
                traceback: std::mem::take(&mut f[5]),
                output,
            }))),
        }
    }
}

impl Drop for Interpreter {
    fn drop(&mut self) {
        let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut live = 0;
        if let Some(jobs) = jobs {
            let (tx, rx) = mpsc::channel();
            if jobs.send(Job::Finalize(tx)).is_ok() {
                if let Ok((rc, l)) = rx.recv() {
                    live = l;
                    if rc != 0 {
                        tracing::warn!(
                            interpreter = self.id,
                            rc,
                            "Py_FinalizeEx reported an error"
                        );
                    }
                }
            }
        }
        if let Some(main) = self.main.take() {
            let _ = main.join();
        }
        release(&SIGNAL_OWNER, self.id);
        release(&STDIN_OWNER, self.id);
        let Some(loaded) = self.loaded.take() else {
            return;
        };
        self.restore_signals(&loaded);
        if live > 0 {
            // Daemon threads may still be inside this copy's code: unmapping it would
            // crash them. Keep it mapped (a leak, reported).
            tracing::warn!(
                interpreter = self.id,
                threads = live,
                "daemon threads still running at finalisation: the libpython copy stays mapped"
            );
            std::mem::forget(loaded);
            // The host must outlive the copy's code too.
            let host = std::mem::replace(
                &mut self.host,
                Box::new(Host {
                    id: self.id,
                    forward: None,
                    background: None,
                    orphan: Mutex::new(Output::default()),
                    buffers: Mutex::new(HashMap::new()),
                }),
            );
            std::mem::forget(host);
            return;
        }
        drop(loaded);
        // Now no Python object of this interpreter exists: give back the buffers its
        // leaked objects (if any) still held.
        self.host
            .buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl Interpreter {
    /// Signal dispositions whose handler lies in this copy's code are put back to what
    /// they were before the interpreter was created (or the default), so that a signal
    /// after the unload never jumps into unmapped memory.
    fn restore_signals(&self, loaded: &Loaded) {
        let ranges: Vec<(usize, usize)> = [&loaded.libpython, &loaded.runner]
            .iter()
            .filter_map(|l| l.address_range())
            .collect();
        let inside = |a: usize| ranges.iter().any(|&(s, e)| a >= s && a < e);
        for (sig, now) in signal_dispositions() {
            if inside(now.sa_sigaction) {
                let before = self
                    .signals_before
                    .iter()
                    .find(|(s, _)| *s == sig)
                    .map(|(_, a)| *a)
                    .filter(|a| !inside(a.sa_sigaction));
                // SAFETY: installing a disposition saved earlier from sigaction, or
                // SIG_DFL in a zeroed struct.
                unsafe {
                    let mut act: libc::sigaction = std::mem::zeroed();
                    match before {
                        Some(b) => act = b,
                        None => act.sa_sigaction = libc::SIG_DFL,
                    }
                    libc::sigaction(sig, &act, std::ptr::null_mut());
                }
            }
        }
    }
}
