//! Invisible failover (`routing: host`, `config/envoy.yaml`): a request whose backend fails it in
//! a way that is safe to repeat is retried once on the other backend, so users see nothing of a
//! backend that breaks mid-traffic, while upcheck still counts the failed attempts and ejects the
//! backend after three, as without retries.
//!
//! Reads (GET, HEAD) are retried after a gateway error, a reset or `per_try_timeout`; every other
//! method only when it never reached a backend (connection refused). Users arrive on separate
//! connections, so Envoy spreads them over both workers and failures are counted process-wide.

use std::time::Duration;

use crate::support::two_backends;
use reqwest::Method;
use tokio::time::sleep;
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::{INTERVAL, RATE};
use upcheck_e2e::replay::{Outcome, Replay, Report};
use upcheck_e2e::upstream::FakeUpstream;

/// How long one attempt of a read may take before Envoy retries it elsewhere.
const PER_TRY_TIMEOUT: Duration = Duration::from_millis(500);

/// The routing these scenarios run in.
const HOST: Routing = Routing::Host {
    per_try_timeout: PER_TRY_TIMEOUT,
};

/// What a retried request may cost beyond `PER_TRY_TIMEOUT`: Envoy's retry back-off (at most
/// 25 ms for the first retry), the answer from the other backend, a busy two-core machine.
const MARGIN: Duration = Duration::from_millis(300);

/// One run of app2 breaking under traffic, kept for the assertions.
struct Break {
    envoy: Envoy,
    /// One report per method, in the order asked for.
    reports: Vec<Report>,
    /// User requests app2 received after it broke.
    hits: u64,
}

/// 8 s of users over app1 and app2, `RATE` requests per second shared by `methods`; about 3 s in,
/// 50 ms after one of its probes, app2 switches to `mode`. The users meet the breakage a whole
/// interval before the next probe does, so the passive checks, not a lucky probe, take app2 out.
async fn app2_breaks(routing: Routing, mode: Mode, methods: &[Method]) -> anyhow::Result<Break> {
    let (_app1, app2, envoy) = two_backends(routing, Mode::Ok, Mode::Ok).await?;
    let rate = RATE / methods.len() as u32;
    let traffic: Vec<_> = methods
        .iter()
        .map(|method| {
            let replay = Replay::new(envoy.url("/"), rate, Duration::from_secs(8))
                .method(method.clone())
                .connection_per_request();
            tokio::spawn(async move { replay.run().await })
        })
        .collect();
    sleep(Duration::from_secs(3)).await;
    let before = app2.switch_after_probe(mode, 2 * INTERVAL).await?;
    let mut reports = Vec::new();
    for run in traffic {
        reports.push(run.await??);
    }
    Ok(Break {
        envoy,
        reports,
        hits: app2.counts().requests - before,
    })
}

/// The one report of a single-method run, printed with `label`.
fn only(label: &str, run: &Break) -> Report {
    let report = run.reports[0].clone();
    println!("{label}: {report}; app2 got {} after it broke", run.hits);
    report
}

#[tokio::test]
async fn a_backend_answering_502_mid_traffic_costs_no_get_and_is_ejected_after_three(
) -> anyhow::Result<()> {
    let run = app2_breaks(HOST, Mode::Status(502), &[Method::GET]).await?;
    let report = only("host routing, app2 answers 502 mid-traffic", &run);
    let retried = run.envoy.stat("cluster.pool.upstream_rq_retry").await?;
    println!("  retries: {retried}");

    assert_eq!(report.failures(), 0, "{report}");
    // The third failure ejects it; the other worker may have picked app2 for one more request
    // before it learnt that (users arrive on connections of their own, on both workers).
    assert!(
        run.hits <= 4,
        "app2 got {} requests after it broke",
        run.hits
    );
    assert!(run.hits >= 1, "the break happened under traffic");
    assert_eq!(retried, run.hits);
    assert!(
        run.envoy
            .stat("wasmcustom.upcheck.app2.request_failures")
            .await?
            >= 3
    );
    assert!(run.envoy.stat("wasmcustom.upcheck.app2.ejections").await? >= 1);
    Ok(())
}

#[tokio::test]
async fn a_backend_hanging_mid_traffic_costs_no_get_and_each_hit_at_most_one_per_try_timeout(
) -> anyhow::Result<()> {
    let run = app2_breaks(HOST, Mode::Hang, &[Method::GET]).await?;
    let report = only("host routing, app2 hangs mid-traffic", &run);
    let slow = |at_least: Duration| {
        report
            .samples
            .iter()
            .filter(|s| s.latency >= at_least)
            .count() as u64
    };
    let (delayed, late) = (slow(PER_TRY_TIMEOUT), slow(PER_TRY_TIMEOUT + MARGIN));
    println!(
        "  slower than {PER_TRY_TIMEOUT:?}: {delayed}, slower than {:?}: {late}",
        PER_TRY_TIMEOUT + MARGIN
    );

    assert_eq!(report.failures(), 0, "{report}");
    assert!(run.hits >= 1, "the break happened under traffic");
    // Only a request that met the hang waited for its per-try timeout, and none waited longer.
    assert!(
        delayed <= run.hits,
        "{delayed} delayed, {} hit app2",
        run.hits
    );
    assert_eq!(late, 0, "{report}");
    assert!(run.envoy.stat("wasmcustom.upcheck.app2.ejections").await? >= 1);
    Ok(())
}

#[tokio::test]
async fn a_backend_crashing_mid_traffic_costs_no_get_and_of_other_methods_only_those_its_crash_cut(
) -> anyhow::Result<()> {
    let run = app2_breaks(HOST, Mode::Refuse, &[Method::GET, Method::POST]).await?;
    let stats = run
        .envoy
        .stats(
            "^cluster\\.pool\\.(upstream_rq_retry|upstream_cx_connect_fail|upstream_cx_destroy_remote_with_active_rq)$|^wasmcustom\\.upcheck\\.app2\\.request_failures$",
        )
        .await?;
    let stat = |name: &str| stats.get(name).copied().unwrap_or_default();
    // `refuse` is a crash: app2 also closes the connections it has open. A request on one of them
    // as it went may have reached the app (one written onto a connection whose close Envoy had
    // not yet read cannot be told apart), so a POST among them is not repeated: Envoy counts
    // them in `upstream_cx_destroy_remote_with_active_rq`. Every request after that meets a
    // refused connection, and those are retried whatever their method.
    let cut = stat("cluster.pool.upstream_cx_destroy_remote_with_active_rq");
    for (method, report) in [Method::GET, Method::POST].iter().zip(&run.reports) {
        println!("host routing, app2 refuses mid-traffic, {method}: {report}");
    }
    println!("  {stats:?}");
    let [gets, posts] = [&run.reports[0], &run.reports[1]];
    assert_eq!(gets.failures(), 0, "GET: {gets}");
    assert!(
        posts.failures() as u64 <= cut,
        "POST: {posts}; only a POST on a connection app2 closed under it may fail ({cut})"
    );
    let refused = stat("cluster.pool.upstream_cx_connect_fail");
    assert!(refused >= 1, "users met the refusal: {stats:?}");
    assert!(
        stat("cluster.pool.upstream_rq_retry") >= refused,
        "every refused request was retried: {stats:?}"
    );
    assert!(
        stat("wasmcustom.upcheck.app2.request_failures") >= 1,
        "the refusals were counted"
    );
    Ok(())
}

#[tokio::test]
async fn a_post_answered_502_is_not_retried_and_fails_no_user_sent_after_the_third_came_back(
) -> anyhow::Result<()> {
    let run = app2_breaks(HOST, Mode::Status(502), &[Method::POST]).await?;
    let report = only("host routing, app2 answers 502 mid-traffic, POST", &run);
    let retried = run.envoy.stat("cluster.pool.upstream_rq_retry").await?;

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
    // Every POST that reached app2 after it broke was answered by app2, and only those failed.
    assert_eq!(retried, 0);
    assert_eq!(report.failures() as u64, run.hits);
    Ok(())
}

#[tokio::test]
async fn two_hundred_concurrent_gets_during_a_break_all_succeed() -> anyhow::Result<()> {
    // app1 takes 100 ms per answer, so every retry sent to it is in flight at once: far more
    // than Envoy's default retry circuit breaker (3) lets through. It must stay well within the
    // per-try timeout even when 200 arrive at once on a busy machine: an attempt at app1 that
    // timed out would be retried at the second address, chosen before app2 broke.
    let (_app1, app2, envoy) =
        two_backends(HOST, Mode::Slow(Duration::from_millis(100)), Mode::Ok).await?;
    let warm_up = Replay::new(envoy.url("/"), RATE, Duration::from_secs(1))
        .run()
        .await?;
    assert_eq!(warm_up.failures(), 0, "{warm_up}");

    app2.set_mode(Mode::Status(502));
    // 200 requests within 20 ms, each on its own connection, all picked before any answer.
    let burst = Replay::new(envoy.url("/"), 10_000, Duration::from_millis(20))
        .connection_per_request()
        .timeout(Duration::from_secs(5))
        .run()
        .await?;
    let stats = envoy.stats("^cluster\\.pool\\.upstream_rq_retry").await?;
    println!("host routing, 200 concurrent GETs as app2 breaks: {burst}; {stats:?}");

    assert_eq!(burst.requests(), 200);
    assert_eq!(burst.failures(), 0, "{burst}");
    assert_eq!(
        stats.get("cluster.pool.upstream_rq_retry_overflow"),
        Some(&0)
    );
    assert!(stats
        .get("cluster.pool.upstream_rq_retry")
        .is_some_and(|n| *n > 3));
    Ok(())
}

#[tokio::test]
async fn side_by_side_a_break_mid_traffic_costs_users_in_cluster_routing_and_nothing_in_host_routing(
) -> anyhow::Result<()> {
    let modes = [("cluster", Routing::Cluster), ("host", HOST)];
    let breaks = [("502", Mode::Status(502)), ("hang", Mode::Hang)];
    let mut lines = Vec::new();
    for (breakage, mode) in &breaks {
        for (routing_name, routing) in modes {
            let run = app2_breaks(routing, mode.clone(), &[Method::GET]).await?;
            let report = run.reports[0].clone();
            lines.push(format!(
                "app2 {breakage:>4} mid-traffic, {routing_name:>7} routing: {report}"
            ));
            match routing {
                Routing::Cluster => assert!(report.failures() >= 1, "{report}"),
                Routing::Host { .. } => assert_eq!(report.failures(), 0, "{report}"),
            }
        }
    }
    println!("{}", lines.join("\n"));
    Ok(())
}

#[tokio::test]
async fn from_the_first_request_on_users_go_where_upcheck_sends_them() -> anyhow::Result<()> {
    // app2 answers 502 from the start, so upcheck never picks it. A request the pool routed by
    // itself (round robin) would still reach it, and be retried on app1 unseen by the user: only
    // app2's count shows it.
    let (_app1, app2, envoy) = two_backends(HOST, Mode::Ok, Mode::Status(502)).await?;
    let report = Replay::new(envoy.url("/"), RATE, Duration::from_secs(1))
        .connection_per_request()
        .run()
        .await?;
    println!(
        "host routing, app2 broken from the start: {report}; app2 {:?}",
        app2.counts()
    );

    assert_eq!(report.failures(), 0, "{report}");
    assert_eq!(app2.counts().requests, 0);
    assert_eq!(envoy.stat("cluster.pool.upstream_rq_retry").await?, 0);
    Ok(())
}

#[tokio::test]
async fn a_retry_goes_to_the_backend_upcheck_names_never_to_one_it_took_out() -> anyhow::Result<()>
{
    // app3 is in Envoy's pool but out of upcheck's rotation (its probes fail). When app2 breaks,
    // Envoy's own choice for a retry would be app1 or app3 (round robin, skipping app2); upcheck
    // names the retry's backend after the pick, so it is app1.
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let app3 = FakeUpstream::start("app3", Mode::Status(502)).await?;
    let envoy = Envoy::scenario(HOST, &[&app1, &app2, &app3])
        .start()
        .await?;
    let replay = Replay::new(envoy.url("/"), RATE, Duration::from_secs(6)).connection_per_request();
    let traffic = tokio::spawn(async move { replay.run().await });
    sleep(Duration::from_secs(2)).await;
    app2.switch_after_probe(Mode::Status(502), 2 * INTERVAL)
        .await?;
    let report = traffic.await??;
    println!("host routing, 3 backends, app3 out, app2 answers 502 mid-traffic: {report}");
    assert_eq!(report.failures(), 0, "{report}");
    assert_eq!(app3.counts().requests, 0, "a retry went to app3");
    assert!(envoy.stat("cluster.pool.upstream_rq_retry").await? >= 1);
    Ok(())
}
