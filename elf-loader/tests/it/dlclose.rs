//! `dlclose` from loaded code with glibc's reference counting: each `dlopen` is an open,
//! `dlclose` drops one, and a library nothing uses any more (no opens left, not a
//! dependency or binding target of a used library, not `RTLD_NODELETE`) is finalised
//! and unmapped, with the dependencies only it used; libraries loaded through the API
//! stay until their namespace goes.

use crate::common;

use elf_loader::{CustomLibrary, Namespace};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

/// The tests share the unload hook's counters: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());
static UNLOADS: AtomicI32 = AtomicI32::new(0);
static LAST_STATE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn unload_hook(state: i32) {
    LAST_STATE.store(state, Ordering::SeqCst);
    UNLOADS.fetch_add(1, Ordering::SeqCst);
}

struct Fixtures {
    host: PathBuf,
    plugin: PathBuf,
    helper: PathBuf,
    user: PathBuf,
}

fn fixtures() -> Fixtures {
    let helper = common::build_so("unload_helper", &["unload_helper.c"], &[]);
    Fixtures {
        plugin: common::build_so(
            "unload_plugin",
            &["unload_plugin.c"],
            &["-lunload_helper", "-Wl,-rpath,$ORIGIN"],
        ),
        host: common::build_so("unload_host", &["unload_host.c"], &[]),
        user: common::build_so("unload_user", &["unload_user.c"], &[]),
        helper,
    }
}

fn mapped(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .any(|l| l.ends_with(path.to_str().unwrap()))
}

/// The host library's entries, bound to one namespace.
struct Host {
    ns: Namespace,
    _lib: CustomLibrary,
    open: extern "C" fn(*const c_char, c_int) -> *mut c_void,
    close: extern "C" fn(*mut c_void) -> c_int,
    sym: extern "C" fn(*mut c_void, *const c_char) -> *mut c_void,
    error: extern "C" fn() -> *const c_char,
}

impl Host {
    fn load(path: &Path, name: &str) -> Host {
        let ns = Namespace::new(name);
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(path) }.unwrap();
        // SAFETY: signatures as in unload_host.c; detached from the borrow of `lib`,
        // which `Host` keeps as long as them.
        unsafe {
            Host {
                open: lib
                    .get::<extern "C" fn(*const c_char, c_int) -> *mut c_void>("host_open")
                    .unwrap()
                    .into_raw(),
                close: lib
                    .get::<extern "C" fn(*mut c_void) -> c_int>("host_close")
                    .unwrap()
                    .into_raw(),
                sym: lib
                    .get::<extern "C" fn(*mut c_void, *const c_char) -> *mut c_void>("host_sym")
                    .unwrap()
                    .into_raw(),
                error: lib
                    .get::<extern "C" fn() -> *const c_char>("host_error")
                    .unwrap()
                    .into_raw(),
                ns,
                _lib: lib,
            }
        }
    }
    fn open(&self, path: &Path, flags: c_int) -> *mut c_void {
        let c = CString::new(path.to_str().unwrap()).unwrap();
        let h = (self.open)(c.as_ptr(), flags);
        assert!(!h.is_null(), "dlopen failed: {}", self.error());
        h
    }
    fn error(&self) -> String {
        // SAFETY: the fixture's NUL-terminated buffer.
        unsafe { CStr::from_ptr((self.error)()) }
            .to_string_lossy()
            .into_owned()
    }
    fn call(&self, h: *mut c_void, name: &CStr) -> i32 {
        let f = (self.sym)(h, name.as_ptr());
        assert!(!f.is_null(), "{name:?} not found");
        // SAFETY: the fixtures' int(void) functions.
        let f = unsafe { std::mem::transmute::<*mut c_void, extern "C" fn() -> i32>(f) };
        f()
    }
    fn set_hook(&self, h: *mut c_void) {
        let f = (self.sym)(h, c"set_unload_hook".as_ptr());
        // SAFETY: as in unload_plugin.c.
        let f = unsafe { std::mem::transmute::<*mut c_void, extern "C" fn(extern "C" fn(i32))>(f) };
        f(unload_hook);
    }
    fn paths(&self) -> Vec<PathBuf> {
        self.ns.library_paths()
    }
}

#[test]
fn each_open_is_closed_once_and_the_last_close_unloads() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixtures();
    let host = Host::load(&f.host, "dlclose-count");
    let before = UNLOADS.load(Ordering::SeqCst);
    let h1 = host.open(&f.plugin, libc::RTLD_NOW);
    let h2 = host.open(&f.plugin, libc::RTLD_NOW);
    assert_eq!(h1, h2, "the same library gives the same handle");
    host.set_hook(h1);
    assert_eq!(host.call(h1, c"bump"), 1);
    assert_eq!(host.call(h1, c"bump"), 2);
    assert_eq!(host.call(h1, c"plugin_helper"), 42);
    assert!(mapped(&f.plugin) && mapped(&f.helper));

    assert_eq!((host.close)(h1), 0);
    assert!(mapped(&f.plugin), "one open left");
    assert_eq!(host.call(h2, c"bump"), 3);
    assert_eq!(UNLOADS.load(Ordering::SeqCst), before);

    assert_eq!((host.close)(h2), 0);
    assert_eq!(UNLOADS.load(Ordering::SeqCst), before + 1, "fini ran once");
    assert_eq!(LAST_STATE.load(Ordering::SeqCst), 3);
    assert!(!mapped(&f.plugin), "the plugin is unmapped");
    assert!(
        !mapped(&f.helper),
        "its dependency, used by nothing else, too"
    );
    assert!(!host.paths().contains(&f.plugin), "{:?}", host.paths());

    // Closing again is an error that names the problem, not a crash.
    assert_eq!((host.close)(h2), -1);
    assert!(host.error().contains("not open"), "{}", host.error());

    // Opening again loads a fresh copy.
    let h3 = host.open(&f.plugin, libc::RTLD_NOW);
    assert_eq!(host.call(h3, c"bump"), 1, "state starts afresh");
    assert_eq!((host.close)(h3), 0);
    assert!(!mapped(&f.plugin));
}

#[test]
fn rtld_nodelete_and_api_loads_stay() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixtures();
    let host = Host::load(&f.host, "dlclose-nodelete");
    let h = host.open(&f.plugin, libc::RTLD_NOW | libc::RTLD_NODELETE);
    assert_eq!(host.call(h, c"bump"), 1);
    assert_eq!((host.close)(h), 0);
    assert!(mapped(&f.plugin), "RTLD_NODELETE keeps the library");
    let h = host.open(&f.plugin, libc::RTLD_NOW);
    assert_eq!(host.call(h, c"bump"), 2, "the same copy, its state kept");
    assert_eq!((host.close)(h), 0);
    assert!(mapped(&f.plugin));

    // The host was loaded through the API: opening and closing it from inside leaves it.
    let me = host.open(&f.host, libc::RTLD_NOW);
    assert_eq!((host.close)(me), 0);
    assert!(host.paths().contains(&f.host));
    drop(host);
    assert!(!mapped(&f.plugin), "the namespace's end unloads everything");
}

#[test]
fn a_library_stays_while_another_uses_its_symbols() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixtures();
    let host = Host::load(&f.host, "dlclose-reldeps");
    // The helper joins the global scope; the user binds helper_value from it.
    let helper = host.open(&f.helper, libc::RTLD_NOW | libc::RTLD_GLOBAL);
    let user = host.open(&f.user, libc::RTLD_NOW);
    assert_eq!(host.call(user, c"user_value"), 41);
    assert_eq!((host.close)(helper), 0);
    assert!(
        mapped(&f.helper),
        "bound to by a library still open: kept (glibc's l_reldeps)"
    );
    assert_eq!(host.call(user, c"user_value"), 41);
    assert_eq!((host.close)(user), 0);
    assert!(!mapped(&f.user) && !mapped(&f.helper), "both gone");
    // No longer in the global scope: a new user cannot bind helper_value.
    let c = CString::new(f.user.to_str().unwrap()).unwrap();
    assert!((host.open)(c.as_ptr(), libc::RTLD_NOW).is_null());
    let e = host.error();
    assert!(
        e.contains("helper_value") && e.contains("libunload_user.so"),
        "{e}"
    );
}

#[test]
fn load_events_report_loads_and_unloads_in_order() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixtures();
    let ns = Namespace::new("dlclose-events");
    let seen = std::sync::Arc::new(Mutex::new(Vec::<(bool, PathBuf, usize)>::new()));
    let log = seen.clone();
    let ns2 = ns.clone();
    ns.on_event(move |e| {
        // A callback may look symbols up: it runs outside the loader's locks.
        let _ = ns2.sym("host_open");
        let entry = match *e {
            elf_loader::LoadEvent::Loaded { path, start, end } => {
                assert!(start < end);
                (true, path.to_path_buf(), start)
            }
            elf_loader::LoadEvent::Unloaded { path, start, end } => {
                assert!(start < end);
                (false, path.to_path_buf(), start)
            }
        };
        log.lock().unwrap().push(entry);
    });
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { ns.load(&f.host) }.unwrap();
    let events = |s: &Mutex<Vec<(bool, PathBuf, usize)>>| -> Vec<(bool, PathBuf)> {
        s.lock()
            .unwrap()
            .iter()
            .map(|(l, p, _)| (*l, p.clone()))
            .collect()
    };
    assert_eq!(events(&seen), vec![(true, f.host.clone())]);
    // SAFETY: signatures as in unload_host.c.
    let (open, close) = unsafe {
        (
            lib.get::<extern "C" fn(*const c_char, c_int) -> *mut c_void>("host_open")
                .unwrap(),
            lib.get::<extern "C" fn(*mut c_void) -> c_int>("host_close")
                .unwrap(),
        )
    };
    let c = CString::new(f.plugin.to_str().unwrap()).unwrap();
    let h = open(c.as_ptr(), libc::RTLD_NOW);
    assert!(!h.is_null());
    // The plugin's dependency is initialised first, so it is reported first.
    assert_eq!(
        events(&seen),
        vec![
            (true, f.host.clone()),
            (true, f.helper.clone()),
            (true, f.plugin.clone()),
        ]
    );
    assert_eq!(close(h), 0);
    let all = events(&seen);
    assert_eq!(all.len(), 5, "{all:?}");
    let unloaded: Vec<&PathBuf> = all[3..]
        .iter()
        .map(|(l, p)| {
            assert!(!l, "{all:?}");
            p
        })
        .collect();
    assert!(
        unloaded.contains(&&f.plugin) && unloaded.contains(&&f.helper),
        "{all:?}"
    );
    // The addresses reported at unload are those reported at load.
    let starts = seen.lock().unwrap().clone();
    for (l, p, s) in &starts[3..] {
        assert!(!l);
        assert!(starts[..3]
            .iter()
            .any(|(l2, p2, s2)| *l2 && p2 == p && s2 == s));
    }
}

/// A library defining a `STB_GNU_UNIQUE` symbol (a C++ inline or template static, here
/// `std::to_string`'s digit table) stays loaded after its last `dlclose`, as glibc keeps
/// it (`do_lookup_unique` marks it nodelete); its namespace's end unloads it.
#[test]
fn a_library_defining_a_unique_symbol_stays_after_its_last_dlclose() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = fixtures();
    let lib = common::build_so("llvm_globals", &["llvm_globals.cpp"], &[]);
    let host = Host::load(&f.host, "dlclose-unique");
    let h = host.open(&lib, libc::RTLD_NOW);
    assert_eq!((host.close)(h), 0);
    assert!(host.paths().contains(&lib), "{:?}", host.paths());
    drop(host);
    // glibc, in this process: still there after dlclose (RTLD_NOLOAD finds it).
    let c = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: plain dlopen/dlclose of the fixture (its initialisers are trivial).
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null());
        assert_eq!(libc::dlclose(h), 0);
        let again = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(
            !again.is_null(),
            "glibc keeps a library with a unique symbol"
        );
        libc::dlclose(again);
    }
}

/// A library whose constructor `dlopen`s its own file and `dlclose`s it again (plugin code
/// pinning or looking itself up), loaded through the Rust API: the load is counted before
/// the initialisers run, so the inner close unloads nothing. The namespace reports one
/// `Loaded` event and no `Unloaded`, keeps the library (count, path, global lookups), and
/// a second load of the same path gives the same copy; the namespace's end unmaps it.
/// (`capi/tests/it/glibc_order.rs` checks the init/fini sequence against glibc's.)
#[test]
fn a_constructor_opening_and_closing_its_own_library_leaves_it_loaded() {
    let lib = common::build_so(
        "selfish",
        &["order_lib.c"],
        &["-DNAME=selfish", "-DSELF_OPEN", "-ldl"],
    );
    let ns = Namespace::new("self-open");
    let seen = std::sync::Arc::new(Mutex::new(Vec::<(bool, PathBuf)>::new()));
    let log = seen.clone();
    ns.on_event(move |e| {
        let entry = match *e {
            elf_loader::LoadEvent::Loaded { path, .. } => (true, path.to_path_buf()),
            elf_loader::LoadEvent::Unloaded { path, .. } => (false, path.to_path_buf()),
        };
        log.lock().unwrap().push(entry);
    });
    // SAFETY: the fixture's constructor prints and opens/closes itself; nothing else.
    let first = unsafe { ns.load(&lib) }.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![(true, lib.clone())]);
    assert_eq!(ns.library_count(), 1);
    assert_eq!(ns.library_paths(), vec![lib.clone()]);
    assert!(first.is_loaded());
    let present = first.own_sym("order_present").expect("its own symbol");
    assert_eq!(ns.sym("order_present"), Some(present));
    assert!(mapped(&lib));
    // SAFETY: as above (the library is loaded already: nothing runs).
    let second = unsafe { ns.load(&lib) }.unwrap();
    assert_eq!(
        second.address_range(),
        first.address_range(),
        "the same copy"
    );
    assert_eq!(second.own_sym("order_present"), Some(present));
    assert_eq!(ns.library_count(), 1);
    assert_eq!(*seen.lock().unwrap(), vec![(true, lib.clone())]);
    drop((first, second));
    assert!(mapped(&lib), "the namespace keeps its libraries");
    drop(ns);
    assert!(!mapped(&lib), "the namespace's end unloads it");
    assert_eq!(*seen.lock().unwrap(), vec![(true, lib.clone())]);
}
