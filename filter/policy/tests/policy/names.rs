//! One name, one type, in the module's crates (the adapter, the configuration and the core): a
//! reader who meets `Change` or `Stream` in any file of upcheck.wasm knows which it is.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("a source directory is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The struct, enum and trait names `source` defines (associated types are not definitions).
fn defined(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let mut word = words.next()?;
            if word.starts_with("pub") {
                word = words.next()?;
            }
            if !matches!(word, "struct" | "enum" | "trait") {
                return None;
            }
            let name: String = words
                .next()?
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            Some(name)
        })
        .collect()
}

#[test]
fn names_are_read_from_definitions_only() {
    let source = "pub struct A;\npub(crate) enum B {}\ntrait C {}\n    type D = u8;\n// struct E\nlet struct_f = 1;\n";
    assert_eq!(defined(source), ["A", "B", "C"]);
}

#[test]
fn no_struct_enum_or_trait_name_is_defined_twice_in_the_modules_crates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for dir in ["filter/src", "filter/config/src", "filter/policy/src"] {
        sources(&root.join(dir), &mut files);
    }
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let source = fs::read_to_string(file).expect("a source file is readable");
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for name in defined(&source) {
            by_name.entry(name).or_default().push(shown.clone());
        }
    }
    let twice: Vec<String> = by_name
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(twice.is_empty(), "defined more than once: {twice:#?}");
}
