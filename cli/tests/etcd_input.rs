//! `upcheck envoy --etcd ADDR:PORT[,…]`: the plugin configuration gets its `fleet` object and the
//! Envoy configuration the etcd cluster, never one users are routed to; `upcheck check` reads the
//! `fleet` object as the module does.

mod common;

use common::{refused, stderr, upcheck, workspace};
use upcheck_policy::Config;

const TWO: &str = r#"{"upstreams": [{"name": "app1", "address": "127.0.0.1:3001"},
                                    {"name": "app2", "address": "127.0.0.1:3002"}]}"#;

/// The plugin configurations embedded in `yaml` (the traffic listener's, the status page's):
/// each the block under a `value: |` line.
fn embedded(yaml: &str) -> Vec<Config> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != "value: |" {
            continue;
        }
        let indent = |l: &str| l.len() - l.trim_start().len();
        let depth = indent(line);
        let block: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| indent(l) > depth)
            .copied()
            .collect();
        found.push(Config::parse(block.join("\n").as_bytes()).expect("the module reads it"));
    }
    found
}

fn written(args: &[&str], input: &str) -> String {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("input.json"), input).expect("written");
    let output = upcheck(dir.path(), args, b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    String::from_utf8(output.stdout).expect("utf-8")
}

#[test]
fn etcd_members_become_a_cluster_of_their_own_and_the_fleet_object_names_it() {
    let yaml = written(
        &[
            "envoy",
            "input.json",
            "--etcd",
            "127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379",
        ],
        TWO,
    );
    let configs = embedded(&yaml);
    assert_eq!(configs.len(), 2, "the traffic and status page listeners");
    for config in &configs {
        let fleet = config.fleet.as_ref().expect("a fleet object");
        assert_eq!(fleet.cluster, "etcd");
        assert_eq!(fleet.prefix, "upcheck");
    }
    assert!(yaml.contains("- name: etcd\n"), "{yaml}");
    for port in [2379, 22379, 32379] {
        assert!(
            yaml.contains(&format!("{{ address: 127.0.0.1, port_value: {port} }}")),
            "{yaml}"
        );
    }
    assert!(yaml.contains("path: /health"), "{yaml}");
}

#[test]
fn the_inputs_own_fleet_object_is_kept_with_its_cluster_named_by_it() {
    let input = r#"{"upstreams": [{"name": "app1", "address": "127.0.0.1:3001"}],
                    "fleet": {"cluster": "store", "prefix": "shop/web", "lease_ttl": "4s"}}"#;
    let yaml = written(&["envoy", "input.json", "--etcd", "127.0.0.1:2379"], input);
    let fleet = embedded(&yaml)[0].fleet.clone().expect("fleet");
    assert_eq!(
        (fleet.cluster.as_str(), fleet.prefix.as_str()),
        ("store", "shop/web")
    );
    assert!(yaml.contains("- name: store\n"), "{yaml}");
}

#[test]
fn without_etcd_the_written_configuration_has_no_fleet_and_no_etcd_cluster() {
    let yaml = written(&["envoy", "input.json"], TWO);
    assert!(embedded(&yaml).iter().all(|c| c.fleet.is_none()));
    assert!(!yaml.contains("etcd"), "{yaml}");
}

#[test]
fn a_backend_whose_cluster_is_etcds_is_refused_since_users_would_reach_etcd() {
    let input =
        r#"{"upstreams": [{"name": "app1", "cluster": "etcd", "address": "127.0.0.1:3001"}]}"#;
    let message = refused(
        &[
            "envoy",
            "input.json",
            "--routing",
            "cluster",
            "--etcd",
            "127.0.0.1:2379",
        ],
        input,
    );
    assert_eq!(
        message,
        "upstreams[0].cluster: \"etcd\" is etcd's cluster (fleet.cluster); users must never be routed to it"
    );
}

#[test]
fn an_etcd_member_given_twice_is_refused() {
    let message = refused(
        &[
            "envoy",
            "input.json",
            "--etcd",
            "127.0.0.1:2379,127.0.0.1:2379",
        ],
        TWO,
    );
    assert_eq!(message, "--etcd: 127.0.0.1:2379 is listed twice");
}

#[test]
fn check_reads_a_fleet_object_and_refuses_a_bad_one_naming_the_field() {
    let good = r#"{"upstreams": [{"name": "app1"}], "fleet": {"cluster": "etcd"}}"#;
    let output = upcheck(&workspace(), &["check", "-"], good.as_bytes());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let effective = String::from_utf8(output.stdout.clone()).expect("utf-8");
    assert!(effective.contains(r#""lease_ttl": "6s""#), "{effective}");
    assert!(
        stderr(&output).contains(
            "probe duties shared with the other balancers through etcd (cluster etcd, prefix \
             upcheck, lease 6.0s)"
        ),
        "{}",
        stderr(&output)
    );
    let bad =
        r#"{"upstreams": [{"name": "app1"}], "fleet": {"cluster": "etcd", "lease_ttl": "1s"}}"#;
    let output = upcheck(&workspace(), &["check", "-"], bad.as_bytes());
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output)
            .contains("fleet.lease_ttl: must be at least 2s (etcd's shortest lease), got 1s"),
        "{}",
        stderr(&output)
    );
}
