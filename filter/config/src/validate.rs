//! The second step of reading a configuration: the top level as written ([`Document`]) becomes
//! the [`Config`] in force. Each number is checked against the range its type states, what spans
//! fields is checked, and the defaults that depend on other fields are filled in. Every error
//! names the field it is about.

use super::duration::exact;
use super::fleet::{check_credentials, check_lease_ttl, Fleet, DEFAULT_PREFIX};
use super::{
    grammar, json, Active, Config, ConfigError, HealthChecks, LogFormat, LogLevel, Outlier,
    Passive, Proxy, Retries, Role, RoutingMode, SlowStart, StatusPage, Upstream, DEFAULT_HISTORY,
    DEFAULT_MAX_EJECTION_PERCENT, DEFAULT_ROUTE_HEADER, MAX_UPSTREAMS,
};
use serde::{Deserialize, Deserializer};
use std::collections::HashSet;
use std::fmt::Display;
use std::ops::RangeInclusive;
use std::time::Duration;

/// The top level as written: [`Config`]'s fields, with the role's three members as given
/// (`role` may come after the page's fields that it gives a meaning to).
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Document {
    #[serde(deserialize_with = "upstreams")]
    upstreams: Option<Vec<Upstream>>,
    #[serde(deserialize_with = "json::object")]
    health_checks: HealthChecks,
    #[serde(deserialize_with = "grammar::proxy")]
    proxy: Proxy,
    #[serde(deserialize_with = "grammar::routing")]
    routing: RoutingMode,
    #[serde(deserialize_with = "grammar::route_header")]
    route_header: String,
    #[serde(deserialize_with = "grammar::pool")]
    pool: Option<String>,
    #[serde(deserialize_with = "grammar::percent")]
    max_ejection_percent: u8,
    #[serde(deserialize_with = "grammar::percent_or_off")]
    min_healthy_percent: Option<u8>,
    #[serde(deserialize_with = "grammar::some_duration")]
    jitter: Option<Duration>,
    #[serde(deserialize_with = "grammar::count")]
    history: u32,
    #[serde(deserialize_with = "grammar::log_format")]
    log_format: LogFormat,
    /// Whether `role` is `"status_page"`.
    #[serde(rename = "role", deserialize_with = "grammar::serves_page")]
    serves_page: bool,
    #[serde(deserialize_with = "grammar::status_path")]
    status_path: Option<String>,
    #[serde(deserialize_with = "some_flag")]
    status_public: Option<bool>,
    #[serde(deserialize_with = "grammar::log_level")]
    log_level: LogLevel,
    #[serde(deserialize_with = "json::object")]
    retries: Retries,
    #[serde(deserialize_with = "some_fleet")]
    fleet: Option<Fleet>,
}

impl Default for Document {
    fn default() -> Self {
        Document {
            upstreams: None,
            health_checks: HealthChecks::default(),
            proxy: Proxy::default(),
            routing: RoutingMode::default(),
            route_header: DEFAULT_ROUTE_HEADER.into(),
            pool: None,
            max_ejection_percent: DEFAULT_MAX_EJECTION_PERCENT,
            min_healthy_percent: None,
            jitter: None,
            history: DEFAULT_HISTORY,
            log_format: LogFormat::default(),
            serves_page: false,
            status_path: None,
            status_public: None,
            log_level: LogLevel::default(),
            retries: Retries::default(),
            fleet: None,
        }
    }
}

fn upstreams<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Upstream>>, D::Error> {
    json::list(d, MAX_UPSTREAMS, || {
        format!("at most {MAX_UPSTREAMS} upstreams are allowed")
    })
    .map(Some)
}

fn some_fleet<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Fleet>, D::Error> {
    json::object(d).map(Some)
}

fn some_flag<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    grammar::flag(d).map(Some)
}

fn fail(path: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::new(path, reason)
}

/// `value` within `range`, or an error at `path` saying which end it is past.
fn within<T: PartialOrd + Display>(
    path: &str,
    value: T,
    range: &RangeInclusive<T>,
) -> Result<(), ConfigError> {
    if value < *range.start() {
        Err(fail(
            path,
            format!("must be at least {}, got {value}", range.start()),
        ))
    } else if value > *range.end() {
        Err(fail(
            path,
            format!("must be at most {}, got {value}", range.end()),
        ))
    } else {
        Ok(())
    }
}

/// A probe's interval or timeout: within what Envoy can take.
fn probe_duration(path: &str, d: Duration) -> Result<(), ConfigError> {
    let range = Active::PROBE_DURATION;
    if d < *range.start() {
        return Err(fail(
            path,
            format!(
                "must be at least {}, got {}",
                exact(*range.start()),
                exact(d)
            ),
        ));
    }
    if d > *range.end() {
        return Err(fail(
            path,
            format!(
                "must be at most {} (2^32 - 1 ms), got {}",
                exact(*range.end()),
                exact(d)
            ),
        ));
    }
    Ok(())
}

/// `d` rounded up to whole milliseconds (Envoy's unit for a probe timeout).
fn whole_millis(d: Duration) -> Duration {
    let past = d.subsec_nanos() % 1_000_000;
    if past == 0 {
        d
    } else {
        d.saturating_add(Duration::from_nanos(u64::from(1_000_000 - past)))
    }
}

/// The configuration in force, or the first field that is wrong.
pub fn validate(document: Document) -> Result<Config, ConfigError> {
    let role = role(
        document.serves_page,
        document.status_path,
        document.status_public,
    )?;
    let upstreams = match document.upstreams {
        None => {
            return Err(fail(
                "upstreams",
                "missing; list the backends, e.g. [{\"name\": \"app1\"}]",
            ))
        }
        Some(upstreams) if upstreams.is_empty() => {
            return Err(fail("upstreams", "needs at least one upstream"))
        }
        Some(upstreams) => upstreams,
    };
    let mut config = Config {
        upstreams,
        health_checks: document.health_checks,
        proxy: document.proxy,
        routing: document.routing,
        route_header: document.route_header,
        pool: document.pool,
        max_ejection_percent: document.max_ejection_percent,
        min_healthy_percent: document.min_healthy_percent,
        jitter: document.jitter,
        history: document.history,
        log_format: document.log_format,
        role,
        log_level: document.log_level,
        retries: document.retries,
        fleet: document.fleet,
    };
    within("history", config.history, &Config::HISTORY)?;
    for (i, u) in config.upstreams.iter().enumerate() {
        within(
            &format!("upstreams[{i}].weight"),
            u.weight,
            &Upstream::WEIGHT,
        )?;
    }
    let checks = &mut config.health_checks;
    ranges(&mut checks.active, &checks.passive, &checks.outlier)?;
    slow_start(&checks.slow_start)?;
    retries(&config.retries)?;
    envoy_only(&config)?;
    check_upstreams(&config)?;
    check_proxy(&config)?;
    across_fields(&config)?;
    if let Config {
        fleet: Some(f),
        pool,
        ..
    } = &mut config
    {
        fleet(f)?;
        if f.prefix.is_empty() {
            // A pool's name (letters, digits, `_` and `-`) is a clean path.
            f.prefix = pool.as_deref().unwrap_or(DEFAULT_PREFIX).to_owned();
        }
    }
    config.jitter = Some(config.jitter());
    for u in &mut config.upstreams {
        u.cluster = Some(u.cluster().to_owned());
        u.authority = Some(u.authority().to_owned());
    }
    Ok(config)
}

/// `fleet`: the etcd cluster named, the lease within what etcd takes.
fn fleet(fleet: &Fleet) -> Result<(), ConfigError> {
    if fleet.cluster.is_empty() {
        return Err(fail(
            "fleet.cluster",
            "missing; name the Envoy cluster that reaches etcd, e.g. \"etcd\"",
        ));
    }
    check_lease_ttl(fleet.lease_ttl).map_err(|reason| fail("fleet.lease_ttl", reason))?;
    check_credentials(fleet).map_err(|(path, reason)| fail(path, reason))
}

/// The role, from `role` and the page's fields: those are the status page's, and refused in a
/// traffic configuration.
fn role(
    serves_page: bool,
    path: Option<String>,
    public: Option<bool>,
) -> Result<Role, ConfigError> {
    if serves_page {
        let defaults = StatusPage::default();
        return Ok(Role::StatusPage(StatusPage {
            path: path.unwrap_or(defaults.path),
            public: public.unwrap_or(defaults.public),
        }));
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
        None => Ok(Role::Traffic),
    }
}

/// Every bounded number of the health checks within its range; the probe timeout then rounded
/// up to what Envoy takes.
fn ranges(active: &mut Active, passive: &Passive, outlier: &Outlier) -> Result<(), ConfigError> {
    let a = |field: &str| format!("health_checks.active.{field}");
    probe_duration(&a("interval"), active.interval)?;
    probe_duration(&a("timeout"), active.timeout)?;
    active.timeout = whole_millis(active.timeout);
    within(&a("max_size"), active.max_size, &Active::MAX_SIZE)?;
    within(&a("passes"), active.passes, &Active::STREAK)?;
    within(&a("fails"), active.fails, &Active::STREAK)?;
    within(
        "health_checks.passive.max_fails",
        passive.max_fails,
        &Passive::MAX_FAILS,
    )?;
    let o = |field: &str| format!("health_checks.outlier.{field}");
    within(
        &o("min_failures"),
        outlier.min_failures,
        &Outlier::MIN_FAILURES,
    )?;
    within(
        &o("min_requests"),
        outlier.min_requests,
        &Outlier::MIN_REQUESTS,
    )?;
    within(
        &o("failure_gap"),
        outlier.failure_gap,
        &Outlier::FAILURE_GAP,
    )?;
    within(
        &o("latency_factor"),
        outlier.latency_factor,
        &Outlier::LATENCY_FACTOR,
    )
}

/// `retries`: each number within its range, each per-try timeout within what Envoy's header
/// takes, the longest at least the shortest.
fn retries(retries: &Retries) -> Result<(), ConfigError> {
    let r = |field: &str| format!("retries.{field}");
    within(
        &r("budget_percent"),
        retries.budget_percent,
        &Retries::BUDGET_PERCENT,
    )?;
    within(
        &r("min_per_second"),
        retries.min_per_second,
        &Retries::MIN_PER_SECOND,
    )?;
    within(&r("try_factor"), retries.try_factor, &Retries::TRY_FACTOR)?;
    for (field, d) in [
        ("min_try_timeout", retries.min_try_timeout),
        ("max_try_timeout", retries.max_try_timeout),
    ] {
        if !Retries::TRY_TIMEOUT.contains(&d) {
            return Err(fail(
                r(field),
                format!("must be from 1ms to 1h, got {}", exact(d)),
            ));
        }
    }
    if retries.max_try_timeout < retries.min_try_timeout {
        return Err(fail(
            r("max_try_timeout"),
            format!(
                "must be at least min_try_timeout ({}), got {}",
                exact(retries.min_try_timeout),
                exact(retries.max_try_timeout)
            ),
        ));
    }
    Ok(())
}

/// The warm-up's tuning: a starting share within its range, and an aggression the formula can
/// raise a share to the power of (`1 / aggression`).
fn slow_start(slow_start: &SlowStart) -> Result<(), ConfigError> {
    within(
        "health_checks.slow_start.min_weight_percent",
        slow_start.min_weight_percent,
        &SlowStart::MIN_WEIGHT_PERCENT,
    )?;
    if !(slow_start.aggression.is_finite() && slow_start.aggression > 0.0) {
        return Err(fail(
            "health_checks.slow_start.aggression",
            "must be a number greater than 0 (1.0 ramps linearly)",
        ));
    }
    Ok(())
}

/// Every upstream named, once; its authority valid; under host routing, its own address.
fn check_upstreams(config: &Config) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    let mut addresses = HashSet::new();
    for (i, u) in config.upstreams.iter().enumerate() {
        let at = |field: &str| format!("upstreams[{i}].{field}");
        if u.name.is_empty() {
            return Err(fail(at("name"), "missing; every upstream needs a name"));
        }
        if let Some(reason) = label_value_problem(&u.name) {
            return Err(fail(at("name"), format!("{:?} {reason}", u.name)));
        }
        if !names.insert(u.name.as_str()) {
            return Err(fail(at("name"), format!("{:?} is listed twice", u.name)));
        }
        if u.authority.is_none() {
            grammar::check_authority(&u.name).map_err(|reason| {
                fail(
                    at("authority"),
                    format!("missing, and the name cannot stand in for it: {reason}"),
                )
            })?;
        }
        if config.routing == RoutingMode::Host {
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

/// What only Envoy can do, refused for another proxy: NGINX has no load balancer that takes
/// the address upcheck names, nor a retry policy upcheck can steer, nor gRPC streams.
fn envoy_only(config: &Config) -> Result<(), ConfigError> {
    if config.proxy == Proxy::Envoy {
        return Ok(());
    }
    if config.routing == RoutingMode::Host {
        return Err(fail(
            "routing",
            "\"host\" needs Envoy (its override_host policy and retries); with \"proxy\": \"nginx\" use \"cluster\", the route header naming each backend's cluster",
        ));
    }
    if config
        .fleet
        .as_ref()
        .is_some_and(|f| f.watch_cluster.is_some())
    {
        return Err(fail(
            "fleet.watch_cluster",
            "etcd's watch needs Envoy (a gRPC stream, which ngx_wasm_module does not open); with \"proxy\": \"nginx\" leave it out, and the prefix is read every 500 ms",
        ));
    }
    Ok(())
}

/// What NGINX needs of each upstream: it dispatches probes to an address, not a cluster name;
/// and it makes no gRPC call, so it cannot check a gRPC backend's health.
fn check_proxy(config: &Config) -> Result<(), ConfigError> {
    if config.proxy != Proxy::Nginx {
        return Ok(());
    }
    if config.health_checks.active.grpc.is_some() {
        return Err(fail(
            "health_checks.active.grpc",
            "gRPC health checks need Envoy (a gRPC call, which ngx_wasm_module does not make); with \"proxy\": \"nginx\" probe a path instead",
        ));
    }
    for (i, u) in config.upstreams.iter().enumerate() {
        grammar::check_authority(u.cluster()).map_err(|reason| {
            let field = if u.cluster.is_some() {
                "cluster"
            } else {
                "name"
            };
            fail(
                format!("upstreams[{i}].{field}"),
                format!("with \"proxy\": \"nginx\" probes are dispatched to the cluster: {reason}"),
            )
        })?;
    }
    Ok(())
}

/// What one field must be given another's value.
fn across_fields(config: &Config) -> Result<(), ConfigError> {
    let active = &config.health_checks.active;
    if active.timeout >= active.interval {
        return Err(fail(
            "health_checks.active.timeout",
            format!(
                "must be shorter than interval ({}), got {}",
                exact(active.interval),
                exact(active.timeout)
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
    if let Some(drain) = active.drain_status {
        if let Some(status) =
            (100..=599).find(|s| drain.matches(*s) && active.expect_status.matches(*s))
        {
            return Err(fail(
                "health_checks.active.drain_status",
                format!(
                    "{drain} overlaps expect_status ({}): a probe answering {status} would both pass and drain",
                    active.expect_status
                ),
            ));
        }
    }
    let outlier = &config.health_checks.outlier;
    if outlier.max_ejection < outlier.ejection {
        return Err(fail(
            "health_checks.outlier.max_ejection",
            format!(
                "must be at least ejection ({}), got {}",
                exact(outlier.ejection),
                exact(outlier.max_ejection)
            ),
        ));
    }
    let jitter = config.jitter();
    if jitter >= active.interval {
        return Err(fail(
            "jitter",
            format!(
                "must be shorter than health_checks.active.interval ({}), got {}",
                exact(active.interval),
                exact(jitter)
            ),
        ));
    }
    Ok(())
}

/// Why `name` cannot be a backend's label value as it is, if it cannot: Envoy splits a stat
/// name at its dots and loses an empty last part (measured: `trail.` is shown as `trail`), so
/// two backends could end up with one label; an empty part anywhere is refused alike.
pub fn label_value_problem(name: &str) -> Option<&'static str> {
    if name.split('.').any(str::is_empty) {
        Some(
            "must not begin or end with a dot or hold two dots in a row: Envoy's stats split \
             the name at its dots, and an empty part can be lost from its Prometheus label \
             (\"app.\" is shown as \"app\")",
        )
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_dots_dashes_and_colons_are_label_values_but_empty_parts_are_not() {
        for ok in ["app1", "app.v2", "app-3", "a:b", "x_y", "a'b"] {
            assert_eq!(label_value_problem(ok), None, "{ok}");
        }
        for bad in ["app.", ".app", "a..b", "."] {
            assert!(label_value_problem(bad).is_some(), "{bad}");
        }
    }
}
