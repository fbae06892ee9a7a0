//! Panics never cross the C boundary: a search library written in Rust (a
//! `SymbolProvider`) that panics is reached from `dlsym` called by loaded code, which
//! returns NULL with a `dlerror` message naming the entry and the panic, and the process
//! carries on. (The same through the C ABI: `capi/tests/it/panics.rs`.)

use crate::common;

use elf_loader::{Namespace, SymbolProvider, TlsIndex};
use std::ffi::{c_char, c_int, c_void, CStr};
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

#[test]
fn dlsym_from_loaded_code_returns_null_and_dlerror_names_the_panic() {
    let ns = Namespace::new("panics");
    ns.add_search_library(Arc::new(Provider {
        explode_on: &["explode_in_dlsym"],
    }));
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { ns.load(fixture()) }.unwrap();
    // SAFETY: signatures as in panicky.c.
    let (lookup, dlerror) = unsafe {
        (
            lib.get::<extern "C" fn(*const c_char) -> *mut c_void>("lookup_default")
                .unwrap()
                .into_raw(),
            lib.get::<extern "C" fn() -> *const c_char>("last_dlerror")
                .unwrap()
                .into_raw(),
        )
    };
    assert!(lookup(c"explode_in_dlsym".as_ptr()).is_null());
    let msg = dlerror();
    assert!(!msg.is_null(), "dlerror() has the message");
    // SAFETY: dlerror's NUL-terminated string, valid until the next dl* call.
    let msg = unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        msg,
        "dlsym: internal panic (caught at the C boundary): \
         provider exploded asking for explode_in_dlsym"
    );
    // The namespace goes on working: the provider's other symbol, found by dlsym.
    assert_eq!(
        lookup(c"provided_value".as_ptr()) as usize,
        provided_value as *const () as usize
    );
    // SAFETY: `int call_provided(void)` in panicky.c.
    let f: extern "C" fn() -> c_int = unsafe {
        lib.get::<extern "C" fn() -> c_int>("call_provided")
            .unwrap()
            .into_raw()
    };
    assert_eq!(f(), 42);
}
