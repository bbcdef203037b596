//! `make run`: the incident, live, with upcheck in front.
//!
//! app1 is healthy; app2 is broken as it was in the incident, its sidecar answering 502 to
//! everything. Envoy 1.40 runs what `upcheck envoy` writes from the operators' own Caddy JSON
//! (`config/caddy.json`, whose `health_checks` block upcheck reads as written), with its two
//! backends' addresses replaced by app1's and app2's: host routing, the recommended deployment of
//! `config/envoy.yaml`, all on 127.0.0.1. A little user traffic runs in the background; every
//! second one line says what those users saw and which backend got them, and every health change
//! upcheck logs is shown as it happens. So a reader watches app2 being kept out of rotation, and
//! can break or fix a backend by hand (the printed `curl -X PUT` lines) and watch upcheck follow.
//!
//! Then the day's other half, the one that started the incident: a backend joining a running
//! balancer. At 15 s `upcheck backends add app3` adds app3 while it answers 502 to everything (no
//! user reaches it); at 30 s app3 is fixed, and the demo prints how long after the command its
//! first user came; at 45 s `upcheck backends remove app1` drains app1 and removes it under
//! traffic. Each step prints what the command said, and the users' lines show what they saw.
//!
//! The backends and the traffic come from the e2e harness and the configuration from the built
//! `upcheck` binary, as in the migration test (`cli/tests/commands/moving_from_caddy.rs`), so the demo runs
//! what the tests test. It stops on Ctrl-C or SIGTERM, or by itself after `--seconds`
//! (`DEMO_SECONDS`, default 10 min), and kills Envoy by its pid on the way out.

use std::convert::Infallible;
use std::future::pending;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::{sleep_until, Instant, MissedTickBehavior};
use upcheck_e2e::caddy::{dialling, write_envoy_yaml_with};
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::replay::Replay;
use upcheck_e2e::upstream::FakeUpstream;

/// A live demo of the incident with upcheck in front (needs UPCHECK_ENVOY and UPCHECK_WASM).
#[derive(Parser)]
struct Args {
    /// The operators' Caddy JSON; its backends must dial 127.0.0.1:3001 and 127.0.0.1:3002,
    /// which become app1's and app2's addresses.
    #[arg(long, default_value = "config/caddy.json")]
    caddy: PathBuf,
    /// The `upcheck` binary that writes Envoy's configuration.
    #[arg(long, default_value = "target/debug/upcheck")]
    upcheck: PathBuf,
    /// Stop by itself after this many seconds.
    #[arg(long, env = "DEMO_SECONDS", default_value_t = 600)]
    seconds: u64,
    /// Background user requests per second.
    #[arg(long, default_value_t = 10)]
    rate: u32,
}

/// Seconds since `start`, as the demo's lines are stamped.
fn stamp(start: Instant) -> String {
    format!("[{:>4}s]", start.elapsed().as_secs())
}

/// The message of an upcheck log line in Envoy's log: `upcheck: app2 unhealthy: …`.
///
/// Envoy writes `… wasm log <plugin> <root id>: <message>`; upcheck's messages start `upcheck:`.
fn upcheck_message(line: &str) -> Option<&str> {
    let (_, logged) = line.split_once("] wasm log ")?;
    let (_, message) = logged.split_once(": ")?;
    message.starts_with("upcheck:").then_some(message)
}

/// Prints every upcheck line Envoy logs, every 200 ms, until dropped.
async fn follow_log(envoy: &Envoy, start: Instant) -> Infallible {
    let mut seen = 0;
    loop {
        let log = envoy.log();
        // Only whole lines: the last one may still be being written.
        let complete = log.rfind('\n').map_or(0, |end| end + 1);
        if complete > seen {
            for line in log[seen..complete].lines() {
                if let Some(message) = upcheck_message(line) {
                    println!("{} {message}", stamp(start));
                }
            }
            seen = complete;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends `rate` user requests a second and prints one line a second: what users saw, how many of
/// them each backend received, and how many upcheck had repeated on another backend (its
/// `retried` metric, from `envoy`). Runs until dropped, or until no client can be built.
async fn drive_users(
    envoy: &Envoy,
    rate: u32,
    backends: &[&FakeUpstream],
    start: Instant,
) -> reqwest::Error {
    let url = envoy.url("/");
    let retried = || async {
        let stats = envoy.stats("^wasmcustom\\.upcheck\\..*\\.retried$").await;
        stats.map(|s| s.values().sum::<u64>()).unwrap_or_default()
    };
    let second = Replay::new(url, rate, Duration::from_secs(1)).connection_per_request();
    let mut every_second = tokio::time::interval(Duration::from_secs(1));
    every_second.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        every_second.tick().await;
        let before: Vec<u64> = backends.iter().map(|b| b.counts().requests).collect();
        let retried_before = retried().await;
        let report = match second.run().await {
            Ok(report) => report,
            Err(e) => return e,
        };
        let outcomes: Vec<String> = report
            .outcomes()
            .iter()
            .map(|(outcome, n)| format!("{outcome}:{n}"))
            .collect();
        let got: Vec<String> = backends
            .iter()
            .zip(before)
            .map(|(b, before)| format!("{} {}", b.name(), b.counts().requests - before))
            .collect();
        let repeated = match retried().await.saturating_sub(retried_before) {
            0 => String::new(),
            n => format!("  repeated on a peer: {n}"),
        };
        println!(
            "{} users: {} sent, {} failed ({})  backends got: {}{repeated}",
            stamp(start),
            report.requests(),
            report.failures(),
            outcomes.join(" "),
            got.join(", "),
        );
    }
}

/// Runs `upcheck backends --config FILE args…` as an operator would, and prints what it said.
async fn backends_command(upcheck: &Path, file: &Path, args: &[&str], start: Instant) {
    println!(
        "{} $ upcheck backends --config {} {}",
        stamp(start),
        file.display(),
        args.join(" ")
    );
    let mut command = std::process::Command::new(upcheck);
    command.args(["backends", "--config"]).arg(file).args(args);
    // It waits on Envoy: off the runtime's threads.
    match tokio::task::spawn_blocking(move || command.output()).await {
        Ok(Ok(output)) => {
            let said = [output.stdout, output.stderr].concat();
            for line in String::from_utf8_lossy(&said).lines() {
                println!("{}   {line}", stamp(start));
            }
        }
        Ok(Err(e)) => println!("{}   cannot run {}: {e}", stamp(start), upcheck.display()),
        Err(e) => println!("{}   the command did not finish: {e}", stamp(start)),
    }
}

/// The membership steps: app3 added broken, fixed, app1 removed. Ends after the last step.
async fn membership_steps(upcheck: &Path, file: &Path, app3: &FakeUpstream, start: Instant) {
    let at = |seconds: u64| sleep_until(start + Duration::from_secs(seconds));
    at(15).await;
    println!(
        "{} step: app3 joins while it answers 502 to everything",
        stamp(start)
    );
    let added = Instant::now();
    backends_command(
        upcheck,
        file,
        &["add", "app3", &app3.addr().to_string()],
        start,
    )
    .await;
    at(30).await;
    let while_broken = app3.counts().requests;
    println!(
        "{} step: app3 is fixed; while broken it got {while_broken} users",
        stamp(start)
    );
    app3.set_mode(Mode::Ok);
    while app3.counts().requests == while_broken {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "{} app3 took its first user {:.1} s after `add`, once its probe passed",
        stamp(start),
        added.elapsed().as_secs_f64(),
    );
    at(45).await;
    println!("{} step: app1 leaves: drained, then removed", stamp(start));
    backends_command(upcheck, file, &["remove", "app1"], start).await;
    backends_command(upcheck, file, &["list"], start).await;
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let caddy = std::fs::read_to_string(&args.caddy)
        .with_context(|| format!("cannot read {}", args.caddy.display()))?;

    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Status(502)).await?;
    let app3 = FakeUpstream::start("app3", Mode::Status(502)).await?;
    let caddy = dialling(&caddy, [app1.addr(), app2.addr()])
        .with_context(|| args.caddy.display().to_string())?;
    let mut written = None;
    let envoy = Envoy::builder()
        .concurrency(2)
        .start_yaml(|ports| {
            let yaml = written.insert(write_envoy_yaml_with(&args.upcheck, &caddy, ports, &[])?);
            yaml.yaml()
        })
        .await?;
    let written = written.context("Envoy started without its configuration written")?;
    let start = Instant::now();

    println!("upcheck demo: the incident, with upcheck in front (all on 127.0.0.1)");
    println!("  app1   {}  healthy", app1.addr());
    println!(
        "  app2   {}  broken as in the incident: 502 to everything",
        app2.addr()
    );
    println!(
        "  Envoy {} (pid {}, 2 workers) running upcheck.wasm, configured by",
        upcheck_e2e::envoy::VERSION,
        envoy.pid(),
    );
    println!(
        "         upcheck envoy --from-caddy {} (app1 and app2 dialled) -o {}",
        args.caddy.display(),
        written.path().display()
    );
    println!();
    println!("Send requests:  curl -si {}", envoy.url("/"));
    println!("                (the x-fake-upstream header says which backend answered)");
    println!(
        "Status page:    curl -s {}  (its own listener, loopback only)",
        envoy.status_url("/upcheck/status")?
    );
    println!(
        "Envoy stats:    curl -s '{}'",
        envoy.admin_url("/stats?filter=wasmcustom.upcheck")
    );
    println!(
        "Fix app2:       curl -X PUT --data ok http://{}/__mode",
        app2.addr()
    );
    println!(
        "Break app1:     curl -X PUT --data status:502 http://{}/__mode",
        app1.addr()
    );
    println!(
        "  app3   {}  not yet a backend: joins at 15 s answering 502, fixed at 30 s",
        app3.addr()
    );
    println!("  app1   leaves at 45 s (upcheck backends remove app1)");
    println!(
        "Background traffic: {} requests/s. Stops on Ctrl-C, or by itself after {} s.",
        args.rate, args.seconds
    );
    println!();

    let mut terminate = signal(SignalKind::terminate())?;
    let deadline = start + Duration::from_secs(args.seconds);
    let backends = [&app1, &app2, &app3];
    let stopped_by = tokio::select! {
        _ = tokio::signal::ctrl_c() => "Ctrl-C".to_owned(),
        _ = terminate.recv() => "SIGTERM".to_owned(),
        _ = sleep_until(deadline) => format!("{} s are up", args.seconds),
        never = follow_log(&envoy, start) => match never {},
        never = async {
            membership_steps(&args.upcheck, &written.path(), &app3, start).await;
            pending::<Infallible>().await
        } => match never {},
        e = drive_users(&envoy, args.rate, &backends, start) => {
            format!("the traffic stopped: {e}")
        }
    };

    println!();
    println!(
        "Stopping ({stopped_by}). In {} s:",
        start.elapsed().as_secs()
    );
    for backend in backends {
        let counts = backend.counts();
        println!(
            "  {} received {} user requests and {} probes",
            backend.name(),
            counts.requests,
            counts.probes
        );
    }
    let pid = envoy.pid();
    drop(envoy);
    println!("Envoy (pid {pid}) and the backends stopped.");
    Ok(())
}
