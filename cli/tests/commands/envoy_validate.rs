//! What `upcheck envoy` writes is a configuration Envoy 1.40 accepts: `envoy --mode validate`
//! loads it, the module included, whose `on_configure` checks the embedded plugin configuration.
//! Envoy comes from `UPCHECK_ENVOY`, the module from `UPCHECK_WASM` (`make e2e` sets both); the
//! tests fail without them, never skip: a green run that validated nothing would hide a broken
//! setup.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::{stderr, upcheck, workspace};

/// The existing file named by the environment variable `var`.
fn required(var: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{var} is not set: run these tests through `make e2e`"));
    assert!(
        path.is_file(),
        "{var}={} is not a file: run these tests through `make e2e`",
        path.display()
    );
    path
}

/// `upcheck envoy args --wasm $UPCHECK_WASM`, run at the workspace root: the YAML it writes.
fn written(args: &[&str]) -> String {
    let module = required("UPCHECK_WASM");
    let mut all = args.to_vec();
    all.extend(["--wasm", module.to_str().expect("a UTF-8 path")]);
    let output = upcheck(&workspace(), &all, b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    String::from_utf8(output.stdout).expect("utf-8")
}

/// Runs `envoy --mode validate` on `yaml`: Ok, or what Envoy said.
fn validate(yaml: &str) -> Result<(), String> {
    let envoy = required("UPCHECK_ENVOY");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = dir.path().join("envoy.yaml");
    std::fs::write(&config, yaml).expect("written");
    let output = Command::new(&envoy)
        .args([
            "--mode",
            "validate",
            "--disable-hot-restart",
            "--log-level",
            "warn",
        ])
        .arg("--config-path")
        .arg(&config)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", envoy.display()));
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

#[test]
fn the_shipped_configurations_pass_envoys_validation() {
    for args in [
        &["envoy", "--from-caddy", "config/caddy.json"][..],
        &[
            "envoy",
            "--from-caddy",
            "config/caddy.json",
            "--routing",
            "cluster",
        ],
    ] {
        if let Err(said) = validate(&written(args)) {
            panic!("upcheck {}: Envoy refused it:\n{said}", args.join(" "));
        }
    }
}

#[test]
fn a_fleet_sharing_through_etcd_passes_envoys_validation_in_both_routings_with_tls_or_without() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let made = upcheck_e2e::tls::Certificates::make(dir.path()).expect("certificates made");
    let [ca, cert, key] = [&made.ca, &made.client.cert, &made.client.key]
        .map(|p| p.to_str().expect("a UTF-8 path").to_owned());
    let ca_only = ["--etcd-ca", ca.as_str()];
    let client = [
        "--etcd-ca",
        ca.as_str(),
        "--etcd-cert",
        cert.as_str(),
        "--etcd-key",
        key.as_str(),
        "--etcd-sni",
        "localhost",
    ];
    for (routing, tls) in [
        ("host", &[][..]),
        ("cluster", &[][..]),
        ("host", &client[..]),
        ("cluster", &ca_only[..]),
    ] {
        let mut args = vec![
            "envoy",
            "--from-caddy",
            "config/caddy.json",
            "--routing",
            routing,
            "--etcd",
            "127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379",
        ];
        args.extend(tls);
        let yaml = written(&args);
        assert!(yaml.contains("\"fleet\""), "{yaml}");
        assert_eq!(
            yaml.contains("UpstreamTlsContext"),
            !tls.is_empty(),
            "{yaml}"
        );
        if let Err(said) = validate(&yaml) {
            panic!("upcheck {}: Envoy refused it:\n{said}", args.join(" "));
        }
    }
}

#[test]
fn tls_to_etcd_with_a_ca_file_that_is_no_certificate_fails_envoys_validation() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca = dir.path().join("ca.pem");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n",
    )
    .expect("written");
    let yaml = written(&[
        "envoy",
        "--from-caddy",
        "config/caddy.json",
        "--etcd",
        "127.0.0.1:2379",
        "--etcd-ca",
        ca.to_str().expect("a UTF-8 path"),
    ]);
    let said = validate(&yaml).expect_err("Envoy reads the CA file");
    assert!(said.contains("ca.pem"), "{said}");
}

#[test]
fn every_mapping_of_a_caddy_import_passes_envoys_validation() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let caddy = dir.path().join("caddy.json");
    std::fs::write(
        &caddy,
        r#"{"apps": {"http": {"servers": {"srv0": {"routes": [{"handle": [{"handler": "reverse_proxy",
            "upstreams": [{"dial": "[::1]:3001"}, {"dial": "tcp/10.0.0.7:3002"}, {"dial": "10.0.0.8:3003"}],
            "health_checks": {
              "active": {"uri": "/health?full=1", "port": 8081, "method": "GET",
                         "headers": {"Host": ["shop.example.com"], "X-Probe": ["1"]},
                         "expect_body": "\"status\":\"ok\"", "expect_status": 2},
              "passive": {"fail_duration": "30s", "unhealthy_status": [5],
                          "unhealthy_latency": "2s"}}}]}]}}}}}"#,
    )
    .expect("written");
    let caddy = caddy.to_str().expect("a UTF-8 path");
    let yaml = written(&["envoy", "--from-caddy", caddy, "--listen", "[::]:8080"]);
    assert!(yaml.contains("port_value: 8081"), "{yaml}");
    if let Err(said) = validate(&yaml) {
        panic!("Envoy refused the import of {caddy}:\n{said}");
    }
}

#[test]
fn host_names_a_route_header_and_a_public_status_page_of_ones_own_pass_envoys_validation_in_cluster_routing(
) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let plugin = dir.path().join("upcheck.json");
    std::fs::write(
        &plugin,
        r#"{"route_header": "X-Pick",
            "upstreams": [{"name": "web-a", "address": "app1.internal:3000"},
                          {"name": "web-b", "cluster": "b", "address": "localhost:3001", "weight": 2}],
            "status_path": "/lb", "status_public": true}"#,
    )
    .expect("written");
    let plugin = plugin.to_str().expect("a UTF-8 path");
    let yaml = written(&[
        "envoy",
        plugin,
        "--routing",
        "cluster",
        "--status",
        "0.0.0.0:9902",
    ]);
    assert!(yaml.contains("type: STRICT_DNS"), "{yaml}");
    assert!(yaml.contains("cluster_header: x-pick"), "{yaml}");
    assert_eq!(
        yaml.matches(r#""status_path": "/lb""#).count(),
        1,
        "only in the status page's configuration: {yaml}"
    );
    assert!(yaml.contains("curl http://0.0.0.0:9902/lb"), "{yaml}");
    if let Err(said) = validate(&yaml) {
        panic!("Envoy refused the configuration of {plugin}:\n{said}");
    }
}

#[test]
fn a_plugin_configuration_the_module_refuses_fails_envoys_validation() {
    let yaml = written(&["envoy", "--from-caddy", "config/caddy.json"]);
    let broken = yaml.replace("\"max_fails\": 3", "\"max_fails\": 0");
    assert_ne!(broken, yaml);
    let said = validate(&broken).expect_err("the module refuses max_fails 0");
    assert!(
        said.contains("Unable to create Wasm plugin upcheck"),
        "{said}"
    );
}

#[test]
fn grpc_backends_pass_envoys_validation_in_both_routings_with_their_grpc_route_and_retries() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let plugin = dir.path().join("upcheck.json");
    std::fs::write(
        &plugin,
        r#"{"upstreams": [{"name": "app1", "address": "127.0.0.1:50051"},
                          {"name": "app2", "address": "127.0.0.1:50052"}],
            "health_checks": {"active": {"grpc": {"service": "orders"}}}}"#,
    )
    .expect("written");
    let plugin = plugin.to_str().expect("a UTF-8 path");
    for routing in ["host", "cluster"] {
        let yaml = written(&["envoy", plugin, "--routing", routing]);
        assert!(yaml.contains("http2_protocol_options"), "{yaml}");
        assert!(
            yaml.contains("max_stream_duration: { grpc_timeout_header_max: 0s }"),
            "{yaml}"
        );
        assert!(
            yaml.contains(r#"the gRPC Health Check of service "orders""#),
            "{yaml}"
        );
        if routing == "host" {
            assert!(
                yaml.contains(r#"match: { prefix: "/", grpc: {  } }"#),
                "{yaml}"
            );
            assert!(
                yaml.contains("retry_on: unavailable,reset,connect-failure,refused-stream"),
                "{yaml}"
            );
        }
        if let Err(said) = validate(&yaml) {
            panic!("Envoy refused the gRPC configuration in {routing} routing:\n{said}");
        }
    }
}
