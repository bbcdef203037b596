//! A backend's state in one word, as the metrics report it: the prober reports each backend's
//! state when it changes, with since when, and all of them afresh when it begins probing; and
//! each probe with how long it took.

use crate::support;

use std::time::Duration;
use support::*;
use upcheck_policy::{Event, ProbeOutcome, State};

/// The state events since the last call: (name, state, since, change).
fn states(proxy: &mut Proxy) -> Vec<(String, State, Duration, bool)> {
    std::mem::take(&mut proxy.events)
        .into_iter()
        .filter_map(|e| match e {
            Event::State {
                name,
                state,
                since,
                change,
                ..
            } => Some((name, state, since, change)),
            _ => None,
        })
        .collect()
}

fn said(
    name: &str,
    state: State,
    since: Duration,
    change: bool,
) -> (String, State, Duration, bool) {
    (name.to_owned(), state, since, change)
}

#[test]
fn each_backend_is_reported_unknown_at_first_then_as_its_probes_and_requests_make_it() {
    let mut proxy = pool(&["app1", "app2"]);
    assert_eq!(
        states(&mut proxy),
        [
            said("app1", State::Unknown, Duration::ZERO, false),
            said("app2", State::Unknown, Duration::ZERO, false)
        ]
    );
    probe(&mut proxy, "app1", ProbeOutcome::Pass, ms(40));
    probe(&mut proxy, "app2", ProbeOutcome::Pass, ms(50));
    assert_eq!(
        states(&mut proxy),
        [
            said("app1", State::Healthy, ms(40), true),
            said("app2", State::Healthy, ms(50), true)
        ]
    );
    // Three failed requests eject app2 (one of two may go).
    for at in [secs(1), secs(2), secs(3)] {
        request(&mut proxy, "app2", answered(502), at);
    }
    assert_eq!(
        states(&mut proxy),
        [said("app2", State::Ejected, secs(3), true)]
    );
    // Its probe fails: out on its probes, which the ejection cap does not count.
    probe(&mut proxy, "app2", SOFT_503, secs(4));
    assert_eq!(
        states(&mut proxy),
        [said("app2", State::Unhealthy, secs(4), true)]
    );
    // Nothing changes, nothing is reported.
    probe(&mut proxy, "app2", SOFT_503, secs(14));
    proxy.tick(secs(15));
    assert_eq!(states(&mut proxy), []);
}

#[test]
fn a_vm_that_begins_probing_reports_every_state_afresh_with_when_it_began() {
    let mut proxy = pool(&["app1", "app2"]);
    probe(&mut proxy, "app1", ProbeOutcome::Pass, ms(40));
    probe(&mut proxy, "app2", SOFT_503, ms(60));
    let _ = states(&mut proxy);
    let effects = proxy
        .pool
        .lease(upcheck_policy::LeaseHeld::Elsewhere, secs(5));
    proxy.carry_out(effects, secs(5));
    let effects = proxy
        .pool
        .lease(upcheck_policy::LeaseHeld::Here { seed: 7 }, secs(6));
    proxy.carry_out(effects, secs(6));
    assert_eq!(
        states(&mut proxy),
        [
            said("app1", State::Healthy, ms(40), false),
            said("app2", State::Unhealthy, ms(60), false)
        ]
    );
}

#[test]
fn a_probe_is_reported_with_how_long_it_took_from_being_sent() {
    let mut proxy = pool(&["app1"]);
    proxy.events.clear();
    proxy.probe_sent_at("app1", ProbeOutcome::Pass, ms(100), ms(350));
    let latencies: Vec<Duration> = proxy
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Probed { latency, .. } => Some(*latency),
            _ => None,
        })
        .collect();
    assert_eq!(latencies, [ms(250)]);
}
