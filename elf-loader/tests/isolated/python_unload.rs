//! A Python copy's whole life: load libpython into a namespace, initialise it, import
//! extension modules, finalise it, drop the namespace (fini, unmap), and do it again;
//! the process's mappings come back to where they were. Its own test binary.

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

fn maps() -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| !l.contains('[') && l.split_whitespace().count() >= 6)
        .map(str::to_string)
        .collect()
}

fn one_life(lib_path: &str) -> usize {
    let ns = Namespace::new("python-life");
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { ns.load(lib_path) }.unwrap();
    // SAFETY: CPython 3.11 C API signatures; one thread, GIL held throughout.
    unsafe {
        let init: unsafe extern "C" fn(c_int) = crate::common::function(&lib, "Py_InitializeEx");
        let run: unsafe extern "C" fn(*const c_char) -> c_int =
            crate::common::function(&lib, "PyRun_SimpleString");
        let fin: unsafe extern "C" fn() -> c_int = crate::common::function(&lib, "Py_FinalizeEx");
        init(0);
        let code = CString::new(
            "import math, _decimal, _struct, array\nassert math.factorial(10) == 3628800",
        )
        .unwrap();
        assert_eq!(run(code.as_ptr()), 0);
        assert_eq!(fin(), 0, "Py_FinalizeEx");
    }
    let n = ns.library_count();
    drop(lib);
    drop(ns);
    n
}

#[test]
fn python_copy_loads_finalises_and_unloads_cleanly() {
    let _serial = crate::serial();
    let lp = libpython();
    // The first life maps what stays for the process (system libraries opened for the
    // copy: libffi is not needed here, libm stays loaded by design).
    let n = one_life(&lp);
    assert!(
        n >= 5,
        "libpython and its extension modules were loaded ({n})"
    );
    let before = maps();
    for _ in 0..3 {
        one_life(&lp);
    }
    let after = maps();
    assert!(
        !after.iter().any(|l| l.contains("libpython3.11")),
        "no copy of libpython left mapped"
    );
    assert_eq!(before, after, "/proc/self/maps is back where it was");
    assert_eq!(elf_loader::loaded_image_count(), 0);
}
