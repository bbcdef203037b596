//! Why the app team feared a `/up` that queries the database: a database blip fails every
//! backend's probe at once while real pages still work. With Caddy that 503'd every user request
//! (800 of 800 in a 20 s blip). upcheck's pool guard sees backends going down together, within
//! one probe round, as a failure of something they share and keeps them in rotation; a backend
//! that was already down before the blip stays out.

use std::time::Duration;

use crate::support::two_backends;
use tokio::time::{sleep, sleep_until, Instant};
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::RATE;
use upcheck_e2e::replay::Replay;

/// `/up` answers 503 from now on, pages stay 200: the blip, switched on by hand.
const BLIP: Mode = Mode::Blip {
    from: Duration::ZERO,
    to: Duration::MAX,
};

#[tokio::test]
async fn a_blip_failing_every_probe_at_once_costs_users_nothing() -> anyhow::Result<()> {
    let (app1, app2, envoy) = two_backends(Routing::Cluster, Mode::Ok, Mode::Ok).await?;
    let replay =
        Replay::new(envoy.url("/"), RATE, Duration::from_secs(10)).connection_per_request();
    let traffic = tokio::spawn(async move { replay.run().await });

    sleep(Duration::from_secs(2)).await;
    app1.set_mode(BLIP);
    app2.set_mode(BLIP);
    // Two probe rounds in, both backends have failed their probes.
    sleep(Duration::from_secs(3)).await;
    let guard = envoy.stat("wasmcustom.upcheck.pool_guard").await?;
    let healthy = [
        envoy.stat("wasmcustom.upcheck.app1.healthy").await?,
        envoy.stat("wasmcustom.upcheck.app2.healthy").await?,
    ];
    sleep(Duration::from_secs(3)).await;
    app1.set_mode(Mode::Ok);
    app2.set_mode(Mode::Ok);

    let report = traffic.await??;
    println!("/up blip on both backends: {report}");
    assert_eq!(report.failures(), 0, "{report}");
    // The blip did fail every probe and engage the guard; both backends kept their share.
    assert_eq!((guard, healthy), (1, [0, 0]));
    assert_eq!(
        app1.counts().requests + app2.counts().requests,
        report.requests() as u64
    );
    assert!(app1.counts().requests >= 150 && app2.counts().requests >= 150);
    Ok(())
}

#[tokio::test]
async fn the_log_says_when_the_pool_guard_engages_and_when_it_releases() -> anyhow::Result<()> {
    let (app1, app2, envoy) = two_backends(Routing::Cluster, Mode::Ok, Mode::Ok).await?;

    sleep(Duration::from_secs(1)).await;
    app1.set_mode(BLIP);
    app2.set_mode(BLIP);
    sleep(Duration::from_secs(3)).await;
    let engaged = envoy.stat("wasmcustom.upcheck.pool_guard").await?;
    app1.set_mode(Mode::Ok);
    app2.set_mode(Mode::Ok);
    sleep(Duration::from_secs(2)).await;

    let log = envoy.log();
    let guard_lines: Vec<&str> = log.lines().filter(|l| l.contains("pool guard")).collect();
    println!("pool_guard gauge during the blip: {engaged}; guard log lines: {guard_lines:#?}");
    assert_eq!(engaged, 1);
    assert_eq!(envoy.stat("wasmcustom.upcheck.pool_guard").await?, 0);
    assert!(
        log.contains("upcheck: pool guard engaged"),
        "no line for the guard engaging"
    );
    assert!(
        log.contains("upcheck: pool guard released"),
        "no line for the guard releasing"
    );
    Ok(())
}

#[tokio::test]
async fn a_backend_down_before_the_blip_gets_no_user_request_during_it() -> anyhow::Result<()> {
    let (app1, app2, envoy) = two_backends(Routing::Cluster, Mode::Ok, Mode::Ok).await?;
    let replay =
        Replay::new(envoy.url("/"), RATE, Duration::from_secs(13)).connection_per_request();
    let start = Instant::now();
    let traffic = tokio::spawn(async move { replay.run_from(start).await });

    // app2 hangs from 2 s on (and keeps hanging); app1's `/up` blips from 6 s to 11 s.
    sleep_until(start + Duration::from_secs(2)).await;
    app2.set_mode(Mode::Hang);
    sleep_until(start + Duration::from_secs(6)).await;
    let before = app2.counts().requests;
    app1.set_mode(BLIP);
    sleep_until(start + Duration::from_secs(11)).await;
    let during = app2.counts().requests - before;
    app1.set_mode(Mode::Ok);

    let report = traffic.await??;
    println!("/up blip after app2 hung for 4 s: {report}");
    println!("  app2 user requests during the blip: {during}");
    let in_blip = |sent: Duration| (6..11).contains(&sent.as_secs());
    let failed_in_blip = report
        .samples
        .iter()
        .filter(|s| in_blip(s.sent) && s.outcome.is_failure())
        .count();
    assert_eq!(during, 0);
    assert_eq!(failed_in_blip, 0, "{report}");
    assert!(envoy.stat("wasmcustom.upcheck.app1.probe_failures").await? >= 1);
    Ok(())
}
