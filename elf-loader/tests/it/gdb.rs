//! `gdb -batch` on a program stopped inside a custom-loaded function shows that
//! function's name in `bt`: the loader's r_debug registration at work.

use crate::common;

use elf_loader::Namespace;
use std::process::Command;

const CHILD: &str = "ELF_LOADER_GDB_CHILD";

/// In the child (run under gdb): load the fixture twice and stop inside it.
#[test]
fn gdb_child() {
    let Some(so) = std::env::var_os(CHILD) else {
        return;
    };
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let a = unsafe { Namespace::new("gdb-a").load(&so) }.unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let b = unsafe { Namespace::new("gdb-b").load(&so) }.unwrap();
    // SAFETY: `int enter_custom_code(void)`.
    let f: extern "C" fn() -> i32 = unsafe {
        b.get::<extern "C" fn() -> i32>("enter_custom_code")
            .unwrap()
            .into_raw()
    };
    f();
    drop(a);
}

#[test]
fn gdb_backtrace_names_custom_loaded_functions() {
    if Command::new("gdb").arg("--version").output().is_err() {
        panic!("gdb is not installed (cargo xtask test installs it)");
    }
    let so = common::build_so("gdbstop", &["gdbstop.c"], &[]);
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("gdb")
        .args([
            "-nx",
            "-batch",
            "-ex",
            "run",
            "-ex",
            "bt",
            "-ex",
            "info sharedlibrary",
            "-ex",
            "kill",
            "--args",
        ])
        .arg(&exe)
        .args([
            "--exact",
            "gdb::gdb_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &so)
        .output()
        .expect("run gdb");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("SIGTRAP"),
        "the child stopped in custom code:\n{text}"
    );
    let bt: Vec<&str> = text.lines().filter(|l| l.starts_with('#')).collect();
    assert!(
        bt.iter()
            .any(|l| l.contains("deep_inside_custom_code") && l.contains("gdbstop.c")),
        "bt names the custom-loaded function with its source line:\n{text}"
    );
    assert!(
        bt.iter().any(|l| l.contains("enter_custom_code")),
        "and its caller:\n{text}"
    );
    assert!(
        text.contains("libgdbstop.so"),
        "info sharedlibrary lists the custom copies:\n{text}"
    );
}
