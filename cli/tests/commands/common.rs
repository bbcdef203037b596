//! What the tests of the `upcheck` binary share: the workspace, running the binary, and checking
//! that a refused input left nothing behind.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The workspace root, where the documented commands run (`config/caddy.json` as written).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `upcheck args` in `dir`, with `stdin` as its standard input.
pub fn upcheck(dir: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_upcheck"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("upcheck runs");
    child
        .stdin
        .take()
        .expect("a pipe")
        .write_all(stdin)
        .expect("stdin written");
    child.wait_with_output().expect("upcheck finishes")
}

/// The names of the files in `dir`, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{} listed: {e}", dir.display()))
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// Standard error, as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `upcheck args -o envoy.yaml` in a directory holding `input.json` (with `input`) and an
/// older `envoy.yaml`, and checks the input was refused as bad input: exit status 2, the older
/// file as it was, no other file (no temporary one), nothing on standard output. Returns the
/// message, without `upcheck: input.json: ` and the newline.
pub fn refused(args: &[&str], input: &str) -> String {
    let dir = tempfile::tempdir().expect("a temporary directory");
    fs::write(dir.path().join("input.json"), input).expect("input written");
    fs::write(
        dir.path().join("envoy.yaml"),
        "# the running configuration\n",
    )
    .expect("old file");
    let mut all = args.to_vec();
    all.extend(["-o", "envoy.yaml"]);
    let output = upcheck(dir.path(), &all, b"");
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(output.stdout.is_empty());
    assert_eq!(
        fs::read_to_string(dir.path().join("envoy.yaml")).expect("old file"),
        "# the running configuration\n"
    );
    assert_eq!(fs::read_dir(dir.path()).expect("listed").count(), 2);
    let message = message
        .strip_prefix("upcheck: input.json: ")
        .unwrap_or_else(|| panic!("the message names the input: {message}"));
    message.strip_suffix('\n').expect("one line").to_owned()
}
