//! Two copies of the machine's libpython (3.11, 3.12 and 3.13, each version in a child
//! process of this test binary) in one process, loaded by elf-loader, one hooked by
//! frame-hooks and the other not: the hooked copy's calls reach the hook, the other copy
//! runs unhooked at the same time; code extras of each copy are freed by that copy (also
//! while the other copy's hook is current) and an index of one copy is refused on the
//! other's code; uninstalling restores the hooked copy's own default evaluator. An absent
//! version is skipped with the reason printed.

use elf_loader::{CustomLibrary, Namespace, SymbolProvider};
use frame_hooks::cpython::{CodeExtra, CodeRef, EvalResult, Frame, FrameHook, Python};
use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The shared libpython of CPython 3.`minor` (python3.X on PATH, else pyenv's), or why
/// there is none.
fn libpython(minor: u32) -> Result<PathBuf, String> {
    frame_hooks::cpython::Libpython::find_minor(minor)
        .map(|(_, lib)| lib)
        .map_err(|e| e.to_string())
}

/// One copy: loaded into its own namespace, initialised, its GIL released.
fn load(name: &str, path: &PathBuf) -> CustomLibrary {
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { Namespace::new(name).load(path) }.expect("load libpython");
    // SAFETY: the C API functions have these signatures; first initialisation of this
    // copy on this thread, then its GIL is released.
    unsafe {
        let init = lib
            .get::<unsafe extern "C" fn(c_int)>("Py_InitializeEx")
            .unwrap();
        let save = lib
            .get::<unsafe extern "C" fn() -> *mut c_void>("PyEval_SaveThread")
            .unwrap();
        init(0);
        save();
    }
    lib
}

fn python(lib: &CustomLibrary) -> Python {
    let resolver = |name: &CStr| lib.sym(name.to_str().ok()?);
    // SAFETY: the copy's own symbol table, through elf-loader.
    unsafe { Python::new(&resolver) }.expect("layout check passes on a custom-loaded copy")
}

#[derive(Default)]
struct Calls(Mutex<HashMap<String, u64>>);

impl FrameHook for Calls {
    fn eval_frame<'f>(&self, frame: &mut Frame<'f>) -> EvalResult<'f> {
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

/// Runs the scenario for CPython 3.`minor` in a child process of this test binary.
fn in_child(minor: u32) {
    let path = match libpython(minor) {
        Ok(p) => p,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "frame_hooks_two_copies::child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FRAME_HOOKS_TWO_COPIES_LIB", &path)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} ({}):\n{text}",
        path.display(),
        out.status
    );
    assert!(text.contains("two copies: ok"), "{text}");
}

#[test]
fn one_copy_hooked_the_other_not_311() {
    in_child(11);
}

#[test]
fn one_copy_hooked_the_other_not_312() {
    in_child(12);
}

#[test]
fn one_copy_hooked_the_other_not_313() {
    in_child(13);
}

/// The child side (does nothing unless started by `in_child`).
#[test]
fn child() {
    let Some(path) = std::env::var_os("FRAME_HOOKS_TWO_COPIES_LIB") else {
        return;
    };
    two_copies(&PathBuf::from(path));
    println!("two copies: ok");
}

fn two_copies(path: &PathBuf) {
    let (lib_a, lib_b) = (load("hooked", path), load("plain", path));
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
    // An index of one copy is refused on the other copy's code object.
    let doomed_b = code_of(&b, c"doomed");
    let refused = b.with_gil(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: a live code object of copy b, GIL of b held.
            extra_a
                .get(unsafe { CodeRef::from_ptr(&b, doomed_b) })
                .is_some()
        }))
    });
    let msg = refused.expect_err("refused");
    assert!(
        msg.downcast_ref::<String>()
            .is_some_and(|m| m.contains("used with a code object of another libpython copy")),
        "{:?}",
        msg.downcast_ref::<String>()
    );
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
