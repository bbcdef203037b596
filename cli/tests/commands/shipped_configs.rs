//! The shipped Envoy configurations are outputs of `upcheck envoy --static` (the single-file shape,
//! which shows the whole deployment in one file and runs wherever it is copied) from the
//! operators' Caddy configuration (`config/caddy.json`): `config/envoy.yaml` in host routing, the
//! default, and `config/envoy-simple.yaml` in cluster routing. A hand edit to either, or a change to the
//! command, fails here until the files are written again with the command this prints.

use crate::common;

use std::fs;

use common::{stderr, upcheck, workspace};
use upcheck_cli::caddy;
use upcheck_cli::deployment::plan;
use upcheck_policy::{Config, RoutingMode};

/// Checks that `upcheck args`, run at the workspace root, writes `file` as committed.
fn written_as_committed(file: &str, args: &[&str]) {
    let output = upcheck(&workspace(), args, b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let written = String::from_utf8(output.stdout).expect("utf-8");
    let committed = fs::read_to_string(workspace().join(file)).expect("the committed file");
    if written != committed {
        let (line, (was, now)) = committed
            .lines()
            .chain(std::iter::repeat(""))
            .zip(written.lines().chain(std::iter::repeat("")))
            .enumerate()
            .find(|(_, (was, now))| was != now)
            .unwrap_or((0, ("", "")));
        panic!(
            "{file} is not what `upcheck {args}` writes; first difference at line {}:\n  \
             committed: {was}\n  written:   {now}\nwrite it again: cargo run -p upcheck-cli -- \
             {args} -o {file}",
            line + 1,
            args = args.join(" "),
        );
    }
}

#[test]
fn config_envoy_yaml_is_what_upcheck_envoy_writes_from_the_operators_caddy_configuration() {
    written_as_committed(
        "config/envoy.yaml",
        &["envoy", "--from-caddy", "config/caddy.json", "--static"],
    );
}

#[test]
fn config_envoy_simple_yaml_is_the_same_in_cluster_routing() {
    written_as_committed(
        "config/envoy-simple.yaml",
        &[
            "envoy",
            "--from-caddy",
            "config/caddy.json",
            "--routing",
            "cluster",
            "--static",
        ],
    );
}

#[test]
fn the_plugin_configurations_written_from_caddy_are_the_committed_examples() {
    let caddy = fs::read(workspace().join("config/caddy.json")).expect("config/caddy.json");
    let source = caddy::import(&caddy).unwrap_or_else(|e| panic!("{e}"));
    for (routing, example) in [
        (RoutingMode::Host, "config/upcheck-host.json"),
        (RoutingMode::Cluster, "config/upcheck.json"),
    ] {
        let deployment = plan(&source, Some(routing)).unwrap_or_else(|e| panic!("{e}"));
        let text = fs::read(workspace().join(example)).expect("the example");
        let committed = Config::parse(&text).unwrap_or_else(|e| panic!("{example}: {e}"));
        assert_eq!(deployment.config, committed, "{example}");
    }
}
