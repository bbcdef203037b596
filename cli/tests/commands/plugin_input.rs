//! `upcheck envoy CONFIG.json` and `upcheck check CONFIG.json`: a plugin configuration is checked
//! by the module's own parser, so the messages are those Envoy's log would show; a bad one exits
//! with status 2 and writes nothing. A good one, `check` prints as it is in force, every default
//! filled in.

use crate::common;

use std::fs;

use common::{file_names, refused, stderr, upcheck, workspace};
use serde_json::{json, Value};
use upcheck_policy::Config;

#[test]
fn a_plugin_configuration_with_addresses_is_written_in_host_routing_by_default() {
    let output = upcheck(&workspace(), &["envoy", "config/upcheck-host.json"], b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let yaml = String::from_utf8(output.stdout).expect("utf-8");
    assert!(
        yaml.contains("Written by `upcheck envoy` from config/upcheck-host.json. The backends:")
    );
    assert!(yaml.contains(r#"{"routing": "host","#));
    assert!(yaml.contains("envoy.load_balancing_policies.override_host"));
}

#[test]
fn the_module_refuses_what_upcheck_envoy_refuses_with_the_same_message() {
    let message = refused(
        &["envoy", "input.json"],
        r#"{"upstreams": [{"name": "app1", "address": "10.0.0.1:80"}],
            "health_checks": {"passive": {"max_fails": 0}}}"#,
    );
    assert_eq!(
        message,
        "health_checks.passive.max_fails: must be at least 1, got 0"
    );
}

#[test]
fn an_upstream_without_an_address_is_refused_in_cluster_routing_too() {
    let message = refused(
        &["envoy", "input.json", "--routing", "cluster"],
        &fs::read_to_string(workspace().join("config/upcheck.json")).expect("config/upcheck.json"),
    );
    assert_eq!(
        message,
        "upstreams[0].address: missing; the Envoy configuration needs each backend's address: \
         add \"address\": \"ip:port\""
    );
}

#[test]
fn caddys_json_given_as_a_plugin_configuration_is_pointed_to_from_caddy() {
    let caddy = fs::read_to_string(workspace().join("config/caddy.json")).expect("caddy.json");
    let message = refused(&["envoy", "input.json"], &caddy);
    assert_eq!(
        message,
        "apps: this is a Caddy configuration, not an upcheck one: read it with --from-caddy"
    );
}

#[test]
fn broken_json_is_refused_with_the_line_and_column() {
    let message = refused(
        &["envoy", "input.json"],
        "{\"upstreams\": [\n  {\"name\": }]}",
    );
    assert_eq!(
        message,
        "not valid JSON: expected value at line 2 column 12"
    );
}

#[test]
fn an_admin_interface_off_loopback_is_refused() {
    let output = upcheck(
        &workspace(),
        &[
            "envoy",
            "config/upcheck-host.json",
            "--admin",
            "0.0.0.0:9901",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert!(
        stderr(&output).starts_with("upcheck: --admin 0.0.0.0:9901: Envoy's admin interface"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_status_page_off_loopback_is_refused_unless_the_input_makes_it_public() {
    let output = upcheck(
        &workspace(),
        &["envoy", "-", "--status", "0.0.0.0:9902"],
        br#"{"upstreams": [{"name": "app1", "address": "10.0.0.1:80"}]}"#,
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert!(
        stderr(&output).starts_with(
            "upcheck: --status 0.0.0.0:9902: the status page names every backend, so it is \
             served only on connections made to a loopback address"
        ),
        "{}",
        stderr(&output)
    );
    let public = upcheck(
        &workspace(),
        &["envoy", "-", "--status", "0.0.0.0:9902"],
        br#"{"upstreams": [{"name": "app1", "address": "10.0.0.1:80"}], "status_public": true}"#,
    );
    assert_eq!(public.status.code(), Some(0), "{}", stderr(&public));
    let yaml = String::from_utf8(public.stdout).expect("utf-8");
    assert!(
        yaml.contains("socket_address: { address: 0.0.0.0, port_value: 9902 }"),
        "{yaml}"
    );
    assert!(yaml.contains(r#""status_public": true}"#), "{yaml}");
}

#[test]
fn a_status_page_on_the_users_or_the_admin_port_is_refused() {
    for (args, taken) in [
        (["--status", "127.0.0.1:8080"], "--listen 0.0.0.0:8080"),
        (["--status", "127.0.0.1:9901"], "--admin 127.0.0.1:9901"),
    ] {
        let mut all = vec!["envoy", "config/upcheck-host.json"];
        all.extend(args);
        let output = upcheck(&workspace(), &all, b"");
        assert_eq!(output.status.code(), Some(2));
        assert_eq!(
            stderr(&output),
            format!(
                "upcheck: --status {}: {taken} takes that port; give the status page another \
                 one\n",
                args[1]
            )
        );
    }
}

#[test]
fn an_input_that_cannot_be_read_is_refused_with_exit_status_2() {
    let output = upcheck(&workspace(), &["envoy", "config/no-such-file.json"], b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with("upcheck: config/no-such-file.json: cannot read:"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn an_output_that_cannot_be_written_fails_with_exit_status_1() {
    let output = upcheck(
        &workspace(),
        &[
            "envoy",
            "config/upcheck-host.json",
            "--static",
            "-o",
            "no-such-dir/envoy.yaml",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).starts_with("upcheck: no-such-dir/envoy.yaml: cannot write:"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn check_prints_the_configuration_in_force_and_says_ok_with_a_summary() {
    let output = upcheck(&workspace(), &["check", "config/upcheck.json"], b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        "ok: 2 upstreams (app1, app2), routing cluster; probes GET /up every 10.0s, timeout \
         5.0s; 3 failures within 10.0s eject a backend; routing cluster repeats no request on \
         another backend: a 5xx before its backend is ejected reaches its user (routing host \
         repeats it)\n"
    );
    let file = fs::read(workspace().join("config/upcheck.json")).expect("config/upcheck.json");
    let written = Config::parse(&file).unwrap_or_else(|e| panic!("{e}"));
    let effective = Config::parse(&output.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(effective, written);
    assert_eq!(
        String::from_utf8(output.stdout).expect("utf-8"),
        format!("{}\n", written.effective_json())
    );
}

#[test]
fn check_says_in_host_routing_which_5xx_are_repeated_on_a_peer_and_within_what_budget() {
    let output = upcheck(&workspace(), &["check", "config/upcheck-host.json"], b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "; a GET's or HEAD's 5xx is repeated on a peer while its backend fails alone, drains \
             or warms up, within 10 % of the requests plus 3 a second"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn check_fills_in_every_default_the_configuration_leaves_out() {
    let output = upcheck(
        &workspace(),
        &["check", "-"],
        br#"{"upstreams": [{"name": "app1", "address": "10.0.0.1:80"}],
             "health_checks": {"passive": {"max_fails": 5}}}"#,
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let effective: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let at = |pointer: &str| effective.pointer(pointer).cloned().unwrap_or(Value::Null);
    assert_eq!(at("/health_checks/passive/max_fails"), json!(5));
    assert_eq!(at("/upstreams/0/cluster"), json!("app1"));
    assert_eq!(at("/upstreams/0/authority"), json!("app1"));
    assert_eq!(at("/upstreams/0/weight"), json!(1));
    assert_eq!(at("/upstreams/0/address"), json!("10.0.0.1:80"));
    assert_eq!(at("/health_checks/active/path"), json!("/up"));
    assert_eq!(at("/health_checks/active/interval"), json!("10s"));
    assert_eq!(at("/health_checks/active/timeout"), json!("5s"));
    assert_eq!(at("/health_checks/passive/fail_duration"), json!("10s"));
    assert_eq!(
        at("/health_checks/passive/unhealthy_status"),
        json!([502, 503, 504])
    );
    assert_eq!(at("/health_checks/outlier/enabled"), json!(true));
    assert_eq!(at("/routing"), json!("cluster"));
    assert_eq!(at("/route_header"), json!("x-upcheck-upstream"));
    assert_eq!(at("/jitter"), json!("1s"));
    assert_eq!(at("/role"), json!("traffic"));
    assert_eq!(
        effective.get("status_path"),
        None,
        "a traffic filter serves no page"
    );
}

#[test]
fn check_prints_a_grpc_check_with_its_defaults_that_reads_back_and_says_what_it_asks() {
    let input = br#"{"upstreams": [{"name": "app1", "address": "10.0.0.1:50051"}],
                     "health_checks": {"active": {"grpc": {}}}}"#;
    let output = upcheck(&workspace(), &["check", "-"], input);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        "ok: 1 upstream (app1), routing cluster; probes the gRPC Health Check of service \"\" \
         every 10.0s, timeout 5.0s (SERVING passes; 1 passing probe makes a backend healthy, 1 \
         failing one unhealthy); 3 failures within 10.0s eject a backend; routing cluster \
         repeats no request on another backend: a 5xx before its backend is ejected reaches its \
         user (routing host repeats it)\n"
    );
    let effective: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        effective["health_checks"]["active"],
        json!({"grpc": {"service": ""}, "headers": {}, "interval": "10s", "timeout": "5s",
               "passes": 1, "fails": 1}),
        "the gRPC check's fields, every default filled in; no path beside it"
    );
    let again = upcheck(&workspace(), &["check", "-"], &output.stdout);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(
        Config::parse(&output.stdout).unwrap_or_else(|e| panic!("{e}")),
        Config::parse(input).unwrap_or_else(|e| panic!("{e}")),
        "what check prints reads back to the same configuration"
    );
}

#[test]
fn check_reads_a_status_page_configuration_and_says_whose_page_it_is() {
    let output = upcheck(
        &workspace(),
        &["check", "-"],
        br#"{"role": "status_page", "upstreams": [{"name": "app1"}, {"name": "app2"}]}"#,
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        "ok: the status page of 2 upstreams (app1, app2) at /upcheck/status, on connections \
         made to a loopback address only; it never probes or routes\n"
    );
    let effective: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(effective["status_path"], json!("/upcheck/status"));
    assert_eq!(effective["status_public"], json!(false));
}

#[test]
fn check_refuses_an_invalid_configuration_with_the_modules_message_and_exit_status_2() {
    let output = upcheck(
        &workspace(),
        &["check", "-"],
        br#"{"upstreams": [{"name": "app1"}], "health_checks": {"active": {"timeout": "10s"}}}"#,
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert_eq!(
        stderr(&output),
        "upcheck: standard input: health_checks.active.timeout: must be shorter than interval \
         (10s), got 10s\n"
    );
}

#[test]
fn a_plugin_configuration_and_caddys_json_at_once_are_refused_with_exit_status_2() {
    let output = upcheck(
        &workspace(),
        &[
            "envoy",
            "config/upcheck-host.json",
            "--from-caddy",
            "config/caddy.json",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert!(
        stderr(&output).contains("'[CONFIG]' cannot be used with '--from-caddy <CADDY.json>'"),
        "{}",
        stderr(&output)
    );
    let neither = upcheck(&workspace(), &["envoy"], b"");
    assert_eq!(neither.status.code(), Some(2));
    assert!(neither.stdout.is_empty());
}

#[test]
fn a_file_written_with_o_keeps_its_backends_in_files_beside_it_unless_static() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let input = fs::read(workspace().join("config/upcheck-host.json")).expect("the example");
    fs::write(dir.path().join("input.json"), input).expect("input written");
    let default = upcheck(
        dir.path(),
        &["envoy", "input.json", "-o", "envoy.yaml"],
        b"",
    );
    assert_eq!(default.status.code(), Some(0), "{}", stderr(&default));
    assert_eq!(
        file_names(dir.path()),
        ["envoy.yaml", "envoy.yaml.d", "input.json"]
    );
    assert_eq!(
        file_names(&dir.path().join("envoy.yaml.d")),
        [
            "clusters.json",
            "membership.json",
            "upcheck-status.json",
            "upcheck.json"
        ]
    );
    let yaml = fs::read_to_string(dir.path().join("envoy.yaml")).expect("written");
    assert!(yaml.contains("cds_config"), "{yaml}");
    let header: Vec<&str> = yaml
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .collect();
    let header = header.join(" ");
    assert!(
        header.contains("The backends when it was written: app1 at 127.0.0.1:3001,")
            && header.contains("`upcheck backends --config FILE add`, `drain`, `remove`"),
        "{header}"
    );

    let named = upcheck(
        dir.path(),
        &["envoy", "input.json", "--membership", "-o", "named.yaml"],
        b"",
    );
    assert_eq!(named.status.code(), Some(0), "{}", stderr(&named));
    let named = fs::read_to_string(dir.path().join("named.yaml")).expect("written");
    assert_eq!(
        named.replace("named.yaml.d", "envoy.yaml.d"),
        yaml,
        "--membership names the default"
    );

    let single = upcheck(
        dir.path(),
        &["envoy", "input.json", "--static", "-o", "single.yaml"],
        b"",
    );
    assert_eq!(single.status.code(), Some(0), "{}", stderr(&single));
    assert!(!dir.path().join("single.yaml.d").exists());
    let single = fs::read_to_string(dir.path().join("single.yaml")).expect("written");
    assert!(!single.contains("cds_config") && single.contains("static_resources"));
}

#[test]
fn standard_output_gets_the_single_file_and_says_so_unless_static_is_given() {
    let output = upcheck(&workspace(), &["envoy", "config/upcheck-host.json"], b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with("upcheck: standard output gets the single-file shape"),
        "{}",
        stderr(&output)
    );
    let quiet = upcheck(
        &workspace(),
        &["envoy", "config/upcheck-host.json", "--static"],
        b"",
    );
    assert_eq!(stderr(&quiet), "");
    assert_eq!(quiet.stdout, output.stdout);
}

#[test]
fn static_with_membership_or_allow_is_refused_as_a_contradiction() {
    for extra in [&["--membership"][..], &["--allow", "10.0.0.0/8"][..]] {
        let mut args = vec![
            "envoy",
            "config/upcheck-host.json",
            "--static",
            "-o",
            "x.yaml",
        ];
        args.extend(extra);
        let output = upcheck(&workspace(), &args, b"");
        assert_eq!(
            output.status.code(),
            Some(2),
            "{extra:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("cannot be used with"),
            "{}",
            stderr(&output)
        );
    }
    assert!(!workspace().join("x.yaml").exists());
}
