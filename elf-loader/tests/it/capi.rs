//! The C ABI: `include/elf_loader.h` checked against the Rust signatures in
//! `src/capi.rs`, and a C program built against the header (linked with the crate's
//! cdylib) that loads a library twice and misuses the API; it also runs under valgrind.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `name -> normalised C prototype` from the Rust `extern "C"` functions.
fn rust_signatures() -> BTreeMap<String, String> {
    let src = std::fs::read_to_string(manifest().join("src/capi.rs")).unwrap();
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
    let h = std::fs::read_to_string(manifest().join("include/elf_loader.h")).unwrap();
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
    assert!(rust.len() >= 12, "{rust:?}");
    assert_eq!(
        rust, header,
        "include/elf_loader.h and src/capi.rs disagree"
    );
    // Constants.
    let h = std::fs::read_to_string(manifest().join("include/elf_loader.h")).unwrap();
    for (name, value) in [
        ("ELF_LOADER_OK", elf_loader::capi::ELF_LOADER_OK),
        ("ELF_LOADER_ERR_ARG", elf_loader::capi::ELF_LOADER_ERR_ARG),
        ("ELF_LOADER_ERR_LOAD", elf_loader::capi::ELF_LOADER_ERR_LOAD),
        (
            "ELF_LOADER_ERR_STATE",
            elf_loader::capi::ELF_LOADER_ERR_STATE,
        ),
        (
            "ELF_LOADER_ERR_NOT_FOUND",
            elf_loader::capi::ELF_LOADER_ERR_NOT_FOUND,
        ),
        (
            "ELF_LOADER_ERR_PANIC",
            elf_loader::capi::ELF_LOADER_ERR_PANIC,
        ),
    ] {
        let want = if value < 0 {
            format!("#define {name} ({value})")
        } else {
            format!("#define {name} {value}")
        };
        assert!(h.contains(&want), "header lacks `{want}`");
    }
}

fn build_c_program() -> PathBuf {
    common::build_c_host("capi_test", "capi_test.c", &[])
}

#[test]
fn c_program_builds_against_the_header_and_runs() {
    let so = common::build_so("counter", &["counter.c"], &[]);
    let tls = common::build_so("tls", &["tls.c"], &[]);
    let tls_desc = common::build_so("tlsdesc", &["tls.c"], &["-mtls-dialect=gnu2"]);
    let exe = build_c_program();
    let out = Command::new(&exe)
        .arg(&so)
        .arg(&tls)
        .arg(&tls_desc)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("all checks passed"), "{text}");
}

#[test]
fn c_program_is_clean_under_valgrind() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        panic!("valgrind is not installed (cargo xtask test installs it)");
    }
    let so = common::build_so("counter", &["counter.c"], &[]);
    let tls = common::build_so("tls", &["tls.c"], &[]);
    let tls_desc = common::build_so("tlsdesc", &["tls.c"], &["-mtls-dialect=gnu2"]);
    let exe = build_c_program();
    let out = Command::new("valgrind")
        .args(["--quiet", "--error-exitcode=97", "--track-origins=yes"])
        .arg(&exe)
        .arg(&so)
        .arg(&tls)
        .arg(&tls_desc)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "valgrind reported errors:\n{text}");
    assert!(text.contains("all checks passed"), "{text}");
    let _ = Path::new(&so);
}
