//! `include/elf_loader.h` against `src/lib.rs`: the same functions with the same
//! signatures (each side parsed, and cbindgen's declarations compiled with the header's:
//! a drift is a conflicting-types error), the constants with the Rust values (the same
//! shared status under each name), and ffi-support's status block verbatim
//! (`FFI_BLESS=1` rewrites it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use test_support::{
    check_constants, check_header_block, header_functions, rust_c_functions, DeclarationCheck,
};

fn include_dir() -> PathBuf {
    manifest().join("../include")
}

fn read(rel: &str) -> String {
    let p = manifest().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `name -> normalised C prototype` from the Rust `extern "C"` functions.
fn rust_signatures() -> BTreeMap<String, String> {
    let src = std::fs::read_to_string(manifest().join("src/lib.rs")).unwrap();
    let mut out = BTreeMap::new();
    let mut rest = src.as_str();
    while let Some(i) = rest.find("extern \"C\" fn ") {
        let after = &rest[i + "extern \"C\" fn ".len()..];
        let open = after.find('(').unwrap();
        let name = after[..open].trim().to_string();
        let mut depth = 0;
        let mut close = 0;
        for (k, ch) in after[open..].char_indices() {
            match ch {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let args = &after[open + 1..close];
        let tail = &after[close + 1..];
        let ret = tail[..tail.find('{').unwrap()].trim();
        let ret = ret
            .strip_prefix("->")
            .map(|r| c_type(r.trim()))
            .unwrap_or_else(|| "void".into());
        let args: Vec<String> = args
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| c_type(a.split_once(':').unwrap().1.trim()))
            .collect();
        let args = if args.is_empty() {
            "void".to_string()
        } else {
            args.join(",")
        };
        out.insert(
            name.clone(),
            format!("{ret} {name}({args})").replace(' ', ""),
        );
        rest = &after[close..];
    }
    out
}

fn c_type(r: &str) -> String {
    if let Some(t) = r.strip_prefix("*mut ") {
        return format!("{}*", c_type(t));
    }
    if let Some(t) = r.strip_prefix("*const ") {
        return format!("const {}*", c_type(t));
    }
    match r {
        "c_int" => "int".into(),
        "c_char" => "char".into(),
        "c_void" => "void".into(),
        "usize" => "size_t".into(),
        "u64" => "uint64_t".into(),
        other => other.into(),
    }
}

/// `name -> normalised prototype` from the header.
fn header_signatures() -> BTreeMap<String, String> {
    let h = std::fs::read_to_string(manifest().join("../include/elf_loader.h")).unwrap();
    let mut text = String::new();
    let mut in_comment = false;
    for line in h.lines() {
        let mut l = line.to_string();
        if in_comment {
            match l.find("*/") {
                Some(e) => {
                    l = l[e + 2..].to_string();
                    in_comment = false;
                }
                None => continue,
            }
        }
        while let Some(s) = l.find("/*") {
            match l[s..].find("*/") {
                Some(e) => l = format!("{}{}", &l[..s], &l[s + e + 2..]),
                None => {
                    l = l[..s].to_string();
                    in_comment = true;
                }
            }
        }
        if l.trim_start().starts_with('#') {
            continue;
        }
        text.push_str(&l);
        text.push('\n');
    }
    let mut out = BTreeMap::new();
    for decl in text.split(';') {
        let d = decl.trim();
        if !d.contains('(') || d.contains("typedef") || d.contains('{') || d.contains('}') {
            continue;
        }
        let name_end = d.find('(').unwrap();
        let name = d[..name_end]
            .split(|c: char| c.is_whitespace() || c == '*')
            .next_back()
            .unwrap()
            .to_string();
        let args_s = &d[name_end + 1..d.rfind(')').unwrap()];
        let args: Vec<String> = args_s
            .split(',')
            .map(|a| {
                let a = a.trim();
                if a == "void" {
                    return a.to_string();
                }
                // Drop the parameter name (the last identifier).
                let cut = a
                    .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap();
                a[..=cut].to_string()
            })
            .collect();
        let ret = d[..name_end - name.len()].trim();
        out.insert(
            name.clone(),
            format!("{ret} {name}({})", args.join(",")).replace(' ', ""),
        );
    }
    out
}

#[test]
fn header_matches_rust_signatures() {
    let rust = rust_signatures();
    let header = header_signatures();
    assert!(rust.len() >= 13, "{rust:?}");
    assert_eq!(
        rust, header,
        "include/elf_loader.h and capi/src/lib.rs disagree"
    );
}

#[test]
fn the_shared_status_block_is_ffi_supports() {
    if let Err(e) = check_header_block(&include_dir().join("elf_loader.h"), &ffi_support::c_block())
    {
        panic!("{e}");
    }
}

#[test]
fn cbindgens_declarations_compile_with_the_header() {
    assert_eq!(
        header_functions(&read("../include/elf_loader.h")),
        rust_c_functions(&read("src/lib.rs")),
        "elf_loader.h vs src/lib.rs"
    );
    let check = DeclarationCheck::new(env!("CARGO_MANIFEST_DIR"), include_dir(), "elf_loader.h")
        .exclude(&[
            "elf_loader_namespace",
            "elf_loader_library",
            "elf_loader_tls_index",
        ]);
    if let Err(e) = check.run() {
        panic!("{e}");
    }
    // The check can fail: a changed return type is a conflicting declaration.
    let wrong = check.clone().replace(
        "int elf_loader_library_load(",
        "long elf_loader_library_load(",
    );
    assert!(wrong.run().unwrap_err().contains("conflicting types"));
}

#[test]
fn the_constants_have_the_rust_values() {
    use elf_loader_capi::*;
    macro_rules! values {
        ($($c:ident),* $(,)?) => { vec![$((stringify!($c).to_string(), format!("{}", $c))),*] };
    }
    let checks = values![
        ELF_LOADER_OK,
        ELF_LOADER_ERR_ARG,
        ELF_LOADER_ERR_LOAD,
        ELF_LOADER_ERR_STATE,
        ELF_LOADER_ERR_NOT_FOUND,
        ELF_LOADER_ERR_PANIC,
    ];
    // Every `pub const` of src/lib.rs is checked.
    let consts: Vec<String> = read("src/lib.rs")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .map(|r| r.split(':').next().unwrap().trim().to_string())
        .collect();
    assert_eq!(
        consts,
        checks.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        "every constant of src/lib.rs is checked"
    );
    // Each name is the shared status of the same value, in the header too.
    let mut by_name = checks.clone();
    for (name, status) in [
        ("ELF_LOADER_OK", "RT_OK"),
        ("ELF_LOADER_ERR_ARG", "RT_ERR_ARG"),
        ("ELF_LOADER_ERR_LOAD", "RT_ERR_LOAD"),
        ("ELF_LOADER_ERR_STATE", "RT_ERR_STATE"),
        ("ELF_LOADER_ERR_NOT_FOUND", "RT_ERR_NOT_FOUND"),
        ("ELF_LOADER_ERR_PANIC", "RT_ERR_PANIC"),
    ] {
        by_name.push((name.to_string(), status.to_string()));
    }
    if let Err(e) = check_constants("elf_loader.h", &[&include_dir()], &by_name) {
        panic!("elf_loader.h's constants differ from the Rust values:\n{e}");
    }
    // Values that differ fail.
    let wrong = vec![("ELF_LOADER_ERR_LOAD".to_string(), "-2".to_string())];
    assert!(check_constants("elf_loader.h", &[&include_dir()], &wrong).is_err());
}
