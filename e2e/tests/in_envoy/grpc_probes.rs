//! gRPC backends probed by the Health Checking Protocol in a real Envoy: `upcheck envoy`'s file
//! with `health_checks.active.grpc` (HTTP/2 clusters), real gRPC servers
//! ([`upcheck_e2e::grpc_upstream`]), and what each balancer's page says of each; and gRPC users
//! calling through Envoy while a backend's health `Watch` turns it `NOT_SERVING` and back.
//!
//! `cargo test --profile host-test -p upcheck-e2e --test in_envoy grpc_probes:: -- --nocapture`

use std::time::Duration;

use serde_json::json;
use tokio::time::sleep;
use upcheck_e2e::etcd::{Balancer, Machine};
use upcheck_e2e::grpc_replay::{GrpcReplay, GrpcReport};
use upcheck_e2e::grpc_upstream::{GrpcUpstream, ServingStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_backend_passes_its_checks_and_one_not_serving_or_stopped_fails_them_saying_why(
) -> anyhow::Result<()> {
    let app1 = GrpcUpstream::start("app1").await?;
    let app2 = GrpcUpstream::start("app2").await?;
    app2.set_serving_status("", ServingStatus::NotServing).await;
    let plugin = json!({
        "routing": "host",
        "log_level": "debug",
        "upstreams": [
            {"name": "app1", "address": app1.addr().to_string()},
            {"name": "app2", "address": app2.addr().to_string()},
        ],
        "health_checks": {"active": {"grpc": {"service": ""}, "interval": "1s", "timeout": "500ms"}},
    });
    let balancer = Balancer::start_on(&plugin, None, &Machine::default()).await?;
    sleep(Duration::from_secs(3)).await;
    let page = balancer.page_json().await?;
    println!("grpc probes | both up | {}", page["backends"]);
    let last_probe = |page: &serde_json::Value, i: usize| page["backends"][i]["last_probe"].clone();
    let app1_first = last_probe(&page, 0);
    let app2_first = last_probe(&page, 1);
    app1.stop().await?;
    sleep(Duration::from_secs(3)).await;
    let page = balancer.page_json().await?;
    println!("grpc probes | app1 stopped | {}", page["backends"]);
    for line in balancer
        .log()
        .lines()
        .filter(|l| l.contains("health check"))
    {
        println!("grpc probes | log | {line}");
    }
    println!(
        "grpc probes | checks received: app1 {:?}, app2 {:?}",
        app1.counts(),
        app2.counts()
    );
    anyhow::ensure!(app1_first == "passed", "app1: {app1_first}");
    anyhow::ensure!(app2_first == "answered NOT_SERVING", "app2: {app2_first}");
    let app1_stopped = last_probe(&page, 0);
    anyhow::ensure!(
        app1_stopped == "found nothing serving (connection failed)",
        "app1 stopped: {app1_stopped}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_accepts_and_never_answers_fails_its_checks_as_timed_out(
) -> anyhow::Result<()> {
    let app1 = GrpcUpstream::start("app1").await?;
    // Accepts every connection and never says a word: no HTTP/2 settings, no answer.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let silent_addr = silent.local_addr()?;
    let held = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            kept.push(socket);
        }
    });
    let plugin = json!({
        "routing": "host",
        "log_level": "debug",
        "upstreams": [
            {"name": "app1", "address": app1.addr().to_string()},
            {"name": "app2", "address": silent_addr.to_string()},
        ],
        "health_checks": {"active": {"grpc": {"service": ""}, "interval": "1s", "timeout": "500ms"}},
    });
    let balancer = Balancer::start_on(&plugin, None, &Machine::default()).await?;
    sleep(Duration::from_secs(3)).await;
    let page = balancer.page_json().await?;
    println!("grpc probes | app2 silent | {}", page["backends"][1]);
    for line in balancer
        .log()
        .lines()
        .filter(|l| l.contains("app2") || l.contains("health check failed"))
    {
        println!("grpc probes | log | {line}");
    }
    held.abort();
    let app2 = &page["backends"][1]["last_probe"];
    anyhow::ensure!(app2 == "timed out after 500ms", "app2: {app2}");
    Ok(())
}

/// How soon after a backend's change of status its Watch's word must be logged: half the 10 s
/// interval after which a Check would have seen the change.
const PUSHED_WITHIN: Duration = Duration::from_secs(5);

/// Calls of `report` that `backend` answered, sent at or after `from`.
fn answered_by_since(report: &GrpcReport, backend: &str, from: Duration) -> usize {
    report
        .samples
        .iter()
        .filter(|c| c.sent >= from && c.backend.as_deref() == Some(backend))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_turning_not_serving_on_its_watch_gets_no_call_once_the_push_is_logged_and_serving_takes_calls_again(
) -> anyhow::Result<()> {
    let app1 = GrpcUpstream::start("app1").await?;
    let app2 = GrpcUpstream::start("app2").await?;
    // A 10 s interval: the Check would see a change up to 10 s late; the Watch pushes it. A 2 s
    // timeout, for a Watch whose first answer a loaded machine delays is reopened after it.
    let plugin = json!({
        "routing": "host",
        "upstreams": [
            {"name": "app1", "address": app1.addr().to_string()},
            {"name": "app2", "address": app2.addr().to_string()},
        ],
        "health_checks": {"active": {"grpc": {"service": ""}, "interval": "10s", "timeout": "2s"}},
    });
    let balancer = Balancer::start_on(&plugin, None, &Machine::default()).await?;
    let url = format!("http://{}", balancer.listener);
    sleep(Duration::from_secs(2)).await;

    // 20 calls a second for 8 s; app2 turns NOT_SERVING 2 s in.
    let start = tokio::time::Instant::now();
    let users = tokio::spawn({
        let replay = GrpcReplay::new(url.clone(), 20, Duration::from_secs(8));
        async move { replay.run_from(start).await }
    });
    sleep(Duration::from_secs(2)).await;
    let turned = start.elapsed();
    app2.set_serving_status("", ServingStatus::NotServing).await;
    let seen = balancer
        .until_logged("app2 draining, no new requests: it said NOT_SERVING on its Watch")
        .await?;
    // Every call app2 got from here on was routed after the proxy logged its drain.
    let at_drain = app2.counts().calls;
    let drained = users.await??;
    let after_drain = app2.counts().calls - at_drain;
    let late = answered_by_since(&drained, "app2", turned + Duration::from_secs(1));
    println!(
        "grpc watch | NOT_SERVING | drain logged {} ms after the change; calls {}, failed {}, by backend {:?}; app2 got {} calls after the drain was logged, {} sent more than 1 s after the change",
        seen.as_millis(),
        drained.calls(),
        drained.failed(),
        drained.by_backend(),
        after_drain,
        late
    );

    let start = tokio::time::Instant::now();
    let users = tokio::spawn({
        let replay = GrpcReplay::new(url.clone(), 20, Duration::from_secs(4));
        async move { replay.run_from(start).await }
    });
    sleep(Duration::from_secs(1)).await;
    let turned = start.elapsed();
    app2.set_serving_status("", ServingStatus::Serving).await;
    let seen_back = balancer.until_logged("app2 no longer draining").await?;
    let back = users.await??;
    let first_back = back
        .samples
        .iter()
        .filter(|c| c.sent >= turned && c.backend.as_deref() == Some("app2"))
        .map(|c| c.sent - turned)
        .min();
    println!(
        "grpc watch | SERVING | drain end logged {} ms after the change; calls {}, failed {}, by backend {:?}; app2's first call {:?} after the change",
        seen_back.as_millis(),
        back.calls(),
        back.failed(),
        back.by_backend(),
        first_back
    );
    let (counts1, counts2) = (app1.counts(), app2.counts());
    println!("grpc watch | health calls received: app1 {counts1:?}, app2 {counts2:?}");

    anyhow::ensure!(drained.failed() == 0 && back.failed() == 0, "no user fails");
    anyhow::ensure!(
        after_drain <= 1,
        "app2 got {after_drain} calls after its drain was logged (one may be on the wire)"
    );
    // The Watch, not the next Check (up to 10 s away), took it out: a bound from what the proxy
    // logged, with room for a loaded machine; the figure above is the one to read.
    anyhow::ensure!(
        seen < PUSHED_WITHIN,
        "the drain was logged {seen:?} after the change: not pushed by the Watch"
    );
    anyhow::ensure!(
        seen_back < PUSHED_WITHIN,
        "the drain's end was logged {seen_back:?} after the change: not pushed by the Watch"
    );
    anyhow::ensure!(
        answered_by_since(&back, "app2", turned + seen_back) > 0,
        "app2 takes calls once its drain's end is logged"
    );
    anyhow::ensure!(
        (counts1.watches, counts2.watches) == (1, 1),
        "one Watch per backend for the process: {counts1:?} {counts2:?}"
    );
    Ok(())
}
