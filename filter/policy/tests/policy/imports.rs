//! The core's modules import one another without a cycle, so each can be read, and changed,
//! knowing only what lies below it; and so do the modules of every other crate of the workspace.
//!
//! The graph is read from the source at test time, one per crate root (`src/lib.rs`,
//! `src/main.rs`, `src/bin/*.rs`, a target's `path`): its top-level modules are the `mod x;` the
//! root declares, a file belongs to the top-level module it is (`pool.rs`, `pool/mod.rs`) or lies
//! in (`pool/refresh.rs`), and every `crate::` path in its code (not its comments, and not its
//! `#[cfg(test)]` module, inline or in a file of its own, whose tests may drive the whole crate) is
//! an edge to the module the path's first segment names. `super::` stays inside a module, and the
//! root, which declares and re-exports (or, for a binary, runs `main`), is not a module. A crate
//! with a library and binaries has a tree per root: a binary's `crate::` names its own modules.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The `mod x;` declarations of a file (modules in files of their own), each with whether it is
/// a `#[cfg(test)]` module.
fn declarations(text: &str) -> Vec<(String, bool)> {
    let mut found = Vec::new();
    let mut test = false;
    for line in text.lines() {
        let line = line.find("//").map_or(line, |at| &line[..at]).trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with("#[") {
            test |= line == "#[cfg(test)]";
            continue;
        }
        let item = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
            .unwrap_or(line);
        if let Some(name) = item.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            found.push((name.trim().to_owned(), test));
        }
        test = false;
    }
    found
}

/// Every `.rs` file under `dir`, sorted.
fn files_under(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_under(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// Where the modules a module's file declares live: beside it for a `mod.rs`, else in the
/// directory of its name.
fn children_dir(file: &Path) -> PathBuf {
    let dir = file.parent().expect("a file lies in a directory");
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a UTF-8 file name");
    if stem == "mod" {
        dir.to_owned()
    } else {
        dir.join(stem)
    }
}

/// The top-level modules of the tree of the crate root `root`, each with its files and their
/// text: `x.rs`, `x/mod.rs` and what lies under `x/` beside the root, for each `mod x;` it
/// declares; test modules in files of their own left out.
fn tree(root: &Path) -> BTreeMap<String, Vec<(PathBuf, String)>> {
    let read = |path: &Path| fs::read_to_string(path).expect("a source file is readable");
    let dir = root.parent().expect("a crate root lies in a directory");
    let mut modules = BTreeMap::new();
    for (module, test) in declarations(&read(root)) {
        if test {
            continue;
        }
        let mut paths = Vec::new();
        let file = dir.join(format!("{module}.rs"));
        if file.is_file() {
            paths.push(file);
        }
        files_under(&dir.join(&module), &mut paths);
        let texts: Vec<(PathBuf, String)> =
            paths.into_iter().map(|p| (p.clone(), read(&p))).collect();
        let tests: Vec<PathBuf> = texts
            .iter()
            .flat_map(|(path, text)| {
                let children = children_dir(path);
                declarations(text)
                    .into_iter()
                    .filter(|(_, test)| *test)
                    .map(move |(name, _)| children.join(name))
            })
            .collect();
        let kept = texts
            .into_iter()
            .filter(|(path, _)| {
                !tests
                    .iter()
                    .any(|t| path.starts_with(t) || *path == t.with_extension("rs"))
            })
            .collect();
        modules.insert(module, kept);
    }
    modules
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

/// The import graph between the top-level modules of the tree of the crate root `root` (a name
/// that is no module is an import from the crate root).
fn graph_of(root: &Path) -> Graph {
    let mut graph = Graph::new();
    for (module, files) in tree(root) {
        let edges = graph.entry(module.clone()).or_default();
        for (_, text) in files {
            edges.extend(imports(&code(&text)).into_iter().filter(|m| *m != module));
        }
    }
    graph
}

/// The core's import graph.
fn graph() -> Graph {
    graph_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
}

/// The workspace's crates (`[workspace] members` of the root `Cargo.toml`), each with the crate
/// roots it has: `src/lib.rs`, `src/main.rs`, `src/bin/*.rs`, `src/bin/*/main.rs` and the `path`
/// of a `[lib]` or `[[bin]]` target, as `member/path` and the root's path.
fn workspace_roots() -> Vec<(String, PathBuf)> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest =
        fs::read_to_string(workspace.join("Cargo.toml")).expect("the workspace's Cargo.toml");
    let members = manifest
        .lines()
        .find_map(|line| line.trim().strip_prefix("members = "))
        .expect("the workspace lists its members on one line");
    let mut roots = Vec::new();
    for member in members.split('"').skip(1).step_by(2) {
        let dir = workspace.join(member);
        let mut found: BTreeSet<PathBuf> = ["src/lib.rs", "src/main.rs"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let targets = fs::read_to_string(dir.join("Cargo.toml")).expect("a member's Cargo.toml");
        found.extend(targets.lines().filter_map(|line| {
            let path = line.trim().strip_prefix("path = \"")?.strip_suffix('"')?;
            path.ends_with(".rs").then(|| PathBuf::from(path))
        }));
        if let Ok(bins) = fs::read_dir(dir.join("src/bin")) {
            for bin in bins {
                let bin = bin.expect("a directory entry").path();
                let name = bin.file_name().expect("an entry has a name");
                let main = Path::new("src/bin").join(name);
                found.insert(if bin.is_dir() {
                    main.join("main.rs")
                } else {
                    main
                });
            }
        }
        for root in found {
            if dir.join(&root).is_file() {
                roots.push((format!("{member}/{}", root.display()), dir.join(root)));
            }
        }
    }
    roots
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

/// One cycle through the first module of `component` (a strongly connected component of
/// `graph`), the shortest, from that module back to it.
fn a_cycle_through(graph: &Graph, component: &[String]) -> Vec<String> {
    let start = component.first().expect("a component has a module");
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start.as_str()]);
    while let Some(v) = queue.pop_front() {
        for u in graph.get(v).into_iter().flatten() {
            if u == start {
                let mut path = vec![start.clone()];
                let mut at = v;
                path.push(at.to_owned());
                while let Some(&before) = came_from.get(at) {
                    path.push(before.to_owned());
                    at = before;
                }
                path.reverse();
                return path;
            }
            if component.contains(u) && !came_from.contains_key(u.as_str()) && u != start {
                came_from.insert(u, v);
                queue.push_back(u);
            }
        }
    }
    panic!("{component:?} is no cycle of {graph:?}")
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
    let graph = made_up;
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

#[test]
fn every_crate_of_the_workspace_imports_between_its_modules_without_a_cycle() {
    let roots = workspace_roots();
    let names: Vec<&str> = roots.iter().map(|(name, _)| name.as_str()).collect();
    assert!(
        [
            "filter/src/lib.rs",
            "filter/policy/src/lib.rs",
            "cli/src/bin/upcheck/main.rs"
        ]
        .iter()
        .all(|root| names.contains(root)),
        "the workspace's crate roots: {names:?}"
    );
    let mut found = Vec::new();
    for (name, root) in &roots {
        let graph = graph_of(root);
        for component in cycles(&graph) {
            found.push(format!(
                "{name}: {} import one another ({})",
                component.join(", "),
                a_cycle_through(&graph, &component).join(" → ")
            ));
        }
    }
    for cycle in &found {
        println!("{cycle}");
    }
    assert!(
        found.is_empty(),
        "modules that import one another, in a cycle, by crate root:\n  {}",
        found.join("\n  ")
    );
}

/// A graph of the edges given (each module on either end in it).
fn made_up(edges: &[(&str, &str)]) -> Graph {
    let mut g = Graph::new();
    for (a, b) in edges {
        g.entry(a.to_string()).or_default().insert(b.to_string());
        g.entry(b.to_string()).or_default();
    }
    g
}

#[test]
fn the_cycle_finder_passes_a_dag_and_names_each_cycle_once_with_a_path_around_it() {
    let diamond = made_up(&[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]);
    assert!(cycles(&diamond).is_empty());

    let two = made_up(&[
        ("a", "b"),
        ("b", "a"),
        ("b", "c"),
        ("c", "d"),
        ("d", "e"),
        ("e", "c"),
        ("e", "f"),
    ]);
    let mut found = cycles(&two);
    found.sort();
    assert_eq!(found, [vec!["a", "b"], vec!["c", "d", "e"]]);
    assert_eq!(a_cycle_through(&two, &found[0]), ["a", "b", "a"]);
    assert_eq!(a_cycle_through(&two, &found[1]), ["c", "d", "e", "c"]);

    // The shortest way round, when a component has several.
    let several = made_up(&[("a", "b"), ("b", "c"), ("c", "a"), ("a", "c")]);
    let found = cycles(&several);
    assert_eq!(found, [vec!["a", "b", "c"]]);
    assert_eq!(a_cycle_through(&several, &found[0]), ["a", "c", "a"]);
}

#[test]
fn a_binary_reads_its_crate_paths_within_its_own_tree_and_test_modules_are_left_out() {
    let dir = std::env::temp_dir().join(format!("upcheck-imports-{}", std::process::id()));
    let files = [
        (
            "lib.rs",
            "pub mod a;\n// mod z;\nmod b;\n#[cfg(test)]\nmod t;\n",
        ),
        ("main.rs", "mod c;\nfn main() { crate::c::run() }\n"),
        ("a.rs", "use crate::b::X;\n"),
        (
            "b/mod.rs",
            "mod inner;\n#[cfg(test)]\npub(crate) mod tests;\n",
        ),
        ("b/inner.rs", "pub fn f() { crate::a::g() }\n"),
        ("b/tests.rs", "use crate::t::T;\n"),
        ("t.rs", "use crate::a::A;\n"),
        ("c.rs", "use crate::a::A;\npub fn run() {}\n"),
    ];
    for (path, text) in files {
        let path = dir.join("src").join(path);
        fs::create_dir_all(path.parent().expect("a directory")).expect("a temporary directory");
        fs::write(path, text).expect("a temporary file");
    }
    let library = graph_of(&dir.join("src/lib.rs"));
    let binary = graph_of(&dir.join("src/main.rs"));
    fs::remove_dir_all(&dir).expect("the temporary directory is removed");

    assert_eq!(library, made_up(&[("a", "b"), ("b", "a")]));
    assert_eq!(cycles(&library), [vec!["a", "b"]]);
    // `crate::a` in the binary's tree is a name its root would define, not the library's module.
    let only_c = Graph::from([("c".to_owned(), BTreeSet::from(["a".to_owned()]))]);
    assert_eq!(binary, only_c);
    assert!(cycles(&binary).is_empty());
    assert_eq!(
        declarations("pub mod a;\n#[cfg(test)]\nmod t;\nmod inline {\n}\n"),
        [("a".to_owned(), false), ("t".to_owned(), true)]
    );
}
