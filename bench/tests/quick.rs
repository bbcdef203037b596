//! The benchmark runs: `upcheck-bench --quick` goes through every part once, briefly, against
//! the module as built, and prints a row for each. A figure is never checked (on a shared
//! machine a quick run measures nothing); a part that fails, hangs past its bounds or prints
//! nothing is. Needs Envoy (`UPCHECK_ENVOY`), wrk, `target/upcheck.wasm` and `target/floor.wasm`:
//! `make bench-quick` provides them.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_quick_benchmark_runs_every_part_and_prints_a_row_for_each() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let envoy = std::env::var("UPCHECK_ENVOY")
        .expect("UPCHECK_ENVOY names the Envoy binary (make bench-quick sets it)");
    let output = Command::new(env!("CARGO_BIN_EXE_upcheck-bench"))
        .current_dir(&root)
        .args(["--quick", "--envoy", &envoy])
        .args([
            "--upcheck",
            "target/upcheck.wasm",
            "--floor",
            "target/floor.wasm",
        ])
        .args(["--out", "target/bench-quick"])
        .output()
        .expect("upcheck-bench starts");
    let table = String::from_utf8_lossy(&output.stdout);
    print!("{table}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "upcheck-bench --quick failed");
    // Rows are `| item | measure | …`: items 1 (sizes) to 7 (start-up), each part's own.
    for item in 1..=7 {
        assert!(
            table
                .lines()
                .any(|row| row.starts_with(&format!("| {item} |"))),
            "no row of item {item} in the table"
        );
    }
    for measure in [
        "fuel per request",
        "memory: Envoy's resident set",
        "req/s b/a",
    ] {
        assert!(table.contains(measure), "no `{measure}` row in the table");
    }
}
