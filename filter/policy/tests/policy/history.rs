//! The history of every change: what the pool appends to the process-wide history as it runs,
//! with the log lines' own reasons, and how much of it each pool keeps.

use crate::support;

use support::*;
use upcheck_policy::history::{self, Change, HistoryTable, Kind};
use upcheck_policy::tables::{decode_history, encode_history};
use upcheck_policy::{page, Event, Health, ProbeOutcome, Said};

/// app1 and app2 healthy at 0 s; app2 then answers 502 to its probes at 10 s and passes at
/// 20 s; at 30 s both fail (the guard engages) and at 40 s both pass again.
fn given_the_incident(extra: &str) -> Proxy {
    let mut proxy = given_every_backend_passing_at(config(&["app1", "app2"], extra), secs(0));
    probe(
        &mut proxy,
        "app2",
        ProbeOutcome::Soft(Said::Status(502)),
        secs(10),
    );
    probe(&mut proxy, "app2", ProbeOutcome::Pass, secs(20));
    probe(&mut proxy, "app1", SOFT_503, secs(30));
    probe(&mut proxy, "app2", SOFT_503, secs(30));
    probe(&mut proxy, "app1", ProbeOutcome::Pass, secs(40));
    probe(&mut proxy, "app2", ProbeOutcome::Pass, secs(40));
    proxy
}

fn kinds(changes: &[Change]) -> Vec<(Option<&str>, Kind)> {
    changes
        .iter()
        .map(|c| (c.backend.as_deref(), c.kind))
        .collect()
}

fn health(from: Health, to: Health) -> Kind {
    Kind::Health { from, to }
}

#[test]
fn every_change_of_the_incident_is_in_the_history_in_order_with_its_time() {
    let proxy = given_the_incident("");
    let app2 = &proxy.history;
    let changes: Vec<(Option<&str>, Kind, u64)> = app2
        .iter()
        .map(|c| (c.backend.as_deref(), c.kind, c.at.as_secs()))
        .collect();
    use Health::*;
    assert_eq!(
        changes,
        [
            (Some("app1"), health(Unknown, Healthy), 0),
            (Some("app2"), health(Unknown, Healthy), 0),
            (Some("app2"), health(Healthy, Unhealthy), 10),
            (Some("app2"), health(Unhealthy, Healthy), 20),
            (Some("app1"), health(Healthy, Unhealthy), 30),
            (Some("app2"), health(Healthy, Unhealthy), 30),
            (None, Kind::GuardEngaged, 30),
            (Some("app1"), health(Unhealthy, Healthy), 40),
            (None, Kind::GuardReleased, 40),
            (Some("app2"), health(Unhealthy, Healthy), 40),
        ],
        "{app2:#?}"
    );
    assert_eq!(proxy.pool.history(), proxy.history.as_slice());
}

#[test]
fn a_changes_cause_is_its_log_lines_reason() {
    let proxy = given_the_incident("");
    let logged: Vec<String> = proxy
        .events
        .iter()
        .filter(|e| matches!(e, Event::HealthChanged { .. } | Event::Guard(_)))
        .map(Event::to_string)
        .collect();
    let shown: Vec<String> = proxy
        .history
        .iter()
        .map(|c| match &c.backend {
            Some(name) => format!("{name} {}", c.cause),
            None => c.cause.clone(),
        })
        .collect();
    assert_eq!(shown, logged);
    let unhealthy = proxy.history.get(2).map(|c| c.cause.as_str());
    assert_eq!(unhealthy, Some("unhealthy: 1 probe answered 502"));
}

#[test]
fn ejections_and_drains_are_changes_and_probes_and_failed_requests_are_not() {
    let mut proxy = given_every_backend_passing_at(
        config(
            &["app1", "app2", "app3"],
            r#""health_checks":{"active":{"drain_status":404}}"#,
        ),
        secs(0),
    );
    let before = proxy.history.len();
    for at in [1, 2, 3] {
        request(&mut proxy, "app2", answered(502), secs(at));
    }
    probe(
        &mut proxy,
        "app3",
        ProbeOutcome::Soft(Said::Status(404)),
        secs(4),
    );
    proxy.tick(secs(14));
    probe(&mut proxy, "app3", ProbeOutcome::Pass, secs(15));
    let after: Vec<(Option<&str>, Kind)> = kinds(proxy.history.get(before..).unwrap_or_default());
    assert_eq!(
        after,
        [
            (Some("app2"), Kind::Ejected),
            (Some("app3"), Kind::Draining),
            (Some("app2"), Kind::NoLongerEjected),
            (Some("app3"), Kind::NoLongerDraining),
        ],
        "{:#?}",
        proxy.history
    );
    let ejected = proxy.history.get(before).map(|c| c.cause.as_str());
    assert!(
        ejected.is_some_and(|c| c.starts_with("ejected for ") && c.contains("3 failures within")),
        "{ejected:?}"
    );
}

#[test]
fn a_pool_keeps_only_its_newest_changes_up_to_its_history_size() {
    let proxy = given_the_incident(r#""history":3"#);
    let kept = kinds(&proxy.history);
    assert_eq!(
        kept,
        [
            (Some("app1"), health(Health::Unhealthy, Health::Healthy)),
            (None, Kind::GuardReleased),
            (Some("app2"), health(Health::Unhealthy, Health::Healthy)),
        ]
    );
    assert_eq!(proxy.pool.history().len(), 3);
}

#[test]
fn another_pools_changes_in_the_shared_history_are_not_shown_and_age_out_like_any_other() {
    let mut proxy = given_the_incident(r#""history":12"#);
    let other = Proxy::new(config(&["app9"], ""), secs(0));
    let foreign = Change {
        at: secs(50),
        backend: Some("app9".into()),
        key: "app9@app9".into(),
        kind: Kind::Ejected,
        cause: "ejected for 30s: elsewhere".into(),
    };
    // The guard's key is its pool's: the other pool's guard is not this one's.
    let foreign_guard = Change {
        key: other.pool.history_key(),
        backend: None,
        kind: Kind::GuardEngaged,
        ..foreign.clone()
    };
    let mut table: HistoryTable = proxy.history.clone();
    history::append(&mut table, &[foreign.clone(), foreign_guard], 12);
    assert_eq!(table.len(), 12, "ten of this pool's, two of the other's");
    let _ = proxy.pool.history_published(&table);
    assert_eq!(proxy.pool.history(), proxy.history.as_slice());
    let owns = other.pool.owns();
    assert_eq!(table.iter().filter(|c| owns(c)).count(), 2);
    // The window moves on: this pool's next change pushes the oldest out, whoever's it is.
    let next = Change {
        at: secs(60),
        ..proxy.history[0].clone()
    };
    history::append(&mut table, std::slice::from_ref(&next), 12);
    assert_eq!(table.len(), 12);
    assert_eq!(table.last(), Some(&next));
    assert_eq!(table.first(), proxy.history.get(1));
}

#[test]
fn the_shared_history_at_its_largest_survives_the_round_trip_and_one_more_is_refused() {
    let change = |i: u64| Change {
        at: secs(i),
        backend: Some(format!("b{i}")),
        key: format!("b{i}@b{i}"),
        kind: Kind::Refusing,
        cause: "refuses connections: nothing is serving".into(),
    };
    let limit = u64::from(upcheck_policy::config::MAX_HISTORY);
    let mut table = HistoryTable::new();
    for i in 0..limit + 10 {
        history::append(&mut table, &[change(i)], limit as usize);
    }
    assert_eq!(table.len() as u64, limit);
    assert_eq!(table.first().map(|c| c.at), Some(secs(10)), "the oldest go");
    assert_eq!(decode_history(&encode_history(&table)), Ok(table.clone()));
    table.push(change(limit + 10));
    assert!(decode_history(&encode_history(&table)).is_err());
}

#[test]
fn every_form_of_the_status_page_shows_the_history_newest_first() {
    let proxy = given_the_incident("");
    let now = secs(45);
    let v: serde_json::Value =
        serde_json::from_str(&page::json(&proxy.pool, None, now)).expect("the page is JSON");
    let history = v["history"].as_array().expect("a list");
    assert_eq!(history.len(), 10);
    assert_eq!(history[0]["backend"], "app2");
    assert_eq!(history[0]["from"], "unhealthy");
    assert_eq!(history[0]["to"], "healthy");
    assert_eq!(history[0]["type"], "add_healthy");
    assert_eq!(history[0]["ago_ms"], 5_000);
    assert_eq!(history[0]["at"], "1970-01-01T00:00:40.000Z");
    assert_eq!(history[1]["backend"], serde_json::Value::Null);
    assert_eq!(history[1]["type"], "pool_guard_released");
    assert_eq!(history[3]["type"], "pool_guard_engaged");
    assert_eq!(history[3]["from"], "off");
    assert_eq!(history[3]["to"], "engaged");
    assert_eq!(history[7]["cause"], "unhealthy: 1 probe answered 502");
    let text = page::text(&proxy.pool, None, now);
    let after_guard = text
        .split_once("pool guard: off\nhistory, newest first:\n")
        .map(|(_, h)| h)
        .unwrap_or_else(|| panic!("{text}"));
    let first = after_guard.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        "  1970-01-01T00:00:40.000Z (5.0s ago) app2 unhealthy → healthy: healthy: 1 probe passed"
    );
    assert!(
        after_guard
            .contains("(35.0s ago) app2 healthy → unhealthy: unhealthy: 1 probe answered 502\n"),
        "{text}"
    );
    let html = page::html(&proxy.pool, None, now);
    let table = html
        .split_once("<table id=\"history\">")
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("{html}"));
    assert_eq!(table.matches("<tr class=\"change\">").count(), 10);
    assert!(
        table.contains(
            "<td class=\"when\">5.0s ago<br><span class=\"note\">1970-01-01T00:00:40.000Z</span></td>\
             <td class=\"name\">app2</td><td class=\"change\">unhealthy &rarr; healthy</td>"
        ),
        "{table}"
    );
    assert!(
        table.contains("<td class=\"name\">pool guard</td>"),
        "{table}"
    );
}

#[test]
fn in_the_json_log_format_a_change_is_one_object_shaped_like_envoys_health_check_event() {
    let proxy = given_the_incident(r#""log_format":"json""#);
    let unhealthy = proxy
        .events
        .iter()
        .find(|e| {
            matches!(
                e,
                Event::HealthChanged {
                    to: Health::Unhealthy,
                    ..
                }
            )
        })
        .expect("app2 went unhealthy");
    let line = proxy
        .pool
        .log_line(unhealthy, secs(1_796_181_127) + ms(250));
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(
        v,
        serde_json::json!({
            "type": "eject_unhealthy",
            "backend": "app2",
            "from": "healthy",
            "to": "unhealthy",
            "cause": "unhealthy: 1 probe answered 502",
            "timestamp": "2026-12-02T03:12:07.250Z",
        })
    );
    let probed = proxy
        .events
        .iter()
        .find(|e| matches!(e, Event::Probed { .. }))
        .expect("probes");
    assert_eq!(
        proxy.pool.log_line(probed, secs(1)),
        probed.to_string(),
        "not a change"
    );
    let text = given_the_incident("");
    assert_eq!(
        text.pool.log_line(unhealthy, secs(1)),
        unhealthy.to_string()
    );
}
