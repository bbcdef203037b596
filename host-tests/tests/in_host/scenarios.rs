//! The incident and its cousins, driven through the real upcheck.wasm: a main-thread VM and two
//! workers, 40 requests a second, probes every 10 s with a 5 s timeout, 3 failures in 10 s eject,
//! a 15 s route timeout.

use crate::support::{host, ok, secs};
use std::time::Duration;
use upcheck_host_tests::{Behaviour, Host, RequestSpec, Traffic};

const APP1: &str = r#"{"upstreams":[{"name":"app1"}]}"#;
const BOTH: &str = r#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#;

fn run(host: &mut Host, rate: u32, duration: Duration) -> Traffic {
    let traffic = host
        .traffic(rate, duration)
        .unwrap_or_else(|e| panic!("traffic runs: {e}"));
    println!("{traffic}");
    traffic
}

/// app1 serving; app2 joins by a configuration update, the incident's way, behaving as `broken`.
fn app2_added(broken: Behaviour) {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .others(broken.clone())
        .path("/up", broken);
    ok(host.start(APP1));
    let before = run(&mut host, 40, secs(5));
    ok(host.reconfigure(BOTH));
    let after = run(&mut host, 40, secs(40));
    assert!(
        before.failures().is_empty() && after.failures().is_empty(),
        "{after}"
    );
    assert_eq!(host.requests_routed("app2"), 0, "app2 saw users");
    assert!(
        host.probes_sent("app2") >= 4,
        "app2 was probed at once and every interval"
    );
}

#[test]
fn a_backend_added_while_answering_502_never_sees_a_user() {
    app2_added(Behaviour::status(502));
}

#[test]
fn a_backend_added_while_holding_the_port_without_answering_never_sees_a_user() {
    app2_added(Behaviour::Hang);
}

#[test]
fn a_backend_added_while_refusing_connections_never_sees_a_user() {
    app2_added(Behaviour::Refuse);
}

#[test]
fn at_cold_start_requests_wait_for_the_first_passing_probe_and_nobody_fails() {
    let mut host = host();
    host.upstream("app1").path(
        "/up",
        Behaviour::status(200).after(Duration::from_millis(300)),
    );
    host.upstream("app2")
        .others(Behaviour::Hang)
        .path("/up", Behaviour::Hang);
    ok(host.start(BOTH));
    let traffic = run(&mut host, 40, secs(20));
    assert!(traffic.failures().is_empty(), "{traffic}");
    assert_eq!(host.requests_routed("app2"), 0);
    let longest = traffic
        .requests
        .iter()
        .filter_map(|r| Some(r.completed? - r.sent))
        .max()
        .unwrap_or_default();
    assert!(
        longest <= secs(5),
        "a request waited {longest:?}, more than one probe timeout"
    );
}

#[test]
fn a_backend_breaking_with_502_mid_traffic_costs_at_most_three_requests_and_comes_back() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .all_from(secs(20), Behaviour::status(502))
        .all_from(
            secs(40),
            Behaviour::status(200).after(Duration::from_millis(1)),
        );
    ok(host.start(BOTH));
    let traffic = run(&mut host, 40, secs(80));
    let failures = traffic.failures();
    assert!(
        failures.len() <= 3,
        "{} failures: {traffic}",
        failures.len()
    );
    assert!(!failures.is_empty(), "the break was not exercised");
    let back = traffic
        .requests
        .iter()
        .filter(|r| r.sent >= secs(60) && r.upstream.as_deref() == Some("app2"))
        .count();
    assert!(
        back > 0,
        "app2 not back in rotation within 20 s of recovering"
    );
    assert_eq!(host.metric("upcheck.app2.ejections"), Some(1));
    let lines: Vec<String> = host
        .logs()
        .into_iter()
        .map(|l| l.message)
        .filter(|m| m.contains("ejected"))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with("upcheck: app2 ejected for "),
        "{lines:?}"
    );
    assert!(
        lines[0].ends_with("3 failures within 10.0s, the last: a request answered 502"),
        "{lines:?}"
    );
    assert_eq!(
        lines[1],
        "upcheck: app2 no longer ejected: its failures expired"
    );
}

/// Envoy's circuit breaker for app2 full from 20 s to 40 s: every page sent to app2 meets Envoy's
/// own 503 (flag UO), the request never sent. That says nothing about app2, so it is neither
/// ejected nor judged an outlier; taking it out would only pile its traffic onto app1.
#[test]
fn a_backend_behind_a_full_circuit_breaker_is_not_taken_out_for_the_proxys_own_503s() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .others(Behaviour::status(200))
        .from(secs(20), Behaviour::Overflow)
        .from(secs(40), Behaviour::status(200));
    ok(host.start(BOTH));
    let traffic = run(&mut host, 40, secs(60));
    let during = traffic
        .requests
        .iter()
        .filter(|r| (secs(20)..secs(40)).contains(&r.sent))
        .filter(|r| r.upstream.as_deref() == Some("app2"))
        .count();
    assert!(
        during >= 350,
        "app2 kept its half while the breaker was full: {during}"
    );
    let out: Vec<String> = host
        .logs()
        .into_iter()
        .map(|l| l.message)
        .filter(|m| m.contains("ejected") || m.contains("outlier"))
        .collect();
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(host.metric("upcheck.app2.ejections"), Some(0));
}

/// app2 healthy, then hangs from 20 s on; `extra` adds passive settings.
fn app2_hangs_mid_traffic(extra: &str) -> (Host, Traffic) {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2").all_from(secs(20), Behaviour::Hang);
    ok(host.start(&format!(
        r#"{{"upstreams":[{{"name":"app1"}},{{"name":"app2"}}]{extra}}}"#
    )));
    let traffic = run(&mut host, 40, secs(60));
    (host, traffic)
}

#[test]
fn a_backend_that_hangs_mid_traffic_fails_only_requests_sent_before_its_next_probe_times_out() {
    let (host, traffic) = app2_hangs_mid_traffic("");
    let failures = traffic.failures();
    assert!(failures
        .iter()
        .all(|r| r.upstream.as_deref() == Some("app2")));
    // The next probe goes out within one interval (+ jitter) and times out 5 s later.
    let detected_by = secs(20 + 10 + 1 + 5);
    assert!(failures.iter().all(|r| r.sent < detected_by), "{traffic}");
    assert!(failures.len() <= 20 * 16, "{} failures", failures.len());
    assert!(host
        .logs()
        .iter()
        .any(|l| l.message == "upcheck: app2 unhealthy: 1 probe timed out after 5.0s"));
}

#[test]
fn with_unhealthy_latency_a_hanging_backend_costs_about_one_second_of_its_share() {
    let (_, traffic) =
        app2_hangs_mid_traffic(r#","health_checks":{"passive":{"unhealthy_latency":"1s"}}"#);
    let failures = traffic.failures().len();
    assert!(failures <= 25, "{failures} failures: {traffic}");
    assert!(failures > 0, "the hang was not exercised");
}

#[test]
fn a_db_blip_failing_every_probe_at_once_fails_no_user_and_engages_the_pool_guard() {
    let mut host = host();
    for app in ["app1", "app2"] {
        host.upstream(app)
            .path("/up", Behaviour::status(200))
            .from(secs(20), Behaviour::status(503))
            .from(secs(40), Behaviour::status(200));
    }
    ok(host.start(BOTH));
    let before = run(&mut host, 40, secs(30));
    assert_eq!(
        host.metric("upcheck.pool_guard"),
        Some(1),
        "guard engaged during the blip"
    );
    // The former name, kept for existing alerts (docs/operating.md), says the same.
    assert_eq!(host.metric("upcheck.fleet_guard"), Some(1));
    let after = run(&mut host, 40, secs(30));
    assert!(
        before.failures().is_empty() && after.failures().is_empty(),
        "{before}\n{after}"
    );
    assert_eq!(
        host.metric("upcheck.pool_guard"),
        Some(0),
        "guard released after"
    );
    assert_eq!(host.metric("upcheck.fleet_guard"), Some(0));
    let by = after.by_upstream();
    assert!(
        by.get("app1") > Some(&0) && by.get("app2") > Some(&0),
        "{by:?}"
    );
}

#[test]
fn a_blip_after_app2_has_been_down_for_minutes_still_sends_app2_nothing() {
    let mut host = host();
    host.upstream("app1")
        .path("/up", Behaviour::status(200))
        .from(secs(200), Behaviour::status(503))
        .from(secs(230), Behaviour::status(200));
    host.upstream("app2").all_from(secs(10), Behaviour::Hang);
    ok(host.start(BOTH));
    ok(host.advance(secs(190)));
    let routed_before = host.requests_routed("app2");
    let blip = run(&mut host, 40, secs(50));
    assert_eq!(
        host.requests_routed("app2"),
        routed_before,
        "app2 got traffic during the blip"
    );
    assert!(blip.failures().is_empty(), "{blip}");
}

#[test]
fn a_client_supplied_route_header_never_chooses_the_backend() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .others(Behaviour::status(502))
        .path("/up", Behaviour::status(502));
    host.upstream("teapot").others(Behaviour::status(418));
    ok(host.start(BOTH));
    ok(host.advance(secs(2)));
    let spoofs: [&[(&str, &str)]; 4] = [
        &[("x-upcheck-upstream", "app2")],
        &[("X-Upcheck-Upstream", "app2")],
        &[
            ("x-upcheck-upstream", "teapot"),
            ("x-upcheck-upstream", "app2"),
        ],
        &[("X-UPCHECK-UPSTREAM", "teapot")],
    ];
    for headers in spoofs {
        for _ in 0..4 {
            let record = ok(host.request(RequestSpec {
                headers: headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
                ..RequestSpec::default()
            }));
            assert_eq!(
                record.upstream.as_deref(),
                Some("app1"),
                "{headers:?} chose {record:?}"
            );
            assert_eq!(record.status(), Some(200));
        }
    }
    assert_eq!(
        host.requests_routed("teapot") + host.requests_routed("app2"),
        0
    );
}

/// [`BOTH`] as the status page's configuration, on its own listener.
const BOTH_PAGE: &str = r#"{"role":"status_page","upstreams":[{"name":"app1"},{"name":"app2"}]}"#;
/// Where the shipped configurations put the status page listener.
const PAGE_LISTENER: &str = "127.0.0.1:9902";

/// A request for `path` made on this machine to the listener at `destination`.
fn local(destination: &str, path: &str) -> RequestSpec {
    RequestSpec {
        path: path.to_string(),
        source_address: "127.0.0.1:40000".to_string(),
        destination_address: destination.to_string(),
        ..RequestSpec::default()
    }
}

/// The configurations whose probing lease is held, by fingerprint: the module's lease table
/// (`upcheck.v7.leases` in shared data) as the module's own decoder reads it.
fn leased_configs(host: &Host) -> Vec<u64> {
    let (bytes, _cas) = host
        .shared_data(upcheck_policy::tables::keys::LEASES)
        .unwrap_or_default();
    let leases = upcheck_policy::tables::decode_leases(&bytes);
    let leases = leases.unwrap_or_else(|e| panic!("the lease table does not decode: {e:?}"));
    leases.iter().map(|lease| lease.config).collect()
}

/// The fingerprint of the plugin configuration `config`, as the module computes it: FNV-1a of
/// its bytes.
fn fingerprint(config: &str) -> u64 {
    config.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
fn the_status_page_listener_shows_every_backend_and_the_traffic_listener_never_serves_it() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .others(Behaviour::status(502))
        .path("/up", Behaviour::status(502));
    ok(host.listen(PAGE_LISTENER, BOTH_PAGE));
    ok(host.start(BOTH));
    ok(host.advance(secs(2)));
    let page = ok(host.request(local(PAGE_LISTENER, "/upcheck/status.json")));
    assert_eq!(page.status(), Some(200), "{page:?}");
    assert_eq!(page.upstream, None, "the filter answered it itself");
    let json = String::from_utf8_lossy(&page.body);
    assert!(
        json.starts_with(r#"{"backends":[{"name":"app1","routable":true,"status":"healthy""#),
        "{json}"
    );
    assert!(
        json.contains(r#"{"name":"app2","routable":false,"status":"unhealthy""#),
        "{json}"
    );
    let text = ok(host.request(local(PAGE_LISTENER, "/upcheck/status?x=1")));
    assert_eq!(text.status(), Some(200));
    assert!(String::from_utf8_lossy(&text.body).contains("pool guard: off"));
    let elsewhere = ok(host.request(local(PAGE_LISTENER, "/")));
    assert_eq!(elsewhere.status(), Some(404), "{elsewhere:?}");
    assert_eq!(
        elsewhere.details, "",
        "the filter's own 404, not the route's"
    );
    assert_eq!(
        host.requests_routed("app1") + host.requests_routed("app2"),
        0,
        "nothing on the page's listener is routed"
    );
    let traffic = ok(host.request(local("127.0.0.1:8080", "/upcheck/status.json")));
    assert_eq!(
        traffic.upstream.as_deref(),
        Some("app1"),
        "on the users' listener the page's path is a path like any other: {traffic:?}"
    );
    ok(host.advance(secs(30)));
    assert_eq!(
        leased_configs(&host),
        [fingerprint(BOTH)],
        "one lease, the users' plugin's: the status page never takes one"
    );
    assert_eq!(
        host.probes_sent("app1"),
        4,
        "one prober: the first probe, one per 10 s"
    );
}

#[test]
fn a_status_page_reconfigured_with_its_pool_shows_the_pools_new_backends() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2");
    ok(host.listen(PAGE_LISTENER, BOTH_PAGE));
    ok(host.start(BOTH));
    ok(host.advance(secs(2)));
    ok(host.reconfigure(APP1));
    ok(host.reconfigure_listener(
        PAGE_LISTENER,
        r#"{"role":"status_page","upstreams":[{"name":"app1"}]}"#,
    ));
    ok(host.advance(secs(1)));
    let page = ok(host.request(local(PAGE_LISTENER, "/upcheck/status.json")));
    let json = String::from_utf8_lossy(&page.body);
    assert!(
        json.starts_with(r#"{"backends":[{"name":"app1","routable":true,"status":"healthy""#)
            && !json.contains("app2"),
        "{json}"
    );
    let missing = host
        .reconfigure_listener("127.0.0.1:1", BOTH_PAGE)
        .unwrap_err();
    assert!(
        missing.to_string().contains("no listener at 127.0.0.1:1"),
        "{missing}"
    );
}

/// The history of a page's JSON form, each change without its `ago_ms` (which moves with the
/// time the page is read).
fn history_of(page: &upcheck_host_tests::RequestRecord) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(&page.body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&page.body)));
    let mut history = v["history"].as_array().cloned().unwrap_or_default();
    for change in &mut history {
        change.as_object_mut().map(|c| c.remove("ago_ms"));
    }
    history
}

#[test]
fn every_workers_status_page_shows_the_same_history_of_changes() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .path("/up", Behaviour::status(200))
        .from(secs(12), Behaviour::status(502))
        .from(secs(32), Behaviour::status(200));
    ok(host.listen(PAGE_LISTENER, BOTH_PAGE));
    ok(host.start(BOTH));
    ok(host.advance(secs(45)));
    let first = ok(host.request(local(PAGE_LISTENER, "/upcheck/status.json")));
    let second = ok(host.request(local(PAGE_LISTENER, "/upcheck/status.json")));
    assert_ne!(first.worker, second.worker, "two workers answered");
    let history = history_of(&first);
    assert_eq!(history, history_of(&second));
    println!(
        "the history, as worker {} and worker {} show it: {}",
        first.worker,
        second.worker,
        serde_json::to_string_pretty(&history).unwrap_or_default()
    );
    let app2: Vec<(&str, &str, &str)> = history
        .iter()
        .filter(|c| c["backend"] == "app2")
        .map(|c| {
            let field = |k: &str| c[k].as_str().unwrap_or_default();
            (field("from"), field("to"), field("cause"))
        })
        .collect();
    assert_eq!(
        app2,
        [
            ("unhealthy", "healthy", "healthy: 1 probe passed"),
            ("healthy", "unhealthy", "unhealthy: 1 probe answered 502"),
            ("unknown", "healthy", "healthy: 1 probe passed"),
        ],
        "newest first: {history:#?}"
    );
    let html = ok(host.request(local(PAGE_LISTENER, "/upcheck/status.html")));
    let html = String::from_utf8_lossy(&html.body);
    assert!(
        html.contains(
            "<td class=\"name\">app2</td><td class=\"change\">healthy &rarr; unhealthy</td>"
        ),
        "{html}"
    );
    let text = ok(host.request(local(PAGE_LISTENER, "/upcheck/status")));
    let text = String::from_utf8_lossy(&text.body);
    assert!(
        text.contains(" app2 healthy → unhealthy: unhealthy: 1 probe answered 502\n"),
        "{text}"
    );
}

#[test]
fn in_the_json_log_format_each_change_is_logged_as_one_json_object() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2").path("/up", Behaviour::status(502));
    ok(host.start(r#"{"upstreams":[{"name":"app1"},{"name":"app2"}],"log_format":"json"}"#));
    ok(host.advance(secs(2)));
    let changes: Vec<serde_json::Value> = host
        .logs()
        .iter()
        .filter_map(|line| line.message.strip_prefix("upcheck: {"))
        .map(|json| {
            serde_json::from_str(&format!("{{{json}")).unwrap_or_else(|e| panic!("{e}: {{{json}"))
        })
        .collect();
    let app2 = changes
        .iter()
        .find(|c| c["backend"] == "app2")
        .unwrap_or_else(|| panic!("{changes:#?}"));
    assert_eq!(app2["type"], "eject_unhealthy");
    assert_eq!(app2["from"], "unknown");
    assert_eq!(app2["to"], "unhealthy");
    assert_eq!(app2["cause"], "unhealthy: 1 probe answered 502");
    let timestamp = app2["timestamp"].as_str().unwrap_or_default();
    assert!(
        timestamp.starts_with("2023-11-14T22:13:20.") && timestamp.ends_with('Z'),
        "the host's clock starts at 1,700,000,000 s: {timestamp}"
    );
    assert_eq!(changes.len(), 2, "one object per change: {changes:#?}");
}

#[test]
fn a_status_page_listener_bound_to_a_public_address_refuses_every_connection_to_it() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2");
    ok(host.listen("198.51.100.1:9902", BOTH_PAGE));
    ok(host.start(BOTH));
    ok(host.advance(secs(2)));
    let remote = ok(host.request(RequestSpec {
        path: "/upcheck/status.json".to_string(),
        destination_address: "198.51.100.1:9902".to_string(),
        ..RequestSpec::default()
    }));
    assert_eq!(remote.status(), Some(403));
    let spoofed = ok(host.request(local("198.51.100.1:9902", "/upcheck/status.json")));
    assert_eq!(
        spoofed.status(),
        Some(403),
        "a source claimed by X-Forwarded-For is not where the connection arrived"
    );
    assert_eq!(
        host.requests_routed("app1") + host.requests_routed("app2"),
        0
    );
}

#[test]
fn a_traffic_plugin_reconfigured_as_the_status_page_stops_probing_and_routes_again_when_set_back() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2");
    ok(host.start(BOTH));
    run(&mut host, 40, secs(2));
    ok(host.reconfigure(BOTH_PAGE));
    let probes = host.probes_sent("app1");
    ok(host.advance(secs(30)));
    assert_eq!(host.probes_sent("app1"), probes, "no tick, no probe");
    let page = ok(host.request(local("127.0.0.1:8080", "/upcheck/status")));
    assert_eq!(page.status(), Some(200), "{page:?}");
    assert!(
        String::from_utf8_lossy(&page.body).contains("app2"),
        "{page:?}"
    );

    ok(host.reconfigure(BOTH));
    let (counted, routed) = (
        host.metric("upcheck.app1.requests").unwrap_or(0),
        host.requests_routed("app1"),
    );
    let traffic = run(&mut host, 40, secs(12));
    assert!(traffic.failures().is_empty(), "{traffic}");
    ok(host.advance(Duration::from_millis(250)));
    assert!(host.probes_sent("app1") > probes, "probing again");
    assert!(host.requests_routed("app1") > routed);
    assert_eq!(
        host.metric("upcheck.app1.requests").unwrap_or(0) - counted,
        host.requests_routed("app1") - routed,
        "its requests are counted again"
    );
}

#[test]
fn every_routed_request_is_in_its_backends_counter_once_a_tick_has_passed() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2");
    ok(host.start(BOTH));
    ok(host.advance(secs(1)));
    run(&mut host, 40, secs(5));
    ok(host.advance(Duration::from_millis(250)));
    let counted = |host: &Host, name: &str| host.metric(&format!("upcheck.{name}.requests"));
    for name in ["app1", "app2"] {
        assert!(host.requests_routed(name) > 0, "{name} took requests");
        assert_eq!(
            counted(&host, name),
            Some(host.requests_routed(name)),
            "{name}"
        );
    }
    // A backend the new configuration drops has its last requests counted all the same.
    run(&mut host, 40, secs(1));
    ok(host.reconfigure(APP1));
    assert_eq!(counted(&host, "app2"), Some(host.requests_routed("app2")));
}

#[test]
fn a_backend_whose_cluster_the_proxy_lacks_is_reported_once_and_kept_out() {
    let mut host = host();
    host.upstream("app1");
    // No upstream script for app3: the host has no such cluster, as an Envoy missing it.
    ok(host.start(r#"{"upstreams":[{"name":"app1"},{"name":"app3","cluster":"missing"}]}"#));
    let traffic = run(&mut host, 40, secs(35));
    assert!(traffic.failures().is_empty(), "{traffic}");
    assert_eq!(traffic.by_upstream().get("missing"), None);
    let errors: Vec<String> = host
        .logs()
        .into_iter()
        .map(|l| l.message)
        .filter(|m| m.contains("cannot probe"))
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(
            "upcheck: cannot probe app3: the proxy refused a call to cluster \"missing\""
        ),
        "{errors:?}"
    );
    assert_eq!(
        host.metric("upcheck.app3.probes"),
        Some(4),
        "retried every interval"
    );
}
