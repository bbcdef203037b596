//! Process-wide behaviour: one prober whatever the worker count, a new one when it stops, a
//! refused configuration, and what a request and a probe round cost in wasm instructions.

use crate::support::ok;
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
fn at_a_thousand_backends_a_quiet_tick_and_a_passing_probe_cost_no_work_per_backend_each() {
    let mut host = host(2);
    let upstreams: Vec<String> = (1..=1000)
        .map(|i| {
            host.upstream(&format!("app{i}"));
            format!(r#"{{"name":"app{i}"}}"#)
        })
        .collect();
    ok(host.start(&format!(r#"{{"upstreams":[{}]}}"#, upstreams.join(","))));
    ok(host.advance(Duration::from_secs(1)));
    let spent = |before: &Host, export: &str| {
        let fuel = before.fuel().get(export).copied().unwrap_or_default();
        (fuel.calls, fuel.fuel)
    };
    // Between the first round (answered at start) and the second (due 9-11 s after it).
    let (calls, fuel) = spent(&host, "proxy_on_tick");
    ok(host.advance(Duration::from_millis(7_500)));
    let (calls_after, fuel_after) = spent(&host, "proxy_on_tick");
    let per_tick = (fuel_after - fuel) / (calls_after - calls).max(1);
    // The second round: every backend passes again.
    let (answers, answer_fuel) = spent(&host, "proxy_on_http_call_response");
    ok(host.advance(Duration::from_secs(10)));
    let (answers_after, answer_fuel_after) = spent(&host, "proxy_on_http_call_response");
    let per_answer = (answer_fuel_after - answer_fuel) / (answers_after - answers).max(1);
    println!(
        "1,000 backends: {per_tick} instructions per quiet tick, {per_answer} per passing probe"
    );
    assert_eq!(answers_after - answers, 1000, "one round");
    // About 210 per backend per tick, and a pass that changes nothing routes nothing anew
    // (4.8 million per tick and 2.0 million per answer when every tick weighed every backend's
    // window with a 128-bit division and every answer worked the routing out again).
    assert!(per_tick < 1_000_000, "{per_tick} per quiet tick");
    assert!(per_answer < 500_000, "{per_answer} per passing probe");
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

#[test]
fn the_module_exports_every_callback_upcheck_answers_and_none_of_those_it_never_answers() {
    let engine = wasmtime::Engine::default();
    let module = wasmtime::Module::from_file(&engine, UPCHECK_WASM)
        .unwrap_or_else(|e| panic!("{UPCHECK_WASM} loads (run `make build`): {e}"));
    let exports: Vec<&str> = module.exports().map(|e| e.name()).collect();
    let answered = [
        "memory",
        "malloc",
        "proxy_abi_version_0_2_1",
        "proxy_on_context_create",
        "proxy_on_vm_start",
        "proxy_on_configure",
        "proxy_on_tick",
        "proxy_on_http_call_response",
        "proxy_on_done",
        "proxy_on_delete",
        "proxy_on_request_headers",
        "proxy_on_request_body",
        "proxy_on_request_trailers",
        "proxy_on_response_headers",
        "proxy_on_response_body",
        "proxy_on_response_trailers",
        "proxy_on_log",
        // A misloaded network filter's VM fails at the first connection (filter/src/callbacks.rs).
        "proxy_on_new_connection",
        // etcd's watch (filter/src/etcd_calls.rs).
        "proxy_on_grpc_receive",
        "proxy_on_grpc_close",
    ];
    for name in answered {
        assert!(exports.contains(&name), "{name} missing from {exports:?}");
    }
    // gRPC metadata and unary calls, the rest of TCP streams, queues and foreign functions:
    // mk/exports.sh leaves them out.
    let never = [
        "grpc_receive_initial",
        "grpc_receive_trailing",
        "connection_close",
        "_data",
        "queue",
        "foreign",
    ];
    let dead: Vec<&&str> = exports
        .iter()
        .filter(|e| never.iter().any(|n| e.contains(n)))
        .collect();
    assert!(dead.is_empty(), "callbacks upcheck never answers: {dead:?}");
}
