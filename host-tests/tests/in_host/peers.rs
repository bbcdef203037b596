//! What `/up` cannot see, driven through the real upcheck.wasm: a backend that passes its probes
//! while its pages fail, lag or hang is taken out by comparing it with its peers, and a fault every
//! backend shares takes out nobody. A main-thread VM and two workers, 40 requests a second unless
//! stated, probes every 10 s with a 5 s timeout, a 15 s route timeout, outlier detection on by
//! default.
//!
//! Each scenario prints its figures: `cargo test --profile host-test -p upcheck-host-tests --test in_host peers:: -- --nocapture`.

use crate::support::{host, secs};
use std::time::Duration;
use upcheck_host_tests::{Behaviour, Host, RequestSpec, Traffic};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const BOTH: &str = r#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#;

fn start(host: &mut Host) {
    host.start(BOTH).unwrap_or_else(|e| panic!("{e}"));
}

fn run(host: &mut Host, rate: u32, duration: Duration) -> Traffic {
    host.traffic(rate, duration)
        .unwrap_or_else(|e| panic!("traffic runs: {e}"))
}

/// The log lines that mention `what`.
fn logs(host: &Host, what: &str) -> Vec<String> {
    host.logs()
        .into_iter()
        .filter(|l| l.message.contains(what))
        .map(|l| format!("{:.1}s {}", l.at.as_secs_f64(), l.message))
        .collect()
}

fn metric(host: &Host, name: &str) -> u64 {
    host.metric(name).unwrap_or(0)
}

/// Requests that failed for their users, sent to app2 at or after `from`.
fn app2_failures(traffic: &Traffic, from: Duration) -> usize {
    traffic
        .failures()
        .iter()
        .filter(|r| r.sent >= from && r.upstream.as_deref() == Some("app2"))
        .count()
}

/// When app2's first ejection was logged.
fn first_ejection(host: &Host) -> Option<Duration> {
    host.logs()
        .into_iter()
        .find(|l| l.message.starts_with("upcheck: app2 ejected"))
        .map(|l| l.at)
}

/// When app2 was first ejected, and how many users had failed by then.
fn failures_before_first_ejection(host: &Host, traffic: &Traffic) -> (Option<Duration>, usize) {
    let first = first_ejection(host);
    let before = first.map_or(usize::MAX, |at| {
        traffic
            .failures()
            .iter()
            .filter(|r| r.completed.is_some_and(|done| done <= at))
            .count()
    });
    (first, before)
}

#[test]
fn a_booted_backend_that_loses_its_database_costs_at_most_ten_requests_in_a_minute() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .path("/up", Behaviour::status(200))
        .others(Behaviour::status(200))
        .from(secs(20), Behaviour::status(500));
    host.listen(
        "127.0.0.1:9902",
        r#"{"role":"status_page","upstreams":[{"name":"app1"},{"name":"app2"}]}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    start(&mut host);
    let traffic = run(&mut host, 40, secs(80));
    let failed = traffic.failures().len();
    let ejections = metric(&host, "upcheck.app2.ejections");
    let ejected = logs(&host, "app2 ejected");
    let first = ejected.first().cloned().unwrap_or_default();
    let page = host
        .request(RequestSpec {
            path: "/upcheck/status".to_string(),
            source_address: "127.0.0.1:40000".to_string(),
            destination_address: "127.0.0.1:9902".to_string(),
            ..RequestSpec::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let page = String::from_utf8_lossy(&page.body).into_owned();
    println!("database unreachable on app2 from 20 s, 60 s of it: {failed} failed, {ejections} ejections; {traffic}");
    println!("{}\n{page}", ejected.join("\n"));
    assert!(failed > 0, "the fault was not exercised");
    assert!(failed <= 10, "{failed} failed: {traffic}");
    // Out for a minute from its second ejection (at about 50 s), so still out at 80 s.
    assert!(
        page.contains("ejected (outlier for 3") && page.contains("more: its last "),
        "{page}"
    );
    // After the first ejection, each re-admission costs at most two requests.
    let after_first = first_ejection(&host).map_or(0, |at| app2_failures(&traffic, at));
    let readmissions = ejections.saturating_sub(1);
    assert!(
        ejections >= 2,
        "app2 was re-admitted and went out again: {ejected:?}"
    );
    assert!(
        after_first as u64 <= 2 * readmissions,
        "{after_first} failures over {readmissions} re-admissions"
    );
    assert_eq!(metric(&host, "upcheck.app2.outlier_failing"), ejections);
    assert!(
        first.contains(
            "upcheck: app2 ejected for 30.0s: its last 5 requests failed (500) while its peers failed 0 of "
        ),
        "{first}"
    );
    assert_eq!(
        logs(&host, "app2 no longer ejected: its ejection ended").len(),
        1,
        "{:?}",
        logs(&host, "no longer ejected")
    );
    assert_eq!(metric(&host, "upcheck.app1.ejections"), 0);
    assert_eq!(metric(&host, "upcheck.pool_guard"), 0);
}

#[test]
fn an_app_bug_failing_a_fifth_of_requests_on_every_backend_ejects_nobody() {
    let mut host = host();
    for app in ["app1", "app2"] {
        host.upstream(app).sometimes(20, Behaviour::status(500));
    }
    start(&mut host);
    let traffic = run(&mut host, 40, secs(60));
    let by = traffic.by_upstream();
    let app2 = by.get("app2").copied().unwrap_or(0);
    let share = 100.0 * app2 as f64 / traffic.len() as f64;
    println!(
        "20 % of requests 500 on both, 60 s: {} failed, app2's share {share:.1} %; {traffic}",
        traffic.failures().len()
    );
    assert!(
        traffic.failures().len() > 300,
        "the fault was not exercised"
    );
    assert_eq!(metric(&host, "upcheck.app1.ejections"), 0);
    assert_eq!(metric(&host, "upcheck.app2.ejections"), 0);
    assert!((45.0..=55.0).contains(&share), "split {by:?}");
}

#[test]
fn a_backend_turning_slow_goes_out_within_two_seconds() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .path("/up", Behaviour::status(200))
        .others(Behaviour::status(200))
        .from(secs(20), Behaviour::status(200).after(secs(3)));
    start(&mut host);
    let traffic = run(&mut host, 40, secs(80));
    let slow = traffic
        .requests
        .iter()
        .filter(|r| r.sent >= secs(20))
        .filter(|r| r.completed.is_none_or(|done| done - r.sent > secs(1)))
        .count();
    let out_after = first_ejection(&host).map(|at| at.saturating_sub(secs(20)));
    println!(
        "app2 answering in 3 s from 20 s, 60 s of it: out {out_after:?} after, {slow} requests slower than 1 s, {} ejections ({} stalled, {} slow); {traffic}",
        metric(&host, "upcheck.app2.ejections"),
        metric(&host, "upcheck.app2.outlier_stalled"),
        metric(&host, "upcheck.app2.outlier_slow"),
    );
    println!("{}", logs(&host, "app2 ejected").join("\n"));
    assert!(traffic.failures().is_empty(), "{traffic}");
    assert!(slow > 0, "the fault was not exercised");
    assert!(slow <= 40, "{slow} requests slower than 1 s");
    assert!(metric(&host, "upcheck.app2.outlier_stalled") >= 1);
    // A time on the host's virtual clock: deterministic, whatever the machine.
    assert!(
        out_after.is_some_and(|d| d <= secs(2)),
        "out {out_after:?} after"
    );
}

#[test]
fn a_backend_that_hangs_mid_traffic_costs_at_most_twenty_five_requests() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2").all_from(secs(20), Behaviour::Hang);
    start(&mut host);
    let traffic = run(&mut host, 40, secs(60));
    let failed = traffic.failures().len();
    println!(
        "app2 hanging from 20 s, 40 s of it: {failed} failed, out {:?} after; {traffic}",
        first_ejection(&host).map(|at| at.saturating_sub(secs(20)))
    );
    println!("{}", logs(&host, "app2 ejected").join("\n"));
    assert!(failed > 0, "the hang was not exercised");
    assert!(failed <= 25, "{failed} failed: {traffic}");
    assert!(metric(&host, "upcheck.app2.outlier_stalled") >= 1);
}

#[test]
fn a_shared_database_slowing_every_backend_threefold_ejects_nobody() {
    let mut host = host();
    for app in ["app1", "app2"] {
        host.upstream(app)
            .path("/up", Behaviour::status(200))
            .others(Behaviour::status(200).after(ms(60)))
            .from(secs(20), Behaviour::status(200).after(ms(180)));
    }
    start(&mut host);
    let traffic = run(&mut host, 40, secs(60));
    println!(
        "every page 3× slower on both from 20 s: {} ejections, pool guard {:?}; {traffic}",
        metric(&host, "upcheck.app1.ejections") + metric(&host, "upcheck.app2.ejections"),
        host.metric("upcheck.pool_guard")
    );
    assert!(traffic.failures().is_empty(), "{traffic}");
    assert_eq!(metric(&host, "upcheck.app1.ejections"), 0);
    assert_eq!(metric(&host, "upcheck.app2.ejections"), 0);
    assert!(logs(&host, "pool guard engaged").is_empty());
    assert_eq!(metric(&host, "upcheck.pool_guard"), 0);
}

#[test]
fn at_two_requests_a_second_a_backend_failing_every_page_is_ejected_before_its_tenth_failure() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2")
        .path("/up", Behaviour::status(200))
        .others(Behaviour::status(200))
        .from(secs(20), Behaviour::status(500));
    start(&mut host);
    let traffic = run(&mut host, 2, secs(40));
    let (first, before) = failures_before_first_ejection(&host, &traffic);
    println!(
        "2 req/s, app2 500s every page from 20 s: ejected at {first:?} after {before} failures; {traffic}"
    );
    assert!(before < 10, "{before} failures before the ejection");
}

#[test]
fn at_two_requests_a_second_one_percent_of_failures_everywhere_ejects_nobody_in_ten_minutes() {
    let mut host = host();
    for app in ["app1", "app2"] {
        host.upstream(app).sometimes(1, Behaviour::status(500));
    }
    start(&mut host);
    let traffic = run(&mut host, 2, secs(600));
    println!(
        "2 req/s, 1 % random 500s on both, 10 min: {} failed, {} ejections; {traffic}",
        traffic.failures().len(),
        metric(&host, "upcheck.app1.ejections") + metric(&host, "upcheck.app2.ejections")
    );
    assert!(
        !traffic.failures().is_empty(),
        "the fault was not exercised"
    );
    assert_eq!(metric(&host, "upcheck.app1.ejections"), 0);
    assert_eq!(metric(&host, "upcheck.app2.ejections"), 0);
}

#[test]
fn a_release_failing_a_third_of_one_backends_pages_is_out_within_ten_failures() {
    for rate in [20, 50] {
        let mut host = host();
        host.upstream("app1");
        host.upstream("app2").sometimes(33, Behaviour::status(500));
        start(&mut host);
        let traffic = run(&mut host, rate, secs(30));
        let (first, before) = failures_before_first_ejection(&host, &traffic);
        println!(
            "{rate} req/s, a third of app2's pages 500: ejected at {first:?} after {before} \
             failures, {} in 30 s; {traffic}",
            traffic.failures().len()
        );
        println!("{}", logs(&host, "app2 ejected").join("\n"));
        assert!(before <= 10, "{before} failures before the ejection");
        assert_eq!(metric(&host, "upcheck.app1.ejections"), 0);
        assert_eq!(metric(&host, "upcheck.pool_guard"), 0);
    }
}

#[test]
fn one_percent_of_failures_on_one_backend_ejects_nobody_in_ten_minutes() {
    let mut host = host();
    host.upstream("app1");
    host.upstream("app2").sometimes(1, Behaviour::status(500));
    start(&mut host);
    let traffic = run(&mut host, 40, secs(600));
    println!(
        "40 req/s, 1 % random 500s on app2, 10 min: {} failed, {} ejections; {traffic}",
        traffic.failures().len(),
        metric(&host, "upcheck.app1.ejections") + metric(&host, "upcheck.app2.ejections")
    );
    assert!(traffic.failures().len() > 60, "the fault was not exercised");
    assert_eq!(metric(&host, "upcheck.app1.ejections"), 0);
    assert_eq!(metric(&host, "upcheck.app2.ejections"), 0);
}
