//! Loader features on C fixtures: ifunc, weak undefined symbols, symbol versions,
//! init/fini order, dlopen from inside a namespace, dladdr, dlsym(RTLD_DEFAULT).

use crate::common;

use elf_loader::{CustomLibrary, Namespace, SymbolProvider, TlsIndex};
use std::ffi::{c_char, CStr, CString};
use std::sync::{Arc, Mutex};

fn call0(lib: &CustomLibrary, name: &str) -> i32 {
    // SAFETY: the fixtures define these as `int name(void)`.
    let f = unsafe { lib.get::<extern "C" fn() -> i32>(name) }
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    f()
}

#[test]
fn ifunc_and_weak_undefined() {
    let so = common::build_so("ifunc", &["ifunc.c"], &[]);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { Namespace::new("ifunc").load(&so) }.unwrap();
    let add: extern "C" fn(i32, i32) -> i32 =
        // SAFETY: `add` is `int add(int, int)` (resolved through its ifunc).
        unsafe { lib.get::<extern "C" fn(i32, i32) -> i32>("add").unwrap().into_raw() };
    assert_eq!(
        add(1, 2),
        1003,
        "the ifunc resolver picked the SSE2 variant"
    );
    let call: extern "C" fn(i32, i32) -> i32 =
        // SAFETY: as above.
        unsafe { lib.get::<extern "C" fn(i32, i32) -> i32>("call_add").unwrap().into_raw() };
    assert_eq!(call(2, 3), 1005);
    let via_ptr: extern "C" fn(i32, i32) -> i32 =
        // SAFETY: as above.
        unsafe { lib.get::<extern "C" fn(i32, i32) -> i32>("call_add_ptr").unwrap().into_raw() };
    assert_eq!(via_ptr(4, 5), 1009);
    // SAFETY: `resolver_calls` is an int.
    let calls = unsafe { *(lib.sym("resolver_calls").unwrap() as *const i32) };
    assert!(calls >= 1, "resolver ran");
    assert_eq!(
        call0(&lib, "weak_is_null"),
        1,
        "weak undefined symbols resolve to 0"
    );
}

#[test]
fn versioned_symbols_bind_to_the_requested_version() {
    let ver = common::build_so(
        "ver",
        &["ver.c"],
        &[
            "-Wl,--version-script",
            &common::fixtures_dir().join("ver.map").display().to_string(),
        ],
    );
    let use_ = common::build_so(
        "veruse",
        &["veruse.c"],
        &["-lver", "-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags"],
    );
    let ns = Namespace::new("versions");
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { ns.load(&use_) }.unwrap();
    assert_eq!(call0(&lib, "call_old"), 1, "foo@VER_1");
    assert_eq!(call0(&lib, "call_default"), 2, "foo@@VER_2");
    assert_eq!(
        ns.library_count(),
        2,
        "libver.so came in through RUNPATH $ORIGIN"
    );
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let v = unsafe { Namespace::new("versions-direct").load(&ver) }.unwrap();
    let old = v.sym_versioned("foo", Some("VER_1")).unwrap();
    let new = v.sym_versioned("foo", Some("VER_2")).unwrap();
    assert_ne!(old, new);
    assert_eq!(
        v.sym("foo"),
        Some(new),
        "an unversioned lookup finds the default version"
    );
    assert!(v.sym_versioned("foo", Some("VER_3")).is_none());
}

static EVENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

extern "C" fn record_event(what: *const c_char) {
    // SAFETY: the fixtures pass string literals.
    let s = unsafe { CStr::from_ptr(what) }
        .to_string_lossy()
        .into_owned();
    EVENTS.lock().unwrap().push(s);
}

/// A user-defined provider: the host program's own functions offered to the libraries.
struct Host;
// SAFETY: the one answer is `record_event`, with the C signature the fixtures declare.
unsafe impl SymbolProvider for Host {
    fn sym(&self, name: &str) -> Option<usize> {
        (name == "record_event").then_some(record_event as *const () as usize)
    }
    fn tls_sym(&self, _: &str) -> Option<TlsIndex> {
        None
    }
    fn describe(&self) -> String {
        "test host".into()
    }
}

#[test]
fn init_and_fini_run_in_dependency_order() {
    common::build_so("order_b", &["order_b.c"], &[]);
    let a = common::build_so(
        "order_a",
        &["order_a.c"],
        &[
            "-lorder_b",
            "-Wl,-rpath,$ORIGIN",
            "-Wl,-init=a_init_entry",
            "-Wl,-fini=a_fini_entry",
        ],
    );
    let ns = Namespace::new("order");
    ns.add_search_library(Arc::new(Host));
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { ns.load(&a) }.unwrap();
    let argc = call0(&lib, "a_argc");
    assert_eq!(
        argc as usize,
        std::env::args().count(),
        "init_array got the process's argc"
    );
    let loaded: Vec<String> = EVENTS.lock().unwrap().drain(..).collect();
    assert_eq!(
        loaded,
        ["B:ctor101", "B:ctor102", "A:DT_INIT", "A:init_array"]
    );
    drop(lib);
    drop(ns);
    let unloaded: Vec<String> = EVENTS.lock().unwrap().drain(..).collect();
    assert_eq!(
        unloaded,
        ["A:fini_array", "A:DT_FINI", "B:dtor102", "B:dtor101"]
    );
}

fn host_fns(
    lib: &CustomLibrary,
) -> (
    extern "C" fn(i32),
    extern "C" fn(*const c_char) -> i32,
    extern "C" fn() -> *const c_char,
) {
    // SAFETY: signatures as in host.c.
    unsafe {
        (
            lib.get::<extern "C" fn(i32)>("set_host_id")
                .unwrap()
                .into_raw(),
            lib.get::<extern "C" fn(*const c_char) -> i32>("load_plugin")
                .unwrap()
                .into_raw(),
            lib.get::<extern "C" fn() -> *const c_char>("last_error")
                .unwrap()
                .into_raw(),
        )
    }
}

#[test]
fn dlopen_from_inside_lands_in_the_same_namespace() {
    let host = common::build_so("host", &["host.c"], &[]);
    let plugin = common::build_so("plugin", &["plugin.c"], &[]);
    let plugin_c = CString::new(plugin.to_str().unwrap()).unwrap();
    let mut copies = Vec::new();
    for id in 1..=3 {
        let ns = Namespace::new(&format!("host{id}"));
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(&host) }.unwrap();
        let (set_id, load_plugin, _) = host_fns(&lib);
        set_id(id);
        copies.push((ns, lib, load_plugin));
    }
    for (id, (ns, _lib, load_plugin)) in copies.iter().enumerate() {
        assert_eq!(
            load_plugin(plugin_c.as_ptr()),
            1001 + id as i32,
            "plugin bound to host copy {}",
            id + 1
        );
        assert_eq!(
            ns.library_count(),
            2,
            "the plugin was loaded into namespace {}",
            ns.name()
        );
        // A second dlopen of the same path returns the already-loaded copy.
        assert_eq!(load_plugin(plugin_c.as_ptr()), 1001 + id as i32);
        assert_eq!(ns.library_count(), 2);
    }
    // Errors come back through dlerror.
    let (_, lib, load_plugin) = &copies[0];
    let (_, _, last_error) = host_fns(lib);
    assert_eq!(load_plugin(c"/nonexistent/libnothing.so".as_ptr()), -1);
    // SAFETY: last_error returns a NUL-terminated static buffer.
    let msg = unsafe { CStr::from_ptr(last_error()) }
        .to_string_lossy()
        .into_owned();
    assert!(msg.contains("/nonexistent/libnothing.so"), "{msg}");
    // A name found nowhere: glibc's wording, the caller and the directories searched
    // (it was worded as a missing DT_NEEDED entry of the caller). The fixture keeps 511
    // bytes of the message: the list of directories may be cut.
    assert_eq!(load_plugin(c"libnothing.so.7".as_ptr()), -1);
    // SAFETY: as above.
    let msg = unsafe { CStr::from_ptr(last_error()) }
        .to_string_lossy()
        .into_owned();
    assert!(
        msg.starts_with("libnothing.so.7: cannot open shared object file: not found (dlopen from ")
            && msg.contains("host.so; searched: "),
        "{msg}"
    );
    // A plugin that needs a symbol nobody has: an error naming it, not a crash.
    let bad = common::build_so(
        "badplugin",
        &["plugin.c"],
        &["-Dhost_value=host_value_missing"],
    );
    let bad_c = CString::new(bad.to_str().unwrap()).unwrap();
    assert_eq!(load_plugin(bad_c.as_ptr()), -1);
    // SAFETY: as above.
    let msg = unsafe { CStr::from_ptr(last_error()) }
        .to_string_lossy()
        .into_owned();
    assert!(
        msg.contains("undefined symbol host_value_missing") && msg.contains("libbadplugin.so"),
        "{msg}"
    );
}

#[test]
fn dladdr_and_default_lookup_know_custom_code() {
    let host = common::build_so("host", &["host.c"], &[]);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let a = unsafe { Namespace::new("dladdr-a").load(&host) }.unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let b = unsafe { Namespace::new("dladdr-b").load(&host) }.unwrap();
    for lib in [&a, &b] {
        let who: extern "C" fn(*mut *const c_char) -> *const c_char =
            // SAFETY: signature as in host.c.
            unsafe { lib.get::<extern "C" fn(*mut *const c_char) -> *const c_char>("who_am_i").unwrap().into_raw() };
        let mut sym: *const c_char = std::ptr::null();
        let fname = who(&mut sym);
        assert!(!fname.is_null());
        // SAFETY: dladdr results are NUL-terminated strings that live with the library.
        let (fname, sym) = unsafe { (CStr::from_ptr(fname), CStr::from_ptr(sym)) };
        assert_eq!(fname.to_str().unwrap(), host.to_str().unwrap());
        assert_eq!(sym.to_str().unwrap(), "host_value");
        let libc_name: extern "C" fn() -> *const c_char =
            // SAFETY: as above.
            unsafe { lib.get::<extern "C" fn() -> *const c_char>("who_is_strlen").unwrap().into_raw() };
        // SAFETY: as above.
        let n = unsafe { CStr::from_ptr(libc_name()) }
            .to_string_lossy()
            .into_owned();
        assert!(
            n.contains("libc.so"),
            "dladdr forwards other addresses to the system: {n}"
        );
        let lookup: extern "C" fn(*const c_char) -> usize =
            // SAFETY: as above.
            unsafe { lib.get::<extern "C" fn(*const c_char) -> usize>("default_lookup").unwrap().into_raw() };
        assert_eq!(
            lookup(c"host_value".as_ptr()),
            lib.sym("host_value").unwrap(),
            "RTLD_DEFAULT sees the namespace first"
        );
        assert_ne!(lookup(c"malloc".as_ptr()), 0, "then the process");
    }
    assert_ne!(a.sym("host_value"), b.sym("host_value"));
}

#[test]
fn rtld_noload_and_dlsym_of_thread_local_symbols() {
    let host = common::build_so("host", &["host.c"], &[]);
    let plugin = common::build_so("plugin", &["plugin.c"], &[]);
    let tls = common::build_so("tls", &["tls.c"], &[]);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { Namespace::new("noload").load(&host) }.unwrap();
    let (_, load_plugin, _) = host_fns(&lib);
    // SAFETY: signatures as in host.c.
    let (is_loaded, sym_in) = unsafe {
        (
            lib.get::<extern "C" fn(*const c_char) -> i32>("is_loaded")
                .unwrap()
                .into_raw(),
            lib.get::<extern "C" fn(*const c_char, *const c_char) -> usize>("sym_in")
                .unwrap()
                .into_raw(),
        )
    };
    let plugin_c = CString::new(plugin.to_str().unwrap()).unwrap();
    assert_eq!(is_loaded(plugin_c.as_ptr()), 0, "RTLD_NOLOAD does not load");
    assert_eq!(lib.namespace().library_count(), 1);
    assert_eq!(load_plugin(plugin_c.as_ptr()), 1000);
    assert_eq!(
        is_loaded(plugin_c.as_ptr()),
        1,
        "RTLD_NOLOAD finds the loaded library"
    );
    assert_ne!(
        is_loaded(c"libc.so.6".as_ptr()),
        0,
        "and the system's libraries"
    );
    // dlsym of a thread-local symbol gives the calling thread's address.
    let tls_c = CString::new(tls.to_str().unwrap()).unwrap();
    let var = sym_in(tls_c.as_ptr(), c"tls_gd".as_ptr());
    let gd_addr = sym_in(tls_c.as_ptr(), c"gd_addr".as_ptr());
    assert!(var != 0 && gd_addr != 0);
    // SAFETY: `void *gd_addr(void)` in tls.c.
    let gd_addr: extern "C" fn() -> usize = unsafe { std::mem::transmute(gd_addr) };
    assert_eq!(var, gd_addr(), "dlsym(tls_gd) is this thread's tls_gd");
    // SAFETY: tls_gd is an int, initialised to 5.
    assert_eq!(unsafe { *(var as *const i32) }, 5);
    let other = std::thread::spawn(move || gd_addr()).join().unwrap();
    assert_ne!(other, var, "another thread has another block");
}

#[test]
fn dlerror_reports_each_failure_once_and_nothing_stale() {
    // glibc's own error string, left by the loader's internal lookups behind a failed
    // dlsym(RTLD_DEFAULT), was returned by a later dlerror() after a successful call.
    let so = common::build_so("dlerror_use", &["dlerror_use.c"], &[]);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { Namespace::new("dlerror").load(&so) }.unwrap();
    // SAFETY: `int dlerror_checks(void)` in dlerror_use.c.
    let checks: extern "C" fn() -> i32 = unsafe {
        lib.get::<extern "C" fn() -> i32>("dlerror_checks")
            .unwrap()
            .into_raw()
    };
    assert_eq!(
        checks(),
        0,
        "check number {} of dlerror_use.c failed",
        checks()
    );
}
