//! The plugin configuration: the operators' Caddy block as written, defaults, and errors that
//! name the field.

use std::time::Duration;
use upcheck_policy::status::StatusMatch;
use upcheck_policy::Config;

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
        p.unhealthy_status,
        [502, 503, 504].map(StatusMatch::Code).to_vec(),
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
        "active": {"uri": "/healthz", "headers": {"Host": ["a"], "X-Probe": "1"},
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
        [("host".into(), "a".into()), ("x-probe".into(), "1".into())]
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
        p.unhealthy_status,
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
        "health_checks.active.timeout: must be shorter than interval (5.0s), got 5.0s"
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
fn an_address_must_be_host_and_port() {
    for bad in ["app1", "app1:0", "app1:99999", ":80", "a b:80", "[]:80"] {
        let e = error(&format!(
            r#"{{"upstreams":[{{"name":"a","address":"{bad}"}}]}}"#
        ));
        assert_eq!(
            e,
            format!("upstreams[0].address: expected host:port, got {bad:?}")
        );
    }
}

#[test]
fn the_status_page_is_on_at_its_default_path_closed_to_others_and_can_be_moved_or_turned_off() {
    let c = Config::parse(CADDY.as_bytes()).expect("parses");
    assert_eq!(
        (c.status_path.as_deref(), c.status_public),
        (Some("/upcheck/status"), false)
    );
    let c = Config::parse(br#"{"upstreams":[{"name":"a"}],"status_path":null}"#).expect("parses");
    assert_eq!(c.status_path, None);
    let json = br#"{"upstreams":[{"name":"a"}],"status_path":"/lb","status_public":true}"#;
    let c = Config::parse(json).expect("parses");
    assert_eq!(
        (c.status_path.as_deref(), c.status_public),
        (Some("/lb"), true)
    );
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a"}],"status_path":"lb?x"}"#),
        "status_path: must be a path like \"/upcheck/status\", got \"lb?x\""
    );
    assert_eq!(
        error(r#"{"upstreams":[{"name":"a"}],"status_public":"yes"}"#),
        "status_public: expected true or false, got the string \"yes\""
    );
}
