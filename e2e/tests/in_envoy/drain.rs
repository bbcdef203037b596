//! Drain in a real Envoy: app2 starts answering with `x-envoy-immediate-health-check-fail`, on
//! its pages first (each such answer drains it until its next passing probe) and then on its
//! probe as well. No user ever sees the header, nothing fails, and while its probe carries the
//! header no new request reaches app2.

use std::time::Duration;

use tokio::time::sleep;
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::{DrainSignal, Mode};
use upcheck_e2e::plugin::{fast_checks, INTERVAL, RATE};
use upcheck_e2e::replay::Replay;
use upcheck_e2e::upstream::FakeUpstream;
use upcheck_policy::drain::SIGNAL_HEADER;

#[tokio::test]
async fn a_backend_answering_with_the_drain_header_gets_no_new_requests_and_users_never_see_it(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&app1)
        .upstream(&app2)
        .routing(Routing::Cluster)
        .wasm_filter(fast_checks(&["app1", "app2"]))
        .start()
        .await?;
    sleep(2 * INTERVAL).await;
    let client = reqwest::Client::new();

    // Pages carry the header: each such answer drains app2 until its next passing probe.
    app2.set_mode(Mode::Drain(DrainSignal::PagesHeader));
    let mut leaked = 0;
    let mut statuses = Vec::new();
    for _ in 0..40 {
        let response = client.get(envoy.url("/")).send().await?;
        statuses.push(response.status().as_u16());
        leaked += usize::from(response.headers().contains_key(SIGNAL_HEADER));
        sleep(Duration::from_millis(50)).await;
    }
    let reached = app2.counts().requests;
    println!("pages with the header: app2 took {reached} of 40 requests");
    assert!(reached >= 1, "the header was never sent");
    assert_eq!(leaked, 0, "users got {SIGNAL_HEADER}");
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    // The probe carries it too: once a probe has said so, app2 takes no new request.
    app2.set_mode(Mode::Drain(DrainSignal::Header));
    sleep(2 * INTERVAL).await;
    let before = app2.counts().requests;
    let replay = Replay::new(envoy.url("/"), RATE, Duration::from_secs(3)).connection_per_request();
    let report = replay.run().await?;
    let during = app2.counts().requests - before;
    println!("probe with the header: {report}; app2 took {during}");
    assert_eq!(report.failures(), 0, "{report}");
    assert_eq!(during, 0, "app2 took new requests while it drained");
    assert_eq!(envoy.stat("wasmcustom.upcheck.app2.draining").await?, 1);
    assert_eq!(
        envoy
            .stat("wasmcustom.upcheck.app2.request_failures")
            .await?,
        0
    );
    assert_eq!(
        envoy.stat("wasmcustom.upcheck.app2.probe_failures").await?,
        0
    );
    Ok(())
}
