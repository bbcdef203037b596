//! The listeners: the users' one, with the filter before the router, and the status page's, on
//! a listener of its own so that no user request pays for it. Both are one HTTP connection
//! manager with one virtual host; they differ only in names, routes and filters.

use std::net::SocketAddr;

use super::routes::router;
use super::{Routing, Shape};
use crate::endpoint::{socket, Endpoint};
use crate::tree::{double_quoted, list, map, number, plain, text, Node};

impl Shape {
    /// The users' listener `name` on `addr`, with the filter and its plugin configuration
    /// `plugin` (JSON) before the router, or without a filter (requests are then routed by the
    /// routing header the client sends). The routing header names a cluster
    /// ([`Routing::Cluster`]) or an address in the pool ([`Routing::Host`]); either way the
    /// backend never sees it. Every listener's filter runs in the same `vm_id`, as two listeners
    /// of one operator's Envoy would.
    pub fn listener(&self, name: &str, addr: SocketAddr, plugin: Option<&str>) -> Node {
        let about = match self.routing {
            Routing::Host { .. } => {
                "The plugin configuration (JSON), from the input: `routing: host`, and each \
                 upstream's address is its endpoint in the pool, written exactly as Envoy prints \
                 it (ip:port); an address that is not in the pool is not an error to Envoy, it \
                 silently round-robins instead. Probes go to each upstream's own cluster (its \
                 `cluster`, else its name). Durations are nanoseconds, or strings such as \"10s\"."
            }
            Routing::Cluster => {
                "The plugin configuration (JSON), from the input: `routing: cluster`, and each \
                 upstream's cluster (its `cluster`, else its name) is a cluster below, which holds \
                 its address. Durations are nanoseconds, or strings such as \"10s\"."
            }
        };
        let filters = plugin
            .map(|plugin| self.wasm_filter("upcheck", about, plugin))
            .into_iter()
            .chain([self.router()]);
        http_listener(
            name,
            addr,
            ("upcheck", "apps"),
            self.routes(),
            list(filters),
            self.discovery.is_some(),
            self.grpc,
        )
    }

    /// The status page's listener `name` on `addr`: the same module in the same `vm_id`, so it
    /// reads what the traffic filters share, with `plugin` (the pool's plugin configuration with
    /// `"role": "status_page"`); the filter answers every request itself, and the 404 route
    /// behind it routes nowhere.
    pub fn status_listener(&self, name: &str, addr: SocketAddr, plugin: &str) -> Node {
        let routes = list([map([
            ("match", map([("prefix", double_quoted("/"))]).flow()),
            ("direct_response", map([("status", number(404))]).flow()),
        ])])
        .note(
            "The filter answers every request here itself (the page, or 404 for any other \
             path); this route answers only if it lets one through, and routes nowhere.",
        );
        let filter = self.wasm_filter(
            "upcheck-status",
            "The pool's plugin configuration as above, with `role: status_page` first: this \
             filter shows the health the traffic filters share and never probes, routes or \
             changes it.",
            plugin,
        );
        http_listener(
            name,
            addr,
            ("status", "status"),
            routes,
            list([filter, router(None)]),
            self.discovery.is_some(),
            false,
        )
    }
}

/// A listener `name` on `addr` with an HTTP connection manager whose one virtual host, for every
/// domain, has `routes`, and `http_filters`: the users' listener and the status page's differ
/// only in names, routes and filters. `(route config name, virtual host name)`.
///
/// `clusters_read`: whether the clusters its routes name come from a file Envoy reads while it
/// runs, which `envoy --mode validate` does not read: then the route table does not ask for them
/// to exist at load (`validate_clusters`), as a route table served by xDS does not.
///
/// `grpc`: whether its users call gRPC, which the codec is then written out for.
fn http_listener(
    name: &str,
    addr: SocketAddr,
    (route, host): (&str, &str),
    routes: Node,
    http_filters: Node,
    clusters_read: bool,
    grpc: bool,
) -> Node {
    let codec = grpc.then(|| {
        (
            "codec_type",
            plain("AUTO").note(
                "Envoy's default, written out for gRPC: a plaintext connection that opens with \
                 HTTP/2's preface, as gRPC clients open h2c (HTTP/2 with prior knowledge), is \
                 HTTP/2, any other HTTP/1.1; with TLS, ALPN decides. Measured on 1.40: gRPC \
                 calls and a Watch stream through this listener need nothing more.",
            ),
        )
    });
    let virtual_host = map([
        ("name", text(host)),
        ("domains", list([double_quoted("*")]).flow()),
        ("routes", routes),
    ]);
    let manager = map([
        ("@type", text("type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager")),
        ("stat_prefix", text(name)),
    ]
    .into_iter()
    .chain(codec)
    .chain([
        (
            "route_config",
            map(
                [
                    ("name", text(route)),
                    ("virtual_hosts", list([virtual_host])),
                ]
                .into_iter()
                .chain(clusters_read.then(|| ("validate_clusters", plain("false")))),
            ),
        ),
        ("http_filters", http_filters),
    ]));
    let filter = map([
        (
            "name",
            text("envoy.filters.network.http_connection_manager"),
        ),
        ("typed_config", manager),
    ]);
    map([
        ("name", text(name)),
        (
            "address",
            map([("socket_address", socket(&Endpoint::Ip(addr)))]),
        ),
        ("filter_chains", list([map([("filters", list([filter]))])])),
    ])
}
