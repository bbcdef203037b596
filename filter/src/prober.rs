//! Active checks, run by the one VM that holds the probing lease.
//!
//! Probes go out through `dispatch_http_call` to each backend's cluster. The answer is classified
//! by who gave it: the backend's own answer (pass, or a soft failure: wrong status or body) or
//! the proxy's (Envoy's bare 503 when nothing accepts the connection, 504 when the probe timed
//! out), because "nothing is serving" and "serving, but not ready" call for different routing.

use crate::metrics::{self, Metrics};
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType, Status};
use std::time::Duration;
use upcheck_policy::{Pool, ProbeOutcome, Schedule, Time, Transition};

/// Headers a proxy-made answer carries; a backend's own answer has more (`date`, `server`, …).
const PROXY_MADE_HEADERS: [&str; 3] = [":status", "content-length", "content-type"];

/// A probe on the wire.
#[derive(Debug, Clone)]
struct InFlight {
    token: u32,
    backend: String,
}

/// The prober's state.
#[derive(Debug)]
pub struct Prober {
    schedule: Schedule,
    in_flight: Vec<InFlight>,
    /// Backends whose cluster the host does not know, already reported once.
    reported: Vec<String>,
    /// The routing generation last followed.
    generation: Option<u64>,
    /// Backends seen passively ejected at the last look.
    ejected: Vec<bool>,
    /// Gauge values last written, per backend, and the guard's.
    gauges: Vec<Option<u64>>,
    guard_gauge: Option<u64>,
}

/// What an answer did, for the caller to publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Nothing others must see at once.
    Later,
    /// A change others must see now.
    Now,
}

impl Prober {
    /// A prober for `backends`, all due at `now`.
    pub fn new(backends: usize, now: Time, seed: u64) -> Prober {
        Prober {
            schedule: Schedule::new(backends, now, seed),
            in_flight: Vec::new(),
            reported: Vec::new(),
            generation: None,
            ejected: vec![false; backends],
            gauges: vec![None; backends],
            guard_gauge: None,
        }
    }

    /// Follows a reconfiguration (`kept[new] = Some(old)`).
    pub fn remap(&mut self, kept: &[Option<usize>], now: Time) {
        self.schedule.remap(kept, now);
        self.generation = None;
        self.ejected = vec![false; kept.len()];
        self.gauges = vec![None; kept.len()];
        self.guard_gauge = None;
    }

    /// Follows a change of the routing, if there was one since the last look: probes newly
    /// ejected backends, reports the end of ejections, writes the gauges.
    pub fn follow(&mut self, pool: &Pool, metrics: &Metrics, now: Time) {
        if self.generation == Some(pool.generation()) {
            return;
        }
        self.generation = Some(pool.generation());
        self.probe_ejected(pool, now);
        self.gauges(pool, metrics);
    }

    /// Probes at once every backend that was passively ejected since the last look: its ejection
    /// ends when its failures expire, and by then a probe should have said whether it is still
    /// broken (a hanging backend otherwise returns for another round of hung requests). Logs the
    /// end of an ejection (the start is logged by the worker that saw the last failure).
    fn probe_ejected(&mut self, pool: &Pool, now: Time) {
        for (i, (seen, ejected)) in self
            .ejected
            .iter_mut()
            .zip(&pool.routing().ejected)
            .enumerate()
        {
            if *ejected && !*seen {
                self.schedule.due_now(i, now);
            }
            if *seen && !*ejected {
                if let Some(up) = pool.config().upstreams.get(i) {
                    log::info!(
                        "upcheck: {} no longer ejected: its failures expired",
                        up.name
                    );
                }
            }
            *seen = *ejected;
        }
    }

    /// Sends every probe due at `now`. Returns whether a result must be published at once.
    pub fn round(&mut self, pool: &mut Pool, metrics: &Metrics, now: Time) -> Published {
        let active = &pool.config().health_checks.active;
        let due = self
            .schedule
            .due(now, active.interval, pool.config().jitter());
        let mut published = Published::Later;
        for i in due {
            let Some(up) = pool.config().upstreams.get(i).cloned() else {
                continue;
            };
            let active = &pool.config().health_checks.active;
            let mut headers: Vec<(&str, &str)> = vec![
                (":method", "GET"),
                (":path", active.path.as_str()),
                (":authority", up.authority()),
                ("user-agent", "upcheck"),
            ];
            headers.extend(active.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            if let Some(m) = metrics.backend(i) {
                metrics::increment(m.probes);
            }
            match hostcalls::dispatch_http_call(up.cluster(), headers, None, vec![], active.timeout)
            {
                Ok(token) => self.in_flight.push(InFlight {
                    token,
                    backend: up.name.clone(),
                }),
                Err(status) => {
                    if !self.reported.contains(&up.name) {
                        log::error!(
                            "upcheck: cannot probe {}: the proxy refused a call to cluster {:?} ({}); is it defined? Treating {} as not serving, retrying every interval",
                            up.name,
                            up.cluster(),
                            describe(status),
                            up.name
                        );
                        self.reported.push(up.name.clone());
                    }
                    if observe(pool, metrics, i, ProbeOutcome::Refused, now) {
                        published = Published::Now;
                    }
                }
            }
        }
        published
    }

    /// Takes in the answer to probe `token`. `None` if the token is not one of this prober's.
    pub fn answer(
        &mut self,
        token: u32,
        body_size: usize,
        pool: &mut Pool,
        metrics: &Metrics,
        now: Time,
    ) -> Option<Published> {
        let at = self.in_flight.iter().position(|p| p.token == token)?;
        let probe = self.in_flight.swap_remove(at);
        let i = pool.index_of(&probe.backend)?;
        let outcome = classify(body_size, pool);
        Some(if observe(pool, metrics, i, outcome, now) {
            Published::Now
        } else {
            Published::Later
        })
    }

    /// Writes the gauges that changed: healthy per backend, fleet guard.
    pub fn gauges(&mut self, pool: &Pool, metrics: &Metrics) {
        let routing = pool.routing();
        for (i, b) in pool.backends().iter().enumerate() {
            let ejected = routing.ejected.get(i).copied().unwrap_or(false);
            let healthy = u64::from(b.active.status == upcheck_policy::Status::Healthy && !ejected);
            if let Some(slot) = self.gauges.get_mut(i) {
                if *slot != Some(healthy) {
                    metrics::set(metrics.backend(i).and_then(|m| m.healthy), healthy);
                    *slot = Some(healthy);
                }
            }
        }
        let guard = u64::from(routing.guard.engaged());
        if self.guard_gauge != Some(guard) {
            metrics::set(metrics.fleet_guard, guard);
            self.guard_gauge = Some(guard);
        }
    }
}

/// Reads the current http-call answer and classifies it.
fn classify(body_size: usize, pool: &Pool) -> ProbeOutcome {
    let active = &pool.config().health_checks.active;
    let headers = hostcalls::get_map(MapType::HttpCallResponseHeaders).unwrap_or_default();
    let status = headers
        .iter()
        .find(|(n, _)| n == ":status")
        .and_then(|(_, v)| v.trim().parse::<u16>().ok());
    let Some(status) = status else {
        // No status at all: the call was reset before any answer.
        return ProbeOutcome::Refused;
    };
    let proxy_made = headers
        .iter()
        .all(|(n, _)| PROXY_MADE_HEADERS.contains(&n.to_ascii_lowercase().as_str()));
    let wanted = body_size.min(usize::try_from(active.max_size).unwrap_or(usize::MAX));
    let body = if active.expect_body.is_some() && wanted > 0 {
        hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, wanted)
            .ok()
            .flatten()
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    ProbeOutcome::classify(status, proxy_made, &body, active)
}

/// Applies one probe outcome: metrics, and one log line if the backend's status changed.
/// Returns whether the change must be published at once.
fn observe(pool: &mut Pool, metrics: &Metrics, i: usize, outcome: ProbeOutcome, now: Time) -> bool {
    let accepting_before = pool
        .backends()
        .get(i)
        .map(upcheck_policy::Backend::accepting);
    let transition = pool.observe_probe(i, outcome, now);
    if !outcome.passed() {
        if let Some(m) = metrics.backend(i) {
            metrics::increment(m.probe_failures);
        }
    }
    let name = pool
        .config()
        .upstreams
        .get(i)
        .map(|u| u.name.as_str())
        .unwrap_or("?");
    let accepting_after = pool
        .backends()
        .get(i)
        .map(upcheck_policy::Backend::accepting);
    match transition {
        Transition::Changed { to, reason, .. } => {
            log::info!("upcheck: {name} {to}: {reason}");
            true
        }
        Transition::Pending {
            toward,
            seen,
            needed,
        } => {
            log::debug!("upcheck: {name}: {seen} of {needed} probes toward {toward}: {outcome}");
            accepting_before != accepting_after
        }
        Transition::Unchanged => accepting_before != accepting_after,
    }
}

fn describe(status: Status) -> &'static str {
    match status {
        Status::BadArgument => "bad argument",
        Status::NotFound => "not found",
        Status::InternalFailure => "internal failure",
        _ => "refused",
    }
}

/// How long a VM may hold the probing lease without renewing it.
pub fn lease_ttl(tick: Duration) -> Duration {
    tick * 2
}
