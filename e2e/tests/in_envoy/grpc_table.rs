//! The events of a gRPC backend's life, on real Envoy: the table.
//!
//! Two real gRPC servers with the standard health service ([`upcheck_e2e::grpc_upstream`])
//! behind the file `upcheck envoy` writes for `health_checks.active.grpc` (host routing, every
//! other default: `Check` every 10 s with a 5 s timeout and a `Watch` per backend, 3 failures in
//! 10 s, a trailers-only `UNAVAILABLE` retried once on the other backend), and a gRPC user
//! client calling through Envoy 20 times a second ([`upcheck_e2e::grpc_replay`]). app1 stays
//! well; app2 goes through one event per row. Each row prints the calls, the calls that failed,
//! the calls app2 took and when its last one was sent.
//!
//! `make e2e E2E_THREADS="2 grpc_table --nocapture" 2>&1 | grep grpc-table`

use std::time::Duration;

use serde_json::json;
use tokio::time::{sleep, Instant};
use tonic::Code;
use upcheck_e2e::etcd::{Balancer, Machine};
use upcheck_e2e::grpc_replay::{GrpcReplay, GrpcReport};
use upcheck_e2e::grpc_upstream::{CallMode, GrpcUpstream, HealthMode, ServingStatus};

/// Calls a second.
const RATE: u32 = 20;

/// app1 and app2 (as `app2` is set up by `prepare` before the balancer starts) behind a
/// balancer probing by the Health Checking Protocol on every default.
struct Row {
    app1: GrpcUpstream,
    app2: GrpcUpstream,
    balancer: Balancer,
}

impl Row {
    async fn start(app2_from_the_start: impl AsyncFnOnce(&GrpcUpstream)) -> anyhow::Result<Row> {
        let app1 = GrpcUpstream::start("app1").await?;
        let app2 = GrpcUpstream::start("app2").await?;
        app2_from_the_start(&app2).await;
        let plugin = json!({
            "routing": "host",
            "upstreams": [
                {"name": "app1", "address": app1.addr().to_string()},
                {"name": "app2", "address": app2.addr().to_string()},
            ],
            "health_checks": {"active": {"grpc": {"service": ""}}},
        });
        let balancer = Balancer::start_on(&plugin, None, &Machine::default()).await?;
        Ok(Row {
            app1,
            app2,
            balancer,
        })
    }

    /// Calls for `length`, with `event` happening to app2 `after` into them: the report, and the
    /// time of the event from the start of the calls.
    async fn calls(
        &self,
        length: Duration,
        after: Duration,
        event: impl AsyncFnOnce(&GrpcUpstream),
    ) -> anyhow::Result<(GrpcReport, Duration)> {
        let run = self.calls_until_logged(length, after, event, None).await?;
        Ok((run.report, run.at))
    }

    /// [`Row::calls`], waiting after the event until the balancer logs `said`, if given.
    async fn calls_until_logged(
        &self,
        length: Duration,
        after: Duration,
        event: impl AsyncFnOnce(&GrpcUpstream),
        said: Option<&str>,
    ) -> anyhow::Result<Calls> {
        let start = Instant::now();
        let replay = GrpcReplay::new(format!("http://{}", self.balancer.listener), RATE, length);
        let users = tokio::spawn(async move { replay.run_from(start).await });
        sleep(after).await;
        event(&self.app2).await;
        let at = start.elapsed();
        let logged = match said {
            Some(text) => {
                self.balancer.until_logged(text).await?;
                Some((start.elapsed(), self.app2.counts().calls))
            }
            None => None,
        };
        let report = users.await??;
        Ok(Calls { report, at, logged })
    }

    /// Prints the row.
    fn print(&self, label: &str, report: &GrpcReport, event_at: Option<Duration>) {
        let app2: Vec<Duration> = app2_calls(report);
        let at = |d: Option<&Duration>| d.map_or("-".into(), |d| format!("{d:.1?}"));
        let after = event_at.and_then(|e| app2.iter().find(|d| **d >= e));
        println!(
            "grpc-table | {label} | calls {} | failed {} | codes {:?} | app2 took {} | app2's first call sent at {}, its last at {}, its first after the event at {} | event at {} | app1 {:?} | app2 {:?}",
            report.calls(),
            report.failed(),
            report.by_code(),
            app2.len(),
            at(app2.first()),
            at(app2.last()),
            at(after),
            at(event_at.as_ref()),
            self.app1.counts(),
            self.app2.counts(),
        );
    }
}

/// What a row's calls met.
struct Calls {
    report: GrpcReport,
    /// When the event happened, from the start of the calls.
    at: Duration,
    /// When the balancer was seen saying what the row waited for, from the start of the calls,
    /// and the calls app2 had answered by then.
    logged: Option<(Duration, u64)>,
}

/// How soon after app2's change of status its Watch's word must be logged: half the 10 s
/// interval after which a Check would have seen the change. The figures printed are the ones to
/// read; this bound leaves a loaded machine its room.
const PUSHED_WITHIN: Duration = Duration::from_secs(5);

/// When each call app2 answered was sent.
fn app2_calls(report: &GrpcReport) -> Vec<Duration> {
    report
        .samples
        .iter()
        .filter(|c| c.backend.as_deref() == Some("app2"))
        .map(|c| c.sent)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_not_serving_from_the_start_gets_no_call_and_nobody_fails() -> anyhow::Result<()>
{
    let row = Row::start(async |app2| app2.set_serving_status("", ServingStatus::NotServing).await)
        .await?;
    let (report, _) = row
        .calls(Duration::from_secs(4), Duration::ZERO, async |_| {})
        .await?;
    row.print("NOT_SERVING from the start", &report, None);
    assert_eq!(report.failed(), 0, "{:?}", report.by_code());
    assert!(app2_calls(&report).is_empty(), "{:?}", report.by_backend());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_answering_unavailable_to_every_call_costs_at_most_three_and_none_once_ejected(
) -> anyhow::Result<()> {
    for (label, mode) in [
        (
            "UNAVAILABLE, trailers-only, from mid-traffic",
            CallMode::Status(Code::Unavailable),
        ),
        (
            "UNAVAILABLE in trailers, from mid-traffic",
            CallMode::StatusInTrailers(Code::Unavailable),
        ),
    ] {
        let row = Row::start(async |_| {}).await?;
        let (report, at) = row
            .calls(
                Duration::from_secs(6),
                Duration::from_secs(2),
                async |app2| app2.set_call_mode(mode),
            )
            .await?;
        row.print(label, &report, Some(at));
        let failed: Vec<Duration> = report
            .samples
            .iter()
            .filter(|c| c.is_failure())
            .map(|c| c.sent)
            .collect();
        assert!(failed.len() <= 3, "{label}: {failed:?}");
        let page = row.balancer.page_json().await?;
        println!(
            "grpc-table | {label} | app2 on the page: {}",
            page["backends"][1]
        );
        let log = row.balancer.log();
        let said: Vec<&str> = log.lines().filter(|l| l.contains("app2")).collect();
        println!("grpc-table | {label} | log: {said:#?}");
        assert_eq!(page["backends"][1]["ejected"], true, "{label}");
        // Envoy repeats a trailers-only UNAVAILABLE on app1 (the route's `unavailable`) and
        // says only that it retried; one in trailers came after the answer began, and reaches
        // its user, who sees the code the log names.
        let ejected = said.iter().find(|l| l.contains("app2 ejected"));
        let named = ejected.is_some_and(|l| {
            l.contains("a call answered UNAVAILABLE") || l.contains("retried on another backend")
        });
        assert!(named, "{label}: {said:#?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_whose_server_stops_mid_traffic_costs_at_most_three_calls() -> anyhow::Result<()>
{
    let row = Row::start(async |_| {}).await?;
    let (report, at) = row
        .calls(
            Duration::from_secs(6),
            Duration::from_secs(2),
            async |app2| {
                let _ = app2.stop().await;
            },
        )
        .await?;
    row.print("server stopped mid-traffic", &report, Some(at));
    assert!(report.failed() <= 3, "{:?}", report.by_code());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_without_the_health_service_is_reported_as_such() -> anyhow::Result<()> {
    let row = Row::start(async |app2| app2.set_health_mode(HealthMode::Absent)).await?;
    let (report, _) = row
        .calls(Duration::from_secs(3), Duration::ZERO, async |_| {})
        .await?;
    row.print("no health service", &report, None);
    let page = row.balancer.page_json().await?;
    let app2 = page["backends"][1].to_string();
    println!("grpc-table | no health service | app2 on the page: {app2}");
    let said: Vec<String> = row
        .balancer
        .log()
        .lines()
        .filter(|l| l.contains("serves no gRPC health service"))
        .map(str::to_owned)
        .collect();
    println!("grpc-table | no health service | log: {said:#?}");
    assert_eq!(report.failed(), 0, "{:?}", report.by_code());
    assert!(app2_calls(&report).is_empty(), "{:?}", report.by_backend());
    assert!(app2.contains("UNIMPLEMENTED"), "{app2}");
    assert_eq!(said.len(), 1, "said once: {said:#?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_turning_serving_takes_calls_once_its_watch_says_so() -> anyhow::Result<()> {
    let row = Row::start(async |app2| app2.set_serving_status("", ServingStatus::NotServing).await)
        .await?;
    // Past the first checks (at start-up) so that the next is 10 s away.
    sleep(Duration::from_secs(1)).await;
    let before = row.app2.counts().calls;
    let run = row
        .calls_until_logged(
            Duration::from_secs(6),
            Duration::from_secs(2),
            async |app2| app2.set_serving_status("", ServingStatus::Serving).await,
            Some("app2 no longer draining"),
        )
        .await?;
    let (report, at) = (&run.report, run.at);
    row.print("turning SERVING mid-traffic", report, Some(at));
    let (logged, _) = run.logged.unwrap_or_default();
    println!(
        "grpc-table | turning SERVING mid-traffic | the drain's end logged {:?} after the change",
        logged.saturating_sub(at)
    );
    assert_eq!(report.failed(), 0, "{:?}", report.by_code());
    assert_eq!(before, 0, "app2 took calls while NOT_SERVING");
    assert!(
        logged < at + PUSHED_WITHIN,
        "the drain's end was logged at {logged:?}, SERVING at {at:?}: not pushed by the Watch"
    );
    let after = app2_calls(report)
        .into_iter()
        .filter(|d| *d >= logged)
        .count();
    assert!(after > 0, "app2 took no call after {logged:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_turning_not_serving_gets_no_call_once_its_watch_says_so_and_nobody_fails(
) -> anyhow::Result<()> {
    let row = Row::start(async |_| {}).await?;
    let run = row
        .calls_until_logged(
            Duration::from_secs(6),
            Duration::from_secs(2),
            async |app2| app2.set_serving_status("", ServingStatus::NotServing).await,
            Some("app2 draining, no new requests: it said NOT_SERVING on its Watch"),
        )
        .await?;
    let (report, at) = (&run.report, run.at);
    row.print("turning NOT_SERVING mid-traffic", report, Some(at));
    let (logged, by_then) = run.logged.unwrap_or_default();
    let later = row.app2.counts().calls - by_then;
    println!(
        "grpc-table | turning NOT_SERVING mid-traffic | the drain logged {:?} after the change; app2 answered {later} calls after that",
        logged.saturating_sub(at)
    );
    assert_eq!(report.failed(), 0, "{:?}", report.by_code());
    assert!(
        logged < at + PUSHED_WITHIN,
        "the drain was logged at {logged:?}, NOT_SERVING at {at:?}: not pushed by the Watch"
    );
    assert!(
        later <= 1,
        "app2 answered {later} calls after its drain was logged (one may be on the wire)"
    );
    Ok(())
}
