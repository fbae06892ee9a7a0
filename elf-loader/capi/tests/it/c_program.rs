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

/// Initial-exec TLS with initialised data (`.tdata`) through the C ABI: two copies, the
/// init image (a relocated word included) in the loading thread, in threads started
/// later (the loader's TLS init image) and in a thread started before the load (the
/// loader's signal), the general-dynamic path to the same block, both TLS dialects, also
/// under valgrind; refused naming the thread when a running thread blocks every signal.
#[test]
fn initial_exec_tls_with_initialised_data_reaches_every_thread() {
    let so = common::build_so("tlsie_data", &["tlsie_data.c"], &[]);
    let desc = common::build_so(
        "tlsie_data_desc",
        &["tlsie_data.c"],
        &["-mtls-dialect=gnu2"],
    );
    let exe = hosts::build_c_host("tlsie_host", "tlsie_host.c", &["-pthread"]);
    for lib in [&so, &desc] {
        for mode in ["", "threads-first", "blocked"] {
            let text = test_support::run_ok(Command::new(&exe).arg(lib).arg(mode));
            assert!(text.contains("all checks passed"), "{mode}: {text}");
        }
    }
    let text = test_support::run_ok(
        test_support::valgrind(&["--track-origins=yes"])
            .arg(&exe)
            .arg(&so)
            .arg("threads-first"),
    );
    assert!(text.contains("all checks passed"), "{text}");
}
