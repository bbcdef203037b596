//! What every piece of one Envoy configuration shares ([`Shape`]): how a route reaches the
//! filter's pick, by which header, with which module. Each part of the file is written by its
//! own module as methods of the shape: the listeners, the routes, the wasm filter, the clusters.

use std::path::PathBuf;
use std::time::Duration;

use upcheck_policy::RoutingMode;

use super::Settings;
use crate::deployment::Deployment;

/// How long one attempt of a GET or HEAD may take in host routing before it is retried, as
/// written by `upcheck envoy`.
pub const PER_TRY_TIMEOUT: Duration = Duration::from_secs(3);

/// How a route reaches the backend the filter picked (the plugin's `routing`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Routing {
    /// `routing: cluster`: one cluster per backend, named by the routing header; no retries.
    #[default]
    Cluster,
    /// `routing: host`: the [`POOL`](crate::deployment::POOL) cluster picks the address in the routing header; GET and
    /// HEAD are retried once elsewhere after a gateway error, reset or `per_try_timeout`, every
    /// other method only when it never reached a backend. Each backend also has its own cluster,
    /// for probes.
    Host {
        /// How long one attempt of a GET or HEAD may take before it is retried.
        per_try_timeout: Duration,
    },
}

/// What every piece of one Envoy configuration shares: how requests are routed, by which
/// header, with which module.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// How the route reaches the filter's pick.
    pub routing: Routing,
    /// The routing header, lowercase as Envoy keeps header names.
    pub header: String,
    /// Path of upcheck.wasm where Envoy runs.
    pub wasm: String,
    /// How many failed requests eject a backend (the passive rule's `max_fails`), for the
    /// comments only.
    pub max_fails: u32,
    /// Where each filter's configuration is read from (ECDS, [`filter_file`](super::filter_file)), if not inline.
    pub discovery: Option<PathBuf>,
    /// Whether the backends speak gRPC (`health_checks.active.grpc`): their clusters HTTP/2.
    pub grpc: bool,
}

impl Shape {
    /// The shape `upcheck envoy` writes for `d`.
    pub fn of(d: &Deployment, s: &Settings) -> Shape {
        Shape {
            routing: match d.routing {
                RoutingMode::Host => Routing::Host {
                    per_try_timeout: PER_TRY_TIMEOUT,
                },
                RoutingMode::Cluster => Routing::Cluster,
            },
            header: d.config.route_header.to_ascii_lowercase(),
            wasm: s.wasm.clone(),
            max_fails: d.config.health_checks.passive.max_fails,
            discovery: s.membership.clone(),
            grpc: d.config.health_checks.active.grpc.is_some(),
        }
    }
}
