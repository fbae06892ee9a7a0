//! `include/gc_runtime.h` is generated from `src/capi.rs` by cbindgen and must match
//! (`UPDATE_HEADERS=1 cargo test -p gc-runtime --test it headers` rewrites it), as
//! gc-core's and gc-conservative's headers are: the API is defined in Rust, so the header
//! is derived from it rather than written twice. The runtime calls gil's C ABI through
//! declarations of its own (`src/gil_sys.rs`); cbindgen declares them in C next to
//! `gil.h`, where any difference is a "conflicting types" error.

use std::path::{Path, PathBuf};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn workspace_dir() -> PathBuf {
    crate_dir()
        .parent()
        .and_then(Path::parent)
        .expect("the crate lives two levels below the workspace root")
        .to_path_buf()
}

/// The functions `file` (under `src/`) defines or declares.
fn functions(file: &str) -> Vec<String> {
    let src = std::fs::read_to_string(crate_dir().join("src").join(file)).unwrap();
    src.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.split("extern \"C\" fn ")
                .nth(1)
                .or_else(|| l.strip_prefix("pub fn "))
        })
        .map(|r| r.split('(').next().unwrap().to_string())
        .collect()
}

fn generate(exclude: Vec<String>, includes: Vec<String>) -> String {
    let mut config = cbindgen::Config {
        language: cbindgen::Language::C,
        style: cbindgen::Style::Both,
        usize_is_size_t: true,
        includes,
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

#[test]
fn gc_runtime_h_is_generated_from_the_rust_side() {
    let mut exclude = functions("gil_sys.rs");
    assert!(exclude.contains(&"gil_acquire".to_string()), "{exclude:?}");
    exclude.extend(
        [
            "gil_t",
            "gil_hook_fn",
            "GIL_OK",
            "GIL_ERR_SHUT_DOWN",
            "GIL_ERR_STOPPED",
        ]
        .map(String::from),
    );
    let body = generate(exclude, vec!["gc_core.h".into(), "gil.h".into()]);
    let fresh = format!(
        "/*\n * gc_runtime.h: a gc-core heap with conservative scanning of its threads and a GIL whose\n * blocking hooks enter and leave GC-safe regions. Generated from src/capi.rs by cbindgen;\n * do not edit (UPDATE_HEADERS=1 cargo test -p gc-runtime --test it headers). Link with\n * libgc_runtime, which also carries gc_core.h's, gc_conservative.h's and gil.h's API.\n */\n#ifndef GC_RUNTIME_H\n#define GC_RUNTIME_H\n\n{}\n#endif /* GC_RUNTIME_H */\n",
        body.trim_end()
    );
    let path = crate_dir().join("include/gc_runtime.h");
    if std::env::var_os("UPDATE_HEADERS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/gc_runtime.h is out of date; run UPDATE_HEADERS=1 cargo test -p gc-runtime --test it headers"
    );
}

#[test]
fn the_runtimes_gil_declarations_match_gil_h() {
    let mut exclude = functions("capi.rs");
    assert!(
        exclude.contains(&"gc_runtime_enter".to_string()),
        "{exclude:?}"
    );
    exclude
        .extend(["gc_runtime_t", "gc_runtime_config_t", "gc_runtime_filter_t"].map(String::from));
    let generated = generate(exclude, vec![]);
    for f in functions("gil_sys.rs") {
        assert!(
            generated.contains(&format!("{f}(")),
            "{f} not declared:\n{generated}"
        );
    }
    let dir = std::env::temp_dir().join(format!("gc-runtime-headers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("from_rust.h"), &generated).unwrap();
    let checked = test_support::c_syntax_check(
        "#include \"gil.h\"\n#include \"from_rust.h\"\nint main(void) { return 0; }\n",
        &[&workspace_dir().join("gil/include"), &dir],
        &[],
    );
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(err) = checked {
        panic!(
            "gil.h disagrees with gc-runtime's declarations (src/gil_sys.rs):\n{err}\n{generated}"
        );
    }
}
