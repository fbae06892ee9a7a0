//! `include/gc_runtime.h` is generated from `src/capi.rs` by cbindgen and must match
//! (`UPDATE_HEADERS=1 cargo test -p gc-runtime --test it headers` rewrites it), as
//! gc-core's and gc-conservative's headers are: the API is defined in Rust, so the header
//! is derived from it rather than written twice. The runtime calls gil's C ABI as gil-capi's
//! Rust items (`src/gil_sys.rs`), so no declaration of it is written here.

use std::path::PathBuf;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generate(exclude: Vec<String>, includes: Vec<String>, after: &str) -> String {
    let mut config = cbindgen::Config {
        language: cbindgen::Language::C,
        style: cbindgen::Style::Both,
        usize_is_size_t: true,
        includes,
        // The workspace's status block (RT_OK, RT_ERR_*), verbatim after the includes.
        after_includes: Some(format!("{}{after}", ffi_support::c_block())),
        ..Default::default()
    };
    config.export.exclude = exclude;
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir())
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut out);
    String::from_utf8(out).unwrap()
}

/// The runtime's codes, `pub const GC_RUNTIME_X: i32 = Status::Y.code();` in
/// `src/status.rs`, as (name, shared status): cbindgen cannot evaluate `code()`, so the
/// header declares each as an alias (`#define GC_RUNTIME_X RT_ERR_Y`).
fn status_aliases() -> Vec<(String, ffi_support::Status)> {
    let src = std::fs::read_to_string(crate_dir().join("src/status.rs")).unwrap();
    let aliases: Vec<(String, ffi_support::Status)> = src
        .lines()
        .filter_map(|l| l.strip_prefix("pub const "))
        .map(|rest| {
            let name = rest.split(':').next().unwrap().trim().to_string();
            let variant = rest
                .split("Status::")
                .nth(1)
                .and_then(|r| r.split('.').next())
                .unwrap_or_else(|| panic!("{name} is not `Status::X.code()`"));
            let status = ffi_support::Status::ALL
                .into_iter()
                .find(|s| format!("{s:?}") == variant)
                .unwrap_or_else(|| panic!("{name}: no status {variant}"));
            (name, status)
        })
        .collect();
    assert!(aliases.len() >= 10, "{aliases:?}");
    aliases
}

#[test]
fn gc_runtime_h_is_generated_from_the_rust_side() {
    // gil.h declares gil's items (src/gil_sys.rs re-exports gil-capi's).
    let exclude: Vec<String> = [
        "gil_t",
        "gil_hook_fn",
        "GIL_OK",
        "GIL_ERR_SHUT_DOWN",
        "GIL_ERR_STOPPED",
    ]
    .map(String::from)
    .to_vec();
    let mut exclude = exclude;
    let aliases = status_aliases();
    exclude.extend(aliases.iter().map(|(name, _)| name.clone()));
    let mut defines =
        String::from("\n/* gc-runtime's names for the shared codes (src/status.rs). */\n");
    for (name, status) in &aliases {
        defines.push_str(&format!("#define {name} {}\n", status.c_name()));
    }
    let body = generate(exclude, vec!["gc_core.h".into(), "gil.h".into()], &defines);
    let fresh = format!(
        "/*\n * gc_runtime.h: a gc-core heap with conservative scanning of its threads and a GIL whose\n * blocking hooks enter and leave GC-safe regions. Generated from src/capi.rs by cbindgen;\n * do not edit (UPDATE_HEADERS=1 cargo test -p gc-runtime --test it headers). Link with\n * libgc_runtime, which also carries gc_core.h's, gc_conservative.h's and gil.h's API.\n */\n#ifndef GC_RUNTIME_H\n#define GC_RUNTIME_H\n\n{}\n#endif /* GC_RUNTIME_H */\n",
        body.trim_end()
    );
    let path = crate_dir().join("include/gc_runtime.h");
    if std::env::var_os("UPDATE_HEADERS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    if let Err(e) = test_support::check_header_block(&path, &ffi_support::c_block()) {
        panic!("{e}");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/gc_runtime.h is out of date; run UPDATE_HEADERS=1 cargo test -p gc-runtime --test it headers"
    );
}
