//! Rolling deploys and restarts in a real Envoy, in both routing modes: each backend in turn
//! (optionally) drains, goes away for 8 s without warning (its port closed, connections
//! refused), boots (accepts and hangs for a second), then answers `/up` again, while users keep
//! coming. One table row per run: failed and slow (over 1 s) user requests in each backend's
//! turn, and each backend's share of the requests in the first 3 s after it took users again.
//!
//! The promises asserted: a restart without warning costs at most `max_fails` (3) users in
//! cluster routing (the requests that meet the closed port before it is ejected) and none in host
//! routing (a refused connection is retried on the other backend); with the drain signal, no user
//! fails in host routing and at most a few in cluster routing.
//!
//! The fake upstreams cannot add a header to their answers, so each app server here is a small
//! HTTP/1.1 server of this test's own that can close and reopen its port.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{sleep, sleep_until, Instant};
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::plugin::fast_checks;
use upcheck_e2e::replay::{Replay, Report};
use upcheck_policy::drain::SIGNAL_HEADER;

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

/// What an app server is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Phase {
    Serving = 0,
    Draining = 1,
    Booting = 2,
}

/// One app server: its port (closed while it is down), its phase, and when each user request
/// reached it.
struct App {
    name: &'static str,
    addr: SocketAddr,
    signal: Signal,
    phase: AtomicU8,
    pages: Mutex<Vec<Instant>>,
    listening: Mutex<Option<JoinHandle<()>>>,
}

impl App {
    async fn start(name: &'static str, signal: Signal) -> anyhow::Result<Arc<App>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let app = Arc::new(App {
            name,
            addr: listener.local_addr()?,
            signal,
            phase: AtomicU8::new(Phase::Serving as u8),
            pages: Mutex::new(Vec::new()),
            listening: Mutex::new(None),
        });
        app.listen(listener);
        Ok(app)
    }

    fn phase(&self) -> Phase {
        match self.phase.load(Ordering::SeqCst) {
            1 => Phase::Draining,
            2 => Phase::Booting,
            _ => Phase::Serving,
        }
    }

    fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::SeqCst);
    }

    /// Accepts on `listener` until [`App::stop`]; the connections live as long as the listener.
    fn listen(self: &Arc<Self>, listener: TcpListener) {
        let app = self.clone();
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.spawn(serve(stream, app.clone()));
            }
        });
        if let Ok(mut slot) = self.listening.lock() {
            *slot = Some(task);
        }
    }

    /// Closes the port and every open connection, as a process that exits does.
    fn stop(&self) {
        if let Some(task) = self.listening.lock().ok().and_then(|mut slot| slot.take()) {
            task.abort();
        }
    }

    /// Listens again on the same port, booting.
    async fn boot(self: &Arc<Self>) -> anyhow::Result<()> {
        self.set_phase(Phase::Booting);
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => {
                    self.listen(listener);
                    return Ok(());
                }
                Err(e) if Instant::now() >= deadline => return Err(e.into()),
                Err(_) => sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// User requests that reached it in `[from, to)`.
    fn pages_between(&self, from: Instant, to: Instant) -> usize {
        self.pages
            .lock()
            .map(|pages| pages.iter().filter(|t| (from..to).contains(t)).count())
            .unwrap_or(0)
    }

    /// The first user request that reached it at or after `from`.
    fn first_page_since(&self, from: Instant) -> Option<Instant> {
        self.pages
            .lock()
            .ok()
            .and_then(|pages| pages.iter().copied().find(|t| *t >= from))
    }
}

/// Serves one connection of bodiless GETs, as the app's phase says.
async fn serve(mut stream: TcpStream, app: Arc<App>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        buffer.drain(..end + 4);
        let probe = head.split(' ').nth(1) == Some("/up");
        let phase = app.phase();
        if !probe {
            if let Ok(mut pages) = app.pages.lock() {
                pages.push(Instant::now());
            }
        }
        if phase == Phase::Booting {
            // Booting: the request waits until the process is ready (or the caller gives up).
            while app.phase() == Phase::Booting {
                sleep(Duration::from_millis(50)).await;
            }
        }
        let draining = phase == Phase::Draining;
        let (status, extra) = match app.signal {
            Signal::Header if draining => ("200 OK", format!("{SIGNAL_HEADER}: true\r\n")),
            Signal::Status404 if draining && probe => ("404 Not Found", String::new()),
            _ => ("200 OK", String::new()),
        };
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n{extra}\r\nok"
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
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
fn plugin(run: Run, apps: &[&Arc<App>]) -> serde_json::Value {
    let names: Vec<&str> = apps.iter().map(|a| a.name).collect();
    let mut config = fast_checks(&names);
    if run.routing != Routing::Cluster {
        config["routing"] = json!("host");
        for (i, app) in apps.iter().enumerate() {
            config["upstreams"][i]["address"] = json!(app.addr.to_string());
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

async fn envoy_for(run: Run, apps: &[&Arc<App>]) -> anyhow::Result<Envoy> {
    apps.iter()
        .fold(Envoy::builder().concurrency(2), |envoy, app| {
            envoy.backend(app.name, app.addr)
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

/// Samples sent in `[from, to)` after the run's start.
fn turn_of(report: &Report, from: Duration, to: Duration) -> (usize, usize) {
    let sent = report
        .samples
        .iter()
        .filter(|s| (from..to).contains(&s.sent));
    sent.fold((0, 0), |(failed, slow), s| {
        (
            failed + usize::from(s.outcome.is_failure()),
            slow + usize::from(s.latency > SLOW),
        )
    })
}

/// A rolling deploy under users: each backend in turn drains (if the run has a signal) until the
/// status gauge shows it and its in-flight requests are done, stops for [`DOWN`], boots for
/// [`BOOT`], answers `/up` again, and is given [`SHARE_WINDOW`] of users before the next turn.
async fn rolling_deploy(run: Run) -> anyhow::Result<Measured> {
    let app1 = App::start("app1", run.signal).await?;
    let app2 = App::start("app2", run.signal).await?;
    let apps = [&app1, &app2];
    let envoy = envoy_for(run, &apps).await?;
    let turn_length = Duration::from_secs(3) + DOWN + BOOT + Duration::from_secs(5);
    let duration = Duration::from_secs(2) + 2 * turn_length;
    let replay = Replay::new(envoy.url("/"), RATE, duration).connection_per_request();
    let start = Instant::now();
    let traffic = tokio::spawn(async move { replay.run().await });
    let mut bounds = Vec::new();
    sleep_until(start + Duration::from_secs(2)).await;
    for app in apps {
        let began = start.elapsed();
        if run.signal != Signal::None {
            app.set_phase(Phase::Draining);
            until_gauge(&envoy, app.name, "draining", 1, Duration::from_secs(3)).await;
            // What it was sent before the drain took hold finishes.
            sleep(Duration::from_millis(300)).await;
        }
        app.stop();
        sleep(DOWN).await;
        app.boot().await?;
        sleep(BOOT).await;
        app.set_phase(Phase::Serving);
        let returned = Instant::now();
        let deadline = (start + began + turn_length).max(returned + SHARE_WINDOW);
        sleep_until(deadline.min(start + duration)).await;
        bounds.push((began, returned));
    }
    let report = traffic.await??;
    let mut turns = Vec::new();
    for (i, (began, returned)) in bounds.iter().enumerate() {
        let end = bounds
            .get(i + 1)
            .map_or(duration + Duration::from_secs(3), |b| b.0);
        let (failed, slow) = turn_of(&report, *began, end);
        let share = apps.get(i).and_then(|app| {
            let from = app.first_page_since(*returned)?;
            let to = from + SHARE_WINDOW;
            let all: usize = apps.iter().map(|a| a.pages_between(from, to)).sum();
            (all > 0).then(|| app.pages_between(from, to) as f64 / all as f64)
        });
        turns.push(Turn {
            failed,
            slow,
            share,
        });
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
async fn a_rolling_deploy_costs_no_user_in_host_routing_and_at_most_max_fails_per_restart_in_cluster_routing(
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
                Routing::Cluster => assert!(turn.failed <= MAX_FAILS, "{}", m.row()),
                _ => assert_eq!(turn.failed, 0, "{}", m.row()),
            }
        }
        // Each backend took users again after its return.
        assert!(m.turns.iter().all(|t| t.share.is_some()), "{}", m.row());
    }
    Ok(())
}
