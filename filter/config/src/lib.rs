//! The plugin configuration: the operators' Caddy `health_checks` block, as written, plus the few
//! things a proxy-wasm filter needs that Caddy does not (which cluster a backend is, which header
//! carries the pick) and upcheck's own outlier detection. `docs/configuration.md` is its
//! reference, checked against this module by `filter/policy/tests/policy/config_docs.rs`.
//!
//! Everything is checked before the filter starts: a config that parses is one the policy can run.
//! Errors name the JSON path and the reason (`health_checks.passive.max_fails: must be at least 1,
//! got 0`, `upstreams[1].name: "app1" is listed twice`), because the operator reading Envoy's log
//! has nothing else to go on. Reading is in two steps:
//!
//! 1. The types of the schema (each in the module of its concern, re-exported here) derive
//!    `Deserialize` (with `deny_unknown_fields`), each field through the grammar of its value
//!    ([`duration`], [`status_match`], `grammar`, `headers`), and `serde_path_to_error` records
//!    where an error arose. A left-out field takes its default (the types' `Default` impls and
//!    the `DEFAULT_*` constants, each stated once).
//! 2. `validate` checks what each number must be within (the `RangeInclusive` constants) and
//!    what spans fields (a timeout shorter than its interval, names unique), then fills in the
//!    defaults that depend on other fields, so a parsed [`Config`] holds what is in force
//!    ([`Config::effective_json`] prints it).
//!
//! - **Unknown and repeated fields are errors**: a config with two `max_fails` is a mistake, not a
//!   choice. Probe header names repeat when they differ only in case.
//! - **`null` turns off a field that can be off**: `min_healthy_percent`, `pool`,
//!   `upstreams[].address`, `health_checks.active.expect_body`,
//!   `health_checks.active.drain_status`, `health_checks.passive.unhealthy_latency` and
//!   `health_checks.slow_start` (or its `window`). On any other field `null` is an error naming
//!   the field; leave the field out for its default. `jitter` cannot be off (backends probed in
//!   lockstep is what it prevents), and outlier detection is turned off with
//!   `"outlier": {"enabled": false}`.
//! - **Nesting is bounded by the schema**: nothing nests deeper than a list of values in
//!   `health_checks.active.headers` (five levels of brackets). A list or object where the schema
//!   has something else is refused without being read, and serde_json's recursion limit (128)
//!   stands behind that, so hostile input cannot exhaust the stack (which would kill the VM).
//! - **One document, two roles**: a configuration routes the pool's traffic (the default) or,
//!   with `"role": "status_page"`, serves the pool's status page on a listener of its own and
//!   does nothing else ([`Role`]). The page's fields (`status_path`, `status_public`) belong to
//!   the second and are refused in the first, so a page that used to be on the traffic listener
//!   is not silently gone.
//! - **Limits** ([`MAX_UPSTREAMS`], [`MAX_NAME_LEN`], [`MAX_VALUE_LEN`], …) bound what one document
//!   can make every worker hold, and every check is linear in the size of the document.
//!
//! A crate of its own so that it can be built for size (`opt-level = "z"` in the workspace's
//! release profile): the document is read once per configuration, never per request, and the
//! derived readers are most of the module's code at the speed-first level.

pub mod duration;
mod error;
pub mod fleet;
mod grammar;
mod headers;
mod health_checks;
mod json;
mod limits;
mod logging;
mod proxy;
mod retries;
mod role;
mod slow_start;
pub mod status_match;
mod upstream;
mod validate;

pub use error::ConfigError;
pub use health_checks::{Active, GrpcCheck, HealthChecks, Outlier, Passive};
pub use limits::{
    MAX_EXPECT_BODY_LEN, MAX_FAILS_LIMIT, MAX_NAME_LEN, MAX_NOTE_LEN, MAX_POOL_LEN, MAX_PROBE_BODY,
    MAX_PROBE_DURATION, MAX_PROBE_HEADERS, MAX_STREAK, MAX_UNHEALTHY_STATUSES, MAX_UPSTREAMS,
    MAX_VALUE_LEN, MAX_WEIGHT, MIN_PROBE_DURATION,
};
pub use logging::{LogFormat, LogLevel};
pub use proxy::{Proxy, RoutingMode};
pub use retries::Retries;
pub use role::{Role, StatusPage};
pub use slow_start::SlowStart;
pub use upstream::Upstream;
pub use validate::label_value_problem;

use serde::Serialize;
use std::ops::RangeInclusive;
use std::time::Duration;

/// The whole plugin configuration.
///
/// Read it with [`Config::parse`], which checks each field, then what spans fields, and fills
/// the defaults in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// The backends, in order. Required, at least one, at most [`MAX_UPSTREAMS`], names unique.
    pub upstreams: Vec<Upstream>,
    /// Active and passive checks and outlier detection. Default: all on, with the defaults of
    /// [`Active`], [`Passive`] and [`Outlier`].
    pub health_checks: HealthChecks,
    /// Which proxy runs the module, and so what may be asked of it. Default [`Proxy::Envoy`].
    pub proxy: Proxy,
    /// How the pick reaches the proxy. Default [`RoutingMode::Cluster`].
    pub routing: RoutingMode,
    /// Request header that carries the pick: the backend's cluster (`routing: "cluster"`, for
    /// Envoy's `cluster_header`) or its address (`routing: "host"`, for the `override_host` load
    /// balancing policy). Any client-supplied copy is removed first. Default
    /// [`DEFAULT_ROUTE_HEADER`].
    pub route_header: String,
    /// The pool's name, for an Envoy that runs several pools: its metrics carry it as the `pool`
    /// label (`upcheck_healthy{pool="site",backend="app1"}`), so two pools' backends of one
    /// name stay apart. Letters, digits, `_` and `-`, at most [`MAX_POOL_LEN`] bytes. Default:
    /// none (`null`), and no `pool` label.
    pub pool: Option<String>,
    /// At most this percentage of the backends passing active checks may be passively ejected at
    /// once, by Envoy's rule: one more may go while (ejected + 1) / N stays within it, and never the
    /// last one. Default [`DEFAULT_MAX_EJECTION_PERCENT`]: one of two.
    pub max_ejection_percent: u8,
    /// When fewer than this percentage of all backends are routable, spread traffic over every
    /// backend that accepts connections (Envoy's panic threshold). Default: off (`null`).
    pub min_healthy_percent: Option<u8>,
    /// Probe times are spread by up to ± this much so backends are not probed in lockstep.
    /// Default: 10% of the active interval, which [`Config::parse`] fills in; cannot be off.
    #[serde(serialize_with = "duration::optional::serialize")]
    pub jitter: Option<Duration>,
    /// How many changes of the pool's backends and pool guard the history keeps, newest last
    /// (the policy's `history`), within [`Config::HISTORY`]. Default [`DEFAULT_HISTORY`].
    pub history: u32,
    /// How each change is written to the log. Default [`LogFormat::Text`].
    pub log_format: LogFormat,
    /// What the filter does with the pool: route its traffic, or serve its status page. Default
    /// [`Role::Traffic`]. In JSON `role` is a member of the top level, and so are the page's
    /// `status_path` and `status_public`.
    #[serde(flatten)]
    pub role: Role,
    /// The least severe log lines written: the host's own level filters them again. Default
    /// [`LogLevel::Info`].
    pub log_level: LogLevel,
    /// When a request is repeated on another backend, under what budget, and how long one
    /// attempt may take ([`Retries`]; host routing only). Default: on, as
    /// [`Retries::default`] says.
    pub retries: Retries,
    /// The balancers that share one view of health through etcd, when there are several
    /// ([`fleet::Fleet`]). Default: none, and upcheck runs alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<fleet::Fleet>,
}

/// The default `route_header`.
pub const DEFAULT_ROUTE_HEADER: &str = "x-upcheck-upstream";
/// The default `max_ejection_percent`.
pub const DEFAULT_MAX_EJECTION_PERCENT: u8 = 50;
/// The default `history`: changes kept.
pub const DEFAULT_HISTORY: u32 = 64;
/// The largest `history`; a process-wide history holding more is not upcheck's, and ignored.
pub const MAX_HISTORY: u32 = 1000;

impl Config {
    /// What `history` may be.
    pub const HISTORY: RangeInclusive<u32> = 1..=MAX_HISTORY;

    /// Parses and checks a plugin configuration, and fills every default in (`cluster`,
    /// `authority`, `jitter` included).
    pub fn parse(json: &[u8]) -> Result<Config, ConfigError> {
        if json.iter().all(u8::is_ascii_whitespace) {
            return Err(ConfigError::new(
                "",
                "the plugin configuration is empty; it needs at least {\"upstreams\": [{\"name\": …}]}",
            ));
        }
        let mut reader = serde_json::Deserializer::from_slice(json);
        let mut track = serde_path_to_error::Track::new();
        let document = json::object(serde_path_to_error::Deserializer::new(
            &mut reader,
            &mut track,
        ))
        .map_err(|e| ConfigError::read(&e, track.path().to_string()))?;
        reader
            .end()
            .map_err(|e| ConfigError::read(&e, String::new()))?;
        validate::validate(document)
    }

    /// The status page this configuration serves, if its role is to serve one.
    #[inline]
    pub fn status_page(&self) -> Option<&StatusPage> {
        match &self.role {
            Role::StatusPage(page) => Some(page),
            Role::Traffic => None,
        }
    }

    /// The configuration in force as pretty JSON, every default filled in and durations as Go
    /// strings; [`Config::parse`] reads it back to an equal `Config`.
    pub fn effective_json(&self) -> String {
        // Cannot fail: every map key is a string and no value refuses to serialize.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The jitter in force: the configured one, or 10% of the interval.
    #[inline]
    pub fn jitter(&self) -> Duration {
        self.jitter
            .unwrap_or(self.health_checks.active.interval / 10)
    }

    /// One probe round: a backend that goes down is noticed within this long.
    #[inline]
    pub fn probe_round(&self) -> Duration {
        self.health_checks.active.interval + self.health_checks.active.timeout
    }
}
