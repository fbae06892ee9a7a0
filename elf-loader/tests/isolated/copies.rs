//! One library loaded 64 times in one process: each copy's globals independent, all
//! unloaded, `/proc/self/maps` back to where it started. Its own test binary, so that no
//! other test maps anything meanwhile.

use crate::common;

use elf_loader::{CustomLibrary, Namespace};

type IntFn = extern "C" fn() -> i32;

fn f<'l>(lib: &'l CustomLibrary, name: &str) -> elf_loader::Symbol<'l, IntFn> {
    // SAFETY: the fixture defines `name` as `int name(void)`.
    unsafe { lib.get::<IntFn>(name) }.unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn sixty_four_copies_are_independent_and_unload_cleanly() {
    let _serial = crate::serial();
    let so = common::build_so("counter", &["counter.c"], &[]);
    // Warm up anything lazily mapped by the process (allocator arenas, the fixture
    // build) before taking the reference snapshot.
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    drop(unsafe { Namespace::new("warm-up").load(&so) }.unwrap());
    let before = common::maps_snapshot();
    let mut libs = Vec::new();
    for i in 0..64 {
        let ns = Namespace::new(&format!("copy{i}"));
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(&so) }.unwrap();
        for _ in 0..=i {
            f(&lib, "bump")();
        }
        libs.push(lib);
    }
    for (i, lib) in libs.iter().enumerate() {
        assert_eq!(
            f(lib, "get")(),
            i as i32 + 1,
            "copy {i} has its own counter"
        );
    }
    let ranges: std::collections::HashSet<_> =
        libs.iter().map(|l| l.address_range().unwrap()).collect();
    assert_eq!(ranges.len(), 64, "64 distinct mappings");
    drop(libs);
    let after = common::maps_snapshot();
    let so_s = so.display().to_string();
    assert!(
        !after.iter().any(|l| l.ends_with(&so_s)),
        "all copies unmapped:\n{}",
        after.join("\n")
    );
    assert_eq!(before, after, "/proc/self/maps restored");
}
