//! The plugin configuration: the operators' Caddy `health_checks` block, as written, plus the few
//! things a proxy-wasm filter needs that Caddy does not (which cluster a backend is, which header
//! carries the pick).
//!
//! Everything is checked before the filter starts: a config that parses is one the policy can run.
//! Errors name the JSON path and the reason (`health_checks.passive.max_fails: must be at least 1,
//! got 0`), because the operator reading Envoy's log has nothing else to go on.

use crate::duration;
use crate::status::StatusMatch;
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::time::Duration;

/// The whole plugin configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The backends, in order. Required, at least one, names unique.
    pub upstreams: Vec<Upstream>,
    /// Active and passive checks. Default: both on with the seed values below.
    #[serde(default)]
    pub health_checks: HealthChecks,
    /// Request header that carries the picked backend's cluster to Envoy's `cluster_header` route.
    /// Any client-supplied copy is removed first. Default `x-upcheck-upstream`.
    #[serde(default = "default_route_header")]
    pub route_header: String,
    /// At most this percentage of the backends passing active checks may be passively ejected at
    /// once, by Envoy's rule: one more may go while (ejected + 1) / N stays within it, and never the
    /// last one. Default 50: one of two.
    #[serde(default = "default_max_ejection_percent")]
    pub max_ejection_percent: u8,
    /// When fewer than this percentage of all backends are routable, spread traffic over every
    /// backend that accepts connections (Envoy's panic threshold). Default: off.
    #[serde(default)]
    pub min_healthy_percent: Option<u8>,
    /// Probe times are spread by up to ± this much so backends are not probed in lockstep.
    /// Default: 10% of the active interval.
    #[serde(default, deserialize_with = "duration::deserialize_option")]
    pub jitter: Option<Duration>,
}

/// One backend.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// Its name, in logs, metrics and the status page. Required.
    pub name: String,
    /// The proxy cluster that probes are dispatched to and requests are routed to. Default: `name`.
    #[serde(default)]
    pub cluster: Option<String>,
    /// `:authority` of probes. Default: `name`.
    #[serde(default)]
    pub authority: Option<String>,
    /// Share of traffic relative to the others, 1 to 1000. Default 1.
    #[serde(default = "default_weight")]
    pub weight: u32,
}

impl Upstream {
    /// The cluster probes and requests go to.
    pub fn cluster(&self) -> &str {
        self.cluster.as_deref().unwrap_or(&self.name)
    }

    /// The `:authority` of its probes.
    pub fn authority(&self) -> &str {
        self.authority.as_deref().unwrap_or(&self.name)
    }
}

/// Caddy's `health_checks` block.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct HealthChecks {
    /// Probing. Default: on, `GET /up` every 10 s with a 5 s timeout.
    #[serde(default)]
    pub active: Active,
    /// Watching real traffic. Default: on, 3 failures within 10 s eject.
    #[serde(default)]
    pub passive: Passive,
}

/// Caddy's `health_checks.active`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Active {
    /// Path probed with `GET` (Caddy's `uri` is accepted as the same field). Default `/up`.
    #[serde(default = "default_path", alias = "uri")]
    pub path: String,
    /// Extra probe request headers; a name maps to one value or a list (Caddy's form).
    /// Default: none.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValues>,
    /// Time between probes of one backend. Default 10 s.
    #[serde(
        default = "default_interval",
        deserialize_with = "duration::deserialize"
    )]
    pub interval: Duration,
    /// A probe without an answer after this long failed; must be shorter than `interval`.
    /// Default 5 s.
    #[serde(
        default = "default_timeout",
        deserialize_with = "duration::deserialize"
    )]
    pub timeout: Duration,
    /// Status a passing probe answers: a code (`200`) or a class (`"2xx"`, or Caddy's `2`).
    /// Default 2xx.
    #[serde(default = "default_expect_status")]
    pub expect_status: StatusMatch,
    /// Substring a passing probe's body must contain, within the first `max_size` bytes
    /// (Caddy takes a regular expression here; upcheck a plain substring). Default: none.
    #[serde(default)]
    pub expect_body: Option<String>,
    /// Probe body bytes read at most. Default 65536.
    #[serde(default = "default_max_size")]
    pub max_size: u64,
    /// Consecutive passing probes that make a backend healthy. Default 1 (as Caddy).
    #[serde(default = "one")]
    pub passes: u32,
    /// Consecutive failing probes that make a backend unhealthy. Default 1 (as Caddy).
    #[serde(default = "one")]
    pub fails: u32,
}

impl Default for Active {
    fn default() -> Self {
        Active {
            path: default_path(),
            headers: BTreeMap::new(),
            interval: default_interval(),
            timeout: default_timeout(),
            expect_status: default_expect_status(),
            expect_body: None,
            max_size: default_max_size(),
            passes: 1,
            fails: 1,
        }
    }
}

/// One header value or several, as Caddy's `http.Header` JSON has them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum HeaderValues {
    /// `"name": "value"`
    One(String),
    /// `"name": ["value", …]`
    Many(Vec<String>),
}

impl Active {
    /// The probe's extra headers as (lowercase name, value) pairs.
    pub fn header_pairs(&self) -> Vec<(String, String)> {
        let mut pairs = Vec::new();
        for (name, values) in &self.headers {
            let name = name.to_ascii_lowercase();
            match values {
                HeaderValues::One(v) => pairs.push((name, v.clone())),
                HeaderValues::Many(vs) => {
                    pairs.extend(vs.iter().map(|v| (name.clone(), v.clone())))
                }
            }
        }
        pairs
    }
}

/// Caddy's `health_checks.passive`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Passive {
    /// How long a failed request is remembered. Default 10 s.
    #[serde(
        default = "default_fail_duration",
        deserialize_with = "duration::deserialize"
    )]
    pub fail_duration: Duration,
    /// Remembered failures that eject a backend until enough of them expire. Default 3.
    #[serde(default = "default_max_fails")]
    pub max_fails: u32,
    /// Answers that count as failures. Default `[502, 503, 504]`, so a sidecar's 502 for a backend
    /// that never booted counts. (Caddy's default counts no status at all.)
    #[serde(default = "default_unhealthy_status")]
    pub unhealthy_status: Vec<StatusMatch>,
    /// A request this slow counts as failed, and counts the moment it is this late even while it
    /// is still waiting for its answer. Default: off.
    #[serde(default, deserialize_with = "duration::deserialize_option")]
    pub unhealthy_latency: Option<Duration>,
}

impl Default for Passive {
    fn default() -> Self {
        Passive {
            fail_duration: default_fail_duration(),
            max_fails: default_max_fails(),
            unhealthy_status: default_unhealthy_status(),
            unhealthy_latency: None,
        }
    }
}

fn default_route_header() -> String {
    "x-upcheck-upstream".into()
}
fn default_max_ejection_percent() -> u8 {
    50
}
fn default_weight() -> u32 {
    1
}
fn default_path() -> String {
    "/up".into()
}
fn default_interval() -> Duration {
    Duration::from_secs(10)
}
fn default_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_expect_status() -> StatusMatch {
    StatusMatch::Class(2)
}
fn default_max_size() -> u64 {
    65_536
}
fn one() -> u32 {
    1
}
fn default_fail_duration() -> Duration {
    Duration::from_secs(10)
}
fn default_max_fails() -> u32 {
    3
}
fn default_unhealthy_status() -> Vec<StatusMatch> {
    vec![
        StatusMatch::Code(502),
        StatusMatch::Code(503),
        StatusMatch::Code(504),
    ]
}

/// The largest `weight`.
pub const MAX_WEIGHT: u32 = 1000;
/// The largest `max_fails`: each remembered failure is kept, so memory stays bounded.
pub const MAX_FAILS_LIMIT: u32 = 1000;
/// The largest `passes` / `fails`.
pub const MAX_STREAK: u32 = 1000;

/// A configuration that cannot be run: where in the JSON, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// JSON path of the offending field, e.g. `health_checks.passive.max_fails`; empty for the
    /// document itself.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

fn fail(path: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        path: path.into(),
        reason: reason.into(),
    }
}

impl Config {
    /// Parses and checks a plugin configuration.
    pub fn parse(json: &[u8]) -> Result<Config, ConfigError> {
        if json.iter().all(u8::is_ascii_whitespace) {
            return Err(fail(
                "",
                "the plugin configuration is empty; it needs at least {\"upstreams\": [{\"name\": …}]}",
            ));
        }
        let mut de = serde_json::Deserializer::from_slice(json);
        let config: Config = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let reason = e.into_inner().to_string();
            fail(if path == "." { String::new() } else { path }, reason)
        })?;
        de.end().map_err(|e| fail("", e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The jitter in force: the configured one, or 10% of the interval.
    pub fn jitter(&self) -> Duration {
        self.jitter
            .unwrap_or(self.health_checks.active.interval / 10)
    }

    /// One probe round: a backend that goes down is noticed within this long.
    pub fn probe_round(&self) -> Duration {
        self.health_checks.active.interval + self.health_checks.active.timeout
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.upstreams.is_empty() {
            return Err(fail("upstreams", "needs at least one upstream"));
        }
        let mut names = HashSet::new();
        for (i, up) in self.upstreams.iter().enumerate() {
            let at = |field: &str| format!("upstreams[{i}].{field}");
            check_token(&at("name"), &up.name)?;
            if !names.insert(up.name.as_str()) {
                return Err(fail(at("name"), format!("{:?} is listed twice", up.name)));
            }
            if let Some(cluster) = &up.cluster {
                check_token(&at("cluster"), cluster)?;
            }
            if let Some(authority) = &up.authority {
                check_value(&at("authority"), authority)?;
                if authority.is_empty() {
                    return Err(fail(at("authority"), "must not be empty"));
                }
            }
            check_range(&at("weight"), up.weight, 1, MAX_WEIGHT)?;
        }
        check_token("route_header", &self.route_header)?;
        if self.route_header.starts_with(':') {
            return Err(fail("route_header", "must not be a pseudo-header"));
        }
        check_percent("max_ejection_percent", self.max_ejection_percent)?;
        if let Some(p) = self.min_healthy_percent {
            check_percent("min_healthy_percent", p)?;
        }

        let active = &self.health_checks.active;
        if !active.path.starts_with('/') {
            return Err(fail(
                "health_checks.active.path",
                format!("must start with '/', got {:?}", active.path),
            ));
        }
        check_value("health_checks.active.path", &active.path)?;
        for (name, values) in &active.headers {
            let at = format!("health_checks.active.headers.{name}");
            check_token(&at, name)?;
            let values: Vec<&String> = match values {
                HeaderValues::One(v) => vec![v],
                HeaderValues::Many(vs) => vs.iter().collect(),
            };
            for v in values {
                check_value(&at, v)?;
            }
        }
        if active.timeout >= active.interval {
            return Err(fail(
                "health_checks.active.timeout",
                format!(
                    "must be shorter than interval ({}), got {}",
                    duration::display(active.interval),
                    duration::display(active.timeout)
                ),
            ));
        }
        check_range("health_checks.active.passes", active.passes, 1, MAX_STREAK)?;
        check_range("health_checks.active.fails", active.fails, 1, MAX_STREAK)?;
        if active.max_size == 0 {
            return Err(fail(
                "health_checks.active.max_size",
                "must be at least 1, got 0",
            ));
        }
        if let Some(body) = &active.expect_body {
            if body.is_empty() {
                return Err(fail(
                    "health_checks.active.expect_body",
                    "must not be empty",
                ));
            }
            if body.len() as u64 > active.max_size {
                return Err(fail(
                    "health_checks.active.expect_body",
                    format!("is longer than max_size ({} bytes)", active.max_size),
                ));
            }
        }
        if self.jitter() >= active.interval {
            return Err(fail(
                "jitter",
                format!(
                    "must be shorter than health_checks.active.interval ({}), got {}",
                    duration::display(active.interval),
                    duration::display(self.jitter())
                ),
            ));
        }

        let passive = &self.health_checks.passive;
        check_range(
            "health_checks.passive.max_fails",
            passive.max_fails,
            1,
            MAX_FAILS_LIMIT,
        )?;
        Ok(())
    }
}

fn check_range(path: &str, value: u32, min: u32, max: u32) -> Result<(), ConfigError> {
    if value < min {
        Err(fail(path, format!("must be at least {min}, got {value}")))
    } else if value > max {
        Err(fail(path, format!("must be at most {max}, got {value}")))
    } else {
        Ok(())
    }
}

fn check_percent(path: &str, value: u8) -> Result<(), ConfigError> {
    if value > 100 {
        Err(fail(
            path,
            format!("must be a percentage 0-100, got {value}"),
        ))
    } else {
        Ok(())
    }
}

/// A header name or cluster name: a non-empty HTTP token.
fn check_token(path: &str, value: &str) -> Result<(), ConfigError> {
    if value.is_empty() {
        return Err(fail(path, "must not be empty"));
    }
    let bad = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~:".contains(*c)));
    match bad {
        Some(c) => Err(fail(
            path,
            format!("{value:?} contains {c:?}, which is not allowed"),
        )),
        None => Ok(()),
    }
}

/// A header value: no control characters that could split a header.
fn check_value(path: &str, value: &str) -> Result<(), ConfigError> {
    match value.chars().find(|c| c.is_control()) {
        Some(c) => Err(fail(path, format!("contains the control character {c:?}"))),
        None => Ok(()),
    }
}
