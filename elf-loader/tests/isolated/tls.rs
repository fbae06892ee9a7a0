//! TLS in custom-loaded libraries: general- and local-dynamic variables per thread and
//! per copy, for threads started before and after the load; blocks freed at thread exit
//! and at unload. Its own test binary: it counts live TLS blocks process-wide.

use crate::common;

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
    // SAFETY: signatures as in tls.c.
    unsafe {
        Tls {
            gd_get: common::function::<extern "C" fn() -> i32>(lib, "gd_get"),
            gd_set: common::function::<extern "C" fn(i32)>(lib, "gd_set"),
            ld_bump: common::function::<extern "C" fn() -> i32>(lib, "ld_bump"),
            big_touch: common::function::<extern "C" fn(i32, i8) -> i32>(lib, "big_touch"),
            ptr_ok: common::function::<extern "C" fn() -> i32>(lib, "ptr_ok"),
            gd_addr: common::function::<extern "C" fn() -> usize>(lib, "gd_addr"),
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

/// Held by every test of this binary: some count live TLS blocks (a process-wide
/// count) or check that a freed module slot is reused, which another test loading a
/// TLS library at the same time would disturb.
static BLOCKS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn tls_per_thread_and_per_copy() {
    let _serial = crate::serial();
    let so = common::build_so("tls", &["tls.c"], &[]);
    let use_so = common::build_so("tlsuse", &["tlsuse.c"], &["-ltls", "-Wl,-rpath,$ORIGIN"]);
    per_thread_and_per_copy(&so, &use_so, "");
}

/// The same with TLS descriptors (`-mtls-dialect=gnu2`: `R_X86_64_TLSDESC` for the
/// exported variable, the local-dynamic ones and another library's variable), which
/// the loader points at its own descriptor functions.
#[test]
fn tls_descriptors_per_thread_and_per_copy() {
    let _serial = crate::serial();
    let gnu2 = "-mtls-dialect=gnu2";
    let so = common::build_so("tlsdesc", &["tls.c"], &[gnu2]);
    let use_so = common::build_so(
        "tlsdescuse",
        &["tlsuse.c"],
        &[gnu2, "-ltlsdesc", "-Wl,-rpath,$ORIGIN"],
    );
    for f in [&so, &use_so] {
        let data = std::fs::read(f).unwrap();
        let info = elf_loader::elf::ElfInfo::parse(f, &data).unwrap();
        let mut relocs = info.file_relocs(&data, info.rela);
        relocs.extend(info.file_relocs(&data, info.jmprel));
        assert!(
            relocs.iter().any(|r| r.kind == 36) && !relocs.iter().any(|r| r.kind == 16),
            "{}: TLSDESC and no DTPMOD64",
            f.display()
        );
    }
    per_thread_and_per_copy(&so, &use_so, "desc-");
}

fn per_thread_and_per_copy(so: &std::path::Path, use_so: &std::path::Path, prefix: &str) {
    let _blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
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

    let ns_a = Namespace::new(&format!("{prefix}tls-a"));
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let a = unsafe { ns_a.load(use_so) }.unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let b = unsafe { Namespace::new(&format!("{prefix}tls-b")).load(so) }.unwrap();
    let a_tls = CustomLibrary::create_in(&ns_a, so);
    // The same file in the same namespace is the same library: loading returns it.
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    unsafe { a_tls.load() }.unwrap();
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
    let other: extern "C" fn() -> i32 = unsafe {
        a.get::<extern "C" fn() -> i32>("other_gd_get")
            .unwrap()
            .into_raw()
    };
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
        crate::settled_live_blocks(base_blocks + 2) - base_blocks,
        2,
        "the early thread's blocks were freed after its exit"
    );

    // Threads started after the load, several at once.
    let main_addr = (ta.gd_addr)();
    // Joined explicitly: a scope's implicit join may return before the threads'
    // thread-local destructors (which retire the blocks) have run.
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
    assert_eq!(crate::settled_live_blocks(base_blocks + 2) - base_blocks, 2);

    // Unload: the remaining blocks go with the modules.
    drop((a, a_tls, ns_a, b));
    assert_eq!(tls_live_blocks(), base_blocks, "unload freed every block");
}

/// Initial-exec TLS with initialised data (`tlsie_data.c`) loaded while threads run (this
/// harness's own, and one of the test's, parked before the load): each gets the init
/// image in its copy of the static pool (the loader's signal to every thread); a thread
/// started after the load gets it from the loader's TLS init image.
#[test]
fn initial_exec_tls_with_initialised_data_reaches_running_threads() {
    let _serial = crate::serial();
    let _blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let so = common::build_so("tlsie_data", &["tlsie_data.c"], &[]);
    type Word = extern "C" fn(i32) -> i64;
    type Bump = extern "C" fn() -> i32;
    let (go_tx, go_rx) = mpsc::channel::<(Word, Bump)>();
    let before = std::thread::spawn(move || {
        let (word, bump) = go_rx.recv().unwrap();
        ((0..4).map(|i| word(i)).collect::<Vec<_>>(), bump())
    });
    let base_blocks = tls_live_blocks();
    // SAFETY: the fixture has no initialisers.
    let lib = unsafe { Namespace::new("ie-data").load(&so) }.expect("loads while threads run");
    // SAFETY: signatures as in tlsie_data.c.
    let (word, bump, self_ok) = unsafe {
        (
            common::function::<Word>(&lib, "ie_word"),
            common::function::<Bump>(&lib, "ie_bump"),
            common::function::<extern "C" fn() -> i32>(&lib, "ie_self_ok"),
        )
    };
    assert_eq!(
        (0..4).map(|i| word(i)).collect::<Vec<_>>(),
        [10, 20, 30, 40]
    );
    assert_eq!(self_ok(), 1, "the relocated word of the image");
    assert_eq!(bump(), 42);
    go_tx.send((word, bump)).unwrap();
    let (words, first) = before.join().unwrap();
    assert_eq!(words, [10, 20, 30, 40], "a thread started before the load");
    assert_eq!(first, 42, "its own counter");
    let after = std::thread::spawn(move || (word(1), bump(), self_ok()));
    assert_eq!(
        after.join().unwrap(),
        (20, 42, 1),
        "a thread started after the load"
    );
    assert_eq!(bump(), 43, "this thread's counter is its own");
    assert_eq!(
        tls_live_blocks(),
        base_blocks,
        "no block allocated: the static pool"
    );
}

/// A running thread that blocks every signal cannot be given the image: the load fails
/// after the loader's timeout, naming the thread, and the process goes on.
#[test]
fn initial_exec_tls_with_initialised_data_names_a_thread_that_blocks_signals() {
    let _serial = crate::serial();
    let so = common::build_so("tlsie", &["tlsie.c"], &[]);
    let (tid_tx, tid_rx) = mpsc::channel::<i64>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let blocker = std::thread::spawn(move || {
        // SAFETY: blocks every signal in this thread only.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        }
        // SAFETY: gettid has no preconditions.
        tid_tx
            .send(unsafe { libc::syscall(libc::SYS_gettid) })
            .unwrap();
        done_rx.recv().unwrap();
    });
    let tid = tid_rx.recv().unwrap();
    // SAFETY: loading runs the initialisers of this test's libraries (none).
    let err = unsafe { Namespace::new("ie").load(&so) }
        .err()
        .expect("a thread that blocks signals cannot be reached")
        .to_string();
    done_tx.send(()).unwrap();
    blocker.join().unwrap();
    assert!(
        err.contains("libtlsie.so")
            && err.contains("did not take signal")
            && err.contains(&tid.to_string()),
        "{err}"
    );
}

/// The thread pointer (`%fs:0`).
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: on x86_64 Linux %fs:0 holds the TCB's self pointer.
    unsafe {
        std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp
}

#[derive(Clone, Copy)]
struct Ie {
    bump: extern "C" fn() -> i32,
    add: extern "C" fn(i32, i64) -> i64,
    counter_addr: extern "C" fn() -> usize,
}

fn ie_fns(lib: &CustomLibrary) -> Ie {
    // SAFETY: signatures as in tlsie_bss.c.
    unsafe {
        Ie {
            bump: common::function::<extern "C" fn() -> i32>(lib, "ie_bump"),
            add: common::function::<extern "C" fn(i32, i64) -> i64>(lib, "ie_add"),
            counter_addr: common::function::<extern "C" fn() -> usize>(lib, "ie_counter_addr"),
        }
    }
}

/// What a thread sees of one copy: fresh zeros, then its own counts.
fn ie_fresh_view(t: &Ie) {
    assert_eq!((t.bump)(), 1, "tbss starts at zero in every thread");
    assert_eq!((t.bump)(), 2);
    assert_eq!((t.add)(3, 7), 7);
    assert_eq!((t.add)(3, 5), 12);
}

#[test]
fn initial_exec_tls_with_zeroed_data_gets_the_static_pool() {
    let _serial = crate::serial();
    let _blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
    static_pool_copies(common::build_so("tlsie_bss", &["tlsie_bss.c"], &[]));
    // The general-dynamic variable through TLS descriptors (a constant offset now).
    let desc = common::build_so("tlsie_bss_desc", &["tlsie_bss.c"], &["-mtls-dialect=gnu2"]);
    let out = std::process::Command::new("readelf")
        .arg("-rW")
        .arg(&desc)
        .output()
        .unwrap();
    let relocs = String::from_utf8_lossy(&out.stdout);
    assert!(relocs.contains("R_X86_64_TLSDESC"), "{relocs}");
    static_pool_copies(desc);
}

/// Two copies of a `tlsie_bss.c` build, in threads started before and after the load.
fn static_pool_copies(so: std::path::PathBuf) {
    let data = std::fs::read(&so).unwrap();
    let info = elf_loader::elf::ElfInfo::parse(&so, &data).expect("parse the fixture");
    assert!(info.static_tls, "the fixture is flagged DF_STATIC_TLS");
    // glibc takes the same file (a slot of its surplus static TLS).
    let c = std::ffi::CString::new(so.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: the fixture has no initialisers.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "glibc loads the fixture");
    // SAFETY: our handle, nothing of it in use.
    unsafe { libc::dlclose(h) };

    // A thread started before the load, parked until the copies exist.
    type Bump = extern "C" fn() -> i32;
    let (go_tx, go_rx) = mpsc::channel::<(Bump, Bump)>();
    let early = std::thread::spawn(move || {
        // ie_bump of two copies, kept loaded below until this thread is joined.
        let (a, b) = go_rx.recv().unwrap();
        assert_eq!(a(), 1, "an early thread's copy is zero too");
        assert_eq!(a(), 2);
        assert_eq!(b(), 1, "the second copy is apart");
    });

    let free_before = elf_loader::tls_static_pool_free();
    let blocks_before = tls_live_blocks();
    // SAFETY: loading runs the fixture's (absent) initialisers.
    let a = unsafe { Namespace::new("ie-a").load(&so) }.expect("initial-exec .tbss loads");
    // SAFETY: as above.
    let b = unsafe { Namespace::new("ie-b").load(&so) }.expect("and a second copy");
    assert!(
        elf_loader::tls_static_pool_free() <= free_before - 2 * (4 + 8 * 8),
        "each copy took its part of the pool"
    );
    let (ta, tb) = (ie_fns(&a), ie_fns(&b));
    ie_fresh_view(&ta);
    assert_eq!((tb.bump)(), 1, "copies do not share the variable");
    // The variable is in the static TLS block, at the same offset in every thread; the
    // general-dynamic path (tls_sym) reaches the same storage.
    let off = (ta.counter_addr)().wrapping_sub(thread_pointer());
    assert!(
        (off as isize) < 0,
        "below the thread pointer, as static TLS is"
    );
    let ti = a.tls_sym("ie_counter").expect("a TLS symbol");
    // SAFETY: a module of ours.
    let gd = unsafe { ti.address_in_thread() }.unwrap().as_ptr() as usize;
    assert_eq!(gd, (ta.counter_addr)(), "TPOFF64 and __tls_get_addr agree");
    // SAFETY: signatures as in tlsie_bss.c.
    let (gd_bump, gd_addr) = unsafe {
        (
            common::function::<extern "C" fn() -> i32>(&a, "ie_gd_bump"),
            common::function::<extern "C" fn() -> usize>(&a, "ie_gd_addr"),
        )
    };
    assert_eq!(
        (gd_bump(), gd_bump()),
        (1, 2),
        "the general-dynamic variable too"
    );
    let gd_off = gd_addr().wrapping_sub(thread_pointer());
    assert!((gd_off as isize) < 0, "in the static block as well");
    assert_eq!(
        tls_live_blocks(),
        blocks_before,
        "no block allocated for a static module"
    );

    go_tx.send((ta.bump, tb.bump)).unwrap();
    early.join().unwrap();
    // Threads started after the load (the copy stays loaded until they are joined).
    let later: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                ie_fresh_view(&ta);
                assert_eq!(gd_bump(), 1, "fresh in this thread too");
                let tp = thread_pointer();
                (
                    (ta.counter_addr)().wrapping_sub(tp),
                    gd_addr().wrapping_sub(tp),
                )
            })
        })
        .collect();
    for t in later {
        assert_eq!(
            t.join().unwrap(),
            (off, gd_off),
            "the same offsets from every thread's pointer"
        );
    }
    assert_eq!((ta.bump)(), 3, "this thread's count is its own");
    drop((a, b));
}

#[test]
fn initial_exec_tls_beyond_the_static_pool_is_refused_with_the_pool_named() {
    let _serial = crate::serial();
    let _blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let so = common::build_so("tlsie_big", &["tlsie_bss.c"], &["-DIE_BIG"]);
    // SAFETY: loading runs the fixture's (absent) initialisers.
    let err = unsafe { Namespace::new("ie-big").load(&so) }
        .err()
        .expect("4 KiB of initial-exec TLS does not fit the pool")
        .to_string();
    assert!(
        err.contains("R_X86_64_TPOFF64")
            && err.contains("libtlsie_big.so")
            && err.contains("static pool"),
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
    let _serial = crate::serial();
    let _blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let ie = common::build_so("systls", &["systls.c"], &[]);
    let gd = common::build_so("systls_gd", &["systls_gd.c"], &[]);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let a = unsafe { Namespace::new("systls").load(&ie) }.unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let b = unsafe { Namespace::new("systls-gd").load(&gd) }.unwrap();
    // SAFETY: signatures as in the fixtures.
    let (set_ie, get_ie, set_gd, get_gd) = unsafe {
        (
            a.get::<extern "C" fn(i32)>("set_errno_ie")
                .unwrap()
                .into_raw(),
            a.get::<extern "C" fn() -> i32>("get_errno_ie")
                .unwrap()
                .into_raw(),
            b.get::<extern "C" fn(i32)>("set_errno_gd")
                .unwrap()
                .into_raw(),
            b.get::<extern "C" fn() -> i32>("get_errno_gd")
                .unwrap()
                .into_raw(),
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
    let _serial = crate::serial();
    let _blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let sys = common::build_so("sysvar", &["sysvar.c"], &[]);
    let gd = common::build_so("sysvar_gd", &["sysvar_user.c"], &[]);
    let ie = common::build_so("sysvar_ie", &["sysvar_user.c"], &["-DINITIAL_EXEC"]);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let provider =
        unsafe { elf_loader::SystemLibrary::open(sys.to_str().unwrap(), libc::RTLD_NOW) }.unwrap();
    // SAFETY: `void sysvar_set(int)` in sysvar.c.
    let set: extern "C" fn(i32) = unsafe {
        provider
            .get::<extern "C" fn(i32)>("sysvar_set")
            .unwrap()
            .into_raw()
    };

    // General dynamic: the system's module and offset, this thread's block.
    let ns = Namespace::new("sysvar-gd");
    ns.add_search_library(provider.clone());
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { ns.load(&gd) }.unwrap();
    // SAFETY: `int sysvar_user_get(void)` in sysvar_user.c.
    let get: extern "C" fn() -> i32 = unsafe {
        lib.get::<extern "C" fn() -> i32>("sysvar_user_get")
            .unwrap()
            .into_raw()
    };
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
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let err = unsafe { ns.load(&ie) }
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

/// TLS descriptors for the system's thread-local variables: libc's `errno` (static TLS:
/// the descriptor returns its constant offset) and a variable of a library the system
/// loader `dlopen`ed (dynamic TLS: the descriptor asks the system's `__tls_get_addr`),
/// per thread.
#[test]
fn tls_descriptors_for_system_variables() {
    let _serial = crate::serial();
    let _blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let gnu2 = "-mtls-dialect=gnu2";
    let gd = common::build_so("systls_gd_desc", &["systls_gd.c"], &[gnu2]);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let b = unsafe { Namespace::new("systls-desc").load(&gd) }.unwrap();
    // SAFETY: signatures as in systls_gd.c.
    let (set_gd, get_gd) = unsafe {
        (
            b.get::<extern "C" fn(i32)>("set_errno_gd")
                .unwrap()
                .into_raw(),
            b.get::<extern "C" fn() -> i32>("get_errno_gd")
                .unwrap()
                .into_raw(),
        )
    };
    let check = move |v: i32| {
        set_gd(v);
        assert_eq!(
            errno_now(),
            v,
            "the descriptor reached this thread's libc errno"
        );
        // SAFETY: this thread's errno.
        unsafe { *__errno_location() = v + 1 };
        assert_eq!(get_gd(), v + 1);
    };
    check(51);
    std::thread::spawn(move || check(2000)).join().unwrap();
    assert_eq!(errno_now(), 52, "the other thread did not touch ours");

    let sys = common::build_so("sysvar", &["sysvar.c"], &[]);
    let user = common::build_so("sysvar_desc", &["sysvar_user.c"], &[gnu2]);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let provider =
        unsafe { elf_loader::SystemLibrary::open(sys.to_str().unwrap(), libc::RTLD_NOW) }.unwrap();
    // SAFETY: `void sysvar_set(int)` in sysvar.c.
    let set: extern "C" fn(i32) = unsafe {
        provider
            .get::<extern "C" fn(i32)>("sysvar_set")
            .unwrap()
            .into_raw()
    };
    let ns = Namespace::new("sysvar-desc");
    ns.add_search_library(provider.clone());
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { ns.load(&user) }.unwrap();
    // SAFETY: `int sysvar_user_get(void)` in sysvar_user.c.
    let get: extern "C" fn() -> i32 = unsafe {
        lib.get::<extern "C" fn() -> i32>("sysvar_user_get")
            .unwrap()
            .into_raw()
    };
    assert_eq!(get(), 7);
    set(9);
    assert_eq!(get(), 9, "the same variable as the system library's");
    assert_eq!(
        std::thread::spawn(move || get()).join().unwrap(),
        7,
        "per thread"
    );
}

type KeepGpXmm = extern "C" fn(*const [u8; 16], *mut [u8; 16], *mut u64) -> usize;
type KeepYmm = extern "C" fn(*const [u8; 32], *mut [u8; 32], i32) -> usize;

/// A TLS descriptor call leaves every register but %rax as it was, on its slow path (a
/// thread's first access: the block is allocated and initialised by Rust code, glibc's
/// memcpy and memset, which use vector registers) and on its fast path: the general
/// registers a normal call may clobber, xmm0-15, the upper halves of ymm0-15 (AVX) and
/// ymm16-31 (AVX-512VL), where the CPU has them. An undefined weak variable's address
/// through a descriptor is NULL.
#[test]
fn tls_descriptors_preserve_registers() {
    let _serial = crate::serial();
    let _blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let so = common::build_so("tlsdesc_regs", &["tlsdesc_regs.c"], &["-mtls-dialect=gnu2"]);
    let copies: Vec<_> = (0..2)
        .map(|i| {
            let ns = Namespace::new(&format!("tlsdesc-regs-{i}"));
            // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
            let lib = unsafe { ns.load(&so) }.unwrap();
            (ns, lib)
        })
        .collect();
    let avx = std::arch::is_x86_feature_detected!("avx");
    let avx512 = std::arch::is_x86_feature_detected!("avx512vl");
    let check = move |lib: &CustomLibrary, round: u8| -> usize {
        // SAFETY: signatures as in tlsdesc_regs.c.
        let (keep, keep_ymm, weak): (KeepGpXmm, KeepYmm, extern "C" fn() -> usize) = unsafe {
            (
                lib.get::<KeepGpXmm>("desc_keep_gp_xmm").unwrap().into_raw(),
                lib.get::<KeepYmm>("desc_keep_ymm").unwrap().into_raw(),
                lib.get::<extern "C" fn() -> usize>("desc_weak_addr")
                    .unwrap()
                    .into_raw(),
            )
        };
        let input: Vec<[u8; 16]> = (0..16u8)
            .map(|r| std::array::from_fn(|i| r.wrapping_mul(31) ^ (i as u8) ^ round))
            .collect();
        let mut out = vec![[0u8; 16]; 16];
        let mut gp = [0u64; 8];
        let addr = keep(input.as_ptr(), out.as_mut_ptr(), gp.as_mut_ptr());
        assert_eq!(out, input, "xmm0-15 preserved (round {round})");
        assert_eq!(
            gp,
            [0x1111, 0x2222, 0x3333, 0x4444, 0x5555, 0x6666, 0x7777, 0x8888],
            "rcx rdx rsi rdi r8-r11 preserved"
        );
        // SAFETY: `long desc_var = 7` of this copy, in this thread's block.
        assert!(unsafe { *(addr as *const i64) } >= 7);
        // SAFETY: as above.
        unsafe { *(addr as *mut i64) += 1 };
        if avx {
            let input: Vec<[u8; 32]> = (0..32u8)
                .map(|r| std::array::from_fn(|i| r.wrapping_mul(17) ^ (i as u8) ^ round ^ 0x5a))
                .collect();
            let mut out = vec![[0u8; 32]; 32];
            let a2 = keep_ymm(input.as_ptr(), out.as_mut_ptr(), i32::from(avx512));
            let n = if avx512 { 32 } else { 16 };
            assert_eq!(
                out[..n],
                input[..n],
                "ymm registers preserved (round {round})"
            );
            assert_eq!(a2, addr);
        }
        assert_eq!(weak(), 0, "an undefined weak variable is at NULL");
        addr
    };
    for (_, lib) in &copies {
        // A fresh thread: the first call takes the slow path, the second the fast one.
        let (a1, a2) =
            std::thread::scope(|s| s.spawn(|| (check(lib, 1), check(lib, 2))).join().unwrap());
        assert_eq!(a1, a2);
        let here = check(lib, 3);
        assert_ne!(here, a1, "each thread has its own block");
        assert_eq!(check(lib, 4), here);
    }
    let addrs: Vec<usize> = copies.iter().map(|(_, l)| check(l, 5)).collect();
    assert_ne!(addrs[0], addrs[1], "each copy has its own variable");
}

/// 80 copies (40 through `__tls_get_addr`, 40 through TLS descriptors: 80 modules) and
/// 2,000 threads, 50 at a time, each touching four copies: every thread sees fresh
/// variables in every copy and only its own writes. Then copies are unloaded while
/// threads that used them are alive and parked (their blocks freed with the module;
/// the threads' later exit must not touch them), new copies take the freed slots under
/// new ids, and the parked threads see fresh variables there, not their stale dtv
/// entries. Live blocks return to where they started.
#[test]
fn thousands_of_threads_80_copies_and_unload_under_live_threads() {
    let _serial = crate::serial();
    let _blocks = BLOCKS.lock().unwrap_or_else(|e| e.into_inner());
    let base_blocks = tls_live_blocks();
    let gd = common::build_so("tls", &["tls.c"], &[]);
    let desc = common::build_so("tlsdesc", &["tls.c"], &["-mtls-dialect=gnu2"]);
    let load = |i: usize| {
        let ns = Namespace::new(&format!("tls-many-{i}"));
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(if i % 2 == 0 { &gd } else { &desc }) }.unwrap();
        let t = fns(&lib);
        (ns, lib, t)
    };
    let mut copies: Vec<_> = (0..80).map(load).collect();
    let ids: std::collections::HashSet<u64> = copies
        .iter()
        .map(|(_, l, _)| l.tls_module().unwrap())
        .collect();
    assert_eq!(ids.len(), 80, "80 modules");
    {
        let views: Vec<&Tls> = copies.iter().map(|(_, _, t)| t).collect();
        for batch in 0..40 {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..50)
                    .map(|k| {
                        let views = &views;
                        s.spawn(move || {
                            let n = batch * 50 + k;
                            let mine: Vec<usize> =
                                (0..4).map(|j| (n * 7 + j * 19) % views.len()).collect();
                            for &c in &mine {
                                let t = views[c];
                                assert_eq!((t.gd_get)(), 5, "fresh in thread {n}, copy {c}");
                                assert_eq!((t.ld_bump)(), 1);
                                (t.gd_set)(n as i32 * 100 + c as i32);
                            }
                            for &c in &mine {
                                assert_eq!((views[c].gd_get)(), n as i32 * 100 + c as i32);
                            }
                        })
                    })
                    .collect();
                for h in handles {
                    h.join().unwrap();
                }
            });
        }
    }
    assert_eq!(
        crate::settled_live_blocks(base_blocks),
        base_blocks,
        "every thread's blocks freed after its exit"
    );

    // Threads alive across an unload: each uses copies 0..8, then waits.
    let views: Vec<usize> = copies
        .iter()
        .map(|(_, _, t)| t as *const Tls as usize)
        .collect();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let mut resume = Vec::new();
    let mut parked = Vec::new();
    for k in 0..8 {
        let (tx, rx) = mpsc::channel::<Vec<usize>>();
        resume.push(tx);
        let ready = ready_tx.clone();
        let first = views.clone();
        parked.push(std::thread::spawn(move || {
            // SAFETY: the Tls views of copies 0..8 are alive until this thread is
            // told to go on (the test keeps them).
            let v = |i: usize| unsafe { &*(first[i] as *const Tls) };
            for c in 0..8 {
                assert_eq!((v(c).gd_get)(), 5);
                (v(c).gd_set)(1000 + k);
            }
            ready.send(()).unwrap();
            // The new copies, loaded into the freed slots.
            let new = rx.recv().unwrap();
            for &p in &new {
                // SAFETY: views of the new copies, alive until this thread is joined.
                let t = unsafe { &*(p as *const Tls) };
                assert_eq!((t.gd_get)(), 5, "a new copy in a reused slot is fresh");
                (t.gd_set)(2000 + k);
                assert_eq!((t.gd_get)(), 2000 + k);
            }
        }));
    }
    for _ in 0..8 {
        ready_rx.recv().unwrap();
    }
    assert_eq!(tls_live_blocks(), base_blocks + 64);
    // Unload copies 0..4 while the threads live: their 32 blocks go with them.
    let old_ids: Vec<u64> = copies[..4]
        .iter()
        .map(|(_, l, _)| l.tls_module().unwrap())
        .collect();
    copies.drain(..4);
    assert_eq!(tls_live_blocks(), base_blocks + 32);
    // New copies take the freed slots, under new ids.
    let fresh: Vec<_> = (100..104).map(load).collect();
    for (_, l, _) in &fresh {
        let id = l.tls_module().unwrap();
        assert!(!old_ids.contains(&id), "ids are never reused");
        assert!(
            old_ids.iter().any(|o| o & 0xffff_ffff == id & 0xffff_ffff),
            "a freed slot is reused"
        );
    }
    let new_views: Vec<usize> = fresh
        .iter()
        .map(|(_, _, t)| t as *const Tls as usize)
        .collect();
    for tx in &resume {
        tx.send(new_views.clone()).unwrap();
    }
    for t in parked {
        t.join().unwrap();
    }
    assert_eq!(
        crate::settled_live_blocks(base_blocks),
        base_blocks,
        "the parked threads' blocks freed after their exit"
    );
    drop(fresh);
    drop(copies);
    assert_eq!(tls_live_blocks(), base_blocks);
}
