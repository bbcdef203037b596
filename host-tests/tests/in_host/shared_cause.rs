//! A slow shared dependency never concentrates the load: the four scenarios of probe failures
//! that real traffic contradicts, or confirms, driven through the real upcheck.wasm in both
//! routing modes, default configuration (probes every 10 s, 5 s timeout), a main-thread VM and
//! two workers.
//!
//! Probes wait in the same queue as pages. When a dependency behind `/up` slows down, probes
//! time out one backend after another, rounds apart, while pages are still served; taking each
//! out as its probe times out would pile the traffic onto whoever is left, and with real
//! capacity that is the cascade. These tests hold the policy to the operators' four cases.

use crate::support::{host, ok, secs};
use std::time::Duration;
use upcheck_host_tests::{Behaviour, Host, Traffic};

/// How requests reach the picked backend.
#[derive(Clone, Copy, Debug)]
enum Routing {
    /// By cluster (`cluster_header`).
    Cluster,
    /// By address within one pool (`override_host`).
    Host,
}

impl Routing {
    /// app1 and app2 with the default policy; the host puts them at 127.0.0.1:3001 and :3002 in
    /// the order they are scripted (app1 first).
    fn config(self) -> &'static str {
        match self {
            Routing::Cluster => r#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#,
            Routing::Host => {
                r#"{"routing":"host","upstreams":[{"name":"app1","address":"127.0.0.1:3001"},{"name":"app2","address":"127.0.0.1:3002"}]}"#
            }
        }
    }
}

fn run(host: &mut Host, rate: u32, duration: Duration) -> Traffic {
    let traffic = ok(host.traffic(rate, duration));
    println!("{traffic}");
    traffic
}

/// The share of `traffic` that went to `name`.
fn share(traffic: &Traffic, name: &str) -> f64 {
    let by = traffic.by_upstream();
    by.get(name).copied().unwrap_or(0) as f64 / traffic.len().max(1) as f64
}

/// The log lines that mention `needle`.
fn logged(host: &Host, needle: &str) -> Vec<String> {
    host.logs()
        .into_iter()
        .map(|line| line.to_string())
        .filter(|line| line.contains(needle))
        .collect()
}

/// Scenario 1 (and 2 with `capacity`): `/up` times out on app1 from t=20 s and on app2 from
/// t=40 s while every page answers 200; 90 s of traffic at `rate`.
fn slow_dependency(routing: Routing, rate: u32, capacity: Option<u32>) -> (Host, Traffic, Traffic) {
    let mut host = host();
    for (app, from) in [("app1", 20), ("app2", 40)] {
        let script = host
            .upstream(app)
            .path("/up", Behaviour::status(200))
            .from(secs(from), Behaviour::Hang);
        if let Some(per_second) = capacity {
            script.capacity(per_second, Behaviour::status(503));
        }
    }
    ok(host.start(routing.config()));
    let before = run(&mut host, rate, secs(45));
    let after = run(&mut host, rate, secs(45));
    (host, before, after)
}

fn a_slow_dependency_behind_up_keeps_both_backends_in_rotation(routing: Routing) {
    let (host, before, after) = slow_dependency(routing, 40, None);
    let failed = before.failures().len() + after.failures().len();
    assert_eq!(failed, 0, "{before}\n{after}");
    for app in ["app1", "app2"] {
        let share = share(&after, app);
        assert!(share >= 0.35, "{app} got {share:.2} of t=45..90 s: {after}");
    }
    for app in ["app1", "app2"] {
        let kept = logged(
            &host,
            &format!("{app} stays as it was: its probe timed out"),
        );
        assert!(!kept.is_empty(), "{app}'s contradicted probe is logged");
    }
    let out = logged(&host, "unhealthy");
    assert!(out.is_empty(), "{out:#?}");
}

#[test]
fn a_slow_dependency_behind_up_keeps_both_backends_in_rotation_in_cluster_routing() {
    a_slow_dependency_behind_up_keeps_both_backends_in_rotation(Routing::Cluster);
}

#[test]
fn a_slow_dependency_behind_up_keeps_both_backends_in_rotation_in_host_routing() {
    a_slow_dependency_behind_up_keeps_both_backends_in_rotation(Routing::Host);
}

fn with_capacity_a_slow_dependency_fails_almost_nobody(routing: Routing) {
    let (_host, before, after) = slow_dependency(routing, 50, Some(30));
    let total = before.len() + after.len();
    let failed = before.failures().len() + after.failures().len();
    println!("{failed} of {total} failed");
    assert!(
        failed * 100 <= total * 2,
        "{failed} of {total} failed:\n{before}\n{after}"
    );
}

#[test]
fn with_capacity_a_slow_dependency_fails_at_most_two_percent_in_cluster_routing() {
    with_capacity_a_slow_dependency_fails_almost_nobody(Routing::Cluster);
}

#[test]
fn with_capacity_a_slow_dependency_fails_at_most_two_percent_in_host_routing() {
    with_capacity_a_slow_dependency_fails_almost_nobody(Routing::Host);
}

/// Scenario 3: app2 hangs entirely from the start; app1's `/up` answers 503 from t=20 to 40 s.
fn a_blip_after_a_backend_went_down_sends_it_nothing(routing: Routing) {
    let mut host = host();
    host.upstream("app1")
        .path("/up", Behaviour::status(200))
        .from(secs(20), Behaviour::status(503))
        .from(secs(40), Behaviour::status(200));
    host.upstream("app2")
        .all_from(Duration::ZERO, Behaviour::Hang);
    ok(host.start(routing.config()));
    let traffic = run(&mut host, 40, secs(60));
    assert_eq!(host.requests_routed("app2"), 0, "{traffic}");
    assert!(traffic.failures().is_empty(), "{traffic}");
}

#[test]
fn a_blip_after_a_backend_hung_from_the_start_sends_it_nothing_in_cluster_routing() {
    a_blip_after_a_backend_went_down_sends_it_nothing(Routing::Cluster);
}

#[test]
fn a_blip_after_a_backend_hung_from_the_start_sends_it_nothing_in_host_routing() {
    a_blip_after_a_backend_went_down_sends_it_nothing(Routing::Host);
}

/// Scenario 4: app1 answers 502 on every path from t=20 s, app2 from t=40 s.
fn a_real_failure_that_spreads_keeps_the_first_broken_backend_out(routing: Routing) {
    let mut host = host();
    host.upstream("app1")
        .all_from(secs(20), Behaviour::status(502));
    host.upstream("app2")
        .all_from(secs(40), Behaviour::status(502));
    ok(host.start(routing.config()));
    let first = run(&mut host, 40, secs(40));
    let app1_failed = first
        .failures_by_upstream()
        .get("app1")
        .copied()
        .unwrap_or(0);
    assert!(app1_failed <= 3, "app1 failed {app1_failed} users: {first}");
    let routed_to_app1 = host.requests_routed("app1");
    let spread = run(&mut host, 40, secs(50));
    // app2 broke last: the guard keeps it, the one left, and never brings app1 back.
    assert_eq!(
        host.requests_routed("app1"),
        routed_to_app1,
        "app1 got users again once app2 broke too: {spread}"
    );
    let back = logged(&host, "back in rotation");
    assert!(back.is_empty(), "{back:#?}");
}

#[test]
fn a_real_failure_that_spreads_keeps_the_first_broken_backend_out_in_cluster_routing() {
    a_real_failure_that_spreads_keeps_the_first_broken_backend_out(Routing::Cluster);
}

#[test]
fn a_real_failure_that_spreads_keeps_the_first_broken_backend_out_in_host_routing() {
    a_real_failure_that_spreads_keeps_the_first_broken_backend_out(Routing::Host);
}
