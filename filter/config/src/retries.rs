//! `retries`: when upcheck asks the proxy to repeat a request on another backend, how many
//! extra attempts it may ask for, and how long one attempt may take before a second is sent
//! beside it. Not a Caddy field: Caddy's `load_balancing.retries` repeats whatever failed, an
//! app bug that every backend shares included; upcheck repeats a request only while the backend
//! it picked stands out from its peers, or before there is evidence either way.

use crate::{duration, grammar};
use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;
use std::time::Duration;

/// `retries` (host routing only: in cluster routing a request's route names one backend, and
/// Envoy's retry would go back to it). What a left-out field takes is in [`Retries::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Retries {
    /// Whether GET and HEAD requests are repeated on another backend after any 5xx of a backend
    /// that stands out from its peers (or before there is evidence either way), and sent beside
    /// a slow first attempt after the per-try timeout.
    #[serde(deserialize_with = "grammar::flag")]
    pub enabled: bool,
    /// Extra attempts may be at most this percentage of the requests of the last
    /// `health_checks.outlier.window`, within [`Retries::BUDGET_PERCENT`].
    #[serde(deserialize_with = "grammar::percent")]
    pub budget_percent: u8,
    /// Extra attempts allowed per second whatever the traffic, so that a quiet balancer can
    /// still repeat a request, within [`Retries::MIN_PER_SECOND`].
    #[serde(deserialize_with = "grammar::count")]
    pub min_per_second: u32,
    /// An attempt may take this many times what the picked backend's peers take for their
    /// slowest requests (their 99th percentile) before a second attempt goes out beside it,
    /// within [`Retries::TRY_FACTOR`].
    #[serde(deserialize_with = "grammar::count")]
    pub try_factor: u32,
    /// The per-try timeout is never shorter than this.
    #[serde(with = "duration")]
    pub min_try_timeout: Duration,
    /// The route's own per-try timeout: a per-try timeout is set per request only when the
    /// peers' latency gives less, so the advice only ever shortens the route's. At least
    /// `min_try_timeout`.
    #[serde(with = "duration")]
    pub max_try_timeout: Duration,
    /// Whether the first attempt keeps running when its per-try timeout passes (the first good
    /// answer wins: a hedge) rather than being cancelled for the second.
    #[serde(deserialize_with = "grammar::flag")]
    pub hedge: bool,
}

/// The values of left-out fields, each stated here only: on, 10 % of requests plus 3 a second,
/// a per-try timeout of 4 × the peers' 99th percentile between 250 ms and 3 s, hedged.
impl Default for Retries {
    fn default() -> Self {
        Retries {
            enabled: true,
            budget_percent: 10,
            min_per_second: 3,
            try_factor: 4,
            min_try_timeout: Duration::from_millis(250),
            max_try_timeout: Duration::from_secs(3),
            hedge: true,
        }
    }
}

impl Retries {
    /// What `budget_percent` may be.
    pub const BUDGET_PERCENT: RangeInclusive<u8> = 0..=100;
    /// What `min_per_second` may be.
    pub const MIN_PER_SECOND: RangeInclusive<u32> = 0..=1000;
    /// What `try_factor` may be.
    pub const TRY_FACTOR: RangeInclusive<u32> = 1..=100;
    /// What the per-try timeouts may be: Envoy's header takes whole milliseconds.
    pub const TRY_TIMEOUT: RangeInclusive<Duration> =
        Duration::from_millis(1)..=Duration::from_secs(3600);
}
