//! C++ libraries that use libstdc++'s thread-local state, loaded twice.

use crate::common;

use elf_loader::Namespace;
use std::sync::atomic::{AtomicI32, Ordering};

macro_rules! f {
    ($lib:expr, $name:literal, $ty:ty) => {{
        // SAFETY: the fixture's function has the declared signature. The library stays loaded while the test calls it.
        unsafe { $lib.get::<$ty>($name).unwrap_or_else(|e| panic!("{e}")).into_raw() }
    }};
}

#[test]
fn fixture_call_once_thread_local_threads_twice() {
    let so = common::build_so("cxx_runtime", &["cxx_runtime.cpp"], &["-pthread"]);
    let mut copies = Vec::new();
    for id in 1..=2 {
        let ns = Namespace::new(&format!("cxx-runtime-{id}"));
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(&so) }.unwrap();
        f!(lib, "set_copy_id", extern "C" fn(i32))(id);
        copies.push((ns, lib));
    }
    for (i, (_, lib)) in copies.iter().enumerate() {
        let id = i as i32 + 1;
        let run_once = f!(lib, "run_once", extern "C" fn() -> i32);
        let run_threads = f!(lib, "run_threads", extern "C" fn(i32) -> i32);
        let constructed = f!(lib, "constructed", extern "C" fn() -> i32);
        let destructed = f!(lib, "destructed", extern "C" fn() -> i32);
        assert_eq!(run_once(), 1);
        assert_eq!(run_once(), 1);
        assert_eq!(run_threads(4), 4 * (id * 1000 + 2));
        assert_eq!(constructed(), 4);
        assert_eq!(destructed(), 4);
    }
}

static HOOK_CALLS: AtomicI32 = AtomicI32::new(0);
static HOOK_VALUE: AtomicI32 = AtomicI32::new(0);

extern "C" fn hook(value: i32) {
    HOOK_VALUE.store(value, Ordering::SeqCst);
    HOOK_CALLS.fetch_add(1, Ordering::SeqCst);
}

fn mapped(path: &std::path::Path) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .contains(path.to_str().unwrap())
}

/// A thread constructs a `thread_local` of a custom library, then drops the library's
/// namespace: the destructor is still pending (glibc would keep such a library loaded),
/// so the library stays mapped; the thread exits and runs the destructor; the next
/// unload (here of an empty namespace) unloads it.
#[test]
fn namespace_unload_waits_for_pending_thread_local_destructors() {
    // Its own file, so that its mapping is this test's alone.
    let so = common::build_so("cxx_runtime_pending", &["cxx_runtime.cpp"], &["-pthread"]);
    let so2 = so.clone();
    let (to_main, from_thread) = std::sync::mpsc::channel();
    let (to_thread, from_main) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let ns = Namespace::new("cxx-pending");
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(&so2) }.unwrap();
        f!(lib, "set_copy_id", extern "C" fn(i32))(7);
        f!(lib, "set_dtor_hook", extern "C" fn(extern "C" fn(i32)))(hook);
        let bump = f!(lib, "bump", extern "C" fn() -> i32);
        assert_eq!(bump(), 7001);
        assert_eq!(bump(), 7002);
        drop(lib);
        drop(ns);
        to_main.send(()).unwrap();
        from_main.recv().unwrap();
        // The thread exits here: its destructors run, then the deferred unload.
    });
    from_thread.recv().unwrap();
    assert!(
        mapped(&so),
        "unload deferred while the destructor is pending"
    );
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 0);
    to_thread.send(()).unwrap();
    t.join().unwrap();
    assert_eq!(
        HOOK_CALLS.load(Ordering::SeqCst),
        1,
        "the destructor ran once"
    );
    assert_eq!(HOOK_VALUE.load(Ordering::SeqCst), 7002);
    // The next unload reaps it once the kernel has released the exited thread (which
    // can lag a moment behind pthread_join's return).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while mapped(&so) && std::time::Instant::now() < deadline {
        drop(Namespace::new("another"));
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(
        !mapped(&so),
        "unloaded by an unload after the destructor ran"
    );
}
