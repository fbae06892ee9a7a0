//! A C program built against `include/elf_loader.h` (linked with `libelf_loader.so`)
//! that loads a library twice and misuses the API; it also runs under valgrind.

use crate::{common, hosts};

use std::path::PathBuf;
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
    let text = test_support::run_ok(Command::new(&exe).arg(&so).arg(&tls).arg(&tls_desc));
    assert!(text.contains("all checks passed"), "{text}");
}

#[test]
fn c_program_is_clean_under_valgrind() {
    let so = common::build_so("counter", &["counter.c"], &[]);
    let tls = common::build_so("tls", &["tls.c"], &[]);
    let tls_desc = common::build_so("tlsdesc", &["tls.c"], &["-mtls-dialect=gnu2"]);
    let exe = build_c_program();
    // Any memcheck error fails the run (exit status 99), with valgrind's report.
    let text = test_support::run_ok(
        test_support::valgrind(&["--track-origins=yes"])
            .arg(&exe)
            .arg(&so)
            .arg(&tls)
            .arg(&tls_desc),
    );
    assert!(text.contains("all checks passed"), "{text}");
}
