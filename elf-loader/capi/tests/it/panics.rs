//! Panics never cross the C ABI: a search library written in Rust (a `SymbolProvider`)
//! that panics is reached from `elf_loader_library_load` and `elf_loader_library_sym`;
//! each returns its error value (`ELF_LOADER_ERR_PANIC`, NULL) with a message naming the
//! entry and the panic, and the process carries on. (The same from `dlsym` called by
//! loaded code: elf-loader's `tests/it/panics.rs`.)

use crate::common;

use elf_loader::{CustomLibrary, SymbolProvider, TlsIndex};
use elf_loader_capi::{
    elf_loader_last_error, elf_loader_library_delete, elf_loader_library_load,
    elf_loader_library_sym, library_handle, ELF_LOADER_ERR_PANIC, ELF_LOADER_OK,
};
use std::ffi::{c_int, CStr};
use std::path::PathBuf;
use std::sync::Arc;

/// Provides `provided_value`; panics when asked for a name in `explode_on`.
struct Provider {
    explode_on: &'static [&'static str],
}

extern "C" fn provided_value() -> c_int {
    41
}

// SAFETY: the one answer is `provided_value`, with the C signature the fixture declares.
unsafe impl SymbolProvider for Provider {
    fn sym(&self, name: &str) -> Option<usize> {
        if self.explode_on.contains(&name) {
            panic!("provider exploded asking for {name}");
        }
        (name == "provided_value").then_some(provided_value as *const () as usize)
    }
    fn tls_sym(&self, _name: &str) -> Option<TlsIndex> {
        None
    }
    fn describe(&self) -> String {
        "a panicking test provider".into()
    }
}

fn fixture() -> PathBuf {
    common::build_so("panicky", &["panicky.c"], &[])
}

fn last_error() -> String {
    // SAFETY: a NUL-terminated string valid until the next failure on this thread.
    unsafe { CStr::from_ptr(elf_loader_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn c_abi_returns_panic_code_and_names_the_panic() {
    // The relocation of provided_value asks the provider, which panics.
    let lib = CustomLibrary::create(fixture());
    lib.add_search_library(Arc::new(Provider {
        explode_on: &["provided_value"],
    }))
    .unwrap();
    let h = library_handle(lib);
    // SAFETY: a live handle from library_handle.
    let rc = unsafe { elf_loader_library_load(h) };
    assert_eq!(rc, ELF_LOADER_ERR_PANIC, "{}", last_error());
    assert_eq!(ffi_support::last_status(), ffi_support::Status::Panic);
    assert_eq!(
        last_error(),
        "elf_loader_library_load: internal panic (caught at the C boundary): \
         provider exploded asking for provided_value"
    );

    // A loaded library whose lookup of one name panics: NULL and the message; its other
    // lookups and its code still work.
    let lib = CustomLibrary::create(fixture());
    lib.add_search_library(Arc::new(Provider {
        explode_on: &["explode_me"],
    }))
    .unwrap();
    let h2 = library_handle(lib);
    // SAFETY: a live handle.
    assert_eq!(unsafe { elf_loader_library_load(h2) }, ELF_LOADER_OK);
    // SAFETY: a live handle and NUL-terminated names.
    let p = unsafe { elf_loader_library_sym(h2, c"explode_me".as_ptr()) };
    assert!(p.is_null());
    assert_eq!(
        last_error(),
        "elf_loader_library_sym: internal panic (caught at the C boundary): \
         provider exploded asking for explode_me"
    );
    // SAFETY: as above.
    let f = unsafe { elf_loader_library_sym(h2, c"call_provided".as_ptr()) };
    assert!(!f.is_null(), "{}", last_error());
    // SAFETY: `int call_provided(void)` in panicky.c.
    let f: extern "C" fn() -> c_int = unsafe { std::mem::transmute(f) };
    assert_eq!(f(), 42);
    // SAFETY: live handles, deleted once.
    unsafe {
        assert_eq!(elf_loader_library_delete(h2), ELF_LOADER_OK);
        assert_eq!(elf_loader_library_delete(h), ELF_LOADER_OK);
    }
}
