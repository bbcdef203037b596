//! Drain through the real upcheck.wasm: a backend whose answers carry
//! `x-envoy-immediate-health-check-fail` (a probe's or a user's) takes no new requests on any
//! worker, nothing it does counts as a failure, the header never reaches a user, and the pool
//! guard never brings it back. A main-thread VM and two workers, 40 requests a second, probes
//! every 10 s (± 1 s jitter).

use crate::support::{host, ok, secs};
use std::time::Duration;
use upcheck_host_tests::{Behaviour, Host, Load, RequestSpec, Traffic};
use upcheck_policy::drain::SIGNAL_HEADER;

const BOTH: &str = r#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#;

fn run(host: &mut Host, load: Load) -> Traffic {
    let traffic = ok(host.load(load));
    println!("{traffic}");
    traffic
}

/// 40 requests a second for `duration`, each as `request`.
fn load(duration: Duration, request: RequestSpec) -> Load {
    Load {
        rate: 40,
        duration,
        request,
    }
}

/// The answer of a backend that drains: 200, with the signal.
fn signalled(status: u16) -> Behaviour {
    Behaviour::status(status).header(SIGNAL_HEADER, "true")
}

/// Requests sent to `upstream` at or after `from` and before `until`.
fn routed_between(traffic: &Traffic, upstream: &str, from: Duration, until: Duration) -> usize {
    traffic
        .requests
        .iter()
        .filter(|r| r.upstream.as_deref() == Some(upstream) && r.sent >= from && r.sent < until)
        .count()
}

fn metric(host: &Host, name: &str) -> u64 {
    host.metric(name).unwrap_or(0)
}

fn logged(host: &Host, text: &str) -> usize {
    host.logs()
        .iter()
        .filter(|l| l.message.contains(text))
        .count()
}

/// No user got the signal header.
fn header_never_reached_a_user(traffic: &Traffic) {
    let leaked = traffic
        .requests
        .iter()
        .filter(|r| r.headers.iter().any(|(n, _)| n == SIGNAL_HEADER))
        .count();
    assert_eq!(leaked, 0, "users got {SIGNAL_HEADER}");
}

#[test]
fn a_probe_answer_with_the_header_drains_its_backend_until_a_probe_passes_without_it() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .path("/up", Behaviour::status(200))
        .from(secs(20), signalled(200))
        .from(secs(50), Behaviour::status(200));
    ok(host.start(BOTH));
    let traffic = run(&mut host, load(secs(80), RequestSpec::default()));
    assert!(traffic.failures().is_empty(), "{traffic}");
    // The first probe after 20 s (by 31 s) drains app2; the first after 50 s (by 61 s) ends it.
    assert!(routed_between(&traffic, "app2", secs(0), secs(19)) > 100);
    assert_eq!(routed_between(&traffic, "app2", secs(32), secs(49)), 0);
    assert!(routed_between(&traffic, "app2", secs(62), secs(80)) > 100);
    assert_eq!(metric(&host, "upcheck.app2.probe_failures"), 0);
    assert_eq!(metric(&host, "upcheck.app2.request_failures"), 0);
    assert_eq!(
        metric(&host, "upcheck.app2.draining"),
        0,
        "drained, then back"
    );
    assert_eq!(logged(&host, "app2 draining"), 1, "{:#?}", host.logs());
    assert_eq!(logged(&host, "app2 no longer draining"), 1);
}

#[test]
fn a_user_response_with_the_header_drains_its_backend_and_the_user_never_sees_the_header() {
    let mut host = host();
    host.upstream("app1");
    // app2's pages say it drains from 20 s to 40 s; its probes pass throughout, so each passing
    // probe ends the drain and app2's next answer starts it again.
    host.upstream("app2")
        .others(Behaviour::status(200))
        .from(secs(20), signalled(200))
        .from(secs(40), Behaviour::status(200));
    ok(host.start(BOTH));
    let traffic = run(&mut host, load(secs(60), RequestSpec::default()));
    assert!(traffic.failures().is_empty(), "{traffic}");
    header_never_reached_a_user(&traffic);
    let during = routed_between(&traffic, "app2", secs(20), secs(40));
    println!("app2 took {during} requests from 20 s to 40 s, while it drained");
    // Undrained, app2 takes half of 800; drained, a few requests a probe round: the worker that
    // reads the signal stops at once, the other within a tick.
    assert!(
        during <= 20,
        "{during} requests reached app2 while it drained"
    );
    assert!(during >= 1, "the drain was not exercised");
    assert!(routed_between(&traffic, "app2", secs(52), secs(60)) > 100);
    assert_eq!(metric(&host, "upcheck.app2.request_failures"), 0);
    assert_eq!(metric(&host, "upcheck.app2.probe_failures"), 0);
    assert!(logged(&host, "app2 draining, no new requests: a response carried") >= 1);
}

#[test]
fn a_client_sending_the_header_in_its_request_changes_nothing() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2");
    ok(host.start(BOTH));
    let mut request = RequestSpec::default();
    request
        .headers
        .push((SIGNAL_HEADER.to_string(), "true".to_string()));
    let traffic = run(&mut host, load(secs(30), request));
    assert!(traffic.failures().is_empty(), "{traffic}");
    assert!(routed_between(&traffic, "app1", secs(0), secs(30)) > 500);
    assert!(routed_between(&traffic, "app2", secs(0), secs(30)) > 500);
    assert_eq!(logged(&host, "draining"), 0, "{:#?}", host.logs());
    assert_eq!(metric(&host, "upcheck.app1.draining"), 0);
    assert_eq!(metric(&host, "upcheck.app2.draining"), 0);
}

#[test]
fn the_pool_guard_never_brings_back_a_draining_backend_while_the_other_fails_every_probe() {
    let mut host = host();
    // From 10 s both backends' probes answer 503, alike, while their pages serve: without the
    // drain, the guard would keep both in as a shared cause. app1's answers carry the signal.
    host.upstream("app1")
        .path("/up", Behaviour::status(200))
        .from(secs(10), signalled(503));
    host.upstream("app2")
        .path("/up", Behaviour::status(200))
        .from(secs(10), Behaviour::status(503));
    ok(host.start(BOTH));
    let traffic = run(&mut host, load(secs(60), RequestSpec::default()));
    assert!(traffic.failures().is_empty(), "{traffic}");
    assert_eq!(routed_between(&traffic, "app1", secs(22), secs(60)), 0);
    assert!(routed_between(&traffic, "app2", secs(22), secs(60)) > 1000);
    assert_eq!(
        metric(&host, "upcheck.pool_guard"),
        1,
        "the guard keeps app2 in"
    );
    assert_eq!(metric(&host, "upcheck.app1.draining"), 1);
    assert_eq!(metric(&host, "upcheck.app1.probe_failures"), 0);
    assert_eq!(metric(&host, "upcheck.app1.request_failures"), 0);
    assert_eq!(metric(&host, "upcheck.app2.request_failures"), 0);
}
