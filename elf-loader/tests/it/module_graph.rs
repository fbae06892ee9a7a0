//! The crate's modules form no cycle: the `crate::` paths of each `src/*.rs` file (its
//! code, not its `#[cfg(test)]` module) give the graph, and Tarjan's algorithm its
//! strongly connected components. `module_graph` and `cycles` take a directory and a
//! graph, so that a workspace-wide tidy rule can reuse them for every crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name -> the modules of the same crate it names (`crate::m`, `crate::{m, n}`,
/// `super::m` from a nested file), from the `.rs` files under `src`. A file's unit tests
/// (everything from a line starting `#[cfg(test)]`) and comments are left out; paths
/// through a re-export at the crate root (`crate::Name`) are resolved through
/// `lib.rs`'s `pub use m::Name` lines.
pub fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = BTreeMap::new();
    collect(src, src, &mut files);
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let reexports = files
        .get("lib")
        .map(|t| root_reexports(t))
        .unwrap_or_default();
    let mut graph = BTreeMap::new();
    for (name, text) in &files {
        if name == "lib" {
            continue;
        }
        let mut deps = BTreeSet::new();
        for dep in crate_paths(&code_of(text)) {
            let target = if modules.contains(&dep) {
                Some(dep)
            } else {
                reexports.get(&dep).cloned()
            };
            if let Some(t) = target {
                // `image/apply.rs` naming `crate::image` is the module naming itself.
                let top = |m: &str| m.split('/').next().unwrap_or(m).to_string();
                if top(&t) != top(name) {
                    deps.insert(top(&t));
                }
            }
        }
        let entry: &mut BTreeSet<String> = graph
            .entry(name.split('/').next().unwrap_or(name).to_string())
            .or_default();
        entry.extend(deps);
    }
    graph
}

fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(root).unwrap_or(&p).with_extension("");
            let name = rel.to_string_lossy().trim_end_matches("/mod").to_string();
            out.insert(name, std::fs::read_to_string(&p).unwrap_or_default());
        }
    }
}

/// The text without comments and without the unit-test module (from `#[cfg(test)]`).
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        let code = match line.find("//") {
            Some(k) => &line[..k],
            None => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The first path segment after each `crate::` (both `crate::m::x` and the members of
/// `crate::{m, n::x}`).
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = code;
    while let Some(k) = rest.find("crate::") {
        let after = &rest[k + "crate::".len()..];
        let before_ok = rest[..k]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        if before_ok {
            if let Some(group) = after.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for part in group[..end].split(',') {
                    let id = ident(part.trim());
                    if !id.is_empty() {
                        out.push(id);
                    }
                }
            } else {
                let id = ident(after);
                if !id.is_empty() {
                    out.push(id);
                }
            }
        }
        rest = after;
    }
    out
}

/// `pub use m::{A, B}` / `pub use m::A` / `pub use m::A as B` lines of `lib.rs`: the
/// name at the root -> the module defining it.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in code_of(lib).lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let rest = rest.trim_end_matches(';');
        let Some((module, names)) = rest.split_once("::") else {
            continue;
        };
        let names = names.trim_start_matches('{').trim_end_matches('}');
        for n in names.split(',') {
            let n = n.trim();
            let exported = n.rsplit(" as ").next().unwrap_or(n).trim();
            if !exported.is_empty() {
                out.insert(exported.to_string(), module.to_string());
            }
        }
    }
    out
}

/// The cycles of `graph`: its strongly connected components of more than one module
/// (and modules naming themselves), each sorted, found with Tarjan's algorithm.
pub fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on_stack.insert(v);
            let graph = self.graph;
            for w in graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                let self_loop = graph.get(v).is_some_and(|d| d.contains(v));
                if comp.len() > 1 || self_loop {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out.sort();
    t.out
}

#[test]
fn elf_loader_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(graph.len() >= 10, "expected the crate's modules: {graph:?}");
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "module cycles in elf-loader/src: {found:?}\ngraph: {graph:#?}"
    );
}

#[test]
fn the_cycle_check_fails_on_a_cyclic_tree() {
    let dir = std::env::temp_dir().join(format!("elf-loader-modgraph-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("lib.rs"),
        "//! root\nmod a;\nmod b;\nmod c;\npub use c::Thing;\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("a.rs"),
        "use crate::b::f;\n// crate::c in a comment\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.rs"),
        "use crate::{a::g, c};\n#[cfg(test)]\nmod tests { use crate::c::x; }\n",
    )
    .unwrap();
    std::fs::write(dir.join("c.rs"), "fn f() -> crate::Thing { todo() }\n").unwrap();
    let graph = module_graph(&dir);
    assert_eq!(cycles(&graph), vec![vec!["a".to_string(), "b".to_string()]]);
    assert!(
        graph["a"].contains("b") && !graph["a"].contains("c"),
        "{graph:?}"
    );
    // `crate::Thing` is `c`'s own re-export: no edge to itself.
    assert!(graph["c"].is_empty(), "{graph:?}");
    // Breaking the cycle clears the report.
    std::fs::write(dir.join("b.rs"), "use crate::c;\n").unwrap();
    assert!(cycles(&module_graph(&dir)).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}
