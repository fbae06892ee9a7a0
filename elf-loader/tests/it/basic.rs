//! Loading real C libraries many times: globals per copy, relocations, bss, unload.

use crate::common;

use elf_loader::{CustomLibrary, SymbolProvider, SystemLibrary};

type IntFn = extern "C" fn() -> i32;

fn f<'l>(lib: &'l CustomLibrary, name: &str) -> elf_loader::Symbol<'l, IntFn> {
    // SAFETY: the fixture defines `name` as `int name(void)`.
    unsafe { lib.get::<IntFn>(name) }.unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn one_copy_works() {
    let so = common::build_so("counter", &["counter.c"], &[]);
    let lib = CustomLibrary::create(&so);
    lib.add_search_library(SystemLibrary::global()).unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    unsafe { lib.load() }.unwrap();
    // SAFETY: `initialized` is an int.
    let init = unsafe { *(lib.sym("initialized").unwrap() as *const i32) };
    assert_eq!(init, 42, "constructor ran");
    assert_eq!(f(&lib, "bump")(), 1);
    assert_eq!(f(&lib, "bump")(), 2);
    assert_eq!(f(&lib, "get")(), 2);
    assert_eq!(f(&lib, "greeting_len")(), 5);
    assert_eq!(f(&lib, "bss_sum")(), 0);
    assert_eq!(f(&lib, "bss_sum")(), 0);
    let fmt: extern "C" fn(*mut u8, i32, i32) -> i32 =
        // SAFETY: `format` has this signature in the fixture.
        unsafe { lib.get::<extern "C" fn(*mut u8, i32, i32) -> i32>("format").unwrap().into_raw() };
    let mut buf = [0u8; 16];
    assert_eq!(fmt(buf.as_mut_ptr(), 16, 77), 4);
    assert_eq!(&buf[..4], b"v=77");
    assert!(lib.sym("no_such_symbol").is_none());
    assert!(
        lib.own_sym("hidden_state").is_none(),
        "static symbols are not exported"
    );
}

#[test]
fn seed_style_search_libraries() {
    // The seed's python_runner pattern: one custom library resolving its undefined
    // symbols in another custom library given as a search library.
    let host = common::build_so("host", &["host.c"], &[]);
    let plugin = common::build_so("plugin", &["plugin.c"], &[]);
    let h = std::sync::Arc::new(CustomLibrary::create(&host));
    h.add_search_library(SystemLibrary::global()).unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    unsafe { h.load() }.unwrap();
    // SAFETY: `void set_host_id(int)` in host.c.
    let set: extern "C" fn(i32) = unsafe {
        h.get::<extern "C" fn(i32)>("set_host_id")
            .unwrap()
            .into_raw()
    };
    set(7);
    let p = CustomLibrary::create(&plugin);
    p.add_search_library(h.clone()).unwrap();
    p.add_search_library(SystemLibrary::global()).unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    unsafe { p.load() }.unwrap();
    assert_eq!(f(&p, "plugin_value")(), 1007);
    // Lookups through the plugin reach the search library too (seed semantics).
    assert_eq!(p.sym("host_value"), h.sym("host_value"));
    assert!(p.own_sym("host_value").is_none());
    // Misuse is an error, not a crash.
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let e = unsafe { p.load() }.unwrap_err().to_string();
    assert!(e.contains("twice"), "{e}");
    let e = p
        .add_search_library(SystemLibrary::global())
        .unwrap_err()
        .to_string();
    assert!(e.contains("after load"), "{e}");
}

#[test]
fn missing_dependency_and_undefined_symbol_are_named() {
    let plugin = common::build_so("plugin", &["plugin.c"], &[]);
    // Without the host, plugin_value's host_value is undefined.
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let err = unsafe { elf_loader::Namespace::new("undefined").load(&plugin) }
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("libplugin.so") && err.contains("undefined symbol host_value"),
        "{err}"
    );
    // A DT_NEEDED entry that exists nowhere.
    common::build_so(
        "needsmissing_dep",
        &["plugin.c"],
        &["-Dhost_value=dep_value"],
    );
    let lib = common::build_so(
        "needsmissing",
        &["counter.c"],
        &["-Wl,--no-as-needed", "-lneedsmissing_dep"],
    );
    std::fs::remove_file(common::out_dir().join("libneedsmissing_dep.so")).unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let err = unsafe { elf_loader::Namespace::new("missing").load(&lib) }
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("libneedsmissing.so")
            && err.contains("dependency libneedsmissing_dep.so not found"),
        "{err}"
    );
    assert_eq!(elf_loader::Namespace::new("x").library_count(), 0);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let err = unsafe { elf_loader::Namespace::new("nofile").load("/nonexistent/lib.so") }
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("/nonexistent/lib.so"), "{err}");
}

#[test]
fn one_file_under_several_names_is_one_library() {
    // Like glibc, the loader knows a file by device and inode: a symlink or a hard
    // link to a loaded library gives the same copy; a copy of the file is another.
    let so = common::build_so("counter", &["counter.c"], &[]);
    let dir = common::out_dir().join("identity");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("libcounter-link.so");
    let hard = dir.join("libcounter-hard.so");
    let copy = dir.join("libcounter-copy.so");
    std::os::unix::fs::symlink(&so, &link).unwrap();
    std::fs::hard_link(&so, &hard).unwrap();
    std::fs::copy(&so, &copy).unwrap();
    let ns = elf_loader::Namespace::new("identity");
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let a = unsafe { ns.load(&so) }.unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let b = unsafe { ns.load(&link) }.unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let c = unsafe { ns.load(&hard) }.unwrap();
    assert_eq!(ns.library_count(), 1);
    assert_eq!(a.sym("bump"), b.sym("bump"));
    assert_eq!(a.sym("bump"), c.sym("bump"));
    assert_eq!(f(&a, "bump")(), 1);
    assert_eq!(f(&c, "bump")(), 2, "the same globals through the hard link");
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let d = unsafe { ns.load(&copy) }.unwrap();
    assert_eq!(ns.library_count(), 2);
    assert_ne!(a.sym("bump"), d.sym("bump"));
    assert_eq!(f(&d, "bump")(), 1, "a copy of the file has its own globals");
}

#[test]
fn gaps_between_segments_are_inaccessible() {
    // The writable segment placed far above the others (a 500 KiB hole): the loader
    // maps the first segment's file over the whole span, then the other segments, and
    // must leave nothing readable in between.
    let so = common::build_so(
        "gap",
        &["counter.c"],
        &[
            "-Wl,-z,max-page-size=0x1000",
            "-Wl,-z,separate-code",
            "-Wl,--section-start=.init_array=0x80000",
        ],
    );
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { elf_loader::Namespace::new("gap").load(&so) }.unwrap();
    assert_eq!(f(&lib, "bump")(), 1);
    assert_eq!(f(&lib, "greeting_len")(), 5);
    let bias = lib.load_bias().unwrap();
    let (gap_lo, gap_hi) = (bias + 0x3000, bias + 0x80000);
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut covered = 0;
    for line in maps.lines() {
        let mut it = line.split_whitespace();
        let (range, perms) = (it.next().unwrap(), it.next().unwrap());
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            usize::from_str_radix(a, 16).unwrap(),
            usize::from_str_radix(b, 16).unwrap(),
        );
        let (lo, hi) = (a.max(gap_lo), b.min(gap_hi));
        if lo < hi {
            assert!(
                perms.starts_with("---"),
                "gap page range {line} is accessible"
            );
            covered += hi - lo;
        }
    }
    assert_eq!(covered, gap_hi - gap_lo, "the gap is still reserved");
}

#[test]
fn segments_aligned_above_the_page_size() {
    // 2 MiB segment alignment (older linkers' default on x86_64): the loader reserves
    // an aligned range first; the load bias honours the alignment and the holes
    // between the segments stay inaccessible.
    let so = common::build_so(
        "big_align",
        &["counter.c"],
        &["-Wl,-z,max-page-size=0x200000"],
    );
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { elf_loader::Namespace::new("big_align").load(&so) }.unwrap();
    assert_eq!(f(&lib, "bump")(), 1);
    assert_eq!(f(&lib, "greeting_len")(), 5);
    let bias = lib.load_bias().unwrap();
    assert_eq!(bias % 0x20_0000, 0, "bias {bias:#x}");
    let (lo, hi) = lib.address_range().unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    // Between the first segment's page and the second segment (at +2 MiB) nothing is
    // readable.
    for line in maps.lines() {
        let (range, perms) = line.split_once(' ').unwrap();
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            usize::from_str_radix(a, 16).unwrap(),
            usize::from_str_radix(b, 16).unwrap(),
        );
        if a >= lo && b <= hi && a >= bias + 0x1000 && b <= bias + 0x20_0000 {
            assert!(perms.starts_with("---"), "{line}");
        }
    }
}

#[test]
fn relocations_in_several_writable_segments() {
    // Wheels repaired by patchelf have several writable PT_LOADs (numpy's OpenBLAS has
    // seven, with relocation targets in three): the fast relocation paths work on the
    // segment holding a table's first target and send the others through the checked
    // path; both must give the same result as a single segment.
    let so = common::build_so(
        "twoseg",
        &["twoseg.c"],
        &["-Wl,--section-start=.farptrs=0x400000"],
    );
    let data = std::fs::read(&so).unwrap();
    let info = elf_loader::elf::ElfInfo::parse(&so, &data).unwrap();
    let rw = info
        .loads
        .iter()
        .filter(|l| l.flags & elf_loader::elf::consts::PF_W != 0)
        .count();
    assert_eq!(rw, 2, "the fixture has two writable segments");
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let libc = unsafe { SystemLibrary::open("libc.so.6", libc::RTLD_NOW) }.unwrap();
    for round in 0..3 {
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib =
            unsafe { elf_loader::Namespace::new(&format!("twoseg-{round}")).load(&so) }.unwrap();
        assert_eq!(f(&lib, "far_ok")(), 1);
        assert_eq!(f(&lib, "bump")(), 2);
        let far: extern "C" fn(i32) -> usize =
            // SAFETY: the fixture defines `void *far_ptr(int)`.
            unsafe { lib.get::<extern "C" fn(i32) -> usize>("far_ptr").unwrap().into_raw() };
        assert_eq!(Some(far(1)), libc.sym("puts"));
        assert_eq!(Some(far(2)), libc.sym("strlen"));
        assert_eq!(Some(far(0)), lib.sym("counter"));
    }
}

#[test]
fn search_library_cycles_are_refused() {
    // A lookup goes through a library's search libraries; a cycle among them made
    // `sym` of a missing name recurse until the stack overflowed.
    let counter = common::build_so("counter", &["counter.c"], &[]);
    let host = common::build_so("host", &["host.c"], &[]);
    let a = std::sync::Arc::new(CustomLibrary::create(&counter));
    let err = a.add_search_library(a.clone()).unwrap_err().to_string();
    assert!(
        err.contains("cannot be its own search library") && err.contains("libcounter"),
        "{err}"
    );
    let b = std::sync::Arc::new(CustomLibrary::create(&host));
    let c = std::sync::Arc::new(CustomLibrary::create(&counter));
    b.add_search_library(a.clone()).unwrap();
    a.add_search_library(c.clone()).unwrap();
    // c -> b -> a -> c: refused, naming the libraries.
    let err = c.add_search_library(b.clone()).unwrap_err().to_string();
    assert!(err.contains("cycle of search libraries"), "{err}");
    assert!(
        err.contains("libhost") && err.contains("libcounter"),
        "{err}"
    );
    // a <-> b, once a is loaded (its search list is then the loaded image's).
    a.add_search_library(SystemLibrary::global()).unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    unsafe { a.load() }.unwrap();
    let err = a.add_search_library(b.clone()).unwrap_err().to_string();
    assert!(err.contains("after load"), "{err}");
    let d = std::sync::Arc::new(CustomLibrary::create(&host));
    d.add_search_library(a.clone()).unwrap();
    let e = CustomLibrary::create(&counter);
    e.add_search_library(d.clone()).unwrap();
    // Diamond-shaped (no cycle) is fine, and lookups of missing names end.
    b.add_search_library(d.clone()).unwrap();
    b.add_search_library(SystemLibrary::global()).unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    unsafe { b.load() }.unwrap();
    assert!(b.sym("no_such_symbol_anywhere").is_none());
    assert_eq!(f(&b, "bump")(), 1, "found in a, through the search list");
}

#[test]
fn typed_lookups_check_what_they_can() {
    let so = common::build_so("counter", &["counter.c"], &[]);
    let lib = CustomLibrary::create(&so);
    // SAFETY: `int bump(void)` in counter.c (the lookup fails: not loaded yet).
    let e = unsafe { lib.get::<IntFn>("bump") }.unwrap_err().to_string();
    assert!(e.contains("not loaded"), "{e}");
    lib.add_search_library(SystemLibrary::global()).unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    unsafe { lib.load() }.unwrap();
    // SAFETY: `int bump(void)` in counter.c.
    let bump = unsafe { lib.get::<IntFn>("bump") }.unwrap();
    assert_eq!(bump(), 1);
    assert_eq!(Some(bump.address()), lib.sym("bump"));
    // SAFETY: as above (the name is missing: an error naming it and the library).
    let e = unsafe { lib.get::<IntFn>("no_such_function") }.unwrap_err();
    assert!(
        matches!(&e, elf_loader::Error::SymbolNotFound { name, .. } if name == "no_such_function"),
        "{e:?}"
    );
    // SAFETY: the type is refused before any use: not the size of an address.
    let e = unsafe { lib.get::<(usize, usize)>("bump") }
        .unwrap_err()
        .to_string();
    assert!(e.contains("not an address"), "{e}");
    // `get_own` does not reach the search libraries; `get` does.
    // SAFETY: `strlen` has this signature.
    assert!(unsafe { lib.get_own::<extern "C" fn(*const i8) -> usize>("strlen") }.is_err());
    // SAFETY: as above.
    let strlen = unsafe { lib.get::<extern "C" fn(*const i8) -> usize>("strlen") }.unwrap();
    assert_eq!(strlen(c"four".as_ptr()), 4);
    // A data symbol as a pointer.
    // SAFETY: `int counter` in counter.c.
    let counter = unsafe { lib.get::<*const i32>("counter") }.unwrap();
    // SAFETY: the library is loaded while `counter` (which borrows it) lives.
    assert_eq!(unsafe { **counter }, 1);
    // The namespace's global scope answers the same.
    // SAFETY: `int get(void)` in counter.c.
    let get = unsafe { lib.namespace().get::<IntFn>("get") }.unwrap();
    assert_eq!(get(), 1);
}
