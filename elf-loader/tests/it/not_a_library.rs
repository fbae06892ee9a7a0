//! Paths that are no shared object to load (found by a user trial): a FIFO (opening it
//! would block, as glibc's `dlopen` blocks), a character device, a directory are refused
//! as "not a regular file"; the system's dynamic loader by path is refused (one per
//! process).

use crate::common;
use elf_loader::Namespace;
use std::ffi::CString;

fn load_error(path: &std::path::Path) -> String {
    let ns = Namespace::new("not-a-library");
    // SAFETY: every path here is refused before anything of it runs.
    match unsafe { ns.load(path) } {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn fifos_devices_and_directories_are_refused_at_once() {
    let fifo = common::out_dir().join("not-a-library.fifo");
    let _ = std::fs::remove_file(&fifo);
    let c = CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for p in [
        fifo.as_path(),
        std::path::Path::new("/dev/urandom"),
        std::path::Path::new("/tmp"),
    ] {
        let e = load_error(p);
        assert!(e.contains("not a regular file"), "{}: {e}", p.display());
    }
}

#[test]
fn the_dynamic_loader_is_not_loaded_twice() {
    let ld = std::path::Path::new("/lib64/ld-linux-x86-64.so.2");
    if !ld.exists() {
        return;
    }
    let e = load_error(ld);
    assert!(e.contains("dynamic loader"), "{e}");
}
