//! Every CPython with a shared libpython that pyenv has (3.10, 3.11, 3.12, 3.13), run by
//! a C host that links only `libelf_loader` and libc: no `libm`, so the symbols that
//! CPython 3.12+'s `_decimal` takes from libpython's dependencies (`ceil`) must come
//! from the namespace's global scope as glibc builds it, not from the host. Each version
//! is loaded twice into two namespaces, initialised, imports eleven extension modules,
//! runs Python threads and is called from C threads; `id(None)` differs between all.

use crate::{common, hosts};

use std::process::Command;

#[test]
fn c_host_without_libm_runs_every_cpython_twice() {
    let exe = hosts::build_c_host("python_host", "python_host.c", &["-pthread"]);
    // The host itself must not bring libm (nor anything else) into the global scope.
    let needed = common::needed(&exe);
    assert_eq!(
        needed,
        ["libelf_loader.so", "libc.so.6"],
        "the C host links only libelf_loader and libc"
    );
    let cdylib = hosts::cdylib_dir().join("libelf_loader.so");
    let lib_needed = common::needed(&cdylib);
    assert!(
        !lib_needed.iter().any(|n| n.starts_with("libm.")),
        "libelf_loader.so itself links libm: {lib_needed:?}"
    );

    let mut found = Vec::new();
    for (minor, lib) in common::pyenv_libpythons() {
        match lib {
            Ok(p) => found.push((minor, p)),
            Err(why) => println!("skipping CPython {minor}: {why}"),
        }
    }
    assert!(
        !found.is_empty(),
        "no CPython with a shared libpython found under {}",
        common::pyenv_root().display()
    );
    let out = Command::new(&exe)
        .args(found.iter().map(|(_, p)| p))
        .output()
        .expect("run the C host");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    println!("{text}");
    assert!(out.status.success(), "{text}");
    for (minor, _) in &found {
        for copy in ["a", "b"] {
            let line =
                format!("libpython{minor}.so.1.0#{copy}: python {minor}, modules and threads ok");
            assert!(text.contains(&line), "missing `{line}` in:\n{text}");
        }
    }
    assert!(
        text.contains(&format!(
            "{} copies called from {} C threads at once",
            2 * found.len(),
            4 * found.len()
        )),
        "{text}"
    );
    assert!(text.contains("all checks passed"), "{text}");
}
