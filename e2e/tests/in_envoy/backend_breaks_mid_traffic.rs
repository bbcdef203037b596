//! The incident's failure mode seen from the balancer: app2 serves fine, then its sidecar starts
//! answering 502 to everything while users keep coming. Passive checks count those 502s (the old
//! balancer did not) and three of them, seen by any of Envoy's workers, eject app2; the probe that
//! follows keeps it out. Users pay the three requests that filled the window (and any already on
//! their way to app2 when the third came back, which a loaded machine may have); none sent after.
//!
//! Users arrive on separate connections, so Envoy spreads them over both workers and the three
//! failures have to be counted process-wide.

use std::time::Duration;

use crate::support::two_backends;
use tokio::time::sleep;
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::{INTERVAL, RATE};
use upcheck_e2e::replay::{Outcome, Replay, Report};
use upcheck_e2e::upstream::FakeUpstream;

/// One run of the scenario, kept for the assertions.
struct Breakage {
    envoy: Envoy,
    app1: FakeUpstream,
    app2: FakeUpstream,
    report: Report,
}

/// 8 s of users over app1 and app2; app2 starts answering 502 to everything about 3 s in, just
/// after one of its probes.
async fn app2_breaks_mid_traffic() -> anyhow::Result<Breakage> {
    let (app1, app2, envoy) = two_backends(Routing::Cluster, Mode::Ok, Mode::Ok).await?;
    let replay = Replay::new(envoy.url("/"), RATE, Duration::from_secs(8)).connection_per_request();
    let traffic = tokio::spawn(async move { replay.run().await });
    sleep(Duration::from_secs(3)).await;
    app2.switch_after_probe(Mode::Status(502), 2 * INTERVAL)
        .await?;
    let report = traffic.await??;
    println!("app2 breaks with 502 mid-traffic: {report}");
    for sample in report.samples.iter().filter(|s| s.outcome.is_failure()) {
        println!("  failed: {sample:?}");
    }
    let workers = envoy
        .stats("^listener\\.127\\.0\\.0\\.1_[0-9]+\\.worker_[0-9]+\\.downstream_cx_total$")
        .await?;
    println!("  connections per worker: {workers:?}");
    Ok(Breakage {
        envoy,
        app1,
        app2,
        report,
    })
}

#[tokio::test]
async fn a_backend_breaking_mid_traffic_fails_no_user_sent_after_its_third_failure_came_back(
) -> anyhow::Result<()> {
    let Breakage { app2, report, .. } = app2_breaks_mid_traffic().await?;

    assert!(report.failures() >= 3, "{report}");
    assert_eq!(report.failures_after_nth_answered(3), 0, "{report}");
    assert!(
        report
            .samples
            .iter()
            .filter(|s| s.outcome.is_failure())
            .all(|s| s.outcome == Outcome::Status(502)),
        "{report}"
    );
    // app2 had its share before it broke: the break happened under traffic.
    assert!(app2.counts().requests > 3 * u64::from(RATE) / 2 / 2);
    Ok(())
}

#[tokio::test]
async fn the_stats_show_app2_probed_failing_ejected_and_unhealthy_while_app1_stays_healthy(
) -> anyhow::Result<()> {
    let Breakage {
        envoy,
        app1,
        app2,
        report,
    } = app2_breaks_mid_traffic().await?;
    // Each worker adds its routed requests to the counter on its tick (200 ms).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let stats = envoy.stats("upcheck").await?;
    println!("{stats:#?}");
    let stat = |name: &str| {
        let full = format!("wasmcustom.upcheck.{name}");
        stats
            .get(&full)
            .copied()
            .unwrap_or_else(|| panic!("no stat {full} in {stats:#?}"))
    };

    assert_eq!(stat("app1.healthy"), 1);
    assert_eq!(stat("app2.healthy"), 0);
    assert!(stat("app2.ejections") >= 1);
    assert_eq!(stat("app1.ejections"), 0);
    // Every 502 a user saw was counted, and nothing else failed.
    assert!(stat("app2.request_failures") >= 3);
    assert_eq!(stat("app2.request_failures"), report.failures() as u64);
    assert_eq!(stat("app1.request_failures"), 0);
    // Routed requests are the requests the backends received.
    assert_eq!(stat("app1.requests"), app1.counts().requests);
    assert_eq!(stat("app2.requests"), app2.counts().requests);
    // Probes: counted when sent, so one may still be on its way to the backend.
    let sent = stat("app2.probes");
    let received = app2.counts().probes;
    assert!(
        sent == received || sent == received + 1,
        "sent {sent}, received {received}"
    );
    assert!(stat("app2.probe_failures") >= 1);
    assert_eq!(stat("app1.probe_failures"), 0);
    Ok(())
}
