//! Where glibc's loader does something as a sequence, elf-loader does the same, in the
//! same order: each case is run by one host program (`tests/c/glibc_order_host.c`)
//! twice, once with glibc's `dlopen` and once with elf-loader's C ABI, and both runs
//! must give the expected answer.
//!
//! - The dependency search (glibc 2.36 `elf/dl-load.c`, `_dl_map_object`): one case per
//!   rule, on chains of small libraries built like auditwheel's output (only the top
//!   object has the `DT_RPATH`); each library returns the tag of the copy found, so the
//!   answer says which file of each name was picked.
//! - Thread exit (`nptl/pthread_create.c`, `start_thread`: `__call_tls_dtors`, then
//!   `__nptl_deallocate_tsd`): a library that keeps a TLS address in a pthread key and
//!   writes through it from the key destructor, as jemalloc does; also under valgrind.
//! - Teardown (`elf/dl-close.c`): a static destructor that `dlclose`s its handles while
//!   its library is being unloaded, as LLVM's `~Globals` does, 100 times, and at exit.

use crate::{common, hosts};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One library of a case: `lib<name>.so` in `dir` (relative to the case's folder),
/// answering `tag`, needing `next` (linked, or with `open_next` `dlopen`ed by bare
/// name), with a `DT_RPATH` or `DT_RUNPATH`.
#[derive(Clone, Copy, Default)]
struct Lib {
    name: &'static str,
    dir: &'static str,
    tag: &'static str,
    next: Option<&'static str>,
    open_next: bool,
    rpath: Option<&'static str>,
    runpath: Option<&'static str>,
}

fn lib(name: &'static str, dir: &'static str, tag: &'static str) -> Lib {
    Lib {
        name,
        dir,
        tag,
        ..Lib::default()
    }
}

impl Lib {
    fn needs(mut self, next: &'static str) -> Lib {
        self.next = Some(next);
        self
    }
    fn opens(mut self, next: &'static str) -> Lib {
        self.next = Some(next);
        self.open_next = true;
        self
    }
    fn rpath(mut self, p: &'static str) -> Lib {
        self.rpath = Some(p);
        self
    }
    fn runpath(mut self, p: &'static str) -> Lib {
        self.runpath = Some(p);
        self
    }
}

/// Builds a case's libraries (in order: a library after the one it links with) into
/// `target/tmp/.../search/<case>/`, removing what an earlier run left there.
fn build_case(case: &str, libs: &[Lib]) -> PathBuf {
    let root = common::out_dir().join("search").join(case);
    let _ = std::fs::remove_dir_all(&root);
    let mut built: HashMap<&str, PathBuf> = HashMap::new();
    for l in libs {
        let dir = match l.dir {
            "." => root.clone(),
            d => root.join(d),
        };
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join(format!("lib{}.so", l.name));
        let mut cmd = common::compiler(false);
        cmd.args(["-shared", "-fPIC", "-o"])
            .arg(&out)
            .arg(common::fixtures_dir().join("search_who.c"))
            .arg(format!("-DNAME={}", l.name))
            .arg(format!("-DTAG=\"{}\"", l.tag))
            .arg(format!("-Wl,-soname,lib{}.so", l.name));
        if let Some(n) = l.next {
            cmd.arg(format!("-DNEXT={n}"));
            if l.open_next {
                cmd.arg("-DOPEN_NEXT");
            } else {
                let at = built
                    .get(n)
                    .unwrap_or_else(|| panic!("{case}: build lib{n} first"));
                cmd.arg(format!("-L{}", at.display())).arg(format!("-l{n}"));
            }
        }
        if let Some(p) = l.rpath {
            cmd.arg("-Wl,--disable-new-dtags")
                .arg(format!("-Wl,-rpath,{p}"));
        }
        if let Some(p) = l.runpath {
            cmd.arg("-Wl,--enable-new-dtags")
                .arg(format!("-Wl,-rpath,{p}"));
        }
        let o = cmd.output().expect("run the C compiler");
        assert!(
            o.status.success(),
            "{case}: building lib{}: {}",
            l.name,
            String::from_utf8_lossy(&o.stderr)
        );
        built.entry(l.name).or_insert(dir);
    }
    root
}

/// The host program, built once per test run (tests run it at the same time).
fn host() -> PathBuf {
    static HOST: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        hosts::build_c_host(
            "glibc_order_host",
            "glibc_order_host.c",
            &["-ldl", "-pthread"],
        )
    })
    .clone()
}

/// The answer of one search: `result: <tags>` or `error`.
fn search(
    host: &Path,
    mode: &str,
    top: &Path,
    func: &str,
    env: &[(&str, String)],
    cwd: &Path,
) -> String {
    let mut cmd = Command::new(host);
    cmd.args(["search", mode])
        .arg(top)
        .arg(func)
        .current_dir(cwd)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("SEARCH_SETENV");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{mode} {}: {text}{}",
        top.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let answer = text
        .lines()
        .find(|l| l.starts_with("result: ") || *l == "error")
        .unwrap_or_else(|| panic!("{mode}: no answer in {text}"));
    // A failed `dlopen` inside the chain: glibc's and our messages differ in wording.
    match answer.find(">(dlopen: ") {
        Some(k) => format!("{}>(dlopen failed)", &answer[..k]),
        None => answer.to_string(),
    }
}

/// Runs a case with glibc and with elf-loader; both must answer `want`.
#[track_caller]
fn check(case: &str, libs: &[Lib], env: &[(&'static str, String)], want: &str) {
    check_with(&host(), case, libs, |_| env.to_vec(), None, want);
}

#[track_caller]
fn check_with(
    host: &Path,
    case: &str,
    libs: &[Lib],
    env: impl Fn(&Path) -> Vec<(&'static str, String)>,
    cwd: Option<&str>,
    want: &str,
) {
    let root = build_case(case, libs);
    let top = libs.last().unwrap();
    let top_path = root.join(top.dir).join(format!("lib{}.so", top.name));
    let func = format!("chain_{}", top.name);
    let env = env(&root);
    let cwd = cwd.map_or_else(|| root.clone(), |c| root.join(c));
    std::fs::create_dir_all(&cwd).unwrap();
    for mode in ["glibc", "ours"] {
        let got = search(host, mode, &top_path, &func, &env, &cwd);
        assert_eq!(got, want, "{case}: {mode}");
    }
}

// glibc: `for (l = loader; l; l = l->l_loader) ... DT_RPATH` (the loading object
// first), when the loading object has no DT_RUNPATH.
#[test]
fn rpath_of_the_loading_object() {
    check(
        "rpath-own",
        &[
            lib("leaf", "a", "leaf@a"),
            lib("top", ".", "top").needs("leaf").rpath("$ORIGIN/a"),
        ],
        &[],
        "result: top>leaf@a",
    );
}

// The auditwheel layout (scipy's `libgfortran` needing `libquadmath`): only the top
// object has the DT_RPATH; its dependency's dependency is found through it.
#[test]
fn rpath_of_the_loader_chain() {
    check(
        "rpath-chain",
        &[
            lib("leaf", "libs", "leaf@libs"),
            lib("mid", "libs", "mid").needs("leaf"),
            lib("top", ".", "top").needs("mid").rpath("$ORIGIN/libs"),
        ],
        &[],
        "result: top>mid>leaf@libs",
    );
}

// An object with a DT_RUNPATH in the middle of the chain has its DT_RPATH ignored
// (`elf/get-dynamic-info.h`), but the walk goes on to its loader.
#[test]
fn the_chain_walks_through_an_object_with_runpath() {
    check(
        "rpath-through-runpath",
        &[
            lib("leaf", "x", "leaf@x"),
            lib("low", "y", "low").needs("leaf"),
            lib("mid", "x", "mid").needs("low").runpath("$ORIGIN/../y"),
            lib("top", ".", "top").needs("mid").rpath("$ORIGIN/x"),
        ],
        &[],
        "result: top>mid>low>leaf@x",
    );
}

// `if (loader == NULL || loader->l_info[DT_RUNPATH] == NULL)`: a loading object with
// a DT_RUNPATH searches no DT_RPATH at all, not even its loaders'.
#[test]
fn runpath_of_the_loading_object_stops_the_chain() {
    check(
        "runpath-stops-chain",
        &[
            lib("leaf", "x", "leaf@x"),
            lib("mid", "x", "mid")
                .needs("leaf")
                .runpath("$ORIGIN/nowhere"),
            lib("top", ".", "top").needs("mid").rpath("$ORIGIN/x"),
        ],
        &[],
        "error",
    );
}

// DT_RUNPATH is searched for the object's own dependencies only.
#[test]
fn runpath_is_for_direct_dependencies_only() {
    check(
        "runpath-direct-only",
        &[
            lib("leaf", "x", "leaf@x"),
            lib("mid", "x", "mid").needs("leaf"),
            lib("top", ".", "top").needs("mid").runpath("$ORIGIN/x"),
        ],
        &[],
        "error",
    );
}

// DT_RPATH, then LD_LIBRARY_PATH, then DT_RUNPATH.
#[test]
fn rpath_then_ld_library_path_then_runpath() {
    let ld = |root: &Path| vec![("LD_LIBRARY_PATH", root.join("l").display().to_string())];
    let with_rpath = [
        lib("leaf", "a", "leaf@a"),
        lib("leaf", "l", "leaf@l"),
        lib("top", ".", "top").needs("leaf").rpath("$ORIGIN/a"),
    ];
    check_with(
        &host(),
        "order-rpath-ld",
        &with_rpath,
        ld,
        None,
        "result: top>leaf@a",
    );
    let with_runpath = [
        lib("leaf", "r", "leaf@r"),
        lib("leaf", "l", "leaf@l"),
        lib("top", ".", "top").needs("leaf").runpath("$ORIGIN/r"),
    ];
    check_with(
        &host(),
        "order-ld-runpath",
        &with_runpath,
        ld,
        None,
        "result: top>leaf@l",
    );
    check("order-runpath", &with_runpath, &[], "result: top>leaf@r");
}

// glibc reads LD_LIBRARY_PATH once, at start-up (`_dl_init_paths`): setting it later
// (Python's `os.environ[...] = ...`) changes no search; unsetting it neither.
#[test]
fn ld_library_path_is_read_at_start_up() {
    let libs = [
        lib("leaf", "l", "leaf@l"),
        lib("top", ".", "top").needs("leaf"),
    ];
    check_with(
        &host(),
        "ld-path-set-later",
        &libs,
        |root| vec![("SEARCH_SETENV", root.join("l").display().to_string())],
        None,
        "error",
    );
    check_with(
        &host(),
        "ld-path-changed-later",
        &libs,
        |root| {
            vec![
                ("LD_LIBRARY_PATH", root.join("l").display().to_string()),
                ("SEARCH_SETENV", "/nonexistent".to_string()),
            ]
        },
        None,
        "result: top>leaf@l",
    );
}

/// This machine's `$PLATFORM` as its `ld.so` expands it (`dl_platform`: the kernel's
/// `AT_PLATFORM`, or glibc's own name on Intel CPUs, `haswell` on most since 2013).
fn machine_platform() -> &'static str {
    let diag = std::process::Command::new("/lib64/ld-linux-x86-64.so.2")
        .arg("--list-diagnostics")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let name = diag
        .lines()
        .find_map(|l| l.strip_prefix("dl_platform=\""))
        .map(|v| v.trim_end_matches('"').to_string())
        .unwrap_or_else(|| "x86_64".into());
    Box::leak(format!("p-{name}").into_boxed_str())
}

// `$ORIGIN` and `${ORIGIN}`, `$PLATFORM` (glibc's `dl_platform`) and `$LIB` (Debian's
// `lib/x86_64-linux-gnu`) in DT_RPATH (`_dl_dst_substitute`).
#[test]
fn dynamic_string_tokens() {
    check(
        "dst-platform",
        &[
            lib("leaf", machine_platform(), "leaf@platform"),
            lib("top", ".", "top")
                .needs("leaf")
                .rpath("${ORIGIN}/p-$PLATFORM"),
        ],
        &[],
        "result: top>leaf@platform",
    );
    check(
        "dst-lib",
        &[
            lib("leaf", "lib/x86_64-linux-gnu", "leaf@lib"),
            lib("top", ".", "top").needs("leaf").rpath("$ORIGIN/$LIB"),
        ],
        &[],
        "result: top>leaf@lib",
    );
}

// An empty element of a path list is the current directory (`fillin_rpath`).
#[test]
fn an_empty_element_is_the_current_directory() {
    check_with(
        &host(),
        "empty-element",
        &[
            lib("leaf", "cwd", "leaf@cwd"),
            lib("top", ".", "top").needs("leaf"),
        ],
        |_| vec![("LD_LIBRARY_PATH", "/nonexistent:".to_string())],
        Some("cwd"),
        "result: top>leaf@cwd",
    );
}

// Every directory is tried with its `glibc-hwcaps/x86-64-vN` subdirectories first
// (levels the CPU supports), then the legacy ones (`tls`, the platform), then itself.
#[test]
fn hardware_capability_subdirectories_first() {
    check(
        "hwcaps",
        &[
            lib("leaf", "a", "leaf@a"),
            lib("leaf", "a/glibc-hwcaps/x86-64-v2", "leaf@v2"),
            lib("top", ".", "top").needs("leaf").rpath("$ORIGIN/a"),
        ],
        &[],
        "result: top>leaf@v2",
    );
    check(
        "legacy-subdirs",
        &[
            lib("leaf", "a", "leaf@a"),
            lib("leaf", "a/x86_64", "leaf@x86_64"),
            lib("leaf", "a/tls", "leaf@tls"),
            lib("top", ".", "top").needs("leaf").rpath("$ORIGIN/a"),
        ],
        &[],
        "result: top>leaf@tls",
    );
}

// A file of another ELF class is skipped and the search goes on (`open_verify`).
#[test]
fn a_file_of_another_class_is_skipped() {
    let libs = [
        lib("leaf", "a", "leaf@a"),
        lib("leaf", "b", "leaf@b"),
        lib("top", ".", "top")
            .needs("leaf")
            .rpath("$ORIGIN/a:$ORIGIN/b"),
    ];
    let host = host();
    let root = build_case("other-class", &libs);
    let first = root.join("a/libleaf.so");
    let mut data = std::fs::read(&first).unwrap();
    data[4] = 1; // ELFCLASS32
    std::fs::write(&first, data).unwrap();
    for mode in ["glibc", "ours"] {
        let got = search(
            &host,
            mode,
            &root.join("libtop.so"),
            "chain_top",
            &[],
            &root,
        );
        assert_eq!(got, "result: top>leaf@b", "{mode}");
    }
}

// `dlopen` by bare name from a library searches the caller's DT_RPATH for the name
// itself (CPython's `dlopen` of scipy's `_fblas` from libpython), but the new object
// has no loader (`l_loader` stays empty): its dependencies are searched along its own
// chain, not the caller's (`_fblas`'s DT_RPATH finds `libgfortran`, and `libgfortran`'s
// `libquadmath` through `_fblas`, its loader).
#[test]
fn dlopen_searches_the_callers_rpath_for_the_name_only() {
    check(
        "dlopen-chain",
        &[
            lib("leaf", "x", "leaf@x"),
            lib("mid", "x", "mid").needs("leaf"),
            lib("top", ".", "top").opens("mid").rpath("$ORIGIN/x"),
        ],
        &[],
        "result: top>(dlopen failed)",
    );
    check(
        "dlopen-own-chain",
        &[
            lib("leaf", "x/libs", "leaf@libs"),
            lib("mid", "x/libs", "mid").needs("leaf"),
            lib("ext", "x", "ext").needs("mid").rpath("$ORIGIN/libs"),
            lib("top", ".", "top").opens("ext").rpath("$ORIGIN/x"),
        ],
        &[],
        "result: top>ext>mid>leaf@libs",
    );
}

// The executable's DT_RPATH comes after the chain's (`NB: we do this for lookups in any
// namespace`), before LD_LIBRARY_PATH.
#[test]
fn the_executables_rpath_after_the_chain() {
    let dir = common::out_dir().join("search/exe-rpath-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let host = hosts::build_c_host(
        "glibc_order_host_rpath",
        "glibc_order_host.c",
        &[
            "-ldl",
            "-pthread",
            "-Wl,--disable-new-dtags",
            &format!("-Wl,-rpath,{}", dir.display()),
        ],
    );
    // The leaf the executable's RPATH finds lives in that directory.
    let leaf = build_case("exe-rpath-leaf", &[lib("leaf", ".", "leaf@exe")]);
    std::fs::copy(leaf.join("libleaf.so"), dir.join("libleaf.so")).unwrap();
    check_with(
        &host,
        "exe-rpath",
        &[
            // A copy to link with, in a folder nothing searches.
            lib("leaf", "link-only", "leaf@link-only"),
            lib("top", ".", "top").needs("leaf"),
        ],
        |_| Vec::new(),
        None,
        "result: top>leaf@exe",
    );
    check_with(
        &host,
        "exe-rpath-after-chain",
        &[
            lib("leaf", "x", "leaf@x"),
            lib("top", ".", "top").needs("leaf").rpath("$ORIGIN/x"),
        ],
        |_| Vec::new(),
        None,
        "result: top>leaf@x",
    );
}

/// Runs the host with `args` and returns its standard output (it must succeed).
fn run_host(args: &[&str], valgrind: bool) -> String {
    let mut cmd = if valgrind {
        let mut v = test_support::valgrind(&["--track-origins=yes"]);
        v.arg(host());
        v
    } else {
        Command::new(host())
    };
    cmd.args(args).env_remove("LD_LIBRARY_PATH");
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

// Thread exit in glibc's order (`start_thread`): the C++ `thread_local` destructor
// first, then the pthread key destructor in two rounds (it sets its value again in the
// first), each writing through the TLS address it stored and finding it still the
// thread's own; the blocks are freed only after that. Under valgrind, a write into a
// freed block would fail the run.
#[test]
fn thread_exit_runs_key_destructors_before_tls_is_freed() {
    let lib = common::build_so("exit_order", &["exit_order.cpp"], &["-pthread"]);
    let lib = lib.to_str().unwrap();
    let per_thread = "tl;key1+tl=;key2+tl=;";
    for mode in ["glibc", "ours"] {
        let text = run_host(&["exit", mode, lib, "4"], false);
        assert!(
            text.contains(&format!("log: {}\n", per_thread.repeat(4))),
            "{mode}: {text}"
        );
    }
    let text = run_host(&["exit", "ours", lib, "3"], true);
    assert!(
        text.contains(&format!("log: {}\n", per_thread.repeat(3))) && text.contains("done"),
        "{text}"
    );
}

// A static destructor that `dlclose`s handles while its library is unloaded (LLVM's
// `~Globals`, in llvmlite): each `dlclose` is answered by the namespace, 0, never
// forwarded to glibc with a handle glibc did not make. glibc has one teardown, process
// exit (the library defines `STB_GNU_UNIQUE` symbols, so `dlclose` never unloads it):
// there both answer alike. A namespace's end is ours alone: 100 of them in a row.
#[test]
fn a_static_destructor_may_dlclose_its_handles_during_teardown() {
    let lib = common::build_so("llvm_globals", &["llvm_globals.cpp"], &[]);
    let dep = common::build_so("counter", &["counter.c"], &[]);
    let (lib, dep) = (lib.to_str().unwrap(), dep.to_str().unwrap());
    let once = "report: dlclose(lib)=0\nreport: dlclose(process)=0\n";
    for mode in ["glibc", "ours"] {
        let text = run_host(&["teardown-exit", mode, lib, dep], false);
        assert!(text.ends_with(&format!("done\n{once}")), "{mode}: {text}");
    }
    let text = run_host(&["teardown", "ours", lib, dep, "100"], false);
    assert_eq!(text, format!("{}done\n", once.repeat(100)));
    let text = run_host(&["teardown", "ours", lib, dep, "5"], true);
    assert_eq!(text, format!("{}done\n", once.repeat(5)));
}

/// Builds `order_lib.c` as `lib<name>.so` into `dir`, needing `needs` (in that order).
fn order_lib(dir: &Path, name: &str, needs: &[&str], extra: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let out = dir.join(format!("lib{name}.so"));
    let mut cmd = common::compiler(false);
    cmd.args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(common::fixtures_dir().join("order_lib.c"))
        .arg(format!("-DNAME={name}"))
        .arg(format!("-Wl,-soname,lib{name}.so"))
        .arg(format!("-L{}", dir.display()))
        .arg("-Wl,--no-as-needed")
        .args(needs.iter().map(|n| format!("-l{n}")))
        .arg("-Wl,--disable-new-dtags")
        .arg("-Wl,-rpath,$ORIGIN")
        .args(extra);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// The host's `order` run in both modes: the two outputs must be equal; returns it.
fn order_run(args: &[&Path], how: &str) -> String {
    let mut outs = Vec::new();
    for mode in ["glibc", "ours"] {
        let mut a: Vec<&str> = vec!["order", mode, how];
        a.extend(args.iter().map(|p| p.to_str().unwrap()));
        outs.push(run_host(&a, false));
    }
    assert_eq!(outs[0], outs[1], "glibc, then ours");
    outs.remove(0)
}

// Initialisers in glibc's order (`_dl_sort_maps` over the breadth-first load order,
// run from the end): a library needing `b` then `e`, `b` needing `d`: `d`, `e`, `b`,
// then the library; fini functions at `dlclose` the other way round, each library's
// `atexit` handlers run by its own `__cxa_finalize` after its destructors.
#[test]
fn init_and_fini_order_of_one_load() {
    let dir = common::out_dir().join("order/one");
    let _ = std::fs::remove_dir_all(&dir);
    order_lib(&dir, "d", &[], &[]);
    order_lib(&dir, "b", &["d"], &[]);
    order_lib(&dir, "e", &[], &[]);
    let a = order_lib(&dir, "a", &["b", "e"], &[]);
    let text = order_run(&[&a], "unload");
    assert_eq!(
        text,
        "init d\ninit e\ninit b\ninit a\nloaded\n\
         fini a\natexit a\nfini b\natexit b\nfini e\natexit e\nfini d\natexit d\nunloaded\n"
    );
}

// At exit, the `atexit` handlers first, newest first (`__run_exit_handlers`, before
// `_dl_fini`), then the fini functions: two unrelated loads are finalised in the order
// they were loaded (glibc's sort keeps load order where no dependency says otherwise),
// each object before its dependencies.
#[test]
fn fini_order_at_exit() {
    let dir = common::out_dir().join("order/exit");
    let _ = std::fs::remove_dir_all(&dir);
    order_lib(&dir, "d", &[], &[]);
    let b = order_lib(&dir, "b", &["d"], &[]);
    let e = order_lib(&dir, "e", &[], &[]);
    let text = order_run(&[&e, &b], "exit");
    assert_eq!(
        text,
        "init e\nloaded\ninit d\ninit b\nloaded\n\
         atexit b\natexit d\natexit e\nfini e\nfini b\nfini d\n"
    );
}

// A load that fails (a dependency missing) runs no initialiser at all and leaves
// nothing loaded: glibc maps and relocates the whole closure before any initialiser.
#[test]
fn a_failed_load_runs_no_initialiser() {
    let dir = common::out_dir().join("order/failed");
    let _ = std::fs::remove_dir_all(&dir);
    order_lib(&dir, "gone", &[], &[]);
    order_lib(&dir, "fine", &[], &[]);
    let top = order_lib(&dir, "top", &["fine", "gone"], &[]);
    std::fs::remove_file(dir.join("libgone.so")).unwrap();
    let text = order_run(&[&top], "unload");
    assert_eq!(text, "load failed\nunloaded\n");
}

// A constructor that `dlopen`s its own library and `dlclose`s it: the outer open is
// already counted, so nothing is unloaded or finalised during the load; the fini
// function runs once, at the last close.
#[test]
fn a_constructor_may_open_and_close_its_own_library() {
    let dir = common::out_dir().join("order/self");
    let _ = std::fs::remove_dir_all(&dir);
    let lib = order_lib(&dir, "selfish", &[], &["-DSELF_OPEN", "-ldl"]);
    let text = order_run(&[&lib], "unload");
    assert_eq!(
        text,
        "init selfish\nself dlopen ok\nself dlclose 0\nloaded\nfini selfish\natexit selfish\nunloaded\n"
    );
}
