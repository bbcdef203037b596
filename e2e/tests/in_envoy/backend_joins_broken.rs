//! The incident as it began: app2 is added to a running balancer while it is broken. The
//! operators add its cluster (CDS) and then its upstream in the plugin configuration (LDS), with
//! no restart and users on app1 throughout. app2 is unknown until probed, and an unknown backend
//! gets no traffic while another is known healthy, so however app2 is broken no user sees it.

use std::time::Duration;

use tokio::time::sleep;
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::{fast_checks, RATE};
use upcheck_e2e::replay::Replay;
use upcheck_e2e::upstream::FakeUpstream;

/// Adds app2, broken as `mode`, to a running Envoy serving users from app1; checks no user saw it.
async fn users_never_see_app2_join_while(mode: Mode) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", mode.clone()).await?;
    let mut envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&app1)
        .wasm_filter(fast_checks(&["app1"]))
        .start()
        .await?;
    let replay = Replay::new(envoy.url("/"), RATE, Duration::from_secs(7)).connection_per_request();
    let traffic = tokio::spawn(async move { replay.run().await });

    sleep(Duration::from_millis(1500)).await;
    envoy.add_backend(app2.name(), app2.addr()).await?;
    envoy
        .set_plugin_config(fast_checks(&["app1", "app2"]))
        .await?;

    let report = traffic.await??;
    println!("app2 joins answering {mode}: {report}");
    assert_eq!(report.failures(), 0, "{report}");
    assert_eq!(app2.counts().requests, 0);
    // The update reached upcheck: it probes app2 (refused probes never reach the fake backend).
    assert!(envoy.stat("wasmcustom.upcheck.app2.probe_failures").await? >= 1);
    assert_eq!(envoy.stat("wasmcustom.upcheck.app2.requests").await?, 0);
    Ok(())
}

#[tokio::test]
async fn app2_joining_while_answering_502_costs_users_nothing() -> anyhow::Result<()> {
    users_never_see_app2_join_while(Mode::Status(502)).await
}

#[tokio::test]
async fn app2_joining_while_hanging_costs_users_nothing() -> anyhow::Result<()> {
    users_never_see_app2_join_while(Mode::Hang).await
}

#[tokio::test]
async fn app2_joining_while_holding_its_port_without_accepting_costs_users_nothing(
) -> anyhow::Result<()> {
    users_never_see_app2_join_while(Mode::NoAccept).await
}

#[tokio::test]
async fn app2_joining_while_nothing_listens_costs_users_nothing() -> anyhow::Result<()> {
    users_never_see_app2_join_while(Mode::Refuse).await
}
