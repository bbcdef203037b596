//! `upcheck envoy --etcd ADDR:PORT[,…]`: the plugin configuration gets its `fleet` object and the
//! Envoy configuration the etcd cluster, never one users are routed to; `upcheck check` reads the
//! `fleet` object as the module does. TLS to etcd (`--etcd-ca`, `--etcd-cert`, `--etcd-key`,
//! `--etcd-sni`) is the etcd cluster's transport socket; each flag given wrongly is refused by name.

use crate::common;

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

/// A file that reads as PEM, which is all `upcheck envoy` checks of a certificate or a key.
const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

#[test]
fn tls_to_etcd_becomes_the_clusters_transport_socket_with_the_files_at_absolute_paths() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("input.json"), TWO).expect("written");
    for file in ["ca.pem", "balancer.pem", "balancer.key"] {
        std::fs::write(dir.path().join(file), PEM).expect("written");
    }
    let output = upcheck(
        dir.path(),
        &[
            "envoy",
            "input.json",
            "--etcd",
            "127.0.0.1:2379,127.0.0.1:22379",
            "--etcd-ca",
            "ca.pem",
            "--etcd-cert",
            "balancer.pem",
            "--etcd-key",
            "balancer.key",
            "--etcd-sni",
            "localhost",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let yaml = String::from_utf8(output.stdout).expect("utf-8");
    let at = |file: &str| dir.path().join(file).display().to_string();
    for line in [
        "name: envoy.transport_sockets.tls".to_owned(),
        format!("trusted_ca: {{ filename: {} }}", at("ca.pem")),
        format!(
            "- certificate_chain: {{ filename: {} }}",
            at("balancer.pem")
        ),
        format!("private_key: {{ filename: {} }}", at("balancer.key")),
        "matcher: { exact: localhost }".to_owned(),
        "sni: localhost".to_owned(),
    ] {
        assert!(yaml.contains(&line), "{line:?} in {yaml}");
    }
    assert_eq!(
        yaml.matches("transport_socket:").count(),
        2,
        "etcd's only: its gateway's cluster and its watch's"
    );
    assert!(!yaml.contains("MIIB"), "the files are named, never copied");
}

#[test]
fn tls_flags_without_etcd_are_refused_naming_the_flag() {
    let message = refused(&["envoy", "input.json", "--etcd-ca", "ca.pem"], TWO);
    assert_eq!(
        message,
        "--etcd-ca: TLS to etcd needs etcd's members: add --etcd ADDR:PORT[,ADDR:PORT…]"
    );
}

#[test]
fn a_client_certificate_or_an_sni_without_the_ca_is_refused() {
    let etcd = ["envoy", "input.json", "--etcd", "127.0.0.1:2379"];
    for (flag, value) in [("--etcd-cert", "balancer.pem"), ("--etcd-sni", "localhost")] {
        let message = refused(&[&etcd[..], &[flag, value]].concat(), TWO);
        assert_eq!(
            message,
            format!(
                "{flag}: TLS to etcd needs the CA that signed the members' certificates: add \
                 --etcd-ca FILE"
            )
        );
    }
}

/// A file holding a PEM block, as a CA file.
fn pem_file() -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(file.path(), PEM).expect("written");
    file
}

/// `upcheck envoy` with one etcd member and `ca` as its CA.
fn with_ca(ca: &tempfile::NamedTempFile) -> [&str; 6] {
    let ca = ca.path().to_str().expect("UTF-8");
    [
        "envoy",
        "input.json",
        "--etcd",
        "127.0.0.1:2379",
        "--etcd-ca",
        ca,
    ]
}

#[test]
fn a_client_certificate_without_its_key_or_a_key_without_its_certificate_is_refused() {
    let ca = pem_file();
    let tls = with_ca(&ca);
    assert_eq!(
        refused(&[&tls[..], &["--etcd-cert", "balancer.pem"]].concat(), TWO),
        "--etcd-cert: the client certificate needs its private key: add --etcd-key FILE"
    );
    assert_eq!(
        refused(&[&tls[..], &["--etcd-key", "balancer.key"]].concat(), TWO),
        "--etcd-key: the private key needs its client certificate: add --etcd-cert FILE"
    );
}

#[test]
fn a_file_that_cannot_be_read_or_is_not_pem_is_refused_naming_its_flag() {
    let etcd = ["envoy", "input.json", "--etcd", "127.0.0.1:2379"];
    assert_eq!(
        refused(&[&etcd[..], &["--etcd-ca", "missing.pem"]].concat(), TWO),
        "--etcd-ca: missing.pem: cannot read it: No such file or directory (os error 2)"
    );
    let files = tempfile::tempdir().expect("a temporary directory");
    let (ca, cert, key) = (
        files.path().join("ca.pem"),
        files.path().join("balancer.pem"),
        files.path().join("balancer.key"),
    );
    std::fs::write(&ca, PEM).expect("written");
    std::fs::write(&cert, PEM).expect("written");
    std::fs::write(&key, "a secret that is not PEM").expect("written");
    let [ca, cert, key] = [&ca, &cert, &key].map(|p| p.to_str().expect("UTF-8").to_owned());
    let message = refused(
        &[
            &etcd[..],
            &["--etcd-ca", &ca, "--etcd-cert", &cert, "--etcd-key", &key],
        ]
        .concat(),
        TWO,
    );
    assert_eq!(
        message,
        format!("--etcd-key: {key}: not PEM (no -----BEGIN line); Envoy reads PEM files")
    );
    assert!(!message.contains("secret"));
    let message = refused(
        &[
            &etcd[..],
            &["--etcd-ca", files.path().to_str().expect("UTF-8")],
        ]
        .concat(),
        TWO,
    );
    assert!(
        message.starts_with("--etcd-ca: ") && message.contains("cannot read it"),
        "a directory: {message}"
    );
}

#[test]
fn an_sni_that_is_an_ip_address_is_refused() {
    let ca = pem_file();
    let message = refused(
        &[&with_ca(&ca)[..], &["--etcd-sni", "127.0.0.1"]].concat(),
        TWO,
    );
    assert!(
        message.starts_with("--etcd-sni: \"127.0.0.1\" is an IP address"),
        "{message}"
    );
}
