//! A namespace's global scope is built as glibc builds the main map's search list: the
//! global libraries, each followed by its `DT_NEEDED` closure breadth-first, each library
//! once. A plugin with no dependencies of its own binds to symbols of the global
//! libraries' dependencies, in the same order the system loader picks (checked against
//! the system loader running the same scenario in a child process).

use crate::common;

use elf_loader::Namespace;
use std::ffi::{c_char, c_void, CString};
use std::path::PathBuf;
use std::process::Command;

type Fixtures = common::ScopeFixtures;

fn fixtures() -> Fixtures {
    let f = common::scope_fixtures();
    let needed = common::needed(&f.plugin);
    assert!(
        needed.iter().all(|n| n == "libc.so.6"),
        "the plugin lists no dependency but libc: {needed:?}"
    );
    f
}

/// What the system loader does with the same libraries.
fn oracle(f: &Fixtures) -> String {
    let exe = common::build_exe(
        "scope_oracle",
        &[PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/scope_oracle.c")],
        &[],
    );
    let out = Command::new(exe)
        .arg(&f.root)
        .arg(&f.root2)
        .arg(&f.plugin)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn global_scope_is_the_global_libraries_and_their_closures_breadth_first() {
    let f = fixtures();
    // pick: libscope_b (level 1 of the first global library's closure) before libscope_c
    // (level 2) and libscope_d (the second global library's closure).
    let expected_main = 2 * 1000 + 10 + 500;
    assert_eq!(
        oracle(&f),
        format!("plugin_main={expected_main} pick=2"),
        "the system loader's answer"
    );
    for round in 0..2 {
        let ns = Namespace::new(&format!("scope{round}"));
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let root = unsafe { ns.load(&f.root) }.unwrap();
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let _root2 = unsafe { ns.load(&f.root2) }.unwrap();
        // SAFETY: signatures as in scope_root.c.
        let (root_open, root_default) = unsafe {
            (
                root.get::<extern "C" fn(*const c_char) -> i32>("root_open")
                    .unwrap()
                    .into_raw(),
                root.get::<extern "C" fn(*const c_char) -> *mut c_void>("root_default")
                    .unwrap()
                    .into_raw(),
            )
        };
        let plugin = CString::new(f.plugin.to_str().unwrap()).unwrap();
        assert_eq!(root_open(plugin.as_ptr()), expected_main);
        // The namespace's scope and dlsym(RTLD_DEFAULT) from inside see the same order.
        let b_pick = {
            let paths = ns.library_paths();
            assert!(paths.contains(&f.b), "{paths:?}");
            // SAFETY: pick() as in the fixtures.
            let pick = unsafe { ns.get::<extern "C" fn() -> i32>("pick") }.unwrap();
            assert_eq!(pick(), 2, "Namespace::get finds libscope_b's pick");
            assert_eq!(ns.sym("pick"), Some(pick.address()));
            pick.address()
        };
        assert_eq!(root_default(c"pick".as_ptr()) as usize, b_pick);
        // A library loaded later by the API binds the same way.
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let direct = unsafe { ns.load(&f.plugin) }.unwrap();
        // SAFETY: as in scope_plugin.c.
        let main = unsafe {
            direct
                .get::<extern "C" fn() -> i32>("plugin_main")
                .unwrap()
                .into_raw()
        };
        assert_eq!(main(), expected_main);
    }
}

#[test]
fn a_plugin_outside_any_global_closure_fails_naming_library_and_symbol() {
    let f = fixtures();
    // Only libscope_root2 is global: `pick` comes from libscope_d, `a_value` is nowhere.
    let ns = Namespace::new("scope-missing");
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let _root2 = unsafe { ns.load(&f.root2) }.unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let err = match unsafe { ns.load(&f.plugin) } {
        Ok(_) => panic!("the plugin loaded without a_value"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("a_value") && err.contains("libscope_plugin.so"),
        "{err}"
    );
}
