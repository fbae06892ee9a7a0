//! C and C++ host programs linked with `libelf_loader.so`: C++ exceptions crossing
//! custom-loaded code (`cxx_host.cpp`, fixture `cxx_runtime.cpp`), and the fini
//! functions of libraries still loaded at exit (`exit_host.c`, fixture `exit_dtor.c`).

use crate::{common, hosts};

/// A C++ host program (linked with `libelf_loader.so`) loads the fixture twice through
/// the C ABI: exceptions thrown by custom-loaded code are caught by the host (by the
/// fixture's class and by its base), the host's exceptions unwind through custom-loaded
/// frames, and the main thread's pending `thread_local` destructor runs at exit after
/// the namespaces were deleted.
#[test]
fn cxx_host_catches_exceptions_crossing_custom_loaded_code() {
    let so = common::build_so("cxx_runtime", &["cxx_runtime.cpp"], &["-pthread"]);
    let exe = hosts::build_c_host("cxx_host", "cxx_host.cpp", &["-pthread"]);
    let out = std::process::Command::new(&exe).arg(&so).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{text}", out.status);
    assert!(text.contains("all checks passed"), "{text}");
}

/// A library still loaded when the process exits gets its fini functions run (as glibc's
/// `_dl_fini` runs those of `dlopen`ed libraries), once: a destructor that flushes data
/// is not lost because the namespace was never deleted.
#[test]
fn fini_functions_of_libraries_still_loaded_run_at_exit_once() {
    let lib = common::build_so(
        "exit_dtor",
        &["exit_dtor.c"],
        &["-Wl,-fini=exit_dtor_fini_entry"],
    );
    let host = hosts::build_c_host("exit_host", "exit_host.c", &[]);
    for mode in [None, Some("delete")] {
        let mut cmd = std::process::Command::new(&host);
        cmd.arg(&lib);
        if let Some(m) = mode {
            cmd.arg(m);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{mode:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text,
            "fini_array flushed: data written before exit\nDT_FINI flushed: data written before exit\n",
            "{mode:?}: each fini function once, FINI_ARRAY before DT_FINI"
        );
    }
}
