//! A slow shared dependency never concentrates the load: the four scenarios of probe failures
//! that real traffic contradicts, or confirms, on a real Envoy 1.40 with two workers, in both
//! routing modes.
//!
//! Probes wait in the same queue as pages. When a dependency behind `/up` slows down, probes time
//! out one backend after another, rounds apart, while pages are still served; taking each out as
//! its probe times out would pile the traffic onto whoever is left, and with real capacity that
//! is the cascade the app's owners feared. The host runs these scenarios on a virtual clock with
//! the default configuration (`host-tests/tests/in_host/shared_cause.rs`); here they run with the
//! operators' block shortened ten times ([`fast_checks`]: probes every 1 s, 500 ms timeout), so
//! every time of the host's timeline is divided by ten too: a break at t=20 s happens 2 s into
//! the users here, t=40 s is 4 s, t=45 s is 4.5 s, 90 s of traffic is 9 s. Each phase still holds
//! two probes of every backend or more, and two breaks 2 s apart are still more than one probe
//! round (interval + timeout, 1.5 s) apart, as 20 s is more than the host's 15 s; the file runs
//! in about a minute and a half. Scenario 4's breaks go in just after, or just as, the backend's
//! first probe from 2 s (and from 2 s after the first break) on, so that either its users or its
//! probe meet the break first, each order in a test of its own.
//!
//! Users arrive on connections of their own, so Envoy spreads them over both workers. Host
//! routing retries a read once elsewhere after a gateway error or a 500 ms per-try timeout.
//!
//! The Envoys of one test binary run one at a time (the builder holds a per-binary turn for the
//! life of each Envoy), and every change to a backend is made at a time measured from the start
//! of its test's users, so a test waiting for its turn does not shift its own timeline. Each test
//! prints what users saw: the summary, the failures next to what was done to the backends, and
//! how the requests were shared.

use std::time::Duration;

use crate::support::two_backends;
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, Instant};
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::{INTERVAL, RATE};
use upcheck_e2e::replay::{Replay, Report};
use upcheck_e2e::upstream::FakeUpstream;

/// Host routing as the shipped `config/envoy.yaml` sets it up, with the per-try timeout scaled
/// like the probe times.
const HOST: Routing = Routing::Host {
    per_try_timeout: Duration::from_millis(500),
};

/// `/up` answers 503, pages 200: the blip of scenario 3, switched on and off by hand.
const BLIP: Mode = Mode::Blip {
    from: Duration::ZERO,
    to: Duration::MAX,
};

/// `ms` milliseconds into the users.
fn at(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// The routing mode's name, for the printed figures.
fn name(routing: Routing) -> &'static str {
    match routing {
        Routing::Cluster => "cluster routing",
        Routing::Host { .. } => "host routing",
    }
}

/// Users on separate connections at `rate` a second for `duration`, started now; the instant they
/// started is the origin of the scenario's times.
fn users(envoy: &Envoy, rate: u32, duration: Duration) -> (Instant, JoinHandle<Report>) {
    let replay = Replay::new(envoy.url("/"), rate, duration).connection_per_request();
    let start = Instant::now();
    let run = tokio::spawn(async move { replay.run_from(start).await.expect("an HTTP client") });
    (start, run)
}

/// Envoy's log lines that say `needle`.
fn logged(envoy: &Envoy, needle: &str) -> Vec<String> {
    envoy
        .log()
        .lines()
        .filter(|line| line.contains(needle))
        .map(str::to_owned)
        .collect()
}

/// One run of scenario 1 or 2, kept for the assertions.
struct SlowDependency {
    envoy: Envoy,
    report: Report,
    /// The user requests app1 and app2 received from 4.5 s on.
    late: [u64; 2],
    /// The requests (probes included) app1 and app2 answered 503 for want of capacity.
    turned_away: [u64; 2],
}

impl SlowDependency {
    /// `app`'s share (0 for app1, 1 for app2) of the user requests received from 4.5 s on.
    fn late_share(&self, app: usize) -> f64 {
        let all: u64 = self.late.iter().sum();
        self.late.get(app).copied().unwrap_or(0) as f64 / all.max(1) as f64
    }
}

/// Scenario 1 (and 2 with `capacity`): 9 s of users at `rate` a second; `/up` stops answering on
/// app1 at 2 s and on app2 at 4 s (`stuckprobe`), every page still 200 at once. With `capacity`,
/// each backend serves that many requests a second, probes included, and answers the rest 503.
/// Prints what users saw and how the requests were shared.
async fn slow_dependency(
    routing: Routing,
    rate: u32,
    capacity: Option<u32>,
) -> anyhow::Result<SlowDependency> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    app1.set_capacity(capacity);
    app2.set_capacity(capacity);
    let envoy = Envoy::scenario(routing, &[&app1, &app2]).start().await?;
    let (start, traffic) = users(&envoy, rate, Duration::from_secs(9));

    sleep_until(start + at(2000)).await;
    app1.set_mode(Mode::StuckProbe);
    sleep_until(start + at(4000)).await;
    app2.set_mode(Mode::StuckProbe);
    sleep_until(start + at(4500)).await;
    let from = [app1.counts().requests, app2.counts().requests];
    let report = traffic.await?;
    let to = [app1.counts().requests, app2.counts().requests];
    let run = SlowDependency {
        envoy,
        report,
        late: [to[0] - from[0], to[1] - from[1]],
        turned_away: [app1.turned_away(), app2.turned_away()],
    };

    let limit = capacity.map_or_else(|| "no capacity limit".to_owned(), |n| format!("{n}/s each"));
    println!(
        "{}, /up stuck on app1 from 2 s and on app2 from 4 s, {rate} req/s, {limit}: {}\n{}",
        name(routing),
        run.report,
        run.report.timeline(&[
            ("app1's /up stops answering", at(2000)),
            ("app2's /up stops answering", at(4000)),
        ])
    );
    println!(
        "  user requests in all: app1 {}, app2 {}; from 4.5 s on: app1 {} ({:.0} %), app2 {} ({:.0} %); \
         turned away for capacity: app1 {}, app2 {}; probes: app1 {}, app2 {}",
        to[0],
        to[1],
        run.late[0],
        run.late_share(0) * 100.0,
        run.late[1],
        run.late_share(1) * 100.0,
        run.turned_away[0],
        run.turned_away[1],
        app1.counts().probes,
        app2.counts().probes,
    );
    Ok(run)
}

/// Scenario 1. Bound: no user fails, and from 4.5 s on each backend takes at least 35 % of the
/// requests. Each backend's timed-out probe is logged once as contradicted by its pages, and
/// neither is ever marked unhealthy.
async fn a_slow_dependency_behind_up_keeps_both_backends_in_rotation(
    routing: Routing,
) -> anyhow::Result<()> {
    let run = slow_dependency(routing, RATE, None).await?;
    assert_eq!(run.report.failures(), 0, "{}", run.report);
    for (app, name) in ["app1", "app2"].iter().enumerate() {
        let share = run.late_share(app);
        assert!(
            share >= 0.35,
            "{name} got {share:.2} of the users from 4.5 s on"
        );
    }
    let kept = logged(&run.envoy, "stays as it was");
    println!("  {kept:#?}");
    for name in ["app1", "app2"] {
        let needle = format!("upcheck: {name} stays as it was: its probe timed out");
        assert!(
            kept.iter().any(|line| line.contains(&needle)),
            "{name}'s contradicted probe is logged"
        );
    }
    let out = logged(&run.envoy, "unhealthy");
    assert!(out.is_empty(), "{out:#?}");
    Ok(())
}

#[tokio::test]
async fn a_slow_dependency_behind_up_keeps_both_backends_in_rotation_in_cluster_routing(
) -> anyhow::Result<()> {
    a_slow_dependency_behind_up_keeps_both_backends_in_rotation(Routing::Cluster).await
}

#[tokio::test]
async fn a_slow_dependency_behind_up_keeps_both_backends_in_rotation_in_host_routing(
) -> anyhow::Result<()> {
    a_slow_dependency_behind_up_keeps_both_backends_in_rotation(HOST).await
}

/// Scenario 2: scenario 1 at 50 requests a second, each backend serving at most 30 a second
/// (probes included) and answering the rest 503. Shared evenly, each gets about 26 a second with
/// its probe; all on one backend, about 20 a second are turned away (40 %). Bound: at most 2 % of
/// the users fail, and the backends turn away at most that many requests: in host routing a read
/// turned away is retried on the other backend and its user never knows, so only the backends'
/// count shows the load piling up.
async fn with_capacity_a_slow_dependency_fails_at_most_two_percent(
    routing: Routing,
) -> anyhow::Result<()> {
    let run = slow_dependency(routing, 50, Some(30)).await?;
    let (failed, total) = (run.report.failures(), run.report.requests());
    let turned_away: u64 = run.turned_away.iter().sum();
    println!("  {failed} of {total} users failed; the backends turned away {turned_away}");
    assert!(failed * 100 <= total * 2, "{}", run.report);
    assert!(
        turned_away * 100 <= total as u64 * 2,
        "{turned_away} turned away"
    );
    Ok(())
}

#[tokio::test]
async fn with_capacity_a_slow_dependency_fails_at_most_two_percent_in_cluster_routing(
) -> anyhow::Result<()> {
    with_capacity_a_slow_dependency_fails_at_most_two_percent(Routing::Cluster).await
}

#[tokio::test]
async fn with_capacity_a_slow_dependency_fails_at_most_two_percent_in_host_routing(
) -> anyhow::Result<()> {
    with_capacity_a_slow_dependency_fails_at_most_two_percent(HOST).await
}

/// Scenario 3: app2 hangs entirely from the start (it accepts connections and never answers),
/// and app1's `/up` answers 503 from 2 s to 4 s of 6 s of users, its pages still 200.
///
/// Bound: app2 gets no user request, and no user fails. app1 going down on its probe leaves no
/// backend in rotation; the pool guard keeps app1, the one that went down last, and app2, down
/// before the blip and for its own reason (its probe timed out with no page answered), stays out.
async fn a_blip_after_a_backend_hung_from_the_start_sends_it_nothing(
    routing: Routing,
) -> anyhow::Result<()> {
    let (app1, app2, envoy) = two_backends(routing, Mode::Ok, Mode::Hang).await?;
    let (start, traffic) = users(&envoy, RATE, Duration::from_secs(6));

    sleep_until(start + at(2000)).await;
    app1.set_mode(BLIP);
    sleep_until(start + at(4000)).await;
    app1.set_mode(Mode::Ok);
    let report = traffic.await?;
    let guard = logged(&envoy, "upcheck: pool guard engaged");
    println!(
        "{}, app2 hung from the start, app1's /up 503 from 2 s to 4 s: {report}\n{}",
        name(routing),
        report.timeline(&[
            ("app1's /up answers 503", at(2000)),
            ("app1's /up answers 200 again", at(4000)),
        ])
    );
    println!(
        "  user requests: app1 {}, app2 {}; app1 probes {}, app2 probes {}; guard: {guard:#?}",
        app1.counts().requests,
        app2.counts().requests,
        app1.counts().probes,
        app2.counts().probes,
    );

    assert_eq!(app2.counts().requests, 0, "{report}");
    assert_eq!(report.failures(), 0, "{report}");
    // The blip did take app1 out on its probe: the guard kept it.
    assert!(envoy.stat("wasmcustom.upcheck.app1.probe_failures").await? >= 1);
    assert!(!guard.is_empty(), "the pool guard engaged");
    Ok(())
}

#[tokio::test]
async fn a_blip_after_a_backend_hung_from_the_start_sends_it_nothing_in_cluster_routing(
) -> anyhow::Result<()> {
    a_blip_after_a_backend_hung_from_the_start_sends_it_nothing(Routing::Cluster).await
}

#[tokio::test]
async fn a_blip_after_a_backend_hung_from_the_start_sends_it_nothing_in_host_routing(
) -> anyhow::Result<()> {
    a_blip_after_a_backend_hung_from_the_start_sends_it_nothing(HOST).await
}

/// The users a backend answering 502 to every path may still get once it broke: the third failure
/// ejects it process-wide, and the other worker may have picked it for one more request before
/// it took that in (see `failover.rs`).
const PASSIVE_COST: u64 = 4;

/// What a backend back with peers that fail alike costs before its first failed page takes it
/// out again: a page per worker (two workers).
const EVIDENCE_COST: u64 = 2;

/// What upcheck routed to app1 so far, and how many reads Envoy retried.
struct Routed {
    /// User requests upcheck sent to app1 (its picks, not Envoy's retries).
    app1: u64,
    /// Reads the pool retried (host routing).
    retries: u64,
}

impl Routed {
    async fn now(envoy: &Envoy) -> anyhow::Result<Routed> {
        let retries = "cluster.pool.upstream_rq_retry";
        Ok(Routed {
            app1: envoy.stat("wasmcustom.upcheck.app1.requests").await?,
            // Cluster routing has no pool, and retries nothing.
            retries: envoy
                .stats(retries)
                .await?
                .get(retries)
                .copied()
                .unwrap_or(0),
        })
    }
}

/// Which of a backend's requests meets its break first in scenario 4. Probe slots fall on whole
/// seconds of the users' timeline (the first probe goes out as Envoy starts), so a break at 2 s
/// sharp is a coin toss between the two; each order is run on purpose instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Onset {
    /// Its users: it breaks just after a probe was answered, a whole interval before the next.
    AfterProbe,
    /// Its probe: it breaks as a probe arrives, and its users meet the break right after.
    AtProbe,
}

/// Makes `app` answer 502 on every path from its next probe on, just after or just before that
/// probe (`onset`); returns the user requests it had received before.
async fn break_502(app: &FakeUpstream, onset: Onset) -> anyhow::Result<u64> {
    let mode = Mode::Status(502);
    match onset {
        Onset::AfterProbe => app.switch_after_probe(mode, 2 * INTERVAL).await,
        Onset::AtProbe => app.switch_at_probe(mode, 2 * INTERVAL).await,
    }
}

/// Scenario 4: from about 2 s into 9 s of users (its first probe from then on: `onset`) app1
/// answers 502 on every path, and from about 2 s later app2 does too. The two breaks are more
/// than one probe round (1.5 s) apart, as 20 s and 40 s are in the host's timeline (15 s rounds):
/// backends going down on their probes within one round of each other are the guard's "down
/// together" case, which keeps them all (none serves either way).
///
/// Bound: app1 gets at most [`PASSIVE_COST`] users once broken (in cluster routing each of them
/// fails; in host routing each is retried on app2). Before app2 breaks no user fails beyond
/// app1's; from then on users fail, there being no backend left that serves. Once app2 is broken
/// too, upcheck routes no user to app1: the guard keeps app2, which broke last, and never brings
/// app1 back, whose pages failed. In cluster routing app1 then gets no request at all. In host
/// routing Envoy retries each read app2 failed once, and with one backend in rotation upcheck
/// names no second address, so the pool's fallback (round robin, never the host that failed)
/// sends the retry to app1: every request app1 gets then is such a retry, and its user would have
/// seen app2's 502 otherwise.
async fn a_real_failure_that_spreads_keeps_the_first_broken_backend_out(
    routing: Routing,
    onset: Onset,
) -> anyhow::Result<()> {
    let (app1, app2, envoy) = two_backends(routing, Mode::Ok, Mode::Ok).await?;
    let (start, traffic) = users(&envoy, RATE, Duration::from_secs(9));

    sleep_until(start + at(2000)).await;
    let before = break_502(&app1, onset).await?;
    let app1_broke = start.elapsed();
    sleep_until(start + app1_broke + at(2000)).await;
    // Read before the switch: nothing is retried until app2 fails.
    let spread = Routed::now(&envoy).await?;
    let at_spread = app1.counts().requests;
    let app2_at_spread = app2.counts().requests;
    break_502(&app2, onset).await?;
    let app2_broke = start.elapsed();
    let report = traffic.await?;
    let (app1_end, app2_end) = (app1.counts().requests, app2.counts().requests);
    // Each worker adds the requests it routed to upcheck's counters on its tick (200 ms).
    sleep(Duration::from_millis(300)).await;
    let end = Routed::now(&envoy).await?;
    let retried = end.retries - spread.retries;
    let hits = at_spread - before;
    // A user sent just before app2 broke may still meet the break there; app1 was out long before.
    let failed_before_spread = report
        .sent_within(Duration::ZERO..app2_broke - Duration::from_millis(100))
        .failures();
    let when = match onset {
        Onset::AfterProbe => "users first",
        Onset::AtProbe => "its probe first",
    };
    println!(
        "{}, app1 answers 502 from about 2 s, app2 2 s later, each met by {when}: {report}\n{}",
        name(routing),
        report.timeline(&[
            ("app1 answers 502 on every path", app1_broke),
            ("app2 answers 502 on every path", app2_broke),
        ])
    );
    println!(
        "  app1 got {hits} users once broken and {} requests once app2 broke too (upcheck routed {} \
         to it, Envoy retried {retried} reads); app2 got {} once broken; users failed before app2 \
         broke: {failed_before_spread}, from then on: {}",
        app1_end - at_spread,
        end.app1 - spread.app1,
        app2_end - app2_at_spread,
        report.failures_sent_from(app2_broke),
    );
    let health = logged(&envoy, "upcheck: app");
    println!("  {health:#?}");

    assert!(hits <= PASSIVE_COST, "app1 got {hits} users once broken");
    match routing {
        Routing::Cluster => assert_eq!(failed_before_spread as u64, hits, "{report}"),
        Routing::Host { .. } => assert_eq!(failed_before_spread, 0, "{report}"),
    }
    // When the probe met app1's break first, nothing yet said its pages failed: once app2 goes
    // down the same way, app1 is back as a shared cause would have it, and its first failed
    // page (one per worker at most) takes it out again. When users met it first, it stays out.
    let evidence = match onset {
        Onset::AfterProbe => 0,
        Onset::AtProbe => EVIDENCE_COST,
    };
    let routed_to_app1 = end.app1 - spread.app1;
    assert!(
        routed_to_app1 <= evidence,
        "upcheck routed {routed_to_app1} users to app1 once app2 broke too"
    );
    match routing {
        Routing::Cluster => assert!(
            app1_end - at_spread <= evidence,
            "app1 got {} requests once app2 broke",
            app1_end - at_spread
        ),
        Routing::Host { .. } => assert!(
            app1_end - at_spread <= retried + evidence,
            "app1 got {} requests once app2 broke, {retried} of them retries",
            app1_end - at_spread
        ),
    }
    if onset == Onset::AfterProbe {
        let back = logged(&envoy, "back in rotation");
        assert!(back.is_empty(), "{back:#?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_real_failure_that_spreads_keeps_the_first_broken_backend_out_in_cluster_routing(
) -> anyhow::Result<()> {
    a_real_failure_that_spreads_keeps_the_first_broken_backend_out(
        Routing::Cluster,
        Onset::AfterProbe,
    )
    .await
}

#[tokio::test]
async fn a_real_failure_that_spreads_keeps_the_first_broken_backend_out_in_host_routing(
) -> anyhow::Result<()> {
    a_real_failure_that_spreads_keeps_the_first_broken_backend_out(HOST, Onset::AfterProbe).await
}

/// Scenario 4 with each break met first by its probe: each backend goes down on a probe answered
/// 502 while the pages it had answered so far had not failed. That is no evidence of a shared
/// cause: its pages fail from the same instant. What decides is the policy's, the same in both
/// routing modes, so one mode runs it.
#[tokio::test]
async fn a_real_failure_its_probes_meet_first_keeps_the_first_broken_backend_out(
) -> anyhow::Result<()> {
    a_real_failure_that_spreads_keeps_the_first_broken_backend_out(Routing::Cluster, Onset::AtProbe)
        .await
}
