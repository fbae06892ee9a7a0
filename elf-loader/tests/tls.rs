//! TLS in custom-loaded libraries: general- and local-dynamic variables per thread and
//! per copy, for threads started before and after the load; blocks freed at thread exit
//! and at unload. Its own test binary: it counts live TLS blocks process-wide.

mod common;

use elf_loader::{tls_live_blocks, CustomLibrary, Namespace, SymbolProvider};
use std::sync::mpsc;

struct Tls {
    gd_get: extern "C" fn() -> i32,
    gd_set: extern "C" fn(i32),
    ld_bump: extern "C" fn() -> i32,
    big_touch: extern "C" fn(i32, i8) -> i32,
    ptr_ok: extern "C" fn() -> i32,
    gd_addr: extern "C" fn() -> usize,
}

fn fns(lib: &CustomLibrary) -> Tls {
    let s = |n: &str| lib.sym(n).unwrap_or_else(|| panic!("{n} missing"));
    // SAFETY: signatures as in tls.c.
    unsafe {
        Tls {
            gd_get: std::mem::transmute::<usize, extern "C" fn() -> i32>(s("gd_get")),
            gd_set: std::mem::transmute::<usize, extern "C" fn(i32)>(s("gd_set")),
            ld_bump: std::mem::transmute::<usize, extern "C" fn() -> i32>(s("ld_bump")),
            big_touch: std::mem::transmute::<usize, extern "C" fn(i32, i8) -> i32>(s("big_touch")),
            ptr_ok: std::mem::transmute::<usize, extern "C" fn() -> i32>(s("ptr_ok")),
            gd_addr: std::mem::transmute::<usize, extern "C" fn() -> usize>(s("gd_addr")),
        }
    }
}

fn fresh_thread_view(t: &Tls) {
    assert_eq!((t.gd_get)(), 5, "initialised from the init image");
    assert_eq!((t.ld_bump)(), 1, "local-dynamic starts at zero");
    assert_eq!((t.ld_bump)(), 2);
    assert_eq!((t.big_touch)(99_999, 3), 0, "tbss is zeroed");
    assert_eq!((t.big_touch)(99_999, 4), 3);
    assert_eq!((t.ptr_ok)(), 1, "pointer in the init image was relocated");
}

#[test]
fn tls_per_thread_and_per_copy() {
    let so = common::build_so("tls", &["tls.c"], &[]);
    let use_so = common::build_so("tlsuse", &["tlsuse.c"], &["-ltls", "-Wl,-rpath,$ORIGIN"]);
    let base_blocks = tls_live_blocks();

    // A thread that exists before the libraries are loaded.
    let (go_tx, go_rx) = mpsc::channel::<(usize, usize)>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let early = std::thread::spawn(move || {
        let (a, b) = go_rx.recv().unwrap();
        // SAFETY: addresses of `gd_get` etc. are passed through `usize` below.
        let (ta, tb): (&Tls, &Tls) = unsafe { (&*(a as *const Tls), &*(b as *const Tls)) };
        fresh_thread_view(ta);
        fresh_thread_view(tb);
        done_tx.send(()).unwrap();
    });

    let ns_a = Namespace::new("tls-a");
    let a = ns_a.load(&use_so).unwrap();
    let b = Namespace::new("tls-b").load(&so).unwrap();
    let a_tls = CustomLibrary::create_in(&ns_a, &so);
    // The same file in the same namespace is the same library: loading returns it.
    a_tls.load().unwrap();
    assert_eq!(ns_a.library_count(), 2);
    let (ta, tb) = (fns(&a_tls), fns(&b));

    fresh_thread_view(&ta);
    fresh_thread_view(&tb);
    (ta.gd_set)(10);
    assert_eq!((ta.gd_get)(), 10);
    assert_eq!((tb.gd_get)(), 5, "copies are independent");
    assert_ne!((ta.gd_addr)(), (tb.gd_addr)());
    // A library reading another custom library's TLS variable (DTPMOD64 for a symbol
    // defined in another module).
    // SAFETY: `int other_gd_get(void)`.
    let other: extern "C" fn() -> i32 =
        unsafe { std::mem::transmute(a.sym("other_gd_get").unwrap()) };
    assert_eq!(other(), 10);
    // The exported TLS symbol through the SymbolProvider API.
    let ti = a_tls.tls_sym("tls_gd").unwrap();
    assert_eq!(Some(ti.module), a_tls.tls_module());
    assert!(
        a_tls.sym("tls_gd").is_none(),
        "a TLS symbol has no plain address"
    );

    // Main thread: one block per copy.
    let main_blocks = tls_live_blocks() - base_blocks;
    assert_eq!(main_blocks, 2);

    go_tx
        .send((&ta as *const Tls as usize, &tb as *const Tls as usize))
        .unwrap();
    done_rx.recv().unwrap();
    early.join().unwrap();
    assert_eq!(
        tls_live_blocks() - base_blocks,
        2,
        "the early thread's blocks were freed at its exit"
    );

    // Threads started after the load, several at once.
    let main_addr = (ta.gd_addr)();
    // Joined explicitly: a scope's implicit join may return before the threads'
    // thread-local destructors (which free the blocks) have run.
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    fresh_thread_view(&ta);
                    fresh_thread_view(&tb);
                    assert_ne!((ta.gd_addr)(), main_addr, "each thread has its own block");
                    (ta.gd_set)(77);
                    assert_eq!(other(), 77);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
    assert_eq!((ta.gd_get)(), 10, "other threads did not touch ours");
    assert_eq!(tls_live_blocks() - base_blocks, 2);

    // Unload: the remaining blocks go with the modules.
    drop((a, a_tls, ns_a, b));
    assert_eq!(tls_live_blocks(), base_blocks, "unload freed every block");
}

#[test]
fn initial_exec_tls_is_refused_with_the_symbol_named() {
    let so = common::build_so("tlsie", &["tlsie.c"], &[]);
    let err = Namespace::new("ie")
        .load(&so)
        .err()
        .expect("initial-exec TLS must be refused")
        .to_string();
    assert!(
        err.contains("ie_var") && err.contains("R_X86_64_TPOFF64") && err.contains("libtlsie.so"),
        "{err}"
    );
}

extern "C" {
    fn __errno_location() -> *mut i32;
}

fn errno_now() -> i32 {
    // SAFETY: glibc's errno location for the calling thread.
    unsafe { *__errno_location() }
}

#[test]
fn system_tls_through_initial_exec_and_general_dynamic() {
    let ie = common::build_so("systls", &["systls.c"], &[]);
    let gd = common::build_so("systls_gd", &["systls_gd.c"], &[]);
    let a = Namespace::new("systls").load(&ie).unwrap();
    let b = Namespace::new("systls-gd").load(&gd).unwrap();
    // SAFETY: signatures as in the fixtures.
    let (set_ie, get_ie, set_gd, get_gd) = unsafe {
        (
            std::mem::transmute::<usize, extern "C" fn(i32)>(a.sym("set_errno_ie").unwrap()),
            std::mem::transmute::<usize, extern "C" fn() -> i32>(a.sym("get_errno_ie").unwrap()),
            std::mem::transmute::<usize, extern "C" fn(i32)>(b.sym("set_errno_gd").unwrap()),
            std::mem::transmute::<usize, extern "C" fn() -> i32>(b.sym("get_errno_gd").unwrap()),
        )
    };
    let check = move |v: i32| {
        set_ie(v);
        assert_eq!(errno_now(), v, "TPOFF64 reached this thread's libc errno");
        assert_eq!(
            get_gd(),
            v,
            "the general-dynamic access sees the same variable"
        );
        set_gd(v + 1);
        assert_eq!(errno_now(), v + 1);
        assert_eq!(get_ie(), v + 1);
    };
    check(41);
    // Other threads: the static TLS offset and the forwarded module id hold there too.
    std::thread::spawn(move || check(1000)).join().unwrap();
    assert_eq!(errno_now(), 42, "the other thread did not touch ours");
}

#[test]
fn tls_of_a_dlopened_system_library() {
    let sys = common::build_so("sysvar", &["sysvar.c"], &[]);
    let gd = common::build_so("sysvar_gd", &["sysvar_user.c"], &[]);
    let ie = common::build_so("sysvar_ie", &["sysvar_user.c"], &["-DINITIAL_EXEC"]);
    let provider = elf_loader::SystemLibrary::open(sys.to_str().unwrap(), libc::RTLD_NOW).unwrap();
    // SAFETY: `void sysvar_set(int)` in sysvar.c.
    let set: extern "C" fn(i32) =
        unsafe { std::mem::transmute(provider.sym("sysvar_set").unwrap()) };

    // General dynamic: the system's module and offset, this thread's block.
    let ns = Namespace::new("sysvar-gd");
    ns.add_search_library(provider.clone());
    let lib = ns.load(&gd).unwrap();
    // SAFETY: `int sysvar_user_get(void)` in sysvar_user.c.
    let get: extern "C" fn() -> i32 =
        unsafe { std::mem::transmute(lib.sym("sysvar_user_get").unwrap()) };
    assert_eq!(get(), 7);
    set(9);
    assert_eq!(get(), 9, "the same variable as the system library's");
    assert_eq!(
        std::thread::spawn(move || get()).join().unwrap(),
        7,
        "per thread"
    );

    // Initial exec: an error naming the library, the symbol and why.
    let ns = Namespace::new("sysvar-ie");
    ns.add_search_library(provider);
    let err = ns
        .load(&ie)
        .err()
        .expect("initial-exec against dynamic TLS refused")
        .to_string();
    assert!(
        err.contains("libsysvar_ie.so")
            && err.contains("sysvar_tls")
            && err.contains("not in the system's static TLS block"),
        "{err}"
    );
}
