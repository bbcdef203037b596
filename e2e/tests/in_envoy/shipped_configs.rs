//! The configurations in `config/` run as shipped: each file is booted as written, with only what
//! an operator edits replaced (the backends' addresses, marked EDIT, and the module path) plus the
//! listener, admin and status page ports, which must be free loopback ports here.
//!
//! `config/envoy.yaml` (`routing: host`) keeps users from seeing a backend that starts answering
//! 502; `config/envoy-simple.yaml` (`routing: cluster`) routes through upcheck.

use std::time::Duration;

use upcheck_e2e::caddy;
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::RATE;
use upcheck_e2e::replay::Replay;
use upcheck_e2e::upstream::FakeUpstream;

/// One of the shipped files, with a running Envoy and its two backends.
struct Shipped {
    envoy: Envoy,
    app1: FakeUpstream,
    app2: FakeUpstream,
}

/// Boots `config/<file>` with app1 and app2 (healthy) in place of 127.0.0.1:3001 and :3002.
async fn boot(file: &str) -> anyhow::Result<Shipped> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let backends = [app1.addr(), app2.addr()];
    let envoy = Envoy::builder()
        .concurrency(2)
        .start_yaml(|ports| caddy::shipped(file, ports, backends))
        .await?;
    Ok(Shipped { envoy, app1, app2 })
}

/// The status page listener's JSON page lists both backends, in rotation, as the users' listener
/// routes; on the users' listener the page's path is routed to a backend like any other.
async fn shows_the_status_page(shipped: &Shipped, file: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    let url = shipped.envoy.status_url("/upcheck/status.json")?;
    let page: serde_json::Value =
        serde_json::from_str(&http.get(&url).send().await?.text().await?)?;
    println!("config/{file}, {url}: {page}");
    let backends = page["backends"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = backends.iter().filter_map(|b| b["name"].as_str()).collect();
    assert_eq!(names, ["app1", "app2"], "{page}");
    let served = shipped.app1.counts().requests + shipped.app2.counts().requests;
    let traffic = http
        .get(shipped.envoy.url("/upcheck/status.json"))
        .send()
        .await?;
    assert_eq!(traffic.status(), 200);
    assert_eq!(
        shipped.app1.counts().requests + shipped.app2.counts().requests,
        served + 1,
        "a backend answered it"
    );
    Ok(())
}

/// One second of users: all answered, both backends used, neither saw the routing header.
async fn serves_users(shipped: &Shipped, file: &str) -> anyhow::Result<()> {
    let report = Replay::new(shipped.envoy.url("/"), RATE, Duration::from_secs(1))
        .connection_per_request()
        .run()
        .await?;
    let (app1, app2) = (shipped.app1.counts(), shipped.app2.counts());
    println!("config/{file}, both backends healthy: {report}; app1 {app1:?}, app2 {app2:?}");
    assert_eq!(report.failures(), 0, "{report}");
    shipped
        .envoy
        .ensure_attempts(app1.requests + app2.requests, u64::from(RATE))
        .await?;
    assert!(app1.requests > 0 && app2.requests > 0);
    assert_eq!(app1.with_routing_header + app2.with_routing_header, 0);
    Ok(())
}

#[tokio::test]
async fn the_simple_config_routes_users_through_upcheck() -> anyhow::Result<()> {
    let shipped = boot("envoy-simple.yaml").await?;
    serves_users(&shipped, "envoy-simple.yaml").await?;
    shows_the_status_page(&shipped, "envoy-simple.yaml").await
}

#[tokio::test]
async fn the_recommended_config_retries_gets_on_the_other_backend_when_one_breaks(
) -> anyhow::Result<()> {
    let shipped = boot("envoy.yaml").await?;
    serves_users(&shipped, "envoy.yaml").await?;
    shows_the_status_page(&shipped, "envoy.yaml").await?;

    // Just after a probe: the users, not the next probe 10 s later, find the break.
    shipped
        .app2
        .switch_after_probe(Mode::Status(502), Duration::from_secs(12))
        .await?;
    let report = Replay::new(shipped.envoy.url("/"), RATE, Duration::from_secs(2))
        .connection_per_request()
        .run()
        .await?;
    let ejections = shipped
        .envoy
        .stat("wasmcustom.upcheck.app2.ejections")
        .await?;
    println!("config/envoy.yaml, app2 answering 502: {report}; app2 ejections {ejections}");
    assert_eq!(report.failures(), 0, "{report}");
    assert_eq!(ejections, 1);
    Ok(())
}
