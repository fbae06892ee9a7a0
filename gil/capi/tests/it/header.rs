//! `gil/include/gil.h` must match `src/lib.rs`: the same functions with the same
//! parameter names and types, the same structs with the same fields, the same
//! function-pointer typedefs and the same constants (the same shared status under each
//! name, and the values compiled). Each side is parsed and the Rust types are mapped to
//! their C spelling; any drift fails with the item that differs. The checks every C layer
//! shares (test-support: the status block of ffi-support verbatim, cbindgen's
//! declarations compiled with the header's, the function lists) run here too.

use ffi_support::Status;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use test_support::{
    check_constants, check_header_block, header_functions, rust_c_functions, DeclarationCheck,
};

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../include")
}

fn read(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Collapses whitespace and puts single spaces around `*`.
fn norm(s: &str) -> String {
    let s = s.replace('*', " * ");
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    s.replace("* *", "**")
}

/// The C spelling of a Rust FFI type.
fn rust_to_c(t: &str) -> String {
    let t = t.trim();
    if let Some(inner) = t.strip_prefix("Option<").and_then(|r| r.strip_suffix('>')) {
        return rust_to_c(inner);
    }
    if let Some(rest) = t.strip_prefix("*mut ") {
        return norm(&format!("{} *", rust_to_c(rest)));
    }
    if let Some(rest) = t.strip_prefix("*const ") {
        let inner = rust_to_c(rest);
        return if inner.ends_with('*') {
            norm(&format!("{inner} const *"))
        } else {
            norm(&format!("const {inner} *"))
        };
    }
    match t {
        "i32" => "int32_t".into(),
        "u64" => "uint64_t".into(),
        "u32" => "uint32_t".into(),
        "u8" => "uint8_t".into(),
        "()" | "" => "void".into(),
        "c_char" => "char".into(),
        "c_void" => "void".into(),
        other => other.into(),
    }
}

/// Splits on commas that are not inside brackets.
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' | '<' => depth += 1,
            ')' | '>' if depth > 0 => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// A signature: return type and (name, type) parameters, in C spelling.
type Sig = (String, Vec<(String, String)>);

fn rust_params(params: &str) -> Vec<(String, String)> {
    split_top(params)
        .into_iter()
        .map(|p| {
            let (name, ty) = p.split_once(':').expect("param name: type");
            (name.trim().to_string(), rust_to_c(ty))
        })
        .collect()
}

fn c_params(params: &str) -> Vec<(String, String)> {
    let params = params.trim();
    if params == "void" || params.is_empty() {
        return Vec::new();
    }
    split_top(params)
        .into_iter()
        .map(|p| {
            let p = norm(&p);
            let cut = p
                .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            (p[cut..].to_string(), norm(&p[..cut]))
        })
        .collect()
}

/// Finds the matching `)` for the `(` at `open`.
fn close_paren(s: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return open + i;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses after offset {open}");
}

fn rust_functions(src: &str) -> BTreeMap<String, Sig> {
    let mut out = BTreeMap::new();
    let marker = "extern \"C\" fn ";
    let mut at = 0;
    while let Some(i) = src[at..].find(marker) {
        let start = at + i + marker.len();
        let line_start = src[..at + i].rfind('\n').map_or(0, |n| n + 1);
        let prefix = &src[line_start..at + i];
        let open = start + src[start..].find('(').unwrap();
        let name = src[start..open].trim().to_string();
        let close = close_paren(src, open);
        let params = rust_params(&src[open + 1..close]);
        let rest = &src[close + 1..];
        let end = rest.find(['{', ';']).unwrap();
        let ret = rest[..end].trim().trim_start_matches("->").trim();
        at = close;
        if !prefix.trim_start().starts_with("pub") {
            continue; // a fn-pointer type, not an exported function
        }
        out.insert(name, (rust_to_c(ret), params));
    }
    out
}

fn rust_fn_types(src: &str) -> BTreeMap<String, Sig> {
    let mut out = BTreeMap::new();
    for line in src.lines() {
        let Some(rest) = line.trim().strip_prefix("pub type ") else {
            continue;
        };
        let (name, def) = rest.split_once('=').unwrap();
        let def = def.trim().trim_end_matches(';');
        let open = def.find('(').unwrap();
        let close = close_paren(def, open);
        let ret = def[close + 1..].trim().trim_start_matches("->").trim();
        out.insert(
            name.trim().to_string(),
            (rust_to_c(ret), rust_params(&def[open + 1..close])),
        );
    }
    out
}

fn rust_structs(src: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out = BTreeMap::new();
    let mut at = 0;
    while let Some(i) = src[at..].find("#[repr(C)]") {
        let from = at + i;
        let s = from + src[from..].find("pub struct ").unwrap() + "pub struct ".len();
        let brace = s + src[s..].find('{').unwrap();
        let name = src[s..brace].trim().to_string();
        let end = brace + src[brace..].find('}').unwrap();
        let fields = src[brace + 1..end]
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("pub "))
            .map(|l| {
                let (n, t) = l["pub ".len()..].split_once(':').unwrap();
                (
                    n.trim().to_string(),
                    rust_to_c(t.trim().trim_end_matches(',')),
                )
            })
            .collect();
        out.insert(name, fields);
        at = end;
    }
    out
}

/// `pub const NAME: T = value;` lines: name -> the value as C spells it (a shared status
/// `Status::X.code()` is its `RT_*` name).
fn rust_consts(src: &str) -> BTreeMap<String, String> {
    src.lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .map(|rest| {
            let (name, v) = rest.split_once(':').unwrap();
            let value = v.split_once('=').unwrap().1.trim().trim_end_matches(';');
            let value = match value
                .strip_prefix("Status::")
                .and_then(|v| v.strip_suffix(".code()"))
            {
                Some(variant) => Status::ALL
                    .into_iter()
                    .find(|s| format!("{s:?}") == variant)
                    .unwrap_or_else(|| panic!("no status {variant}"))
                    .c_name()
                    .to_string(),
                None => value.to_string(),
            };
            (name.trim().to_string(), value)
        })
        .collect()
}

/// The header without comments.
fn c_code(h: &str) -> String {
    let mut out = String::new();
    let mut rest = h;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find("*/").expect("unterminated comment");
        rest = &rest[i + end + 2..];
    }
    out.push_str(rest);
    out
}

/// Struct name -> (field name, C type) list.
type Structs = BTreeMap<String, Vec<(String, String)>>;
/// Everything the header declares: functions, fn-pointer typedefs, structs, constants.
type Items = (
    BTreeMap<String, Sig>,
    BTreeMap<String, Sig>,
    Structs,
    BTreeMap<String, String>,
);

fn c_items(h: &str) -> Items {
    let code = c_code(h);
    let mut consts = BTreeMap::new();
    let mut rest_lines = Vec::new();
    for line in code.lines() {
        let t = line.trim();
        if let Some(def) = t.strip_prefix("#define GIL_") {
            let mut parts = def.split_whitespace();
            let name = format!("GIL_{}", parts.next().unwrap());
            if let Some(v) = parts.next() {
                consts.insert(name, v.to_string());
            }
        } else if !t.starts_with('#') && t != "extern \"C\" {" && t != "}" {
            rest_lines.push(t.to_string());
        }
    }
    let mut functions = BTreeMap::new();
    let mut fn_types = BTreeMap::new();
    let mut structs = BTreeMap::new();
    let mut joined = rest_lines.join(" ");
    // Struct definitions first (their bodies contain ';'), cut out of the text.
    while let Some(i) = joined.find("typedef struct ") {
        let Some(brace) = joined[i..].find('{').map(|b| b + i) else {
            break;
        };
        let semi = joined[i..].find(';').map_or(usize::MAX, |x| x + i);
        if semi < brace {
            // An opaque declaration such as `typedef struct gil_t gil_t;`.
            joined.replace_range(i..=semi, " ");
            continue;
        }
        let name = joined[i + "typedef struct ".len()..brace]
            .trim()
            .to_string();
        let close = brace + joined[brace..].find('}').unwrap();
        let fields = joined[brace + 1..close]
            .split(';')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(|f| {
                let f = norm(f);
                let cut = f.rfind(' ').unwrap();
                (f[cut + 1..].to_string(), f[..cut].to_string())
            })
            .collect::<Vec<_>>();
        structs.insert(name, fields);
        let end = close + joined[close..].find(';').unwrap();
        joined.replace_range(i..=end, " ");
    }
    for decl in joined.split(';').map(str::trim).filter(|d| !d.is_empty()) {
        if let Some(def) = decl.strip_prefix("typedef ") {
            if !def.contains("(*") {
                continue; // a plain typedef (the shared block's rt_status)
            }
            let star = def.find("(*").unwrap();
            let name_end = def[star..].find(')').unwrap() + star;
            let name = def[star + 2..name_end].trim().to_string();
            let open = name_end + 1 + def[name_end + 1..].find('(').unwrap();
            let close = close_paren(def, open);
            fn_types.insert(name, (norm(&def[..star]), c_params(&def[open + 1..close])));
            continue;
        }
        let open = decl
            .find('(')
            .unwrap_or_else(|| panic!("unexpected declaration: {decl}"));
        let head = norm(&decl[..open]);
        let cut = head.rfind(' ').unwrap();
        let close = close_paren(decl, open);
        functions.insert(
            head[cut + 1..].to_string(),
            (norm(&head[..cut]), c_params(&decl[open + 1..close])),
        );
    }
    (functions, fn_types, structs, consts)
}

#[test]
fn header_matches_rust_side() {
    let rust = read("src/lib.rs");
    let header = read("../include/gil.h");
    let (c_fns, c_types, c_structs, c_consts) = c_items(&header);

    let r_fns = rust_functions(&rust);
    assert!(
        r_fns.len() >= 20,
        "expected the C ABI functions, found {r_fns:?}"
    );
    assert_eq!(
        r_fns.keys().collect::<Vec<_>>(),
        c_fns.keys().collect::<Vec<_>>(),
        "function names differ between src/lib.rs and gil.h"
    );
    for (name, sig) in &r_fns {
        assert_eq!(Some(sig), c_fns.get(name), "signature of {name} differs");
    }
    assert_eq!(
        rust_fn_types(&rust),
        c_types,
        "function-pointer typedefs differ"
    );
    assert_eq!(rust_structs(&rust), c_structs, "struct definitions differ");
    assert_eq!(rust_consts(&rust), c_consts, "constants differ");
}

#[test]
fn checker_catches_drift() {
    let rust = read("src/lib.rs");
    let header = read("../include/gil.h");
    // A changed parameter type, a changed constant and a changed field must all show.
    let (c_fns, _, c_structs, c_consts) = c_items(&header.replace(
        "int32_t gil_release(gil_t *gil, int32_t acquired);",
        "int32_t gil_release(gil_t *gil, int64_t acquired);",
    ));
    assert_ne!(
        rust_functions(&rust).get("gil_release"),
        c_fns.get("gil_release")
    );
    let (_, _, _, c_consts2) = c_items(&header.replace(
        "#define GIL_ERR_TIMEOUT RT_ERR_TIMEOUT",
        "#define GIL_ERR_TIMEOUT RT_ERR_PANIC",
    ));
    assert_ne!(rust_consts(&rust), c_consts2);
    assert_eq!(rust_consts(&rust), c_consts);
    let (_, _, c_structs2, _) = c_items(&header.replace("uint32_t stuck;", "uint64_t stuck;"));
    assert_ne!(rust_structs(&rust), c_structs2);
    assert_eq!(rust_structs(&rust), c_structs);
}

#[test]
fn the_shared_status_block_is_ffi_supports() {
    if let Err(e) = check_header_block(&include_dir().join("gil.h"), &ffi_support::c_block()) {
        panic!("{e}");
    }
}

#[test]
fn cbindgens_declarations_compile_with_the_headers() {
    let rust = read("src/lib.rs");
    assert_eq!(
        header_functions(&read("../include/gil.h")),
        rust_c_functions(&rust),
        "gil.h vs src/lib.rs"
    );
    let check = DeclarationCheck::new(env!("CARGO_MANIFEST_DIR"), include_dir(), "gil.h")
        .exclude(&[
            "gil_t",
            "gil_action_t",
            "gil_ensure_state_t",
            "gil_action_ctx_t",
            "gil_action_report_t",
            "gil_shutdown_report_t",
            "Option_gil_action_fn",
            "Option_gil_free_fn",
            "Option_gil_hook_fn",
        ])
        // cbindgen spells a nullable function-pointer alias as an unknown struct.
        .replace("Option_gil_action_fn", "gil_action_fn")
        .replace("Option_gil_free_fn", "gil_free_fn")
        .replace("Option_gil_hook_fn", "gil_hook_fn");
    if let Err(e) = check.run() {
        panic!("{e}");
    }
    // The check can fail: a changed return type is a conflicting declaration.
    let wrong = check
        .clone()
        .replace("int32_t gil_poll(", "int64_t gil_poll(");
    assert!(wrong.run().unwrap_err().contains("conflicting types"));
}

#[test]
fn the_constants_have_the_rust_values() {
    use gil_capi::*;
    macro_rules! values {
        ($($c:ident),* $(,)?) => { vec![$((stringify!($c).to_string(), format!("{}", $c))),*] };
    }
    let checks = values![
        GIL_OK,
        GIL_ERR_INVALID_ARGUMENT,
        GIL_ERR_SHUT_DOWN,
        GIL_ERR_STOPPED,
        GIL_ERR_NOT_ATTACHED,
        GIL_ERR_ALREADY_ATTACHED,
        GIL_ERR_NOT_HOLDER,
        GIL_ERR_UNKNOWN_THREAD,
        GIL_ERR_TIMEOUT,
        GIL_ERR_PANIC,
        GIL_ERR_INVALID_CONFIG,
        GIL_ERR_ALREADY_SHUT_DOWN,
        GIL_ERR_INSIDE_ACTION,
        GIL_ERR_INSIDE_HOOK,
        GIL_ERR_INSIDE_REGION,
        GIL_ALL_THREADS,
        GIL_BLOCK_WAITING_FOR_GIL,
        GIL_BLOCK_BLOCKING_REGION,
    ];
    let names: std::collections::BTreeSet<String> = checks.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(
        names,
        rust_consts(&read("src/lib.rs")).into_keys().collect(),
        "every constant of src/lib.rs is checked"
    );
    if let Err(e) = check_constants("gil.h", &[&include_dir()], &checks) {
        panic!("gil.h's constants differ from the Rust values:\n{e}");
    }
    // Values that differ fail.
    let wrong = vec![("GIL_ERR_TIMEOUT".to_string(), "-80".to_string())];
    assert!(check_constants("gil.h", &[&include_dir()], &wrong).is_err());
}
