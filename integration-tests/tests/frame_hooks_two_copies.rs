//! Two copies of the machine's libpython3.11 in one process, loaded by elf-loader, one
//! hooked by frame-hooks and the other not: the hooked copy's calls reach the hook, the
//! other copy runs unhooked at the same time; code extras of each copy are freed by that
//! copy (also while the other copy's hook is current); uninstalling restores the hooked
//! copy's own default evaluator. Its own test binary: each copy is initialised once.

use elf_loader::{CustomLibrary, Namespace, SymbolProvider};
use frame_hooks::cpython::{CodeExtra, CodeRef, EvalResult, Frame, FrameHook, Python};
use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn libpython311() -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, sysconfig, os; print(os.path.join(sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME')) if sys.version_info[:2] == (3, 11) else '')",
        ])
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    p.is_file().then_some(p)
}

/// One copy: loaded into its own namespace, initialised, its GIL released.
fn load(name: &str, path: &PathBuf) -> CustomLibrary {
    let lib = Namespace::new(name).load(path).expect("load libpython");
    let init = lib.sym("Py_InitializeEx").unwrap();
    let save = lib.sym("PyEval_SaveThread").unwrap();
    // SAFETY: the C API functions have these signatures; first initialisation of this
    // copy on this thread, then its GIL is released.
    unsafe {
        std::mem::transmute::<usize, unsafe extern "C" fn(c_int)>(init)(0);
        std::mem::transmute::<usize, unsafe extern "C" fn() -> *mut c_void>(save)();
    }
    lib
}

fn python(lib: &CustomLibrary) -> Python {
    let resolver = |name: &CStr| lib.sym(name.to_str().ok()?);
    Python::new(&resolver).expect("layout check passes on a custom-loaded copy")
}

#[derive(Default)]
struct Calls(Mutex<HashMap<String, u64>>);

impl FrameHook for Calls {
    fn eval_frame(&self, frame: &mut Frame<'_>) -> EvalResult {
        *self
            .0
            .lock()
            .unwrap()
            .entry(frame.code().qualname())
            .or_default() += 1;
        frame.eval()
    }
}

static DROPPED: AtomicUsize = AtomicUsize::new(0);
struct Tracked;
impl Drop for Tracked {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

fn code_of(py: &Python, func: &CStr) -> *mut frame_hooks::cpython::PyObject {
    let api = py.api();
    py.with_gil(|| {
        // SAFETY: GIL held; the function exists in __main__; the code object stays
        // alive while the function does.
        unsafe {
            let m = (api.import_add_module)(c"__main__".as_ptr());
            let f = (api.getattr)(m, func.as_ptr());
            assert!(!f.is_null());
            let c = (api.getattr)(f, c"__code__".as_ptr());
            (api.decref)(c);
            (api.decref)(f);
            c
        }
    })
}

#[test]
fn one_copy_hooked_the_other_not() {
    let Some(path) = libpython311() else {
        println!("skipped: python3 is not a shared CPython 3.11");
        return;
    };
    let (lib_a, lib_b) = (load("hooked", &path), load("plain", &path));
    let (a, b) = (python(&lib_a), python(&lib_b));
    assert_ne!(
        a.api().eval_default as usize,
        b.api().eval_default as usize,
        "each copy has its own _PyEval_EvalFrameDefault"
    );
    let fib = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n";
    a.run(fib).unwrap();
    b.run(fib).unwrap();

    let hook = Arc::new(Calls::default());
    let mut installed = a.install(hook.clone()).unwrap();
    assert!(!a.eval_is_default());
    assert!(b.eval_is_default(), "the other copy is untouched");

    // Both copies run fib at the same time, on several threads.
    std::thread::scope(|s| {
        for t in 0..4 {
            let py = if t % 2 == 0 { &a } else { &b };
            s.spawn(move || {
                for _ in 0..3 {
                    py.run("assert fib(15) == 610").unwrap();
                }
            });
        }
    });
    assert_eq!(
        hook.0.lock().unwrap().get("fib").copied(),
        Some(2 * 3 * 1973),
        "the hook saw exactly the hooked copy's calls"
    );

    // Code extras: one index per copy; a code object of the plain copy dies while the
    // hooked copy's hook is current, and the plain copy frees its value.
    let extra_a = CodeExtra::<Tracked>::request(&a).unwrap();
    let extra_b = CodeExtra::<Tracked>::request(&b).unwrap();
    for (py, extra) in [(&b, &extra_b), (&a, &extra_a)] {
        py.run("def doomed():\n    return 1\n").unwrap();
        let code = code_of(py, c"doomed");
        py.with_gil(|| {
            // SAFETY: a live code object of this copy, GIL held, nothing borrowed.
            unsafe { extra.set(CodeRef::from_ptr(py, code), Tracked) };
        });
    }
    let before = DROPPED.load(Ordering::SeqCst);
    b.run("del doomed\nimport gc\ngc.collect()").unwrap();
    assert_eq!(
        DROPPED.load(Ordering::SeqCst),
        before + 1,
        "freed by the plain copy"
    );
    a.run("assert fib(5) == 5\ndel doomed\nimport gc\ngc.collect()")
        .unwrap();
    assert_eq!(
        DROPPED.load(Ordering::SeqCst),
        before + 2,
        "freed by the hooked copy"
    );

    // Uninstalling restores the hooked copy's own default evaluator (its own address,
    // not the other copy's).
    installed.uninstall().unwrap();
    assert!(a.eval_is_default());
    assert!(b.eval_is_default());
    let seen = hook.0.lock().unwrap().get("fib").copied();
    a.run("assert fib(10) == 55").unwrap();
    assert_eq!(hook.0.lock().unwrap().get("fib").copied(), seen);

    // The interpreters stay alive until the process exits.
    std::mem::forget((lib_a, lib_b));
}
