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
//! 1. The types below derive `Deserialize` (with `deny_unknown_fields`), each field through the
//!    grammar of its value ([`duration`], [`status_match`], `grammar`, `headers`), and
//!    `serde_path_to_error` records where an error arose. A left-out field takes its default
//!    (the types' `Default` impls and the `DEFAULT_*` constants, each stated once).
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
pub mod fleet;
mod grammar;
mod headers;
mod json;
mod slow_start;
pub mod status_match;
mod validate;

pub use validate::label_value_problem;

use serde::{Deserialize, Deserializer, Serialize};
use status_match::{StatusMatch, StatusSet};
use std::fmt;
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
    /// How many changes of the pool's backends and fleet guard the history keeps, newest last
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

/// How a change is written to the log (`log_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line of prose per event, with its reason (`app2 unhealthy: 1 probe answered 502`).
    #[default]
    Text,
    /// Each change as one JSON object shaped after Envoy's `HealthCheckEvent` (`type`,
    /// `backend`, `cause`, `timestamp`), for log shippers (the policy's `history::Change::json`);
    /// other events stay prose.
    Json,
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

/// The status page, as a [`Role::StatusPage`] configuration serves it. Defaults in
/// [`StatusPage::default`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusPage {
    /// Where it is: plain text at this path, JSON at the path plus `.json`, HTML plus `.html`
    /// (JSON `status_path`).
    #[serde(rename = "status_path")]
    pub path: String,
    /// Whether connections made to an address other than loopback may read it (JSON
    /// `status_public`); if not, they get 403.
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

/// Which proxy runs the module. Both speak proxy-wasm, but not alike: what upcheck asks of
/// each, and what it reads from each, follows from this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proxy {
    /// Envoy 1.40 (the default): `cluster` names an Envoy cluster, the response flags tell the
    /// proxy's own failures from a backend's, retries follow upcheck's word (`routing: "host"`),
    /// and a request can wait at cold start for the first probe.
    #[default]
    Envoy,
    /// NGINX with Kong's ngx_wasm_module: `cluster` is the `host:port` probes are dispatched to,
    /// and what the route header carries for NGINX to map onto an `upstream` block. It has no
    /// response flags (a refused connection and a backend's own 503 look alike), no retry
    /// policy upcheck can steer (`routing: "host"` is refused), and a paused request resumes
    /// only when the calls it made itself are answered, so a request held at cold start waits
    /// on a probe it sends itself.
    Nginx,
}

impl Proxy {
    /// Whether the proxy reports why it failed a request itself (Envoy's response flags);
    /// where it does not, they are not asked for.
    #[inline]
    pub fn reports_response_flags(self) -> bool {
        self == Proxy::Envoy
    }

    /// Whether a request paused at cold start can be resumed from the tick; where it cannot,
    /// the request waits on a probe of its own.
    #[inline]
    pub fn resumes_held_requests(self) -> bool {
        self == Proxy::Envoy
    }
}

/// The least severe log line upcheck writes. The host filters again by its own level (Envoy's
/// `--log-level`, NGINX's `error_log`); upcheck does not ask the host for it, since not every
/// host answers (ngx_wasm_module declares `proxy_get_log_level` unlike the SDK and does not
/// implement it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Everything.
    Trace,
    /// Also what upcheck is doing (configured, serving the page).
    Debug,
    /// Health changes and ejections with their reasons (the default).
    #[default]
    Info,
    /// Only what needs an operator.
    Warn,
    /// Only errors.
    Error,
    /// Nothing.
    Off,
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

/// One backend. What a left-out field takes is in [`Upstream::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Upstream {
    /// Its name, in logs, metrics and the status page: an HTTP token (`:` allowed), at most
    /// [`MAX_NAME_LEN`] bytes. Required.
    #[serde(deserialize_with = "grammar::upstream_name")]
    pub name: String,
    /// The proxy cluster that probes are dispatched to and requests are routed to. Default:
    /// `name`, which [`Config::parse`] fills in.
    #[serde(deserialize_with = "grammar::cluster")]
    pub cluster: Option<String>,
    /// `:authority` of probes: `host[:port]`. Default: `name` (which must then be a valid
    /// authority), filled in by [`Config::parse`].
    #[serde(deserialize_with = "grammar::authority")]
    pub authority: Option<String>,
    /// Share of traffic relative to the others, within [`Upstream::WEIGHT`].
    #[serde(deserialize_with = "grammar::count")]
    pub weight: u32,
    /// `ip:port` of the backend in the pool cluster, kept in the form Envoy reports addresses
    /// (`[0:0::1]:80` becomes `[::1]:80`); required with `routing: "host"`, where it is what the
    /// route header carries. Default: none (`null`).
    #[serde(deserialize_with = "grammar::address")]
    pub address: Option<String>,
    /// Whether the operator drains it (`upcheck backends drain`, HAProxy's `state drain`): it
    /// takes no new requests whatever its probes say, those already sent finish, and it is still
    /// probed, so that the status page tells what it would be. Default: `false`.
    #[serde(deserialize_with = "grammar::flag")]
    pub drain: bool,
}

/// An upstream's fields as they are when left out: no name (which is required), and the cluster
/// and authority none, for [`Config::parse`] to fill in with the name.
impl Default for Upstream {
    fn default() -> Self {
        Upstream {
            name: String::new(),
            cluster: None,
            authority: None,
            weight: 1,
            address: None,
            drain: false,
        }
    }
}

impl Upstream {
    /// What `weight` may be.
    pub const WEIGHT: RangeInclusive<u32> = 1..=MAX_WEIGHT;

    /// The cluster probes and requests go to.
    #[inline]
    pub fn cluster(&self) -> &str {
        self.cluster.as_deref().unwrap_or(&self.name)
    }

    /// The `:authority` of its probes.
    #[inline]
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
    #[inline]
    pub fn route_value(&self, routing: RoutingMode) -> &str {
        match (routing, &self.address) {
            (RoutingMode::Host, Some(address)) => address,
            _ => self.cluster(),
        }
    }
}

/// An upstream as an item of `upstreams`: an object.
impl<'de> json::Item<'de> for Upstream {
    fn item<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        json::object(d)
    }
}

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

/// `health_checks.slow_start`: a backend that enters service (passes the probe that makes it
/// healthy, new or returning) gets a share of its weight that rises over `window`, by Envoy's
/// formula `weight × max(min_weight_percent / 100, time_factor ^ (1 / aggression))`, where
/// `time_factor` is the elapsed share of the window. In JSON a duration (the window, with the
/// other fields' defaults), `null` (off) or an object. Defaults in [`SlowStart::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlowStart {
    /// How long the share takes to rise to the full weight; `None` (`null`) for no warm-up.
    #[serde(with = "duration::optional")]
    pub window: Option<Duration>,
    /// How the share rises: 1.0 linearly, more than 1 faster at first, less than 1 slower
    /// (Envoy's `aggression`). Greater than zero.
    #[serde(deserialize_with = "slow_start::aggression")]
    pub aggression: f64,
    /// The share a backend starts at, in percent of its weight, within
    /// [`SlowStart::MIN_WEIGHT_PERCENT`].
    #[serde(deserialize_with = "grammar::percent")]
    pub min_weight_percent: u8,
}

/// The values of left-out fields, each stated here only: off, and Envoy's tuning.
impl Default for SlowStart {
    fn default() -> Self {
        SlowStart {
            window: None,
            aggression: 1.0,
            min_weight_percent: 10,
        }
    }
}

impl SlowStart {
    /// What `min_weight_percent` may be.
    pub const MIN_WEIGHT_PERCENT: RangeInclusive<u8> = 1..=100;
}

/// `health_checks.active`: an object, where `path` and Caddy's `uri` are one field.
fn active<'de, D: Deserializer<'de>>(d: D) -> Result<Active, D::Error> {
    json::object_with_one_member(d, &["path", "uri"])
}

/// Caddy's `health_checks.active`. What a left-out field takes is in [`Active::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Active {
    /// Path probed with `GET` (Caddy's `uri` is another name for it; give one of the two):
    /// starts with `/`, visible ASCII, at most [`MAX_VALUE_LEN`] bytes.
    #[serde(alias = "uri", deserialize_with = "grammar::probe_path")]
    pub path: String,
    /// Extra probe request headers as (lowercase name, value); in JSON a name maps to one value
    /// or a list (Caddy's form). Not pseudo-headers and not `host` (the probe's host is the
    /// upstream's `authority`); at most [`MAX_PROBE_HEADERS`].
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
    /// [`MAX_EXPECT_BODY_LEN`] bytes. `null` for none.
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
/// The longest `pool` name, in bytes.
pub const MAX_POOL_LEN: usize = 64;
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

impl ConfigError {
    fn new(path: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// A read error: a broken document says where (line and column); a field that is wrong says
    /// its path instead.
    fn read(e: &serde_json::Error, path: String) -> ConfigError {
        if !e.is_data() {
            return ConfigError::new("", format!("not valid JSON: {e}"));
        }
        let text = e.to_string();
        let position = format!(" at line {} column {}", e.line(), e.column());
        let reason = text.strip_suffix(&position).unwrap_or(&text);
        let path = if path == "." { String::new() } else { path };
        ConfigError::new(path, reason)
    }
}

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
