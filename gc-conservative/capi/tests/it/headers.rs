//! `gc-conservative/include/gc_conservative.h` is generated from `src/lib.rs` by cbindgen
//! and must match (`UPDATE_HEADERS=1 cargo test -p gc-conservative-capi --test it headers`
//! rewrites it);
//! the seed's three conservative-scanning functions, declared by hand in gc-core's
//! `julia_gcext_compat.h`, must agree with their Rust definitions here (compiled together
//! in one C translation unit, where a difference is a "conflicting types" error).

use std::path::PathBuf;

/// This crate's folder (`gc-conservative/capi`), which cbindgen parses.
fn capi_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// gc-conservative's folder, the header's.
fn crate_dir() -> PathBuf {
    capi_dir().parent().unwrap().to_path_buf()
}

fn functions() -> Vec<String> {
    let src = std::fs::read_to_string(capi_dir().join("src/lib.rs")).unwrap();
    src.lines()
        .filter_map(|l| {
            l.trim_start()
                .strip_prefix("pub ")
                .and_then(|r| r.split("extern \"C\" fn ").nth(1))
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
        // The workspace's status block (RT_OK, RT_ERR_*), verbatim after the includes.
        after_includes: Some(ffi_support::c_block()),
        ..Default::default()
    };
    config.export.exclude = exclude;
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(capi_dir())
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn gc_conservative_h_is_generated_from_the_rust_side() {
    let jl: Vec<String> = functions()
        .into_iter()
        .filter(|f| f.starts_with("jl_"))
        .collect();
    let body = generate(jl, vec!["gc_core.h".into()]);
    let fresh = format!(
        "/*\n * gc_conservative.h: conservative scanning for gc-core heaps. Generated from\n * capi/src/lib.rs by cbindgen; do not edit (UPDATE_HEADERS=1 cargo test -p\n * gc-conservative-capi --test it headers). Link with libgc_conservative, which also\n * carries gc_core.h's API.\n */\n#ifndef GC_CONSERVATIVE_H\n#define GC_CONSERVATIVE_H\n\n{}\n#endif /* GC_CONSERVATIVE_H */\n",
        body.trim_end()
    );
    let path = crate_dir().join("include/gc_conservative.h");
    if std::env::var_os("UPDATE_HEADERS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    if let Err(e) = test_support::check_header_block(&path, &ffi_support::c_block()) {
        panic!("{e}");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == fresh, "include/gc_conservative.h is out of date; run UPDATE_HEADERS=1 cargo test -p gc-conservative-capi --test it headers");
}

#[test]
fn compat_declarations_match_the_rust_jl_functions() {
    let gc: Vec<String> = functions()
        .into_iter()
        .filter(|f| !f.starts_with("jl_"))
        .collect();
    let generated = generate(gc, vec![]);
    let dir = std::env::temp_dir().join(format!("gc-conservative-headers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("from_rust.h"), &generated).unwrap();
    let include = crate_dir().parent().unwrap().join("gc-core/include");
    let checked = test_support::c_syntax_check(
        "#include \"julia_gcext_compat.h\"\n#include \"from_rust.h\"\nint main(void) { return 0; }\n",
        &[&include, &dir],
        &[],
    );
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(err) = checked {
        panic!("julia_gcext_compat.h disagrees with gc-conservative's jl_* functions:\n{err}\n{generated}");
    }
    for f in [
        "jl_gc_enable_conservative_scanning",
        "jl_gc_internal_obj_base_ptr",
        "jl_gc_is_internal_obj_alloc",
        "jl_gc_enable_conservative_gc_support",
        "jl_gc_conservative_gc_support_enabled",
    ] {
        assert!(generated.contains(f), "{f} is not defined on the Rust side");
    }
}
