//! Loading real C libraries many times: globals per copy, relocations, bss, unload.

mod common;

use elf_loader::{CustomLibrary, SymbolProvider, SystemLibrary};

type IntFn = extern "C" fn() -> i32;

fn f(lib: &CustomLibrary, name: &str) -> IntFn {
    let a = lib.sym(name).unwrap_or_else(|| panic!("{name} not found"));
    // SAFETY: the fixture defines `name` as `int name(void)`.
    unsafe { std::mem::transmute::<usize, IntFn>(a) }
}

#[test]
fn one_copy_works() {
    let so = common::build_so("counter", &["counter.c"], &[]);
    let lib = CustomLibrary::create(&so);
    lib.add_search_library(SystemLibrary::global()).unwrap();
    lib.load().unwrap();
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
        unsafe { std::mem::transmute(lib.sym("format").unwrap()) };
    let mut buf = [0u8; 16];
    assert_eq!(fmt(buf.as_mut_ptr(), 16, 77), 4);
    assert_eq!(&buf[..4], b"v=77");
    assert!(lib.sym("no_such_symbol").is_none());
    assert!(
        lib.own_sym("hidden_state").is_none(),
        "static symbols are not exported"
    );
}
