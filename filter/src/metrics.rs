//! Envoy stats under `upcheck.` (shown as `wasmcustom.upcheck.*`), named by
//! [`upcheck_policy::series`], whose tag rules make the backend a Prometheus label: counters are
//! summed over every VM by the host; gauges are last-writer-wins, so only the prober writes them.
//!
//! The one per-request counter, `requests`, is counted in guest memory and added to the host's
//! counter on each tick, one host call per backend that had requests: a host call per request
//! would be the dearest part of routing one. The stat lags by at most a tick (200 ms).
//!
//! A metric the host refuses to define, with a status the SDK hands back, is not reported and
//! never stops routing. (The SDK itself panics on any status but `Ok` from `define_metric`; Envoy
//! 1.40 has defined every counter and gauge upcheck asks for in every end-to-end run.)

use crate::abi::MetricType;
use crate::hostcall as hostcalls;
use std::time::Duration;
use upcheck_policy::config::Upstream;
use upcheck_policy::outlier::Verdict;
use upcheck_policy::retry::Extra;
use upcheck_policy::series::{self, Aggregate, Metric};
use upcheck_policy::{State, Time};

/// One backend's metrics: the handles the pool keeps in each backend's record.
#[derive(Debug, Default, Clone)]
pub struct BackendMetrics {
    /// Probes sent.
    pub probes: Option<u32>,
    /// Probes that did not pass.
    pub probe_failures: Option<u32>,
    /// User requests routed.
    pub requests: Option<u32>,
    /// User requests that counted as failures.
    pub request_failures: Option<u32>,
    /// Extra attempts for requests first sent here ([`upcheck_policy::retry`]).
    pub retries: RetryMetrics,
    /// Passive ejections, outlier ejections included.
    pub ejections: Option<u32>,
    /// Outlier ejections, by kind.
    pub outliers: OutlierMetrics,
    /// 1 while probes pass and it is not ejected (gauge).
    pub healthy: Option<u32>,
    /// 1 while it drains (gauge).
    pub draining: Option<u32>,
    /// Changes of its state.
    pub state_changes: Option<u32>,
    /// One gauge per state, in [`State::ALL`]'s order: 1 for the state it is in.
    pub states: [Option<u32>; 5],
    /// Its last probe's latency in milliseconds (gauge).
    pub probe_latency_ms: Option<u32>,
    /// When its state last changed, in Unix seconds (gauge).
    pub last_change_seconds: Option<u32>,
    /// Requests routed since the last [`BackendMetrics::flush_requests`], not yet in `requests`.
    unflushed_requests: u64,
}

/// Defines metric `name`: its id, or `None`, said once in the log, when the host refuses it.
pub fn define(kind: MetricType, name: &str) -> Option<u32> {
    match hostcalls::define_metric(kind, name) {
        Ok(id) => Some(id),
        Err(status) => {
            log::warn!("upcheck: metric {name} not reported: the host refused it ({status:?})");
            None
        }
    }
}

impl BackendMetrics {
    /// Defines the metrics of `upstream` of `pool` (the host returns the same id for a name
    /// defined again, so a reconfiguration keeps the counts).
    pub fn define(pool: Option<&str>, upstream: &Upstream) -> BackendMetrics {
        let name = &upstream.name;
        let of = |metric: Metric| {
            let kind = match metric.kind {
                Aggregate::Counter => MetricType::Counter,
                Aggregate::Gauge => MetricType::Gauge,
            };
            define(kind, &series::backend_stat(pool, name, metric.name))
        };
        BackendMetrics {
            probes: of(series::PROBES),
            probe_failures: of(series::PROBE_FAILURES),
            requests: of(series::REQUESTS),
            request_failures: of(series::REQUEST_FAILURES),
            retries: RetryMetrics {
                retried: of(series::RETRIED),
                recovered: of(series::RETRIED_RECOVERED),
                hedges: of(series::HEDGES),
                hedges_won: of(series::HEDGES_WON),
            },
            ejections: of(series::EJECTIONS),
            outliers: OutlierMetrics {
                failing: of(series::OUTLIER_FAILING),
                slow: of(series::OUTLIER_SLOW),
                stalled: of(series::OUTLIER_STALLED),
            },
            healthy: of(series::HEALTHY),
            draining: of(series::DRAINING),
            state_changes: of(series::STATE_CHANGES),
            states: State::ALL.map(|state| {
                define(
                    MetricType::Gauge,
                    &series::state_stat(pool, name, state.as_str()),
                )
            }),
            probe_latency_ms: of(series::PROBE_LATENCY_MS),
            last_change_seconds: of(series::LAST_CHANGE_SECONDS),
            unflushed_requests: 0,
        }
    }

    /// The handle of its `metric`, one of [`series::BACKEND_METRICS`], to read it back by.
    pub fn id(&self, metric: Metric) -> Option<u32> {
        let (r, o) = (&self.retries, &self.outliers);
        [
            (series::PROBES, self.probes),
            (series::PROBE_FAILURES, self.probe_failures),
            (series::REQUESTS, self.requests),
            (series::REQUEST_FAILURES, self.request_failures),
            (series::RETRIED, r.retried),
            (series::RETRIED_RECOVERED, r.recovered),
            (series::HEDGES, r.hedges),
            (series::HEDGES_WON, r.hedges_won),
            (series::EJECTIONS, self.ejections),
            (series::OUTLIER_FAILING, o.failing),
            (series::OUTLIER_SLOW, o.slow),
            (series::OUTLIER_STALLED, o.stalled),
            (series::STATE_CHANGES, self.state_changes),
            (series::HEALTHY, self.healthy),
            (series::DRAINING, self.draining),
            (series::PROBE_LATENCY_MS, self.probe_latency_ms),
            (series::LAST_CHANGE_SECONDS, self.last_change_seconds),
        ]
        .into_iter()
        .find_map(|(m, id)| if m == metric { id } else { None })
    }

    /// The handle of its gauge for `state`.
    pub fn state_id(&self, state: State) -> Option<u32> {
        let at = State::ALL.iter().position(|s| *s == state)?;
        self.states.get(at).copied().flatten()
    }

    /// Sets its state gauges: 1 for `state`, 0 for the others, and when it began.
    pub fn set_state(&self, state: State, since: Time) {
        for (id, each) in self.states.iter().zip(State::ALL) {
            set(*id, u64::from(each == state));
        }
        set(self.last_change_seconds, since.as_secs());
    }

    /// Sets its last probe's latency.
    pub fn set_probe_latency(&self, latency: Duration) {
        set(self.probe_latency_ms, upcheck_policy::time::millis(latency));
    }

    /// Counts one routed request; it reaches `requests` at the next flush. True if it is the
    /// first since the last flush.
    pub fn count_request(&mut self) -> bool {
        if self.requests.is_none() {
            return false;
        }
        self.unflushed_requests = self.unflushed_requests.saturating_add(1);
        self.unflushed_requests == 1
    }

    /// Adds the requests counted since the last flush to `requests`, in one host call if any.
    pub fn flush_requests(&mut self) {
        let unflushed = std::mem::take(&mut self.unflushed_requests);
        if let (Some(id), Ok(n @ 1..)) = (self.requests, i64::try_from(unflushed)) {
            // A failed increment loses these counts; nothing to do about it from here.
            let _ = hostcalls::increment_metric(id, n);
        }
    }
}

/// One backend's extra attempts (`upcheck.<name>.retried`, `_recovered`, `.hedges`, `_won`).
#[derive(Debug, Default, Clone)]
pub struct RetryMetrics {
    /// Requests whose attempt here failed or outlasted its per-try timeout, answered elsewhere.
    pub retried: Option<u32>,
    /// Of those, answered without a 5xx.
    pub recovered: Option<u32>,
    /// Attempts here that outlasted their per-try timeout, so another went out.
    pub hedges: Option<u32>,
    /// Of those, the ones the other attempt answered first.
    pub hedges_won: Option<u32>,
}

impl RetryMetrics {
    /// Counts an extra attempt for a request first sent here: what became of that attempt, and
    /// whether its user got an answer that is no 5xx.
    pub fn count(&self, extra: Extra, recovered: bool) {
        if extra.went_elsewhere() {
            increment(self.retried);
            if recovered {
                increment(self.recovered);
            }
        }
        if extra.hedged() {
            increment(self.hedges);
            if extra == Extra::HedgeWon {
                increment(self.hedges_won);
            }
        }
    }
}

/// One backend's outlier ejections by kind (`upcheck.<name>.outlier_failing`, `_slow`,
/// `_stalled`).
#[derive(Debug, Default, Clone)]
pub struct OutlierMetrics {
    /// For a share or a run of failures.
    pub failing: Option<u32>,
    /// For a median latency far above its peers'.
    pub slow: Option<u32>,
    /// For requests in flight far longer than its peers take.
    pub stalled: Option<u32>,
}

impl OutlierMetrics {
    /// The counter for an ejection on `verdict`.
    pub fn of(&self, verdict: &Verdict) -> Option<u32> {
        match verdict {
            Verdict::Failing { .. } | Verdict::Run { .. } => self.failing,
            Verdict::Slow { .. } => self.slow,
            Verdict::Stalled { .. } => self.stalled,
        }
    }
}

/// A pool's own metrics: the pool guard's gauge, 1 while it widens the routable set, and the same
/// under its deprecated name ([`series::POOL_GUARD_DEPRECATED`]); the requests the retry budget
/// withheld their advice from.
#[derive(Debug, Default, Clone, Copy)]
pub struct PoolMetrics {
    guard: Option<u32>,
    guard_deprecated: Option<u32>,
    retries_refused: Option<u32>,
}

impl PoolMetrics {
    /// The metrics of `pool`.
    pub fn define(pool: Option<&str>) -> PoolMetrics {
        // One name, written over for the deprecated one: defining both allocates no more than
        // defining one did.
        let mut name = series::pool_stat(pool, series::POOL_GUARD);
        let guard = define(MetricType::Gauge, &name);
        name.truncate(name.len().saturating_sub(series::POOL_GUARD.len()));
        name.push_str(series::POOL_GUARD_DEPRECATED);
        let guard_deprecated = define(MetricType::Gauge, &name);
        name.truncate(
            name.len()
                .saturating_sub(series::POOL_GUARD_DEPRECATED.len()),
        );
        name.push_str(series::RETRIES_REFUSED);
        PoolMetrics {
            guard,
            guard_deprecated,
            retries_refused: define(MetricType::Counter, &name),
        }
    }

    /// The handle of its metric named `name` ([`series::POOL_GUARD`],
    /// [`series::POOL_GUARD_DEPRECATED`] or [`series::RETRIES_REFUSED`]).
    pub fn id(self, name: &str) -> Option<u32> {
        match name {
            series::POOL_GUARD => self.guard,
            series::POOL_GUARD_DEPRECATED => self.guard_deprecated,
            series::RETRIES_REFUSED => self.retries_refused,
            _ => None,
        }
    }

    /// Says whether the guard is engaged.
    pub fn set_guard(self, engaged: bool) {
        set(self.guard, u64::from(engaged));
        set(self.guard_deprecated, u64::from(engaged));
    }

    /// Counts `requests` the retry budget withheld their advice from.
    pub fn count_refused(self, requests: u32) {
        add(self.retries_refused, requests);
    }
}

/// The handles a status page's VM reads the metrics back by: its own, never the pool's, so this
/// VM writes no metric whatever it takes in.
#[derive(Default)]
pub struct PageMetrics {
    /// Each backend's, in the pool's order.
    pub backends: Vec<BackendMetrics>,
    /// The pool's own.
    pub pool: PoolMetrics,
}

/// Adds one to a counter.
pub fn increment(id: Option<u32>) {
    add(id, 1);
}

/// Adds `n` to a counter (nothing for 0).
pub fn add(id: Option<u32>, n: u32) {
    if let (Some(id), 1..) = (id, n) {
        // A failed increment loses these counts; nothing to do about it from here.
        let _ = hostcalls::increment_metric(id, i64::from(n));
    }
}

/// Sets a gauge.
pub fn set(id: Option<u32>, value: u64) {
    if let Some(id) = id {
        let _ = hostcalls::record_metric(id, value);
    }
}
