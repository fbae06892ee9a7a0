//! Model-based random test of TLS across loads, unloads and threads: random sequences
//! of "load copy k", "unload copy k", "use copy k's TLS on the main thread" (through the
//! library's code, or through `TlsIndex::address_in_thread` (what the C ABI's
//! `elf_loader_tls_get_addr` returns) with the index `tls_sym` gives) and "use it on a new thread that then exits" are checked against a
//! model of the values each thread must see and of the number of live TLS blocks. Even
//! copies use `__tls_get_addr`, odd ones TLS descriptors. Its own test binary (it counts
//! live blocks process-wide).

use crate::common;

use elf_loader::{tls_live_blocks, CustomLibrary, Namespace, SymbolProvider};
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Debug, Clone)]
enum Op {
    Load(usize),
    Unload(usize),
    Main(usize, i32),
    Api(usize, i32),
    Thread(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4usize).prop_map(Op::Load),
        (0..4usize).prop_map(Op::Unload),
        (0..4usize, 0..1000i32).prop_map(|(k, v)| Op::Main(k, v)),
        (0..4usize, 0..1000i32).prop_map(|(k, v)| Op::Api(k, v)),
        (0..4usize).prop_map(Op::Thread),
    ]
}

struct Copy {
    _ns: Namespace,
    lib: CustomLibrary,
}

fn get_set(lib: &CustomLibrary) -> (extern "C" fn() -> i32, extern "C" fn(i32)) {
    // SAFETY: `int gd_get(void)` and `void gd_set(int)` in tls.c.
    unsafe {
        (
            lib.get::<extern "C" fn() -> i32>("gd_get")
                .unwrap()
                .into_raw(),
            lib.get::<extern "C" fn(i32)>("gd_set").unwrap().into_raw(),
        )
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn tls_matches_the_model(ops in proptest::collection::vec(op(), 1..24)) {
        let _serial = crate::serial();
        let so = common::build_so("tls", &["tls.c"], &[]);
        let desc = common::build_so("tlsdesc", &["tls.c"], &["-mtls-dialect=gnu2"]);
        let base = tls_live_blocks();
        let mut copies: HashMap<usize, Copy> = HashMap::new();
        // Model: the main thread's value per loaded copy, if it has touched it.
        let mut main_value: HashMap<usize, i32> = HashMap::new();
        for op in ops {
            match op {
                Op::Load(k) => {
                    copies.entry(k).or_insert_with(|| {
                        let ns = Namespace::new(&format!("model{k}"));
                        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
                        let lib = unsafe { ns.load(if k % 2 == 0 { &so } else { &desc }) }.unwrap();
                        Copy { _ns: ns, lib }
                    });
                }
                Op::Unload(k) => {
                    copies.remove(&k);
                    main_value.remove(&k);
                }
                Op::Main(k, v) => {
                    if let Some(c) = copies.get(&k) {
                        let (get, set) = get_set(&c.lib);
                        let want = *main_value.get(&k).unwrap_or(&5);
                        prop_assert_eq!(get(), want, "main thread sees its own value of copy {}", k);
                        set(v);
                        main_value.insert(k, v);
                    }
                }
                Op::Api(k, v) => {
                    if let Some(c) = copies.get(&k) {
                        let ti = c.lib.tls_sym("tls_gd").unwrap();
                        // SAFETY: an index of ours from tls_sym.
                        let p = unsafe { ti.address_in_thread() };
                        prop_assert!(p.is_some());
                        let p = p.unwrap().as_ptr().cast::<i32>();
                        let want = *main_value.get(&k).unwrap_or(&5);
                        // SAFETY: this thread's `int tls_gd` of copy k.
                        prop_assert_eq!(unsafe { *p }, want, "address_in_thread holds copy {}'s value", k);
                        // SAFETY: as above.
                        unsafe { *p = v };
                        prop_assert_eq!(get_set(&c.lib).0(), v, "the library sees the write through address_in_thread");
                        main_value.insert(k, v);
                    }
                }
                Op::Thread(k) => {
                    if let Some(c) = copies.get(&k) {
                        let (get, set) = get_set(&c.lib);
                        let seen = std::thread::spawn(move || {
                            let first = get();
                            set(first + 1);
                            (first, get())
                        })
                        .join()
                        .unwrap();
                        prop_assert_eq!(seen, (5, 6), "a new thread starts from the init image");
                    }
                }
            }
            prop_assert_eq!(
                crate::settled_live_blocks(base + main_value.len()) - base,
                main_value.len(),
                "live blocks: one per copy the main thread touched (threads' blocks died with them)"
            );
        }
        drop(copies);
        prop_assert_eq!(tls_live_blocks(), base, "unloading frees every block");
    }
}
