//! A backend joins while Envoy runs: the clusters file is replaced and Envoy picks it up.

use std::time::Duration;

use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::replay::{Outcome, Replay};
use upcheck_e2e::upstream::{FakeUpstream, ROUTING_HEADER};

async fn outcome_via(envoy: &Envoy, cluster: &str) -> anyhow::Result<Outcome> {
    let report = Replay::new(envoy.url("/"), 1, Duration::from_secs(1))
        .header(ROUTING_HEADER, cluster)
        .run()
        .await?;
    Ok(report.samples[0].outcome.clone())
}

#[tokio::test]
async fn a_backend_added_to_the_clusters_file_takes_traffic_without_a_restart() -> anyhow::Result<()>
{
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let mut envoy = Envoy::builder().upstream(&app1).start().await?;
    let pid = envoy.pid();
    assert_eq!(outcome_via(&envoy, "app2").await?, Outcome::Status(503));

    envoy.add_backend(app2.name(), app2.addr()).await?;

    assert_eq!(outcome_via(&envoy, "app2").await?, Outcome::Status(200));
    assert_eq!(outcome_via(&envoy, "app1").await?, Outcome::Status(200));
    assert_eq!(app2.counts().requests, 1);
    assert_eq!(envoy.pid(), pid);
    assert_eq!(envoy.stat("cluster_manager.active_clusters").await?, 2);
    Ok(())
}

#[tokio::test]
async fn traffic_keeps_flowing_while_a_backend_is_added() -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let mut envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&app1)
        .start()
        .await?;
    let replay =
        Replay::new(envoy.url("/"), 40, Duration::from_secs(2)).header(ROUTING_HEADER, "app1");
    let traffic = tokio::spawn(async move { replay.run().await });

    tokio::time::sleep(Duration::from_millis(500)).await;
    envoy.add_backend(app2.name(), app2.addr()).await?;

    let report = traffic.await??;
    println!("{report}");
    assert_eq!(report.failures(), 0, "{report}");
    Ok(())
}
