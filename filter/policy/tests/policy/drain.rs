//! Drain: a backend's answers say it is going away (the header on a probe's answer or a user's
//! response, or a probe answering `drain_status`); it takes no new requests, nothing it does
//! meanwhile counts as a failure, the pool guard never brings it back, and its first probe that
//! passes without the signal ends it.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use support::*;
use upcheck_policy::drain::{Drain, Signal};
use upcheck_policy::{page, Config, Event, Guard, Health, Level, Pool, ProbeAnswer, ProbeOutcome};

/// Tokens for the probes these tests answer themselves, clear of the proxy's own.
static TOKENS: AtomicU32 = AtomicU32::new(1_000_000);

/// A probe of `name` sent at `sent` answers `status` at `at`, carrying the drain signal header
/// if `header`.
fn probe_answer(
    proxy: &mut Proxy,
    name: &str,
    status: u16,
    header: bool,
    sent: Duration,
    at: Duration,
) {
    let i = proxy.index_of(name).expect("known backend");
    let token = TOKENS.fetch_add(1, Ordering::Relaxed);
    let _ = proxy.pool.probe_sent(i, token, sent);
    let effects = proxy.pool.probe_answered(
        token,
        ProbeAnswer {
            signalled: header,
            ..answer_from_backend(status)
        },
        at,
    );
    proxy.carry_out(effects, at);
}

/// Every backend of `config` healthy at 0 s.
fn given_healthy(config: Config) -> Proxy {
    given_every_backend_passing_at(config, secs(0))
}

/// app1 and app2 over the seed config, both healthy at 0 s.
fn given_two_healthy_backends() -> Proxy {
    given_healthy(config(&["app1", "app2"], ""))
}

/// Every backend of `config` healthy at 0 s; then app1's probe answer at 1 s carries the drain
/// header.
fn given_app1_draining(config: Config) -> Proxy {
    let mut proxy = given_healthy(config);
    probe_answer(&mut proxy, "app1", 200, true, secs(1), secs(1));
    proxy
}

/// app1 and app2 healthy at 0 s; app1 draining from 1 s on its probe's header.
fn given_app1_draining_beside_app2() -> Proxy {
    given_app1_draining(config(&["app1", "app2"], ""))
}

/// app1, app2 and app3 healthy at 0 s, app1 draining from 1 s; app2's process goes away, its
/// port refusing a request at 2 s, while app3 still serves.
fn given_app2_gone_while_app1_drains() -> Proxy {
    let mut proxy = given_app1_draining(config(&["app1", "app2", "app3"], ""));
    request(&mut proxy, "app2", REFUSED, secs(2));
    proxy
}

fn drain_events(proxy: &Proxy) -> Vec<&Event> {
    proxy
        .events
        .iter()
        .filter(|e| matches!(e, Event::DrainStarted { .. } | Event::DrainEnded { .. }))
        .collect()
}

fn failures_counted(proxy: &Proxy) -> usize {
    proxy
        .events
        .iter()
        .filter(|e| matches!(e, Event::RequestFailed { .. }))
        .count()
}

fn guard_events(proxy: &Proxy) -> Vec<Guard> {
    proxy
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Guard(g) => Some(*g),
            _ => None,
        })
        .collect()
}

#[test]
fn a_probe_answer_carrying_the_header_drains_its_backend_at_once() {
    let mut proxy = given_two_healthy_backends();
    probe_answer(&mut proxy, "app1", 200, true, secs(1), secs(1));
    assert_eq!(routable(&proxy), ["app2"]);
    assert!(picks(&mut proxy, 10, secs(1)).iter().all(|p| p == "app2"));
    let drain = Drain {
        since: secs(1),
        by: Signal::ProbeHeader,
    };
    assert_eq!(proxy.members()[0].draining(), Some(drain));
    assert_eq!(
        drain_events(&proxy),
        [&Event::DrainStarted {
            index: 0,
            name: "app1".into(),
            drain
        }]
    );
    assert_eq!(
        proxy.members()[0].evidence.active.status,
        Health::Healthy,
        "a drain is no verdict on its health"
    );
}

#[test]
fn a_user_response_carrying_the_header_drains_its_backend_and_counts_as_no_failure() {
    let mut proxy = given_two_healthy_backends();
    let signalled = answered(503).signalled(true);
    request(&mut proxy, "app1", signalled, secs(2));
    assert_eq!(routable(&proxy), ["app2"]);
    assert_eq!(
        proxy.members()[0].draining(),
        Some(Drain {
            since: secs(2),
            by: Signal::ResponseHeader
        })
    );
    assert_eq!(failures_counted(&proxy), 0);
}

#[test]
fn a_probe_answering_the_drain_status_drains_its_backend_and_fails_no_probe() {
    let mut proxy = given_healthy(config(
        &["app1", "app2"],
        r#""health_checks":{"active":{"drain_status":404}}"#,
    ));
    probe_answer(&mut proxy, "app1", 404, false, secs(1), secs(1));
    assert_eq!(routable(&proxy), ["app2"]);
    assert_eq!(
        proxy.members()[0].draining().map(|d| d.by),
        Some(Signal::Status(404))
    );
    let unhealthy = proxy.events.iter().any(|e| {
        matches!(
            e,
            Event::HealthChanged {
                to: Health::Unhealthy,
                ..
            }
        )
    });
    assert!(!unhealthy, "{:?}", proxy.events);
}

#[test]
fn without_a_drain_status_a_probe_answering_404_is_a_failed_probe_not_a_drain() {
    let mut proxy = given_two_healthy_backends();
    probe_answer(&mut proxy, "app1", 404, false, secs(1), secs(1));
    assert_eq!(proxy.members()[0].draining(), None);
    assert_eq!(proxy.members()[0].evidence.active.status, Health::Unhealthy);
}

#[test]
fn requests_to_a_draining_backend_finish_without_counting_anywhere() {
    let mut proxy = given_app1_draining_beside_app2();
    for n in 0..10 {
        let outcome = if n % 2 == 0 { answered(502) } else { REFUSED };
        request(&mut proxy, "app1", outcome, secs(1) + ms(10 * n));
    }
    proxy.tick(secs(2));
    assert_eq!(failures_counted(&proxy), 0);
    let passive = proxy.config().health_checks.passive.clone();
    let key = &proxy.members()[0].key;
    let (_, app1) = proxy
        .table
        .iter()
        .find(|(k, _)| k == key)
        .expect("app1's entry");
    assert_eq!(app1.count(secs(2), &passive), 0, "no failure remembered");
    assert_eq!(app1.run, 0, "no run of failures for the outlier rules");
    assert!(!app1.outlier.is_ejected(secs(2)));
    assert!(proxy.ejected().iter().all(|e| !e));
}

#[test]
fn the_guard_never_brings_a_draining_backend_back_whatever_the_other_does() {
    let mut proxy = given_app1_draining_beside_app2();
    // app2 fails its probes while app1, draining, still passes its own: app2 is all there is.
    probe(&mut proxy, "app2", SOFT_503, secs(5));
    assert_eq!(routable(&proxy), ["app2"]);
    assert_eq!(proxy.guard(), Guard::LastDown);
    // app1's probes then fail alike with app2's, within one round: without the drain the guard
    // would keep both in as a shared cause.
    probe(&mut proxy, "app1", SOFT_503, secs(10));
    probe(&mut proxy, "app2", SOFT_503, secs(10));
    assert_eq!(proxy.members()[1].evidence.active.status, Health::Unhealthy);
    assert_eq!(
        routable(&proxy),
        ["app2"],
        "the guard keeps app2, never app1"
    );
    assert_eq!(proxy.guard(), Guard::LastDown);
    assert!(picks(&mut proxy, 10, secs(10)).iter().all(|p| p == "app2"));
    // app2 then refuses connections too: a closed port serves nobody, so app1, draining but
    // still accepting, takes the users (its failed probes had no say in it).
    probe(&mut proxy, "app2", ProbeOutcome::Refused, secs(20));
    request(&mut proxy, "app2", REFUSED, secs(20));
    assert_eq!(routable(&proxy), ["app1"]);
    assert_eq!(proxy.guard(), Guard::DrainingServe);
}

#[test]
fn a_restart_while_the_other_drains_sends_users_to_the_draining_one_until_the_port_opens() {
    let mut proxy = given_app1_draining_beside_app2();
    assert_eq!(routable(&proxy), ["app2"]);
    // app2's process goes away: its port refuses.
    request(&mut proxy, "app2", REFUSED, secs(2));
    assert_eq!(routable(&proxy), ["app1"]);
    assert_eq!(proxy.guard(), Guard::DrainingServe);
    assert!(picks(&mut proxy, 10, secs(2)).iter().all(|p| p == "app1"));
    assert_eq!(guard_events(&proxy), [Guard::DrainingServe]);
    assert_eq!(failures_counted(&proxy), 1, "the refusal is app2's failure");
    // app2 boots: its port accepts and its probe times out. It is all that stays, so it is
    // tried again; app1 still drains and takes nothing new.
    probe(&mut proxy, "app2", ProbeOutcome::Timeout(secs(5)), secs(4));
    assert_eq!(routable(&proxy), ["app2"]);
    // It answers /up again: the guard is off and app1 still drains.
    probe(&mut proxy, "app2", ProbeOutcome::Pass, secs(6));
    proxy.tick(secs(6));
    assert_eq!(routable(&proxy), ["app2"]);
    assert_eq!(proxy.guard(), Guard::Off);
    assert!(proxy.members()[0].evidence.draining());
}

#[test]
fn a_draining_backend_that_refuses_takes_nothing_even_when_the_other_refuses_too() {
    let mut proxy = given_app1_draining_beside_app2();
    probe(&mut proxy, "app1", ProbeOutcome::Refused, secs(2));
    request(&mut proxy, "app2", REFUSED, secs(2));
    assert_eq!(
        routable(&proxy),
        ["app2"],
        "nothing serves: the one that stays is tried"
    );
    assert_eq!(proxy.guard(), Guard::Off);
}

#[test]
fn a_draining_backend_takes_nothing_while_one_that_stays_accepts_though_another_refuses() {
    let mut proxy = given_app2_gone_while_app1_drains();
    assert_eq!(routable(&proxy), ["app3"]);
    assert_eq!(proxy.guard(), Guard::Off);
    assert!(picks(&mut proxy, 10, secs(2)).iter().all(|p| p == "app3"));
}

#[test]
fn a_draining_backend_serves_once_every_backend_that_stays_refuses() {
    let mut proxy = given_app2_gone_while_app1_drains();
    assert_eq!(routable(&proxy), ["app3"]);
    request(&mut proxy, "app3", REFUSED, secs(3));
    assert_eq!(routable(&proxy), ["app1"]);
    assert_eq!(proxy.guard(), Guard::DrainingServe);
    assert!(picks(&mut proxy, 10, secs(3)).iter().all(|p| p == "app1"));
}

#[test]
fn of_several_draining_backends_only_those_that_accept_serve_when_none_that_stays_does() {
    let mut proxy = given_healthy(config(&["app1", "app2", "app3", "app4"], ""));
    for name in ["app1", "app2", "app3"] {
        probe_answer(&mut proxy, name, 200, true, secs(1), secs(1));
    }
    probe(&mut proxy, "app2", ProbeOutcome::Refused, secs(2));
    request(&mut proxy, "app4", REFUSED, secs(2));
    assert_eq!(routable(&proxy), ["app1", "app3"]);
    assert_eq!(proxy.guard(), Guard::DrainingServe);
}

#[test]
fn a_retry_from_the_only_backend_in_rotation_goes_to_a_draining_one_that_accepts() {
    let mut proxy = given_two_healthy_backends();
    assert_eq!(proxy.pool.retry_choice(1), 0, "app1's turn is next");
    probe_answer(&mut proxy, "app1", 200, true, secs(1), secs(1));
    assert_eq!(routable(&proxy), ["app2"]);
    assert_eq!(proxy.pool.retry_choice(1), 0);
    // Once app1 refuses too, a retry stays with app2.
    probe(&mut proxy, "app1", ProbeOutcome::Refused, secs(2));
    assert_eq!(proxy.pool.retry_choice(1), 1);
}

#[test]
fn a_retry_goes_to_another_backend_in_rotation_before_a_draining_one() {
    let mut proxy = given_app1_draining(config(&["app1", "app2", "app3"], ""));
    assert_eq!(routable(&proxy), ["app2", "app3"]);
    assert_eq!(proxy.pool.retry_choice(1), 2);
    // Once app3 refuses, app2 is the only one in rotation: its retry goes to app1, draining.
    request(&mut proxy, "app3", REFUSED, secs(2));
    assert_eq!(proxy.pool.retry_choice(1), 0);
}

#[test]
fn a_draining_backend_is_neither_ejected_nor_a_candidate_for_the_cap() {
    // Of two, the cap lets one go; with app1 draining, app2 is the last one and stays.
    let mut proxy = given_app1_draining_beside_app2();
    for n in 0..3 {
        request(&mut proxy, "app2", answered(502), secs(2) + ms(n));
    }
    assert_eq!(proxy.ejected(), [false, false]);
    assert_eq!(routable(&proxy), ["app2"]);
    assert!(proxy
        .events
        .iter()
        .any(|e| matches!(e, Event::CapReached { name, .. } if name == "app2")));
}

#[test]
fn the_cap_takes_its_share_of_the_backends_that_stay_not_of_those_that_drain() {
    // Of the three that stay, 50 % lets one go; of all four it would let two.
    let mut proxy = given_app1_draining(config(&["app1", "app2", "app3", "app4"], ""));
    for n in 0..3 {
        request(&mut proxy, "app2", answered(502), secs(2) + ms(n));
    }
    for n in 0..3 {
        request(&mut proxy, "app3", answered(502), secs(3) + ms(n));
    }
    assert_eq!(proxy.ejected(), [false, true, false, false]);
    assert_eq!(routable(&proxy), ["app3", "app4"]);
    assert!(proxy
        .events
        .iter()
        .any(|e| matches!(e, Event::CapReached { name, .. } if name == "app3")));
}

#[test]
fn at_max_ejection_percent_100_the_last_backend_that_stays_is_never_ejected() {
    // Were a draining backend one of the N, 100 % would let the last one that stays go.
    let mut two = given_app1_draining(config(&["app1", "app2"], r#""max_ejection_percent": 100"#));
    for n in 0..3 {
        request(&mut two, "app2", answered(502), secs(2) + ms(n));
    }
    assert_eq!(two.ejected(), [false, false]);
    assert_eq!(routable(&two), ["app2"]);

    let names = ["app1", "app2", "app3", "app4"];
    let mut four = given_app1_draining(config(&names, r#""max_ejection_percent": 100"#));
    for (k, name) in ["app2", "app3", "app4"].into_iter().enumerate() {
        for n in 0..3 {
            request(&mut four, name, answered(502), secs(2 + k as u64) + ms(n));
        }
    }
    assert_eq!(four.ejected(), [false, true, true, false]);
    assert_eq!(routable(&four), ["app4"]);
}

#[test]
fn below_min_healthy_percent_the_spread_counts_and_takes_only_the_backends_that_stay() {
    let mut proxy = given_app1_draining(config(
        &["app1", "app2", "app3", "app4"],
        r#""min_healthy_percent": 60"#,
    ));
    // Two of the three that stay are routable: 67 %, not the 50 % of all four.
    probe(&mut proxy, "app3", SOFT_503, secs(2));
    assert_eq!(routable(&proxy), ["app2", "app4"]);
    assert_eq!(proxy.guard(), Guard::Off);
    // One of three is too few: the spread is over those that stay, never the draining one.
    probe(&mut proxy, "app4", SOFT_503, secs(3));
    assert_eq!(routable(&proxy), ["app2", "app3", "app4"]);
    assert_eq!(proxy.guard(), Guard::Panic);
}

#[test]
fn when_every_backend_drains_traffic_goes_to_all_with_one_warning_and_one_when_it_ends() {
    let mut proxy = given_two_healthy_backends();
    probe_answer(&mut proxy, "app1", 200, true, secs(1), secs(1));
    probe_answer(&mut proxy, "app2", 200, true, secs(1), secs(1));
    assert_eq!(routable(&proxy), ["app1", "app2"]);
    assert_eq!(proxy.guard(), Guard::AllDraining);
    let mut seen = picks(&mut proxy, 10, secs(1));
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["app1", "app2"]);
    // More signals and time change nothing: the warning is given once.
    request(&mut proxy, "app1", answered(200).signalled(true), secs(2));
    probe_answer(&mut proxy, "app2", 200, true, secs(11), secs(11));
    proxy.tick(secs(12));
    assert_eq!(guard_events(&proxy), [Guard::AllDraining]);
    let warning = Event::Guard(Guard::AllDraining);
    assert_eq!(warning.level(), Level::Warn);
    // app1 comes back: the warning ends, once.
    probe(&mut proxy, "app1", ProbeOutcome::Pass, secs(21));
    proxy.tick(secs(22));
    assert_eq!(guard_events(&proxy), [Guard::AllDraining, Guard::Off]);
    assert_eq!(routable(&proxy), ["app1"]);
}

#[test]
fn when_every_backend_drains_the_rules_still_leave_out_those_that_fail_or_refuse() {
    let mut proxy = given_healthy(config(&["app1", "app2", "app3"], ""));
    for name in ["app1", "app2", "app3"] {
        probe_answer(&mut proxy, name, 200, true, secs(1), secs(1));
    }
    assert_eq!(routable(&proxy), ["app1", "app2", "app3"]);
    probe(&mut proxy, "app2", SOFT_503, secs(2));
    probe(&mut proxy, "app3", ProbeOutcome::Refused, secs(2));
    assert_eq!(routable(&proxy), ["app1"]);
    assert_eq!(proxy.guard(), Guard::AllDraining);
}

#[test]
fn a_backend_comes_back_at_its_first_passing_probe_without_the_signal_not_at_a_response() {
    let mut proxy = given_two_healthy_backends();
    request(&mut proxy, "app1", answered(200).signalled(true), secs(1));
    // A response without the header ends nothing: a draining app still serves what it was sent.
    request(&mut proxy, "app1", answered(200), secs(2));
    assert_eq!(routable(&proxy), ["app2"]);
    // Nor does a probe with the header, or a passing probe sent before the drain began.
    probe_answer(&mut proxy, "app1", 200, true, secs(3), secs(3));
    assert_eq!(routable(&proxy), ["app2"]);
    proxy.tick(secs(4));
    assert_eq!(routable(&proxy), ["app2"]);
    // The first probe that passes without it does.
    probe(&mut proxy, "app1", ProbeOutcome::Pass, secs(10));
    assert_eq!(routable(&proxy), ["app1", "app2"]);
    assert_eq!(proxy.members()[0].draining(), None);
    assert_eq!(
        drain_events(&proxy),
        [
            &Event::DrainStarted {
                index: 0,
                name: "app1".into(),
                drain: Drain {
                    since: secs(1),
                    by: Signal::ResponseHeader
                }
            },
            &Event::DrainEnded {
                index: 0,
                name: "app1".into(),
                by: Signal::ResponseHeader,
                lasted: secs(9)
            }
        ]
    );
}

#[test]
fn a_passing_probe_sent_before_the_drain_began_does_not_end_it() {
    let mut proxy = given_two_healthy_backends();
    let i = proxy.index_of("app1").expect("known backend");
    let _ = proxy.pool.probe_sent(i, 77, secs(1));
    request(&mut proxy, "app1", answered(200).signalled(true), secs(2));
    let effects = proxy
        .pool
        .probe_answered(77, answer_from_backend(200), secs(3));
    proxy.carry_out(effects, secs(3));
    assert!(proxy.members()[0].draining().is_some());
    assert_eq!(routable(&proxy), ["app2"]);
}

#[test]
fn another_vm_stops_picking_a_draining_backend_once_it_reads_the_shared_table() {
    let mut proxy = given_two_healthy_backends();
    let mut worker: Pool = Pool::new(proxy.config().clone(), secs(0), |_| ());
    let active = proxy.active_table();
    let _ = worker.active_published(&active, secs(0));
    assert_eq!(worker.members().iter().filter(|m| m.routable).count(), 2);
    request(&mut proxy, "app1", answered(200).signalled(true), secs(1));
    let _ = worker.passive_published(&proxy.table, secs(1));
    let routable: Vec<&str> = worker
        .members()
        .iter()
        .filter(|m| m.routable)
        .map(|m| m.name())
        .collect();
    assert_eq!(routable, ["app2"]);
    assert!(
        worker.members()[0].draining().is_some(),
        "the drain is in the shared table, not only the VM that read the signal"
    );
}

#[test]
fn the_drain_status_is_off_by_default_and_takes_a_code_or_a_class() {
    let c = config(&["a"], "");
    assert_eq!(c.health_checks.active.drain_status, None);
    for (given, status, drains) in [
        ("404", 404, true),
        (r#""4xx""#, 418, true),
        ("null", 404, false),
    ] {
        let c = config(
            &["a"],
            &format!(r#""health_checks":{{"active":{{"drain_status":{given}}}}}"#),
        );
        let matched = c
            .health_checks
            .active
            .drain_status
            .is_some_and(|m| m.matches(status));
        assert_eq!(matched, drains, "{given}");
    }
}

#[test]
fn a_drain_status_a_passing_probe_answers_is_refused_naming_the_field() {
    for (active, named) in [
        (r#"{"drain_status":200}"#, "200"),
        (r#"{"drain_status":"2xx"}"#, "2xx"),
        (r#"{"expect_status":404,"drain_status":"4xx"}"#, "4xx"),
        (r#"{"expect_status":"4xx","drain_status":404}"#, "404"),
    ] {
        let json =
            format!(r#"{{"upstreams":[{{"name":"a"}}],"health_checks":{{"active":{active}}}}}"#);
        let error = Config::parse(json.as_bytes())
            .expect_err(active)
            .to_string();
        assert!(
            error.starts_with(&format!("health_checks.active.drain_status: {named} ")),
            "{error}"
        );
    }
    let json = r#"{"upstreams":[{"name":"a"}],"health_checks":{"active":{"drain_status":"6xx"}}}"#;
    let error = Config::parse(json.as_bytes()).expect_err("6xx").to_string();
    assert!(
        error.starts_with("health_checks.active.drain_status: expected a status"),
        "{error}"
    );
}

#[test]
fn the_status_page_shows_a_draining_backend_with_what_said_so_and_since_when_in_each_form() {
    let proxy = given_app1_draining_beside_app2();
    let now = secs(4);
    let text = page::text(&proxy.pool, None, now);
    let app1 = text
        .lines()
        .find(|l| l.starts_with("app1"))
        .expect("app1's line");
    assert!(
        app1.contains(
            "draining (for 3.0s: its probe's answer carried x-envoy-immediate-health-check-fail)"
        ),
        "{app1}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&page::json(&proxy.pool, None, now)).expect("valid JSON");
    assert_eq!(
        json["backends"][0]["draining"],
        serde_json::json!({"by": "its probe's answer carried x-envoy-immediate-health-check-fail", "since_ms": 3000})
    );
    assert_eq!(json["backends"][1]["draining"], serde_json::Value::Null);
    let html = page::html(&proxy.pool, None, now);
    let row = html
        .lines()
        .find(|l| l.contains("id=\"backend-0\""))
        .expect("app1's row");
    assert!(
        row.contains("draining since 00:00:01 UTC (for 3.0s), no new requests: its probe&#39;s answer carried x-envoy-immediate-health-check-fail"),
        "{row}"
    );
}

/// app1 and app2 as configured, app1 drained by the operator when `drained`.
fn operator_config(drained: bool) -> Config {
    let json = format!(
        r#"{{"upstreams":[{{"name":"app1","drain":{drained}}},{{"name":"app2"}}],
            "health_checks":{{"active":{{"interval":"10s","timeout":"5s"}}}}}}"#
    );
    Config::parse(json.as_bytes()).expect("test config parses")
}

#[test]
fn a_backend_the_operator_drains_takes_no_new_request_through_passing_probes_until_the_drain_ends()
{
    let mut proxy = given_healthy(operator_config(false));
    proxy.reconfigure(operator_config(true), secs(1));
    let drain = Drain {
        since: secs(1),
        by: Signal::Operator,
    };
    assert_eq!(proxy.members()[0].draining(), Some(drain));
    assert_eq!(routable(&proxy), ["app2"]);
    probe_answer(&mut proxy, "app1", 200, false, secs(11), secs(11));
    proxy.reconfigure(operator_config(true), secs(12));
    assert_eq!(
        proxy.members()[0].draining(),
        Some(drain),
        "neither a passing probe nor the same configuration again ends it"
    );
    assert!(picks(&mut proxy, 10, secs(12)).iter().all(|p| p == "app2"));
    assert_eq!(
        proxy.members()[0].evidence.active.status,
        Health::Healthy,
        "it is still probed"
    );
    proxy.reconfigure(operator_config(false), secs(13));
    assert_eq!(proxy.members()[0].draining(), None);
    assert_eq!(routable(&proxy), ["app1", "app2"]);
    assert_eq!(
        drain_events(&proxy),
        [
            &Event::DrainStarted {
                index: 0,
                name: "app1".into(),
                drain
            },
            &Event::DrainEnded {
                index: 0,
                name: "app1".into(),
                by: Signal::Operator,
                lasted: secs(12),
            }
        ]
    );
    let ended = drain_events(&proxy).last().map(ToString::to_string);
    assert!(
        ended
            .is_some_and(|line| line
                .contains("app1 no longer draining: the configuration no longer drains it")),
        "the log line says what ended it"
    );
}

#[test]
fn a_backend_configured_drained_from_the_start_never_takes_a_user() {
    let mut proxy = given_healthy(operator_config(true));
    assert_eq!(routable(&proxy), ["app2"]);
    assert!(picks(&mut proxy, 10, secs(1)).iter().all(|p| p == "app2"));
}
