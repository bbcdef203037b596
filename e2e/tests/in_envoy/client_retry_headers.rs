//! A client can never choose how often its request is repeated or how long an attempt may take.
//! Envoy's router honours per-request headers for both (`x-envoy-retry-on`,
//! `x-envoy-max-retries`, `x-envoy-upstream-rq-timeout-ms`, the per-try timeout, the hedge), and
//! its connection manager strips them only from clients it deems external, which a client on
//! loopback is not. upcheck replaces or removes every copy before writing its own advice.
//!
//! The requests are written by hand ([`upcheck_e2e::raw_http`]), so that every header goes out
//! exactly as the client wrote it.

use std::time::Duration;

use tokio::time::sleep;
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::{fast_checks, fast_host_checks};
use upcheck_e2e::raw_http::status_of;
use upcheck_e2e::upstream::FakeUpstream;

/// What a hostile client adds to each request: every retry it could ask for, and a timeout too
/// short for any backend to meet.
const HOSTILE: [&str; 6] = [
    "x-envoy-retry-on: 5xx,retriable-status-codes,reset",
    "X-Envoy-Retriable-Status-Codes: 500",
    "x-envoy-max-retries: 5",
    "x-envoy-upstream-rq-timeout-ms: 1",
    "x-envoy-upstream-rq-per-try-timeout-ms: 1",
    "x-envoy-hedge-on-per-try-timeout: true",
];

/// Sends 20 requests with the [`HOSTILE`] headers: their statuses, and the attempts the
/// backends received for them.
async fn hostile(envoy: &Envoy, backends: [&FakeUpstream; 2]) -> anyhow::Result<(Vec<u16>, u64)> {
    let served = || backends.iter().map(|b| b.counts().requests).sum::<u64>();
    let before = served();
    let mut statuses = Vec::new();
    for _ in 0..20 {
        statuses.push(status_of(envoy.addr(), &HOSTILE).await?);
    }
    Ok((statuses, served() - before))
}

/// Both backends answer every page after 20 ms: the client's 1 ms timeouts would turn each into
/// Envoy's 504. Then both answer every page 500 (an app bug both share): once each backend's
/// peers are seen failing too, the policy repeats none of it, and a request with the client's
/// retry headers reaches one backend once and gets the app's own 500.
async fn hostile_headers_change_nothing(routing: Routing) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Lag(Duration::from_millis(20))).await?;
    let app2 = FakeUpstream::start("app2", Mode::Lag(Duration::from_millis(20))).await?;
    let plugin = match routing {
        Routing::Cluster => fast_checks(&[app1.name(), app2.name()]),
        Routing::Host { .. } => fast_host_checks(&[&app1, &app2]),
    };
    let envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&app1)
        .upstream(&app2)
        .routing(routing)
        .wasm_filter(plugin)
        .start()
        .await?;
    let (statuses, attempts) = hostile(&envoy, [&app1, &app2]).await?;
    println!("{routing:?}, pages after 20 ms, a client's 1 ms timeouts: statuses {statuses:?}, backend attempts {attempts}");
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(attempts, 20, "a repeat or a hedge went out");

    app1.set_mode(Mode::Pages(500));
    app2.set_mode(Mode::Pages(500));
    for _ in 0..40 {
        let _ = status_of(envoy.addr(), &[]).await?;
    }
    // A few ticks: each backend's peers are known to fail too.
    sleep(Duration::from_millis(600)).await;
    let (statuses, attempts) = hostile(&envoy, [&app1, &app2]).await?;
    println!("{routing:?}, every page 500 on both, a client's retry headers: statuses {statuses:?}, backend attempts {attempts}");
    assert!(statuses.iter().all(|s| *s == 500), "{statuses:?}");
    assert_eq!(attempts, 20, "a repeat went out");
    Ok(())
}

#[tokio::test]
async fn a_clients_retry_and_timeout_headers_change_nothing_in_host_routing() -> anyhow::Result<()>
{
    hostile_headers_change_nothing(Routing::Host {
        per_try_timeout: Duration::from_millis(500),
    })
    .await
}

#[tokio::test]
async fn a_clients_retry_and_timeout_headers_change_nothing_in_cluster_routing(
) -> anyhow::Result<()> {
    hostile_headers_change_nothing(Routing::Cluster).await
}
