//! The metrics operators alert on, through the real upcheck.wasm: each backend's state as one
//! gauge per state (exactly one of them 1), its number of changes, when it last changed, and its
//! last probe's latency; a main-thread VM and two workers, 40 requests a second.

use crate::support::host;
use std::time::Duration;
use upcheck_host_tests::clock::EPOCH_NANOS;
use upcheck_host_tests::{Behaviour, Host};

const BOTH: &str = r#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#;
const STATES: [&str; 5] = ["healthy", "unhealthy", "ejected", "draining", "unknown"];

/// The states whose gauge is 1 for `backend`, and whether every one of the five is defined.
fn states(host: &Host, backend: &str) -> Vec<&'static str> {
    STATES
        .into_iter()
        .filter(|state| {
            let value = host.metric(&format!("upcheck.{backend}.state_{state}"));
            assert!(
                value.is_some(),
                "upcheck.{backend}.state_{state} is defined"
            );
            value == Some(1)
        })
        .collect()
}

/// The host's wall clock now, in Unix seconds, as the module sees it.
fn wall_secs(host: &Host) -> u64 {
    (EPOCH_NANOS + u64::try_from(host.now().as_nanos()).unwrap_or(u64::MAX)) / 1_000_000_000
}

#[test]
fn in_the_incident_app2_is_unhealthy_and_app1_healthy_each_in_exactly_one_state() {
    let mut host = host();
    host.upstream("app1").path(
        "/up",
        Behaviour::status(200).after(Duration::from_millis(7)),
    );
    host.upstream("app2")
        .others(Behaviour::status(502))
        .path("/up", Behaviour::status(502));
    host.start(BOTH).unwrap_or_else(|e| panic!("{e}"));
    let traffic = host
        .traffic(40, Duration::from_secs(25))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(traffic.failures().is_empty(), "{traffic}");
    assert_eq!(states(&host, "app1"), ["healthy"]);
    assert_eq!(states(&host, "app2"), ["unhealthy"]);
    // From unknown once, to where each stays.
    assert_eq!(host.metric("upcheck.app1.state_changes"), Some(1));
    assert_eq!(host.metric("upcheck.app2.state_changes"), Some(1));
    // The first probe round settled within the first second.
    let started = EPOCH_NANOS / 1_000_000_000;
    for backend in ["app1", "app2"] {
        let changed = host.metric(&format!("upcheck.{backend}.last_change_seconds"));
        assert!(
            changed.is_some_and(|t| (started..=started + 1).contains(&t)),
            "{backend} changed at {changed:?}, started at {started}"
        );
    }
    assert_eq!(host.metric("upcheck.app1.probe_latency_ms"), Some(7));
}

#[test]
fn a_backend_that_breaks_and_recovers_counts_each_change_and_shows_when_it_came_back() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .all_from(Duration::from_secs(25), Behaviour::status(502))
        .all_from(Duration::from_secs(45), Behaviour::status(200));
    host.start(BOTH).unwrap_or_else(|e| panic!("{e}"));
    host.traffic(40, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    // Between two probes, three failed requests eject it, and the probe sent at once fails: out
    // on its probes, which the ejection cap does not count.
    assert_eq!(states(&host, "app2"), ["unhealthy"]);
    assert_eq!(host.metric("upcheck.app2.ejections"), Some(1));
    host.traffic(40, Duration::from_secs(40))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(states(&host, "app2"), ["healthy"]);
    // unknown → healthy → ejected → unhealthy → healthy.
    assert_eq!(host.metric("upcheck.app2.state_changes"), Some(4));
    let back = host.metric("upcheck.app2.last_change_seconds");
    let now = wall_secs(&host);
    let recovered = EPOCH_NANOS / 1_000_000_000 + 45;
    assert!(
        back.is_some_and(|t| (recovered..=now).contains(&t)),
        "app2 last changed at {back:?}; it recovered at {recovered}, now is {now}"
    );
    assert_eq!(states(&host, "app1"), ["healthy"]);
    assert_eq!(host.metric("upcheck.app1.state_changes"), Some(1));
}
