//! The plugin configuration: the operators' Caddy `health_checks` block, as written, plus the few
//! things a proxy-wasm filter needs that Caddy does not (which cluster a backend is, which header
//! carries the pick).
//!
//! Everything is checked before the filter starts: a config that parses is one the policy can run.
//! Errors name the JSON path and the reason (`health_checks.passive.max_fails: must be at least 1,
//! got 0`), because the operator reading Envoy's log has nothing else to go on. The document is
//! read as a JSON value and walked by hand rather than derived: the walk knows the path of every
//! field it reads, and it keeps `upcheck.wasm` small (see [`crate::json`]).

use crate::duration;
use crate::json::{self, Json, Number};
use crate::status::StatusMatch;
use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

/// The whole plugin configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The backends, in order. Required, at least one, names unique.
    pub upstreams: Vec<Upstream>,
    /// Active and passive checks. Default: both on with the seed values below.
    pub health_checks: HealthChecks,
    /// How the pick reaches the proxy. Default [`RoutingMode::Cluster`].
    pub routing: RoutingMode,
    /// Request header that carries the pick: the backend's cluster (`routing: "cluster"`, for
    /// Envoy's `cluster_header`) or its address (`routing: "host"`, for the `override_host` load
    /// balancing policy). Any client-supplied copy is removed first. Default `x-upcheck-upstream`.
    pub route_header: String,
    /// At most this percentage of the backends passing active checks may be passively ejected at
    /// once, by Envoy's rule: one more may go while (ejected + 1) / N stays within it, and never the
    /// last one. Default 50: one of two.
    pub max_ejection_percent: u8,
    /// When fewer than this percentage of all backends are routable, spread traffic over every
    /// backend that accepts connections (Envoy's panic threshold). Default: off.
    pub min_healthy_percent: Option<u8>,
    /// Probe times are spread by up to ± this much so backends are not probed in lockstep.
    /// Default: 10% of the active interval.
    pub jitter: Option<Duration>,
    /// Path the filter answers itself with every backend's health: plain text there, JSON at the
    /// same path plus `.json`; `null` turns it off. Default `/upcheck/status`.
    pub status_path: Option<String>,
    /// Whether clients other than loopback may read the status page. Default false: others get
    /// 403.
    pub status_public: bool,
}

/// How the pick reaches the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutingMode {
    /// The route header names the backend's cluster; the route uses `cluster_header`.
    Cluster,
    /// The route header names the backend's address within one pool cluster whose load
    /// balancing policy is `override_host`; a failed attempt can then be retried on another
    /// backend by the route's retry policy.
    Host,
}

/// One backend.
#[derive(Debug, Clone, PartialEq)]
pub struct Upstream {
    /// Its name, in logs, metrics and the status page. Required.
    pub name: String,
    /// The proxy cluster that probes are dispatched to and requests are routed to. Default: `name`.
    pub cluster: Option<String>,
    /// `:authority` of probes. Default: `name`.
    pub authority: Option<String>,
    /// Share of traffic relative to the others, 1 to 1000. Default 1.
    pub weight: u32,
    /// `host:port` of the backend in the pool cluster; required with `routing: "host"`, where it
    /// is what the route header carries. Default: none.
    pub address: Option<String>,
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

    /// What the route header carries for it under `routing`.
    pub fn route_value(&self, routing: RoutingMode) -> &str {
        match (routing, &self.address) {
            (RoutingMode::Host, Some(address)) => address,
            _ => self.cluster(),
        }
    }
}

/// Caddy's `health_checks` block.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HealthChecks {
    /// Probing. Default: on, `GET /up` every 10 s with a 5 s timeout.
    pub active: Active,
    /// Watching real traffic. Default: on, 3 failures within 10 s eject.
    pub passive: Passive,
    /// Comparing each backend with its peers. Default: on, with [`Outlier`]'s defaults.
    pub outlier: Outlier,
}

/// Caddy's `health_checks.active`.
#[derive(Debug, Clone, PartialEq)]
pub struct Active {
    /// Path probed with `GET` (Caddy's `uri` is accepted as the same field). Default `/up`.
    pub path: String,
    /// Extra probe request headers as (lowercase name, value); in JSON a name maps to one value
    /// or a list (Caddy's form). Default: none.
    pub headers: Vec<(String, String)>,
    /// Time between probes of one backend. Default 10 s.
    pub interval: Duration,
    /// A probe without an answer after this long failed; must be shorter than `interval`.
    /// Default 5 s.
    pub timeout: Duration,
    /// Status a passing probe answers: a code (`200`) or a class (`"2xx"`, or Caddy's `2`).
    /// Default 2xx.
    pub expect_status: StatusMatch,
    /// Substring a passing probe's body must contain, within the first `max_size` bytes
    /// (Caddy takes a regular expression here; upcheck a plain substring). Default: none.
    pub expect_body: Option<String>,
    /// Probe body bytes read at most. Default 65536.
    pub max_size: u64,
    /// Consecutive passing probes that make a backend healthy. Default 1 (as Caddy).
    pub passes: u32,
    /// Consecutive failing probes that make a backend unhealthy. Default 1 (as Caddy).
    pub fails: u32,
}

impl Default for Active {
    fn default() -> Self {
        Active {
            path: "/up".into(),
            headers: Vec::new(),
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            expect_status: StatusMatch::Class(2),
            expect_body: None,
            max_size: 65_536,
            passes: 1,
            fails: 1,
        }
    }
}

/// Caddy's `health_checks.passive`.
#[derive(Debug, Clone, PartialEq)]
pub struct Passive {
    /// How long a failed request is remembered. Default 10 s.
    pub fail_duration: Duration,
    /// Remembered failures that eject a backend until enough of them expire. Default 3.
    pub max_fails: u32,
    /// Answers that count as failures. Default `[502, 503, 504]`, so a sidecar's 502 for a backend
    /// that never booted counts. (Caddy's default counts no status at all.)
    pub unhealthy_status: Vec<StatusMatch>,
    /// A request this slow counts as failed, and counts the moment it is this late even while it
    /// is still waiting for its answer. Default: off.
    pub unhealthy_latency: Option<Duration>,
}

impl Default for Passive {
    fn default() -> Self {
        Passive {
            fail_duration: Duration::from_secs(10),
            max_fails: 3,
            unhealthy_status: vec![
                StatusMatch::Code(502),
                StatusMatch::Code(503),
                StatusMatch::Code(504),
            ],
            unhealthy_latency: None,
        }
    }
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

/// What a JSON value is, for "expected …, got …" messages. (Numbers are shown from their
/// integer value: formatting floats would double the size of the module for an error message.)
pub(crate) fn kind(v: &Json) -> String {
    match v {
        Json::Null => "null".into(),
        Json::Bool(b) => format!("the boolean {b}"),
        Json::Number(Number::Unsigned(u)) => format!("the number {u}"),
        Json::Number(Number::Negative(i)) => format!("the number {i}"),
        Json::Number(Number::Fraction) => "a fraction".into(),
        Json::Number(Number::Huge) => "a number too large for 64 bits".into(),
        Json::String(s) => format!("the string {s:?}"),
        Json::Array(_) => "a list".into(),
        Json::Object(_) => "an object".into(),
    }
}

/// A JSON object being read: it knows its path, and which fields were not read.
struct Object<'a> {
    path: String,
    fields: &'a [(String, Json)],
}

impl<'a> Object<'a> {
    fn new(
        path: &str,
        value: &'a Json,
        known: &'static [&'static str],
    ) -> Result<Self, ConfigError> {
        match value {
            Json::Object(fields) => {
                let object = Object {
                    path: path.to_owned(),
                    fields,
                };
                if let Some((unknown, _)) =
                    fields.iter().find(|(k, _)| !known.contains(&k.as_str()))
                {
                    return Err(fail(
                        object.at(unknown),
                        format!(
                            "unknown field `{unknown}`; known fields: {}",
                            known.join(", ")
                        ),
                    ));
                }
                Ok(object)
            }
            other => Err(fail(
                path,
                format!("expected an object, got {}", kind(other)),
            )),
        }
    }

    fn at(&self, field: &str) -> String {
        if self.path.is_empty() {
            field.to_owned()
        } else {
            format!("{}.{field}", self.path)
        }
    }

    /// A field that is present and not null.
    fn get(&self, field: &str) -> Option<(String, &'a Json)> {
        match self.fields.iter().find(|(k, _)| k == field).map(|(_, v)| v) {
            None | Some(Json::Null) => None,
            Some(v) => Some((self.at(field), v)),
        }
    }

    fn read<T>(
        &self,
        field: &str,
        parse: impl FnOnce(&str, &Json) -> Result<T, ConfigError>,
    ) -> Result<Option<T>, ConfigError> {
        self.get(field).map(|(path, v)| parse(&path, v)).transpose()
    }
}

fn string(path: &str, v: &Json) -> Result<String, ConfigError> {
    match v {
        Json::String(s) => Ok(s.clone()),
        other => Err(fail(
            path,
            format!("expected a string, got {}", kind(other)),
        )),
    }
}

fn whole(path: &str, v: &Json) -> Result<u64, ConfigError> {
    match v {
        Json::Number(Number::Unsigned(n)) => Ok(*n),
        _ => Err(fail(
            path,
            format!("expected a whole number, got {}", kind(v)),
        )),
    }
}

fn count(path: &str, v: &Json, min: u32, max: u32) -> Result<u32, ConfigError> {
    let n = whole(path, v)?;
    if n < u64::from(min) {
        Err(fail(path, format!("must be at least {min}, got {n}")))
    } else if n > u64::from(max) {
        Err(fail(path, format!("must be at most {max}, got {n}")))
    } else {
        u32::try_from(n).map_err(|_| fail(path, format!("must be at most {max}, got {n}")))
    }
}

fn percent(path: &str, v: &Json) -> Result<u8, ConfigError> {
    let n = whole(path, v)?;
    match u8::try_from(n) {
        Ok(p) if p <= 100 => Ok(p),
        _ => Err(fail(path, format!("must be a percentage 0-100, got {n}"))),
    }
}

fn positive_duration(path: &str, v: &Json) -> Result<Duration, ConfigError> {
    duration::from_json(v).map_err(|reason| fail(path, reason))
}

fn status(path: &str, v: &Json) -> Result<StatusMatch, ConfigError> {
    StatusMatch::from_json(v).map_err(|reason| fail(path, reason))
}

fn list<T>(
    path: &str,
    v: &Json,
    item: impl Fn(&str, &Json) -> Result<T, ConfigError>,
) -> Result<Vec<T>, ConfigError> {
    match v {
        Json::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, x)| item(&format!("{path}[{i}]"), x))
            .collect(),
        other => Err(fail(path, format!("expected a list, got {}", kind(other)))),
    }
}

/// The index of the first item equal to an earlier one (`None` items never repeat).
fn first_repeat<'a>(items: impl Iterator<Item = Option<&'a str>>) -> Option<usize> {
    let mut seen = HashSet::new();
    items
        .enumerate()
        .find(|(_, item)| item.is_some_and(|s| !seen.insert(s)))
        .map(|(i, _)| i)
}

/// A header name or cluster name: a non-empty HTTP token.
fn token(path: &str, value: &str) -> Result<(), ConfigError> {
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
fn header_value(path: &str, value: &str) -> Result<(), ConfigError> {
    match value.chars().find(|c| c.is_control()) {
        Some(c) => Err(fail(path, format!("contains the control character {c:?}"))),
        None => Ok(()),
    }
}

/// A `host:port` address: a host name, IPv4 address or bracketed IPv6 address, and a port.
fn address(path: &str, v: &Json) -> Result<String, ConfigError> {
    let text = string(path, v)?;
    let bad = || fail(path, format!("expected host:port, got {text:?}"));
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        !v6.is_empty()
            && v6
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
    } else {
        !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    };
    match port.parse::<u16>() {
        Ok(p) if p > 0 && host_ok => Ok(text),
        _ => Err(bad()),
    }
}

fn upstream(path: &str, v: &Json) -> Result<Upstream, ConfigError> {
    let o = Object::new(
        path,
        v,
        &["name", "cluster", "authority", "weight", "address"],
    )?;
    let name = o
        .read("name", string)?
        .ok_or_else(|| fail(o.at("name"), "missing; every upstream needs a name"))?;
    token(&o.at("name"), &name)?;
    let cluster = o.read("cluster", |p, v| {
        let c = string(p, v)?;
        token(p, &c).map(|()| c)
    })?;
    let authority = o.read("authority", |p, v| {
        let a = string(p, v)?;
        if a.is_empty() {
            return Err(fail(p, "must not be empty"));
        }
        header_value(p, &a).map(|()| a)
    })?;
    let weight = o
        .read("weight", |p, v| count(p, v, 1, MAX_WEIGHT))?
        .unwrap_or(1);
    Ok(Upstream {
        name,
        cluster,
        authority,
        weight,
        address: o.read("address", address)?,
    })
}

fn headers(path: &str, v: &Json) -> Result<Vec<(String, String)>, ConfigError> {
    let Json::Object(fields) = v else {
        return Err(fail(path, format!("expected an object, got {}", kind(v))));
    };
    let mut pairs = Vec::new();
    for (name, values) in fields {
        let at = format!("{path}.{name}");
        token(&at, name)?;
        let values = match values {
            Json::Array(_) => list(&at, values, string)?,
            other => vec![string(&at, other)?],
        };
        for value in values {
            header_value(&at, &value)?;
            pairs.push((name.to_ascii_lowercase(), value));
        }
    }
    Ok(pairs)
}

fn active(path: &str, v: &Json) -> Result<Active, ConfigError> {
    let o = Object::new(
        path,
        v,
        &[
            "path",
            "uri",
            "headers",
            "interval",
            "timeout",
            "expect_status",
            "expect_body",
            "max_size",
            "passes",
            "fails",
        ],
    )?;
    let d = Active::default();
    let probe_path = match (o.read("path", string)?, o.read("uri", string)?) {
        (Some(_), Some(_)) => return Err(fail(o.at("uri"), "give `path` or `uri`, not both")),
        (Some(p), None) => (o.at("path"), p),
        (None, Some(u)) => (o.at("uri"), u),
        (None, None) => (o.at("path"), d.path),
    };
    if !probe_path.1.starts_with('/') {
        return Err(fail(
            probe_path.0,
            format!("must start with '/', got {:?}", probe_path.1),
        ));
    }
    header_value(&probe_path.0, &probe_path.1)?;
    let max_size = match o.read("max_size", whole)? {
        Some(0) => return Err(fail(o.at("max_size"), "must be at least 1, got 0")),
        Some(n) => n,
        None => d.max_size,
    };
    let expect_body = o.read("expect_body", string)?;
    if let Some(body) = &expect_body {
        if body.is_empty() {
            return Err(fail(o.at("expect_body"), "must not be empty"));
        }
        if body.len() as u64 > max_size {
            return Err(fail(
                o.at("expect_body"),
                format!("is longer than max_size ({max_size} bytes)"),
            ));
        }
    }
    let a = Active {
        path: probe_path.1,
        headers: o.read("headers", headers)?.unwrap_or_default(),
        interval: o.read("interval", positive_duration)?.unwrap_or(d.interval),
        timeout: o.read("timeout", positive_duration)?.unwrap_or(d.timeout),
        expect_status: o.read("expect_status", status)?.unwrap_or(d.expect_status),
        expect_body,
        max_size,
        passes: o
            .read("passes", |p, v| count(p, v, 1, MAX_STREAK))?
            .unwrap_or(1),
        fails: o
            .read("fails", |p, v| count(p, v, 1, MAX_STREAK))?
            .unwrap_or(1),
    };
    if a.timeout >= a.interval {
        return Err(fail(
            o.at("timeout"),
            format!(
                "must be shorter than interval ({}), got {}",
                duration::display(a.interval),
                duration::display(a.timeout)
            ),
        ));
    }
    Ok(a)
}

fn passive(path: &str, v: &Json) -> Result<Passive, ConfigError> {
    let o = Object::new(
        path,
        v,
        &[
            "fail_duration",
            "max_fails",
            "unhealthy_status",
            "unhealthy_latency",
        ],
    )?;
    let d = Passive::default();
    Ok(Passive {
        fail_duration: o
            .read("fail_duration", positive_duration)?
            .unwrap_or(d.fail_duration),
        max_fails: o
            .read("max_fails", |p, v| count(p, v, 1, MAX_FAILS_LIMIT))?
            .unwrap_or(d.max_fails),
        unhealthy_status: o
            .read("unhealthy_status", |p, v| list(p, v, status))?
            .unwrap_or(d.unhealthy_status),
        unhealthy_latency: o.read("unhealthy_latency", positive_duration)?,
    })
}

fn health_checks(path: &str, v: &Json) -> Result<HealthChecks, ConfigError> {
    let o = Object::new(path, v, &["active", "passive"])?;
    Ok(HealthChecks {
        active: o.read("active", active)?.unwrap_or_default(),
        passive: o.read("passive", passive)?.unwrap_or_default(),
        outlier: Outlier::default(),
    })
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
        let document = json::parse(json).map_err(|e| fail("", format!("not valid JSON: {e}")))?;
        let o = Object::new(
            "",
            &document,
            &[
                "upstreams",
                "health_checks",
                "routing",
                "route_header",
                "max_ejection_percent",
                "min_healthy_percent",
                "jitter",
                "status_path",
                "status_public",
            ],
        )?;
        let upstreams = o
            .read("upstreams", |p, v| list(p, v, upstream))?
            .ok_or_else(|| {
                fail(
                    "upstreams",
                    "missing; list the backends, e.g. [{\"name\": \"app1\"}]",
                )
            })?;
        if upstreams.is_empty() {
            return Err(fail("upstreams", "needs at least one upstream"));
        }
        if let Some(i) = first_repeat(upstreams.iter().map(|u| Some(u.name.as_str()))) {
            let name = upstreams
                .get(i)
                .map(|u| u.name.as_str())
                .unwrap_or_default();
            return Err(fail(
                format!("upstreams[{i}].name"),
                format!("{name:?} is listed twice"),
            ));
        }
        let routing = o
            .read("routing", |p, v| match string(p, v)?.as_str() {
                "cluster" => Ok(RoutingMode::Cluster),
                "host" => Ok(RoutingMode::Host),
                other => Err(fail(
                    p,
                    format!("expected \"cluster\" or \"host\", got {other:?}"),
                )),
            })?
            .unwrap_or(RoutingMode::Cluster);
        if routing == RoutingMode::Host {
            if let Some(i) = upstreams.iter().position(|u| u.address.is_none()) {
                return Err(fail(
                    format!("upstreams[{i}].address"),
                    "missing; `routing: \"host\"` routes by address",
                ));
            }
            if let Some(i) = first_repeat(upstreams.iter().map(|u| u.address.as_deref())) {
                let a = upstreams
                    .get(i)
                    .and_then(|u| u.address.as_deref())
                    .unwrap_or_default();
                return Err(fail(
                    format!("upstreams[{i}].address"),
                    format!("{a:?} is another upstream's address too"),
                ));
            }
        }
        let route_header = o
            .read("route_header", |p, v| {
                let h = string(p, v)?;
                token(p, &h)?;
                if h.starts_with(':') {
                    return Err(fail(p, "must not be a pseudo-header"));
                }
                Ok(h)
            })?
            .unwrap_or_else(|| "x-upcheck-upstream".into());
        let config = Config {
            upstreams,
            routing,
            health_checks: o.read("health_checks", health_checks)?.unwrap_or_default(),
            route_header,
            max_ejection_percent: o.read("max_ejection_percent", percent)?.unwrap_or(50),
            min_healthy_percent: o.read("min_healthy_percent", percent)?,
            jitter: o.read("jitter", positive_duration)?,
            status_path: match document.get("status_path") {
                Some(Json::Null) => None,
                _ => Some(
                    o.read("status_path", |p, v| {
                        let path = string(p, v)?;
                        if !path.starts_with('/') || path.contains(['?', '#']) {
                            return Err(fail(
                                p,
                                format!("must be a path like \"/upcheck/status\", got {path:?}"),
                            ));
                        }
                        header_value(p, &path).map(|()| path)
                    })?
                    .unwrap_or_else(|| "/upcheck/status".into()),
                ),
            },
            status_public: o
                .read("status_public", |p, v| match v {
                    Json::Bool(b) => Ok(*b),
                    other => Err(fail(
                        p,
                        format!("expected true or false, got {}", kind(other)),
                    )),
                })?
                .unwrap_or(false),
        };
        let interval = config.health_checks.active.interval;
        if config.jitter() >= interval {
            return Err(fail(
                "jitter",
                format!(
                    "must be shorter than health_checks.active.interval ({}), got {}",
                    duration::display(interval),
                    duration::display(config.jitter())
                ),
            ));
        }
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
}

/// `health_checks.outlier`: peer-relative outlier detection (not a Caddy field).
#[derive(Debug, Clone, PartialEq)]
pub struct Outlier {
    /// Whether backends are compared with their peers at all. Default true.
    pub enabled: bool,
    /// How far back request outcomes are compared. Default 10 s.
    pub window: Duration,
    /// Failed requests a backend must have in the window before it can be judged failing. Default 5.
    pub min_failures: u32,
    /// Requests its peers must have had in the window, together, before a backend is compared with them;
    /// also the completed requests a backend needs before its latency is judged. Default 5.
    pub min_requests: u32,
    /// How many percentage points a backend's failure share must exceed its peers' by. Default 50.
    pub failure_gap: u8,
    /// How many times slower than its peers a backend must be to be judged slow or stalled. Default 4.
    pub latency_factor: u32,
    /// A slow backend's typical latency must be at least this long. Default 250 ms.
    pub min_latency: Duration,
    /// A request still in flight counts as stalled after at least this long. Default 500 ms.
    pub stall_after: Duration,
    /// The first ejection's length; each repeat doubles it. Default 30 s.
    pub ejection: Duration,
    /// The longest ejection. Default 5 min.
    pub max_ejection: Duration,
}

impl Default for Outlier {
    fn default() -> Self {
        Outlier {
            enabled: true,
            window: Duration::from_secs(10),
            min_failures: 5,
            min_requests: 5,
            failure_gap: 50,
            latency_factor: 4,
            min_latency: Duration::from_millis(250),
            stall_after: Duration::from_millis(500),
            ejection: Duration::from_secs(30),
            max_ejection: Duration::from_secs(300),
        }
    }
}
