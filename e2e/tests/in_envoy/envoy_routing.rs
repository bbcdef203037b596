//! Envoy 1.40 routes by the routing header as config/envoy-simple.yaml has it, before any filter is in.
//!
//! Without the wasm filter the client sets `x-upcheck-upstream` itself, as the filter will.

use std::path::Path;
use std::time::Duration;

use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::replay::{Outcome, Replay};
use upcheck_e2e::upstream::{FakeUpstream, ROUTING_HEADER};

#[tokio::test]
async fn users_see_no_failures_through_envoy_to_a_healthy_backend() -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&app1)
        .start()
        .await?;

    let report = Replay::new(envoy.url("/"), 40, Duration::from_secs(3))
        .header(ROUTING_HEADER, "app1")
        .run()
        .await?;
    println!("{report}");

    assert_eq!(report.requests(), 120);
    assert_eq!(report.failures(), 0, "{report}");
    assert_eq!(app1.counts().requests, 120);
    assert_eq!(envoy.stat("cluster.app1.upstream_rq_200").await?, 120);
    Ok(())
}

#[tokio::test]
async fn the_route_removes_the_routing_header_before_the_backend_sees_it() -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let envoy = Envoy::builder()
        .upstream(&app1)
        .upstream(&app2)
        .start()
        .await?;

    for (cluster, backend) in [("app1", &app1), ("app2", &app2)] {
        let report = Replay::new(envoy.url("/"), 20, Duration::from_secs(1))
            .header(ROUTING_HEADER, cluster)
            .run()
            .await?;
        assert_eq!(report.failures(), 0, "{report}");
        assert_eq!(backend.counts().requests, 20, "routed to {cluster}");
        assert_eq!(backend.counts().with_routing_header, 0);
    }
    Ok(())
}

#[tokio::test]
async fn a_request_naming_no_known_cluster_gets_a_503_from_envoy() -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let envoy = Envoy::builder().upstream(&app1).start().await?;

    for named in [Some("nope"), None] {
        let mut replay = Replay::new(envoy.url("/"), 1, Duration::from_secs(1));
        if let Some(cluster) = named {
            replay = replay.header(ROUTING_HEADER, cluster);
        }
        let report = replay.run().await?;
        assert_eq!(report.samples[0].outcome, Outcome::Status(503), "{named:?}");
    }
    assert_eq!(app1.counts().requests, 0);
    Ok(())
}

#[tokio::test]
async fn a_refusing_backend_costs_users_a_503_from_envoy() -> anyhow::Result<()> {
    let app2 = FakeUpstream::start("app2", Mode::Refuse).await?;
    let envoy = Envoy::builder().upstream(&app2).start().await?;
    let report = Replay::new(envoy.url("/"), 1, Duration::from_secs(1))
        .header(ROUTING_HEADER, "app2")
        .run()
        .await?;
    assert_eq!(report.samples[0].outcome, Outcome::Status(503), "{report}");
    assert!(envoy.stat("cluster.app2.upstream_cx_connect_fail").await? >= 1);
    Ok(())
}

#[tokio::test]
async fn a_backend_that_never_accepts_leaves_users_waiting_past_their_timeout() -> anyhow::Result<()>
{
    // The incident's app2 with no health policy: the handshake completes from the kernel's
    // backlog, so Envoy's connect timeout never fires and the request waits for the route timeout.
    let app2 = FakeUpstream::start("app2", Mode::NoAccept).await?;
    let envoy = Envoy::builder().upstream(&app2).start().await?;
    let report = Replay::new(envoy.url("/"), 1, Duration::from_secs(1))
        .header(ROUTING_HEADER, "app2")
        .timeout(Duration::from_millis(1500))
        .run()
        .await?;
    assert_eq!(report.samples[0].outcome, Outcome::Timeout, "{report}");
    assert_eq!(
        envoy.stat("cluster.app2.upstream_cx_connect_fail").await?,
        0
    );
    Ok(())
}

#[tokio::test]
async fn dropping_the_handle_kills_envoy_by_its_pid() -> anyhow::Result<()> {
    let envoy = Envoy::builder().start().await?;
    let proc_entry = format!("/proc/{}", envoy.pid());
    assert!(Path::new(&proc_entry).exists());
    drop(envoy);
    assert!(
        !Path::new(&proc_entry).exists(),
        "{proc_entry} is still there"
    );
    Ok(())
}
