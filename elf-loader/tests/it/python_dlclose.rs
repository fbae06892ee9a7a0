//! `ctypes.CDLL` and `_ctypes.dlclose` in a Python copy: ctypes' `dlopen` loads the
//! library into the copy's namespace, each `CDLL` of it is one more open, and the last
//! `_ctypes.dlclose` unloads it (fini runs, mapping gone; a new `CDLL` starts afresh);
//! `RTLD_NODELETE` keeps it; closing a dead handle raises `OSError` with the loader's
//! message. Its own test binary (one interpreter per copy per process).

use crate::common;

use elf_loader::Namespace;
use std::ffi::{c_char, c_int, CString};

fn libpython() -> String {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import os, sysconfig; print(os.path.join(sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME')))",
        ])
        .output()
        .expect("python3 runs");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn ctypes_cdll_and_dlclose_in_a_python_copy() {
    let plugin = common::build_so(
        "unload_plugin",
        &["unload_plugin.c"],
        &["-lunload_helper", "-Wl,-rpath,$ORIGIN"],
    );
    common::build_so("unload_helper", &["unload_helper.c"], &[]);
    let nodelete = common::build_so("counter", &["counter.c"], &[]);
    let ns = Namespace::new("python-dlclose");
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { ns.load(libpython()) }.unwrap();
    // SAFETY: CPython's C API signatures; one thread, GIL held throughout.
    let (init, run) = unsafe {
        (
            common::function::<unsafe extern "C" fn(c_int)>(&lib, "Py_InitializeEx"),
            common::function::<unsafe extern "C" fn(*const c_char) -> c_int>(
                &lib,
                "PyRun_SimpleString",
            ),
        )
    };
    let code = format!(
        r#"
import ctypes, _ctypes, os
path = {plugin:?}
def mapped(p):
    with open('/proc/self/maps') as m:
        return any(line.rstrip().endswith(p) for line in m)
a = ctypes.CDLL(path)
assert a.bump() == 1 and a.bump() == 2
assert a.plugin_helper() == 42
b = ctypes.CDLL(path)
assert b._handle == a._handle, "one library, one handle, two opens"
_ctypes.dlclose(a._handle)
assert mapped(path) and b.bump() == 3, "one open left"
_ctypes.dlclose(b._handle)
assert not mapped(path), "the last close unmaps it"
try:
    _ctypes.dlclose(b._handle)
    raise SystemExit("closing a dead handle did not fail")
except OSError as e:
    assert "not open" in str(e), e
c = ctypes.CDLL(path)
assert c.bump() == 1, "a fresh copy"
_ctypes.dlclose(c._handle)
assert not mapped(path)
n = ctypes.CDLL({nodelete:?}, mode=os.RTLD_NODELETE)
assert n.bump() == 1
_ctypes.dlclose(n._handle)
assert mapped({nodelete:?}), "RTLD_NODELETE keeps it"
assert ctypes.CDLL({nodelete:?}).bump() == 2
"#,
        plugin = plugin.to_str().unwrap(),
        nodelete = nodelete.to_str().unwrap(),
    );
    let c = CString::new(code).unwrap();
    // SAFETY: as above.
    unsafe {
        init(0);
        assert_eq!(
            run(c.as_ptr()),
            0,
            "the Python checks failed (traceback above)"
        );
    }
    let paths = ns.library_paths();
    assert!(!paths.contains(&plugin), "{paths:?}");
    assert!(paths.contains(&nodelete), "{paths:?}");
    // The interpreter stays alive; the process exits here.
    std::mem::forget(lib);
    std::mem::forget(ns);
}
