//! Tidy checks over the whole workspace, run by `cargo test`:
//! - every `.rs` file starts with a `//!` module doc;
//! - every unsafe block and unsafe impl has a `// SAFETY:` comment within the three
//!   lines above it (or on its own line);
//! - no `dbg!`, `todo!` or `unimplemented!` outside tests;
//! - ARCHITECTURE.md's dependency table holds for every crate's `Cargo.toml` (and every
//!   crate has a row);
//! - every repository path ARCHITECTURE.md cites exists;
//! - in a crate whose loom models check a sync shim (gil), no other file names
//!   `std::sync` or `parking_lot` in code;
//! - no module cycle in any crate beyond `KNOWN_MODULE_CYCLES` (a list that may only
//!   shrink), nested modules and `super::` paths included;
//! - a C layer inside its crate (`src/capi*`) names only the crate's root-level public API,
//!   except the crates in `KNOWN_CAPI_INTERNALS` (a list that may only shrink);
//! - only `*-artifact` crates declare a `cdylib` or `staticlib`, so a Rust dependent of
//!   any other crate builds only rlibs.
//! - every crate root turns on rustc's `unused_crate_dependencies`, and every dev- and
//!   build-dependency is named by the crate's code.
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

// ---- The architecture, as ARCHITECTURE.md states it -------------------------------

/// The crates of ARCHITECTURE.md's dependency table with the workspace crates each may
/// depend on (`all of the above`: every crate listed before it).
fn dependency_table(architecture: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let start = architecture
        .find("## Crates and their dependencies")
        .ok_or("ARCHITECTURE.md has no \"## Crates and their dependencies\" section")?;
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    for line in architecture[start..].lines().skip(1) {
        if line.starts_with("## ") {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[1].starts_with('`') {
            continue;
        }
        let name = cells[1].trim_matches('`').to_string();
        let deps_text = cells[3];
        let deps: Vec<String> = if deps_text.starts_with("all of the above") {
            rows.iter().map(|(n, _)| n.clone()).collect()
        } else if deps_text.starts_with("none") {
            Vec::new()
        } else {
            deps_text
                .split(',')
                .map(|d| d.trim().trim_matches('`').to_string())
                .collect()
        };
        rows.push((name, deps));
    }
    if rows.is_empty() {
        return Err("the dependency table has no rows".into());
    }
    Ok(rows)
}

/// The workspace crates the `Cargo.toml` of crate `own` depends on in `[dependencies]` and
/// `[build-dependencies]` (dev-dependencies may also name `test-support`, and `own`
/// itself: a crate's tests turning on one of its features, e.g. elf-loader's
/// `elf-parser`).
fn cargo_workspace_deps(own: &str, manifest: &str, crates: &[String]) -> Vec<String> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            section = t.to_string();
            continue;
        }
        let normal = section == "[dependencies]"
            || section == "[build-dependencies]"
            || section.starts_with("[target.") && section.ends_with(".dependencies]");
        let dev = section == "[dev-dependencies]";
        let Some(name) = t.split(['=', '.', ' ']).next() else {
            continue;
        };
        if crates.iter().any(|c| c == name)
            && (normal || dev && name != "test-support" && name != own)
        {
            out.push(name.to_string());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Every crate of the table exists with a `Cargo.toml`, and depends on no workspace crate
/// the table does not allow it.
fn check_dependency_table(
    architecture: &str,
    manifests: &[(String, String)],
) -> Result<(), String> {
    let table = dependency_table(architecture)?;
    let crates: Vec<String> = table.iter().map(|(n, _)| n.clone()).collect();
    let mut errors = Vec::new();
    for (name, allowed) in &table {
        let Some((_, manifest)) = manifests.iter().find(|(n, _)| n == name) else {
            errors.push(format!("{name} is in the table but has no Cargo.toml"));
            continue;
        };
        for dep in cargo_workspace_deps(name, manifest, &crates) {
            if !allowed.contains(&dep) {
                errors.push(format!(
                    "{name} depends on {dep}, which ARCHITECTURE.md's table does not allow"
                ));
            }
        }
    }
    for (name, _) in manifests {
        if !crates.contains(name) {
            errors.push(format!(
                "{name} has a Cargo.toml but no row in ARCHITECTURE.md's table"
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Paths ARCHITECTURE.md cites in backquotes that name a file or folder of the
/// repository (they contain a `/` and start with a top-level folder) and do not exist.
fn missing_cited_paths(architecture: &str, exists: impl Fn(&str) -> bool) -> Vec<String> {
    let tops = [
        "gc-core/",
        "gc-conservative/",
        "frame-hooks/",
        "elf-loader/",
        "refbridge/",
        "gil/",
        "integration-tests/",
        "xtask/",
        "support/",
        "docs/",
        ".ci/",
    ];
    let mut missing = Vec::new();
    for (i, part) in architecture.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let path = part.split_whitespace().next().unwrap_or("");
        let path = path.trim_end_matches([',', '.', ';', ':']);
        if !tops.iter().any(|t| path.starts_with(t))
            || path.contains('*')
            || path.contains('{')
            || path.contains('<')
        {
            continue;
        }
        if !exists(path) {
            missing.push(path.to_string());
        }
    }
    missing.sort();
    missing.dedup();
    missing
}

/// The member folders of the workspace's root `Cargo.toml` (`members = [...]`), nested
/// ones (`gc-conservative/runtime`) included.
fn workspace_members(root_manifest: &str) -> Vec<String> {
    let Some(start) = root_manifest.find("members = [") else {
        return Vec::new();
    };
    let list = &root_manifest[start + "members = [".len()..];
    let list = &list[..list.find(']').unwrap_or(list.len())];
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

fn workspace_manifests() -> Vec<(String, String)> {
    let root = workspace_root();
    let root_manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let mut out = Vec::new();
    for member in workspace_members(&root_manifest) {
        let manifest = root.join(&member).join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest)
            .unwrap_or_else(|e| panic!("workspace member {member}: {e}"));
        let Some(name) = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = "))
            .map(|n| n.trim_matches('"').to_string())
        else {
            continue;
        };
        out.push((name, text));
    }
    out
}

#[test]
fn workspace_members_are_read_from_the_root_manifest() {
    let manifest = "[workspace]\nmembers = [\n    \"gc-core\",\n    \"gil/capi\",\n    \"support/ffi\",\n]\nexclude = [\"x\"]\n";
    assert_eq!(
        workspace_members(manifest),
        ["gc-core", "gil/capi", "support/ffi"].map(String::from)
    );
    // Every member, nested ones included, is found in the real workspace.
    let names: Vec<String> = workspace_manifests().into_iter().map(|(n, _)| n).collect();
    for crate_name in [
        "gil-capi",
        "refbridge-capi",
        "ffi-support",
        "test-support",
        "gc-runtime",
    ] {
        assert!(
            names.iter().any(|n| n == crate_name),
            "{crate_name} in {names:?}"
        );
    }
    assert!(workspace_members("[workspace]\n").is_empty());
}

#[test]
fn architecture_dependency_table_holds() {
    let architecture = std::fs::read_to_string(workspace_root().join("ARCHITECTURE.md")).unwrap();
    if let Err(e) = check_dependency_table(&architecture, &workspace_manifests()) {
        panic!("{e}");
    }
}

#[test]
fn paths_architecture_md_cites_exist() {
    let root = workspace_root();
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let missing = missing_cited_paths(&architecture, |p| root.join(p).exists());
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md cites paths that do not exist: {missing:?}"
    );
}

#[test]
fn dependency_table_check_fails_on_a_broken_tree() {
    let arch = "## Crates and their dependencies\n\n| crate | concern | depends on |\n|---|---|---|\n\
                | `core` | a | none |\n| `addon` | b | core |\n| `all` | c | all of the above |\n\n## Next\n";
    let ok = vec![
        ("core".to_string(), "[package]\nname = \"core\"\n".to_string()),
        (
            "addon".to_string(),
            "[package]\nname = \"addon\"\n[dependencies]\ncore.workspace = true\n".to_string(),
        ),
        (
            "all".to_string(),
            "[package]\nname = \"all\"\n[dependencies]\ncore.workspace = true\naddon = { path = \"../addon\" }\n"
                .to_string(),
        ),
    ];
    assert_eq!(check_dependency_table(arch, &ok), Ok(()));
    // `ok` with more lines in core's manifest.
    let core_with = |extra: &str| {
        let mut m = ok.clone();
        m[0].1.push_str(extra);
        m
    };
    // core must not depend on addon.
    let err = check_dependency_table(arch, &core_with("[dependencies]\naddon.workspace = true\n"))
        .unwrap_err();
    assert!(err.contains("core depends on addon"), "{err}");
    // A dev-dependency counts too.
    let bad = core_with("[dev-dependencies]\naddon.workspace = true\n");
    assert!(check_dependency_table(arch, &bad).is_err());
    // A crate's dev-dependency on itself (its tests turning on a feature) is allowed; a
    // dependency on itself is not.
    let own = core_with("[dev-dependencies]\ncore = { path = \".\", features = [\"x\"] }\n");
    assert_eq!(check_dependency_table(arch, &own), Ok(()));
    let err = check_dependency_table(
        arch,
        &core_with("[dependencies]\ncore = { path = \".\" }\n"),
    )
    .unwrap_err();
    assert!(err.contains("core depends on core"), "{err}");
    // A crate missing from the table.
    let mut bad = ok.clone();
    bad.push(("stray".into(), "[package]\nname = \"stray\"\n".into()));
    let err = check_dependency_table(arch, &bad).unwrap_err();
    assert!(err.contains("stray has a Cargo.toml but no row"), "{err}");
}

#[test]
fn cited_path_check_fails_on_a_missing_path() {
    let arch = "`gc-core/src/mark.rs` the marker; `gc-core/src/gone.rs` nothing; `Marker::queue`";
    let missing = missing_cited_paths(arch, |p| p == "gc-core/src/mark.rs");
    assert_eq!(missing, vec!["gc-core/src/gone.rs".to_string()]);
}

/// Synchronisation in a crate whose loom models check its shim must go through the shim:
/// a code line (not a comment) of another file naming `std::sync` or `parking_lot` is an
/// error. (gil: `gil/src/primitive.rs` swaps std/parking_lot for loom under `cfg(loom)`.)
fn check_sync_through_shim(text: &str) -> Result<(), String> {
    let bad: Vec<String> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            !t.starts_with("//") && {
                let code = code_part(l);
                code.contains("std::sync") || code.contains("parking_lot")
            }
        })
        .map(|(i, _)| format!("line {}", i + 1))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "uses std::sync or parking_lot outside the loom shim: {}",
            bad.join(", ")
        ))
    }
}

/// The crates whose synchronisation goes through a loom shim, and the shim.
const SYNC_SHIMS: &[(&str, &str)] = &[("gil/src", "primitive.rs")];

#[test]
fn synchronisation_goes_through_the_loom_shims() {
    let root = workspace_root();
    let mut errors = Vec::new();
    for (dir, shim) in SYNC_SHIMS {
        let mut files = Vec::new();
        rust_files(&root.join(dir), &mut files);
        for f in files {
            if f.file_name()
                .is_some_and(|n| n == *shim || n == "loom_tests.rs")
            {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            if let Err(e) = check_sync_through_shim(&text) {
                errors.push(format!("{}: {e}", f.display()));
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn sync_shim_check_fails_on_a_std_mutex() {
    assert!(check_sync_through_shim("//! doc\n/// use std::sync::Arc;\nfn f() {}\n").is_ok());
    let err = check_sync_through_shim("use std::sync::Mutex;\n").unwrap_err();
    assert!(err.contains("line 1"), "{err}");
    assert!(check_sync_through_shim("let m = parking_lot::Mutex::new(0);\n").is_err());
}

// ---------------------------------------------------------------------------------------
// Module cycles.
//
// Every module of a crate is a node (`src/a.rs` or `src/a/mod.rs` is `a`, `src/a/b.rs`
// is `a::b`); a path in module m's code that leads to module t is an edge m -> t:
// `crate::a::b::X`, `super::X`, `self::c::X` and a child module's `c::X`, resolved to the
// deepest module named and through the names a module brings in with `use` (`crate::X`
// where `lib.rs` re-exports `X` from `a::b` leads to `a::b`). Test modules (from a
// `#[cfg(test)]` line on), comments and `mod` lines are ignored. Cycles are looked for
// under every parent (the crate root included) among its own file and its children's
// subtrees: a strongly connected component of two or more is a cycle (siblings
// `a::b` <-> `a::c`, a parent file and its child, or top-level subtrees). Cycles that
// exist today are listed in `KNOWN_MODULE_CYCLES`; the list may only shrink: a new
// cycle, a grown one, or a listed one that no longer exists all fail.

/// Identifiers after `crate::` in one line of code: `crate::a::b` gives `a`,
/// `crate::{a::x, b}` gives `a` and `b` (the first segment of each item of the group).
fn crate_path_heads(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `my_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            let mut at_item_start = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        at_item_start = true;
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 && at_item_start {
                    if c.is_alphanumeric() || c == '_' {
                        item.push(c);
                        continue;
                    }
                    if !item.is_empty() {
                        out.push(std::mem::take(&mut item));
                        at_item_start = false;
                    }
                }
            }
            if !item.is_empty() {
                out.push(item);
            }
        } else {
            let head: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !head.is_empty() {
                out.push(head);
            }
        }
    }
    out
}

/// The code lines of a file up to its test module, comments removed.
fn non_test_code(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        out.push(code_part(line));
    }
    out
}

/// `pub use m::{A, B}` / `pub use m::A` lines of a `lib.rs`: re-exported name -> module.
fn reexports(lib_rs: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let joined = non_test_code(lib_rs).join(" ");
    for part in joined.split("pub use ").skip(1) {
        let stmt = part.split(';').next().unwrap_or("");
        let stmt = stmt
            .trim()
            .trim_start_matches("crate::")
            .trim_start_matches("self::");
        let Some((module, items)) = stmt.split_once("::") else {
            continue;
        };
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            // `a::B`, `B as C`, `B`: the exported name is the last identifier.
            let name = item.split(" as ").last().unwrap_or("").trim();
            let name = name.rsplit("::").next().unwrap_or("").trim();
            if !name.is_empty() {
                out.push((name.to_string(), module.trim().to_string()));
            }
        }
    }
    out
}

/// A path in code: how it starts and its segments (`super::super::a::B` is
/// `(Super(2), [a, B])`; a bare `a::B` is `(Bare, [a, B])`).
#[derive(Debug, Clone, PartialEq)]
enum PathStart {
    Crate,
    Super(usize),
    SelfMod,
    Bare,
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths with at least one `::` in one line of code, each item of a `{...}` group a
/// path of its own (`crate::{a::x, b}` gives `crate::a::x` and `crate::b`).
fn code_paths(code: &str) -> Vec<(PathStart, Vec<String>)> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_ident = is_ident_char(chars[i])
            && !chars[i].is_ascii_digit()
            && (i == 0 || !(is_ident_char(chars[i - 1]) || chars[i - 1] == ':'));
        if !starts_ident {
            i += 1;
            continue;
        }
        let mut segs: Vec<String> = Vec::new();
        let mut j = i;
        // identifiers joined by `::`
        loop {
            let s = j;
            while j < chars.len() && is_ident_char(chars[j]) {
                j += 1;
            }
            segs.push(chars[s..j].iter().collect());
            if j + 1 < chars.len() && chars[j] == ':' && chars[j + 1] == ':' {
                j += 2;
                if j < chars.len() && is_ident_char(chars[j]) {
                    continue;
                }
                if j < chars.len() && chars[j] == '{' {
                    // A group: each top-level item is a path continuing `segs`.
                    let mut depth = 0usize;
                    let mut k = j + 1;
                    let mut item = String::new();
                    let mut items = Vec::new();
                    while k < chars.len() {
                        let c = chars[k];
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 0 => break,
                            '}' => depth -= 1,
                            ',' if depth == 0 => {
                                items.push(std::mem::take(&mut item));
                                k += 1;
                                continue;
                            }
                            _ => {}
                        }
                        item.push(c);
                        k += 1;
                    }
                    items.push(item);
                    for it in items {
                        let it = it.split(" as ").next().unwrap_or("").trim().to_string();
                        if it.is_empty() || it == "*" {
                            continue;
                        }
                        let inner = code_paths(&it);
                        let head: Vec<String> = match inner.first() {
                            Some((PathStart::Bare, rest)) => rest.clone(),
                            _ if it.chars().all(is_ident_char) => vec![it.clone()],
                            _ => continue,
                        };
                        let mut full = segs.clone();
                        full.extend(head.into_iter().filter(|h| h != "self"));
                        out.push(full);
                    }
                    j = k;
                    segs.clear();
                }
            }
            break;
        }
        if segs.len() >= 2 {
            out.push(segs);
        }
        i = j.max(i + 1);
    }
    out.into_iter()
        .map(|segs| {
            let mut k = 0;
            let start = match segs[0].as_str() {
                "crate" => {
                    k = 1;
                    PathStart::Crate
                }
                "self" => {
                    k = 1;
                    PathStart::SelfMod
                }
                "super" => {
                    while k < segs.len() && segs[k] == "super" {
                        k += 1;
                    }
                    PathStart::Super(k)
                }
                _ => PathStart::Bare,
            };
            (start, segs[k..].to_vec())
        })
        .filter(|(_, rest)| !rest.is_empty())
        .collect()
}

/// A crate's module tree: each module's path (`a`, `a::b`; `""` for `lib.rs`) with the
/// code of its own file and the names it re-exports (`pub use`), which lead on to the
/// module where the item is.
struct ModuleTree {
    /// path -> non-test code lines
    code: std::collections::BTreeMap<String, Vec<String>>,
}

fn join_path(base: &str, rest: &[String]) -> String {
    let mut parts: Vec<&str> = base.split("::").filter(|p| !p.is_empty()).collect();
    parts.extend(rest.iter().map(String::as_str));
    parts.join("::")
}

impl ModuleTree {
    /// The module a path in module `from` leads to (following re-exports), if it is one
    /// of the crate's modules.
    fn resolve(
        &self,
        from: &str,
        start: &PathStart,
        segs: &[String],
        depth: usize,
    ) -> Option<String> {
        if depth > 8 {
            return None;
        }
        let base = match start {
            PathStart::Crate => String::new(),
            PathStart::SelfMod | PathStart::Bare => from.to_string(),
            PathStart::Super(n) => {
                let mut parts: Vec<&str> = from.split("::").filter(|p| !p.is_empty()).collect();
                for _ in 0..*n {
                    parts.pop()?;
                }
                parts.join("::")
            }
        };
        if *start == PathStart::Bare && !self.code.contains_key(&join_path(&base, &segs[..1])) {
            return None; // a bare path is a child module's, or none of ours
        }
        // The longest prefix that is a module.
        let mut k = segs.len();
        while k > 0 && !self.code.contains_key(&join_path(&base, &segs[..k])) {
            k -= 1;
        }
        let module = join_path(&base, &segs[..k]);
        if k < segs.len() {
            // `module::Name`: Name may be re-exported from elsewhere.
            if let Some(target) = self.reexport(&module, &segs[k], depth) {
                return Some(target);
            }
        }
        (!module.is_empty()).then_some(module)
    }

    /// Where the name `name` of module `module` comes from when a `use` brings it in
    /// (`pub use x::Name`, `pub(crate) use x::{.., Name}`, `use y::Y as Name`: a path
    /// `module::Name` may name any of them).
    fn reexport(&self, module: &str, name: &str, depth: usize) -> Option<String> {
        let code = self.code.get(module)?;
        let joined = code.join(" ");
        let mut stmts = Vec::new();
        let mut rest = joined.as_str();
        while let Some(i) = rest.find("use ") {
            let before = rest[..i].chars().last();
            let after = &rest[i + "use ".len()..];
            if before.is_none_or(|c| c == ' ' || c == ')' || c == ';' || c == '}') {
                stmts.push(after.split(';').next().unwrap_or("").trim());
            }
            rest = after;
        }
        for stmt in stmts {
            for (start, segs) in code_paths(stmt) {
                // The exported name is the path's last segment, or its alias.
                let alias = stmt
                    .split(&format!("{} as ", segs.last()?))
                    .nth(1)
                    .map(|a| {
                        a.chars()
                            .take_while(|c| is_ident_char(*c))
                            .collect::<String>()
                    });
                let exported = alias.unwrap_or_else(|| segs.last().cloned().unwrap_or_default());
                if exported == name {
                    return self
                        .resolve(module, &start, &segs[..segs.len() - 1], depth + 1)
                        .or_else(|| {
                            let m = join_path(module, &segs[..segs.len() - 1]);
                            self.code.contains_key(&m).then_some(m)
                        });
                }
            }
        }
        None
    }
}

/// The module graph of one crate (`modules`: each module's path and its own file's
/// text; `lib.rs` is the root, `""`): an edge m -> t for each path in m's code (not its
/// tests or comments, not its `mod` lines) that leads to module t (`crate::`, `super::`,
/// `self::` and child-module paths, through re-exports).
fn module_edges(lib_rs: &str, modules: &[(String, String)]) -> Vec<(String, String)> {
    let mut code: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    code.insert(String::new(), non_test_code(lib_rs));
    for (m, text) in modules {
        code.insert(m.clone(), non_test_code(text));
    }
    let tree = ModuleTree { code };
    let mut edges = std::collections::BTreeSet::new();
    for (module, lines) in &tree.code {
        if module.is_empty() {
            continue; // lib.rs: the front door
        }
        for line in lines {
            let t = line.trim_start();
            if t.starts_with("mod ")
                || t.starts_with("pub mod ")
                || t.starts_with("pub(crate) mod ")
            {
                continue;
            }
            for (start, segs) in code_paths(line) {
                if let Some(target) = tree.resolve(module, &start, &segs, 0) {
                    if target != *module {
                        edges.insert((module.clone(), target));
                    }
                }
            }
        }
    }
    edges.into_iter().collect()
}

/// Cycles among the parts of each module: for every module (the crate root included),
/// its children (each with everything below it, as one node) and its own file, with the
/// edges between them; each strongly connected component of two or more (as sorted
/// module paths). Top-level cycles are the root's; `a::b` <-> `a::c` are `a`'s.
fn nested_cycles(edges: &[(String, String)], modules: &[String]) -> Vec<Vec<String>> {
    let mut parents: std::collections::BTreeSet<String> = [String::new()].into();
    for m in modules {
        let mut parts: Vec<&str> = m.split("::").collect();
        parts.pop();
        parents.insert(parts.join("::"));
    }
    let mut out = Vec::new();
    for parent in &parents {
        // The node a module belongs to under `parent`: the parent itself, or the child
        // whose subtree holds it; None outside the parent's subtree.
        let node = |m: &str| -> Option<String> {
            if m == parent {
                return Some(m.to_string());
            }
            let rest = if parent.is_empty() {
                m
            } else {
                m.strip_prefix(parent.as_str())?.strip_prefix("::")?
            };
            let child = rest.split("::").next()?;
            Some(join_path(parent, &[child.to_string()]))
        };
        let level: Vec<(String, String)> = edges
            .iter()
            .filter_map(|(a, b)| {
                let (a, b) = (node(a)?, node(b)?);
                (a != b).then_some((a, b))
            })
            .collect();
        out.extend(cycles(&level));
    }
    out.sort();
    out.dedup();
    out
}

/// Strongly connected components of two or more nodes, each sorted, in sorted order.
fn cycles(edges: &[(String, String)]) -> Vec<Vec<String>> {
    let mut nodes: Vec<&str> = edges
        .iter()
        .flat_map(|(a, b)| [a.as_str(), b.as_str()])
        .collect();
    nodes.sort();
    nodes.dedup();
    // reach[i][j]: j reachable from i (the graphs are tens of modules: a closure is fine).
    let n = nodes.len();
    let idx = |s: &str| nodes.binary_search(&s).unwrap();
    let mut reach = vec![vec![false; n]; n];
    for (a, b) in edges {
        reach[idx(a)][idx(b)] = true;
    }
    for k in 0..n {
        let via_k = reach[k].clone();
        for row in reach.iter_mut() {
            if row[k] {
                for (to, &r) in row.iter_mut().zip(&via_k) {
                    *to |= r;
                }
            }
        }
    }
    let mut seen = vec![false; n];
    let mut out = Vec::new();
    for i in 0..n {
        if seen[i] {
            continue;
        }
        let comp: Vec<usize> = (0..n)
            .filter(|&j| j == i || (reach[i][j] && reach[j][i]))
            .collect();
        for &j in &comp {
            seen[j] = true;
        }
        if comp.len() > 1 {
            out.push(comp.iter().map(|&j| nodes[j].to_string()).collect());
        }
    }
    out
}

/// A crate's `src` as modules: `src/a.rs` and `src/a/mod.rs` are `a`, `src/a/b.rs` is
/// `a::b`; returns `lib.rs` and the modules (`main.rs` and `src/bin/` are not modules of
/// the library).
fn crate_modules(src: &Path) -> (String, Vec<(String, String)>) {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
    let mut by_module: std::collections::BTreeMap<String, String> = Default::default();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(parts[0].as_str(), "lib.rs" | "main.rs" | "bin") {
            continue;
        }
        let last = parts.pop().unwrap();
        if last != "mod.rs" {
            parts.push(last.trim_end_matches(".rs").to_string());
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let entry = by_module.entry(parts.join("::")).or_default();
        entry.push_str(&text);
        entry.push('\n');
    }
    (lib, by_module.into_iter().collect())
}

/// Module cycles that exist today (crate, sorted modules). Fixing one means deleting its
/// line; the test fails while a listed cycle is gone or a cycle is not listed.
const KNOWN_MODULE_CYCLES: &[(&str, &[&str])] = &[];

#[test]
fn no_module_cycles_beyond_the_known_list() {
    let root = workspace_root();
    let mut found: Vec<(String, Vec<String>)> = Vec::new();
    for (name, _) in workspace_manifests() {
        let Some(dir) = crate_dir(&root, &name) else {
            continue;
        };
        let src = dir.join("src");
        if !src.join("lib.rs").is_file() {
            continue;
        }
        let (lib, modules) = crate_modules(&src);
        let names: Vec<String> = modules.iter().map(|(m, _)| m.clone()).collect();
        for c in nested_cycles(&module_edges(&lib, &modules), &names) {
            found.push((name.clone(), c));
        }
    }
    let known: Vec<(String, Vec<String>)> = KNOWN_MODULE_CYCLES
        .iter()
        .map(|(c, ms)| (c.to_string(), ms.iter().map(|m| m.to_string()).collect()))
        .collect();
    let new: Vec<_> = found.iter().filter(|c| !known.contains(c)).collect();
    let gone: Vec<_> = known.iter().filter(|c| !found.contains(c)).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "module cycles not in KNOWN_MODULE_CYCLES: {new:?}\nlisted cycles that no longer \
         exist (delete their line): {gone:?}"
    );
}

/// The folder of the workspace crate named `name` (its manifest's directory).
fn crate_dir(root: &Path, name: &str) -> Option<PathBuf> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let manifest = dir.join("Cargo.toml");
        if manifest.is_file() && dir != root {
            let text = std::fs::read_to_string(&manifest).unwrap();
            if text
                .lines()
                .any(|l| l.trim() == format!("name = \"{name}\""))
            {
                return Some(dir);
            }
        }
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let p = entry.path();
            let n = entry.file_name();
            if p.is_dir() && !SKIP_DIRS.contains(&n.to_string_lossy().as_ref()) && n != "src" {
                stack.push(p);
            }
        }
    }
    None
}

#[test]
fn module_cycle_check_finds_a_cycle_and_reexports() {
    let lib = "pub use b::Thing;\npub use c::{X, Y as Z};\n";
    let modules = vec![
        ("a".to_string(), "use crate::Thing;\n".to_string()),
        ("b".to_string(), "fn f() { crate::a::g(); }\n".to_string()),
        (
            "c".to_string(),
            "use crate::{a::h, b};\n#[cfg(test)]\nuse crate::d;\n".to_string(),
        ),
        (
            "d".to_string(),
            "// crate::c::X\nuse crate::Z;\n".to_string(),
        ),
    ];
    let edges = module_edges(lib, &modules);
    assert!(edges.contains(&("a".into(), "b".into())), "{edges:?}");
    assert!(edges.contains(&("d".into(), "c".into())), "{edges:?}");
    assert!(
        !edges.contains(&("c".into(), "d".into())),
        "test code is not an edge"
    );
    assert_eq!(cycles(&edges), vec![vec!["a".to_string(), "b".to_string()]]);
    // Without b -> a there is no cycle.
    let acyclic = module_edges(lib, &modules[..1]);
    assert!(cycles(&acyclic).is_empty());
}

/// The rule follows nested modules and `super::`/`self::`/child paths (through the
/// names a parent brings in with `use`): sibling modules of one parent, a parent's own
/// file and its child, and top-level subtrees are each checked for cycles.
#[test]
fn module_cycle_check_follows_nested_modules_and_super_paths() {
    let check = |modules: &[(&str, &str)]| {
        let modules: Vec<(String, String)> = modules
            .iter()
            .map(|(m, t)| (m.to_string(), t.to_string()))
            .collect();
        let names: Vec<String> = modules.iter().map(|(m, _)| m.clone()).collect();
        nested_cycles(&module_edges("mod m;\nmod p;\nmod z;\n", &modules), &names)
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    // Siblings: b reaches a through the parent's re-export, a reaches b by `super::`.
    let siblings = [
        ("m", "mod a;\nmod b;\npub use a::A;\n"),
        ("m::a", "pub struct A;\nuse super::b::helper;\n"),
        ("m::b", "pub fn helper() -> super::A { super::A }\n"),
    ];
    assert_eq!(check(&siblings), vec![s(&["m::a", "m::b"])]);
    let one_way = [siblings[0], siblings[1], ("m::b", "pub fn helper() {}\n")];
    assert!(check(&one_way).is_empty(), "a -> b alone is no cycle");
    // A parent's own code and its child: the child uses the parent's item, the parent
    // the child's function (a child path without a prefix).
    let parent = [
        ("p", "mod c;\npub struct E;\nfn g() { c::run(); }\n"),
        ("p::c", "use super::E;\npub fn run() {}\n"),
    ];
    assert_eq!(check(&parent), vec![s(&["p", "p::c"])]);
    // With the item in a leaf of its own, re-exported by the parent, there is none.
    let fixed = [
        ("p", "mod c;\nmod e;\npub use e::E;\nfn g() { c::run(); }\n"),
        ("p::c", "use super::E;\npub fn run() {}\n"),
        ("p::e", "pub struct E;\n"),
    ];
    assert!(check(&fixed).is_empty(), "{:?}", check(&fixed));
    // Top-level subtrees: a nested module reaching another top-level one, and back.
    let subtrees = [
        ("m", "mod a;\n"),
        ("m::a", "use crate::z::Z;\n"),
        ("z", "pub struct Z;\nfn f() { crate::m::a::g(); }\n"),
    ];
    assert_eq!(check(&subtrees), vec![s(&["m", "z"])]);
    // Comments, `mod` lines and test code are no edges.
    let quiet = [
        (
            "p",
            "mod c;\n// c::run()\n#[cfg(test)]\nfn t() { c::run(); }\n",
        ),
        ("p::c", "use super::E;\n"),
    ];
    assert!(check(&quiet).is_empty());
}

// ---------------------------------------------------------------------------------------
// Unused dependencies.
//
// rustc's `unused_crate_dependencies` checks a crate's `[dependencies]` when its library
// or binary is built: every crate root turns it on (`UNUSED_DEPS_LINT`; not in its own
// unit-test build, which sees the dev-dependencies too, nor workspace-wide, since each
// test, example and bench target sees every dev-dependency). The dependencies only
// those targets and build scripts see are checked here instead: each `[dev-dependencies]`
// and `[build-dependencies]` entry must be named (`name::`, `use name`, `extern crate
// name`) by some Rust file of the crate.

/// The line every crate root (`src/lib.rs`, `src/main.rs`) carries.
const UNUSED_DEPS_LINT: &str = "#![cfg_attr(not(test), warn(unused_crate_dependencies))]";

/// A crate root must turn the lint on, as a crate-level attribute (not in a comment).
fn check_unused_deps_lint(root_text: &str) -> Result<(), String> {
    if root_text.lines().any(|l| l.trim() == UNUSED_DEPS_LINT) {
        Ok(())
    } else {
        Err(format!("does not carry `{UNUSED_DEPS_LINT}`"))
    }
}

/// The dev- and build-dependencies of a manifest (`[dev-dependencies]`,
/// `[build-dependencies]`, and their `[target.*.]` forms), as Rust names.
fn dev_and_build_deps(manifest: &str) -> Vec<String> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            section = t.to_string();
            continue;
        }
        let wanted =
            section.ends_with("dev-dependencies]") || section.ends_with("build-dependencies]");
        if !wanted || t.is_empty() || t.starts_with('#') {
            continue;
        }
        if let Some(name) = t.split(['=', '.', ' ']).next().filter(|n| !n.is_empty()) {
            out.push(name.trim_matches('"').replace('-', "_"));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The dependencies in `deps` that no text of `sources` names.
fn unnamed_deps(deps: &[String], sources: &[String]) -> Vec<String> {
    deps.iter()
        .filter(|d| {
            !sources.iter().any(|text| {
                text.lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .any(|l| {
                        let code = code_part(l);
                        let named = |pat: &str| {
                            code.match_indices(pat).any(|(i, _)| {
                                code[..i]
                                    .chars()
                                    .last()
                                    .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'))
                            })
                        };
                        named(&format!("{d}::"))
                            || code.contains(&format!("use {d}"))
                            || code.contains(&format!("extern crate {d}"))
                    })
            })
        })
        .cloned()
        .collect()
}

#[test]
fn crate_roots_turn_on_unused_crate_dependencies_and_dev_deps_are_used() {
    let root = workspace_root();
    let mut problems = Vec::new();
    for (name, manifest) in workspace_manifests() {
        let Some(dir) = crate_dir(&root, &name) else {
            continue;
        };
        for root_file in ["src/lib.rs", "src/main.rs"] {
            let path = dir.join(root_file);
            if let Ok(text) = std::fs::read_to_string(&path) {
                if let Err(e) = check_unused_deps_lint(&text) {
                    problems.push(format!("{}: {e}", path.display()));
                }
            }
        }
        // The crate's own Rust files (not those of crates nested in its folder).
        let mut files = Vec::new();
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap().flatten() {
                let p = entry.path();
                let n = entry.file_name().to_string_lossy().into_owned();
                if p.is_dir() {
                    if !SKIP_DIRS.contains(&n.as_str()) && !p.join("Cargo.toml").exists() {
                        stack.push(p);
                    }
                } else if n.ends_with(".rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    // A module it includes from elsewhere (`#[path = "..."]`) is its code too.
                    for line in text.lines() {
                        if let Some(rel) = line
                            .trim()
                            .strip_prefix("#[path = \"")
                            .and_then(|r| r.strip_suffix("\"]"))
                        {
                            if let Ok(t) = std::fs::read_to_string(d.join(rel)) {
                                files.push(t);
                            }
                        }
                    }
                    files.push(text);
                }
            }
        }
        for dep in unnamed_deps(&dev_and_build_deps(&manifest), &files) {
            problems.push(format!(
                "{name}: dev- or build-dependency `{dep}` is never used"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn unused_dependency_checks_fail_on_broken_input() {
    assert!(check_unused_deps_lint(&format!("//! doc\n\n{UNUSED_DEPS_LINT}\n")).is_ok());
    assert!(check_unused_deps_lint("//! doc\n\nmod a;\n").is_err());
    assert!(check_unused_deps_lint(&format!("// {UNUSED_DEPS_LINT}\n")).is_err());
    let manifest = "[dependencies]\nlibc.workspace = true\n[dev-dependencies]\ntest-support.workspace = true\ninsta = \"1\"\n[build-dependencies]\ncc.workspace = true\n";
    assert_eq!(
        dev_and_build_deps(manifest),
        ["cc", "insta", "test_support"]
    );
    let deps = dev_and_build_deps(manifest);
    let used = vec![
        "fn main() { cc::Build::new(); }\n".to_string(),
        "use test_support::wait_until;\n#[test]\nfn t() { insta::assert_snapshot!(x); }\n"
            .to_string(),
    ];
    assert!(unnamed_deps(&deps, &used).is_empty());
    // A comment, a longer name or another crate's path does not count.
    let unused = vec![
        "// insta::assert_snapshot!\nuse my_cc::Build;\nfn f() { other::test_support::x(); }\n"
            .to_string(),
    ];
    assert_eq!(
        unnamed_deps(&deps, &unused),
        ["cc", "insta", "test_support"]
    );
}

// ---------------------------------------------------------------------------------------
// Ready to publish.
//
// A library crate (one that does not opt out with `publish = false` or the workspace's
// `publish.workspace = true`) carries what crates.io requires and shows: description,
// license, readme (a file that exists), keywords (at most five, crates.io's syntax),
// categories and documentation; each workspace crate it depends on is declared in the
// root manifest with a version. `cargo xtask test` then builds each package from its
// tarball (`cargo publish --workspace --dry-run`).

/// The keys a publishable manifest must set (itself or through `key.workspace = true`).
const PUBLISH_KEYS: &[&str] = &[
    "description",
    "license",
    "readme",
    "keywords",
    "categories",
    "documentation",
];

/// Whether a manifest's package is published.
fn is_published(manifest: &str) -> bool {
    !manifest
        .lines()
        .any(|l| matches!(l.trim(), "publish = false" | "publish.workspace = true"))
}

/// The problems of one publishable manifest; `readme_exists` answers for its readme
/// path and `versioned` for a workspace dependency's name.
fn publish_problems(
    manifest: &str,
    readme_exists: impl Fn(&str) -> bool,
    versioned: impl Fn(&str) -> bool,
) -> Vec<String> {
    let package: Vec<&str> = manifest
        .lines()
        .skip_while(|l| l.trim() != "[package]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .collect();
    let value = |key: &str| {
        package.iter().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            let k = k.trim();
            (k == key || k == format!("{key}.workspace")).then(|| v.trim().to_string())
        })
    };
    let mut out = Vec::new();
    for key in PUBLISH_KEYS {
        if value(key).is_none() {
            out.push(format!("no `{key}`"));
        }
    }
    if let Some(readme) = value("readme") {
        let path = readme.trim_matches('"');
        if readme != "true" && !readme_exists(path) {
            out.push(format!("readme {path} does not exist"));
        }
    }
    if let Some(kw) = value("keywords") {
        let words: Vec<&str> = kw
            .trim_matches(['[', ']'])
            .split(',')
            .map(|w| w.trim().trim_matches('"'))
            .filter(|w| !w.is_empty())
            .collect();
        let valid = |w: &str| {
            w.len() <= 20
                && w.starts_with(|c: char| c.is_ascii_alphanumeric())
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-+".contains(c))
        };
        if words.len() > 5 || words.iter().any(|w| !valid(w)) {
            out.push(format!(
                "keywords {words:?}: at most five, each 20 ASCII letters, digits, _ - + at most"
            ));
        }
    }
    let mut section = String::new();
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            section = t.to_string();
            continue;
        }
        let normal = section == "[dependencies]" || section == "[build-dependencies]";
        if let Some(dep) = t.strip_suffix(".workspace = true") {
            if normal && !versioned(dep) {
                out.push(format!(
                    "dependency {dep} has no version in the root manifest"
                ));
            }
        }
    }
    out
}

/// Whether the root manifest's `[workspace.dependencies]` entry for `name` is a path
/// dependency without a version.
fn unversioned_path_dep(root_manifest: &str, name: &str) -> bool {
    root_manifest.lines().any(|l| {
        l.trim_start().starts_with(&format!("{name} = "))
            && l.contains("path =")
            && !l.contains("version =")
    })
}

#[test]
fn library_crates_are_ready_to_publish() {
    let root = workspace_root();
    let root_manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let mut problems = Vec::new();
    let mut published = 0;
    for (name, manifest) in workspace_manifests() {
        if !is_published(&manifest) {
            continue;
        }
        published += 1;
        let dir = crate_dir(&root, &name).unwrap();
        for p in publish_problems(
            &manifest,
            |r| dir.join(r).is_file(),
            |dep| !unversioned_path_dep(&root_manifest, dep),
        ) {
            problems.push(format!("{name}: {p}"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(published >= 13, "only {published} crates are published");
}

#[test]
fn publish_check_fails_on_broken_input() {
    let good = "[package]\nname = \"a\"\ndescription = \"x\"\nlicense.workspace = true\nreadme = \"README.md\"\nkeywords = [\"gc\", \"c-api\"]\ncategories = [\"memory-management\"]\ndocumentation = \"https://docs.rs/a\"\n\n[dependencies]\ncore.workspace = true\nlibc.workspace = true\n[dev-dependencies]\ntest-support.workspace = true\n";
    let root = "[workspace.dependencies]\ncore = { path = \"core\", version = \"=0.1.0\" }\ntest-support = { path = \"support/test-support\" }\nlibc = \"0.2\"\n";
    let check =
        |m: &str| publish_problems(m, |r| r == "README.md", |d| !unversioned_path_dep(root, d));
    assert!(check(good).is_empty(), "{:?}", check(good));
    assert!(is_published(good));
    assert!(!is_published(
        &good.replace("[package]\n", "[package]\npublish = false\n")
    ));
    let missing = check(&good.replace("documentation = \"https://docs.rs/a\"\n", ""));
    assert_eq!(missing, ["no `documentation`"]);
    assert_eq!(
        check(&good.replace("README.md", "README")),
        ["readme README does not exist"]
    );
    assert_eq!(check(&good.replace("\"c-api\"", "\"a b\"")).len(), 1);
    let root_unversioned = root.replace(", version = \"=0.1.0\"", "");
    let p = publish_problems(
        good,
        |_| true,
        |d| !unversioned_path_dep(&root_unversioned, d),
    );
    assert_eq!(p, ["dependency core has no version in the root manifest"]);
}

// ---------------------------------------------------------------------------------------
// C layers import only their crate's public API.
//
// A C layer inside its crate (`src/capi.rs`, `src/capi/*.rs`) may name `crate::X` only
// where `X` is public at the crate root (a `pub use` re-export or a `pub` item of
// `lib.rs`). C layers that are crates of their own (gc-core, gil, refbridge, elf-loader,
// gc-conservative) get this from the compiler. `KNOWN_CAPI_INTERNALS` lists the crates whose C layer still reaches
// internals; the list may only shrink.

/// The names public at a crate root: `pub use` re-exports and `pub` items of `lib.rs`.
fn root_public_names(lib_rs: &str) -> std::collections::BTreeSet<String> {
    let mut names: std::collections::BTreeSet<String> = reexports(lib_rs)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    for line in non_test_code(lib_rs) {
        let t = line.trim_start();
        for kw in [
            "pub fn ",
            "pub unsafe fn ",
            "pub struct ",
            "pub enum ",
            "pub type ",
            "pub const ",
            "pub static ",
            "pub trait ",
            "pub mod ",
        ] {
            if let Some(rest) = t.strip_prefix(kw) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
    }
    names
}

/// The `crate::` names a C layer's code uses that are not public at the crate root.
fn capi_internal_names(lib_rs: &str, capi_text: &str) -> Vec<String> {
    let public = root_public_names(lib_rs);
    let mut bad: Vec<String> = non_test_code(capi_text)
        .iter()
        .flat_map(|l| crate_path_heads(l))
        .filter(|h| !public.contains(h))
        .collect();
    bad.sort();
    bad.dedup();
    bad
}

/// Crates whose in-crate C layer uses internals: gc-runtime only, a C-only crate (it has
/// no Rust API; its C layer drives the private runtime module).
const KNOWN_CAPI_INTERNALS: &[&str] = &["gc-runtime"];

#[test]
fn c_layers_use_only_the_public_api() {
    let root = workspace_root();
    let mut offenders = Vec::new();
    let mut checked = Vec::new();
    for (name, _) in workspace_manifests() {
        let Some(dir) = crate_dir(&root, &name) else {
            continue;
        };
        let src = dir.join("src");
        let mut files = Vec::new();
        if src.join("capi.rs").is_file() {
            files.push(src.join("capi.rs"));
        }
        if src.join("capi").is_dir() {
            rust_files(&src.join("capi"), &mut files);
        }
        if files.is_empty() {
            continue;
        }
        let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
        let text: String = files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        let bad = capi_internal_names(&lib, &text);
        checked.push(name.clone());
        let known = KNOWN_CAPI_INTERNALS.contains(&name.as_str());
        if bad.is_empty() && known {
            offenders.push(format!(
                "{name}: its C layer uses only the public API now: delete it from \
                 KNOWN_CAPI_INTERNALS"
            ));
        } else if !bad.is_empty() && !known {
            offenders.push(format!("{name}: the C layer names internals {bad:?}"));
        }
    }
    assert!(checked.contains(&"gc-runtime".to_string()), "{checked:?}");
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

#[test]
fn capi_check_fails_on_an_internal_path() {
    let lib = "mod heap;\nmod lookup;\npub use heap::{Heap, HeapConfig};\npub fn version() {}\n";
    assert!(capi_internal_names(lib, "use crate::{Heap, version};\n").is_empty());
    assert_eq!(
        capi_internal_names(
            lib,
            "use crate::Heap;\nfn f() { crate::lookup::page_of(0); }\n"
        ),
        vec!["lookup".to_string()]
    );
}

// Rule: C libraries are built by artifact crates only. A `cdylib`/`staticlib` next to a
// crate's `lib` is built by every Rust dependent (the finding was +130 MB in `target/`
// and longer links); the C ABI's library comes from `<crate>/capi/artifact` instead.

/// The `crate-type` kinds of a manifest other than `rlib`/`lib`, when its package name does
/// not end in `-artifact`: the reason it breaks the rule, or `Ok`.
fn check_library_kinds(name: &str, manifest: &str) -> Result<(), String> {
    // An artifact crate builds a C ABI's library; a PyO3 crate is a Python extension
    // module, a shared library by nature (interpool).
    let python_extension = manifest
        .lines()
        .any(|l| l.trim_start().starts_with("pyo3") && l.contains('='));
    if name.ends_with("-artifact") || python_extension {
        return Ok(());
    }
    for line in manifest.lines() {
        let line = line.trim();
        let Some(kinds) = line.strip_prefix("crate-type") else {
            continue;
        };
        let extra: Vec<&str> = ["cdylib", "staticlib", "dylib"]
            .into_iter()
            .filter(|k| kinds.contains(&format!("\"{k}\"")))
            .collect();
        if !extra.is_empty() {
            return Err(format!(
                "crate {name} declares {extra:?}: only `*-artifact` crates build C libraries \
                 (put the C ABI in <crate>/capi and its library in <crate>/capi/artifact)"
            ));
        }
    }
    Ok(())
}

#[test]
fn only_artifact_crates_build_c_libraries() {
    let bad: Vec<String> = workspace_manifests()
        .iter()
        .filter_map(|(name, text)| check_library_kinds(name, text).err())
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn library_kind_check_fails_on_a_cdylib_next_to_a_lib() {
    let lib = "[package]\nname = \"gc-core\"\n[lib]\ncrate-type = [\"rlib\", \"cdylib\"]\n";
    let err = check_library_kinds("gc-core", lib).unwrap_err();
    assert!(err.contains("gc-core") && err.contains("cdylib"), "{err}");
    let stat = "[lib]\ncrate-type = [\"staticlib\"]\n";
    assert!(check_library_kinds("gil", stat).is_err());
    let artifact = "[lib]\nname = \"gil\"\ncrate-type = [\"cdylib\"]\n";
    assert!(check_library_kinds("gil-capi-artifact", artifact).is_ok());
    assert!(check_library_kinds("gil", "[lib]\ncrate-type = [\"rlib\"]\n").is_ok());
    let extension = "[lib]\ncrate-type = [\"cdylib\"]\n[dependencies]\npyo3.workspace = true\n";
    assert!(check_library_kinds("interpool", extension).is_ok());
}
