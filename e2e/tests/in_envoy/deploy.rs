//! Rolling deploys and restarts in a real Envoy, in both routing modes: each backend in turn
//! (optionally) drains, goes away for 8 s without warning (its port closed, connections
//! refused), boots (accepts and hangs for a second), then answers `/up` again, while users keep
//! coming. One table row per run: failed and slow (over 1 s) user requests in each backend's
//! turn, and each backend's share of the requests in the first 3 s after it took users again.
//!
//! The promises asserted: a restart without warning costs cluster routing the `max_fails` (3)
//! users that meet the closed port before the filter takes it out, with any already on their way
//! then, and none sent after the third came back; none in host routing (a refused connection is retried on the other backend); with the drain signal, no user
//! fails in host routing and at most a few in cluster routing.
//!
//! Each app server is a fake upstream: `drain` or `drain:404` while it drains, `refuse` while its
//! port is closed (leaving it listens again on the same port), and `slow:1s` while it boots.

use std::time::Duration;

use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, Instant};
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::{DrainSignal, Mode};
use upcheck_e2e::plugin::fast_checks;
use upcheck_e2e::replay::{Replay, Report};
use upcheck_e2e::upstream::FakeUpstream;

/// Users per second in every run, each on a connection of its own.
const RATE: u32 = 20;

/// How long a backend's port stays closed in a restart.
const DOWN: Duration = Duration::from_secs(8);

/// How long a booting backend accepts connections and answers nothing.
const BOOT: Duration = Duration::from_secs(1);

/// The window after a backend's return over which its share is measured.
const SHARE_WINDOW: Duration = Duration::from_secs(3);

/// A user request slower than this is counted as slow.
const SLOW: Duration = Duration::from_secs(1);

/// `max_fails` in [`fast_checks`]: what a backend that vanishes may cost in cluster routing.
const MAX_FAILS: usize = 3;

/// Host routing, with Envoy's per-try timeout as in the operators' `config/envoy.yaml`.
const HOST: Routing = Routing::Host {
    per_try_timeout: Duration::from_millis(500),
};

/// How a backend says it is about to go away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Signal {
    /// It does not: it goes away without warning.
    None,
    /// Every answer, probe and pages, carries `x-envoy-immediate-health-check-fail`.
    Header,
    /// Its probe answers 404 (`drain_status: 404`), its pages 200.
    Status404,
}

impl Signal {
    /// The mode of an app server that drains with this signal, if it has one.
    fn draining(self) -> Option<Mode> {
        match self {
            Signal::None => None,
            Signal::Header => Some(Mode::Drain(DrainSignal::Header)),
            Signal::Status404 => Some(Mode::Drain(DrainSignal::ProbeStatus(404))),
        }
    }
}

/// User requests each of `apps` has received so far.
fn pages(apps: &[&FakeUpstream]) -> Vec<u64> {
    apps.iter().map(|app| app.counts().requests).collect()
}

/// Waits until `app` takes a user request, for at most `within`; returns when it did, if it did.
async fn first_page(app: &FakeUpstream, within: Duration) -> Option<Instant> {
    let before = app.counts().requests;
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if app.counts().requests > before {
            return Some(Instant::now());
        }
        sleep(Duration::from_millis(10)).await;
    }
    None
}

/// One run's settings.
#[derive(Clone, Copy, Debug)]
struct Run {
    routing: Routing,
    signal: Signal,
    warm_up: Option<&'static str>,
}

impl Run {
    fn label(&self) -> String {
        let routing = match self.routing {
            Routing::Cluster => "cluster",
            _ => "host",
        };
        let signal = match self.signal {
            Signal::None => "none",
            Signal::Header => "header",
            Signal::Status404 => "404",
        };
        format!(
            "{routing:<7} | {signal:<6} | {:<7}",
            self.warm_up.unwrap_or("off")
        )
    }
}

/// What one backend's turn cost.
#[derive(Debug)]
struct Turn {
    failed: usize,
    /// Failed requests sent after the turn's `max_fails`th failure came back: none, once the
    /// filter has taken the backend out (see [`Report::failures_after_nth_answered`]).
    late: usize,
    slow: usize,
    /// Its share of user requests in the first [`SHARE_WINDOW`] after it took users again.
    share: Option<f64>,
}

/// What one run measured.
struct Measured {
    run: Run,
    turns: Vec<Turn>,
    report: Report,
}

impl Measured {
    fn row(&self) -> String {
        let turns: Vec<String> = self
            .turns
            .iter()
            .map(|t| {
                let share = t
                    .share
                    .map_or("-".to_owned(), |s| format!("{:.0} %", 100.0 * s));
                format!("{:>2} / {:>2} / {share:>4}", t.failed, t.slow)
            })
            .collect();
        format!(
            "{} | {} | {:>4} of {:>4}",
            self.run.label(),
            turns.join(" | "),
            self.report.failures(),
            self.report.requests()
        )
    }
}

const HEADER: &str = "routing | signal | warm-up | app1 failed / slow / share | app2 failed / slow / share | all failed";

/// The plugin configuration for `apps` in `run`.
fn plugin(run: Run, apps: &[&FakeUpstream]) -> serde_json::Value {
    let names: Vec<&str> = apps.iter().map(|a| a.name()).collect();
    let mut config = fast_checks(&names);
    if run.routing != Routing::Cluster {
        config["routing"] = json!("host");
        for (i, app) in apps.iter().enumerate() {
            config["upstreams"][i]["address"] = json!(app.addr().to_string());
        }
    }
    if run.signal == Signal::Status404 {
        config["health_checks"]["active"]["drain_status"] = json!(404);
    }
    if let Some(window) = run.warm_up {
        config["health_checks"]["slow_start"] = json!(window);
    }
    config
}

async fn envoy_for(run: Run, apps: &[&FakeUpstream]) -> anyhow::Result<Envoy> {
    apps.iter()
        .fold(Envoy::builder().concurrency(2), |envoy, app| {
            envoy.upstream(app)
        })
        .routing(run.routing)
        .wasm_filter(plugin(run, apps))
        .start()
        .await
}

/// Waits until Envoy's gauge `upcheck.<name>.<gauge>` reads `value`, for at most `within`.
async fn until_gauge(envoy: &Envoy, name: &str, gauge: &str, value: u64, within: Duration) {
    let deadline = Instant::now() + within;
    let stat = format!("wasmcustom.upcheck.{name}.{gauge}");
    while Instant::now() < deadline {
        if envoy.stat(&stat).await.ok() == Some(value) {
            return;
        }
        sleep(Duration::from_millis(50)).await;
    }
}

/// What the users sent in `sent` (from the run's start) cost, `share` being the backend's.
fn turn_of(report: &Report, sent: std::ops::Range<Duration>, share: Option<f64>) -> Turn {
    let turn = report.sent_within(sent);
    Turn {
        failed: turn.failures(),
        late: turn.failures_after_nth_answered(MAX_FAILS),
        slow: turn.slower_than(SLOW),
        share,
    }
}

/// A rolling deploy under users: each backend in turn drains (if the run has a signal) until the
/// status gauge shows it and its in-flight requests are done, stops for [`DOWN`], boots for
/// [`BOOT`], answers `/up` again, and is given [`SHARE_WINDOW`] of users before the next turn.
async fn rolling_deploy(run: Run) -> anyhow::Result<Measured> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let apps = [&app1, &app2];
    let envoy = envoy_for(run, &apps).await?;
    let turn_length = Duration::from_secs(3) + DOWN + BOOT + Duration::from_secs(5);
    let duration = Duration::from_secs(2) + 2 * turn_length;
    let replay = Replay::new(envoy.url("/"), RATE, duration).connection_per_request();
    let start = Instant::now();
    let traffic = tokio::spawn(async move { replay.run_from(start).await });
    let mut bounds = Vec::new();
    let mut shares = Vec::new();
    sleep_until(start + Duration::from_secs(2)).await;
    for (i, app) in apps.iter().enumerate() {
        let began = start.elapsed();
        if let Some(draining) = run.signal.draining() {
            app.set_mode(draining);
            until_gauge(&envoy, app.name(), "draining", 1, Duration::from_secs(3)).await;
            // What it was sent before the drain took hold finishes.
            sleep(Duration::from_millis(300)).await;
        }
        app.restart(DOWN, BOOT).await;
        let returned = Instant::now();
        // Its share over the window from the first user request it takes again.
        let share = match first_page(app, turn_length).await {
            Some(from) => {
                let before = pages(&apps);
                sleep_until(from + SHARE_WINDOW).await;
                let taken: Vec<u64> = pages(&apps)
                    .iter()
                    .zip(&before)
                    .map(|(now, then)| now - then)
                    .collect();
                let all: u64 = taken.iter().sum();
                let own = taken.get(i).copied().unwrap_or(0);
                (all > 0).then(|| own as f64 / all as f64)
            }
            None => None,
        };
        shares.push(share);
        let deadline = (start + began + turn_length).max(returned + SHARE_WINDOW);
        sleep_until(deadline.min(start + duration)).await;
        bounds.push(began);
    }
    let report = traffic.await??;
    let mut turns = Vec::new();
    for (i, (began, share)) in bounds.iter().zip(shares).enumerate() {
        let end = bounds
            .get(i + 1)
            .copied()
            .unwrap_or(duration + Duration::from_secs(3));
        turns.push(turn_of(&report, *began..end, share));
    }
    drop(envoy);
    Ok(Measured { run, turns, report })
}

/// Runs `runs` side by side and prints the table.
async fn measure(title: &str, runs: &[Run]) -> anyhow::Result<Vec<Measured>> {
    let mut set = JoinSet::new();
    for run in runs {
        set.spawn(rolling_deploy(*run));
    }
    let mut measured = Vec::new();
    while let Some(result) = set.join_next().await {
        measured.push(result??);
    }
    measured.sort_by_key(|m| m.run.label());
    println!("{title} ({RATE} users/s, down {DOWN:?}, boot {BOOT:?}; share over {SHARE_WINDOW:?} after the return)");
    println!("{HEADER}");
    for m in &measured {
        println!("{}", m.row());
    }
    Ok(measured)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_deploy_costs_no_user_in_host_routing_and_none_after_max_fails_per_restart_in_cluster_routing(
) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    for routing in [Routing::Cluster, HOST] {
        for (signal, warm_up) in [
            (Signal::None, None),
            (Signal::None, Some("10s")),
            (Signal::Header, None),
            (Signal::Status404, Some("10s")),
        ] {
            runs.push(Run {
                routing,
                signal,
                warm_up,
            });
        }
    }
    let measured = measure("rolling deploy in a real Envoy", &runs).await?;
    for m in &measured {
        for turn in &m.turns {
            match m.run.routing {
                Routing::Cluster => assert_eq!(turn.late, 0, "{}: {turn:?}", m.row()),
                _ => assert_eq!(turn.failed, 0, "{}", m.row()),
            }
        }
        // Each backend took users again after its return.
        assert!(m.turns.iter().all(|t| t.share.is_some()), "{}", m.row());
    }
    Ok(())
}

/// app1 drains (its answers carry the header) all along; app2 restarts without warning under
/// users. While app2's port is closed the draining app1, still serving, takes the users; once
/// app2 is back, app1 takes nothing new and still drains. Returns what the users sent while app2
/// was down or booting cost, and the requests app1 served meanwhile.
async fn restart_while_the_other_drains(routing: Routing) -> anyhow::Result<(Turn, u64)> {
    let run = Run {
        routing,
        signal: Signal::Header,
        warm_up: None,
    };
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let envoy = envoy_for(run, &[&app1, &app2]).await?;
    let duration = Duration::from_secs(3) + DOWN + BOOT + Duration::from_secs(4);
    let replay = Replay::new(envoy.url("/"), RATE, duration).connection_per_request();
    let start = Instant::now();
    let traffic = tokio::spawn(async move { replay.run_from(start).await });
    sleep_until(start + Duration::from_secs(1)).await;
    app1.set_mode(Mode::Drain(DrainSignal::Header));
    until_gauge(&envoy, "app1", "draining", 1, Duration::from_secs(3)).await;
    sleep_until(start + Duration::from_secs(3)).await;
    let stopped = start.elapsed();
    let app1_before = app1.counts().requests;
    app2.restart(DOWN, BOOT).await;
    let app1_meanwhile = app1.counts().requests - app1_before;
    let returned = start.elapsed();
    let app2_back = app2.counts().requests;
    sleep(Duration::from_secs(2)).await;
    let app1_settled = app1.counts().requests;
    let report = traffic.await??;
    // A request sent just before the port closed may still meet it closed.
    let closing = stopped.saturating_sub(Duration::from_millis(200));
    let [before, during, after] = [
        Duration::ZERO..closing,
        closing..returned,
        returned..duration * 2,
    ]
    .map(|sent| turn_of(&report, sent, None));
    let app2_after = app2.counts().requests - app2_back;
    let app1_after = app1.counts().requests - app1_settled;
    let draining = envoy.stat("wasmcustom.upcheck.app1.draining").await?;
    println!(
        "{}: app2 restarts while app1 drains: failed {} before, {} while app2 was down or \
         booting, {} after; app1 served {app1_meanwhile} meanwhile and \
         {app1_after} from 2 s after app2's return; app2 took {app2_after}; app1 draining at \
         the end: {draining}; {report}",
        run.label(),
        before.failed,
        during.failed,
        after.failed,
    );
    assert_eq!(before.failed, 0, "{report}");
    assert_eq!(after.failed, 0, "{report}");
    assert!(app2_after > 0, "app2 took no users after its return");
    assert_eq!(app1_after, 0, "app1 drains: nothing new once app2 is back");
    assert_eq!(draining, 1, "app1 no longer drains");
    Ok((during, app1_meanwhile))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_the_other_backend_drains_is_served_by_the_draining_one_in_both_routing_modes(
) -> anyhow::Result<()> {
    let cluster = tokio::spawn(restart_while_the_other_drains(Routing::Cluster));
    let host = tokio::spawn(restart_while_the_other_drains(HOST));
    let (cluster_down, cluster_served) = cluster.await??;
    let (host_down, host_served) = host.await??;
    assert_eq!(cluster_down.late, 0, "cluster routing: {cluster_down:?}");
    assert_eq!(host_down.failed, 0, "host routing: {host_down:?}");
    // At 20 users a second for 8 s, app1 served most of them.
    for served in [cluster_served, host_served] {
        assert!(
            served > 80,
            "the draining app1 served {served} while app2 was down"
        );
    }
    Ok(())
}
