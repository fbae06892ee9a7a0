//! The C headers cannot drift from the Rust side.
//!
//! - `include/gc_core.h` is generated from this crate's `src/` by cbindgen; this test
//!   regenerates it and fails on any difference (`UPDATE_HEADERS=1 cargo test -p gc-core
//!   --test it headers` rewrites it).
//! - `include/julia_gcext_compat.h` is written by hand with the seed's names. This test
//!   has cbindgen declare the Rust `jl_*` functions and compiles both declarations in
//!   one C translation unit: a parameter or return type that differs is a "conflicting
//!   types" error. It also checks that both sides name the same functions.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use test_support::c_syntax_check;

/// gc-core-capi's directory (`gc-core/capi`), whose sources cbindgen reads.
fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// gc-core's `include/`, where both headers live.
fn include_dir() -> PathBuf {
    crate_dir().join("../include")
}

/// The C ABI's sources: this crate's `src/**/*.rs` (sorted, so the text is stable).
fn capi_source() -> String {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&crate_dir().join("src"), &mut files);
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect()
}

/// Names of the `extern "C"` functions defined in the C ABI's sources.
fn rust_functions() -> BTreeSet<String> {
    let src = capi_source();
    let mut names = BTreeSet::new();
    for line in src.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.split("extern \"C\" fn ").nth(1) {
            if t.starts_with("pub ") {
                names.insert(rest.split('(').next().unwrap().to_string());
            }
        }
    }
    // Functions defined by the set_cb! macro (cargo fmt may break the call over lines).
    for call in src.split("set_cb!(").skip(1) {
        let name: String = call
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.starts_with("jl_") {
            names.insert(name);
        }
    }
    names
}

/// Names of the global variables the C ABI exports (`jl_any_type`, ...): declared by
/// hand in the compat header and checked by the C programs that link them.
fn rust_statics() -> Vec<String> {
    capi_source()
        .lines()
        .filter_map(|l| l.strip_prefix("pub static "))
        .map(|r| r.split(':').next().unwrap().trim().to_string())
        .collect()
}

/// Names of the types defined in the C ABI's sources (structs and aliases).
fn rust_types() -> Vec<String> {
    let src = capi_source();
    src.lines()
        .filter_map(|l| {
            l.strip_prefix("pub struct ")
                .or_else(|| l.strip_prefix("pub type "))
        })
        .map(|r| {
            r.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

fn generate(mut exclude: Vec<String>, after_includes: Option<String>) -> String {
    let mut config = cbindgen::Config {
        language: cbindgen::Language::C,
        style: cbindgen::Style::Both,
        usize_is_size_t: true,
        after_includes,
        ..Default::default()
    };
    exclude.extend(rust_statics());
    // libc functions the C ABI declares for itself.
    exclude.push("siglongjmp".into());
    config.export.exclude = exclude;
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir())
        .with_config(config)
        .with_parse_expand(&[] as &[&str])
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut out);
    String::from_utf8(out).unwrap()
}

fn native_header() -> String {
    let jl: Vec<String> = rust_functions()
        .into_iter()
        .filter(|n| n.starts_with("jl_"))
        .collect();
    let jl_types: Vec<String> = rust_types()
        .into_iter()
        .filter(|n| n.starts_with("jl_"))
        .collect();
    let mut exclude = jl;
    exclude.extend(jl_types);
    exclude.push("jl_sym_t".into());
    // The workspace's status block (RT_OK, RT_ERR_*), verbatim after the includes.
    let body = generate(exclude, Some(ffi_support::c_block()));
    format!(
        "/*\n * gc_core.h: gc-core's native C API (explicit heaps). Generated from gc-core/capi/src by\n * cbindgen; do not edit (UPDATE_HEADERS=1 cargo test -p gc-core-capi --test it headers).\n * The seed's names are in julia_gcext_compat.h.\n */\n#ifndef GC_CORE_H\n#define GC_CORE_H\n\n{}\n#endif /* GC_CORE_H */\n",
        body.trim_end()
    )
}

#[test]
fn gc_core_h_is_generated_from_the_rust_side() {
    let path = include_dir().join("gc_core.h");
    let fresh = native_header();
    if std::env::var_os("UPDATE_HEADERS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/gc_core.h is out of date with gc-core/capi/src; run UPDATE_HEADERS=1 cargo test -p gc-core-capi --test it headers"
    );
}

/// Function names declared in a header (not typedefs).
fn header_functions(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut decl = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.starts_with("/*") || t.starts_with('*') || t.is_empty() {
            continue;
        }
        decl.push_str(t);
        decl.push(' ');
        if t.ends_with(';') || t.ends_with('{') || t.ends_with('}') {
            if !decl.starts_with("typedef") && decl.contains('(') {
                let before = decl.split('(').next().unwrap();
                let name = before
                    .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap();
                if !name.is_empty() {
                    names.insert(name.to_string());
                }
            }
            decl.clear();
        }
    }
    names
}

#[test]
fn compat_header_matches_the_rust_jl_functions() {
    let header = std::fs::read_to_string(include_dir().join("julia_gcext_compat.h")).unwrap();
    let declared: BTreeSet<String> = header_functions(&header)
        .into_iter()
        .filter(|n| n.starts_with("jl_"))
        .collect();
    let rust: BTreeSet<String> = rust_functions()
        .into_iter()
        .filter(|n| n.starts_with("jl_"))
        .collect();
    // The conservative-scanning functions live in gc-conservative.
    let conservative: BTreeSet<String> = [
        "jl_gc_enable_conservative_scanning",
        "jl_gc_internal_obj_base_ptr",
        "jl_gc_is_internal_obj_alloc",
        "jl_gc_enable_conservative_gc_support",
        "jl_gc_conservative_gc_support_enabled",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let missing_in_header: Vec<_> = rust.difference(&declared).collect();
    assert!(
        missing_in_header.is_empty(),
        "exported but not declared in the compat header: {missing_in_header:?}"
    );
    let missing_in_rust: Vec<_> = declared
        .difference(&rust)
        .filter(|n| !conservative.contains(*n))
        .collect();
    assert!(
        missing_in_rust.is_empty(),
        "declared in the compat header but not exported: {missing_in_rust:?}"
    );

    // cbindgen's declarations of the Rust jl_* functions, types excluded so that the
    // compat header's own typedefs are the ones used.
    let mut exclude: Vec<String> = rust_functions()
        .into_iter()
        .filter(|n| !n.starts_with("jl_"))
        .collect();
    exclude.extend(rust_types());
    exclude.extend(
        [
            "jl_sym_t",
            "GC_CB_PRE_GC",
            "GC_CB_POST_GC",
            "GC_CB_ROOT_SCANNER",
            "GC_CB_TASK_SCANNER",
        ]
        .map(String::from),
    );
    exclude.extend(
        [
            "GC_CB_NOTIFY_EXTERNAL_ALLOC",
            "GC_CB_NOTIFY_EXTERNAL_FREE",
            "GC_CB_WEAK_PROCESSING",
            "GC_COLLECT_AUTO",
            "GC_COLLECT_FULL",
            "GC_COLLECT_PARTIAL",
        ]
        .map(String::from),
    );
    let generated = generate(exclude, None);
    let dir = std::env::temp_dir().join(format!("gc-core-headers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("from_rust.h"), &generated).unwrap();
    // The inline fast paths are macros over the same names: the declarations are
    // compared in the checked build, which has none.
    let checked = c_syntax_check(
        "#include \"julia_gcext_compat.h\"\n#include \"from_rust.h\"\nint main(void) { return 0; }\n",
        &[&include_dir(), &dir],
        &["-DGC_CORE_CHECKED"],
    );
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(err) = checked {
        panic!("julia_gcext_compat.h disagrees with the Rust jl_* functions:\n{err}\n--- cbindgen's view ---\n{generated}");
    }
}

/// Both headers carry the workspace's status block verbatim (gc_core.h through cbindgen's
/// `after_includes`, the hand-written compat header between its markers; `FFI_BLESS=1`
/// rewrites the latter), and `gc_last_status` returns its values.
#[test]
fn headers_carry_the_shared_status_block() {
    for h in ["gc_core.h", "julia_gcext_compat.h"] {
        let path = include_dir().join(h);
        if let Err(e) = test_support::check_header_block(&path, &ffi_support::c_block()) {
            panic!("{e}");
        }
    }
    let src = "#include \"gc_core.h\"\n#include \"julia_gcext_compat.h\"\n\
               _Static_assert(RT_ERR_ARG == -1, \"arg\");\n\
               int main(void) { rt_status s = gc_last_status(); return s + jl_gc_last_status(); }\n";
    if let Err(err) = c_syntax_check(src, &[&include_dir()], &[]) {
        panic!("{err}");
    }
}

#[test]
fn header_function_parser_sees_declarations_only() {
    let text =
        "typedef void (*cb_t)(int);\nint f(int a,\n      int b);\nvoid *g(void);\n/* h(x) */\n";
    let names = header_functions(text);
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        vec!["f".to_string(), "g".to_string()]
    );
    assert!(Path::new(&crate_dir()).join("src/lib.rs").exists());
}

/// The weak-reference structs C code reads `value` from have the layout of the Rust
/// objects (one word, the referent), in both headers, which also compile together.
#[test]
fn weak_reference_structs_have_the_object_layout() {
    let src = format!(
        "#include <stddef.h>\n#include \"gc_core.h\"\n#include \"julia_gcext_compat.h\"\n\
             _Static_assert(offsetof(jl_weakref_t, value) == 0, \"jl value offset\");\n\
             _Static_assert(sizeof(jl_weakref_t) == {size}, \"jl size\");\n\
             _Static_assert(offsetof(gc_weakref_t, value) == 0, \"gc value offset\");\n\
             _Static_assert(sizeof(gc_weakref_t) == {size}, \"gc size\");\n\
             _Static_assert(GC_CB_WEAK_PROCESSING == {hook}, \"hook kind\");\n\
             int main(void) {{ return 0; }}\n",
        size = gc_core::WEAK_OBJECT_SIZE,
        // gc_core.h is regenerated from the Rust constant and compared (header drift
        // test above): this pins the value the compat header's users compile against.
        hook = 6,
    );
    if let Err(err) = c_syntax_check(&src, &[&include_dir()], &[]) {
        panic!("{err}");
    }
}

/// The layouts the compat header's inline fast paths read are the Rust ones, and the
/// header compiles in both builds (inline and checked), warning-free.
#[test]
fn fast_path_layouts_match_the_rust_side() {
    use gc_core::ffi::{MarkFast, TlsHead};
    use std::mem::offset_of;
    let checks = [
        ("gc_tls_head_t", "regs", offset_of!(TlsHead, regs)),
        ("gc_tls_head_t", "magic", offset_of!(TlsHead, magic)),
        ("gc_tls_head_t", "thread", offset_of!(TlsHead, thread)),
        ("gc_tls_head_t", "marker", offset_of!(TlsHead, marker)),
        ("gc_tls_head_t", "checked", offset_of!(TlsHead, checked)),
        ("gc_tls_head_t", "alloc", offset_of!(TlsHead, alloc)),
        ("gc_mark_fast_t", "slow", offset_of!(MarkFast, slow)),
        ("gc_mark_fast_t", "top", offset_of!(MarkFast, top)),
        ("gc_mark_fast_t", "limit", offset_of!(MarkFast, limit)),
        ("gc_mark_fast_t", "old_mask", offset_of!(MarkFast, old_mask)),
        ("gc_mark_fast_t", "old_want", offset_of!(MarkFast, old_want)),
        (
            "gc_mark_fast_t",
            "young_marked",
            offset_of!(MarkFast, young_marked),
        ),
        ("gc_mark_fast_t", "marked", offset_of!(MarkFast, marked)),
        ("gc_mark_fast_t", "young", offset_of!(MarkFast, young)),
    ];
    let mut src = String::from(
        "#include <stddef.h>\n#include \"julia_gcext_compat.h\"\n\
         static uintptr_t mark(jl_ptls_t p, jl_value_t *o) { return jl_gc_mark_queue_obj(p, o); }\n\
         int main(void) { jl_ptls_t p = jl_get_ptls_states(); jl_gc_wb(p, p); jl_gc_wb_back(p);\n\
         (void)jl_typeof((jl_value_t *)p); (void)jl_gc_alloc_typed(p, 8, p);\n\
         return (int)mark(p, NULL); }\n",
    );
    let alloc_layout = gc_core::ffi::alloc_fast_layout();
    for (ty, field, off) in checks.into_iter().chain(alloc_layout) {
        if field == "sizeof" {
            src.push_str(&format!(
                "_Static_assert(sizeof({ty}) == {off}, \"sizeof {ty}\");\n"
            ));
        } else {
            src.push_str(&format!(
                "_Static_assert(offsetof({ty}, {field}) == {off}, \"{ty}.{field}\");\n"
            ));
        }
    }
    for (name, value) in gc_core::ffi::alloc_fast_constants() {
        src.push_str(&format!("_Static_assert({name} == {value}, \"{name}\");\n"));
    }
    src.push_str(&format!(
        "_Static_assert(GC_TLS_MUTATOR_MAGIC == {}ull, \"mutator magic\");\n\
         _Static_assert(GC_TLS_HELPER_MAGIC == {}ull, \"helper magic\");\n",
        gc_core::ffi::MUTATOR_MAGIC,
        gc_core::ffi::HELPER_MAGIC
    ));
    {
        use gc_core::ffi::{HDR_AGE, HDR_FREE, HDR_MARK, HDR_OLD, HDR_REMEMBERED, HDR_TAG_BITS};
        for (name, value) in [
            ("GC_HDR_MARK", HDR_MARK),
            ("GC_HDR_OLD", HDR_OLD),
            ("GC_HDR_REMEMBERED", HDR_REMEMBERED),
            ("GC_HDR_AGE", HDR_AGE),
            ("GC_HDR_FREE", HDR_FREE),
            ("GC_HDR_TAG_BITS", HDR_TAG_BITS),
        ] {
            src.push_str(&format!(
                "_Static_assert({name} == {value}, \"header bit {name}\");\n"
            ));
        }
    }
    for extra in [
        &["-std=gnu11", "-Wextra"][..],
        &["-std=gnu11", "-Wextra", "-DGC_CORE_CHECKED"],
    ] {
        if let Err(err) = c_syntax_check(&src, &[&include_dir()], extra) {
            panic!("fast-path layouts ({extra:?}):\n{err}\n{src}");
        }
    }
}
