//! The clusters of the backends: in host routing the pool every user request goes to, and one
//! cluster per backend, for its probes (and in cluster routing for its requests too).

use super::{Routing, Shape};
use crate::deployment::{Backend, POOL};
use crate::endpoint::{socket, Endpoint};
use crate::etcd::http2;
use crate::tree::{list, map, number, plain, text, Node};

impl Shape {
    /// The clusters of `backends`: in [`Routing::Host`] the [`POOL`] of them all (where their
    /// requests go), then one per backend (for its probes; in [`Routing::Cluster`] for its
    /// requests too). No Envoy health checks or outlier detection on any.
    pub fn clusters(&self, backends: &[Backend]) -> Vec<Node> {
        let host = matches!(self.routing, Routing::Host { .. });
        let first_name = backends
            .iter()
            .position(|b| matches!(b.probe, Endpoint::Name { .. }));
        let own = backends.iter().enumerate().map(|(i, backend)| {
            let cluster = own_cluster(
                backend,
                Explain {
                    timeout: !host && i == 0,
                    dns: first_name == Some(i),
                },
                self.grpc,
            );
            match backends.first() {
                Some(b) if host && i == 0 => {
                    let probes = if b.probe == b.address {
                        String::new()
                    } else {
                        format!(
                            " Probes go to port {} of each backend, requests to the port in the \
                             pool.",
                            b.probe.port()
                        )
                    };
                    cluster.gap().note(format!(
                        "One cluster per backend for upcheck's probes only, named as in the \
                         plugin configuration.{probes}"
                    ))
                }
                _ => cluster,
            }
        });
        let pool = host.then(|| self.pool(backends));
        pool.into_iter().chain(own).collect()
    }

    fn pool(&self, backends: &[Backend]) -> Node {
        let endpoints = backends.iter().map(|b| {
            map([(
                "endpoint",
                map([(
                    "address",
                    map([("socket_address", socket(&b.address).tail(&b.name))]),
                )]),
            )])
        });
        let round_robin = map([(
            "typed_extension_config",
            map([
                ("name", text("envoy.load_balancing_policies.round_robin")),
                (
                    "typed_config",
                    map([("@type", text("type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"))]),
                ),
            ]),
        )]);
        let override_host = map([(
            "typed_extension_config",
            map([
                ("name", text("envoy.load_balancing_policies.override_host")),
                (
                    "typed_config",
                    map([
                        ("@type", text("type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost")),
                        (
                            "override_host_sources",
                            list([map([("header", text(&self.header))])]),
                        ),
                        (
                            "fallback_policy",
                            map([("policies", list([round_robin]))]),
                        ),
                    ]),
                ),
            ]),
        )]);
        let breakers = map([
            ("priority", text("DEFAULT")),
            ("max_connections", number(1024)),
            ("max_pending_requests", number(1024)),
            ("max_requests", number(1024)),
            ("max_retries", number(1024)),
        ]);
        let http2 = self.grpc.then(http2);
        map([("name", text(POOL)), ("type", text("STATIC"))]
            .into_iter()
            .chain(http2)
            .chain([
                (
                    "connect_timeout",
                    plain("1s").note(
                        "A backend that does not complete the TCP handshake in time counts as a \
                     connection failure (and is retried, for every method).",
                    ),
                ),
                (
                    "load_balancing_policy",
                    map([("policies", list([override_host]))]),
                ),
                (
                    "circuit_breakers",
                    map([("thresholds", list([breakers]))]).note(
                        "Envoy allows 3 retries in flight per cluster by default: under load, a \
                     backend breaking then turned most retries into 502s (625 of 1,000 \
                     concurrent requests, measured). A request retries at most once, so retries \
                     in flight never outnumber requests in flight: with max_retries equal to \
                     max_requests the retry breaker never trips before the request one. Not \
                     Envoy's retry_budget: it bounds retries in flight by a share of requests \
                     in flight, which a break under load exceeds at once (at 50 %, 20 of 200 \
                     concurrent GETs failed, measured); the filter's own budget bounds them by \
                     a share of the requests over a window.",
                    ),
                ),
                (
                    "load_assignment",
                    map([
                        ("cluster_name", text(POOL)),
                        (
                            "endpoints",
                            list([map([("lb_endpoints", list(endpoints))])]),
                        ),
                    ]),
                ),
            ]))
        .note(format!(
            "Every backend, for user requests. The load balancer sends each attempt to the next \
             address the filter wrote into {}; it falls back to round robin when there is none \
             (the filter is not configured).",
            self.header
        ))
    }
}

/// Which comments a cluster carries: each is written once, on the first cluster it applies to.
struct Explain {
    /// The connect timeout's (in cluster routing, where no pool explains it).
    timeout: bool,
    /// Resolving a host name.
    dns: bool,
}

/// A backend's own cluster.
fn own_cluster(b: &Backend, explain: Explain, grpc: bool) -> Node {
    let kind = match &b.probe {
        Endpoint::Ip(_) => vec![("type", text("STATIC"))],
        Endpoint::Name { .. } => {
            let strict = text("STRICT_DNS");
            vec![
                (
                    "type",
                    if explain.dns {
                        strict.note(
                            "A backend given by host name is resolved by DNS, and every \
                             address the name has is an endpoint; IPv4 first, as most app \
                             servers listen on it, IPv6 when the name has no IPv4 address.",
                        )
                    } else {
                        strict
                    },
                ),
                ("dns_lookup_family", text("V4_PREFERRED")),
            ]
        }
    };
    let timeout = plain("1s");
    let timeout = if explain.timeout {
        timeout.note(
            "A backend that does not complete the TCP handshake in time counts as a connection \
             failure.",
        )
    } else {
        timeout
    };
    let endpoint = map([(
        "endpoint",
        map([("address", map([("socket_address", socket(&b.probe))]))]),
    )]);
    let http2 = grpc.then(http2);
    map([("name", text(&b.cluster))]
        .into_iter()
        .chain(kind)
        .chain(http2)
        .chain([
            ("connect_timeout", timeout),
            (
                "load_assignment",
                map([
                    ("cluster_name", text(&b.cluster)),
                    (
                        "endpoints",
                        list([map([("lb_endpoints", list([endpoint]))])]),
                    ),
                ]),
            ),
        ]))
}
