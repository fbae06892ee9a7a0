//! `refbridge/include/refbridge_python.h` is written by hand (CPython's names, inline
//! fast paths), so this test keeps it from drifting from the Rust side, with the checks
//! every C layer of the workspace shares (test-support):
//!
//! - the functions it declares are exactly the `extern "C"` functions of `src/lib.rs`
//!   (and `refbridge_capi::symbols()` lists the same), and cbindgen's declarations of
//!   those functions compile in one C translation unit with the header's (a parameter or
//!   return type that differs is a "conflicting types" error);
//! - it carries ffi-support's status block verbatim, and its `RB_*` status names are the
//!   Rust values;
//! - the constants and every struct's size and field offsets are the Rust values
//!   (`_Static_assert`s generated from `abi.rs`, compiled);
//! - the inline `Py_INCREF`/`Py_DECREF` take their one slow path (`_Py_Dealloc`, with
//!   the pointer as given) exactly where the Rust `incref`/`decref` do (a C program
//!   prints, for a range of counts and both kinds of pointer, whether it was taken).

use refbridge::{
    PyGCHead, PyObject, PyTypeObject, PyVarObject, Stub, IMMORTAL_REFCNT, MANAGED_REFCNT,
    PY_TPFLAGS_DEFAULT, PY_TPFLAGS_HAVE_GC, PY_TPFLAGS_READY, STUB_TAG,
};
use std::collections::BTreeSet;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;
use test_support::{
    c_syntax_check, check_constants, check_header_block, header_functions, rust_c_functions,
    CProgram, DeclarationCheck,
};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn include_dir() -> PathBuf {
    crate_dir().join("../include")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("refbridge-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn rust_source() -> String {
    std::fs::read_to_string(crate_dir().join("src/lib.rs")).unwrap()
}

/// The value of `pub const NAME: <type> = <value>;` in src/lib.rs (the C ABI's own
/// constants are not part of the Rust API).
fn rust_constant(name: &str) -> String {
    let src = rust_source();
    let prefix = format!("pub const {name}:");
    let line = src
        .lines()
        .find(|l| l.trim_start().starts_with(&prefix))
        .unwrap_or_else(|| panic!("{name} is not a constant of src/lib.rs"));
    let value = line.split('=').nth(1).unwrap().trim().trim_end_matches(';');
    value.to_string()
}

#[test]
fn the_header_declares_exactly_the_exported_functions_with_their_rust_types() {
    let header = std::fs::read_to_string(include_dir().join("refbridge_python.h")).unwrap();
    let declared = header_functions(&header);
    let rust = rust_c_functions(&rust_source());
    assert_eq!(declared, rust, "header vs src/lib.rs");
    let listed: BTreeSet<String> = refbridge_capi::symbols()
        .into_iter()
        .map(|(n, _)| n.to_string())
        .collect();
    assert_eq!(listed, rust, "symbols() vs src/lib.rs");

    let check = DeclarationCheck::new(crate_dir(), include_dir(), "refbridge_python.h")
        .exclude(&[
            "PyObject",
            "PyVarObject",
            "PyTypeObject",
            "PyGCHead",
            "Stub",
            "PySsizeT",
            "VisitProc",
            "TraverseProc",
            "Inquiry",
            "Destructor",
            "FreeFunc",
            "MemAccount",
        ])
        .prelude(
            "typedef Py_ssize_t PySsizeT;\ntypedef struct _object PyObject_;\n#define PyGCHead PyGC_Head\n",
        )
        .replace("struct PyObject", "PyObject")
        .replace("struct PyTypeObject", "PyTypeObject")
        .replace("struct PyVarObject", "PyVarObject");
    if let Err(err) = check.run() {
        panic!("{err}");
    }
}

#[test]
fn the_shared_status_block_and_codes_are_ffi_supports() {
    if let Err(e) = check_header_block(
        &include_dir().join("refbridge_python.h"),
        &ffi_support::c_block(),
    ) {
        panic!("{e}");
    }
    use refbridge_capi::{RB_ERR_INIT, RB_ERR_PANIC, RB_ERR_STATE, RB_OK};
    let checks: Vec<(String, String)> = [
        ("RB_OK", RB_OK),
        ("RB_ERR_STATE", RB_ERR_STATE),
        ("RB_ERR_INIT", RB_ERR_INIT),
        ("RB_ERR_PANIC", RB_ERR_PANIC),
    ]
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .to_vec();
    if let Err(e) = check_constants("refbridge_python.h", &[&include_dir()], &checks) {
        panic!("status names differ from the Rust values:\n{e}");
    }
}

#[test]
fn constants_sizes_and_offsets_match_the_rust_layouts() {
    let mut checks = vec![
        format!("RB_MANAGED_REFCNT == {MANAGED_REFCNT}"),
        format!("RB_IMMORTAL_REFCNT == {IMMORTAL_REFCNT}"),
        format!("RB_STUB_TAG == {STUB_TAG}ULL"),
        format!("Py_TPFLAGS_READY == {PY_TPFLAGS_READY}UL"),
        format!("Py_TPFLAGS_HAVE_GC == {PY_TPFLAGS_HAVE_GC}UL"),
        format!("Py_TPFLAGS_DEFAULT == {PY_TPFLAGS_DEFAULT}UL"),
        format!("RB_DEBUG == {}", rust_constant("RB_DEBUG")),
        format!(
            "RB_NO_AUTO_COLLECT == {}",
            rust_constant("RB_NO_AUTO_COLLECT")
        ),
        format!("sizeof(Py_ssize_t) == {}", size_of::<isize>()),
        format!("sizeof(PyObject) == {}", size_of::<PyObject>()),
        format!(
            "offsetof(PyObject, ob_refcnt) == {}",
            offset_of!(PyObject, ob_refcnt)
        ),
        format!(
            "offsetof(PyObject, ob_type) == {}",
            offset_of!(PyObject, ob_type)
        ),
        format!("sizeof(PyVarObject) == {}", size_of::<PyVarObject>()),
        format!(
            "offsetof(PyVarObject, ob_size) == {}",
            offset_of!(PyVarObject, ob_size)
        ),
        format!("sizeof(PyGC_Head) == {}", size_of::<PyGCHead>()),
        format!(
            "offsetof(PyGC_Head, _gc_prev) == {}",
            offset_of!(PyGCHead, gc_prev)
        ),
        format!("sizeof(rb_stub) == {}", size_of::<Stub>()),
        format!("offsetof(rb_stub, handle) == {}", offset_of!(Stub, handle)),
        format!("sizeof(PyTypeObject) == {}", size_of::<PyTypeObject>()),
    ];
    macro_rules! field {
        ($($f:ident),*) => {$(
            checks.push(format!(
                "offsetof(PyTypeObject, {}) == {}",
                stringify!($f),
                offset_of!(PyTypeObject, $f)
            ));
        )*};
    }
    field!(
        tp_name,
        tp_basicsize,
        tp_itemsize,
        tp_dealloc,
        tp_flags,
        tp_traverse,
        tp_clear,
        tp_free
    );
    let body: String = checks
        .iter()
        .map(|c| format!("_Static_assert({c}, \"{c}\");\n"))
        .collect();
    let src = format!(
        "#include <stddef.h>\n#include \"refbridge_python.h\"\n{body}int main(void) {{ return 0; }}\n"
    );
    if let Err(err) = c_syntax_check(&src, &[&include_dir()], &[]) {
        panic!("layout drift:\n{err}");
    }
}

#[test]
fn the_inline_fast_paths_call_out_exactly_where_the_rust_ones_do() {
    // A C program that replaces the slow-path functions by recorders and runs
    // Py_INCREF/Py_DECREF on a native object and a (fake, tagged) stub at every count
    // in -2..=14 and at the immortal count.
    let dir = tmp("fastpath");
    let src = r#"
#include <stdio.h>
#include "refbridge_python.h"
static int slow;
static PyObject *seen;
void _Py_Dealloc(PyObject *op) { seen = op; slow = 1; }
int main(void) {
    static PyObject obj[2];
    PyObject *ptrs[2] = { &obj[0], (PyObject *)((uintptr_t)&obj[1] | RB_STUB_TAG) };
    Py_ssize_t counts[18];
    for (int i = 0; i < 17; i++) counts[i] = i - 2;
    counts[17] = RB_IMMORTAL_REFCNT;
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 18; i++) {
            Py_SET_REFCNT(ptrs[k], counts[i]); slow = 0; Py_INCREF(ptrs[k]);
            printf("%d inc %zd %d %zd\n", k, counts[i], slow, Py_REFCNT(ptrs[k]));
            Py_SET_REFCNT(ptrs[k], counts[i]); slow = 0; seen = NULL; Py_DECREF(ptrs[k]);
            if (slow && seen != ptrs[k]) return 2; /* the tagged pointer is passed on */
            printf("%d dec %zd %d %zd\n", k, counts[i], slow, Py_REFCNT(ptrs[k]));
        }
    }
    return 0;
}
"#;
    let c = dir.join("fast.c");
    std::fs::write(&c, src).unwrap();
    let exe = CProgram::new(&c, dir.join("fast"))
        .flags(&["-O2"])
        .include(include_dir())
        .build();
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "the tagged pointer reaches _Py_Dealloc as it is"
    );
    // The Rust rule, as in refbridge::incref / decref: no slow path on increments, and
    // `_Py_Dealloc` exactly when a decrement reaches 0, for native objects and stubs.
    let mut want = String::new();
    for k in 0..2 {
        let mut counts: Vec<isize> = (-2..=14).collect();
        counts.push(IMMORTAL_REFCNT);
        for c in counts {
            want.push_str(&format!("{k} inc {c} 0 {}\n", c + 1));
            want.push_str(&format!("{k} dec {c} {} {}\n", (c - 1 == 0) as i32, c - 1));
        }
    }
    assert_eq!(text, want);
    let _ = std::fs::remove_dir_all(&dir);
}
