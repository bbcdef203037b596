//! `health_checks`: Caddy's `active` and `passive` blocks and upcheck's `outlier`, each a struct
//! whose `Default` states the values of left-out fields once, and whose constants state the
//! ranges `validate` holds them to (the warm-up, `slow_start`, is in the module that reads its
//! two spellings). A module of its own because it is the schema of the checks, the part of the
//! document the policy's rule families read.

use crate::limits::{
    MAX_FAILS_LIMIT, MAX_PROBE_BODY, MAX_PROBE_DURATION, MAX_STREAK, MAX_UNHEALTHY_STATUSES,
    MIN_PROBE_DURATION,
};
use crate::slow_start::{self, SlowStart};
use crate::status_match::{self, StatusMatch, StatusSet};
use crate::{duration, grammar, headers, json};
use serde::{Deserialize, Deserializer, Serialize};
use std::ops::RangeInclusive;
use std::time::Duration;

/// Caddy's `health_checks` block, plus upcheck's `outlier`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthChecks {
    /// Probing. Default: on, with [`Active::default`].
    #[serde(deserialize_with = "active")]
    pub active: Active,
    /// Watching real traffic. Default: on, with [`Passive::default`].
    #[serde(deserialize_with = "json::object")]
    pub passive: Passive,
    /// Comparing each backend with its peers. Default: on, with [`Outlier::default`].
    #[serde(deserialize_with = "json::object")]
    pub outlier: Outlier,
    /// Warm-up of a backend entering service (Envoy's slow start). Default: off, with the
    /// tuning of [`SlowStart::default`]; a duration is the window with that tuning.
    #[serde(deserialize_with = "slow_start::deserialize")]
    pub slow_start: SlowStart,
}

/// `health_checks.active`: an object, where `path` and Caddy's `uri` are one field, and `grpc`
/// what is probed instead of either: one of the three names at most.
fn active<'de, D: Deserializer<'de>>(d: D) -> Result<Active, D::Error> {
    json::object_with_one_member(d, &["path", "uri", "grpc"])
}

/// Caddy's `health_checks.active`. What a left-out field takes is in [`Active::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Active {
    /// Path probed with `GET` (Caddy's `uri` is another name for it; give one of the two):
    /// starts with `/`, visible ASCII, at most [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes.
    #[serde(alias = "uri", deserialize_with = "grammar::probe_path")]
    pub path: String,
    /// Probe by the gRPC Health Checking Protocol (`grpc.health.v1.Health`) instead of `GET
    /// path`, given instead of `path`/`uri` ([`GrpcCheck`]). Default: `null`, HTTP probes.
    #[serde(
        deserialize_with = "json::optional_object",
        skip_serializing_if = "Option::is_none"
    )]
    pub grpc: Option<GrpcCheck>,
    /// Extra probe request headers as (lowercase name, value); in JSON a name maps to one value
    /// or a list (Caddy's form). Not pseudo-headers and not `host` (the probe's host is the
    /// upstream's `authority`); at most [`MAX_PROBE_HEADERS`](crate::MAX_PROBE_HEADERS).
    #[serde(with = "headers")]
    pub headers: Vec<(String, String)>,
    /// Time between probes of one backend, within [`Active::PROBE_DURATION`].
    #[serde(with = "duration")]
    pub interval: Duration,
    /// A probe without an answer after this long failed; must be shorter than `interval`, and
    /// within [`Active::PROBE_DURATION`]. Envoy takes it in whole milliseconds, so a fraction of
    /// a millisecond is rounded up (`"1.2ms"` is 2 ms).
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Status a passing probe answers: a code (`200`) or a class (`"2xx"`, or Caddy's `2`).
    pub expect_status: StatusMatch,
    /// Substring a passing probe's body must contain, within the first `max_size` bytes
    /// (Caddy takes a regular expression here; upcheck a plain substring); at most
    /// [`MAX_EXPECT_BODY_LEN`](crate::MAX_EXPECT_BODY_LEN) bytes. `null` for none.
    #[serde(deserialize_with = "grammar::expect_body")]
    pub expect_body: Option<String>,
    /// Probe body bytes read at most, within [`Active::MAX_SIZE`].
    #[serde(deserialize_with = "grammar::count")]
    pub max_size: u64,
    /// Consecutive passing probes that make a backend healthy, within [`Active::STREAK`].
    #[serde(deserialize_with = "grammar::count")]
    pub passes: u32,
    /// Consecutive failing probes that make a backend unhealthy, within [`Active::STREAK`].
    #[serde(deserialize_with = "grammar::count")]
    pub fails: u32,
    /// Status by which a probe's answer says the backend drains ([`crate::drain`]): a code
    /// (HAProxy's `disable-on-404` is `404`) or a class; none of it a passing status
    /// (`expect_status`). `null` for none (the default): then only the
    /// `x-envoy-immediate-health-check-fail` header drains a backend.
    #[serde(deserialize_with = "status_match::or_off")]
    pub drain_status: Option<StatusMatch>,
}

/// The values of left-out fields, each stated here only; one passing or failing probe decides, as
/// in Caddy.
impl Default for Active {
    fn default() -> Self {
        Active {
            path: "/up".into(),
            grpc: None,
            headers: Vec::new(),
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            expect_status: StatusMatch::Class(2),
            expect_body: None,
            max_size: 65_536,
            passes: 1,
            fails: 1,
            drain_status: None,
        }
    }
}

impl Active {
    /// What `interval` and `timeout` may be: Envoy takes the timeout as 32-bit milliseconds,
    /// and 0 would mean none.
    pub const PROBE_DURATION: RangeInclusive<Duration> = MIN_PROBE_DURATION..=MAX_PROBE_DURATION;
    /// What `max_size` may be.
    pub const MAX_SIZE: RangeInclusive<u64> = 1..=MAX_PROBE_BODY as u64;
    /// What `passes` and `fails` may be.
    pub const STREAK: RangeInclusive<u32> = 1..=MAX_STREAK;
}

/// `health_checks.active.grpc`: which service's health a gRPC backend is asked for (upcheck's, not
/// Caddy's).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcCheck {
    /// The name the backend reports the service's health under; `""` (the default) for the
    /// server as a whole. Visible ASCII, at most [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes.
    #[serde(deserialize_with = "grammar::grpc_service")]
    pub service: String,
}

/// Caddy's `health_checks.passive`. What a left-out field takes is in [`Passive::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Passive {
    /// How long a failed request is remembered.
    #[serde(with = "duration")]
    pub fail_duration: Duration,
    /// Remembered failures that eject a backend until enough of them expire, within
    /// [`Passive::MAX_FAILS`].
    #[serde(deserialize_with = "grammar::count")]
    pub max_fails: u32,
    /// Answers that count as failures, at most [`MAX_UNHEALTHY_STATUSES`].
    #[serde(deserialize_with = "unhealthy_statuses")]
    pub unhealthy_status: StatusSet,
    /// A request this slow counts as failed, and counts the moment it is this late even while it
    /// is still waiting for its answer. `null` for off.
    #[serde(with = "duration::optional")]
    pub unhealthy_latency: Option<Duration>,
}

/// The values of left-out fields, each stated here only. Unlike Caddy's (which counts no status
/// at all), the statuses that count include a sidecar's 502 for a backend that never booted.
impl Default for Passive {
    fn default() -> Self {
        Passive {
            fail_duration: Duration::from_secs(10),
            max_fails: 3,
            unhealthy_status: StatusSet::new(vec![
                StatusMatch::Code(502),
                StatusMatch::Code(503),
                StatusMatch::Code(504),
            ]),
            unhealthy_latency: None,
        }
    }
}

impl Passive {
    /// What `max_fails` may be: each remembered failure is kept, so memory stays bounded.
    pub const MAX_FAILS: RangeInclusive<u32> = 1..=MAX_FAILS_LIMIT;
}

/// A status as an item of `unhealthy_status`.
impl<'de> json::Item<'de> for StatusMatch {
    fn item<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        StatusMatch::deserialize(d)
    }
}

/// `unhealthy_status`: a list of at most [`MAX_UNHEALTHY_STATUSES`] statuses.
fn unhealthy_statuses<'de, D: Deserializer<'de>>(d: D) -> Result<StatusSet, D::Error> {
    json::list(d, MAX_UNHEALTHY_STATUSES, || {
        format!("at most {MAX_UNHEALTHY_STATUSES} statuses are allowed")
    })
    .map(StatusSet::new)
}

/// `health_checks.outlier`: peer-relative outlier detection (not a Caddy field). What a
/// left-out field takes is in [`Outlier::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Outlier {
    /// Whether backends are compared with their peers at all.
    #[serde(deserialize_with = "grammar::flag")]
    pub enabled: bool,
    /// How far back request outcomes are compared.
    #[serde(with = "duration")]
    pub window: Duration,
    /// Failed requests a backend must have in the window before it can be judged failing,
    /// within [`Outlier::MIN_FAILURES`].
    #[serde(deserialize_with = "grammar::count")]
    pub min_failures: u32,
    /// Requests its peers must have had in the window, together, before a backend is compared
    /// with them; also the completed requests a backend needs before its latency is judged.
    /// Within [`Outlier::MIN_REQUESTS`].
    #[serde(deserialize_with = "grammar::count")]
    pub min_requests: u32,
    /// How many percentage points a backend's failure share must exceed its peers' by, within
    /// [`Outlier::FAILURE_GAP`].
    #[serde(deserialize_with = "grammar::count")]
    pub failure_gap: u8,
    /// How many times slower than its peers a backend must be to be judged slow or stalled,
    /// within [`Outlier::LATENCY_FACTOR`].
    #[serde(deserialize_with = "grammar::count")]
    pub latency_factor: u32,
    /// A slow backend's typical latency must be at least this long.
    #[serde(with = "duration")]
    pub min_latency: Duration,
    /// A request still in flight counts as stalled after at least this long.
    #[serde(with = "duration")]
    pub stall_after: Duration,
    /// The first ejection's length; each repeat doubles it.
    #[serde(with = "duration")]
    pub ejection: Duration,
    /// The longest ejection; at least `ejection`.
    #[serde(with = "duration")]
    pub max_ejection: Duration,
}

/// The values of left-out fields, each stated here only: on by default.
impl Default for Outlier {
    fn default() -> Self {
        Outlier {
            enabled: true,
            window: Duration::from_secs(10),
            min_failures: 5,
            min_requests: 5,
            failure_gap: 5,
            latency_factor: 4,
            min_latency: Duration::from_millis(250),
            stall_after: Duration::from_millis(500),
            ejection: Duration::from_secs(30),
            max_ejection: Duration::from_secs(300),
        }
    }
}

impl Outlier {
    /// What `min_failures` may be.
    pub const MIN_FAILURES: RangeInclusive<u32> = 1..=1000;
    /// What `min_requests` may be.
    pub const MIN_REQUESTS: RangeInclusive<u32> = 1..=100_000;
    /// What `failure_gap` may be.
    pub const FAILURE_GAP: RangeInclusive<u8> = 1..=100;
    /// What `latency_factor` may be: a backend as fast as its peers is not slow.
    pub const LATENCY_FACTOR: RangeInclusive<u32> = 2..=1000;
}
