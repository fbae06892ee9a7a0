//! Building C (and C++) host programs against `include/elf_loader.h`, linked with
//! `libelf_loader.so` (the `artifact/` crate's cdylib, built for the tests).

use crate::common;
use std::path::{Path, PathBuf};

/// The folder holding `libelf_loader.so`, built by cargo from `artifact/` in a target
/// directory of the tests' own (`test_support::cdylib_dir`).
pub fn cdylib_dir() -> PathBuf {
    let dir = test_support::cdylib_dir(
        concat!(env!("CARGO_MANIFEST_DIR"), "/artifact"),
        env!("CARGO_TARGET_TMPDIR"),
    );
    assert!(
        dir.join("libelf_loader.so").is_file(),
        "libelf_loader.so not built in {}",
        dir.display()
    );
    dir
}

/// Builds a C (or C++) program from `tests/c/<source>` against `include/elf_loader.h`,
/// linked with the cdylib (found through DT_RPATH) and nothing else but the language's
/// runtime (plus `extra` arguments).
pub fn build_c_host(name: &str, source: &str, extra: &[&str]) -> PathBuf {
    let libdir = cdylib_dir();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut args = vec![
        format!("-I{}", manifest.join("../include").display()),
        format!("-L{}", libdir.display()),
        "-lelf_loader".into(),
        format!("-Wl,-rpath,{}", libdir.display()),
        // DT_RPATH, not DT_RUNPATH: it is searched before LD_LIBRARY_PATH, which cargo
        // points at target/debug, where an older `libelf_loader.so` may lie.
        "-Wl,--disable-new-dtags".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    common::build_exe(name, &[manifest.join("tests/c").join(source)], &args)
}
