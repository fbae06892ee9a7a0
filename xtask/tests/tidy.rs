//! Tidy checks over the whole workspace, run by `cargo test`:
//! - every `.rs` file starts with a `//!` module doc;
//! - every unsafe block and unsafe impl has a `// SAFETY:` comment within the three
//!   lines above it (or on its own line);
//! - no `dbg!`, `todo!` or `unimplemented!` outside tests.
//!
//! Each check is a function over one file's text, tested below on good and bad inputs so
//! that the tidy test itself can fail.

use std::path::{Path, PathBuf};

/// Folders never scanned: build outputs, virtual environments, fuzz artefacts.
const SKIP_DIRS: &[&str] = &["target", ".venv", ".git", "artifacts", "corpus"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("directory entry");
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !SKIP_DIRS.contains(&name.as_ref()) {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The first non-blank line must be a `//!` doc line.
fn check_module_doc(text: &str) -> Result<(), String> {
    match text.lines().find(|l| !l.trim().is_empty()) {
        Some(line) if line.trim_start().starts_with("//!") => Ok(()),
        _ => Err("does not start with a `//!` module doc".into()),
    }
}

/// Strips a trailing `//` comment and string literal contents from a line, crudely but
/// enough for keyword detection: text inside "..." and after `//` is dropped.
fn code_part(line: &str) -> String {
    let mut out = String::new();
    let mut in_str = false;
    let mut prev = '\0';
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if in_str {
            if c == '"' && prev != '\\' {
                in_str = false;
            }
            prev = if prev == '\\' && c == '\\' { '\0' } else { c };
            continue;
        }
        if c == '"' {
            in_str = true;
            prev = '\0';
            continue;
        }
        if c == '/' && chars.peek() == Some(&'/') {
            break;
        }
        out.push(c);
        prev = c;
    }
    out
}

/// Every `unsafe {` and `unsafe impl` needs `// SAFETY:` on its line or the three above.
fn check_safety_comments(text: &str) -> Result<(), String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut problems = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = code_part(line);
        let is_unsafe_block = code.contains(concat!("unsafe", " {"));
        let is_unsafe_impl = code.contains(concat!("unsafe", " impl"));
        if !is_unsafe_block && !is_unsafe_impl {
            continue;
        }
        let from = i.saturating_sub(3);
        let documented = lines[from..=i].iter().any(|l| l.contains("SAFETY:"));
        if !documented {
            problems.push(format!(
                "line {}: unsafe without a `// SAFETY:` comment above",
                i + 1
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// No debugging or placeholder macros in non-test code. In `src` files everything after
/// the first `#[cfg(test)]` counts as test code (test modules go last).
fn check_no_placeholders(text: &str, is_test_file: bool) -> Result<(), String> {
    if is_test_file {
        return Ok(());
    }
    let banned = [
        concat!("dbg", "!("),
        concat!("todo", "!("),
        concat!("unimplemented", "!("),
    ];
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with(concat!("#[cfg", "(test)]")) {
            break;
        }
        let code = code_part(line);
        for macro_call in banned {
            if code.contains(macro_call) {
                problems.push(format!(
                    "line {}: `{}` outside tests",
                    i + 1,
                    macro_call.trim_end_matches('(')
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Test-only files: integration tests, benches, examples' tests, fuzz targets' tests.
fn is_test_file(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == "tests")
}

#[test]
fn workspace_is_tidy() {
    let root = workspace_root();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(
        files.len() >= 8,
        "expected the workspace's sources, found {} .rs files",
        files.len()
    );
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        for result in [
            check_module_doc(&text),
            check_safety_comments(&text),
            check_no_placeholders(&text, is_test_file(path)),
        ] {
            if let Err(e) = result {
                failures.push(format!("{rel}: {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "tidy found {} problem(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn module_doc_check_rejects_missing_doc() {
    assert!(check_module_doc("//! fine\nfn f() {}\n").is_ok());
    assert!(check_module_doc("\n\n  //! indented is fine\n").is_ok());
    assert!(check_module_doc("/// item doc, not a module doc\nfn f() {}\n").is_err());
    assert!(check_module_doc("use std::fmt;\n//! too late\n").is_err());
    assert!(check_module_doc("").is_err());
}

#[test]
fn safety_check_requires_comment_within_three_lines() {
    let block = concat!("unsafe", " {");
    let good = format!("// SAFETY: p is valid.\nlet x = {block} *p }};\n");
    assert!(check_safety_comments(&good).is_ok());
    let three_above = format!("// SAFETY: ok\n// more\n// more\nlet x = {block} *p }};\n");
    assert!(check_safety_comments(&three_above).is_ok());
    let too_far = format!("// SAFETY: ok\n\n\n\nlet x = {block} *p }};\n");
    let err = check_safety_comments(&too_far).unwrap_err();
    assert!(err.contains("line 5"), "{err}");
    let bare = format!("fn f() {{\n    {block} g() }}\n}}\n");
    assert!(check_safety_comments(&bare).is_err());
    let imp = concat!("unsafe", " impl Send for X {}\n");
    assert!(check_safety_comments(imp).is_err());
    let in_string = format!("let s = \"{block}\";\n// a comment mentioning {block}\n");
    assert!(check_safety_comments(&in_string).is_ok());
}

#[test]
fn placeholder_check_allows_tests_only() {
    let todo = concat!("todo", "!()");
    let src = format!("fn f() {{ {todo} }}\n");
    assert!(check_no_placeholders(&src, false).is_err());
    assert!(check_no_placeholders(&src, true).is_ok());
    let after_cfg_test =
        format!("fn f() {{}}\n#[cfg(test)]\nmod tests {{ fn g() {{ {todo} }} }}\n");
    assert!(check_no_placeholders(&after_cfg_test, false).is_ok());
    let dbg = concat!("dbg", "!(x)");
    assert!(check_no_placeholders(&format!("let y = {dbg};\n"), false).is_err());
    let in_comment = format!("// never write {todo} here\n");
    assert!(check_no_placeholders(&in_comment, false).is_ok());
}
