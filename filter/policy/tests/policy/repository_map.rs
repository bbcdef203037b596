//! The repository map (docs/architecture.md) against the code: every crate of the workspace and
//! every module of the core and of the adapter has its row, and every row names one that exists,
//! so the map cannot drift from what it maps.

const MAP: &str = include_str!("../../../../docs/architecture.md");
const WORKSPACE: &str = include_str!("../../../../Cargo.toml");
const CORE: &str = include_str!("../../src/lib.rs");
const ADAPTER: &str = include_str!("../../../src/lib.rs");

/// The first backticked word of each row of the table under the heading that starts with
/// `heading`, a trailing `/` (a directory module) dropped.
fn rows(heading: &str) -> Vec<String> {
    let section = MAP
        .split("\n## ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("no section `## {heading}` in docs/architecture.md"));
    section
        .lines()
        .take_while(|line| !line.starts_with("### "))
        .filter(|line| line.starts_with("| `"))
        .filter_map(|line| line.split('`').nth(1))
        .map(|name| name.trim_end_matches('/').to_owned())
        .collect()
}

/// The modules a crate root declares (`mod x;` or `pub mod x;`).
fn modules(root: &str) -> Vec<String> {
    root.lines()
        .filter_map(|line| {
            let line = line.trim().strip_prefix("pub ").unwrap_or(line.trim());
            line.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_owned)
        })
        .collect()
}

fn same(mapped: Vec<String>, code: Vec<String>, what: &str) {
    let missing: Vec<&String> = code.iter().filter(|m| !mapped.contains(m)).collect();
    let stale: Vec<&String> = mapped.iter().filter(|m| !code.contains(m)).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md, {what}: no row for {missing:?}; rows for what does not exist: {stale:?}"
    );
}

#[test]
fn every_crate_of_the_workspace_has_its_row_in_the_map_and_every_row_is_a_crate() {
    let members = WORKSPACE
        .lines()
        .find_map(|line| line.strip_prefix("members = "))
        .expect("the workspace lists its members");
    let mut members: Vec<String> = members
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    // `bench/floor` shares the bench's row; `config/` holds configurations, not a crate.
    members.retain(|m| m != "bench/floor");
    let mut mapped = rows("Crates");
    mapped.retain(|m| m != "config");
    same(mapped, members, "Crates");
}

#[test]
fn every_module_of_the_core_has_its_row_in_the_map_and_every_row_is_a_module() {
    // `config` is the configuration crate, re-exported by the core.
    let mut mapped = rows("The core");
    mapped.retain(|m| m != "config");
    same(mapped, modules(CORE), "the core");
}

#[test]
fn every_module_of_the_adapter_has_its_row_in_the_map_and_every_row_is_a_module() {
    same(rows("The adapter"), modules(ADAPTER), "the adapter");
}

/// The modules a directory module declares in `src/<module>/mod.rs`, test modules left out.
fn submodules(module: &str) -> Vec<String> {
    let path = format!("{}/src/{module}/mod.rs", env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut found = Vec::new();
    let mut for_tests = false;
    for line in source.lines().map(str::trim) {
        if line.starts_with("#[cfg(test)]") {
            for_tests = true;
            continue;
        }
        let declared = line
            .strip_prefix("pub ")
            .or_else(|| line.strip_prefix("pub(crate) "))
            .unwrap_or(line)
            .strip_prefix("mod ")
            .and_then(|rest| rest.strip_suffix(';'));
        if let (Some(name), false) = (declared, for_tests) {
            found.push(name.to_owned());
        }
        for_tests = false;
    }
    found
}

/// The row of the core's table for directory module `module` (`pool/`).
fn core_row(module: &str) -> String {
    let section = MAP
        .split("\n## ")
        .find(|s| s.starts_with("The core"))
        .expect("the map has the core's section");
    let start = format!("| `{module}/` |");
    section
        .lines()
        .find(|line| line.starts_with(&start))
        .unwrap_or_else(|| panic!("no row for `{module}/` in the core's table"))
        .to_owned()
}

#[test]
fn every_module_inside_a_directory_module_of_the_core_is_named_in_its_row() {
    for module in ["events", "pool", "etcd", "outlier", "page"] {
        let row = core_row(module);
        let unnamed: Vec<String> = submodules(module)
            .into_iter()
            .filter(|sub| !row.contains(&format!("`{sub}`")))
            .collect();
        assert!(
            unnamed.is_empty(),
            "docs/architecture.md, the row of `{module}/` names none of {unnamed:?}"
        );
    }
}

/// The pool's entry points: every `pub fn` of `src/pool/` that takes `&mut self`.
fn entry_points() -> Vec<String> {
    let dir = format!("{}/src/pool", env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("src/pool is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            continue; // a module's tests (`balancers/`), never an entry point
        }
        let source = std::fs::read_to_string(&path).expect("a source file is readable");
        // A signature may run over several lines: the name, then everything to its body.
        for (at, _) in source.match_indices("    pub fn ") {
            let rest = &source[at + "    pub fn ".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let signature = rest.split('{').next().unwrap_or_default();
            if signature.contains("&mut self") {
                found.push(name);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn the_map_lists_every_entry_point_of_the_pool_and_nothing_else() {
    let section = MAP
        .split("\n### The pool")
        .nth(1)
        .expect("the map has a section on the pool");
    let mut mapped: Vec<String> = section
        .lines()
        .take_while(|line| !line.starts_with("## "))
        .filter(|line| line.starts_with("| `"))
        .filter_map(|line| line.split('`').nth(1))
        .map(str::to_owned)
        .collect();
    mapped.sort();
    same(mapped, entry_points(), "the pool's entry points");
}
