//! Relocation plans (`src/plan.rs`): a later copy of a library replays the symbol
//! resolutions of an earlier copy instead of looking the symbols up again. Checked by
//! what matters: every symbolic relocation target of a replayed copy holds the same
//! value (translated to that copy's libraries) as in a copy relocated with plans turned
//! off, for libraries with custom dependencies, a plugin binding through the namespace's
//! global scope, and libpython; and the `loaded` events show the plan was replayed
//! (the comparison alone would pass with plans never used).
//!
//! One test function: plans are turned off and on process-wide.

use crate::common;

use common::{libpython, scope_fixtures as fixtures, ScopeFixtures as Fixtures};
use elf_loader::elf::{consts::*, ElfInfo};
use elf_loader::{CustomLibrary, Namespace};
use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};

/// Runs `f` and returns the `planned=` count of each `loaded` event, by file name.
fn planned_counts(f: impl FnOnce()) -> Vec<(String, usize)> {
    let text = common::capture_log(f);
    text.lines()
        .filter(|l| l.contains(" loaded "))
        .map(|l| {
            // The innermost span's library (nested loads list their parents first).
            let lib = l
                .rsplit("load{library=")
                .next()
                .and_then(|s| s.split_whitespace().next())
                .map(|p| {
                    Path::new(p)
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned()
                })
                .unwrap_or_default();
            let n = l
                .split_whitespace()
                .find_map(|w| w.strip_prefix("planned="))
                .unwrap_or_else(|| panic!("no planned= in {l}"))
                .parse()
                .unwrap();
            (lib, n)
        })
        .collect()
}

/// A library of a namespace: file name, load bias, address range.
struct Lib {
    name: String,
    path: PathBuf,
    bias: usize,
    range: (usize, usize),
}

fn libs_of(ns: &Namespace) -> Vec<Lib> {
    ns.library_paths()
        .into_iter()
        .map(|path| {
            // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
            let lib: CustomLibrary = unsafe { ns.load(&path) }.unwrap();
            let range = lib.address_range().unwrap();
            let data = std::fs::read(&path).unwrap();
            let info = ElfInfo::parse(&path, &data).unwrap();
            Lib {
                name: path.file_name().unwrap().to_string_lossy().into_owned(),
                bias: range.0.wrapping_sub(info.min_vaddr as usize),
                path,
                range,
            }
        })
        .collect()
}

/// Every symbolic relocation target (64, GLOB_DAT, JUMP_SLOT against a symbol) of every
/// library of `ns`, as (library, target offset, value), the value written as (library it
/// points into, offset) or as an absolute address outside the namespace's libraries.
fn symbolic_targets(ns: &Namespace) -> Vec<(String, u64, String)> {
    let libs = libs_of(ns);
    let mut out = Vec::new();
    for lib in &libs {
        let data = std::fs::read(&lib.path).unwrap();
        let info = ElfInfo::parse(&lib.path, &data).unwrap();
        for t in [info.rela, info.jmprel] {
            for r in info.file_relocs(&data, t) {
                if r.sym == 0
                    || !matches!(r.kind, R_X86_64_64 | R_X86_64_GLOB_DAT | R_X86_64_JUMP_SLOT)
                {
                    continue;
                }
                let at = lib.bias.wrapping_add(r.offset as usize);
                // SAFETY: a relocation target inside the library's mapping (its writable
                // segment), alive while `ns` is.
                let v = unsafe { std::ptr::read_unaligned(at as *const usize) };
                let shown = match libs.iter().find(|l| v >= l.range.0 && v < l.range.1) {
                    Some(l) => format!("{}+{:#x}", l.name, v - l.bias),
                    None => format!("{v:#x}"),
                };
                out.push((lib.name.clone(), r.offset, shown));
            }
        }
    }
    out.sort();
    out
}

fn scenario(f: &Fixtures, name: &str) -> (Namespace, i32) {
    let ns = Namespace::new(name);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let root = unsafe { ns.load(&f.root) }.unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    unsafe { ns.load(&f.root2) }.unwrap();
    // SAFETY: root_open(const char *) -> int, from the fixture.
    let open = unsafe { root.get::<extern "C" fn(*const c_char) -> i32>("root_open") }.unwrap();
    let path = CString::new(f.plugin.to_str().unwrap()).unwrap();
    let got = open(path.as_ptr());
    (ns, got)
}

#[test]
fn replayed_copies_are_relocated_as_looked_up_ones() {
    let f = fixtures();
    elf_loader::set_relocation_plans(true);

    // First copy records, the second replays.
    let mut first = None;
    let counts = planned_counts(|| first = Some(scenario(&f, "plan-1")));
    let (_ns1, got1) = first.unwrap();
    assert_eq!(
        got1,
        2000 + 10 + 500,
        "the plugin's picks (as in tests/it/scope.rs)"
    );
    assert!(
        counts.iter().all(|(_, n)| *n == 0),
        "nothing to replay yet: {counts:?}"
    );
    let mut second = None;
    let counts = planned_counts(|| second = Some(scenario(&f, "plan-2")));
    let (ns2, got2) = second.unwrap();
    assert_eq!(got2, got1);
    for lib in ["libscope_root.so", "libscope_a.so", "libscope_plugin.so"] {
        let n = counts
            .iter()
            .find(|(l, _)| l == lib)
            .unwrap_or_else(|| panic!("no load of {lib}: {counts:?}"))
            .1;
        assert!(n > 0, "{lib} was not replayed: {counts:?}");
    }

    // The same with plans off: every symbol looked up.
    elf_loader::set_relocation_plans(false);
    let mut third = None;
    let counts = planned_counts(|| third = Some(scenario(&f, "plan-3")));
    let (ns3, got3) = third.unwrap();
    elf_loader::set_relocation_plans(true);
    assert_eq!(got3, got1);
    assert!(counts.iter().all(|(_, n)| *n == 0), "{counts:?}");

    let replayed = symbolic_targets(&ns2);
    let looked_up = symbolic_targets(&ns3);
    assert!(
        replayed.len() >= 10,
        "too few symbolic relocations compared: {}",
        replayed.len()
    );
    // Bindings across libraries of the namespace were compared (not only libc's).
    assert!(
        replayed
            .iter()
            .any(|(l, _, v)| l == "libscope_plugin.so" && v.starts_with("libscope_b.so+")),
        "{replayed:?}"
    );
    assert_eq!(replayed, looked_up);

    // libpython: 1,660 symbols from libc, libm and itself.
    let Some(py) = libpython() else {
        eprintln!("no libpython found: its part skipped");
        return;
    };
    let load = |name: &str| {
        let ns = Namespace::new(name);
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        unsafe { ns.load(&py) }.unwrap();
        ns
    };
    let _a = load("plan-py-1");
    let mut b = None;
    let counts = planned_counts(|| b = Some(load("plan-py-2")));
    let b = b.unwrap();
    assert!(counts.iter().any(|(_, n)| *n > 1000), "{counts:?}");
    elf_loader::set_relocation_plans(false);
    let c = load("plan-py-3");
    elf_loader::set_relocation_plans(true);
    let (tb, tc) = (symbolic_targets(&b), symbolic_targets(&c));
    assert!(tb.len() > 10_000, "{}", tb.len());
    assert_eq!(tb, tc);
}

#[test]
fn a_weak_symbol_found_nowhere_is_looked_up_again_by_later_copies() {
    let weak = common::build_so("weak_late", &["weak_late.c"], &[]);
    let late = common::build_so("late_def", &["late_def.c"], &[]);
    let call = |ns: &str| {
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { Namespace::new(ns).load(&weak) }.unwrap();
        // SAFETY: the fixture defines `int late_or_minus_one(void)`.
        let f = unsafe { lib.get::<extern "C" fn() -> i32>("late_or_minus_one") }.unwrap();
        f()
    };
    assert_eq!(call("weak-1"), -1, "nothing defines late_value yet");
    assert_eq!(call("weak-2"), -1);
    // Now the process's global scope has a definition.
    let _global =
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        unsafe { elf_loader::SystemLibrary::open(late.to_str().unwrap(), libc::RTLD_GLOBAL) }.unwrap();
    assert_eq!(call("weak-3"), 42, "a later copy finds the new definition");
    assert_eq!(call("weak-4"), 42);
}
