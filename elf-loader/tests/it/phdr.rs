//! `dl_iterate_phdr` called from custom-loaded code reports the system's objects and the
//! caller's namespace's libraries (load bias, path, program headers, TLS module id and
//! block), so backtrace code running inside a namespace finds custom-loaded code: a Rust
//! cdylib's `std::backtrace` names its own functions with file and line.

use crate::common;

use elf_loader::Namespace;
use std::ffi::{c_char, CStr};

struct Entry {
    name: String,
    addr: usize,
    phnum: usize,
    tls_modid: u64,
    has_tls_data: bool,
    first_load: u64,
}

fn report(lib: &elf_loader::CustomLibrary, stop_after: i32) -> (i32, Vec<Entry>) {
    // SAFETY: signature as in phdr_report.c.
    let f = unsafe {
        lib.get::<extern "C" fn(*mut c_char, usize, i32) -> i32>("phdr_report")
            .unwrap()
            .into_raw()
    };
    let mut buf = vec![0 as c_char; 64 * 1024];
    let rc = f(buf.as_mut_ptr(), buf.len(), stop_after);
    // SAFETY: NUL-terminated by the fixture.
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or(0);
    let entries = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            Entry {
                name: f[0].to_string(),
                addr: hex(f[1]) as usize,
                phnum: f[2].parse().unwrap(),
                tls_modid: hex(f[3]),
                has_tls_data: f[4] == "1",
                first_load: hex(f[5]),
            }
        })
        .collect();
    (rc, entries)
}

#[test]
fn custom_code_sees_its_namespace_and_the_system() {
    let phdr = common::build_so("phdr_report", &["phdr_report.c"], &[]);
    let counter = common::build_so("counter", &["counter.c"], &[]);
    let plugin = common::build_so("plugin", &["plugin.c"], &[]);
    let ns = Namespace::new("phdr");
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { ns.load(&phdr) }.unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let _counter = unsafe { ns.load(&counter) }.unwrap();
    // Another namespace's library is not reported.
    let other = Namespace::new("phdr-other");
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let _host = unsafe { other.load(common::build_so("host", &["host.c"], &[])) }.unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let _p = unsafe { other.load(&plugin) }.unwrap();
    // SAFETY: as in phdr_report.c.
    let touch = unsafe {
        lib.get::<extern "C" fn() -> i32>("phdr_touch_tls")
            .unwrap()
            .into_raw()
    };
    assert_eq!(touch(), 6);

    let (rc, entries) = report(&lib, 0);
    assert_eq!(rc, 0);
    assert_eq!(
        entries[0].name, "",
        "the main program comes first, as with glibc"
    );
    assert!(
        entries.iter().any(|e| e.name.contains("/libc.so.6")),
        "system objects are reported"
    );
    let me = entries
        .iter()
        .find(|e| e.name == phdr.to_str().unwrap())
        .expect("the caller's own library is reported");
    assert_eq!(me.addr, lib.load_bias().unwrap());
    let file = elf_loader::elf::ElfInfo::parse(&phdr, &std::fs::read(&phdr).unwrap()).unwrap();
    assert_eq!(me.phnum, file.phdrs.len());
    assert_eq!(me.first_load, file.loads[0].vaddr);
    assert_eq!(me.tls_modid, lib.tls_module().unwrap());
    assert!(me.has_tls_data, "this thread's TLS block is reported");
    assert!(entries.iter().any(|e| e.name == counter.to_str().unwrap()));
    assert!(
        !entries.iter().any(|e| e.name == plugin.to_str().unwrap()),
        "another namespace's library is not reported"
    );
    // The callback's non-zero result stops the walk and is returned.
    let (rc, entries) = report(&lib, 1);
    assert_eq!((rc, entries.len()), (77, 1));
    let (rc, entries) = report(&lib, 1000);
    assert_eq!(rc, 0);
    assert!(entries.len() >= 4);
}

#[test]
fn rust_backtrace_inside_a_custom_loaded_library_names_its_functions() {
    let so = common::build_rust_cdylib("rust_backtrace", "rust_backtrace.rs");
    for round in 0..2 {
        let ns = Namespace::new(&format!("rust-backtrace-{round}"));
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(&so) }.unwrap();
        // SAFETY: signatures as in rust_backtrace.rs.
        let (bt, calls) = unsafe {
            (
                lib.get::<unsafe extern "C" fn(*mut u8, usize) -> usize>("fixture_backtrace")
                    .unwrap()
                    .into_raw(),
                lib.get::<extern "C" fn() -> u32>("fixture_calls")
                    .unwrap()
                    .into_raw(),
            )
        };
        assert_eq!(calls(), 1);
        assert_eq!(calls(), 2, "the copy's own thread-local counter");
        let mut buf = vec![0u8; 64 * 1024];
        // SAFETY: a writable buffer of that length.
        let n = unsafe { bt(buf.as_mut_ptr(), buf.len()) };
        let text = String::from_utf8_lossy(&buf[..n.min(buf.len() - 1)]).into_owned();
        for want in [
            "rust_backtrace::fixture_innermost_frame",
            "rust_backtrace::fixture_middle_frame",
            "fixture_backtrace",
            "rust_backtrace.rs:",
        ] {
            assert!(
                text.contains(want),
                "`{want}` missing from the backtrace:\n{text}"
            );
        }
    }
}
