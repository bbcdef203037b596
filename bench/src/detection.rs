//! Detection with the production intervals: how many users see app2 break, and for how long.
//!
//! The incident's shape: two backends, 40 requests/s of users over fresh connections (so both
//! Envoy workers see traffic), and app2 breaking mid-traffic, either as the sidecar's 502 or as a
//! hang. The probes run every 10 s with a 5 s timeout and 3 failures in 10 s eject, so what the
//! users see depends on which check catches the break first; `unhealthy_latency` lets a hang
//! count passively too.

use crate::proxy::{Front, Proxy};
use anyhow::Result;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::replay::{Replay, Report};
use upcheck_e2e::upstream::FakeUpstream;

/// Users' requests per second.
pub const RATE: u32 = 40;
/// Envoy workers.
pub const WORKERS: u32 = 2;

/// One detection run: how app2 breaks and whether `unhealthy_latency` is set.
#[derive(Clone, Debug)]
pub struct Case {
    /// How app2 breaks.
    pub mode: Mode,
    /// `unhealthy_latency`, if set.
    pub latency: Option<&'static str>,
}

impl Case {
    /// The configuration: the operators' block, plus `unhealthy_latency` if set.
    fn config(&self) -> Value {
        let mut config = crate::deployed_config();
        if let (Some(latency), Some(passive)) =
            (self.latency, config.pointer_mut("/health_checks/passive"))
        {
            passive["unhealthy_latency"] = json!(latency);
        }
        config
    }

    /// `app2 502, default config`.
    pub fn label(&self) -> String {
        let how = match self.mode {
            Mode::Status(status) => status.to_string(),
            ref mode => mode.to_string(),
        };
        match self.latency {
            Some(latency) => format!("app2 {how}, unhealthy_latency {latency}"),
            None => format!("app2 {how}, default config"),
        }
    }
}

/// The four cases: 502 and hang, each with the default config and with `unhealthy_latency: 1s`.
pub fn cases() -> [Case; 4] {
    let case = |mode, latency| Case { mode, latency };
    [
        case(Mode::Status(502), None),
        case(Mode::Hang, None),
        case(Mode::Status(502), Some("1s")),
        case(Mode::Hang, Some("1s")),
    ]
}

/// What the users saw.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The case.
    pub case: Case,
    /// The replay's report.
    pub report: Report,
    /// When app2 broke, from the start of the replay.
    pub break_at: Duration,
}

impl Outcome {
    /// When the last failure was sent, after the break.
    pub fn last_failure_after_break(&self) -> Option<Duration> {
        self.report
            .last_failure()
            .map(|at| at.saturating_sub(self.break_at))
    }
}

/// Runs `case` in an Envoy with [`WORKERS`] workers, for `length`, app2 breaking at `break_at`.
pub async fn run(
    envoy: &Path,
    upcheck: &Path,
    case: Case,
    (length, break_at): (Duration, Duration),
    out: &Path,
) -> Result<Outcome> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let backends = [
        ("app1".to_owned(), app1.addr()),
        ("app2".to_owned(), app2.addr()),
    ];
    let front = Front::Wasm {
        routing: Routing::Cluster,
        module: upcheck.to_owned(),
        config: case.config(),
    };
    let proxy = Proxy::start(envoy, &front, &backends, WORKERS, None, out).await?;
    let replay = Replay::new(proxy.url("/"), RATE, length).connection_per_request();
    let breaking = async {
        tokio::time::sleep(break_at).await;
        app2.set_mode(case.mode.clone());
    };
    let (report, ()) = tokio::join!(replay.run(), breaking);
    Ok(Outcome {
        case,
        report: report?,
        break_at,
    })
}
