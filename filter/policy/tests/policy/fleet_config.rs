//! The `fleet` object: several balancers sharing one view through etcd. Left out, nothing
//! changes; given, each field is checked and every refusal names its path and the reason.

use std::time::Duration;
use upcheck_policy::config::fleet::{Fleet, DEFAULT_LEASE_TTL, DEFAULT_PREFIX};
use upcheck_policy::Config;

fn parse(fleet: &str) -> Result<Config, String> {
    let json = format!(r#"{{"upstreams":[{{"name":"app1"}}],"fleet":{fleet}}}"#);
    Config::parse(json.as_bytes()).map_err(|e| e.to_string())
}

#[test]
fn without_a_fleet_the_configuration_and_its_effective_form_are_as_before() {
    let config = Config::parse(br#"{"upstreams":[{"name":"app1"}]}"#).unwrap();
    assert_eq!(config.fleet, None);
    assert!(!config.effective_json().contains("fleet"));
}

#[test]
fn a_fleet_naming_its_cluster_takes_the_defaults_for_the_rest() {
    let config = parse(r#"{"cluster":"etcd"}"#).unwrap();
    let fleet = config.fleet.clone().unwrap();
    assert_eq!(
        fleet,
        Fleet {
            cluster: "etcd".into(),
            prefix: DEFAULT_PREFIX.into(),
            lease_ttl: DEFAULT_LEASE_TTL,
            user: None,
            password: None,
            watch_cluster: None,
        }
    );
    assert_eq!(fleet.lease_ttl, Duration::from_secs(6));
    let again = Config::parse(config.effective_json().as_bytes()).unwrap();
    assert_eq!(again, config, "the effective form reads back");
}

#[test]
fn a_fleets_prefix_defaults_to_the_pools_name_when_the_pool_has_one() {
    let json = r#"{"upstreams":[{"name":"app1"}],"pool":"site-1","fleet":{"cluster":"etcd"}}"#;
    let config = Config::parse(json.as_bytes()).unwrap();
    assert_eq!(config.fleet.clone().unwrap().prefix, "site-1");
    let again = Config::parse(config.effective_json().as_bytes()).unwrap();
    assert_eq!(again, config, "the effective form reads back");
    let json = r#"{"upstreams":[{"name":"app1"}],"pool":"site-1","fleet":{"cluster":"etcd","prefix":"a/b"}}"#;
    let config = Config::parse(json.as_bytes()).unwrap();
    assert_eq!(
        config.fleet.unwrap().prefix,
        "a/b",
        "a prefix given is kept"
    );
}

#[test]
fn every_field_of_a_fleet_is_read_as_written() {
    let config = parse(
        r#"{"cluster":"etcd","prefix":"site/pool-1","lease_ttl":"10s",
            "user":"upcheck","password":"s3cret"}"#,
    )
    .unwrap();
    let fleet = config.fleet.unwrap();
    assert_eq!(fleet.prefix, "site/pool-1");
    assert_eq!(fleet.lease_ttl, Duration::from_secs(10));
    assert_eq!(fleet.credentials(), Some(("upcheck", "s3cret")));
}

#[test]
fn bad_fleets_are_refused_with_the_fields_path_and_the_reason() {
    let cases = [
        (r#"{}"#, "fleet.cluster: missing"),
        (
            r#"{"cluster":"etcd","lease_ttl":"1s"}"#,
            "fleet.lease_ttl: must be at least 2s (etcd's shortest lease), got 1s",
        ),
        (
            r#"{"cluster":"etcd","lease_ttl":"2.5s"}"#,
            "fleet.lease_ttl: must be whole seconds",
        ),
        (
            r#"{"cluster":"etcd","prefix":""}"#,
            "fleet.prefix: must not be empty",
        ),
        (
            r#"{"cluster":"etcd","prefix":"/a"}"#,
            "fleet.prefix: \"/a\" is not a clean path",
        ),
        (
            r#"{"cluster":"etcd","prefix":"a/../b"}"#,
            "fleet.prefix: \"a/../b\" is not a clean path",
        ),
        (
            r#"{"cluster":"etcd","prefix":"a b"}"#,
            "fleet.prefix: \"a b\" contains ' '",
        ),
        (
            r#"{"cluster":"etcd","members":3}"#,
            "fleet.members: unknown field `members`",
        ),
        (
            r#"{"cluster":"etcd","user":"u"}"#,
            "fleet.password: missing; a user for etcd's authentication needs its password",
        ),
        (
            r#"{"cluster":"etcd","password":"p"}"#,
            "fleet.user: missing; a password is for etcd's authentication, which needs its user",
        ),
        (
            r#"{"cluster":"etcd","user":"u","password":""}"#,
            "fleet.password: must not be empty",
        ),
        (
            r#"{"cluster":"etcd","user":"a b","password":"p"}"#,
            "fleet.user: must not contain spaces",
        ),
        (
            r#"{"cluster":"etcd","credentials":{"user":"u"}}"#,
            "fleet.credentials: unknown field `credentials`",
        ),
        (r#"[]"#, "fleet: expected an object"),
    ];
    for (fleet, expected) in cases {
        let error = parse(fleet).expect_err(fleet);
        assert!(error.starts_with(expected), "{fleet}: {error}");
    }
}

#[test]
fn a_refused_password_is_never_repeated_in_the_error() {
    let long = "p".repeat(5000);
    for password in [long.as_str(), "bad\u{7}one"] {
        let fleet = format!(
            r#"{{"cluster":"etcd","user":"u","password":{}}}"#,
            serde_json::to_string(password).unwrap()
        );
        let error = parse(&fleet).expect_err("refused");
        assert!(error.starts_with("fleet.password:"), "{error}");
        assert!(
            !error.contains("ppppp") && !error.contains("bad"),
            "{error}"
        );
    }
}

#[test]
fn a_fleet_may_name_the_cluster_its_watch_goes_through_and_nothing_else_there() {
    let config = parse(r#"{"cluster":"etcd","watch_cluster":"etcd_grpc"}"#).unwrap();
    let fleet = config.fleet.clone().unwrap();
    assert_eq!(fleet.watch_cluster.as_deref(), Some("etcd_grpc"));
    let again = Config::parse(config.effective_json().as_bytes()).unwrap();
    assert_eq!(again, config, "the effective form reads back");
    let off = parse(r#"{"cluster":"etcd","watch_cluster":null}"#).unwrap();
    assert_eq!(off.fleet.unwrap().watch_cluster, None);
    let e = parse(r#"{"cluster":"etcd","watch_cluster":"a b"}"#).unwrap_err();
    assert_eq!(
        e.to_string(),
        "fleet.watch_cluster: \"a b\" contains ' ', which is not allowed"
    );
}

#[test]
fn a_watch_is_refused_for_nginx_which_opens_no_grpc_stream() {
    let json = r#"{"proxy":"nginx","upstreams":[{"name":"127.0.0.1:3001"}],
        "fleet":{"cluster":"etcd","watch_cluster":"etcd_grpc"}}"#;
    let e = Config::parse(json.as_bytes()).unwrap_err().to_string();
    assert!(
        e.starts_with("fleet.watch_cluster: etcd's watch needs Envoy"),
        "{e}"
    );
}
