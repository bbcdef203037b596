//! gRPC users calling through a real Envoy, on the listener `upcheck envoy` writes for gRPC
//! backends (`health_checks.active.grpc`) in host routing: the calls reach both backends over
//! HTTP/2 in plaintext, a call a backend answers UNAVAILABLE (trailers-only) is retried on the
//! other (and counted against the backend, which the filter ejects), and a stream outlives the
//! per-try timeout and the route's default timeout of 15 s. In cluster routing, where nothing
//! retries a call, a backend answering UNAVAILABLE costs its `max_fails`. Each test prints its
//! row.
//!
//! `cargo test --profile host-test -p upcheck-e2e --test in_envoy grpc_calls:: -- --nocapture`

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::{sleep, timeout};
use tonic::transport::Endpoint;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus as Watched;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use upcheck_e2e::etcd::Balancer;
use upcheck_e2e::grpc_replay::{GrpcCall, GrpcReplay};
use upcheck_e2e::grpc_upstream::{CallMode, GrpcUpstream, ServingStatus};

/// `routing` to `apps`, checked by the gRPC Health Checking Protocol every second.
fn plugin(routing: &str, apps: &[&GrpcUpstream]) -> Value {
    let upstreams: Vec<Value> = apps
        .iter()
        .map(|app| json!({"name": app.name(), "address": app.addr().to_string()}))
        .collect();
    json!({
        "routing": routing,
        "upstreams": upstreams,
        "health_checks": {"active": {"grpc": {"service": ""}, "interval": "1s", "timeout": "500ms"}},
    })
}

/// Starts a balancer in front of `apps`, in host routing, and waits until a round of checks
/// has passed.
async fn balancer(apps: &[&GrpcUpstream]) -> anyhow::Result<Balancer> {
    balancer_routing("host", apps).await
}

/// [`balancer`] in `routing`.
async fn balancer_routing(routing: &str, apps: &[&GrpcUpstream]) -> anyhow::Result<Balancer> {
    let balancer = Balancer::start(&plugin(routing, apps), None).await?;
    sleep(Duration::from_secs(2)).await;
    Ok(balancer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_through_the_listener_all_succeed_and_reach_both_backends() -> anyhow::Result<()>
{
    let app1 = GrpcUpstream::start("app1").await?;
    let app2 = GrpcUpstream::start("app2").await?;
    let balancer = balancer(&[&app1, &app2]).await?;
    let url = format!("http://{}", balancer.listener);
    let report = GrpcReplay::new(url, 20, Duration::from_secs(2))
        .run()
        .await?;
    let (calls1, calls2) = (app1.counts().calls, app2.counts().calls);
    println!("grpc calls | both serving | {report} | received: app1 {calls1}, app2 {calls2}");
    anyhow::ensure!(report.calls() == 40, "{report}");
    anyhow::ensure!(report.failed() == 0, "{report}");
    let by_backend = report.by_backend();
    for app in ["app1", "app2"] {
        anyhow::ensure!(
            by_backend.get(app).copied().unwrap_or(0) > 0,
            "no call answered by {app}: {report}"
        );
    }
    anyhow::ensure!(calls1 > 0 && calls2 > 0, "app1 {calls1}, app2 {calls2}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_a_backend_answers_unavailable_trailers_only_are_retried_on_the_other(
) -> anyhow::Result<()> {
    let app1 = GrpcUpstream::start("app1").await?;
    let app2 = GrpcUpstream::start("app2").await?;
    app2.set_call_mode(CallMode::Status(Code::Unavailable));
    let balancer = balancer(&[&app1, &app2]).await?;
    let url = format!("http://{}", balancer.listener);
    let report = GrpcReplay::new(url, 20, Duration::from_secs(2))
        .run()
        .await?;
    let (calls1, calls2) = (app1.counts().calls, app2.counts().calls);
    let retried = (calls1 + calls2).saturating_sub(report.calls() as u64);
    let page = balancer.page_json().await?;
    println!(
        "grpc calls | app2 answers UNAVAILABLE trailers-only | page {}",
        page["backends"]
    );
    println!(
        "grpc calls | app2 answers UNAVAILABLE trailers-only | users failed {} of {} | received: \
         app1 {calls1}, app2 {calls2} (second attempts: {retried}) | {report}",
        report.failed(),
        report.calls()
    );
    anyhow::ensure!(report.calls() == 40, "{report}");
    anyhow::ensure!(report.failed() == 0, "{report}");
    anyhow::ensure!(
        report.by_backend().keys().all(|b| b == "app1"),
        "only app1 answers users: {report}"
    );
    anyhow::ensure!(
        calls2 > 0,
        "app2 received no call, so nothing was retried: {report}"
    );
    anyhow::ensure!(
        page["backends"][1]["ejected"] == true,
        "app2's failed first attempts eject it: {}",
        page["backends"][1]
    );
    anyhow::ensure!(
        calls1 >= report.calls() as u64,
        "every call reached app1, first or second: app1 {calls1}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_cluster_routing_calls_reach_both_backends_and_one_turning_unavailable_costs_at_most_three(
) -> anyhow::Result<()> {
    let app1 = GrpcUpstream::start("app1").await?;
    let app2 = GrpcUpstream::start("app2").await?;
    let balancer = balancer_routing("cluster", &[&app1, &app2]).await?;
    let url = format!("http://{}", balancer.listener);
    let start = tokio::time::Instant::now();
    let users = tokio::spawn({
        let replay = GrpcReplay::new(url, 20, Duration::from_secs(6));
        async move { replay.run_from(start).await }
    });
    sleep(Duration::from_secs(2)).await;
    let turned = start.elapsed();
    app2.set_call_mode(CallMode::Status(Code::Unavailable));
    let report = users.await??;
    let page = balancer.page_json().await?;
    let before = |c: &&GrpcCall| c.sent < turned;
    let answered_before: Vec<&str> = report
        .samples
        .iter()
        .filter(before)
        .filter_map(|c| c.backend.as_deref())
        .collect();
    println!(
        "grpc calls | cluster routing, app2 answers UNAVAILABLE from {turned:.1?} | users failed {} of {} | codes {:?} | by backend {:?} | received: app1 {}, app2 {} | app2 on the page {}",
        report.failed(),
        report.calls(),
        report.by_code(),
        report.by_backend(),
        app1.counts().calls,
        app2.counts().calls,
        page["backends"][1]
    );
    anyhow::ensure!(report.calls() == 120, "{report}");
    for app in ["app1", "app2"] {
        anyhow::ensure!(
            answered_before.contains(&app),
            "{app} answered no call before the change: {report}"
        );
    }
    anyhow::ensure!(
        report.failed() <= 3,
        "at most max_fails (3) calls fail: {:?}",
        report.by_code()
    );
    anyhow::ensure!(
        page["backends"][1]["ejected"] == true,
        "app2's UNAVAILABLE answers eject it: {}",
        page["backends"][1]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_through_the_listener_outlives_the_per_try_timeout_and_the_default_route_timeout(
) -> anyhow::Result<()> {
    let app1 = GrpcUpstream::start("app1").await?;
    let app2 = GrpcUpstream::start("app2").await?;
    for app in [&app1, &app2] {
        app.set_serving_status("orders", ServingStatus::Serving)
            .await;
    }
    let balancer = balancer(&[&app1, &app2]).await?;
    let channel = Endpoint::from_shared(format!("http://{}", balancer.listener))?
        .connect()
        .await?;
    let mut health = HealthClient::new(channel);
    let asking = HealthCheckRequest {
        service: "orders".to_owned(),
    };
    let mut stream = health.watch(asking).await?.into_inner();
    let next = |message: Option<tonic_health::pb::HealthCheckResponse>| {
        message.map(|m| Watched::try_from(m.status).unwrap_or(Watched::Unknown))
    };
    let first = next(stream.message().await?);
    // Past the per-try timeout (3 s) and Envoy's default route timeout (15 s).
    sleep(Duration::from_secs(16)).await;
    for app in [&app1, &app2] {
        app.set_serving_status("orders", ServingStatus::NotServing)
            .await;
    }
    let later = timeout(Duration::from_secs(5), stream.message()).await;
    let later = match later {
        Ok(Ok(message)) => format!("{:?}", next(message)),
        Ok(Err(status)) => format!("ended: {:?} {}", status.code(), status.message()),
        Err(_) => "nothing within 5 s".to_owned(),
    };
    println!("grpc calls | a Watch held 16 s through Envoy | first {first:?}, then {later}");
    anyhow::ensure!(first == Some(Watched::Serving), "first: {first:?}");
    anyhow::ensure!(later == "Some(NotServing)", "after 16 s: {later}");
    Ok(())
}
