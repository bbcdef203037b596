//! Running a scenario against a plugin configuration: the real upcheck.wasm in the wasmtime
//! proxy-wasm host ([`upcheck_host_tests`]) on virtual time, a main-thread VM and two workers as
//! Envoy runs it with `--concurrency 2`.
//!
//! Why the real module and not the policy crate: what users see depends on the adapter too (the
//! probing lease, the process-wide failure table, parked requests at cold start, what Envoy makes
//! up when a backend hangs), and the question is what *this build* would do. Virtual time makes a
//! ten-minute scenario take seconds and every run of it the same.

use std::path::Path;
use std::time::Duration;

use upcheck_host_tests::{
    Behaviour, Host, HostError, HostOptions, Load, LogLevel, RequestRecord, RequestSpec,
};
use upcheck_policy::grpc::health;
use upcheck_policy::{Config, ConfigError, RoutingMode};

use crate::refuse;
use crate::scenario::{describe, is_grpc, serving_answer, Scenario};

/// Worker VMs, as Envoy's `--concurrency 2`.
pub const WORKERS: usize = 2;

/// The path the simulated users request.
pub const PAGE_PATH: &str = "/";

/// A plugin configuration ready to simulate: as written, and as the module reads it.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The configuration's JSON document.
    pub document: serde_json::Value,
    /// The same, as the module reads it.
    pub config: Config,
}

/// A request slower than this to answer counts as slow for its user.
pub const SLOW: Duration = Duration::from_secs(1);

/// What one configuration did in one scenario.
#[derive(Debug, Clone)]
pub struct Run {
    /// Every user request, in sending order.
    pub requests: Vec<UserRequest>,
    /// The module's log lines at info level and above (health changes, ejections, the pool
    /// guard), in time order, without the `upcheck: ` prefix.
    pub log: Vec<(Duration, String)>,
}

/// One user request and what its user saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRequest {
    /// When it was sent, since the start.
    pub sent: Duration,
    /// The backend it reached, as a position among the scenario's; `None` when the proxy
    /// answered it without one.
    pub backend: Option<usize>,
    /// A 5xx, or no answer at all.
    pub failed: bool,
    /// Answered after more than [`SLOW`], or never.
    pub slow: bool,
}

/// The default configuration for `scenario`: each of its backends an upstream, checked by the
/// gRPC Health Checking Protocol (the whole server, `""`) when the scenario's backends answer in
/// gRPC's terms ([`Scenario::grpc`]), all else default.
pub fn default_document(scenario: &Scenario) -> serde_json::Value {
    let upstreams: Vec<serde_json::Value> = scenario
        .backends
        .iter()
        .map(|backend| serde_json::json!({ "name": backend.name }))
        .collect();
    if scenario.grpc() {
        let grpc = serde_json::json!({"active": {"grpc": {"service": ""}}});
        return serde_json::json!({ "upstreams": upstreams, "health_checks": grpc });
    }
    serde_json::json!({ "upstreams": upstreams })
}

/// Reads the plugin configuration `bytes` as the module does and checks that it fits
/// `scenario`: the same backends by name, and a probe path apart from the users' page.
pub fn plan(bytes: &[u8], scenario: &Scenario) -> Result<Plan, ConfigError> {
    let config = crate::plugin::check(bytes)?;
    if config.status_page().is_some() {
        return Err(refuse(
            "role",
            "a status page configuration only shows the pool's health, so users' requests \
             have nothing to run through: simulate the pool's configuration (without `role`)",
        ));
    }
    let document = serde_json::from_slice(bytes).map_err(|e| refuse("", e.to_string()))?;
    let mut configured: Vec<&str> = config.upstreams.iter().map(|u| u.name.as_str()).collect();
    let mut scripted: Vec<&str> = scenario.backends.iter().map(|b| b.name.as_str()).collect();
    configured.sort_unstable();
    scripted.sort_unstable();
    if configured != scripted {
        return Err(refuse(
            "upstreams",
            format!(
                "the configuration names {}, the scenario's backends are {}: simulate needs the \
                 same names",
                configured.join(", "),
                scripted.join(", ")
            ),
        ));
    }
    fits_the_check(&config, scenario)?;
    if config.health_checks.active.grpc.is_none()
        && config.health_checks.active.path.split('?').next() == Some(PAGE_PATH)
    {
        return Err(refuse(
            "health_checks.active.path",
            format!("{PAGE_PATH:?} is where the simulated users go; probe another path"),
        ));
    }
    Ok(Plan { document, config })
}

/// Whether every answer the scenario's backends give their health check is one the
/// configuration's check asks for: gRPC answers for a gRPC check (where `"200"` is `SERVING`),
/// HTTP ones for an HTTP check; `hang`, `refuse` and `overflow` fit both.
fn fits_the_check(config: &Config, scenario: &Scenario) -> Result<(), ConfigError> {
    let grpc = config.health_checks.active.grpc.is_some();
    for (i, backend) in scenario.backends.iter().enumerate() {
        let ups = std::iter::once((format!("backends[{i}].up"), &backend.up)).chain(
            backend.changes.iter().enumerate().filter_map(|(j, c)| {
                c.up.as_ref()
                    .map(|up| (format!("backends[{i}].changes[{j}].up"), up))
            }),
        );
        for (path, up) in ups {
            let fits = match up {
                Behaviour::Answer { .. } if grpc => is_grpc(up) || *up == Behaviour::status(200),
                Behaviour::Answer { .. } => !is_grpc(up),
                Behaviour::Hang | Behaviour::Refuse | Behaviour::Overflow => true,
            };
            if !fits {
                let (field, asks) = if grpc {
                    (
                        "health_checks.active.grpc",
                        "probes by gRPC: the scenario's answers to them are \"SERVING\", \
                         \"NOT_SERVING\", \"SERVICE_UNKNOWN\" or a gRPC status (\"UNAVAILABLE\")",
                    )
                } else {
                    (
                        "health_checks.active.path",
                        "probes GET: the scenario's answers to them are HTTP ones (\"200\", \
                         \"502\"); add \"grpc\": {} to health_checks.active for gRPC answers",
                    )
                };
                return Err(refuse(
                    field,
                    format!(
                        "the scenario's {path} is {}, but the configuration {asks}",
                        describe(up)
                    ),
                ));
            }
        }
    }
    Ok(())
}

impl Plan {
    /// The document the module gets at `at`: the upstreams there by then, and cluster routing
    /// (the host routes by cluster; see [`Plan::routing_note`]).
    fn document_at(&self, scenario: &Scenario, at: Duration) -> String {
        let joined = |name: &str| {
            scenario
                .backends
                .iter()
                .find(|b| b.name == name)
                .is_some_and(|b| b.added.is_none_or(|added| added <= at))
        };
        let mut document = self.document.clone();
        if let Some(upstreams) = document
            .get_mut("upstreams")
            .and_then(serde_json::Value::as_array_mut)
        {
            upstreams.retain(|u| u.get("name").and_then(|n| n.as_str()).is_some_and(joined));
        }
        if let Some(members) = document.as_object_mut() {
            members.remove("routing");
        }
        document.to_string()
    }

    /// What the simulation leaves out of this configuration, if anything.
    pub fn routing_note(&self) -> Option<&'static str> {
        (self.config.routing == RoutingMode::Host).then_some(
            "routing \"host\" is simulated as \"cluster\": Envoy's retry of a failed attempt on \
             another backend is not, so a failure shown here may be retried away in Envoy",
        )
    }

    /// Runs `scenario` with the module at `wasm`.
    pub fn run(&self, wasm: &Path, scenario: &Scenario) -> Result<Run, HostError> {
        let options = HostOptions {
            workers: WORKERS,
            route_header: self.config.route_header.clone(),
            ..HostOptions::default()
        };
        let mut host = Host::from_file(wasm, options)?;
        let active = &self.config.health_checks.active;
        let grpc = active.grpc.is_some();
        let probe_path = match grpc {
            true => format!("/{}/{}", health::SERVICE, health::CHECK),
            false => active.path.clone(),
        };
        // To a gRPC check, an answer of 200 (the default) is SERVING.
        let up = |behaviour: &Behaviour| match behaviour {
            b if grpc && *b == Behaviour::status(200) => serving_answer(),
            b => b.clone(),
        };
        for backend in &scenario.backends {
            let cluster = self
                .config
                .upstreams
                .iter()
                .find(|u| u.name == backend.name)
                .map_or(backend.name.as_str(), |u| u.cluster());
            let mut script = host.upstream(cluster).path(&probe_path, up(&backend.up));
            for change in &backend.changes {
                if let Some(changed) = &change.up {
                    script = script.from(change.at, up(changed));
                }
            }
            script = script.others(backend.pages.clone());
            for change in &backend.changes {
                if let Some(pages) = &change.pages {
                    script = script.from(change.at, pages.clone());
                }
            }
        }
        host.start(&self.document_at(scenario, Duration::ZERO))?;
        let mut joins: Vec<Duration> = scenario.backends.iter().filter_map(|b| b.added).collect();
        joins.sort_unstable();
        joins.dedup();
        for end in joins.iter().copied().chain([scenario.duration]) {
            let length = end.saturating_sub(host.now());
            if !length.is_zero() {
                host.load(Load {
                    rate: scenario.rate,
                    duration: length,
                    request: RequestSpec {
                        path: PAGE_PATH.to_string(),
                        ..RequestSpec::default()
                    },
                })?;
            }
            if end < scenario.duration {
                host.reconfigure(&self.document_at(scenario, end))?;
            }
        }
        let log = host
            .logs()
            .into_iter()
            .filter(|line| line.level >= LogLevel::Info)
            .map(|line| {
                let message = line
                    .message
                    .strip_prefix("upcheck: ")
                    .unwrap_or(&line.message);
                (line.at, message.to_string())
            })
            .collect();
        let requests = host
            .records()
            .iter()
            .map(|record| self.seen(scenario, record))
            .collect();
        Ok(Run { requests, log })
    }

    /// What the user of `record` saw, by backend.
    fn seen(&self, scenario: &Scenario, record: &RequestRecord) -> UserRequest {
        let name = record.upstream.as_deref().and_then(|cluster| {
            let upstream = self
                .config
                .upstreams
                .iter()
                .find(|u| u.cluster() == cluster);
            upstream.map(|u| u.name.as_str())
        });
        UserRequest {
            sent: record.sent,
            backend: name.and_then(|name| scenario.backends.iter().position(|b| b.name == name)),
            failed: record.failed(),
            slow: record
                .completed
                .is_none_or(|completed| completed.saturating_sub(record.sent) > SLOW),
        }
    }
}
