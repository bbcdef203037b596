//! Faults beyond the incident, each under users: a backend crashing and coming back, every
//! backend restarting, a backend whose bytes barely move, one that answers garbage, the upstream
//! list changing under load, and the VM that probes for the process failing.
//!
//! Every scenario runs the operators' block with short times ([`fast_checks`]: probes every 1 s
//! with a 500 ms timeout, 3 failures within 2 s eject) in cluster routing, which retries nothing,
//! so every failure the policy lets through reaches a user. 40 requests a second arrive on
//! separate connections, spread over Envoy's two workers (one, with probes every 2 s, where the
//! prober's VM fails: see its test). Each prints what users saw (statuses
//! counted, every failure and when it was sent, next to what was done to the backends) and
//! asserts the bound its doc states: a user failure the policy could have avoided is a defect.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use tokio::time::{sleep, sleep_until, Instant};
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::{fast_checks, INTERVAL, RATE};
use upcheck_e2e::replay::{Outcome, Replay, Report};
use upcheck_e2e::upstream::FakeUpstream;
use upcheck_e2e::upstream_process::UpstreamProcess;

/// The `fake-upstream` binary, for backends that are killed.
fn fake_upstream() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_fake-upstream"))
}

/// Remembered failures that eject a backend, in [`fast_checks`].
const MAX_FAILS: usize = 3;

/// One of upcheck's stats for `backend`, e.g. `upcheck_stat(&envoy, "app2", "healthy")`.
async fn upcheck_stat(envoy: &Envoy, backend: &str, what: &str) -> anyhow::Result<u64> {
    envoy
        .stat(&format!("wasmcustom.upcheck.{backend}.{what}"))
        .await
}

/// Waits until upcheck's stat `what` for `backend` exceeds `above`; an error after `within`.
async fn until_stat_above(
    envoy: &Envoy,
    backend: &str,
    what: &str,
    above: u64,
    within: Duration,
) -> anyhow::Result<u64> {
    let deadline = Instant::now() + within;
    loop {
        let value = upcheck_stat(envoy, backend, what).await?;
        if value > above {
            return Ok(value);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{backend}.{what} stayed at {value} for {within:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// Users on separate connections at [`RATE`] for `duration`, started now; the instant they
/// started is the origin of the report's times and of the scenario's events.
fn users(envoy: &Envoy, duration: Duration) -> (Instant, tokio::task::JoinHandle<Report>) {
    let replay = Replay::new(envoy.url("/"), RATE, duration).connection_per_request();
    let start = Instant::now();
    let run = tokio::spawn(async move { replay.run_from(start).await.expect("an HTTP client") });
    (start, run)
}

/// Prints what users saw under `label`: the summary, then the events and failures in time order.
fn print_users(label: &str, report: &Report, events: &[(&str, Duration)]) {
    println!("{label}: {report}\n{}", report.timeline(events));
}

/// app2, its own process, is SIGKILLed 2 s into 12 s of users and started again on its port as
/// soon as upcheck's probe has found it down; upcheck needs `passes: 2` probes to trust it again.
///
/// Bound: no user sent after the third failure came back fails, and none after the restart. The
/// first request that meets the dead app2 shows nothing serving (refused), which takes app2 out
/// at once in that worker; a request on a connection the crash cut counts as a failure too, and
/// three eject it everywhere (requests already on their way then may fail as well, as many as a
/// loaded machine had in flight: usually none). After the restart no user fails, app2 sees no user before its second passing
/// probe, and then takes its share again.
#[tokio::test]
async fn a_backend_killed_mid_traffic_fails_no_user_sent_after_its_third_failure_and_returns_after_two_passing_probes(
) -> anyhow::Result<()> {
    let passes = 2;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let mut app2 = UpstreamProcess::spawn(fake_upstream(), "app2", 0, Mode::Ok)?;
    let mut plugin = fast_checks(&["app1", "app2"]);
    plugin["health_checks"]["active"]["passes"] = json!(passes);
    let envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&app1)
        .backend(app2.name(), app2.addr())
        .wasm_filter(plugin)
        .start()
        .await?;
    let duration = Duration::from_secs(12);
    let (start, traffic) = users(&envoy, duration);

    sleep_until(start + Duration::from_secs(2)).await;
    let served_before = app2.counts().await?.requests;
    let probe_failures = upcheck_stat(&envoy, "app2", "probe_failures").await?;
    app2.kill()?;
    let killed = start.elapsed();
    until_stat_above(
        &envoy,
        "app2",
        "probe_failures",
        probe_failures,
        3 * INTERVAL,
    )
    .await?;
    let found_down = start.elapsed();
    // Every worker takes in what the prober found within one tick (200 ms); restarting before
    // that would let a worker that has not looked yet send a user to the new app2.
    sleep(Duration::from_millis(300)).await;
    let app2 = UpstreamProcess::spawn(fake_upstream(), "app2", app2.addr().port(), Mode::Ok)?;
    let restarted = start.elapsed();
    // The first user request the new app2 gets, and how many probes it had passed by then.
    let mut first_user = None;
    while first_user.is_none() && start.elapsed() < duration {
        let counts = app2.counts().await?;
        if counts.requests > 0 {
            first_user = Some((start.elapsed(), counts.probes));
        }
        sleep(Duration::from_millis(20)).await;
    }
    let report = traffic.await?;
    let after_restart = app2.counts().await?;
    let (first_user_at, probes_before_user) = first_user.unwrap_or((duration, 0));
    print_users(
        "app2 SIGKILLed mid-traffic, then restarted",
        &report,
        &[
            ("app2 killed (SIGKILL)", killed),
            ("upcheck's probe found app2 down", found_down),
            ("app2 listening again", restarted),
            ("app2's first user request since the restart", first_user_at),
        ],
    );
    println!(
        "  app2 served {served_before} users before the kill; since the restart: {after_restart:?}, \
         {probes_before_user} probes before its first user"
    );

    assert!(served_before > 0, "the kill happened under traffic");
    assert_eq!(report.failures_after_nth_answered(MAX_FAILS), 0, "{report}");
    assert_eq!(report.failures_sent_from(restarted), 0, "{report}");
    assert!(
        probes_before_user >= passes,
        "app2 had a user after {probes_before_user} probes"
    );
    // Its share of at least the last 2 s: traffic returned to it.
    assert!(
        after_restart.requests >= 2 * u64::from(RATE) / 2,
        "{after_restart:?}"
    );
    assert_eq!(upcheck_stat(&envoy, "app2", "healthy").await?, 1);
    Ok(())
}

/// Both backends, each its own process, are SIGKILLed together 3 s into 8 s of users and
/// started again on their ports 300 ms later, as a careless deploy would.
///
/// Bound: only users whose requests were unanswered when the kills began and were sent before both
/// listened again fail (no backend could serve them, or the crash cut them on their way). Once
/// both listen again no user fails: the pool guard never leaves the set empty (nothing serving:
/// try all; both down together: keep both), and the ejection cap leaves at least one backend in
/// rotation. Both are back in rotation afterwards: each takes users in the last 2 s, both healthy,
/// the guard released.
#[tokio::test]
async fn both_backends_restarted_at_once_cost_only_the_users_sent_while_nothing_listened_and_both_return(
) -> anyhow::Result<()> {
    let mut app1 = UpstreamProcess::spawn(fake_upstream(), "app1", 0, Mode::Ok)?;
    let mut app2 = UpstreamProcess::spawn(fake_upstream(), "app2", 0, Mode::Ok)?;
    let envoy = Envoy::builder()
        .concurrency(2)
        .backend(app1.name(), app1.addr())
        .backend(app2.name(), app2.addr())
        .wasm_filter(fast_checks(&["app1", "app2"]))
        .start()
        .await?;
    let duration = Duration::from_secs(8);
    let (start, traffic) = users(&envoy, duration);

    sleep_until(start + Duration::from_secs(3)).await;
    let killed = start.elapsed();
    app1.kill()?;
    app2.kill()?;
    sleep(Duration::from_millis(300)).await;
    let app1 = UpstreamProcess::spawn(fake_upstream(), "app1", app1.addr().port(), Mode::Ok)?;
    let app2 = UpstreamProcess::spawn(fake_upstream(), "app2", app2.addr().port(), Mode::Ok)?;
    let restarted = start.elapsed();
    sleep_until(start + duration - Duration::from_secs(2)).await;
    let late = (app1.counts().await?, app2.counts().await?);
    let report = traffic.await?;
    let end = (app1.counts().await?, app2.counts().await?);
    let sent_while_down = report.sent_within(killed..restarted).requests();
    // Every request not yet answered when the kills began and sent before both listened again:
    // it met a closed port, or the crash cut it on its way.
    let exposed = report
        .samples
        .iter()
        .filter(|s| s.sent < restarted && s.sent + s.latency >= killed)
        .count();
    print_users(
        "app1 and app2 SIGKILLed together, restarted 300 ms later",
        &report,
        &[
            ("app1 and app2 killed (SIGKILL)", killed),
            ("app1 and app2 listening again", restarted),
        ],
    );
    let stats = envoy
        .stats("upcheck\\.(pool_guard|app[12]\\.(healthy|ejections))")
        .await?;
    println!(
        "  {sent_while_down} users sent while nothing listened, {exposed} unanswered from the kills to the restart; in the last 2 s app1 got {}, app2 {}; {stats:?}",
        end.0.requests - late.0.requests,
        end.1.requests - late.1.requests
    );

    assert!(sent_while_down > 0, "the restart happened under traffic");
    assert_eq!(report.failures_sent_from(restarted), 0, "{report}");
    assert!(report.failures() <= exposed, "{report}");
    assert!(end.0.requests > late.0.requests, "app1 is back in rotation");
    assert!(end.1.requests > late.1.requests, "app2 is back in rotation");
    assert_eq!(upcheck_stat(&envoy, "app1", "healthy").await?, 1);
    assert_eq!(upcheck_stat(&envoy, "app2", "healthy").await?, 1);
    assert_eq!(envoy.stat("wasmcustom.upcheck.pool_guard").await?, 0);
    Ok(())
}

/// One run of app2 turning bad under users, kept for the assertions.
struct Turn {
    envoy: Envoy,
    report: Report,
    /// User requests app2 received after it turned.
    hits: u64,
}

/// 8 s of users over app1 and app2 with upcheck configured by `plugin`; about 3 s in, just
/// after one of its probes, app2 switches to `mode`, so users meet the change a whole interval
/// before the next probe does. Prints what users saw under `label`.
async fn app2_turns(label: &str, plugin: Value, mode: Mode) -> anyhow::Result<Turn> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&app1)
        .upstream(&app2)
        .wasm_filter(plugin)
        .start()
        .await?;
    let (start, traffic) = users(&envoy, Duration::from_secs(8));
    sleep_until(start + Duration::from_secs(3)).await;
    let before = app2.switch_after_probe(mode.clone(), 2 * INTERVAL).await?;
    let turned = start.elapsed();
    let report = traffic.await?;
    let hits = app2.counts().requests - before;
    let event = format!("app2 turns {mode} (just after a probe)");
    print_users(label, &report, &[(&event, turned)]);
    println!("  app2 got {hits} users after it turned");
    Ok(Turn {
        envoy,
        report,
        hits,
    })
}

/// Whether every failed request of `report` ended as `failed` says.
fn every_failure(report: &Report, failed: impl Fn(&Outcome) -> bool) -> bool {
    report
        .samples
        .iter()
        .filter(|s| s.outcome.is_failure())
        .all(|s| failed(&s.outcome))
}

/// A slowloris upstream: about 3 s into 8 s of users, app2 starts sending every response one
/// byte a second (`trickle:1s`), status line included, on its open connections too.
///
/// What users see: every request app2 gets from then on times out (the users wait 2 s; the
/// status line never completes). A user giving up is not the backend's failure, and the operators'
/// block sets no `unhealthy_latency`, so requests cannot tell; the probe can: it times out after
/// 500 ms and takes app2 out. Bound: app2's half of 40 requests a second over one probe round as
/// the prober runs it: the interval with its 10 % jitter, one 200 ms tick before the due probe
/// goes out, the probe timeout, one tick for the workers to hear: (1.1 + 0.2 + 0.5 + 0.2) s × 20
/// = 40 users.
#[tokio::test]
async fn a_backend_trickling_its_responses_costs_users_at_most_one_probe_round_of_its_share(
) -> anyhow::Result<()> {
    let Turn {
        envoy,
        report,
        hits,
    } = app2_turns(
        "app2 sends its responses one byte a second",
        fast_checks(&["app1", "app2"]),
        Mode::Trickle(Duration::from_secs(1)),
    )
    .await?;

    assert!(hits >= 1, "it started under traffic");
    assert!(report.failures() <= 40, "{report}");
    assert!(
        every_failure(&report, |o| *o == Outcome::Timeout),
        "{report}"
    );
    // Only the users app2 kept failed (one more if a request was on its way as it turned).
    assert!(report.failures() as u64 <= hits + 1, "{report}");
    assert!(upcheck_stat(&envoy, "app2", "probe_failures").await? >= 1);
    assert_eq!(upcheck_stat(&envoy, "app2", "healthy").await?, 0);
    Ok(())
}

/// The slowloris upstream again, with `unhealthy_latency: 500ms`: a request still unanswered
/// after 500 ms counts against its backend the moment it is that late.
///
/// Bound: the three requests that eject app2 are late 500 ms after they were sent, and app2 gets
/// one every 50 ms; add one 200 ms tick for the other worker to hear: (0.5 + 0.15 + 0.2) s × 20
/// = 17 users, against up to 40 without the setting.
#[tokio::test]
async fn a_backend_trickling_its_responses_is_ejected_by_unhealthy_latency_long_before_its_probe(
) -> anyhow::Result<()> {
    let mut plugin = fast_checks(&["app1", "app2"]);
    plugin["health_checks"]["passive"]["unhealthy_latency"] = json!("500ms");
    let Turn {
        envoy,
        report,
        hits,
    } = app2_turns(
        "app2 sends its responses one byte a second, unhealthy_latency 500ms",
        plugin,
        Mode::Trickle(Duration::from_secs(1)),
    )
    .await?;

    assert!(hits >= MAX_FAILS as u64, "it started under traffic");
    assert!(report.failures() <= 17, "{report}");
    assert!(
        every_failure(&report, |o| *o == Outcome::Timeout),
        "{report}"
    );
    assert!(upcheck_stat(&envoy, "app2", "ejections").await? >= 1);
    Ok(())
}

/// About 3 s into 8 s of users, app2 starts answering every request with bytes that are not
/// HTTP (no status line), on its open connections too.
///
/// Bound: as for a 502, no user sent after the third failure came back fails: Envoy answers them
/// 502 for the protocol error, upcheck counts each as app2's failure, and the third ejects it.
#[tokio::test]
async fn a_backend_answering_garbage_is_counted_failing_and_ejected_after_three_users(
) -> anyhow::Result<()> {
    let Turn {
        envoy,
        report,
        hits,
    } = app2_turns(
        "app2 answers garbage instead of HTTP",
        fast_checks(&["app1", "app2"]),
        Mode::Garbage,
    )
    .await?;
    let stats = envoy
        .stats("^cluster\\.app2\\.upstream_(cx_protocol_error|rq_5xx)$|upcheck\\.app2\\.")
        .await?;
    println!("  {stats:?}");

    assert!(hits >= 1, "it broke under traffic");
    assert_eq!(report.failures_after_nth_answered(MAX_FAILS), 0, "{report}");
    assert!(
        every_failure(&report, |o| matches!(o, Outcome::Status(500..=599))),
        "{report}"
    );
    assert!(upcheck_stat(&envoy, "app2", "request_failures").await? >= MAX_FAILS as u64);
    assert!(upcheck_stat(&envoy, "app2", "ejections").await? >= 1);
    assert_eq!(upcheck_stat(&envoy, "app2", "healthy").await?, 0);
    Ok(())
}

/// The names of the backends on upcheck's status page (JSON), each with its `ejected` flag.
async fn status_page(envoy: &Envoy) -> anyhow::Result<Vec<(String, bool)>> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    let text = http
        .get(envoy.status_url("/upcheck/status.json")?)
        .send()
        .await?
        .text()
        .await?;
    let page: Value = serde_json::from_str(&text)?;
    let backends = page["backends"].as_array().cloned().unwrap_or_default();
    Ok(backends
        .iter()
        .map(|b| {
            let name = b["name"].as_str().unwrap_or_default().to_owned();
            (name, b["ejected"].as_bool().unwrap_or(false))
        })
        .collect())
}

/// 9 s of users over app1, app2 and app3. app2 passes its probes but answers 502 to every page
/// (`pages:502`), so only the users find it broken: their three 502s eject it, for 10 s here
/// (`fail_duration`). 3 s in, a new plugin configuration arrives over LDS: app3 is removed, app4
/// (its cluster already known to Envoy) is added, app1 and app2 stay.
///
/// Bound: no user sent after the third failure came back fails (users arrive from the first
/// instant, so a request each worker had already sent app2 may fail with the three), and none
/// after the update. app1 and app2 keep what was
/// known about them: app2 stays ejected, so it gets no user after the update (had its failures
/// been forgotten, it would pass its next probe and three more users would meet its 502s). app3 is
/// forgotten: no user after the update, no probe once the old configuration's contexts are gone
/// (1 s drain), not on the status page. app4 joins once probed.
#[tokio::test]
async fn an_upstream_list_changed_under_load_keeps_what_is_known_of_the_backends_that_stay(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Pages(502)).await?;
    let app3 = FakeUpstream::start("app3", Mode::Ok).await?;
    let app4 = FakeUpstream::start("app4", Mode::Ok).await?;
    let plugin = |names: &[&str]| {
        let mut config = fast_checks(names);
        config["health_checks"]["passive"]["fail_duration"] = json!("10s");
        config
    };
    let mut envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&app1)
        .upstream(&app2)
        .upstream(&app3)
        .upstream(&app4)
        .wasm_filter(plugin(&["app1", "app2", "app3"]))
        .start()
        .await?;
    let (start, traffic) = users(&envoy, Duration::from_secs(9));

    until_stat_above(&envoy, "app2", "ejections", 0, Duration::from_secs(3)).await?;
    let ejected = start.elapsed();
    sleep_until(start + Duration::from_secs(3)).await;
    envoy
        .set_plugin_config(plugin(&["app1", "app2", "app4"]))
        .await?;
    let updated = start.elapsed();
    let at_update = (app2.counts(), app3.counts(), app4.counts());
    sleep(2 * INTERVAL).await;
    let app3_probes_after_drain = app3.counts().probes;
    let page = status_page(&envoy).await?;
    let report = traffic.await?;
    let end = (app2.counts(), app3.counts(), app4.counts());
    print_users(
        "app3 removed and app4 added over LDS under load, app2 ejected",
        &report,
        &[
            ("app2 ejected (its users' 502s)", ejected),
            ("the new upstream list is in force", updated),
        ],
    );
    println!(
        "  after the update: app2 got {} users, app3 {} users and {} probes ({} after the drain), \
         app4 {} users; status page: {page:?}",
        end.0.requests - at_update.0.requests,
        end.1.requests - at_update.1.requests,
        end.1.probes - at_update.1.probes,
        end.1.probes - app3_probes_after_drain,
        end.2.requests - at_update.2.requests,
    );

    assert_eq!(report.failures_after_nth_answered(MAX_FAILS), 0, "{report}");
    assert_eq!(report.failures_sent_from(updated), 0, "{report}");
    assert_eq!(end.0.requests, at_update.0.requests, "app2 stayed ejected");
    assert_eq!(end.1.requests, at_update.1.requests, "app3 was forgotten");
    assert_eq!(
        end.1.probes, app3_probes_after_drain,
        "app3 is probed no more"
    );
    assert!(end.2.requests > at_update.2.requests, "app4 joined");
    assert_eq!(
        page,
        [
            ("app1".to_owned(), false),
            ("app2".to_owned(), true),
            ("app4".to_owned(), false)
        ]
    );
    Ok(())
}

/// The probing interval of the lease scenario. Taking over a lapsed lease takes up to 600 ms
/// (the lease's 400 ms, then the next 200 ms tick); a 2 s interval keeps the bound clear of a
/// noisy machine's delays.
const LEASE_INTERVAL: Duration = Duration::from_secs(2);

/// What a VM logs when it takes the probing lease.
const TOOK_LEASE: &str = "now probes for the process";

/// What Envoy logs when a VM traps in the misloaded listener's callback.
const TRAPPED: &str = "proxy_on_new_connection failed";

/// One line of Envoy's log: `[date time][thread][level][logger] text`.
struct LogLine<'a> {
    /// Time of day in milliseconds.
    at_ms: i64,
    thread: u32,
    text: &'a str,
}

impl<'a> LogLine<'a> {
    fn parse(line: &'a str) -> Option<Self> {
        let rest = line.strip_prefix('[')?;
        let (stamp, rest) = rest.split_once("][")?;
        let (thread, text) = rest.split_once(']')?;
        let (_, time) = stamp.split_once(' ')?;
        let (hms, millis) = time.split_once('.')?;
        let mut fields = hms.split(':').map(str::parse::<i64>);
        let (h, m, s) = (
            fields.next()?.ok()?,
            fields.next()?.ok()?,
            fields.next()?.ok()?,
        );
        Some(LogLine {
            at_ms: ((h * 60 + m) * 60 + s) * 1000 + millis.parse::<i64>().ok()?,
            thread: thread.parse().ok()?,
            text,
        })
    }

    /// The time from `earlier` to this line (midnight wraps).
    fn since(&self, earlier: &LogLine) -> Duration {
        let ms = (self.at_ms - earlier.at_ms).rem_euclid(86_400_000);
        Duration::from_millis(ms.unsigned_abs())
    }
}

/// Waits until more than `seen` VMs have logged taking the probing lease (the log is written
/// every 100 ms); then how many have, and the thread of the last. An error after 5 s.
async fn lease_taken(envoy: &Envoy, seen: usize) -> anyhow::Result<(usize, u32)> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = envoy.log();
        let taken: Vec<_> = log
            .lines()
            .filter(|line| line.contains(TOOK_LEASE))
            .filter_map(LogLine::parse)
            .collect();
        if let Some(last) = taken.last().filter(|_| taken.len() > seen) {
            return Ok((taken.len(), last.thread));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} VMs took the probing lease, none more in 5 s",
            taken.len()
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// With one worker and `failure_policy: FAIL_RELOAD` as shipped, the worker's VM holds the
/// probing lease and fails (a trap, from a connection to the misloaded listener) 3 s into 10 s of
/// users; probes go out every 2 s ([`LEASE_INTERVAL`]).
///
/// The main thread's VM takes the lease at start-up (the workers start later), and nothing can
/// make it fail: it never sees a connection. So its thread is first stopped for 1 s, as a long
/// configuration load would stop it, and the worker's VM takes the lease over; the main thread's
/// VM finds it held when it runs again.
///
/// Bound: probing resumes within one interval: another VM logs taking the lease within one
/// interval of the trap (Envoy's clock), and each backend is probed again within one interval of
/// it (the lease lapses after at most 400 ms and the next VM to tick probes everything at once).
/// One VM probes afterwards: each backend gets 2 to 4 probes in the 3 intervals after the first,
/// not twice that once the worker's VM is back. Envoy reloads the worker's VM once, at the next
/// request, and users see at most the request in the failed VM's hands at the trap fail (a
/// response passing through a failed VM is Envoy's 503), none sent after it.
#[tokio::test]
async fn the_vm_holding_the_probing_lease_failing_leaves_no_backend_unprobed_for_an_interval_and_users_unharmed(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let mut plugin = fast_checks(&["app1", "app2"]);
    plugin["health_checks"]["active"]["interval"] = json!("2s");
    let envoy = Envoy::builder()
        .concurrency(1)
        .upstream(&app1)
        .upstream(&app2)
        .wasm_filter(plugin)
        .misloaded_listener()
        .start()
        .await?;
    let (taken, first) = lease_taken(&envoy, 0).await?;
    envoy.stall_main_thread(Duration::from_secs(1)).await?;
    let (_, worker) = lease_taken(&envoy, taken).await?;
    anyhow::ensure!(
        worker != envoy.pid(),
        "the main thread's VM took the lease back after a 1 s stall"
    );
    let reloads = envoy.stat("wasm.upcheck.vm_reload_success").await?;
    let (start, traffic) = users(&envoy, Duration::from_secs(10));

    sleep_until(start + Duration::from_secs(3)).await;
    let probed = [app1.counts().probes, app2.counts().probes];
    envoy.fail_a_worker_vm().await?;
    let failed = start.elapsed();
    let deadline = start + failed + LEASE_INTERVAL;
    while app1.counts().probes == probed[0] || app2.counts().probes == probed[1] {
        anyhow::ensure!(
            Instant::now() < deadline,
            "a backend went unprobed for {LEASE_INTERVAL:?} after the lease holder failed: \
             probes {probed:?} then {:?}",
            [app1.counts().probes, app2.counts().probes]
        );
        sleep(Duration::from_millis(5)).await;
    }
    let resumed = start.elapsed();
    sleep_until(start + failed + LEASE_INTERVAL).await;
    let window = [app1.counts().probes, app2.counts().probes];
    sleep_until(start + failed + 4 * LEASE_INTERVAL).await;
    let in_window = [
        app1.counts().probes - window[0],
        app2.counts().probes - window[1],
    ];
    let report = traffic.await?;

    let log = envoy.log();
    let mut from_trap = log.lines().skip_while(|line| !line.contains(TRAPPED));
    let trap = from_trap
        .next()
        .and_then(LogLine::parse)
        .context("Envoy logged no trap")?;
    let taker = from_trap
        .find(|line| line.contains(TOOK_LEASE))
        .and_then(LogLine::parse)
        .context("no VM took the lease after the trap")?;
    let took_over = taker.since(&trap);
    let reloaded = envoy.stat("wasm.upcheck.vm_reload_success").await? - reloads;
    print_users(
        "the worker's VM, holding the probing lease, fails (one worker, FAIL_RELOAD)",
        &report,
        &[
            ("the worker's VM fails (trap)", failed),
            ("app1 and app2 probed again", resumed),
        ],
    );
    let main = envoy.pid();
    let vm = |thread: u32| {
        if thread == main {
            "main thread's"
        } else {
            "worker's"
        }
    };
    println!(
        "  lease: the {} VM, the worker's after main stalled 1 s; the trap on thread {} \
         (worker {worker}); the lease taken {} ms after it by the {} VM; {reloaded} reload; \
         probes in the 3 intervals after the first: {in_window:?}",
        vm(first),
        trap.thread,
        took_over.as_millis(),
        vm(taker.thread),
    );

    assert_eq!(
        trap.thread, worker,
        "the lease holder is the VM that failed"
    );
    assert!(took_over < LEASE_INTERVAL, "{}", taker.text);
    for probes in in_window {
        assert!((2..=4).contains(&probes), "{in_window:?}");
    }
    assert_eq!(reloaded, 1);
    assert!(report.failures() <= 1, "{report}");
    assert_eq!(report.failures_sent_from(failed), 0, "{report}");
    Ok(())
}
