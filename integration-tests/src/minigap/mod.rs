//! minigap: a GAP-like C kernel whose whole memory is managed by gc-core +
//! gc-conservative, with interpreter threads serialised by gil (the GAP scenario of
//! the julia-gc-extensions seed), and the same kernel on Boehm GC for comparison.
//!
//! The kernel is C (`integration-tests/minigap/*.c`, built by `build.rs` with `cc`
//! against the crates' C headers); this module is its Rust face: [`Kernel::init`] once
//! per backend per process, then a [`KernelThread`] per thread that evaluates GAP code
//! ([`KernelThread::eval`]), exchanges objects with Rust ([`KernelThread::bind_host`],
//! [`KernelThread::root_global`]) and checks the heap ([`KernelThread::check_live`]).
//!
//! ```no_run
//! use integration_tests::minigap::{Backend, Config, Kernel};
//! let kernel = Kernel::init(Backend::Ours, &Config::default()).unwrap();
//! let t = kernel.thread("main").unwrap();
//! t.eval("Print(Size(Group((1,2,3,4,5,6,7,8,9,10,11),(3,7,11,8)(4,10,5,6))), \"\\n\");", "m11.g").unwrap();
//! assert_eq!(t.take_output(), "7920\n");
//! ```

mod ffi;

// The C kernel calls gc-runtime's, gc-core's, gc-conservative's and gil's C ABI (the
// gc-core-capi, gc-conservative-capi and gil-capi crates; the Boehm kernel calls gil's
// directly): link the crates even though no Rust item of theirs is named here.
extern crate gc_conservative_capi;
extern crate gc_core_capi;
extern crate gc_runtime;
extern crate gil_capi;

use std::any::Any;
use std::ffi::{c_char, c_void, CStr, CString};
use std::marker::PhantomData;
use std::sync::Mutex;

pub use ffi::{mg_live_report as LiveReport, mg_stats as Stats};

/// The default configuration of a backend's kernel, as its C side defines it.
pub fn c_config_default(backend: Backend) -> Result<(u64, bool), MinigapError> {
    let api = backend.api()?;
    let mut c = ffi::mg_config::default();
    // SAFETY: c is writable.
    unsafe { (api.config_default)(&mut c) };
    Ok((c.switch_interval_us, c.conservative != 0))
}

/// Where a thread's `Print` output goes: whole lines per call.
pub type Sink = Box<dyn FnMut(&[u8]) + Send>;

/// Which memory manager the kernel runs on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// gc-core + gc-conservative, threads serialised by gil (the composition).
    Ours,
    /// Boehm GC 8 (Debian `libgc-dev`), as GAP itself can be built.
    Boehm,
}

impl Backend {
    /// The name used on the command line (`ours`, `boehm`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Ours => "ours",
            Backend::Boehm => "boehm",
        }
    }

    /// Parses `ours` or `boehm`.
    pub fn parse(s: &str) -> Result<Backend, MinigapError> {
        match s {
            "ours" => Ok(Backend::Ours),
            "boehm" => Ok(Backend::Boehm),
            _ => Err(MinigapError::Usage(format!(
                "unknown GC backend '{s}' (expected 'ours' or 'boehm')"
            ))),
        }
    }

    fn api(self) -> Result<&'static ffi::Api, MinigapError> {
        match self {
            Backend::Ours => Ok(&ffi::OURS),
            #[cfg(minigap_boehm)]
            Backend::Boehm => Ok(&ffi::BOEHM),
            #[cfg(not(minigap_boehm))]
            Backend::Boehm => Err(MinigapError::Usage(
                "the Boehm backend was not built: install Debian's libgc-dev (cargo xtask test does) and rebuild".into(),
            )),
        }
    }
}

/// Kernel configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Collect every N allocations per thread (0: off).
    pub gc_stress: u64,
    /// Scan every thread's stack conservatively (turning it off makes the kernel lose
    /// bags held only by C locals: for the test that shows the scan is needed).
    pub conservative: bool,
    /// Count every bag's death (for the free-function and live-bag checks).
    pub track_bags: bool,
    /// gc-core's verify mode.
    pub verify: bool,
    /// Count young children as Julia's "newly marked": a wrong count, which gc-core's own
    /// count of young children makes harmless (the young-counting test checks it).
    pub debug_newly_marked: bool,
    /// Skip other threads' stacks in partial collections (GAP.jl #1032; the stopped-
    /// stack test fails).
    pub debug_skip_stopped_stacks_in_partial: bool,
    /// GIL switch interval in microseconds.
    pub switch_interval_us: u64,
    /// gc-core's bytes before the first collection (0: its default).
    pub min_interval: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            gc_stress: 0,
            conservative: true,
            track_bags: false,
            verify: false,
            debug_newly_marked: false,
            debug_skip_stopped_stacks_in_partial: false,
            switch_interval_us: 5000,
            min_interval: 0,
        }
    }
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum MinigapError {
    /// A GAP-style error message from a script (syntax error, unbound variable, wrong
    /// types), naming the file and line.
    #[error("{0}")]
    Script(String),
    /// The kernel refused a call (not initialised, thread not attached, ...).
    #[error("minigap: {0}")]
    Kernel(String),
    /// Bad command-line or API usage.
    #[error("{0}")]
    Usage(String),
}

/// An initialised kernel (one per backend per process).
pub struct Kernel {
    backend: Backend,
    api: &'static ffi::Api,
}

static KERNELS: Mutex<Vec<(Backend, &'static Kernel)>> = Mutex::new(Vec::new());

fn cstring(s: &str) -> Result<CString, MinigapError> {
    CString::new(s).map_err(|_| MinigapError::Usage(format!("{s:?} contains a NUL byte")))
}

unsafe extern "C" fn release_host(handle: *mut c_void) {
    // SAFETY: handles are Box<Box<dyn Any + Send>> leaked by bind_host, released once
    // (the kernel runs a bag's free function exactly once).
    drop(unsafe { Box::from_raw(handle as *mut Box<dyn Any + Send>) });
}

impl Kernel {
    /// Initialises the kernel of `backend` (the first call decides its configuration;
    /// a later call with the same backend returns the same kernel).
    pub fn init(backend: Backend, config: &Config) -> Result<&'static Kernel, MinigapError> {
        let mut kernels = KERNELS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, k)) = kernels.iter().find(|(b, _)| *b == backend) {
            return Ok(k);
        }
        let api = backend.api()?;
        let cfg = ffi::mg_config {
            gc_stress: config.gc_stress,
            conservative: config.conservative as i32,
            track_bags: config.track_bags as i32,
            verify: config.verify as i32,
            debug_newly_marked: config.debug_newly_marked as i32,
            debug_skip_stopped_stacks_in_partial: config.debug_skip_stopped_stacks_in_partial
                as i32,
            switch_interval_us: config.switch_interval_us,
            min_interval: config.min_interval,
        };
        // SAFETY: cfg is a valid configuration; init is called once per backend (the
        // registry above, under its lock).
        if unsafe { (api.init)(&cfg) } != 0 {
            return Err(MinigapError::Kernel(last_error(api)));
        }
        // SAFETY: a function with the documented signature.
        unsafe { (api.set_host_release)(Some(release_host)) };
        let k: &'static Kernel = Box::leak(Box::new(Kernel { backend, api }));
        kernels.push((backend, k));
        Ok(k)
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Attaches the calling thread; its `Print` output is collected (see
    /// [`KernelThread::take_output`]) unless `sink` is given, which then receives whole
    /// lines.
    pub fn thread(&'static self, name: &str) -> Result<KernelThread, MinigapError> {
        self.thread_with_sink(name, None)
    }

    /// As [`Kernel::thread`], with the output sent to `sink` (whole lines per call).
    pub fn thread_with_sink(
        &'static self,
        name: &str,
        sink: Option<Sink>,
    ) -> Result<KernelThread, MinigapError> {
        let out = Box::new(OutputState {
            buf: Vec::new(),
            sink,
        });
        let out = Box::into_raw(out);
        let cname = cstring(name)?;
        // SAFETY: out lives until the thread detaches (KernelThread::drop frees it after
        // thread_detach); on_output has the documented signature.
        let rc = unsafe { (self.api.thread_attach)(cname.as_ptr(), Some(on_output), out.cast()) };
        if rc != 0 {
            // SAFETY: not handed to the kernel.
            drop(unsafe { Box::from_raw(out) });
            return Err(MinigapError::Kernel(last_error(self.api)));
        }
        Ok(KernelThread {
            kernel: self,
            out,
            _not_send: PhantomData,
        })
    }

    /// The kernel's statistics.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        // SAFETY: s is writable.
        unsafe { (self.api.stats)(&mut s) };
        s
    }
}

struct OutputState {
    buf: Vec<u8>,
    sink: Option<Sink>,
}

unsafe extern "C" fn on_output(data: *mut c_void, text: *const c_char, len: usize) {
    // SAFETY: data is the OutputState of the thread that is printing (its own), text
    // is readable for len bytes.
    let (st, bytes) = unsafe {
        (
            &mut *(data as *mut OutputState),
            std::slice::from_raw_parts(text as *const u8, len),
        )
    };
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &mut st.sink {
        Some(f) => f(bytes),
        None => st.buf.extend_from_slice(bytes),
    }));
    if res.is_err() {
        eprintln!("minigap: the output sink panicked; output lost");
    }
}

fn last_error(api: &ffi::Api) -> String {
    // SAFETY: last_error returns this thread's NUL-terminated message buffer.
    unsafe { CStr::from_ptr((api.last_error)()) }
        .to_string_lossy()
        .into_owned()
}

/// A root held by the host: keeps a kernel object alive until dropped.
pub struct HostRoot<'t> {
    thread: &'t KernelThread,
    id: i64,
}

impl HostRoot<'_> {
    /// Binds global `name` (of the owning thread) to the rooted object.
    pub fn bind(&self, name: &str) -> Result<(), MinigapError> {
        let c = cstring(name)?;
        // SAFETY: attached thread; c is NUL-terminated.
        let rc = unsafe { (self.thread.kernel.api.root_to_global)(self.id, c.as_ptr()) };
        self.thread.check(rc)
    }
}

impl Drop for HostRoot<'_> {
    fn drop(&mut self) {
        // SAFETY: the owning thread is attached (the root borrows it).
        unsafe { (self.thread.kernel.api.root_release)(self.id) };
    }
}

/// The calling thread, attached to a kernel. Detaches on drop.
pub struct KernelThread {
    kernel: &'static Kernel,
    out: *mut OutputState,
    _not_send: PhantomData<*mut ()>,
}

impl KernelThread {
    fn check(&self, rc: i32) -> Result<(), MinigapError> {
        if rc == 0 {
            Ok(())
        } else {
            Err(MinigapError::Kernel(last_error(self.kernel.api)))
        }
    }

    /// Evaluates GAP code in this thread's own global namespace. Output produced before
    /// an error is kept.
    pub fn eval(&self, code: &str, file: &str) -> Result<(), MinigapError> {
        let c = cstring(code)?;
        let f = cstring(file)?;
        // SAFETY: attached thread; NUL-terminated strings.
        let rc = unsafe { (self.kernel.api.eval)(c.as_ptr(), f.as_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(MinigapError::Script(last_error(self.kernel.api)))
        }
    }

    /// Output collected since the last call (when no sink was given).
    pub fn take_output(&self) -> String {
        // SAFETY: out is this thread's state; the kernel only writes it during eval on
        // this same thread.
        let buf = std::mem::take(unsafe { &mut (*self.out).buf });
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Runs a full or partial collection from this thread.
    pub fn collect(&self, full: bool) -> Result<(), MinigapError> {
        // SAFETY: attached thread.
        let rc = unsafe { (self.kernel.api.collect)(full as i32) };
        self.check(rc)
    }

    /// A full collection, then live bags vs bags reachable from the global bags (needs
    /// `track_bags`).
    pub fn check_live(&self) -> Result<LiveReport, MinigapError> {
        let mut r = LiveReport::default();
        // SAFETY: attached thread; r writable.
        let rc = unsafe { (self.kernel.api.check_live)(&mut r) };
        self.check(rc).map(|()| r)
    }

    /// Binds global `name` to a new bag holding `obj`; `obj` is dropped (inside a
    /// collection, on the collecting thread) once the bag is unreachable. Its `Drop` must
    /// not call into the kernel.
    pub fn bind_host(&self, name: &str, obj: Box<dyn Any + Send>) -> Result<(), MinigapError> {
        let c = cstring(name)?;
        let handle = Box::into_raw(Box::new(obj));
        // SAFETY: attached thread; the handle is released by release_host.
        let rc = unsafe { (self.kernel.api.bind_host)(c.as_ptr(), handle.cast()) };
        if rc != 0 {
            // SAFETY: the kernel did not take it.
            drop(unsafe { Box::from_raw(handle) });
        }
        self.check(rc)
    }

    /// Roots the current value of global `name` until the returned root is dropped.
    pub fn root_global(&self, name: &str) -> Result<HostRoot<'_>, MinigapError> {
        let c = cstring(name)?;
        // SAFETY: attached thread.
        let id = unsafe { (self.kernel.api.root_global)(c.as_ptr()) };
        if id < 0 {
            return Err(MinigapError::Kernel(last_error(self.kernel.api)));
        }
        Ok(HostRoot { thread: self, id })
    }

    /// Number of host roots alive.
    pub fn root_count(&self) -> i64 {
        // SAFETY: attached thread.
        unsafe { (self.kernel.api.root_count)() }
    }

    /// The young-counting scenario (see `minigap.c`): `Ok(true)` if the young bag was
    /// lost.
    pub fn scenario_young_counting(&self) -> Result<bool, MinigapError> {
        // SAFETY: attached thread.
        match unsafe { (self.kernel.api.scenario_young_counting)() } {
            r if r >= 0 => Ok(r == 1),
            _ => Err(MinigapError::Kernel(last_error(self.kernel.api))),
        }
    }

    /// Holds a young bag only in a stack frame while waiting for the GIL (`in_gil_wait`)
    /// or sleeping `hold_us` in a GC-safe region; `Ok(true)` if it was lost.
    pub fn scenario_stopped_stack_hold(
        &self,
        hold_us: u64,
        in_gil_wait: bool,
    ) -> Result<bool, MinigapError> {
        // SAFETY: attached thread.
        match unsafe { (self.kernel.api.scenario_stopped_stack_hold)(hold_us, in_gil_wait as i32) }
        {
            r if r >= 0 => Ok(r == 1),
            _ => Err(MinigapError::Kernel(last_error(self.kernel.api))),
        }
    }
}

impl Drop for KernelThread {
    fn drop(&mut self) {
        // SAFETY: attached thread; after detaching, the kernel no longer uses out.
        unsafe {
            (self.kernel.api.thread_detach)();
            drop(Box::from_raw(self.out));
        }
    }
}

/// Runs `code` in `threads` threads at once (each the whole code, in its own namespace)
/// with their output sent to `sink` whole lines at a time; returns each thread's result.
pub fn run_in_threads(
    kernel: &'static Kernel,
    threads: usize,
    code: &str,
    file: &str,
    sink: impl Fn(&[u8]) + Send + Sync + Clone + 'static,
) -> Vec<Result<(), MinigapError>> {
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let code = code.to_string();
            let file = file.to_string();
            let sink = sink.clone();
            std::thread::Builder::new()
                .name(format!("minigap-{i}"))
                .stack_size(256 << 20)
                .spawn(move || {
                    let t = kernel.thread_with_sink(
                        &format!("interp-{i}"),
                        Some(Box::new(move |b: &[u8]| sink(b))),
                    )?;
                    t.eval(&code, &file)
                })
                .expect("spawn an interpreter thread")
        })
        .collect();
    handles
        .into_iter()
        .map(|h| {
            h.join().unwrap_or_else(|_| {
                Err(MinigapError::Kernel(
                    "an interpreter thread panicked".into(),
                ))
            })
        })
        .collect()
}

/// Formats statistics the way `--stats` prints them.
pub fn format_stats(backend: Backend, s: &Stats) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    format!(
        "gc[{}]: collections {} full, {} partial; pause total {:.1} ms, max {:.2} ms, p50 {:.3} ms\n\
         gc[{}]: bytes allocated {}, live {}; bags allocated {}; free functions run {}, double sweeps {}\n\
         gc[{}]: malloc'd integer buffers {} (freed {}), host objects released {}\n",
        backend.name(),
        s.full_collections,
        s.partial_collections,
        ms(s.total_pause_ns),
        ms(s.max_pause_ns),
        ms(s.p50_pause_ns),
        backend.name(),
        s.bytes_allocated,
        s.live_bytes,
        s.bags_allocated,
        s.free_functions_run,
        s.double_sweeps,
        backend.name(),
        s.ext_mallocs,
        s.ext_frees,
        s.host_releases,
    )
}

/// The scripts the tests, the demo and `cargo xtask bench gap` run (GAP code).
pub mod scripts {
    /// The Rubik's cube group from its six face turns (GAP's manual example).
    pub const RUBIK: &str = include_str!("../../minigap/scripts/rubik.g");
    /// The Mathieu groups M11, M12, M22, M23, M24.
    pub const MATHIEU: &str = include_str!("../../minigap/scripts/mathieu.g");
    /// The seed's BigInt benchmark: `Sum(List([1..2000], Factorial))`.
    pub const FACTORIAL_SUM: &str = include_str!("../../minigap/scripts/factorial_sum.g");
    /// The seed's array benchmark (nested lists of pairs swapped repeatedly); `bencharr`
    /// is defined and called with the sizes given by the caller's code.
    pub const ARRAY_BENCH: &str = include_str!("../../minigap/scripts/bencharr.g");
}
