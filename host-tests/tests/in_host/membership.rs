//! The membership changing under the real upcheck.wasm, as `upcheck backends` changes it: a
//! backend removed while ejected and added back under the cluster the command gives it
//! (`app2-1`) starts unknown, with none of its namesake's evidence; the ejection cap is judged
//! over the backends configured now, not those at start-up. A main-thread VM and two workers,
//! 40 requests a second, probes every 10 s, 3 failures in 10 s eject.
//!
//! The random histories (`histories.rs`) race additions and removals with probes, ejections and
//! the pool guard; these pin the two cases a reader would look for by name.

use crate::support::{host, ok, secs};
use std::time::Duration;
use upcheck_host_tests::{Behaviour, Host, Traffic};

fn run(host: &mut Host, duration: Duration) -> Traffic {
    let traffic = ok(host.traffic(40, duration));
    println!("{traffic}");
    traffic
}

/// The log lines that contain `text`.
fn logs(host: &Host, text: &str) -> Vec<String> {
    host.logs()
        .into_iter()
        .filter(|l| l.message.contains(text))
        .map(|l| format!("[{:?}] {}", l.at, l.message))
        .collect()
}

#[test]
fn a_backend_removed_while_ejected_and_added_back_starts_unknown_with_no_old_evidence() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .path("/up", Behaviour::status(200))
        .others(Behaviour::status(502));
    // Added back, fixed: its first probe answers 2 s after it is sent.
    host.upstream("app2-1")
        .path("/up", Behaviour::status(200).after(secs(2)));
    ok(host.start(r#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#));
    run(&mut host, secs(5));
    assert!(
        !logs(&host, "app2 ejected").is_empty(),
        "app2 answering 502 was ejected"
    );

    ok(host.reconfigure(r#"{"upstreams":[{"name":"app1"}]}"#));
    run(&mut host, secs(2));
    let probes_before = host.probes_sent("app2");
    run(&mut host, secs(25));
    assert_eq!(
        host.probes_sent("app2"),
        probes_before,
        "a removed backend is never probed again"
    );

    let added = host.now();
    ok(host.reconfigure(r#"{"upstreams":[{"name":"app1"},{"name":"app2","cluster":"app2-1"}]}"#));
    let waiting = run(&mut host, Duration::from_millis(1900));
    assert!(waiting.failures().is_empty(), "{waiting}");
    assert_eq!(
        host.requests_routed("app2-1"),
        0,
        "no user before its first probe passes"
    );
    assert_eq!(host.probes_sent("app2-1"), 1, "probed at once");
    let after = run(&mut host, secs(5));
    assert!(after.failures().is_empty(), "{after}");
    assert!(
        host.requests_routed("app2-1") > 50,
        "once its probe passed it takes its share: no ejection of app2's was carried over ({})",
        host.requests_routed("app2-1")
    );
    let since: Vec<String> = host
        .logs()
        .into_iter()
        .filter(|l| l.at >= added && l.message.contains("app2") && l.message.contains("eject"))
        .map(|l| l.message)
        .collect();
    assert!(since.is_empty(), "{since:#?}");
}

#[test]
fn the_ejection_cap_is_judged_over_the_backends_configured_now() {
    let mut host = host();
    for failing in ["app1", "app2"] {
        host.upstream(failing)
            .path("/up", Behaviour::status(200))
            .others(Behaviour::status(502));
    }
    host.upstream("app3");
    host.upstream("app4");
    ok(host.start(r#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#));
    run(&mut host, secs(5));
    let ejected = |host: &Host| {
        ["app1", "app2"]
            .into_iter()
            .filter(|b| !logs(host, &format!("upcheck: {b} ejected")).is_empty())
            .count()
    };
    assert_eq!(
        ejected(&host),
        1,
        "of two backends, the cap lets one go: {:#?}",
        logs(&host, "eject")
    );

    ok(host.reconfigure(
        r#"{"upstreams":[{"name":"app1"},{"name":"app2"},{"name":"app3"},{"name":"app4"}]}"#,
    ));
    run(&mut host, secs(5));
    assert_eq!(
        ejected(&host),
        2,
        "of four, two may go: {:#?}",
        logs(&host, "eject")
    );
}
