//! A C program built against `include/elf_loader.h` (linked with `libelf_loader.so`)
//! that loads a library twice and misuses the API; it also runs under valgrind.

use crate::{common, hosts};

use std::path::{Path, PathBuf};
use std::process::Command;

fn build_c_program() -> PathBuf {
    hosts::build_c_host("capi_test", "capi_test.c", &[])
}

#[test]
fn c_program_builds_against_the_header_and_runs() {
    let so = common::build_so("counter", &["counter.c"], &[]);
    let tls = common::build_so("tls", &["tls.c"], &[]);
    let tls_desc = common::build_so("tlsdesc", &["tls.c"], &["-mtls-dialect=gnu2"]);
    let exe = build_c_program();
    let out = Command::new(&exe)
        .arg(&so)
        .arg(&tls)
        .arg(&tls_desc)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("all checks passed"), "{text}");
}

#[test]
fn c_program_is_clean_under_valgrind() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        panic!("valgrind is not installed (cargo xtask test installs it)");
    }
    let so = common::build_so("counter", &["counter.c"], &[]);
    let tls = common::build_so("tls", &["tls.c"], &[]);
    let tls_desc = common::build_so("tlsdesc", &["tls.c"], &["-mtls-dialect=gnu2"]);
    let exe = build_c_program();
    let out = Command::new("valgrind")
        .args(["--quiet", "--error-exitcode=97", "--track-origins=yes"])
        .arg(&exe)
        .arg(&so)
        .arg(&tls)
        .arg(&tls_desc)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "valgrind reported errors:\n{text}");
    assert!(text.contains("all checks passed"), "{text}");
    let _ = Path::new(&so);
}
