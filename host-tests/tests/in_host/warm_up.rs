//! Warm-up through the real upcheck.wasm: a main-thread VM and two workers, 40 requests a
//! second, probes every 10 s; app2 refuses connections from 20 s to 40 s and comes back, with
//! `health_checks.slow_start` at 30 s.

use crate::support::{host, secs};
use std::time::Duration;
use upcheck_host_tests::Behaviour;

const WINDOW: u64 = 30;
const SLICE: u64 = 5;

/// Envoy's share of the weight `elapsed` seconds into the window, with the defaults
/// (aggression 1.0, min_weight_percent 10).
fn envoy(elapsed: f64) -> f64 {
    (elapsed.max(1.0) / WINDOW as f64).clamp(0.1, 1.0)
}

/// app2's share of the traffic against app1 at full weight, averaged over `from..to` seconds
/// into the window.
fn expected_share(from: f64, to: f64) -> f64 {
    let points = 1000;
    let total: f64 = (0..points)
        .map(|i| from + (to - from) * (f64::from(i) + 0.5) / f64::from(points))
        .map(|t| envoy(t) / (1.0 + envoy(t)))
        .sum();
    total / f64::from(points)
}

/// app2 back after an outage: the time its first passing probe put it in service, and the
/// requests of the 40 s after, as (sent, went to app2).
fn app2_returns(config: &str) -> (Duration, Vec<(Duration, bool)>) {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .all_from(secs(20), Behaviour::Refuse)
        .all_from(secs(40), Behaviour::status(200));
    host.start(config).unwrap_or_else(|e| panic!("{e}"));
    let traffic = host
        .traffic(40, secs(100))
        .unwrap_or_else(|e| panic!("traffic runs: {e}"));
    let back = host
        .logs()
        .into_iter()
        .filter(|l| l.at >= secs(40))
        .find(|l| l.message.starts_with("upcheck: app2 healthy"))
        .map(|l| l.at)
        .unwrap_or_else(|| panic!("app2 came back: {traffic}"));
    let requests = traffic
        .requests
        .iter()
        .filter(|r| r.sent >= back && r.sent < back + secs(40))
        .map(|r| (r.sent, r.upstream.as_deref() == Some("app2")))
        .collect();
    (back, requests)
}

/// Per 5-second slice from `back`: (requests, of which app2).
fn slices(back: Duration, requests: &[(Duration, bool)]) -> Vec<(usize, usize)> {
    (0..40 / SLICE)
        .map(|k| {
            let slice = back + secs(k * SLICE)..back + secs((k + 1) * SLICE);
            let sent: Vec<bool> = requests
                .iter()
                .filter(|(at, _)| slice.contains(at))
                .map(|(_, app2)| *app2)
                .collect();
            (sent.len(), sent.iter().filter(|app2| **app2).count())
        })
        .collect()
}

#[test]
fn a_backend_back_from_an_outage_takes_a_share_rising_by_envoys_formula_over_30_seconds() {
    let (back, requests) = app2_returns(&format!(
        r#"{{"upstreams":[{{"name":"app1"}},{{"name":"app2"}}],"health_checks":{{"slow_start":"{WINDOW}s"}}}}"#
    ));
    let slices = slices(back, &requests);
    for (k, (sent, app2)) in slices.iter().enumerate() {
        let from = (k as u64 * SLICE) as f64;
        let expected = expected_share(from, from + SLICE as f64) * *sent as f64;
        println!("{from:>4} s: app2 {app2:>3} of {sent} (formula {expected:.1})");
        // The share is applied in 5 % steps of the weight (at most 2.5 % off, about 1.3 points
        // of the traffic), and each of the two workers' rotations may stand up to a cycle of its
        // picks (at most 40 at these weights) off the slice's average where a step lands.
        let tolerance = 0.013 * *sent as f64 + 6.0;
        assert!(
            (*app2 as f64 - expected).abs() <= tolerance,
            "slice {k} ({from} s in): app2 got {app2} of {sent}, the formula {expected:.1}: {slices:?}"
        );
    }
    let shares: Vec<usize> = slices.iter().map(|(_, app2)| *app2).collect();
    assert!(
        shares.windows(2).take(5).all(|w| w[0] < w[1]),
        "app2's share rises slice by slice over the window: {shares:?}"
    );
}

#[test]
fn without_slow_start_a_backend_back_from_an_outage_takes_half_at_once() {
    let (back, requests) = app2_returns(r#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#);
    // The workers see the probe table within a tick of the pass: up to 8 requests at 40 a
    // second, half of which go to app1 still.
    for (k, (sent, app2)) in slices(back, &requests).into_iter().enumerate() {
        assert!(
            app2.abs_diff(sent / 2) <= 5,
            "slice {k}: app2 got {app2} of {sent}"
        );
    }
}
