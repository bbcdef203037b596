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
