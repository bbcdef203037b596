//! `upcheck envoy --from-caddy`: the operators' Caddy block becomes upcheck's as written, the
//! fields whose meaning upcheck can keep are mapped, and everything else is refused with the JSON
//! path and what to do, exit status 2 and nothing written.

use crate::common;

use std::fs;
use std::time::Duration;

use common::{refused, upcheck, workspace};
use upcheck_cli::caddy;
use upcheck_cli::deployment::{plan, Deployment};
use upcheck_policy::RoutingMode;

/// The handler of [`caddy_with`], as error paths name it.
const H: &str = "apps.http.servers.srv0.routes[0].handle[0]";

/// A Caddy configuration whose one route holds a reverse_proxy with `fields` (JSON members).
fn caddy_with(fields: &str) -> String {
    format!(
        r#"{{"apps": {{"http": {{"servers": {{"srv0": {{"listen": [":443"],
             "routes": [{{"handle": [{{"handler": "reverse_proxy", {fields}}}]}}]}}}}}}}}}}"#
    )
}

/// Two backends and the operators' checks, with `active` and `passive` as given.
fn checks(active: &str, passive: &str) -> String {
    caddy_with(&format!(
        r#""upstreams": [{{"dial": "10.0.0.1:3001"}}, {{"dial": "10.0.0.2:3002"}}],
           "health_checks": {{"active": {active}, "passive": {passive}}}"#
    ))
}

fn deployment(caddy: &str, routing: Option<RoutingMode>) -> Deployment {
    let source = caddy::import(caddy.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    plan(&source, routing).unwrap_or_else(|e| panic!("{e}"))
}

/// The message `upcheck envoy --from-caddy` refuses `caddy` with.
fn refusal(caddy: &str) -> String {
    refused(&["envoy", "--from-caddy", "input.json"], caddy)
}

#[test]
fn the_operators_block_becomes_the_plugin_configuration_as_written() {
    let caddy =
        fs::read_to_string(workspace().join("config/caddy.json")).expect("config/caddy.json");
    let d = deployment(&caddy, None);
    assert_eq!(
        d.plugin,
        r#"{"routing": "host",
 "upstreams": [{"name": "app1", "address": "127.0.0.1:3001"},
               {"name": "app2", "address": "127.0.0.1:3002"}],
 "health_checks": {
   "active": {"uri": "/up", "interval": 10000000000, "timeout": 5000000000},
   "passive": {"fail_duration": 10000000000, "max_fails": 3}}}"#
    );
    let checks = &d.config.health_checks;
    assert_eq!(checks.active.path, "/up");
    assert_eq!(checks.active.interval, Duration::from_secs(10));
    assert_eq!(checks.active.timeout, Duration::from_secs(5));
    assert_eq!(checks.passive.fail_duration, Duration::from_secs(10));
    assert_eq!(checks.passive.max_fails, 3);
    let addresses: Vec<String> = d.backends.iter().map(|b| b.address.to_string()).collect();
    assert_eq!(addresses, ["127.0.0.1:3001", "127.0.0.1:3002"]);
}

#[test]
fn the_operators_block_is_written_to_a_file_with_exit_status_0() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let caddy = workspace().join("config/caddy.json");
    let out = dir.path().join("envoy.yaml");
    let args = [
        "envoy",
        "--from-caddy",
        caddy.to_str().expect("utf-8"),
        "--static",
        "-o",
    ];
    let output = upcheck(
        dir.path(),
        &[&args[..], &[out.to_str().expect("utf-8")]].concat(),
        b"",
    );
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    assert!(output.stdout.is_empty());
    let yaml = fs::read_to_string(&out).expect("written");
    assert!(yaml.contains("override_host"));
    assert_eq!(fs::read_dir(dir.path()).expect("listed").count(), 1);
}

#[test]
fn caddys_json_can_come_from_standard_input() {
    let caddy = fs::read(workspace().join("config/caddy.json")).expect("config/caddy.json");
    let output = upcheck(&workspace(), &["envoy", "--from-caddy", "-"], &caddy);
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    let yaml = String::from_utf8(output.stdout).expect("utf-8");
    assert!(yaml.contains("from standard input (the reverse_proxy handler at"));
}

#[test]
fn caddys_defaults_are_written_where_they_differ_from_upchecks() {
    let d = deployment(
        &checks(r#"{"uri": "/up"}"#, r#"{"fail_duration": "10s"}"#),
        None,
    );
    assert!(
        d.plugin
            .contains(r#""active": {"uri": "/up", "interval": "30s"}"#),
        "{}",
        d.plugin
    );
    assert!(
        d.plugin
            .contains(r#""passive": {"fail_duration": "10s", "max_fails": 1}"#),
        "{}",
        d.plugin
    );
    assert_eq!(
        d.config.health_checks.active.interval,
        Duration::from_secs(30)
    );
    assert_eq!(d.config.health_checks.passive.max_fails, 1);
}

#[test]
fn without_fail_duration_no_max_fails_is_added() {
    let d = deployment(
        &checks(r#"{"uri": "/up"}"#, r#"{"unhealthy_latency": "2s"}"#),
        None,
    );
    assert!(
        d.plugin
            .contains(r#""passive": {"unhealthy_latency": "2s"}"#),
        "{}",
        d.plugin
    );
}

#[test]
fn a_probe_host_header_becomes_every_backends_probe_authority() {
    let d = deployment(
        &checks(
            r#"{"uri": "/up", "headers": {"Host": ["shop.example.com"], "X-Probe": ["1", "2"]}}"#,
            "{}",
        ),
        None,
    );
    for upstream in &d.config.upstreams {
        assert_eq!(upstream.authority(), "shop.example.com");
    }
    assert_eq!(
        d.config.health_checks.active.headers,
        [
            ("x-probe".to_owned(), "1".to_owned()),
            ("x-probe".into(), "2".into())
        ]
    );
}

#[test]
fn a_probe_port_becomes_the_port_of_each_probe_cluster_in_host_routing() {
    let d = deployment(&checks(r#"{"uri": "/up", "port": 8081}"#, "{}"), None);
    let ports: Vec<(u16, u16)> = d
        .backends
        .iter()
        .map(|b| (b.address.port(), b.probe.port()))
        .collect();
    assert_eq!(ports, [(3001, 8081), (3002, 8081)]);
    assert!(!d.plugin.contains("8081"), "{}", d.plugin);
}

#[test]
fn a_plain_text_expect_body_moves_over_as_its_text() {
    let d = deployment(
        &checks(
            r#"{"uri": "/up", "expect_body": "version 1\\.2 \"ok\""}"#,
            "{}",
        ),
        None,
    );
    assert_eq!(
        d.config.health_checks.active.expect_body.as_deref(),
        Some("version 1.2 \"ok\"")
    );
}

#[test]
fn get_no_body_and_no_redirects_are_left_out_as_what_upcheck_does_anyway() {
    let d = deployment(
        &checks(
            r#"{"uri": "/up", "method": "GET", "body": "", "follow_redirects": false}"#,
            "{}",
        ),
        None,
    );
    assert!(
        d.plugin
            .contains(r#""active": {"uri": "/up", "interval": "30s"}"#),
        "{}",
        d.plugin
    );
}

#[test]
fn a_tcp_network_prefix_is_dropped_from_a_dial() {
    let d = deployment(
        &caddy_with(
            r#""upstreams": [{"dial": "tcp/10.0.0.1:3001"}, {"dial": "tcp6/[::1]:3002"}],
               "health_checks": {"active": {"uri": "/up"}}"#,
        ),
        None,
    );
    let addresses: Vec<String> = d.backends.iter().map(|b| b.address.to_string()).collect();
    assert_eq!(addresses, ["10.0.0.1:3001", "[::1]:3002"]);
}

#[test]
fn several_reverse_proxy_handlers_are_refused_with_the_second_ones_path() {
    let caddy = r#"{"apps": {"http": {"servers": {"srv0": {"routes": [
        {"handle": [{"handler": "reverse_proxy", "upstreams": [{"dial": "10.0.0.1:80"}]}]},
        {"handle": [{"handler": "subroute", "routes": [
            {"handle": [{"handler": "reverse_proxy", "upstreams": [{"dial": "10.0.0.2:80"}]}]}]}]}
    ]}}}}}"#;
    assert_eq!(
        refusal(caddy),
        "apps.http.servers.srv0.routes[1].handle[0].routes[0].handle[0]: one of 2 reverse_proxy \
         handlers (the first is at apps.http.servers.srv0.routes[0].handle[0]); upcheck moves one \
         pool of backends: give it a copy of the configuration that keeps only the reverse_proxy \
         to move"
    );
}

#[test]
fn a_configuration_without_a_reverse_proxy_is_refused() {
    let caddy = r#"{"apps": {"http": {"servers": {"srv0": {"routes": [
        {"handle": [{"handler": "static_response", "body": "hi"}]}]}}}}}"#;
    assert_eq!(
        refusal(caddy),
        "apps.http.servers: no reverse_proxy handler; upcheck moves the backends of a \
         reverse_proxy and its health checks"
    );
}

#[test]
fn a_placeholder_in_a_dial_or_a_probe_header_is_refused() {
    let message = refusal(&caddy_with(
        r#""upstreams": [{"dial": "{env.APP1}:3000"}], "health_checks": {"active": {"uri": "/up"}}"#,
    ));
    assert_eq!(
        message,
        format!(
            "{H}.upstreams[0].dial: \"{{env.APP1}}:3000\" holds a placeholder, which Caddy fills \
             in as it runs; upcheck needs the address itself: write it in"
        )
    );
    let header = refusal(&checks(
        r#"{"uri": "/up", "headers": {"Host": ["{env.SITE}"]}}"#,
        "{}",
    ));
    assert_eq!(
        header,
        format!(
            "{H}.health_checks.active.headers.Host: \"{{env.SITE}}\" holds a placeholder, which \
             Caddy fills in as it runs; upcheck sends header values as written: write the value in"
        )
    );
}

#[test]
fn a_unix_socket_dial_is_refused() {
    let message = refusal(&caddy_with(
        r#""upstreams": [{"dial": "10.0.0.1:80"}, {"dial": "unix//run/app.sock"}],
           "health_checks": {"active": {"uri": "/up"}}"#,
    ));
    assert_eq!(
        message,
        format!(
            "{H}.upstreams[1].dial: \"unix//run/app.sock\" is a Unix socket; the Envoy \
             configuration reaches backends over TCP: have the backend listen on a TCP port and \
             dial that"
        )
    );
}

#[test]
fn a_regular_expression_as_expect_body_is_refused() {
    let message = refusal(&checks(r#"{"uri": "/up", "expect_body": "^ok$"}"#, "{}"));
    assert_eq!(
        message,
        format!(
            "{H}.health_checks.active.expect_body: \"^ok$\" is a regular expression (it uses \
             `^`); upcheck looks for plain text in the body: write the text every healthy answer \
             contains (a backslash before punctuation stands for the character)"
        )
    );
}

#[test]
fn unhealthy_request_count_is_refused_as_having_no_equivalent() {
    let message = refusal(&checks(
        r#"{"uri": "/up"}"#,
        r#"{"unhealthy_request_count": 100}"#,
    ));
    assert_eq!(
        message,
        format!(
            "{H}.health_checks.passive.unhealthy_request_count: marks a backend down while it \
             has this many requests in flight; upcheck has no equivalent (Envoy's circuit \
             breakers limit a whole cluster): remove it"
        )
    );
}

#[test]
fn an_upstreams_max_requests_is_refused_as_having_no_equivalent() {
    let message = refusal(&caddy_with(
        r#""upstreams": [{"dial": "10.0.0.1:80", "max_requests": 10}],
           "health_checks": {"active": {"uri": "/up"}}"#,
    ));
    assert!(
        message.starts_with(&format!(
            "{H}.upstreams[0].max_requests: a limit on requests in flight to this backend; \
             upcheck has no equivalent"
        )),
        "{message}"
    );
}

#[test]
fn a_health_check_upstream_is_refused() {
    let message = refusal(&checks(r#"{"uri": "/up", "upstream": "checker:80"}"#, "{}"));
    assert_eq!(
        message,
        format!(
            "{H}.health_checks.active.upstream: probes every backend at one address; upcheck \
             probes each backend itself: remove it (`port` probes another port of each backend)"
        )
    );
}

#[test]
fn following_redirects_another_method_or_a_body_is_refused() {
    let redirects = refusal(&checks(r#"{"uri": "/up", "follow_redirects": true}"#, "{}"));
    assert!(
        redirects.starts_with(&format!(
            "{H}.health_checks.active.follow_redirects: upcheck's probes do not follow redirects"
        )),
        "{redirects}"
    );
    let method = refusal(&checks(r#"{"uri": "/up", "method": "HEAD"}"#, "{}"));
    assert_eq!(
        method,
        format!(
            "{H}.health_checks.active.method: upcheck probes with GET, as a health path answers \
             it: remove `method`"
        )
    );
    let body = refusal(&checks(r#"{"uri": "/up", "body": "ping"}"#, "{}"));
    assert_eq!(
        body,
        format!("{H}.health_checks.active.body: upcheck's probes carry no body: remove it")
    );
}

#[test]
fn a_probe_port_is_refused_in_cluster_routing() {
    let message = refused(
        &[
            "envoy",
            "--from-caddy",
            "input.json",
            "--routing",
            "cluster",
        ],
        &checks(r#"{"uri": "/up", "port": 8081}"#, "{}"),
    );
    assert_eq!(
        message,
        format!(
            "{H}.health_checks.active.port: probes go to another port than requests, so each \
             backend needs a probe cluster of its own: use host routing (the default)"
        )
    );
}

#[test]
fn a_handler_without_active_checks_is_refused() {
    let message = refusal(&caddy_with(
        r#""upstreams": [{"dial": "10.0.0.1:80"}],
           "health_checks": {"passive": {"fail_duration": "10s"}}"#,
    ));
    assert!(
        message.starts_with(&format!(
            "{H}.health_checks.active: missing; Caddy runs no active checks here, but upcheck \
             always probes every backend"
        )),
        "{message}"
    );
    let without_checks = refusal(&caddy_with(r#""upstreams": [{"dial": "10.0.0.1:80"}]"#));
    assert_eq!(without_checks, message);
    let without_uri = refusal(&checks(r#"{"interval": "10s"}"#, "{}"));
    assert!(
        without_uri.starts_with(&format!(
            "{H}.health_checks.active.uri: missing; give the path upcheck probes"
        )),
        "{without_uri}"
    );
}

#[test]
fn backends_spoken_to_over_tls_or_fastcgi_or_looked_up_at_run_time_are_refused() {
    let upstreams =
        r#""upstreams": [{"dial": "10.0.0.1:443"}], "health_checks": {"active": {"uri": "/up"}}"#;
    let tls = refusal(&caddy_with(&format!(
        r#"{upstreams}, "transport": {{"protocol": "http", "tls": {{}}}}"#
    )));
    assert!(
        tls.starts_with(&format!("{H}.transport.tls: backends reached over TLS")),
        "{tls}"
    );
    let fastcgi = refusal(&caddy_with(&format!(
        r#"{upstreams}, "transport": {{"protocol": "fastcgi"}}"#
    )));
    assert!(
        fastcgi.starts_with(&format!(
            "{H}.transport.protocol: backends spoken to over fastcgi"
        )),
        "{fastcgi}"
    );
    let dynamic = refusal(&caddy_with(
        r#""dynamic_upstreams": {"source": "srv", "name": "app.internal"},
           "health_checks": {"active": {"uri": "/up"}}"#,
    ));
    assert!(
        dynamic.starts_with(&format!(
            "{H}.dynamic_upstreams: upstreams looked up while Caddy runs"
        )),
        "{dynamic}"
    );
}

#[test]
fn the_modules_messages_name_the_field_as_caddy_has_it() {
    let bad_dial = refusal(&caddy_with(
        r#""upstreams": [{"dial": "10.0.0.1"}], "health_checks": {"active": {"uri": "/up"}}"#,
    ));
    assert_eq!(
        bad_dial,
        format!(
            "{H}.upstreams[0].dial: expected ip:port like \"10.0.0.1:8080\" or \"[::1]:8080\", \
             got \"10.0.0.1\""
        )
    );
    let twice = refusal(&caddy_with(
        r#""upstreams": [{"dial": "10.0.0.1:80"}, {"dial": "10.0.0.1:80"}],
           "health_checks": {"active": {"uri": "/up"}}"#,
    ));
    assert_eq!(
        twice,
        format!("{H}.upstreams[1].dial: \"10.0.0.1:80\" is another upstream's address too")
    );
    let max_fails = refusal(&checks(
        r#"{"uri": "/up"}"#,
        r#"{"fail_duration": "10s", "max_fails": 0}"#,
    ));
    assert_eq!(
        max_fails,
        format!("{H}.health_checks.passive.max_fails: must be at least 1, got 0")
    );
    let timeout = refusal(&checks(r#"{"uri": "/up", "timeout": "40s"}"#, "{}"));
    assert_eq!(
        timeout,
        format!("{H}.health_checks.active.timeout: must be shorter than interval (30s), got 40s")
    );
    let unknown = refusal(&checks(r#"{"uri": "/up", "expect_bdy": "ok"}"#, "{}"));
    assert!(
        unknown.starts_with(&format!(
            "{H}.health_checks.active.expect_bdy: unknown field `expect_bdy`, expected one of"
        )),
        "{unknown}"
    );
    let host = refusal(&checks(
        r#"{"uri": "/up", "headers": {"Host": ["a", "b"]}}"#,
        "{}",
    ));
    assert_eq!(
        host,
        format!(
            "{H}.health_checks.active.headers.Host: expected one value: it becomes the \
             `:authority` of every probe"
        )
    );
}

#[test]
fn a_host_name_dial_is_refused_in_host_routing_and_resolved_in_cluster_routing() {
    let caddy = caddy_with(
        r#""upstreams": [{"dial": "app1.internal:3000"}], "health_checks": {"active": {"uri": "/up"}}"#,
    );
    let message = refusal(&caddy);
    assert!(
        message.starts_with(&format!(
            "{H}.upstreams[0].dial: \"app1.internal:3000\" is a host name; host routing needs \
             the IP address"
        )),
        "{message}"
    );
    let d = deployment(&caddy, Some(RoutingMode::Cluster));
    assert_eq!(d.backends[0].address.host(), "app1.internal");
}

#[test]
fn input_that_is_not_caddys_json_is_refused_with_what_it_is() {
    assert_eq!(
        refusal(r#"{"apps": {"http": {"servers": "#),
        "not valid JSON: EOF while parsing a value at line 1 column 30"
    );
    assert_eq!(
        refusal(r#"{"admin": {}}"#),
        "apps.http.servers: missing, so this is not a Caddy configuration with an HTTP server; \
         save Caddy's with `curl localhost:2019/config/ > caddy.json`"
    );
    assert_eq!(
        refusal("null"),
        "null: Caddy answers that when it has no configuration loaded"
    );
    assert_eq!(
        refusal("  \n"),
        "empty; save Caddy's configuration with `curl localhost:2019/config/ > caddy.json`"
    );
    assert_eq!(
        refusal(r#"{"upstreams": [{"name": "app1", "address": "10.0.0.1:80"}]}"#),
        "upstreams: this is an upcheck plugin configuration, not Caddy's: read it without \
         --from-caddy"
    );
}

#[test]
fn a_member_given_twice_is_refused_where_it_is_instead_of_the_last_one_winning() {
    let message = refusal(&checks(
        r#"{"uri": "/up"}"#,
        r#"{"fail_duration": "10s", "max_fails": 3, "max_fails": 1}"#,
    ));
    assert_eq!(
        message,
        format!(
            "{H}.health_checks.passive.max_fails: given twice in one object (keep one: a reader \
             would silently use the last) at line 3 column 120"
        )
    );
}
