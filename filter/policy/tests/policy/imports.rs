//! The core's modules import one another without a cycle, so each can be read, and changed,
//! knowing only what lies below it.
//!
//! The graph is read from the source at test time: a file under `src/` belongs to the top-level
//! module it is (`pool.rs`) or lies in (`pool/refresh.rs`), and every `crate::` path in its code
//! (not its comments, and not its `#[cfg(test)]` module, whose tests may drive the whole crate)
//! is an edge to the module the path's first segment names. `super::` stays inside a module, and
//! `lib.rs`, which only declares and re-exports, is the root, not a module.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `dir`, with the top-level module it belongs to (`None` for `lib.rs`).
fn sources(dir: &Path, module: Option<&str>, found: &mut Vec<(Option<String>, String)>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("src is readable")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 file name")
            .to_owned();
        let owner = module.map(str::to_owned).or_else(|| Some(stem.clone()));
        if path.is_dir() {
            sources(&path, owner.as_deref(), found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = fs::read_to_string(&path).expect("a source file is readable");
            let owner = owner.filter(|o| module.is_some() || o != "lib");
            found.push((owner, text));
        }
    }
}

/// The code of a file: comments dropped, and the `#[cfg(test)]` module cut off.
fn code(text: &str) -> String {
    let mut kept = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        let is_test_module = trimmed == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "));
        if is_test_module {
            break;
        }
        let line = line.find("//").map_or(line, |at| &line[..at]);
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// The first segments of the `crate::` paths in `code` (the top-level modules they name, or a
/// name lib.rs re-exports), groups (`crate::{a::X, b}`) included.
fn imports(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let Some(group) = rest.strip_prefix('{') else {
            names.insert(ident(rest));
            continue;
        };
        for item in split_top_level(group) {
            names.insert(ident(item));
        }
    }
    names.remove("");
    names
}

/// The items of a `{…}` group at its own level (the text runs on past the closing brace).
fn split_top_level(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// The crate's import graph between its top-level modules (a name that is no module is an
/// import from the crate root).
fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    sources(&src, None, &mut found);
    let mut graph = Graph::new();
    for (module, text) in found {
        let Some(module) = module else { continue };
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(imports(&code(&text)).into_iter().filter(|m| *m != module));
    }
    graph
}

/// The strongly connected components of more than one module (each a cycle), by Tarjan.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(w: &mut Walk<'g>, v: &'g str) {
        let i = w.index.len();
        w.index.insert(v, i);
        w.low.insert(v, i);
        w.stack.push(v);
        for u in w.graph.get(v).into_iter().flatten() {
            let u = u.as_str();
            if !w.index.contains_key(u) {
                visit(w, u);
                let low = w.low[v].min(w.low[u]);
                w.low.insert(v, low);
            } else if w.stack.contains(&u) {
                let low = w.low[v].min(w.index[u]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let mut component = Vec::new();
            while let Some(u) = w.stack.pop() {
                component.push(u.to_owned());
                if u == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                w.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            visit(&mut walk, v);
        }
    }
    walk.found
}

#[test]
fn the_core_modules_import_one_another_without_a_cycle() {
    let graph = graph();
    assert!(graph.contains_key("pool") && graph["pool"].contains("guard"));
    let cycles = cycles(&graph);
    assert!(
        cycles.is_empty(),
        "modules that import one another, in a cycle: {cycles:?} (graph: {graph:#?})"
    );
}

#[test]
fn every_module_imports_from_the_module_that_defines_a_name_not_from_the_crate_root() {
    let graph = graph();
    let upward: Vec<(&String, &String)> = graph
        .iter()
        .flat_map(|(module, names)| names.iter().map(move |name| (module, name)))
        .filter(|(_, name)| !graph.contains_key(*name))
        .collect();
    assert!(upward.is_empty(), "imports from lib.rs: {upward:?}");
}

#[test]
fn a_cycle_is_found_and_a_chain_is_not() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert!(cycles(&graph(&[("a", "b"), ("b", "c")])).is_empty());
    assert_eq!(
        cycles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        vec![vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]]
    );
}

#[test]
fn imports_are_read_from_paths_and_groups_but_not_comments_or_tests() {
    let source = "use crate::a::X;\nuse crate::{b::Y, c::{Z, W}, d};\n// crate::e::V\n\
                  fn f() { crate::g::h() }\n#[cfg(test)]\nmod tests {\n    use crate::i::J;\n}\n";
    let found: Vec<String> = imports(&code(source)).into_iter().collect();
    assert_eq!(found, ["a", "b", "c", "d", "g"]);
    let root: Vec<String> = imports("use crate::{Pool, time::Time};")
        .into_iter()
        .collect();
    assert_eq!(root, ["Pool", "time"]);
}
