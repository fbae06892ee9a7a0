//! The seed's demonstration: two copies of the machine's `libpython3.11.so` in one
//! process, each in its own namespace with its own GIL. Each says what it thinks `None`
//! is, imports extension modules (which bind to their own copy), and then `fib(25)` runs
//! in two threads on one interpreter and on two interpreters.
//!
//! `RUST_LOG=elf_loader=info cargo run -p elf-loader --example two_pythons` also shows
//! the loader's trace (each load with its relocation counts).

use elf_loader::{CustomLibrary, Namespace};
use std::ffi::{c_char, c_int, c_void, CString};
use std::time::Instant;

type RunFn = unsafe extern "C" fn(*const c_char) -> c_int;
type EnsureFn = unsafe extern "C" fn() -> c_int;
type ReleaseFn = unsafe extern "C" fn(c_int);

/// One interpreter: a libpython copy and the three C API calls we use.
struct Python {
    lib: CustomLibrary,
    run: RunFn,
    ensure: EnsureFn,
    release: ReleaseFn,
}

impl Python {
    fn new(name: &str, libpython: &str) -> Result<Python, Box<dyn std::error::Error>> {
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { Namespace::new(name).load(libpython) }?;
        // SAFETY: these C API functions have these signatures in CPython 3.11. `run`,
        // `ensure` and `release` are detached from the borrow of `lib`: `Python` keeps
        // `lib` (and so the copy) as long as them.
        let (init, save, run, ensure, release) = unsafe {
            (
                lib.get::<unsafe extern "C" fn(c_int)>("Py_InitializeEx")?,
                lib.get::<unsafe extern "C" fn() -> *mut c_void>("PyEval_SaveThread")?,
                lib.get::<RunFn>("PyRun_SimpleString")?.into_raw(),
                lib.get::<EnsureFn>("PyGILState_Ensure")?.into_raw(),
                lib.get::<ReleaseFn>("PyGILState_Release")?.into_raw(),
            )
        };
        // SAFETY: first initialisation of this copy; then give its GIL up.
        unsafe {
            init(0);
            save();
        }
        Ok(Python {
            lib,
            run,
            ensure,
            release,
        })
    }

    fn run(&self, code: &str) {
        let c = CString::new(code).expect("no NUL in code");
        // SAFETY: C API calls under this copy's GIL.
        unsafe {
            let g = (self.ensure)();
            let rc = (self.run)(c.as_ptr());
            (self.release)(g);
            assert_eq!(rc, 0, "Python code failed");
        }
    }
}

const EXAMPLE: &str = r#"
print("I think None is", id(None), flush=True)
from time import time
import math, _decimal, os, sys

def fib(x):
    return 1 if x <= 1 else fib(x - 1) + fib(x - 2)

def do_fib():
    s = time()
    fib(25)
    sys.stdout.write(f"fib(25) took {time() - s:.3f} s\n")  # one write per line
    sys.stdout.flush()

print("math.sqrt(2) =", math.sqrt(2), "from", os.path.basename(math.__file__), flush=True)
print("Decimal(1)/7 =", _decimal.Decimal(1) / 7, flush=True)
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import os, sysconfig; print(os.path.join(sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME')))",
        ])
        .output()?;
    let libpython = String::from_utf8(out.stdout)?.trim().to_string();

    let a = Python::new("python-a", &libpython)?;
    let b = Python::new("python-b", &libpython)?;
    a.run(EXAMPLE);
    b.run(EXAMPLE);
    for (name, py) in [("a", &a), ("b", &b)] {
        let ns = py.lib.namespace();
        let mut files: Vec<String> = ns
            .library_paths()
            .iter()
            .filter_map(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
            .filter(|f| {
                f.starts_with("libpython") || f.starts_with("math.") || f.starts_with("_decimal.")
            })
            .collect();
        files.sort();
        println!("namespace {name} holds its own {}", files.join(", "));
    }

    println!("fib(25) in two threads, one interpreter:");
    let t = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| a.run("do_fib()"));
        s.spawn(|| a.run("do_fib()"));
    });
    let one = t.elapsed().as_secs_f64();
    println!("fib(25) in two threads, two interpreters:");
    let t = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| a.run("do_fib()"));
        s.spawn(|| b.run("do_fib()"));
    });
    let two = t.elapsed().as_secs_f64();
    println!(
        "wall time: one interpreter {one:.3} s, two interpreters {two:.3} s ({:.2}x)",
        one / two
    );
    // The interpreters stay initialised until the process exits.
    std::mem::forget((a, b));
    Ok(())
}
