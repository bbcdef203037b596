//! The plugin configuration: the operators' Caddy `health_checks` block, as written, plus the few
//! things a proxy-wasm filter needs that Caddy does not (which cluster a backend is, which header
//! carries the pick) and upcheck's own outlier detection.
//!
//! Everything is checked before the filter starts: a config that parses is one the policy can run.
//! Errors name the JSON path and the reason (`health_checks.passive.max_fails: must be at least 1,
//! got 0`, `upstreams[1].name: "app1" is listed twice`), because the operator reading Envoy's log
//! has nothing else to go on. The document is read by serde_json member by member, each field
//! through a reader that checks it where it stands (one list of arms per object, `members!`,
//! which is also where the names an object takes come from); an error records the member or item
//! it leaves on its way out, so it knows its path. What spans fields (a timeout shorter than its
//! interval, names unique) is checked once the document is read, and then every default is
//! filled in, so a parsed [`Config`] holds what is in force ([`Config::effective_json`] prints
//! it). Every object, every list of values and every scalar is read by one reader each: each
//! reader carries a copy of serde_json's value parser into the module, which every worker
//! compiles.
//!
//! - **Unknown and repeated fields are errors**: a config with two `max_fails` is a mistake, not a
//!   choice. Probe header names repeat when they differ only in case.
//! - **`null` turns off a field that can be off**: `min_healthy_percent`,
//!   `upstreams[].address`, `health_checks.active.expect_body` and
//!   `health_checks.passive.unhealthy_latency`. On any other field `null` is an error naming the
//!   field; leave the field out for its default. `jitter` cannot be off (backends probed in
//!   lockstep is what it prevents), and outlier detection is turned off with
//!   `"outlier": {"enabled": false}`.
//! - **Nesting is bounded by the schema**: nothing nests deeper than a list of values in
//!   `health_checks.active.headers` (five levels of brackets). A list or object where the schema has something else is
//!   refused at once or skipped without recursion, and serde_json's recursion limit (128) stands
//!   behind that, so hostile input cannot exhaust the stack (which would kill the VM).
//! - **One document, two roles**: a configuration routes the pool's traffic (the default) or,
//!   with `"role": "status_page"`, serves the pool's status page on a listener of its own and
//!   does nothing else ([`Role`]). The page's fields (`status_path`, `status_public`) belong to
//!   the second and are refused in the first, so a page that used to be on the traffic listener
//!   is not silently gone.
//! - **Limits** ([`MAX_UPSTREAMS`], [`MAX_NAME_LEN`], [`MAX_VALUE_LEN`], …) bound what one document
//!   can make every worker hold, and every check is linear in the size of the document.

use crate::duration;
use crate::status_match::StatusMatch;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserializer, Serialize, Serializer};
use std::cell::Cell;
use std::collections::HashSet;
use std::fmt::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// The whole plugin configuration.
///
/// Read it with [`Config::parse`], which checks each field where it stands, then what spans
/// fields, and fills the defaults in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// The backends, in order. Required, at least one, at most [`MAX_UPSTREAMS`], names unique.
    pub upstreams: Vec<Upstream>,
    /// Active and passive checks and outlier detection. Default: all on with the seed values
    /// below.
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
    /// backend that accepts connections (Envoy's panic threshold). Default: off (`null`).
    pub min_healthy_percent: Option<u8>,
    /// Probe times are spread by up to ± this much so backends are not probed in lockstep.
    /// Default: 10% of the active interval, which [`Config::parse`] fills in; cannot be off.
    #[serde(serialize_with = "duration::optional::serialize")]
    pub jitter: Option<Duration>,
    /// What the filter does with the pool: route its traffic, or serve its status page. Default
    /// [`Role::Traffic`]. In JSON `role` is a member of the top level, and so are the page's
    /// `status_path` and `status_public`.
    #[serde(flatten)]
    pub role: Role,
}

/// What a filter configured with a pool does with it.
///
/// The page is not served where the traffic goes: a traffic filter that answered it would read
/// every request's `:path` to find the few asking for it. A second listener (on loopback, which
/// also closes the page to other machines) runs the same module in the same `vm_id` with the
/// pool's configuration and `"role": "status_page"`; it shows what the traffic filters share.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Role {
    /// Picks a backend for each request, watches its answer, probes (the VM holding the lease)
    /// and shares what it learns. Serves no page. The default (`"role": "traffic"`).
    #[default]
    Traffic,
    /// Answers the status page and nothing else (404 for any other path): it reads the tables
    /// the pool's traffic filters share each time the page is asked for, and never probes,
    /// announces, routes or writes shared data (`"role": "status_page"`).
    StatusPage(StatusPage),
}

/// The status page, as a [`Role::StatusPage`] configuration serves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusPage {
    /// Where it is: plain text at this path, JSON at the path plus `.json`, HTML plus `.html`
    /// (JSON `status_path`). Default `/upcheck/status`.
    #[serde(rename = "status_path")]
    pub path: String,
    /// Whether connections made to an address other than loopback may read it (JSON
    /// `status_public`). Default false: they get 403.
    #[serde(rename = "status_public")]
    pub public: bool,
}

impl Default for StatusPage {
    fn default() -> Self {
        StatusPage {
            path: "/upcheck/status".into(),
            public: false,
        }
    }
}

/// How the pick reaches the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RoutingMode {
    /// The route header names the backend's cluster; the route uses `cluster_header`.
    #[default]
    Cluster,
    /// The route header names the backend's address within one pool cluster whose load
    /// balancing policy is `override_host`; a failed attempt can then be retried on another
    /// backend by the route's retry policy.
    Host,
}

/// One backend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Upstream {
    /// Its name, in logs, metrics and the status page: an HTTP token (`:` allowed), at most
    /// [`MAX_NAME_LEN`] bytes. Required.
    pub name: String,
    /// The proxy cluster that probes are dispatched to and requests are routed to. Default:
    /// `name`, which [`Config::parse`] fills in.
    pub cluster: Option<String>,
    /// `:authority` of probes: `host[:port]`. Default: `name` (which must then be a valid
    /// authority), filled in by [`Config::parse`].
    pub authority: Option<String>,
    /// Share of traffic relative to the others, 1 to [`MAX_WEIGHT`]. Default 1.
    pub weight: u32,
    /// `ip:port` of the backend in the pool cluster, kept in the form Envoy reports addresses
    /// (`[0:0::1]:80` becomes `[::1]:80`); required with `routing: "host"`, where it is what the
    /// route header carries. Default: none (`null`).
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

    /// Where its state lives in the process-wide tables: its name, cluster and address. Pools
    /// that share a `vm_id` share a backend's state only when all three agree, that is, when it
    /// is the same backend.
    pub fn key(&self) -> String {
        match &self.address {
            Some(address) => format!("{}@{}@{address}", self.name, self.cluster()),
            None => format!("{}@{}", self.name, self.cluster()),
        }
    }

    /// What the route header carries for it under `routing`.
    pub fn route_value(&self, routing: RoutingMode) -> &str {
        match (routing, &self.address) {
            (RoutingMode::Host, Some(address)) => address,
            _ => self.cluster(),
        }
    }
}

/// Caddy's `health_checks` block, plus upcheck's `outlier`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct HealthChecks {
    /// Probing. Default: on, `GET /up` every 10 s with a 5 s timeout.
    pub active: Active,
    /// Watching real traffic. Default: on, 3 failures within 10 s eject.
    pub passive: Passive,
    /// Comparing each backend with its peers. Default: on.
    pub outlier: Outlier,
}

/// Caddy's `health_checks.active`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Active {
    /// Path probed with `GET` (Caddy's `uri` is accepted as the same field): starts with `/`,
    /// visible ASCII, at most [`MAX_VALUE_LEN`] bytes. Default `/up`.
    pub path: String,
    /// Extra probe request headers as (lowercase name, value); in JSON a name maps to one value
    /// or a list (Caddy's form). Not pseudo-headers and not `host` (the probe's host is the
    /// upstream's `authority`); at most [`MAX_PROBE_HEADERS`]. Default: none.
    #[serde(serialize_with = "serialize_headers")]
    pub headers: Vec<(String, String)>,
    /// Time between probes of one backend, [`MIN_PROBE_DURATION`] to [`MAX_PROBE_DURATION`].
    /// Default 10 s.
    #[serde(serialize_with = "duration::serialize")]
    pub interval: Duration,
    /// A probe without an answer after this long failed; must be shorter than `interval`, and
    /// [`MIN_PROBE_DURATION`] to [`MAX_PROBE_DURATION`]. Envoy takes it in whole milliseconds,
    /// so a fraction of a millisecond is rounded up (`"1.2ms"` is 2 ms). Default 5 s.
    #[serde(serialize_with = "duration::serialize")]
    pub timeout: Duration,
    /// Status a passing probe answers: a code (`200`) or a class (`"2xx"`, or Caddy's `2`).
    /// Default 2xx.
    pub expect_status: StatusMatch,
    /// Substring a passing probe's body must contain, within the first `max_size` bytes
    /// (Caddy takes a regular expression here; upcheck a plain substring); at most
    /// [`MAX_EXPECT_BODY_LEN`] bytes. Default: none (`null`).
    pub expect_body: Option<String>,
    /// Probe body bytes read at most, 1 to [`MAX_PROBE_BODY`]. Default 65536.
    pub max_size: u64,
    /// Consecutive passing probes that make a backend healthy, 1 to [`MAX_STREAK`]. Default 1
    /// (as Caddy).
    pub passes: u32,
    /// Consecutive failing probes that make a backend unhealthy, 1 to [`MAX_STREAK`]. Default 1
    /// (as Caddy).
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
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Passive {
    /// How long a failed request is remembered. Default 10 s.
    #[serde(serialize_with = "duration::serialize")]
    pub fail_duration: Duration,
    /// Remembered failures that eject a backend until enough of them expire, 1 to
    /// [`MAX_FAILS_LIMIT`]. Default 3.
    pub max_fails: u32,
    /// Answers that count as failures, at most [`MAX_UNHEALTHY_STATUSES`]. Default
    /// `[502, 503, 504]`, so a sidecar's 502 for a backend that never booted counts. (Caddy's
    /// default counts no status at all.)
    pub unhealthy_status: Vec<StatusMatch>,
    /// A request this slow counts as failed, and counts the moment it is this late even while it
    /// is still waiting for its answer. Default: off (`null`).
    #[serde(serialize_with = "duration::optional::serialize")]
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

/// `health_checks.outlier`: peer-relative outlier detection (not a Caddy field).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outlier {
    /// Whether backends are compared with their peers at all. Default true.
    pub enabled: bool,
    /// How far back request outcomes are compared. Default 10 s.
    #[serde(serialize_with = "duration::serialize")]
    pub window: Duration,
    /// Failed requests a backend must have in the window before it can be judged failing. Default 5 (1-1000).
    pub min_failures: u32,
    /// Requests its peers must have had in the window, together, before a backend is compared with them;
    /// also the completed requests a backend needs before its latency is judged. Default 5 (1-100000).
    pub min_requests: u32,
    /// How many percentage points a backend's failure share must exceed its peers' by. Default 50 (1-100).
    pub failure_gap: u8,
    /// How many times slower than its peers a backend must be to be judged slow or stalled. Default 4 (2-1000).
    pub latency_factor: u32,
    /// A slow backend's typical latency must be at least this long. Default 250 ms.
    #[serde(serialize_with = "duration::serialize")]
    pub min_latency: Duration,
    /// A request still in flight counts as stalled after at least this long. Default 500 ms.
    #[serde(serialize_with = "duration::serialize")]
    pub stall_after: Duration,
    /// The first ejection's length; each repeat doubles it. Default 30 s.
    #[serde(serialize_with = "duration::serialize")]
    pub ejection: Duration,
    /// The longest ejection. Default 5 min; at least `ejection`.
    #[serde(serialize_with = "duration::serialize")]
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

/// The largest `weight`.
pub const MAX_WEIGHT: u32 = 1000;
/// The largest `max_fails`: each remembered failure is kept, so memory stays bounded.
pub const MAX_FAILS_LIMIT: u32 = 1000;
/// The largest `passes` / `fails`.
pub const MAX_STREAK: u32 = 1000;
/// The most upstreams one configuration may list: each is probed, and kept on every worker.
pub const MAX_UPSTREAMS: usize = 10_000;
/// The longest upstream name, cluster, probe header name or `route_header`, in bytes.
pub const MAX_NAME_LEN: usize = 128;
/// The longest probe header value, probe path, `status_path` or authority, in bytes.
pub const MAX_VALUE_LEN: usize = 4096;
/// The most probe headers; each value of a header given a list counts once.
pub const MAX_PROBE_HEADERS: usize = 64;
/// The largest `max_size`, 16 MiB: that much of a probe's body may be buffered.
pub const MAX_PROBE_BODY: u32 = 16 * 1024 * 1024;
/// The longest `expect_body`, in bytes.
pub const MAX_EXPECT_BODY_LEN: usize = 4096;
/// The most entries in `unhealthy_status`: every answer is compared with each.
pub const MAX_UNHEALTHY_STATUSES: usize = 100;
/// The shortest probe `interval` and `timeout`: Envoy takes the timeout in whole milliseconds,
/// and 0 would mean none.
pub const MIN_PROBE_DURATION: Duration = Duration::from_millis(1);
/// The longest probe `interval` and `timeout`: Envoy takes the timeout as 32-bit milliseconds
/// (about 49.7 days).
pub const MAX_PROBE_DURATION: Duration = Duration::from_millis(4_294_967_295);

/// A configuration that cannot be run: where in the JSON, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// JSON path of the offending field, e.g. `health_checks.passive.max_fails` or
    /// `upstreams[1].name`; empty for the document itself.
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
    /// Parses and checks a plugin configuration, and fills every default in (`cluster`,
    /// `authority`, `jitter` included).
    pub fn parse(json: &[u8]) -> Result<Config, ConfigError> {
        if json.iter().all(u8::is_ascii_whitespace) {
            return Err(fail(
                "",
                "the plugin configuration is empty; it needs at least {\"upstreams\": [{\"name\": …}]}",
            ));
        }
        let mut reader = serde_json::Deserializer::from_slice(json);
        let trail = Trail::default();
        let mut draft = Draft::default();
        let read = Expect(Fill::new(Object::Config(&mut draft), &trail))
            .deserialize(&mut reader)
            .and_then(|()| reader.end());
        match read {
            Ok(()) => draft.config()?.checked(),
            Err(e) => Err(read_error(&e, trail)),
        }
    }

    /// The status page this configuration serves, if its role is to serve one.
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
    pub fn jitter(&self) -> Duration {
        self.jitter
            .unwrap_or(self.health_checks.active.interval / 10)
    }

    /// One probe round: a backend that goes down is noticed within this long.
    pub fn probe_round(&self) -> Duration {
        self.health_checks.active.interval + self.health_checks.active.timeout
    }

    /// What spans fields, checked once every field is read; then the defaults filled in.
    fn checked(mut self) -> Result<Config, ConfigError> {
        self.check_upstreams()?;
        let active = &self.health_checks.active;
        if active.timeout >= active.interval {
            return Err(fail(
                "health_checks.active.timeout",
                format!(
                    "must be shorter than interval ({}), got {}",
                    duration::exact(active.interval),
                    duration::exact(active.timeout)
                ),
            ));
        }
        if let Some(body) = &active.expect_body {
            if body.len() as u64 > active.max_size {
                return Err(fail(
                    "health_checks.active.expect_body",
                    format!("is longer than max_size ({} bytes)", active.max_size),
                ));
            }
        }
        let outlier = &self.health_checks.outlier;
        if outlier.max_ejection < outlier.ejection {
            return Err(fail(
                "health_checks.outlier.max_ejection",
                format!(
                    "must be at least ejection ({}), got {}",
                    duration::exact(outlier.ejection),
                    duration::exact(outlier.max_ejection)
                ),
            ));
        }
        if self.jitter() >= active.interval {
            return Err(fail(
                "jitter",
                format!(
                    "must be shorter than health_checks.active.interval ({}), got {}",
                    duration::exact(active.interval),
                    duration::exact(self.jitter())
                ),
            ));
        }
        self.jitter = Some(self.jitter());
        for u in &mut self.upstreams {
            u.cluster = Some(u.cluster().to_owned());
            u.authority = Some(u.authority().to_owned());
        }
        Ok(self)
    }

    /// Every upstream named, once; its authority valid; under host routing, its own address.
    fn check_upstreams(&self) -> Result<(), ConfigError> {
        if self.upstreams.is_empty() {
            return Err(fail(
                "upstreams",
                "missing; list the backends, e.g. [{\"name\": \"app1\"}]",
            ));
        }
        let mut names = HashSet::new();
        let mut addresses = HashSet::new();
        for (i, u) in self.upstreams.iter().enumerate() {
            let at = |field: &str| format!("upstreams[{i}].{field}");
            if u.name.is_empty() {
                return Err(fail(at("name"), "missing; every upstream needs a name"));
            }
            if !names.insert(u.name.as_str()) {
                return Err(fail(at("name"), format!("{:?} is listed twice", u.name)));
            }
            if u.authority.is_none() {
                authority(u.name.clone()).map_err(|reason| {
                    fail(
                        at("authority"),
                        format!("missing, and the name cannot stand in for it: {reason}"),
                    )
                })?;
            }
            if self.routing == RoutingMode::Host {
                let Some(address) = &u.address else {
                    return Err(fail(
                        at("address"),
                        "missing; `routing: \"host\"` routes by address",
                    ));
                };
                if !addresses.insert(address.as_str()) {
                    return Err(fail(
                        at("address"),
                        format!("{address:?} is another upstream's address too"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A read error as a [`ConfigError`]: a broken document says where (line and column); a field
/// that is wrong says its path instead.
fn read_error(e: &serde_json::Error, trail: Trail) -> ConfigError {
    if !e.is_data() {
        return fail("", format!("not valid JSON: {e}"));
    }
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    let reason = text.strip_suffix(&position).unwrap_or(&text);
    fail(trail.path(), reason)
}

/// Where a read error arose, recorded step by step as the error leaves each member and item
/// (innermost first), so that it can name its JSON path: serde_json's errors carry only a
/// message and a position.
#[derive(Default)]
struct Trail(Cell<Vec<Step>>);

/// One step into the document.
enum Step {
    /// An object's member, by name.
    Member(String),
    /// A list's item, by index.
    Item(usize),
}

impl Trail {
    /// `read` as it is; if it failed, `step` is where.
    fn at<T, E>(&self, step: Step, read: Result<T, E>) -> Result<T, E> {
        if read.is_err() {
            self.push(step);
        }
        read
    }

    fn push(&self, step: Step) {
        let mut steps = self.0.take();
        steps.push(step);
        self.0.set(steps);
    }

    /// The path as errors write it: `health_checks.passive.max_fails`, `upstreams[1].name`;
    /// empty for the document itself.
    fn path(self) -> String {
        let mut out = String::new();
        for step in self.0.into_inner().iter().rev() {
            match step {
                Step::Item(index) => {
                    let _ = write!(out, "[{index}]");
                }
                Step::Member(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                }
            }
        }
        out
    }
}

/// What a field held, as an error message names it. (Numbers with a fraction are not shown:
/// formatting floats would grow the module for an error message.)
pub(crate) enum Found {
    Null,
    Bool(bool),
    Unsigned(u64),
    Negative(i64),
    /// A number with a fraction or an exponent.
    Fraction,
    /// A whole number too large for 64 bits.
    Huge,
    Text(String),
    List,
    Object,
}

impl Found {
    /// A JSON integer serde_json read as signed.
    fn signed(v: i64) -> Found {
        u64::try_from(v).map_or(Found::Negative(v), Found::Unsigned)
    }

    /// A JSON number serde_json read as a float.
    fn float(v: f64) -> Found {
        // serde_json hands over a whole number past 64 bits as a float.
        let huge = v.fract() == 0.0
            && !(-9.223_372_036_854_776e18..1.844_674_407_370_955_2e19).contains(&v);
        if huge {
            Found::Huge
        } else {
            Found::Fraction
        }
    }
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Found::Null => f.write_str("null"),
            Found::Bool(b) => write!(f, "the boolean {b}"),
            Found::Unsigned(n) => write!(f, "the number {n}"),
            Found::Negative(n) => write!(f, "the number {n}"),
            Found::Fraction => f.write_str("a fraction"),
            Found::Huge => f.write_str("a number too large for 64 bits"),
            Found::Text(s) => write!(f, "the string {s:?}"),
            Found::List => f.write_str("a list"),
            Found::Object => f.write_str("an object"),
        }
    }
}

/// "expected …, got …"; for `null`, also what `null` means.
pub(crate) fn mismatch(expected: &str, found: &Found) -> String {
    match found {
        Found::Null => format!(
            "expected {expected}, got null; null turns off only a field that can be off, so leave \
             this one out for its default"
        ),
        other => format!("expected {expected}, got {other}"),
    }
}

/// `null` is off; anything else goes through `convert`.
pub(crate) fn or_off<T>(
    found: Found,
    convert: impl FnOnce(Found) -> Result<T, String>,
) -> Result<Option<T>, String> {
    match found {
        Found::Null => Ok(None),
        other => convert(other).map(Some),
    }
}

/// Reads a field that holds one value and converts it; the reason for a refusal becomes the
/// error, at the field's path.
pub(crate) fn field<'de, D: Deserializer<'de>, T>(
    d: D,
    convert: impl FnOnce(Found) -> Result<T, String>,
) -> Result<T, D::Error> {
    let found = Expect(Scalar).deserialize(d)?;
    convert(found).map_err(de::Error::custom)
}

/// How a field's JSON is read: what it takes, and what it makes of a value, a list or an
/// object. Whatever a shape does not take is refused as "expected …, got …".
trait Shape<'de>: Sized {
    type Out;

    /// What the field takes, for "expected …".
    fn expected(&self) -> &'static str;

    fn scalar(self, found: Found) -> Result<Self::Out, String> {
        Err(mismatch(self.expected(), &found))
    }

    fn list<A: SeqAccess<'de>>(self, _seq: A) -> Result<Self::Out, A::Error> {
        Err(de::Error::custom(mismatch(self.expected(), &Found::List)))
    }

    fn object<A: MapAccess<'de>>(self, _map: A) -> Result<Self::Out, A::Error> {
        Err(de::Error::custom(mismatch(self.expected(), &Found::Object)))
    }
}

/// Reads any JSON value into a [`Shape`]: the one visitor of the configuration.
#[derive(Clone)]
struct Expect<S>(S);

impl<S> Expect<S> {
    fn scalar<'de, E: de::Error>(self, found: Found) -> Result<S::Out, E>
    where
        S: Shape<'de>,
    {
        self.0.scalar(found).map_err(E::custom)
    }
}

impl<'de, S: Shape<'de>> DeserializeSeed<'de> for Expect<S> {
    type Value = S::Out;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Out, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, S: Shape<'de>> Visitor<'de> for Expect<S> {
    type Value = S::Out;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0.expected())
    }

    fn visit_unit<E: de::Error>(self) -> Result<S::Out, E> {
        self.scalar(Found::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<S::Out, E> {
        self.scalar(Found::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<S::Out, E> {
        self.scalar(Found::Bool(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<S::Out, E> {
        self.scalar(Found::Unsigned(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<S::Out, E> {
        self.scalar(Found::signed(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<S::Out, E> {
        self.scalar(Found::float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<S::Out, E> {
        self.scalar(Found::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<S::Out, E> {
        self.scalar(Found::Text(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<S::Out, A::Error> {
        self.0.list(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<S::Out, A::Error> {
        self.0.object(map)
    }
}

/// A value as it was found, for [`field`]; a list or object is skipped (without recursion) so
/// the field's own check can say what it expected instead.
struct Scalar;

impl<'de> Shape<'de> for Scalar {
    type Out = Found;

    fn expected(&self) -> &'static str {
        "a value"
    }

    fn scalar(self, found: Found) -> Result<Found, String> {
        Ok(found)
    }

    fn list<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Found::List)
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Found::Object)
    }
}

/// What a JSON object is read into, member by member, over its defaults.
trait Members {
    /// The member names it takes, in the order "unknown field …, expected one of …" lists them.
    const NAMES: &'static [&'static str];

    /// Reads the value of member `name` (one of [`Members::NAMES`], not read before; `earlier`
    /// are those that were).
    fn member<'de, A: MapAccess<'de>>(
        &mut self,
        name: &'static str,
        earlier: &[&'static str],
        map: &mut A,
        trail: &Trail,
    ) -> Result<(), A::Error>;
}

/// Implements [`Members`] for a type from one list of arms, `"name" => how it is read`: the
/// names it takes are the arms' names, so the list an unknown field's error offers cannot drift
/// from what is read. `$this` is the object, `$earlier` the members read before, `$map` and
/// `$trail` as in [`Members::member`].
macro_rules! members {
    ($type:ty, |$this:ident, $earlier:pat_param, $map:ident, $trail:pat_param| {
        $($($name:literal)|+ => $read:expr,)+
    }) => {
        impl Members for $type {
            const NAMES: &'static [&'static str] = &[$($($name),+),+];

            fn member<'de, A: MapAccess<'de>>(
                &mut self,
                name: &'static str,
                $earlier: &[&'static str],
                $map: &mut A,
                $trail: &Trail,
            ) -> Result<(), A::Error> {
                let $this = self;
                match name {
                    $($($name)|+ => {
                        $read;
                    })+
                    _ => return Err(de::Error::unknown_field(name, Self::NAMES)),
                }
                Ok(())
            }
        }
    };
}

/// An object of the configuration being read. One reader serves them all, so serde_json's
/// value parser is compiled into the module once for every object rather than once per type.
enum Object<'a> {
    Config(&'a mut Draft),
    Upstream(&'a mut Upstream),
    HealthChecks(&'a mut HealthChecks),
    Active(&'a mut Active),
    Passive(&'a mut Passive),
    Outlier(&'a mut Outlier),
}

impl Object<'_> {
    fn names(&self) -> &'static [&'static str] {
        match self {
            Object::Config(_) => Draft::NAMES,
            Object::Upstream(_) => Upstream::NAMES,
            Object::HealthChecks(_) => HealthChecks::NAMES,
            Object::Active(_) => Active::NAMES,
            Object::Passive(_) => Passive::NAMES,
            Object::Outlier(_) => Outlier::NAMES,
        }
    }

    fn member<'de, A: MapAccess<'de>>(
        &mut self,
        name: &'static str,
        earlier: &[&'static str],
        map: &mut A,
        trail: &Trail,
    ) -> Result<(), A::Error> {
        match self {
            Object::Config(c) => c.member(name, earlier, map, trail),
            Object::Upstream(u) => u.member(name, earlier, map, trail),
            Object::HealthChecks(h) => h.member(name, earlier, map, trail),
            Object::Active(a) => a.member(name, earlier, map, trail),
            Object::Passive(p) => p.member(name, earlier, map, trail),
            Object::Outlier(o) => o.member(name, earlier, map, trail),
        }
    }
}

/// A JSON object read into an [`Object`]; anything else refused, and so are a member the object
/// does not take and a member given twice.
struct Fill<'a, 't> {
    object: Object<'a>,
    trail: &'t Trail,
}

impl<'a, 't> Fill<'a, 't> {
    fn new(object: Object<'a>, trail: &'t Trail) -> Self {
        Fill { object, trail }
    }
}

impl<'de> Shape<'de> for Fill<'_, '_> {
    type Out = ();

    fn expected(&self) -> &'static str {
        "an object"
    }

    fn object<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let names = self.object.names();
        let mut seen: Vec<&'static str> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let Some(&name) = names.iter().find(|name| **name == key) else {
                let unknown = de::Error::unknown_field(&key, names);
                self.trail.push(Step::Member(key));
                return Err(unknown);
            };
            if seen.contains(&name) {
                return Err(de::Error::duplicate_field(name));
            }
            let read = self.object.member(name, &seen, &mut map, self.trail);
            self.trail.at(Step::Member(key), read)?;
            seen.push(name);
        }
        Ok(())
    }
}

/// One item of `upstreams`, read over an upstream's defaults.
#[derive(Clone, Copy)]
struct UpstreamItem<'t>(&'t Trail);

impl<'de> DeserializeSeed<'de> for UpstreamItem<'_> {
    type Value = Upstream;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Upstream, D::Error> {
        let mut upstream = Upstream {
            name: String::new(),
            cluster: None,
            authority: None,
            weight: 1,
            address: None,
        };
        Expect(Fill::new(Object::Upstream(&mut upstream), self.0)).deserialize(d)?;
        Ok(upstream)
    }
}

/// A JSON list of at most `max` items, each read by `item`.
struct ListOf<'t, S> {
    item: S,
    max: usize,
    too_many: String,
    trail: &'t Trail,
}

impl<'de, S: DeserializeSeed<'de> + Clone> Shape<'de> for ListOf<'_, S> {
    type Out = Vec<S::Value>;

    fn expected(&self) -> &'static str {
        "a list"
    }

    fn list<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<S::Value>, A::Error> {
        let mut items = Vec::new();
        loop {
            let read = seq.next_element_seed(self.item.clone());
            let Some(item) = self.trail.at(Step::Item(items.len()), read)? else {
                break;
            };
            if items.len() == self.max {
                return Err(de::Error::custom(self.too_many));
            }
            items.push(item);
        }
        Ok(items)
    }
}

/// A JSON list of at most `max` values, each handed to `each` (whose refusal is the item's
/// error), or where `one` is set also a single value: one reader for every list of values, so
/// it is compiled in once.
struct Values<'a, 't> {
    each: &'a mut dyn FnMut(Found) -> Result<(), String>,
    one: bool,
    expected: &'static str,
    max: usize,
    too_many: String,
    trail: &'t Trail,
}

impl<'de> Shape<'de> for Values<'_, '_> {
    type Out = ();

    fn expected(&self) -> &'static str {
        self.expected
    }

    fn scalar(self, found: Found) -> Result<(), String> {
        if !self.one {
            return Err(mismatch(self.expected, &found));
        }
        (self.each)(found)?;
        if self.max == 0 {
            return Err(self.too_many);
        }
        Ok(())
    }

    fn list<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut count = 0;
        loop {
            let read = seq.next_element_seed(Expect(Scalar));
            let Some(found) = self.trail.at(Step::Item(count), read)? else {
                return Ok(());
            };
            let taken = (self.each)(found).map_err(de::Error::custom);
            self.trail.at(Step::Item(count), taken)?;
            if count == self.max {
                return Err(de::Error::custom(self.too_many));
            }
            count += 1;
        }
    }
}

/// A member's value, read by `convert`: the reason for a refusal becomes the error.
fn value<'de, A: MapAccess<'de>, T>(
    map: &mut A,
    convert: impl FnOnce(Found) -> Result<T, String>,
) -> Result<T, A::Error> {
    let found = map.next_value_seed(Expect(Scalar))?;
    convert(found).map_err(de::Error::custom)
}

fn text(found: Found) -> Result<String, String> {
    match found {
        Found::Text(s) => Ok(s),
        other => Err(mismatch("a string", &other)),
    }
}

fn whole(found: Found) -> Result<u64, String> {
    match found {
        Found::Unsigned(n) => Ok(n),
        other => Err(mismatch("a whole number", &other)),
    }
}

fn count<T: TryFrom<u64>>(found: Found, min: u32, max: u32) -> Result<T, String> {
    let n = whole(found)?;
    if n < u64::from(min) {
        Err(format!("must be at least {min}, got {n}"))
    } else if n > u64::from(max) {
        Err(format!("must be at most {max}, got {n}"))
    } else {
        T::try_from(n).map_err(|_| format!("must be at most {max}, got {n}"))
    }
}

fn percent_of(found: Found) -> Result<u8, String> {
    let n = whole(found)?;
    match u8::try_from(n) {
        Ok(p) if p <= 100 => Ok(p),
        _ => Err(format!("must be a percentage 0-100, got {n}")),
    }
}

fn flag(found: Found) -> Result<bool, String> {
    match found {
        Found::Bool(b) => Ok(b),
        other => Err(mismatch("true or false", &other)),
    }
}

fn routing(found: Found) -> Result<RoutingMode, String> {
    match text(found)?.as_str() {
        "cluster" => Ok(RoutingMode::Cluster),
        "host" => Ok(RoutingMode::Host),
        other => Err(format!("expected \"cluster\" or \"host\", got {other:?}")),
    }
}

/// The top level as it is read: the configuration over its defaults, and the members whose
/// meaning depends on `role`, as given, until the whole document is read (`role` may come last).
struct Draft {
    config: Config,
    /// `role` as given: whether it serves the status page.
    status_page: Option<bool>,
    /// `status_path` as given.
    path: Option<String>,
    /// `status_public` as given.
    public: Option<bool>,
}

impl Default for Draft {
    fn default() -> Self {
        Draft {
            config: Config {
                upstreams: Vec::new(),
                health_checks: HealthChecks::default(),
                routing: RoutingMode::default(),
                route_header: "x-upcheck-upstream".into(),
                max_ejection_percent: 50,
                min_healthy_percent: None,
                jitter: None,
                role: Role::Traffic,
            },
            status_page: None,
            path: None,
            public: None,
        }
    }
}

impl Draft {
    /// The configuration with its role: the page's fields are the status page's, and refused in
    /// a traffic configuration.
    fn config(self) -> Result<Config, ConfigError> {
        let Draft {
            mut config,
            status_page,
            path,
            public,
        } = self;
        if status_page == Some(true) {
            let defaults = StatusPage::default();
            config.role = Role::StatusPage(StatusPage {
                path: path.unwrap_or(defaults.path),
                public: public.unwrap_or(defaults.public),
            });
            return Ok(config);
        }
        let given = [
            ("status_path", path.is_some()),
            ("status_public", public.is_some()),
        ];
        match given.iter().find(|(_, given)| *given) {
            Some((field, _)) => Err(fail(
                *field,
                "only a configuration with \"role\": \"status_page\" serves the status page, \
                 on a listener of its own; the traffic filter never serves it, so remove this \
                 field here",
            )),
            None => Ok(config),
        }
    }
}

members!(Draft, |draft, _, map, trail| {
    "upstreams" => {
        draft.config.upstreams = map.next_value_seed(Expect(ListOf {
            item: UpstreamItem(trail),
            max: MAX_UPSTREAMS,
            too_many: format!("at most {MAX_UPSTREAMS} upstreams are allowed"),
            trail,
        }))?;
        if draft.config.upstreams.is_empty() {
            return Err(de::Error::custom("needs at least one upstream"));
        }
    },
    "health_checks" => map.next_value_seed(Expect(Fill::new(
        Object::HealthChecks(&mut draft.config.health_checks),
        trail,
    )))?,
    "routing" => draft.config.routing = value(map, routing)?,
    "route_header" => draft.config.route_header = value(map, route_header)?,
    "max_ejection_percent" => draft.config.max_ejection_percent = value(map, percent_of)?,
    "min_healthy_percent" => {
        draft.config.min_healthy_percent = value(map, |found| or_off(found, percent_of))?
    },
    "jitter" => draft.config.jitter = value(map, |found| duration::positive(found).map(Some))?,
    "role" => draft.status_page = Some(value(map, role)?),
    "status_path" => draft.path = Some(value(map, status_path)?),
    "status_public" => draft.public = Some(value(map, flag)?),
});

members!(Upstream, |upstream, _, map, _| {
    "name" => upstream.name = value(map, upstream_name)?,
    "cluster" => upstream.cluster = value(map, |found| upstream_name(found).map(Some))?,
    "authority" => upstream.authority = value(map, |found| authority(text(found)?).map(Some))?,
    "weight" => upstream.weight = value(map, |found| count(found, 1, MAX_WEIGHT))?,
    "address" => {
        upstream.address = value(map, |found| or_off(found, |found| ip_port(text(found)?)))?
    },
});

members!(HealthChecks, |checks, _, map, trail| {
    "active" => {
        map.next_value_seed(Expect(Fill::new(Object::Active(&mut checks.active), trail)))?
    },
    "passive" => {
        map.next_value_seed(Expect(Fill::new(Object::Passive(&mut checks.passive), trail)))?
    },
    "outlier" => {
        map.next_value_seed(Expect(Fill::new(Object::Outlier(&mut checks.outlier), trail)))?
    },
});

members!(Passive, |passive, _, map, trail| {
    "fail_duration" => passive.fail_duration = value(map, duration::positive)?,
    "max_fails" => passive.max_fails = value(map, |found| count(found, 1, MAX_FAILS_LIMIT))?,
    "unhealthy_status" => {
        let mut statuses = Vec::new();
        map.next_value_seed(Expect(Values {
            each: &mut |found| {
                statuses.push(StatusMatch::from_found(found)?);
                Ok(())
            },
            one: false,
            expected: "a list",
            max: MAX_UNHEALTHY_STATUSES,
            too_many: format!("at most {MAX_UNHEALTHY_STATUSES} statuses are allowed"),
            trail,
        }))?;
        passive.unhealthy_status = statuses;
    },
    "unhealthy_latency" => {
        passive.unhealthy_latency = value(map, |found| or_off(found, duration::positive))?
    },
});

members!(Outlier, |outlier, _, map, _| {
    "enabled" => outlier.enabled = value(map, flag)?,
    "window" => outlier.window = value(map, duration::positive)?,
    "min_failures" => outlier.min_failures = value(map, |found| count(found, 1, 1000))?,
    "min_requests" => outlier.min_requests = value(map, |found| count(found, 1, 100_000))?,
    "failure_gap" => outlier.failure_gap = value(map, |found| count(found, 1, 100))?,
    "latency_factor" => outlier.latency_factor = value(map, |found| count(found, 2, 1000))?,
    "min_latency" => outlier.min_latency = value(map, duration::positive)?,
    "stall_after" => outlier.stall_after = value(map, duration::positive)?,
    "ejection" => outlier.ejection = value(map, duration::positive)?,
    "max_ejection" => outlier.max_ejection = value(map, duration::positive)?,
});

/// RFC 9110 `tchar`: what a header name may hold.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// What an upstream name or cluster may hold: a token, and `:` (a cluster such as `app:8080`;
/// both travel in header values, never as a header name).
fn is_name_char(c: char) -> bool {
    is_tchar(c) || c == ':'
}

/// A non-empty word of at most `max` bytes, each character `allowed`.
fn word(text: &str, allowed: fn(char) -> bool, max: usize) -> Result<(), String> {
    if text.is_empty() {
        return Err("must not be empty".into());
    }
    if text.len() > max {
        return Err(format!(
            "must be at most {max} bytes long, got {}",
            text.len()
        ));
    }
    match text.chars().find(|c| !allowed(*c)) {
        Some(c) => Err(format!("{text:?} contains {c:?}, which is not allowed")),
        None => Ok(()),
    }
}

/// A header value (or anything sent as one): at most [`MAX_VALUE_LEN`] bytes, no control
/// characters that could split a header.
fn header_value(text: String) -> Result<String, String> {
    if text.len() > MAX_VALUE_LEN {
        return Err(format!(
            "must be at most {MAX_VALUE_LEN} bytes long, got {}",
            text.len()
        ));
    }
    match text.chars().find(|c| c.is_control()) {
        Some(c) => Err(format!("contains the control character {c:?}")),
        None => Ok(text),
    }
}

/// A request path: a header value of visible ASCII only (anything else must be
/// percent-encoded).
fn request_path(text: String) -> Result<String, String> {
    let text = header_value(text)?;
    match text.chars().find(|c| !c.is_ascii_graphic()) {
        Some(c) => Err(format!(
            "{text:?} contains {c:?}, which is not allowed in a path (percent-encode it)"
        )),
        None => Ok(text),
    }
}

/// An upstream's name or cluster.
fn upstream_name(found: Found) -> Result<String, String> {
    let name = text(found)?;
    word(&name, is_name_char, MAX_NAME_LEN).map(|()| name)
}

fn route_header(found: Found) -> Result<String, String> {
    let header = text(found)?;
    if header.starts_with(':') {
        return Err("must not be a pseudo-header".into());
    }
    word(&header, is_tchar, MAX_NAME_LEN).map(|()| header)
}

/// `role`: whether the configuration serves the status page.
fn role(found: Found) -> Result<bool, String> {
    match text(found)?.as_str() {
        "traffic" => Ok(false),
        "status_page" => Ok(true),
        other => Err(format!(
            "expected \"traffic\" or \"status_page\", got {other:?}"
        )),
    }
}

fn status_path(found: Found) -> Result<String, String> {
    if let Found::Null = found {
        return Err(
            "the status page cannot be turned off here: it is served only by a \
                    configuration with \"role\": \"status_page\", on a listener of its own, \
                    so leave that listener out to have none, and leave this field out for \
                    its default (/upcheck/status)"
                .into(),
        );
    }
    let path = text(found)?;
    if !path.starts_with('/') || path.contains(['?', '#']) {
        return Err(format!(
            "must be a path like \"/upcheck/status\", got {path:?}"
        ));
    }
    request_path(path)
}

/// A port as digits alone: 1-65535, no sign, no leading zeros.
fn port_number(text: &str) -> Option<u16> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits || text.starts_with('0') {
        return None;
    }
    text.parse().ok()
}

/// What a registered name (RFC 3986 `reg-name`, without percent-encoding) may hold.
fn is_reg_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=".contains(c)
}

/// `host[:port]` as `:authority` carries it: a registered name, an IPv4 address or a bracketed
/// IPv6 address, then optionally a port.
fn authority(text: String) -> Result<String, String> {
    if text.is_empty() {
        return Err("must not be empty".into());
    }
    if text.len() > MAX_VALUE_LEN {
        return Err(format!(
            "must be at most {MAX_VALUE_LEN} bytes long, got {}",
            text.len()
        ));
    }
    let (host_ok, port) = match text.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((v6, rest)) => (
                v6.parse::<Ipv6Addr>().is_ok(),
                (!rest.is_empty()).then_some(rest.strip_prefix(':')),
            ),
            None => (false, None),
        },
        None => {
            let (host, port) = match text.split_once(':') {
                Some((host, port)) => (host, Some(Some(port))),
                None => (text.as_str(), None),
            };
            (!host.is_empty() && host.chars().all(is_reg_name_char), port)
        }
    };
    let port_ok = match port {
        None => true,
        Some(port) => port.and_then(port_number).is_some(),
    };
    if host_ok && port_ok {
        Ok(text)
    } else {
        Err(format!(
            "expected host or host:port (a host name, an IPv4 address or a bracketed IPv6 \
             address; a port 1-65535), got {text:?}"
        ))
    }
}

/// An IPv4 address as a dotted quad: four parts 0-255, no sign, no leading zeros.
fn ipv4(text: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = text.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        let digits = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        if !digits || (part.len() > 1 && part.starts_with('0')) {
            return None;
        }
        *octet = part.parse().ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
}

/// `ip:port`, kept in canonical form (as Envoy reports addresses, and so two spellings of one
/// address are one address).
fn ip_port(text: String) -> Result<String, String> {
    let expected =
        || format!("expected ip:port like \"10.0.0.1:8080\" or \"[::1]:8080\", got {text:?}");
    let (host, port) = match text.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once("]:").map(|(v6, port)| (Err(v6), port)),
        None => text.rsplit_once(':').map(|(v4, port)| (Ok(v4), port)),
    }
    .ok_or_else(expected)?;
    let port = port_number(port).ok_or_else(|| {
        format!(
            "{}: the port must be 1-65535, without sign or leading zeros",
            expected()
        )
    })?;
    let ip = match host {
        Err(v6) => IpAddr::V6(
            v6.parse()
                .map_err(|_| format!("{}: {v6:?} is not an IPv6 address", expected()))?,
        ),
        Ok(v4) => IpAddr::V4(ipv4(v4).ok_or_else(|| {
            format!(
                "{}: {v4:?} is not an IP address (Envoy's override_host compares IP \
                 addresses, so a host name never matches)",
                expected()
            )
        })?),
    };
    Ok(SocketAddr::new(ip, port).to_string())
}

/// A probe's interval or timeout: within what Envoy can take.
fn probe_duration(found: Found) -> Result<Duration, String> {
    let d = duration::positive(found)?;
    if d < MIN_PROBE_DURATION {
        return Err(format!(
            "must be at least {}, got {}",
            duration::exact(MIN_PROBE_DURATION),
            duration::exact(d)
        ));
    }
    if d > MAX_PROBE_DURATION {
        return Err(format!(
            "must be at most {} (2^32 - 1 ms), got {}",
            duration::exact(MAX_PROBE_DURATION),
            duration::exact(d)
        ));
    }
    Ok(d)
}

/// A probe timeout, rounded up to whole milliseconds (Envoy's unit for it).
fn probe_timeout(found: Found) -> Result<Duration, String> {
    let d = probe_duration(found)?;
    let past = d.subsec_nanos() % 1_000_000;
    if past == 0 {
        Ok(d)
    } else {
        Ok(d.saturating_add(Duration::from_nanos(u64::from(1_000_000 - past))))
    }
}

fn expect_body(found: Found) -> Result<String, String> {
    let body = text(found)?;
    if body.is_empty() {
        return Err("must not be empty".into());
    }
    if body.len() > MAX_EXPECT_BODY_LEN {
        return Err(format!(
            "must be at most {MAX_EXPECT_BODY_LEN} bytes long, got {}",
            body.len()
        ));
    }
    Ok(body)
}

members!(Active, |active, earlier, map, trail| {
    // Caddy's `uri` is another name for `path`, and giving both must say so at the second.
    "path" | "uri" => {
        let both = earlier.iter().any(|n| matches!(*n, "path" | "uri"));
        active.path = value(map, |found| {
            let path = text(found)?;
            if both {
                return Err("give `path` or `uri`, not both".into());
            }
            if !path.starts_with('/') {
                return Err(format!("must start with '/', got {path:?}"));
            }
            request_path(path)
        })?
    },
    "headers" => active.headers = map.next_value_seed(Expect(Headers { trail }))?,
    "interval" => active.interval = value(map, probe_duration)?,
    "timeout" => active.timeout = value(map, probe_timeout)?,
    "expect_status" => active.expect_status = map.next_value()?,
    "expect_body" => active.expect_body = value(map, |found| or_off(found, expect_body))?,
    "max_size" => active.max_size = value(map, |found| count(found, 1, MAX_PROBE_BODY))?,
    "passes" => active.passes = value(map, |found| count(found, 1, MAX_STREAK))?,
    "fails" => active.fails = value(map, |found| count(found, 1, MAX_STREAK))?,
});

/// `headers`: names to a value or a list of values (Caddy's form), read into (lowercase name,
/// value) pairs in document order. A name is checked as its values are read, so an error names
/// the header.
struct Headers<'t> {
    trail: &'t Trail,
}

impl<'de> Shape<'de> for Headers<'_> {
    type Out = Vec<(String, String)>;

    fn expected(&self) -> &'static str {
        "an object"
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Out, A::Error> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut seen = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            let lower = name.to_ascii_lowercase();
            let read = map.next_value_seed(HeaderValues {
                name: &name,
                repeated: !seen.insert(lower.clone()),
                room: MAX_PROBE_HEADERS.saturating_sub(pairs.len()),
                trail: self.trail,
            });
            let values = self.trail.at(Step::Member(name), read)?;
            pairs.extend(values.into_iter().map(|v| (lower.clone(), v)));
        }
        Ok(pairs)
    }
}

/// One probe header's values, its name checked first.
struct HeaderValues<'a> {
    name: &'a str,
    /// Whether the name came before (in any case).
    repeated: bool,
    /// How many more values fit within [`MAX_PROBE_HEADERS`].
    room: usize,
    trail: &'a Trail,
}

fn too_many_headers() -> String {
    format!("at most {MAX_PROBE_HEADERS} probe headers are allowed")
}

impl<'de> DeserializeSeed<'de> for HeaderValues<'_> {
    type Value = Vec<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
        let refusal = if self.name.starts_with(':') {
            Some("must not be a pseudo-header: a probe's :path and :authority are `path` and the upstream's `authority`".to_owned())
        } else if self.name.eq_ignore_ascii_case("host") {
            Some("must not be set: a probe's host is the upstream's `authority`".to_owned())
        } else if self.repeated {
            Some(
                "is listed twice (header names ignore case); give it once with a list of values"
                    .to_owned(),
            )
        } else {
            word(self.name, is_tchar, MAX_NAME_LEN).err()
        };
        if let Some(reason) = refusal {
            return Err(de::Error::custom(reason));
        }
        let mut values = Vec::new();
        Expect(Values {
            each: &mut |found| {
                values.push(header_value(text(found)?)?);
                Ok(())
            },
            one: true,
            expected: "a string or a list of strings",
            max: self.room,
            too_many: too_many_headers(),
            trail: self.trail,
        })
        .deserialize(d)?;
        Ok(values)
    }
}

/// Probe headers as JSON: a name to its value, or to the list of its values.
fn serialize_headers<S: Serializer>(headers: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(None)?;
    for same_name in headers.chunk_by(|a, b| a.0 == b.0) {
        let values: Vec<&str> = same_name.iter().map(|(_, v)| v.as_str()).collect();
        let name = same_name
            .first()
            .map(|(n, _)| n.as_str())
            .unwrap_or_default();
        match values.as_slice() {
            [one] => map.serialize_entry(name, one)?,
            many => map.serialize_entry(name, many)?,
        }
    }
    map.end()
}
