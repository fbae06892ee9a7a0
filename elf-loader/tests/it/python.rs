//! Real libpython3.11 loaded twice by the loader, in two namespaces: each initialised,
//! each runs code, `id(None)` differs, stdlib extension modules import into the right
//! copy, and several threads call both copies. Its own test binary (an interpreter can
//! be initialised once per copy per process).

use elf_loader::{Namespace, SymbolProvider, SystemLibrary};
use std::ffi::{c_char, c_int, c_long, c_void, CString};
use std::path::PathBuf;

fn libpython() -> PathBuf {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sysconfig,os; print(os.path.join(sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME')))",
        ])
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "python3 -c sysconfig failed");
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        p.is_file(),
        "{} is not a file (CPython built without --enable-shared?)",
        p.display()
    );
    p
}

/// The handful of C API functions the test uses, looked up in one copy.
struct Py {
    ns: Namespace,
    lib: elf_loader::CustomLibrary,
    run: unsafe extern "C" fn(*const c_char) -> c_int,
    add_module: unsafe extern "C" fn(*const c_char) -> *mut c_void,
    get_attr: unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void,
    as_long: unsafe extern "C" fn(*mut c_void) -> c_long,
    ensure: unsafe extern "C" fn() -> c_int,
    release: unsafe extern "C" fn(c_int),
}

macro_rules! api {
    ($lib:expr, $name:literal, $ty:ty) => {{
        // SAFETY: the C API function has the declared signature. The library stays loaded while the test calls it.
        unsafe { $lib.get::<$ty>($name).unwrap_or_else(|e| panic!("{e}")).into_raw() }
    }};
}

impl Py {
    fn load(name: &str) -> Py {
        let ns = Namespace::new(name);
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(libpython()) }.expect("load libpython");
        let init = api!(lib, "Py_InitializeEx", unsafe extern "C" fn(c_int));
        let save = api!(
            lib,
            "PyEval_SaveThread",
            unsafe extern "C" fn() -> *mut c_void
        );
        // SAFETY: first initialisation of this copy, on this thread; then release the GIL.
        unsafe {
            init(0);
            save();
        }
        Py {
            run: api!(
                lib,
                "PyRun_SimpleString",
                unsafe extern "C" fn(*const c_char) -> c_int
            ),
            add_module: api!(
                lib,
                "PyImport_AddModule",
                unsafe extern "C" fn(*const c_char) -> *mut c_void
            ),
            get_attr: api!(
                lib,
                "PyObject_GetAttrString",
                unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void
            ),
            as_long: api!(
                lib,
                "PyLong_AsLong",
                unsafe extern "C" fn(*mut c_void) -> c_long
            ),
            ensure: api!(lib, "PyGILState_Ensure", unsafe extern "C" fn() -> c_int),
            release: api!(lib, "PyGILState_Release", unsafe extern "C" fn(c_int)),
            ns,
            lib,
        }
    }

    /// Runs `code` in `__main__` and returns `__main__.result` as an integer.
    fn eval_long(&self, code: &str) -> i64 {
        let c = CString::new(code).unwrap();
        // SAFETY: C API calls with the GIL held (PyGILState_Ensure), valid strings.
        unsafe {
            let g = (self.ensure)();
            let rc = (self.run)(c.as_ptr());
            assert_eq!(rc, 0, "Python code failed (traceback above): {code}");
            let m = (self.add_module)(c"__main__".as_ptr());
            let r = (self.get_attr)(m, c"result".as_ptr());
            assert!(!r.is_null(), "no result");
            let v: i64 = (self.as_long)(r);
            (self.release)(g);
            v
        }
    }
}

#[test]
fn two_pythons_in_one_process() {
    let a = Py::load("python-a");
    let b = Py::load("python-b");
    let _ = SystemLibrary::global();

    let none_a = a.eval_long("result = id(None)");
    let none_b = b.eval_long("result = id(None)");
    assert_ne!(none_a, none_b, "each copy has its own None");
    assert_eq!(none_a as usize, a.lib.sym("_Py_NoneStruct").unwrap());
    assert_eq!(none_b as usize, b.lib.sym("_Py_NoneStruct").unwrap());

    // State is separate: a global set in one copy is absent in the other.
    assert_eq!(a.eval_long("import sys; sys.only_in_a = 1; result = 1"), 1);
    assert_eq!(
        b.eval_long("import sys; result = int(hasattr(sys, 'only_in_a'))"),
        0
    );

    // Stdlib extension modules import in both and bind to their own copy: each module's
    // type objects are built from its interpreter's `type`, whose address is that copy's.
    let code = r#"
import math, _json, _decimal, _struct, array, _socket, _ctypes, _sqlite3
assert math.sqrt(16) == 4.0
assert _json.encode_basestring_ascii("é") == '"\\u00e9"'
assert str(_decimal.Decimal(1) / _decimal.Decimal(8)) == "0.125"
assert _struct.pack("<I", 1) == b"\x01\x00\x00\x00"
assert array.array("i", [1, 2, 3]).tolist() == [1, 2, 3]
s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM); s.close()
import ctypes
assert ctypes.c_int(7).value == 7
assert ctypes.CDLL(None).strlen(b"abcd") == 4
con = _sqlite3.connect(":memory:")
assert con.execute("select 6*7").fetchone()[0] == 42
assert type(array.array("i")).__mro__[-1] is object
result = id(type(math.sqrt))
"#;
    let fa = a.eval_long(code);
    let fb = b.eval_long(code);
    assert_ne!(fa, fb);
    assert_eq!(
        fa as usize,
        a.lib.sym("PyCFunction_Type").unwrap(),
        "math in copy A uses A's types"
    );
    assert_eq!(
        fb as usize,
        b.lib.sym("PyCFunction_Type").unwrap(),
        "math in copy B uses B's types"
    );
    for lib in [&a, &b] {
        let paths = lib.ns.library_paths();
        assert!(
            paths
                .iter()
                .any(|p| p.to_string_lossy().contains("_decimal")),
            "_decimal was loaded into namespace {}: {paths:?}",
            lib.ns.name()
        );
    }

    // Several threads call both copies at once.
    let fib = "def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\nresult = fib(18)";
    std::thread::scope(|s| {
        for t in 0..4 {
            let py = if t % 2 == 0 { &a } else { &b };
            s.spawn(move || {
                for _ in 0..3 {
                    assert_eq!(py.eval_long(fib), 2584);
                }
            });
        }
    });
    // Leave the interpreters alive: finalising a copy and unmapping it is allowed
    // only once no thread can run its code; the process exits here.
    std::mem::forget(a);
    std::mem::forget(b);
}
