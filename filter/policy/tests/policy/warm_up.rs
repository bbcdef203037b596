//! Warm-up (`health_checks.slow_start`): a backend entering service gets a share of its weight
//! that rises by Envoy's formula over the window, measured as picks through the pool.

use crate::support;

use std::time::Duration;
use support::*;
use upcheck_policy::{Config, Guard, Pick, ProbeOutcome, Said};

const BOTH: [&str; 2] = ["a", "b"];
const THREE: [&str; 3] = ["a", "b", "c"];

fn slow_start(value: &str) -> Config {
    slow_start_over(&BOTH, value)
}

/// `names` with `health_checks.slow_start` set to `value`.
fn slow_start_over(names: &[&str], value: &str) -> Config {
    config(
        names,
        &format!(r#""health_checks":{{"slow_start":{value}}}"#),
    )
}

/// Envoy's share of the weight `elapsed` into `window`.
fn envoy(elapsed: f64, window: f64, aggression: f64, min_weight_percent: f64) -> f64 {
    (elapsed.max(1.0) / window)
        .min(1.0)
        .powf(1.0 / aggression)
        .max(min_weight_percent / 100.0)
}

/// The share of 1,000 picks at `now` that go to `name`.
fn picked(proxy: &mut Proxy, name: &str, now: Duration) -> f64 {
    let i = proxy.index_of(name).expect("known backend");
    let hits = (0..1000)
        .filter(|_| proxy.pool.pick(now) == Pick::Backend(i))
        .count();
    hits as f64 / 1000.0
}

/// Both pass at start; b fails at 20 s and passes again at 30 s, warming up from then.
fn given_b_back_at_30s(config: Config) -> Proxy {
    let mut proxy = Proxy::new(config, secs(0));
    proxy.probe("a", ProbeOutcome::Pass, ms(10));
    proxy.probe("b", ProbeOutcome::Pass, ms(20));
    proxy.probe("b", ProbeOutcome::Soft(Said::Status(503)), secs(20));
    proxy.probe("b", ProbeOutcome::Pass, secs(30));
    proxy
}

/// a, b and c with a 100 s warm-up, each having passed its first probe at 10 ms.
fn given_three_passing_with_a_100s_warm_up() -> Proxy {
    given_every_backend_passing_at(slow_start_over(&THREE, r#""100s""#), ms(10))
}

/// b's share of the traffic against a at full weight, at each share of a 100 s window, matches
/// the formula to within the 5 % steps it is applied in (and the picks' partial cycle).
fn shares_follow_the_formula(value: &str, aggression: f64, min_weight_percent: f64) {
    let mut proxy = given_b_back_at_30s(slow_start(value));
    for at in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let now = secs(30) + Duration::from_secs_f64(at * 100.0);
        proxy.tick(now);
        let weight = envoy(at * 100.0, 100.0, aggression, min_weight_percent);
        let expected = if at >= 1.0 {
            0.5
        } else {
            weight / (1.0 + weight)
        };
        let got = picked(&mut proxy, "b", now);
        assert!(
            (got - expected).abs() <= 0.015,
            "at {at} of the window b got {got}, the formula {expected}"
        );
    }
}

#[test]
fn a_returning_backends_share_rises_linearly_by_envoys_formula_with_aggression_1() {
    shares_follow_the_formula(r#""100s""#, 1.0, 10.0);
}

#[test]
fn a_returning_backends_share_rises_by_envoys_formula_with_aggression_2_and_a_floor_of_30_percent()
{
    shares_follow_the_formula(
        r#"{"window":"100s","aggression":2,"min_weight_percent":30}"#,
        2.0,
        30.0,
    );
}

#[test]
fn a_slower_aggression_keeps_the_share_at_its_floor_longer() {
    shares_follow_the_formula(r#"{"window":100000000000,"aggression":0.5}"#, 0.5, 10.0);
}

#[test]
fn a_new_backend_warms_up_from_its_first_passing_probe() {
    let mut proxy = given_backends_passing_their_probes(&["a"], "");
    proxy.reconfigure(slow_start(r#""100s""#), secs(50));
    proxy.probe("b", ProbeOutcome::Pass, secs(51));
    let b = &proxy.members()[1];
    assert_eq!(b.evidence.active.warm_up, Some(secs(51)));
    let share = picked(&mut proxy, "b", secs(51));
    assert!((share - 0.1 / 1.1).abs() <= 0.01, "b got {share}");
    proxy.tick(secs(151));
    assert_eq!(
        picked(&mut proxy, "b", secs(151)),
        0.5,
        "warm after the window"
    );
}

#[test]
fn backends_entering_service_together_at_cold_start_do_not_warm_up_against_each_other() {
    let mut proxy = Proxy::new(slow_start(r#""100s""#), secs(0));
    proxy.probe("a", ProbeOutcome::Pass, ms(10));
    proxy.probe("b", ProbeOutcome::Pass, ms(300));
    for m in proxy.members() {
        assert_eq!(m.evidence.active.warm_up, None, "{}", m.name());
    }
    assert_eq!(picked(&mut proxy, "b", secs(1)), 0.5);
}

#[test]
fn a_lone_healthy_backend_that_warms_up_gets_every_request() {
    let mut proxy = given_b_back_at_30s(slow_start(r#""100s""#));
    proxy.probe("a", ProbeOutcome::Soft(Said::Status(503)), secs(31));
    proxy.tick(secs(31));
    assert_eq!(proxy.routable(), ["b"]);
    assert_eq!(picked(&mut proxy, "b", secs(31)), 1.0);
}

#[test]
fn a_returning_backend_warms_up_beside_one_in_service_though_another_is_down() {
    let mut proxy = given_three_passing_with_a_100s_warm_up();
    proxy.probe("b", ProbeOutcome::Soft(Said::Status(503)), secs(20));
    proxy.probe("c", ProbeOutcome::Soft(Said::Status(503)), secs(20));
    proxy.probe("c", ProbeOutcome::Pass, secs(30));
    assert_eq!(proxy.routable(), ["a", "c"]);
    assert_eq!(proxy.members()[2].evidence.active.warm_up, Some(secs(30)));
    let share = picked(&mut proxy, "c", secs(30));
    assert!((share - 0.1 / 1.1).abs() <= 0.01, "c got {share}");
}

#[test]
fn nobody_warms_up_while_the_cap_keeps_a_failing_backend_in_rotation() {
    let mut proxy = given_three_passing_with_a_100s_warm_up();
    proxy.probe("b", ProbeOutcome::Soft(Said::Status(503)), secs(20));
    proxy.probe("b", ProbeOutcome::Pass, secs(30));
    // a is ejected; c fails as much, but of three one may go.
    for t in 0..3 {
        proxy.request("a", answered(502), secs(31) + ms(t));
    }
    for t in 0..3 {
        proxy.request("c", answered(502), secs(32) + ms(t));
    }
    proxy.tick(secs(32));
    assert_eq!(proxy.ejected(), [true, false, false]);
    assert_eq!(proxy.routable(), ["b", "c"]);
    assert_eq!(picked(&mut proxy, "b", secs(32)), 0.5);
}

#[test]
fn nobody_warms_up_while_the_guard_is_engaged() {
    let four = ["a", "b", "c", "d"];
    let extra = r#""min_healthy_percent":60,"health_checks":{"slow_start":"100s"}"#;
    let mut proxy = given_backends_passing_their_probes(&four, extra);
    proxy.probe("b", ProbeOutcome::Soft(Said::Status(503)), secs(20));
    proxy.probe("b", ProbeOutcome::Pass, secs(30));
    // Two of four routable is fewer than 60 %: traffic spreads over all four alike.
    proxy.probe("a", ProbeOutcome::Soft(Said::Status(503)), secs(31));
    proxy.probe("c", ProbeOutcome::Soft(Said::Status(503)), secs(31));
    proxy.tick(secs(31));
    assert_eq!(proxy.guard(), Guard::Panic);
    assert_eq!(proxy.routable(), four);
    let share = picked(&mut proxy, "b", secs(31));
    assert!((share - 0.25).abs() <= 0.01, "b got {share}");
}

#[test]
fn without_slow_start_a_returning_backend_gets_its_full_share_at_once() {
    let mut proxy = given_b_back_at_30s(config(&BOTH, ""));
    assert_eq!(proxy.config().health_checks.slow_start.window, None);
    assert_eq!(picked(&mut proxy, "b", secs(30)), 0.5);
}

#[test]
fn the_warm_up_is_spelled_as_a_duration_or_an_object_and_printed_as_an_object() {
    let short = slow_start(r#""30s""#);
    let long = slow_start(r#"{"window":30000000000,"aggression":1.0,"min_weight_percent":10}"#);
    assert_eq!(
        short.health_checks.slow_start,
        long.health_checks.slow_start
    );
    let json = short.effective_json();
    assert!(json.contains(r#""window": "30s""#), "{json}");
    let again = Config::parse(json.as_bytes()).expect("the effective configuration parses");
    assert_eq!(again, short);
    assert_eq!(slow_start("null").health_checks.slow_start.window, None);
}

#[test]
fn a_bad_warm_up_is_refused_naming_the_field() {
    let cases = [
        ("0", "health_checks.slow_start"),
        (r#""-5s""#, "health_checks.slow_start"),
        (r#""0s""#, "health_checks.slow_start"),
        (r#"{"window":"0s"}"#, "health_checks.slow_start.window"),
        (r#"{"window":-1}"#, "health_checks.slow_start.window"),
        (
            r#"{"window":"30s","min_weight_percent":0}"#,
            "health_checks.slow_start.min_weight_percent",
        ),
        (
            r#"{"window":"30s","min_weight_percent":101}"#,
            "health_checks.slow_start.min_weight_percent",
        ),
        (
            r#"{"window":"30s","aggression":0}"#,
            "health_checks.slow_start.aggression",
        ),
        (
            r#"{"window":"30s","aggression":-1.5}"#,
            "health_checks.slow_start.aggression",
        ),
        (
            r#"{"window":"30s","aggression":"fast"}"#,
            "health_checks.slow_start.aggression",
        ),
        (r#"{"ramp":"30s"}"#, "health_checks.slow_start.ramp"),
        ("[]", "health_checks.slow_start"),
    ];
    for (value, path) in cases {
        let json =
            format!(r#"{{"upstreams":[{{"name":"a"}}],"health_checks":{{"slow_start":{value}}}}}"#);
        let error = Config::parse(json.as_bytes()).expect_err(value);
        assert_eq!(error.path, path, "{value}: {error}");
    }
}
