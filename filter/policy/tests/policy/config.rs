//! The plugin configuration: the operators' Caddy block as written, defaults, and errors that
//! name the field.

use std::time::Duration;
use upcheck_policy::status_match::StatusMatch;
use upcheck_policy::{Config, Role, StatusPage};

const CADDY: &str = r#"{"upstreams":[{"name":"app1"},{"name":"app2"}],"health_checks":{"active":{"path":"/up","interval":10000000000,"timeout":5000000000},"passive":{"fail_duration":10000000000,"max_fails":3}}}"#;

fn error(json: &str) -> String {
    match Config::parse(json.as_bytes()) {
        Ok(c) => panic!("accepted {json}: {c:?}"),
        Err(e) => e.to_string(),
    }
}

fn with_active(fields: &str) -> String {
    format!(r#"{{"upstreams":[{{"name":"a"}}],"health_checks":{{"active":{{{fields}}}}}}}"#)
}

fn with_passive(fields: &str) -> String {
    format!(r#"{{"upstreams":[{{"name":"a"}}],"health_checks":{{"passive":{{{fields}}}}}}}"#)
}

fn with_outlier(fields: &str) -> String {
    format!(r#"{{"upstreams":[{{"name":"a"}}],"health_checks":{{"outlier":{{{fields}}}}}}}"#)
}

/// One upstream named `a` with `fields` added.
fn upstream(fields: &str) -> String {
    format!(r#"{{"upstreams":[{{"name":"a",{fields}}}]}}"#)
}

/// One upstream named `a` and the top-level `fields`.
fn top(fields: &str) -> String {
    format!(r#"{{"upstreams":[{{"name":"a"}}],{fields}}}"#)
}

/// Each case's JSON is refused with exactly its message.
fn refused(cases: &[(String, &str)]) {
    for (json, message) in cases {
        assert_eq!(&error(json), message, "{json}");
    }
}

#[test]
fn the_operators_caddy_block_is_accepted_as_written() {
    let c = Config::parse(CADDY.as_bytes()).expect("the Caddy block parses");
    let names: Vec<&str> = c.upstreams.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["app1", "app2"]);
    let active = &c.health_checks.active;
    assert_eq!(active.path, "/up");
    assert_eq!(active.interval, Duration::from_secs(10));
    assert_eq!(active.timeout, Duration::from_secs(5));
    let passive = &c.health_checks.passive;
    assert_eq!(passive.fail_duration, Duration::from_secs(10));
    assert_eq!(passive.max_fails, 3);
}

#[test]
fn absent_blocks_take_the_seed_values_and_documented_defaults() {
    let c = Config::parse(br#"{"upstreams":[{"name":"app1"}]}"#).expect("parses");
    let a = &c.health_checks.active;
    assert_eq!(
        (a.path.as_str(), a.interval, a.timeout),
        ("/up", Duration::from_secs(10), Duration::from_secs(5))
    );
    assert_eq!(a.expect_status, StatusMatch::Class(2));
    assert_eq!((a.passes, a.fails, a.max_size), (1, 1, 65_536));
    assert_eq!(a.expect_body, None);
    let p = &c.health_checks.passive;
    assert_eq!((p.fail_duration, p.max_fails), (Duration::from_secs(10), 3));
    assert_eq!(
        p.unhealthy_status.matchers(),
        [502, 503, 504].map(StatusMatch::Code),
        "the incident's 502 must count"
    );
    assert_eq!(p.unhealthy_latency, None);
    assert_eq!(c.route_header, "x-upcheck-upstream");
    assert_eq!(c.max_ejection_percent, 50);
    assert_eq!(c.min_healthy_percent, None);
    assert_eq!(c.jitter(), Duration::from_secs(1));
    let up = &c.upstreams[0];
    assert_eq!(
        (up.cluster(), up.authority(), up.weight),
        ("app1", "app1", 1)
    );
}

#[test]
fn every_documented_field_is_read() {
    let json = r#"{
      "upstreams": [{"name": "app1", "cluster": "c1", "authority": "app1.internal", "weight": 3}],
      "route_header": "X-Pick",
      "max_ejection_percent": 100,
      "min_healthy_percent": 30,
      "jitter": "250ms",
      "health_checks": {
        "active": {"uri": "/healthz", "headers": {"X-Env": ["a", "b"], "X-Probe": "1"},
                   "interval": "2s", "timeout": "500ms", "expect_status": 204,
                   "expect_body": "ok", "max_size": 1024, "passes": 2, "fails": 3},
        "passive": {"fail_duration": "30s", "max_fails": 5, "unhealthy_status": [500, "5xx"],
                    "unhealthy_latency": "1s"}}}"#;
    let c = Config::parse(json.as_bytes()).expect("parses");
    let up = &c.upstreams[0];
    assert_eq!(
        (up.cluster(), up.authority(), up.weight),
        ("c1", "app1.internal", 3)
    );
    assert_eq!(c.route_header, "X-Pick");
    assert_eq!(
        (c.max_ejection_percent, c.min_healthy_percent),
        (100, Some(30))
    );
    assert_eq!(c.jitter(), Duration::from_millis(250));
    let a = &c.health_checks.active;
    assert_eq!(a.path, "/healthz");
    assert_eq!(
        a.headers,
        [
            ("x-env".into(), "a".into()),
            ("x-env".into(), "b".into()),
            ("x-probe".into(), "1".into())
        ]
    );
    assert_eq!(
        (a.interval, a.timeout),
        (Duration::from_secs(2), Duration::from_millis(500))
    );
    assert_eq!(a.expect_status, StatusMatch::Code(204));
    assert_eq!(a.expect_body.as_deref(), Some("ok"));
    assert_eq!((a.max_size, a.passes, a.fails), (1024, 2, 3));
    let p = &c.health_checks.passive;
    assert_eq!((p.fail_duration, p.max_fails), (Duration::from_secs(30), 5));
    assert_eq!(
        p.unhealthy_status.matchers(),
        [StatusMatch::Code(500), StatusMatch::Class(5)]
    );
    assert_eq!(p.unhealthy_latency, Some(Duration::from_secs(1)));
}

#[test]
fn an_unknown_field_is_an_error_that_names_it() {
    let e = error(&with_passive(r#""max_fail": 3"#));
    assert!(e.starts_with("health_checks.passive"), "{e}");
    assert!(e.contains("unknown field `max_fail`"), "{e}");
    let e = error(r#"{"upstreams":[{"name":"a","port":80}]}"#);
    assert!(e.starts_with("upstreams[0]"), "{e}");
    assert!(e.contains("unknown field `port`"), "{e}");
}

#[test]
fn a_wrong_type_is_an_error_that_names_the_field() {
    assert_eq!(
        error(&with_passive(r#""max_fails": "3""#)),
        "health_checks.passive.max_fails: expected a whole number, got the string \"3\""
    );
    assert_eq!(
        error(r#"{"upstreams":{"name":"a"}}"#),
        "upstreams: expected a list, got an object"
    );
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a"}],"health_checks":{"active":[]}}"#),
        "health_checks.active: expected an object, got a list"
    );
}

#[test]
fn max_fails_of_zero_is_refused_with_the_documented_message() {
    assert_eq!(
        error(&with_passive(r#""max_fails": 0"#)),
        "health_checks.passive.max_fails: must be at least 1, got 0"
    );
}

#[test]
fn zero_negative_and_overflowing_durations_are_refused() {
    let e = error(&with_active(r#""interval": 0"#));
    assert_eq!(
        e.split(" at line").next(),
        Some("health_checks.active.interval: must be greater than zero, got the number 0")
    );
    let e = error(&with_active(r#""timeout": -5"#));
    assert!(
        e.starts_with("health_checks.active.timeout: must be greater than zero, got -5"),
        "{e}"
    );
    let e = error(&with_passive(
        r#""fail_duration": 100000000000000000000000"#,
    ));
    assert!(
        e.starts_with("health_checks.passive.fail_duration:") && e.contains("too large"),
        "{e}"
    );
    let e = error(&with_passive(r#""fail_duration": "0s""#));
    assert!(
        e.starts_with("health_checks.passive.fail_duration: must be greater than zero"),
        "{e}"
    );
    let e = error(&with_passive(r#""unhealthy_latency": "fast""#));
    assert!(
        e.starts_with("health_checks.passive.unhealthy_latency:"),
        "{e}"
    );
}

#[test]
fn a_timeout_not_shorter_than_the_interval_is_refused() {
    assert_eq!(
        error(&with_active(r#""interval": "5s", "timeout": "5s""#)),
        "health_checks.active.timeout: must be shorter than interval (5s), got 5s"
    );
}

#[test]
fn empty_or_duplicate_upstreams_are_refused() {
    assert_eq!(
        error(r#"{"upstreams":[]}"#),
        "upstreams: needs at least one upstream"
    );
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a"},{"name":"a"}]}"#),
        "upstreams[1].name: \"a\" is listed twice"
    );
    assert_eq!(
        error(r#"{"upstreams":[{"name":""}]}"#),
        "upstreams[0].name: must not be empty"
    );
    let e = error(r#"{"upstreams":[{"name":"a\r\nx: y"}]}"#);
    assert!(
        e.starts_with("upstreams[0].name:") && e.contains("not allowed"),
        "{e}"
    );
    let e = error(r#"{"health_checks":{}}"#);
    assert!(e.starts_with("upstreams: missing"), "{e}");
    let e = error(r#"{"upstreams":[{"weight":2}]}"#);
    assert!(e.starts_with("upstreams[0].name: missing"), "{e}");
    assert!(error("{").starts_with("not valid JSON"));
    assert!(error("").contains("empty"));
}

#[test]
fn a_name_that_would_lose_a_part_in_its_metric_label_is_refused_and_dotted_names_are_not() {
    for name in ["app.", ".app", "a..b"] {
        let json = format!(
            r#"{{"upstreams":[{{"name":"ok"}},{{"name":"{name}","authority":"localhost"}}]}}"#
        );
        let e = error(&json);
        assert!(
            e.starts_with(&format!(
                "upstreams[1].name: \"{name}\" must not begin or end with a dot"
            )),
            "{e}"
        );
    }
    for name in ["app.v2", "app-3", "a:b", "x_y"] {
        let json = format!(r#"{{"upstreams":[{{"name":"{name}","authority":"localhost"}}]}}"#);
        assert!(Config::parse(json.as_bytes()).is_ok(), "{name} refused");
    }
}

#[test]
fn a_pool_name_is_letters_digits_underscores_and_dashes() {
    let config = Config::parse(br#"{"pool":"site-2_a","upstreams":[{"name":"a"}]}"#);
    assert_eq!(config.map(|c| c.pool), Ok(Some("site-2_a".to_owned())));
    assert_eq!(
        Config::parse(br#"{"upstreams":[{"name":"a"}]}"#).map(|c| c.pool),
        Ok(None)
    );
    let e = error(r#"{"pool":"a.b","upstreams":[{"name":"a"}]}"#);
    assert_eq!(e, "pool: \"a.b\" contains '.', which is not allowed");
    let e = error(&format!(
        r#"{{"pool":"{}","upstreams":[{{"name":"a"}}]}}"#,
        "p".repeat(65)
    ));
    assert_eq!(e, "pool: must be at most 64 bytes long, got 65");
    assert_eq!(
        error(r#"{"pool":"","upstreams":[{"name":"a"}]}"#),
        "pool: must not be empty"
    );
}

#[test]
fn bad_status_classes_are_refused() {
    let e = error(&with_active(r#""expect_status": "6xx""#));
    assert!(
        e.starts_with("health_checks.active.expect_status: expected a status code"),
        "{e}"
    );
    let e = error(&with_passive(r#""unhealthy_status": [502, 99]"#));
    assert!(
        e.starts_with("health_checks.passive.unhealthy_status[1]: expected a status code"),
        "{e}"
    );
}

#[test]
fn a_weight_of_zero_and_percentages_over_100_are_refused() {
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a","weight":0}]}"#),
        "upstreams[0].weight: must be at least 1, got 0"
    );
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a"}],"max_ejection_percent":101}"#),
        "max_ejection_percent: must be a percentage 0-100, got 101"
    );
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a"}],"min_healthy_percent":150}"#),
        "min_healthy_percent: must be a percentage 0-100, got 150"
    );
}

#[test]
fn a_history_of_zero_or_past_its_limit_and_an_unknown_log_format_are_refused() {
    refused(&[
        (top(r#""history":0"#), "history: must be at least 1, got 0"),
        (
            top(r#""history":1001"#),
            "history: must be at most 1000, got 1001",
        ),
        (
            top(r#""history":-1"#),
            "history: expected a whole number, got the number -1",
        ),
        (
            top(r#""log_format":"xml""#),
            r#"log_format: expected "text" or "json", got "xml""#,
        ),
        (
            top(r#""log_format":null"#),
            "log_format: expected a string, got null; null turns off only a field that can be off, so leave this one out for its default",
        ),
    ]);
    let c = Config::parse(top(r#""history":1000,"log_format":"json""#).as_bytes())
        .expect("the limit itself is taken");
    assert_eq!(c.history, 1000);
    assert_eq!(c.log_format, upcheck_policy::config::LogFormat::Json);
}

#[test]
fn hostile_header_values_and_paths_are_refused() {
    let e = error(&with_active(r#""headers": {"X-A": "ok\r\nInjected: 1"}"#));
    assert!(
        e.starts_with("health_checks.active.headers.X-A: contains the control character"),
        "{e}"
    );
    let e = error(&with_active(r#""path": "up""#));
    assert_eq!(
        e,
        "health_checks.active.path: must start with '/', got \"up\""
    );
    let e = error(r#"{"upstreams":[{"name":"a"}],"route_header":":authority"}"#);
    assert_eq!(e, "route_header: must not be a pseudo-header");
}

#[test]
fn trailing_garbage_after_the_document_is_refused() {
    let e = error(r#"{"upstreams":[{"name":"a"}]} x"#);
    assert!(e.contains("trailing characters"), "{e}");
}

#[test]
fn host_routing_carries_each_backends_address_and_cluster_routing_its_cluster() {
    let json = r#"{"routing":"host","upstreams":[
        {"name":"app1","address":"127.0.0.1:3001"},{"name":"app2","address":"[::1]:3002"}]}"#;
    let c = Config::parse(json.as_bytes()).expect("parses");
    assert_eq!(c.routing, upcheck_policy::RoutingMode::Host);
    let values: Vec<&str> = c
        .upstreams
        .iter()
        .map(|u| u.route_value(c.routing))
        .collect();
    assert_eq!(values, ["127.0.0.1:3001", "[::1]:3002"]);
    let plain = Config::parse(CADDY.as_bytes()).expect("parses");
    assert_eq!(plain.routing, upcheck_policy::RoutingMode::Cluster);
    assert_eq!(plain.upstreams[0].route_value(plain.routing), "app1");
}

#[test]
fn host_routing_without_an_address_or_with_a_shared_one_is_refused() {
    let e = error(
        r#"{"routing":"host","upstreams":[{"name":"a","address":"10.0.0.1:80"},{"name":"b"}]}"#,
    );
    assert!(e.starts_with("upstreams[1].address: missing"), "{e}");
    let e = error(
        r#"{"routing":"host","upstreams":[{"name":"a","address":"10.0.0.1:80"},{"name":"b","address":"10.0.0.1:80"}]}"#,
    );
    assert_eq!(
        e,
        "upstreams[1].address: \"10.0.0.1:80\" is another upstream's address too"
    );
    let e = error(r#"{"routing":"hosts","upstreams":[{"name":"a"}]}"#);
    assert_eq!(
        e,
        "routing: expected \"cluster\" or \"host\", got \"hosts\""
    );
}

#[test]
fn an_address_must_be_an_ip_and_a_port() {
    let expected = |bad: &str| {
        format!("expected ip:port like \"10.0.0.1:8080\" or \"[::1]:8080\", got {bad:?}")
    };
    for bad in ["app1", "127.0.0.1", "[::1]"] {
        assert_eq!(
            error(&upstream(&format!(r#""address":"{bad}""#))),
            format!("upstreams[0].address: {}", expected(bad))
        );
    }
    for bad in [
        "127.0.0.1:0",
        "127.0.0.1:99999",
        "127.0.0.1:080",
        "127.0.0.1:+80",
        "127.0.0.1:",
        "[::1]:-1",
    ] {
        assert_eq!(
            error(&upstream(&format!(r#""address":"{bad}""#))),
            format!(
                "upstreams[0].address: {}: the port must be 1-65535, without sign or leading zeros",
                expected(bad)
            )
        );
    }
    for (bad, host) in [
        ("127.0.0.01:80", "127.0.0.01"),
        ("+127.0.0.1:80", "+127.0.0.1"),
        ("127.0.0.256:80", "127.0.0.256"),
        ("127.0.1:80", "127.0.1"),
        ("127.0.0.1.1:80", "127.0.0.1.1"),
        (":80", ""),
        ("a b:80", "a b"),
    ] {
        assert_eq!(
            error(&upstream(&format!(r#""address":"{bad}""#))),
            format!("upstreams[0].address: {}: {host:?} is not an IP address (Envoy's override_host compares IP addresses, so a host name never matches)", expected(bad))
        );
    }
    for (bad, v6) in [
        ("[]:80", ""),
        ("[:]:80", ":"),
        ("[::1%eth0]:80", "::1%eth0"),
        ("[1::2::3]:80", "1::2::3"),
    ] {
        assert_eq!(
            error(&upstream(&format!(r#""address":"{bad}""#))),
            format!(
                "upstreams[0].address: {}: {v6:?} is not an IPv6 address",
                expected(bad)
            )
        );
    }
}

#[test]
fn a_host_name_is_refused_as_an_address_because_override_host_compares_ips() {
    let e = error(&upstream(r#""address":"localhost:80""#));
    assert!(e.starts_with("upstreams[0].address: "), "{e}");
    assert!(e.contains("\"localhost\" is not an IP address"), "{e}");
    assert!(e.contains("override_host compares IP addresses"), "{e}");
}

#[test]
fn addresses_are_kept_in_canonical_form_and_compared_that_way() {
    let c = Config::parse(upstream(r#""address":"[0:0::1]:80""#).as_bytes()).expect("parses");
    assert_eq!(c.upstreams[0].address.as_deref(), Some("[::1]:80"));
    let c = Config::parse(upstream(r#""address":"0.0.0.0:65535""#).as_bytes()).expect("parses");
    assert_eq!(c.upstreams[0].address.as_deref(), Some("0.0.0.0:65535"));
    let e = error(
        r#"{"routing":"host","upstreams":[{"name":"a","address":"[::1]:80"},{"name":"b","address":"[0:0::1]:80"}]}"#,
    );
    assert_eq!(
        e,
        "upstreams[1].address: \"[::1]:80\" is another upstream's address too"
    );
}

#[test]
fn an_authority_must_be_a_host_and_optional_port() {
    for good in [
        "app1",
        "app1.internal:8080",
        "10.0.0.1",
        "10.0.0.1:80",
        "[::1]",
        "[::1]:8080",
        "a_b-c~d",
    ] {
        let c = Config::parse(upstream(&format!(r#""authority":"{good}""#)).as_bytes())
            .unwrap_or_else(|e| panic!("{good}: {e}"));
        assert_eq!(c.upstreams[0].authority(), good);
    }
    for bad in [
        "evil.example/ x",
        "a b",
        "user@host",
        "host:",
        "host:0",
        "host:080",
        "host:1:2",
        "[::1",
        "[::1]x",
        "[:]:80",
        "h%41",
    ] {
        assert_eq!(
            error(&upstream(&format!(r#""authority":"{bad}""#))),
            format!("upstreams[0].authority: expected host or host:port (a host name, an IPv4 address or a bracketed IPv6 address; a port 1-65535), got {bad:?}")
        );
    }
}

#[test]
fn a_name_that_cannot_be_an_authority_needs_one_given() {
    let e = error(r#"{"upstreams":[{"name":"app|1"}]}"#);
    assert!(
        e.starts_with("upstreams[0].authority: missing, and the name cannot stand in for it: expected host or host:port"),
        "{e}"
    );
    let c =
        Config::parse(br#"{"upstreams":[{"name":"app|1","authority":"app1"}]}"#).expect("parses");
    assert_eq!(c.upstreams[0].authority(), "app1");
    let c = Config::parse(br#"{"upstreams":[{"name":"app1:8080"}]}"#).expect("parses");
    assert_eq!(
        (c.upstreams[0].cluster(), c.upstreams[0].authority()),
        ("app1:8080", "app1:8080")
    );
}

#[test]
fn a_configuration_routes_traffic_and_serves_no_page_unless_its_role_is_the_status_page() {
    let c = Config::parse(CADDY.as_bytes()).expect("parses");
    assert_eq!((c.role.clone(), c.status_page()), (Role::Traffic, None));
    let c = Config::parse(br#"{"upstreams":[{"name":"a"}],"role":"traffic"}"#).expect("parses");
    assert_eq!(c.role, Role::Traffic);
    let c = Config::parse(br#"{"role":"status_page","upstreams":[{"name":"a"}]}"#).expect("parses");
    assert_eq!(
        c.status_page(),
        Some(&StatusPage {
            path: "/upcheck/status".into(),
            public: false
        })
    );
    // The page's fields may come before the role that gives them their meaning.
    let json = br#"{"status_path":"/lb","status_public":true,"upstreams":[{"name":"a"}],"role":"status_page"}"#;
    let c = Config::parse(json).expect("parses");
    assert_eq!(
        c.role,
        Role::StatusPage(StatusPage {
            path: "/lb".into(),
            public: true
        })
    );
}

#[test]
fn a_traffic_configuration_refuses_the_status_pages_fields_naming_where_the_page_went() {
    for (field, value) in [
        ("status_path", r#""/upcheck/status""#),
        ("status_public", "false"),
    ] {
        let traffic = error(&top(&format!(r#""{field}": {value}"#)));
        assert_eq!(
            traffic,
            format!("{field}: only a configuration with \"role\": \"status_page\" serves the status page, on a listener of its own; the traffic filter never serves it, so remove this field here")
        );
        let explicit = error(&top(&format!(r#""role": "traffic", "{field}": {value}"#)));
        assert_eq!(explicit, traffic);
    }
}

#[test]
fn the_status_pages_fields_are_checked_where_they_stand() {
    let page = |member: &str| top(&format!(r#""role": "status_page", {member}"#));
    refused(&[
        (page(r#""status_path": "lb?x""#), "status_path: must be a path like \"/upcheck/status\", got \"lb?x\""),
        (page(r#""status_public": "yes""#), "status_public: expected true or false, got the string \"yes\""),
        (top(r#""role": "status""#), "role: expected \"traffic\" or \"status_page\", got \"status\""),
        (top(r#""role": null"#), "role: expected a string, got null; null turns off only a field that can be off, so leave this one out for its default"),
    ]);
    let off = error(&page(r#""status_path": null"#));
    assert!(
        off.starts_with("status_path: the status page cannot be turned off here: it is served only by a configuration with \"role\": \"status_page\""),
        "{off}"
    );
}

#[test]
fn a_root_that_is_not_an_object_or_repeats_a_field_is_refused() {
    assert_eq!(error("[1]"), "expected an object, got a list");
    assert_eq!(error("null"), "expected an object, got null; null turns off only a field that can be off, so leave this one out for its default");
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a"}],"upstreams":[{"name":"b"}]}"#),
        "duplicate field `upstreams`"
    );
    let e = error(&top(r#""max_fails": 3"#));
    assert!(
        e.starts_with("max_fails: unknown field `max_fails`, expected one of `upstreams`"),
        "{e}"
    );
}

#[test]
fn a_repeated_field_is_refused_at_every_level() {
    refused(&[
        (
            with_passive(r#""max_fails": 3, "max_fails": 4"#),
            "health_checks.passive: duplicate field `max_fails`",
        ),
        (
            with_active(r#""path": "/a", "path": "/b""#),
            "health_checks.active: duplicate field `path`",
        ),
        (
            with_outlier(r#""window": "1s", "window": "2s""#),
            "health_checks.outlier: duplicate field `window`",
        ),
        (
            upstream(r#""weight": 1, "weight": 2"#),
            "upstreams[0]: duplicate field `weight`",
        ),
        (
            r#"{"upstreams":[{"name":"a"}],"health_checks":{"active":{},"active":{}}}"#.to_string(),
            "health_checks: duplicate field `active`",
        ),
    ]);
}

#[test]
fn path_and_its_caddy_name_uri_are_one_field() {
    refused(&[
        (
            with_active(r#""path": "/a", "uri": "/b""#),
            "health_checks.active.uri: give `path` or `uri`, not both",
        ),
        (
            with_active(r#""uri": "/a", "path": "/b""#),
            "health_checks.active.path: give `path` or `uri`, not both",
        ),
        (
            with_active(r#""uri": "up""#),
            "health_checks.active.uri: must start with '/', got \"up\"",
        ),
    ]);
}

#[test]
fn every_upstream_field_refuses_bad_values_with_its_path_and_reason() {
    let long = "n".repeat(129);
    refused(&[
        (r#"{"upstreams":["a"]}"#.into(), "upstreams[0]: expected an object, got the string \"a\""),
        (upstream(r#""name": 1"#).replace(r#""name":"a","#, ""), "upstreams[0].name: expected a string, got the number 1"),
        (r#"{"upstreams":[{"name":null}]}"#.into(), "upstreams[0].name: expected a string, got null; null turns off only a field that can be off, so leave this one out for its default"),
        (format!(r#"{{"upstreams":[{{"name":"{long}"}}]}}"#), "upstreams[0].name: must be at most 128 bytes long, got 129"),
        (upstream(r#""cluster": "a b""#), "upstreams[0].cluster: \"a b\" contains ' ', which is not allowed"),
        (upstream(r#""cluster": """#), "upstreams[0].cluster: must not be empty"),
        (upstream(&format!(r#""cluster": "{long}""#)), "upstreams[0].cluster: must be at most 128 bytes long, got 129"),
        (upstream(r#""cluster": null"#), "upstreams[0].cluster: expected a string, got null; null turns off only a field that can be off, so leave this one out for its default"),
        (upstream(r#""authority": """#), "upstreams[0].authority: must not be empty"),
        (upstream(r#""authority": null"#), "upstreams[0].authority: expected a string, got null; null turns off only a field that can be off, so leave this one out for its default"),
        (upstream(&format!(r#""authority": "{}""#, "a".repeat(4097))), "upstreams[0].authority: must be at most 4096 bytes long, got 4097"),
        (upstream(r#""weight": 1001"#), "upstreams[0].weight: must be at most 1000, got 1001"),
        (upstream(r#""weight": 1.5"#), "upstreams[0].weight: expected a whole number, got a fraction"),
        (upstream(r#""weight": -1"#), "upstreams[0].weight: expected a whole number, got the number -1"),
        (upstream(r#""weight": 18446744073709551616"#), "upstreams[0].weight: expected a whole number, got a number too large for 64 bits"),
        (upstream(r#""address": 80"#), "upstreams[0].address: expected a string, got the number 80"),
    ]);
}

#[test]
fn every_top_level_field_refuses_bad_values_with_its_path_and_reason() {
    refused(&[
        (top(r#""routing": 1"#), "routing: expected a string, got the number 1"),
        (top(r#""route_header": "a:b""#), "route_header: \"a:b\" contains ':', which is not allowed"),
        (top(r#""route_header": """#), "route_header: must not be empty"),
        (top(&format!(r#""route_header": "{}""#, "h".repeat(129))), "route_header: must be at most 128 bytes long, got 129"),
        (top(r#""max_ejection_percent": null"#), "max_ejection_percent: expected a whole number, got null; null turns off only a field that can be off, so leave this one out for its default"),
        (top(r#""min_healthy_percent": "30""#), "min_healthy_percent: expected a whole number, got the string \"30\""),
        (top(r#""jitter": "0s""#), "jitter: must be greater than zero, got the string \"0s\""),
        (top(r#""jitter": "10s""#), "jitter: must be shorter than health_checks.active.interval (10s), got 10s"),
        (top(r#""role": "status_page", "status_path": "/a b""#), "status_path: \"/a b\" contains ' ', which is not allowed in a path (percent-encode it)"),
        (top(r#""role": "status_page", "status_path": "/a\u0000""#), "status_path: contains the control character '\\0'"),
        (top(r#""role": "status_page", "status_public": null"#), "status_public: expected true or false, got null; null turns off only a field that can be off, so leave this one out for its default"),
        (top(r#""health_checks": null"#), "health_checks: expected an object, got null; null turns off only a field that can be off, so leave this one out for its default"),
        (top(r#""health_checks": {"passive": 3}"#), "health_checks.passive: expected an object, got the number 3"),
        (top(r#""health_checks": {"outlier": []}"#), "health_checks.outlier: expected an object, got a list"),
    ]);
}

#[test]
fn every_active_field_refuses_bad_values_with_its_path_and_reason() {
    refused(&[
        (with_active(r#""path": "/a\nb""#), "health_checks.active.path: contains the control character '\\n'"),
        (with_active(r#""path": "/a b""#), "health_checks.active.path: \"/a b\" contains ' ', which is not allowed in a path (percent-encode it)"),
        (with_active(r#""path": "/é""#), "health_checks.active.path: \"/é\" contains 'é', which is not allowed in a path (percent-encode it)"),
        (with_active(&format!(r#""path": "/{}""#, "p".repeat(4096))), "health_checks.active.path: must be at most 4096 bytes long, got 4097"),
        (with_active(r#""path": null"#), "health_checks.active.path: expected a string, got null; null turns off only a field that can be off, so leave this one out for its default"),
        (with_active(r#""interval": "500us""#), "health_checks.active.interval: must be at least 1ms, got 500us"),
        (with_active(r#""interval": "1193h2m48s""#), "health_checks.active.interval: must be at most 1193h2m47.295s (2^32 - 1 ms), got 1193h2m48s"),
        (with_active(r#""timeout": 999999"#), "health_checks.active.timeout: must be at least 1ms, got 999.999us"),
        (with_active(r#""timeout": "1.0001s", "interval": "1.0005s""#), "health_checks.active.timeout: must be shorter than interval (1.0005s), got 1.001s"),
        (with_active(r#""interval": null"#), "health_checks.active.interval: expected a duration: integer nanoseconds or a string like \"10s\", got null; null turns off only a field that can be off, so leave this one out for its default"),
        (with_active(r#""expect_status": null"#), "health_checks.active.expect_status: expected a status code 100-599 or a class like \"2xx\", got null; null turns off only a field that can be off, so leave this one out for its default"),
        (with_active(r#""expect_body": """#), "health_checks.active.expect_body: must not be empty"),
        (with_active(r#""expect_body": "abc", "max_size": 2"#), "health_checks.active.expect_body: is longer than max_size (2 bytes)"),
        (with_active(&format!(r#""expect_body": "{}""#, "b".repeat(4097))), "health_checks.active.expect_body: must be at most 4096 bytes long, got 4097"),
        (with_active(r#""max_size": 0"#), "health_checks.active.max_size: must be at least 1, got 0"),
        (with_active(r#""max_size": 16777217"#), "health_checks.active.max_size: must be at most 16777216, got 16777217"),
        (with_active(r#""passes": 0"#), "health_checks.active.passes: must be at least 1, got 0"),
        (with_active(r#""passes": 1001"#), "health_checks.active.passes: must be at most 1000, got 1001"),
        (with_active(r#""fails": 0"#), "health_checks.active.fails: must be at least 1, got 0"),
        (with_active(r#""fails": true"#), "health_checks.active.fails: expected a whole number, got the boolean true"),
    ]);
}

#[test]
fn every_passive_field_refuses_bad_values_with_its_path_and_reason() {
    let many = vec!["500"; 101].join(",");
    refused(&[
        (with_passive(r#""fail_duration": 1.5"#), "health_checks.passive.fail_duration: must be whole nanoseconds or a string like \"10s\""),
        (with_passive(r#""fail_duration": "-1s""#), "health_checks.passive.fail_duration: must not be negative, got \"-1s\""),
        (with_passive(r#""fail_duration": {}"#), "health_checks.passive.fail_duration: expected a duration: integer nanoseconds or a string like \"10s\", got an object"),
        (with_passive(r#""max_fails": 1001"#), "health_checks.passive.max_fails: must be at most 1000, got 1001"),
        (with_passive(r#""unhealthy_status": 502"#), "health_checks.passive.unhealthy_status: expected a list, got the number 502"),
        (with_passive(&format!(r#""unhealthy_status": [{many}]"#)), "health_checks.passive.unhealthy_status: at most 100 statuses are allowed"),
        (with_passive(r#""unhealthy_latency": 0"#), "health_checks.passive.unhealthy_latency: must be greater than zero, got the number 0"),
    ]);
}

#[test]
fn probe_headers_that_envoy_owns_or_that_could_split_a_request_are_refused() {
    let many: Vec<String> = (0..65).map(|i| format!(r#""x-{i}": "v""#)).collect();
    let list: Vec<String> = (0..65).map(|i| format!(r#""{i}""#)).collect();
    refused(&[
        (with_active(r#""headers": {":path": "/x"}"#), "health_checks.active.headers.:path: must not be a pseudo-header: a probe's :path and :authority are `path` and the upstream's `authority`"),
        (with_active(r#""headers": {":method": "POST"}"#), "health_checks.active.headers.:method: must not be a pseudo-header: a probe's :path and :authority are `path` and the upstream's `authority`"),
        (with_active(r#""headers": {"x-a:b": "1"}"#), "health_checks.active.headers.x-a:b: \"x-a:b\" contains ':', which is not allowed"),
        (with_active(r#""headers": {"Host": "a"}"#), "health_checks.active.headers.Host: must not be set: a probe's host is the upstream's `authority`"),
        (with_active(r#""headers": {"x-a": "1", "X-A": "2"}"#), "health_checks.active.headers.X-A: is listed twice (header names ignore case); give it once with a list of values"),
        (with_active(r#""headers": {"": "1"}"#), "health_checks.active.headers.: must not be empty"),
        (with_active(&format!(r#""headers": {{"{}": "1"}}"#, "h".repeat(129))), &format!("health_checks.active.headers.{}: must be at most 128 bytes long, got 129", "h".repeat(129))),
        (with_active(&format!(r#""headers": {{"x-a": "{}"}}"#, "v".repeat(4097))), "health_checks.active.headers.x-a: must be at most 4096 bytes long, got 4097"),
        (with_active(r#""headers": {"x-a": ["1", 2]}"#), "health_checks.active.headers.x-a[1]: expected a string, got the number 2"),
        (with_active(r#""headers": {"x-a": null}"#), "health_checks.active.headers.x-a: expected a string, got null; null turns off only a field that can be off, so leave this one out for its default"),
        (with_active(r#""headers": ["x-a"]"#), "health_checks.active.headers: expected an object, got a list"),
        (with_active(&format!(r#""headers": {{{}}}"#, many.join(","))), "health_checks.active.headers.x-64: at most 64 probe headers are allowed"),
        (with_active(&format!(r#""headers": {{"x-a": [{}]}}"#, list.join(","))), "health_checks.active.headers.x-a: at most 64 probe headers are allowed"),
    ]);
    let fits: Vec<String> = (0..64).map(|i| format!(r#""x-{i}": "v""#)).collect();
    let c = Config::parse(with_active(&format!(r#""headers": {{{}}}"#, fits.join(","))).as_bytes())
        .expect("64 headers fit");
    assert_eq!(c.health_checks.active.headers.len(), 64);
}

#[test]
fn a_probe_timeout_is_rounded_up_to_whole_milliseconds_as_envoy_takes_it() {
    for (given, kept) in [
        ("1ms", 1_000_000),
        ("1.2ms", 2_000_000),
        ("1000001ns", 2_000_000),
        ("2.5s", 2_500_000_000),
    ] {
        let c = Config::parse(with_active(&format!(r#""timeout": "{given}""#)).as_bytes())
            .expect("parses");
        assert_eq!(
            c.health_checks.active.timeout,
            Duration::from_nanos(kept),
            "{given}"
        );
    }
    let c = Config::parse(
        with_active(r#""interval": "1193h2m47.295s", "timeout": "1193h2m47.294s""#).as_bytes(),
    )
    .expect("the longest interval fits");
    assert_eq!(
        c.health_checks.active.interval,
        Duration::from_millis(u64::from(u32::MAX))
    );
}

#[test]
fn null_turns_off_only_what_can_be_off() {
    let json = r#"{"upstreams":[{"name":"a","address":null}],"min_healthy_percent":null,
        "health_checks":{"active":{"expect_body":null},"passive":{"unhealthy_latency":null}}}"#;
    let c = Config::parse(json.as_bytes()).expect("parses");
    assert_eq!(c.upstreams[0].address, None);
    assert_eq!(c.min_healthy_percent, None);
    assert_eq!(c.health_checks.active.expect_body, None);
    assert_eq!(c.health_checks.passive.unhealthy_latency, None);
    for (json, path) in [
        (top(r#""jitter": null"#), "jitter"),
        (top(r#""routing": null"#), "routing"),
        (top(r#""route_header": null"#), "route_header"),
        (
            with_passive(r#""max_fails": null"#),
            "health_checks.passive.max_fails",
        ),
        (
            with_passive(r#""unhealthy_status": null"#),
            "health_checks.passive.unhealthy_status",
        ),
        (
            with_outlier(r#""enabled": null"#),
            "health_checks.outlier.enabled",
        ),
        (r#"{"upstreams": null}"#.to_string(), "upstreams"),
    ] {
        let e = error(&json);
        assert!(e.starts_with(&format!("{path}: expected ")), "{e}");
        assert!(e.ends_with("got null; null turns off only a field that can be off, so leave this one out for its default"), "{e}");
    }
}

#[test]
fn outlier_detection_is_on_by_default_with_the_documented_values() {
    let c = Config::parse(CADDY.as_bytes()).expect("parses");
    let o = &c.health_checks.outlier;
    assert!(o.enabled);
    assert_eq!(
        (o.window, o.min_failures, o.min_requests),
        (Duration::from_secs(10), 5, 5)
    );
    assert_eq!((o.failure_gap, o.latency_factor), (5, 4));
    assert_eq!(
        (o.min_latency, o.stall_after),
        (Duration::from_millis(250), Duration::from_millis(500))
    );
    assert_eq!(
        (o.ejection, o.max_ejection),
        (Duration::from_secs(30), Duration::from_secs(300))
    );
}

#[test]
fn outlier_detection_is_turned_off_with_enabled_false_and_every_field_is_read() {
    let c = Config::parse(with_outlier(r#""enabled": false"#).as_bytes()).expect("parses");
    assert!(!c.health_checks.outlier.enabled);
    let json = with_outlier(
        r#""window": "30s", "min_failures": 1000, "min_requests": 100000, "failure_gap": 1,
           "latency_factor": 2, "min_latency": "1s", "stall_after": 2000000000, "ejection": "1m",
           "max_ejection": "1m""#,
    );
    let o = Config::parse(json.as_bytes())
        .expect("parses")
        .health_checks
        .outlier;
    assert_eq!(
        (o.window, o.min_failures, o.min_requests),
        (Duration::from_secs(30), 1000, 100_000)
    );
    assert_eq!((o.failure_gap, o.latency_factor), (1, 2));
    assert_eq!(
        (o.min_latency, o.stall_after),
        (Duration::from_secs(1), Duration::from_secs(2))
    );
    assert_eq!(
        (o.ejection, o.max_ejection),
        (Duration::from_secs(60), Duration::from_secs(60))
    );
}

#[test]
fn every_outlier_field_refuses_bad_values_with_its_path_and_reason() {
    refused(&[
        (with_outlier(r#""enabled": "no""#), "health_checks.outlier.enabled: expected true or false, got the string \"no\""),
        (with_outlier(r#""window": "0s""#), "health_checks.outlier.window: must be greater than zero, got the string \"0s\""),
        (with_outlier(r#""min_failures": 0"#), "health_checks.outlier.min_failures: must be at least 1, got 0"),
        (with_outlier(r#""min_failures": 1001"#), "health_checks.outlier.min_failures: must be at most 1000, got 1001"),
        (with_outlier(r#""min_requests": 0"#), "health_checks.outlier.min_requests: must be at least 1, got 0"),
        (with_outlier(r#""min_requests": 100001"#), "health_checks.outlier.min_requests: must be at most 100000, got 100001"),
        (with_outlier(r#""failure_gap": 0"#), "health_checks.outlier.failure_gap: must be at least 1, got 0"),
        (with_outlier(r#""failure_gap": 101"#), "health_checks.outlier.failure_gap: must be at most 100, got 101"),
        (with_outlier(r#""latency_factor": 1"#), "health_checks.outlier.latency_factor: must be at least 2, got 1"),
        (with_outlier(r#""latency_factor": 1001"#), "health_checks.outlier.latency_factor: must be at most 1000, got 1001"),
        (with_outlier(r#""min_latency": 0"#), "health_checks.outlier.min_latency: must be greater than zero, got the number 0"),
        (with_outlier(r#""stall_after": -1"#), "health_checks.outlier.stall_after: must be greater than zero, got -1"),
        (with_outlier(r#""ejection": "fast""#), "health_checks.outlier.ejection: \"fast\" has an unknown unit \"fast\""),
        (with_outlier(r#""max_ejection": "0""#), "health_checks.outlier.max_ejection: must be greater than zero, got the string \"0\""),
        (with_outlier(r#""ejection": "1m", "max_ejection": "30s""#), "health_checks.outlier.max_ejection: must be at least ejection (1m), got 30s"),
        (with_outlier(r#""max_ejection": "10s", "ejection": "11s""#), "health_checks.outlier.max_ejection: must be at least ejection (11s), got 10s"),
        (with_outlier(r#""enable": true"#), "health_checks.outlier.enable: unknown field `enable`, expected one of `enabled`, `window`, `min_failures`, `min_requests`, `failure_gap`, `latency_factor`, `min_latency`, `stall_after`, `ejection`, `max_ejection`"),
    ]);
}

#[test]
fn upstreams_are_limited_in_number() {
    let names = |n: usize| -> String {
        let ups: Vec<String> = (0..n).map(|i| format!(r#"{{"name":"b{i}"}}"#)).collect();
        format!(r#"{{"upstreams":[{}]}}"#, ups.join(","))
    };
    let c = Config::parse(names(10_000).as_bytes()).expect("10,000 upstreams fit");
    assert_eq!(c.upstreams.len(), 10_000);
    assert_eq!(
        error(&names(10_001)),
        "upstreams: at most 10000 upstreams are allowed"
    );
}

#[test]
fn a_parsed_config_has_every_default_filled_in() {
    let c = Config::parse(br#"{"upstreams":[{"name":"app1"},{"name":"app2","cluster":"c2"}]}"#)
        .expect("parses");
    assert_eq!(c.jitter, Some(Duration::from_secs(1)));
    assert_eq!(c.upstreams[0].cluster.as_deref(), Some("app1"));
    assert_eq!(c.upstreams[0].authority.as_deref(), Some("app1"));
    assert_eq!(c.upstreams[1].cluster.as_deref(), Some("c2"));
    assert_eq!(c.upstreams[1].authority.as_deref(), Some("app2"));
}

#[test]
fn the_effective_json_reads_back_to_an_equal_config() {
    let json = r#"{
      "routing": "host",
      "upstreams": [{"name": "app1", "address": "[0:0::1]:3001", "weight": 2},
                    {"name": "app2", "cluster": "c2", "authority": "app2.internal:8080", "address": "10.0.0.2:80"}],
      "route_header": "X-Pick", "min_healthy_percent": 30,
      "health_checks": {
        "active": {"uri": "/healthz", "headers": {"X-Env": ["a", "b"], "X-Probe": "1"},
                   "interval": "1m30s", "timeout": "1.2ms", "expect_status": 204,
                   "expect_body": "ok", "max_size": 1024, "passes": 2, "fails": 3},
        "passive": {"fail_duration": 30000000001, "unhealthy_status": [500, "5xx"], "unhealthy_latency": "419.139ms"},
        "outlier": {"enabled": false, "max_ejection": "1h0m5s"}}}"#;
    let page = r#"{"upstreams":[{"name":"a"}],"role":"status_page","status_path":"/lb"}"#;
    for text in [json, CADDY, r#"{"upstreams":[{"name":"a"}]}"#, page] {
        let c = Config::parse(text.as_bytes()).expect("parses");
        let effective = c.effective_json();
        let again =
            Config::parse(effective.as_bytes()).unwrap_or_else(|e| panic!("{e}: {effective}"));
        assert_eq!(again, c, "{effective}");
    }
    let effective = Config::parse(json.as_bytes())
        .expect("parses")
        .effective_json();
    let v: serde_json::Value = serde_json::from_str(&effective).expect("JSON");
    assert_eq!(v["jitter"], "9s");
    assert_eq!(v["health_checks"]["active"]["timeout"], "2ms");
    assert_eq!(v["health_checks"]["active"]["interval"], "1m30s");
    assert_eq!(v["health_checks"]["active"]["path"], "/healthz");
    assert_eq!(
        v["health_checks"]["active"]["headers"]["x-env"],
        serde_json::json!(["a", "b"])
    );
    assert_eq!(v["health_checks"]["active"]["headers"]["x-probe"], "1");
    assert_eq!(
        v["health_checks"]["passive"]["fail_duration"],
        "30.000000001s"
    );
    assert_eq!(
        v["health_checks"]["passive"]["unhealthy_status"],
        serde_json::json!([500, "5xx"])
    );
    assert_eq!(v["health_checks"]["outlier"]["max_ejection"], "1h0m5s");
    assert_eq!(v["upstreams"][0]["address"], "[::1]:3001");
    assert_eq!(v["upstreams"][0]["cluster"], "app1");
    assert_eq!(v["routing"], "host");
    assert_eq!(v["role"], "traffic");
    assert_eq!(v.get("status_path"), None);
    assert_eq!(v["max_ejection_percent"], 50);
    let page: serde_json::Value = serde_json::from_str(
        &Config::parse(page.as_bytes())
            .expect("parses")
            .effective_json(),
    )
    .expect("JSON");
    assert_eq!(
        (&page["role"], &page["status_path"], &page["status_public"]),
        (
            &serde_json::json!("status_page"),
            &serde_json::json!("/lb"),
            &serde_json::json!(false)
        )
    );
}

#[test]
fn an_nginx_configuration_dispatches_probes_to_each_clusters_address() {
    let json = r#"{"proxy":"nginx","upstreams":[
        {"name":"app1","cluster":"127.0.0.1:3001"},{"name":"app2","cluster":"app2.internal:80"}]}"#;
    let c = Config::parse(json.as_bytes()).expect("parses");
    assert_eq!(c.proxy, upcheck_policy::Proxy::Nginx);
    assert!(!c.proxy.reports_response_flags());
    assert_eq!(c.upstreams[0].cluster(), "127.0.0.1:3001");
    let envoy = Config::parse(CADDY.as_bytes()).expect("parses");
    assert_eq!(envoy.proxy, upcheck_policy::Proxy::Envoy);
    assert!(envoy.proxy.reports_response_flags());
}

#[test]
fn what_needs_envoy_is_refused_for_nginx_with_the_field_named() {
    refused(&[
        (
            r#"{"proxy":"nginx","routing":"host","upstreams":[{"name":"a","address":"127.0.0.1:1"}]}"#.into(),
            "routing: \"host\" needs Envoy (its override_host policy and retries); with \"proxy\": \"nginx\" use \"cluster\", the route header naming each backend's cluster",
        ),
        (
            r#"{"proxy":"nginx","upstreams":[{"name":"a","cluster":"pool_a"},{"name":"b","cluster":"app:http"}]}"#.into(),
            "upstreams[1].cluster: with \"proxy\": \"nginx\" probes are dispatched to the cluster: expected host or host:port (a host name, an IPv4 address or a bracketed IPv6 address; a port 1-65535), got \"app:http\"",
        ),
        (top(r#""proxy":"caddy""#), "proxy: expected \"envoy\" or \"nginx\", got \"caddy\""),
    ]);
}

#[test]
fn the_log_level_is_read_from_the_configuration_and_defaults_to_info() {
    use upcheck_policy::config::LogLevel;
    let c = Config::parse(top(r#""log_level":"debug""#).as_bytes()).expect("parses");
    assert_eq!(c.log_level, LogLevel::Debug);
    let plain = Config::parse(CADDY.as_bytes()).expect("parses");
    assert_eq!(plain.log_level, LogLevel::Info);
    let e = error(&top(r#""log_level":"verbose""#));
    assert_eq!(
        e,
        "log_level: expected \"trace\", \"debug\", \"info\", \"warn\", \"error\" or \"off\", got \"verbose\""
    );
}

#[test]
fn a_grpc_check_names_its_service_and_is_given_instead_of_a_path() {
    let parse = |json: String| Config::parse(json.as_bytes()).expect("parses");
    let named = parse(with_active(r#""grpc": {"service": "shop.Cart"}"#));
    let grpc = named.health_checks.active.grpc.map(|g| g.service);
    assert_eq!(grpc.as_deref(), Some("shop.Cart"));
    let whole = parse(with_active(r#""grpc": {}"#));
    let grpc = whole.health_checks.active.grpc.map(|g| g.service);
    assert_eq!(grpc.as_deref(), Some(""), "the server as a whole");
    let caddy = Config::parse(CADDY.as_bytes()).expect("the Caddy block parses");
    assert_eq!(
        caddy.health_checks.active.grpc, None,
        "HTTP probes by default"
    );
    refused(&[
        (
            with_active(r#""path": "/up", "grpc": {}"#),
            "health_checks.active.grpc: give `path` or `grpc`, not both",
        ),
        (
            with_active(r#""grpc": {}, "uri": "/up""#),
            "health_checks.active.uri: give `uri` or `grpc`, not both",
        ),
        (
            with_active(r#""grpc": {"service": "a b"}"#),
            "health_checks.active.grpc.service: \"a b\" contains ' ', which no service name has",
        ),
        (
            with_active(r#""grpc": {"name": "x"}"#),
            "health_checks.active.grpc.name: unknown field `name`, expected `service`",
        ),
        (
            r#"{"proxy":"nginx","upstreams":[{"name":"a:1"}],"health_checks":{"active":{"grpc":{}}}}"#
                .to_string(),
            "health_checks.active.grpc: gRPC health checks need Envoy (a gRPC call, which ngx_wasm_module does not make); with \"proxy\": \"nginx\" probe a path instead",
        ),
        (
            with_active(r#""grpc": "shop.Cart""#),
            "health_checks.active.grpc: expected an object, got the string \"shop.Cart\"",
        ),
    ]);
}

#[test]
fn an_upstreams_note_is_plain_text_or_refused_naming_the_field() {
    let c = Config::parse(
        upstream(r#""note":"drain by alice@ops-1 at 2026-12-06 22:30:01 UTC: sale""#).as_bytes(),
    )
    .expect("a plain note parses");
    assert_eq!(
        c.upstreams.first().and_then(|u| u.note.as_deref()),
        Some("drain by alice@ops-1 at 2026-12-06 22:30:01 UTC: sale")
    );
    for (note, why) in [
        (r#""ok\nrevision 9: forged""#, "contains '\\n'"),
        (r#""\u001b[2J""#, "contains '\\u{1b}'"),
        (r#""\u202etxt""#, "contains '\\u{202e}'"),
        (r#""""#, "must not be empty"),
    ] {
        let message = error(&upstream(&format!(r#""note":{note}"#)));
        assert!(
            message.starts_with("upstreams[0].note") && message.contains(why),
            "{note}: {message}"
        );
    }
}
