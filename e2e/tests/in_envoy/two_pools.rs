//! Two pools in one Envoy: a site listener whose plugin configuration lists app1 and app2, and an
//! api listener whose configuration lists api1 and api2, their filters in the same `vm_id`, as an
//! operator running two sites on one Envoy would have them. Shared data is per `vm_id`, so both
//! configurations meet there; each must still probe, judge and route its own backends as if it
//! were alone. (When one process-wide lease decided who probes, one pool's backends were never
//! probed: its status page still said "not probed yet" after 13 s.)
//!
//! Both scenarios run [`fast_checks`] on two workers, users at [`RATE`] on separate connections to
//! each listener, and print what each listener's users and status page (each pool's on a
//! loopback listener of its own) saw.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, Instant};
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::{fast_checks, INTERVAL, RATE};
use upcheck_e2e::replay::{Replay, Report};
use upcheck_e2e::upstream::FakeUpstream;

/// The status page's path (the default `status_path`) on each pool's status page listener.
const PAGE: &str = "/upcheck/status";

/// Remembered failures that eject a backend, in [`fast_checks`].
const MAX_FAILS: usize = 3;
/// Envoy's workers in these scenarios.
const WORKERS: usize = 2;

/// One backend's line on a status page.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Line {
    name: String,
    status: String,
    routable: bool,
    ejected: bool,
}

/// The backends on the status page (JSON) of the status page listener at `base` (`http://addr`).
async fn status_page(http: &reqwest::Client, base: &str) -> anyhow::Result<Vec<Line>> {
    let text = http
        .get(format!("{base}{PAGE}.json"))
        .send()
        .await?
        .text()
        .await?;
    let page: Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{base}{PAGE}.json is not JSON ({e}): {text}"))?;
    let backends = page["backends"].as_array().cloned().unwrap_or_default();
    Ok(backends
        .iter()
        .map(|b| Line {
            name: b["name"].as_str().unwrap_or_default().to_owned(),
            status: b["status"].as_str().unwrap_or_default().to_owned(),
            routable: b["routable"].as_bool().unwrap_or(false),
            ejected: b["ejected"].as_bool().unwrap_or(false),
        })
        .collect())
}

/// The status page at `base` as a person reads it, for the output.
async fn status_text(http: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    Ok(http
        .get(format!("{base}{PAGE}"))
        .send()
        .await?
        .text()
        .await?)
}

/// The names on a status page.
fn names(page: &[Line]) -> Vec<&str> {
    page.iter().map(|l| l.name.as_str()).collect()
}

/// Users on separate connections to `url` at [`RATE`] for `duration`, started now.
fn users(url: String, duration: Duration) -> JoinHandle<Report> {
    let replay = Replay::new(url, RATE, duration).connection_per_request();
    tokio::spawn(async move { replay.run().await.expect("an HTTP client") })
}

/// The base URL (`http://addr`) of a listener, from its URL of `/`.
fn base(root_url: &str) -> String {
    root_url.trim_end_matches('/').to_owned()
}

/// Over 10 intervals, with users on both listeners and both status pages read twice an
/// interval: each of the four backends gets one probe per interval (10 or 11: the first probe
/// and one per interval; none if its pool's prober never ran, 20 or more if both pools probed
/// it), each page lists exactly its own pool's backends every time it is read and shows them
/// healthy at the end, and every user request reaches a backend of its own listener's pool
/// (cluster routing retries nothing, so each request is one backend request).
#[tokio::test]
async fn two_listeners_sharing_a_vm_id_each_probe_route_and_report_only_their_own_backends(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let api1 = FakeUpstream::start("api1", Mode::Ok).await?;
    let api2 = FakeUpstream::start("api2", Mode::Ok).await?;
    let envoy = Envoy::builder()
        .concurrency(WORKERS as u32)
        .upstream(&app1)
        .upstream(&app2)
        .upstream(&api1)
        .upstream(&api2)
        .wasm_filter(fast_checks(&["app1", "app2"]))
        .second_listener(fast_checks(&["api1", "api2"]))
        .start()
        .await?;
    let start = Instant::now();
    let intervals = 10;
    // Each pool's status page, on its own loopback listener.
    let (site, api) = (
        base(&envoy.status_url("/")?),
        base(&envoy.second_status_url("/")?),
    );
    let site_users = users(envoy.url("/"), 8 * INTERVAL);
    let api_users = users(envoy.second_url("/")?, 8 * INTERVAL);

    let http = reqwest::Client::builder().no_proxy().build()?;
    let mut reads = 0;
    let mut foreign = Vec::new();
    let mut all_healthy_at = [None, None];
    let own = [vec!["app1", "app2"], vec!["api1", "api2"]];
    // The pages are read twice an interval on the clock, while each backend's probes are counted
    // over the `intervals` from its own first probe.
    let reading = async {
        for read_at in (0..2 * intervals).map(|k| start + INTERVAL / 2 * k) {
            sleep_until(read_at).await;
            for (i, base) in [&site, &api].into_iter().enumerate() {
                let page = status_page(&http, base).await?;
                if names(&page) != own[i] {
                    foreign.push(format!(
                        "{:.1}s {base}: {page:?}",
                        start.elapsed().as_secs_f64()
                    ));
                }
                if all_healthy_at[i].is_none() && page.iter().all(|l| l.status == "healthy") {
                    all_healthy_at[i] = Some(start.elapsed());
                }
            }
            reads += 1;
        }
        anyhow::Ok(())
    };
    let upstreams = [&app1, &app2, &api1, &api2];
    let counting = FakeUpstream::probes_from_first(&upstreams, intervals * INTERVAL);
    let (read, counted) = tokio::join!(reading, counting);
    read?;
    let probes: Vec<(&str, u64)> = upstreams.iter().map(|u| u.name()).zip(counted?).collect();
    let pages = [
        status_page(&http, &site).await?,
        status_page(&http, &api).await?,
    ];
    let (site_report, api_report) = (site_users.await?, api_users.await?);
    let served = |ups: [&FakeUpstream; 2]| ups.map(|u| u.counts().requests);
    let (site_served, api_served) = (served([&app1, &app2]), served([&api1, &api2]));

    println!("probes in {intervals} intervals, 2 workers, two pools in one vm_id: {probes:?}");
    for (i, (label, base, report, served)) in [
        ("site listener", &site, &site_report, site_served),
        ("api listener", &api, &api_report, api_served),
    ]
    .into_iter()
    .enumerate()
    {
        let healthy =
            all_healthy_at[i].map_or("never".to_owned(), |at| format!("{:.1}s", at.as_secs_f64()));
        println!(
            "{label} ({base}): users {report}; served by {}: {}, {}: {}; page read {reads} times, \
             all healthy from {healthy}; at the end:\n{}",
            own[i][0],
            served[0],
            own[i][1],
            served[1],
            status_text(&http, base).await?
        );
    }

    for (name, n) in &probes {
        assert!((10..=11).contains(n), "{name} got {n} probes");
    }
    assert!(
        foreign.is_empty(),
        "a page listed other backends: {foreign:#?}"
    );
    for (i, page) in pages.iter().enumerate() {
        assert_eq!(names(page), own[i]);
        assert!(
            page.iter().all(|l| l.status == "healthy" && l.routable),
            "{page:?}"
        );
    }
    for (report, served) in [(&site_report, site_served), (&api_report, api_served)] {
        assert_eq!(report.failures(), 0, "{report}");
        assert_eq!(
            served.iter().sum::<u64>(),
            report.requests() as u64,
            "{report}"
        );
        assert!(served.iter().all(|&n| n > 0), "{served:?}");
    }
    Ok(())
}

/// app2, in the site's pool, passes its probes but answers 502 to every page (`pages:502`), so
/// only the site's users can find it broken; their three 502s eject it, for 10 s here. The api
/// pool shares the `vm_id` and the shared tables, not the backends.
///
/// Bound: at most `max_fails` (3) site users fail, each one app2 served (so app2 took no user once
/// ejected), and the site's page shows app2 ejected; no api user fails, both api backends keep taking their share (each at least
/// a quarter of the api's users), and the api's page shows neither ejected.
#[tokio::test]
async fn a_backend_ejected_in_one_pool_leaves_the_other_pools_routing_alone() -> anyhow::Result<()>
{
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Pages(502)).await?;
    let api1 = FakeUpstream::start("api1", Mode::Ok).await?;
    let api2 = FakeUpstream::start("api2", Mode::Ok).await?;
    let mut site_checks = fast_checks(&["app1", "app2"]);
    site_checks["health_checks"]["passive"]["fail_duration"] = json!("10s");
    let envoy = Envoy::builder()
        .concurrency(WORKERS as u32)
        .upstream(&app1)
        .upstream(&app2)
        .upstream(&api1)
        .upstream(&api2)
        .wasm_filter(site_checks)
        .second_listener(fast_checks(&["api1", "api2"]))
        .start()
        .await?;
    // Each pool's status page, on its own loopback listener.
    let (site, api) = (
        base(&envoy.status_url("/")?),
        base(&envoy.second_status_url("/")?),
    );
    let duration = 6 * INTERVAL;
    let start = Instant::now();
    let site_users = users(envoy.url("/"), duration);
    let api_users = users(envoy.second_url("/")?, duration);

    let deadline = start + Duration::from_secs(3);
    while envoy.stat("wasmcustom.upcheck.app2.ejections").await? == 0 {
        anyhow::ensure!(Instant::now() < deadline, "app2 was not ejected in 3 s");
        sleep(Duration::from_millis(20)).await;
    }
    let ejected = start.elapsed();
    let (site_report, api_report) = (site_users.await?, api_users.await?);
    let http = reqwest::Client::builder().no_proxy().build()?;
    let pages = [
        status_page(&http, &site).await?,
        status_page(&http, &api).await?,
    ];
    let served = [&app1, &app2, &api1, &api2].map(|u| (u.name(), u.counts().requests));

    println!("users per backend: {served:?}");
    println!(
        "site listener ({site}): users {site_report}\n{}\n{}",
        site_report.timeline(&[("app2 ejected (its users' 502s)", ejected)]),
        status_text(&http, &site).await?
    );
    println!(
        "api listener ({api}): users {api_report}\n{}",
        status_text(&http, &api).await?
    );

    // The window fills at the third; a request each worker had already sent app2 by then (the
    // users here arrive from the first instant, on connections of their own) fails too.
    assert!(
        site_report.failures() <= MAX_FAILS + WORKERS,
        "{site_report}"
    );
    // Every site user app2 served saw its 502, and only those failed.
    assert_eq!(
        app2.counts().requests,
        site_report.failures() as u64,
        "{site_report}"
    );
    let line = |page: &[Line], name: &str| page.iter().find(|l| l.name == name).cloned();
    assert!(
        line(&pages[0], "app2").is_some_and(|l| l.ejected && !l.routable),
        "{:?}",
        pages[0]
    );
    assert!(
        line(&pages[0], "app1").is_some_and(|l| !l.ejected && l.routable),
        "{:?}",
        pages[0]
    );
    assert_eq!(api_report.failures(), 0, "{api_report}");
    assert_eq!(names(&pages[1]), ["api1", "api2"]);
    assert!(
        pages[1].iter().all(|l| !l.ejected && l.routable),
        "{:?}",
        pages[1]
    );
    let api_requests = api_report.requests() as u64;
    for (name, n) in &served[2..] {
        assert!(
            4 * n >= api_requests,
            "{name} served {n} of {api_requests} api users"
        );
    }
    assert_eq!(envoy.stat("wasmcustom.upcheck.api1.ejections").await?, 0);
    assert_eq!(envoy.stat("wasmcustom.upcheck.api2.ejections").await?, 0);
    Ok(())
}
