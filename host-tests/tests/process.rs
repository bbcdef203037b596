//! Process-wide behaviour: one prober whatever the worker count, a new one when it stops, a
//! refused configuration, and what a request and a probe round cost in wasm instructions.

use std::time::Duration;
use upcheck_host_tests::{Behaviour, Host, HostError, HostOptions, UPCHECK_WASM};

const BOTH: &str = r#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#;

fn host(workers: usize) -> Host {
    Host::from_file(
        UPCHECK_WASM,
        HostOptions {
            workers,
            ..HostOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{UPCHECK_WASM} loads (run `make build`): {e}"))
}

fn ok<T>(result: Result<T, HostError>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

/// The VM that most recently took the probing lease.
fn prober(host: &Host) -> usize {
    host.logs()
        .iter()
        .rev()
        .find(|l| l.message.contains("now probes for the process"))
        .map(|l| l.vm)
        .unwrap_or_else(|| panic!("no VM took the probing lease"))
}

#[test]
fn each_backend_is_probed_once_per_interval_whatever_the_number_of_workers() {
    let mut host = host(4);
    host.upstream("app1");
    host.upstream("app2");
    ok(host.start(BOTH));
    ok(host.advance(Duration::from_secs(60)));
    for app in ["app1", "app2"] {
        let probes = host.probes_sent(app);
        assert!(
            (6..=7).contains(&probes),
            "{app} got {probes} probes in 60 s"
        );
    }
    let takers = host
        .logs()
        .iter()
        .filter(|l| l.message.contains("now probes for the process"))
        .count();
    assert_eq!(takers, 1, "the lease changed hands without reason");
}

#[test]
fn when_the_probing_vm_stops_another_takes_over_within_three_ticks() {
    let mut host = host(4);
    host.upstream("app1");
    host.upstream("app2");
    ok(host.start(BOTH));
    ok(host.advance(Duration::from_secs(15)));
    let first = prober(&host);
    host.stop_vm(first);
    let probes = host.probes_sent("app1");
    ok(host.advance(Duration::from_millis(600)));
    let second = prober(&host);
    assert_ne!(first, second);
    assert!(
        host.probes_sent("app1") > probes,
        "probing did not resume within 3 ticks"
    );
}

#[test]
fn an_invalid_configuration_is_refused_with_a_log_line_naming_the_field() {
    let mut host = host(1);
    let bad = r#"{"upstreams":[{"name":"app1"}],"health_checks":{"passive":{"max_fails":0}}}"#;
    match host.start(bad) {
        Err(HostError::Rejected { log, .. }) => assert!(
            log.iter().any(|l| l.message.contains(
                "upcheck: invalid configuration: health_checks.passive.max_fails: must be at least 1, got 0"
            )),
            "{log:?}"
        ),
        other => panic!("accepted an invalid configuration: {other:?}"),
    }
}

#[test]
fn a_request_and_a_probe_round_cost_a_bounded_number_of_instructions() {
    let mut host = host(2);
    host.upstream("app1");
    host.upstream("app2").path("/up", Behaviour::status(200));
    ok(host.start(BOTH));
    ok(host.advance(Duration::from_secs(1)));
    let traffic = ok(host.traffic(40, Duration::from_secs(5)));
    let per_request = traffic.mean_fuel();
    let fuel = host.fuel();
    let calls = fuel
        .get("proxy_on_http_call_response")
        .copied()
        .unwrap_or_default();
    let per_probe = calls.fuel / calls.calls.max(1);
    println!("fuel per routed request: {per_request}, per probe answer: {per_probe}");
    assert!(
        per_request > 0 && per_request < 20_000,
        "{per_request} per request"
    );
    // An answer first takes in what the other VMs shared since the last tick (the passive
    // table, with every backend's outlier counts), so that a pass after a refusal is published
    // at once: about 56,000 instructions with two backends.
    assert!(
        per_probe > 0 && per_probe < 100_000,
        "{per_probe} per probe answer"
    );
}

#[test]
fn the_first_probe_round_goes_out_within_100_ms_of_start() {
    let mut host = host(2);
    host.upstream("app1");
    host.upstream("app2");
    ok(host.start(BOTH));
    ok(host.advance(Duration::from_millis(100)));
    assert_eq!((host.probes_sent("app1"), host.probes_sent("app2")), (1, 1));
}
