//! The Envoy configuration a test runs, rendered in code.
//!
//! The shapes are those of the shipped configurations, one per [`Routing`] mode:
//! `config/envoy-simple.yaml` (one STATIC cluster per backend with no Envoy health checks, a
//! `cluster_header` route that removes the header) and `config/envoy.yaml` (a pool cluster whose
//! override_host load balancer follows the header, a probe cluster per backend, two routes that
//! retry once on another backend); both with the wasm filter before the router and loopback
//! admin, and the status page on a listener of its own ([`status_listener`]). Only the addresses, the module path, the plugin configuration and the per-try timeout
//! vary. Rendering JSON values instead of filling a text template means the plugin configuration,
//! itself JSON inside a string, needs no escaping.
//!
//! The listener and clusters are not put in the bootstrap: they are dynamic resources read from
//! files (see [`crate::xds`]), so a test can add a backend or change the plugin configuration
//! while Envoy runs, as an operator would.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::upstream::ROUTING_HEADER;

/// The cluster of every backend in [`Routing::Host`], as in `config/envoy.yaml`.
pub const POOL: &str = "pool";

/// How the route reaches the backend the filter picked (the plugin's `routing`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Routing {
    /// `routing: cluster`: one cluster per backend, named by the routing header; no retries.
    #[default]
    Cluster,
    /// `routing: host`: the [`POOL`] cluster picks the address in the routing header; GET and HEAD
    /// are retried once elsewhere after a gateway error, reset or `per_try_timeout`, every other
    /// method only when it never reached a backend. Each backend also has its own cluster, for probes.
    Host {
        /// How long one attempt of a GET or HEAD may take before it is retried.
        per_try_timeout: Duration,
    },
}

/// The upcheck filter as a test configures it.
#[derive(Clone, Debug)]
pub struct WasmFilter {
    /// Path of `upcheck.wasm`.
    pub module: PathBuf,
    /// The plugin configuration (JSON), e.g. the operators' `health_checks` block.
    pub config: Value,
}

/// The bootstrap: loopback admin on `admin`, listeners from `lds`, clusters from `cds`.
pub fn bootstrap(admin: SocketAddr, lds: &Path, cds: &Path) -> Value {
    let from_file = |path: &Path| {
        json!({
            "path_config_source": {"path": path},
            "resource_api_version": "V3",
        })
    };
    json!({
        "node": {"id": "upcheck-e2e", "cluster": "upcheck-e2e"},
        "admin": {"address": socket_address(admin)},
        "dynamic_resources": {
            "lds_config": from_file(lds),
            "cds_config": from_file(cds),
        },
    })
}

/// A bootstrap with everything static: loopback admin on `admin`, and `listeners` and `clusters`
/// (as [`listener`] and [`clusters`] render them) in `static_resources`, for a start-up that must
/// fail. A plugin configuration the filter rejects fails a static listener, and Envoy with it;
/// served over LDS it only gets the update rejected, and Envoy stays up without the listener.
pub fn static_bootstrap(admin: SocketAddr, listeners: Vec<Value>, clusters: Vec<Value>) -> Value {
    // `@type` names a resource's type in a discovery response; inside the bootstrap the field
    // already says it, and protobuf's JSON reader rejects the extra key.
    let untyped = |mut resource: Value| {
        if let Some(fields) = resource.as_object_mut() {
            fields.remove("@type");
        }
        resource
    };
    json!({
        "node": {"id": "upcheck-e2e", "cluster": "upcheck-e2e"},
        "admin": {"address": socket_address(admin)},
        "static_resources": {
            "listeners": listeners.into_iter().map(untyped).collect::<Vec<_>>(),
            "clusters": clusters.into_iter().map(untyped).collect::<Vec<_>>(),
        },
    })
}

/// The listener `name` on `addr` (its name is also its stat prefix). The routing header (set by
/// the filter, or by the client when there is no filter) names a cluster ([`Routing::Cluster`])
/// or an address in the pool ([`Routing::Host`]); either way the backend never sees it. Every
/// listener's filter runs in the same `vm_id`, as two listeners of one operator's Envoy would.
pub fn listener(
    name: &str,
    addr: SocketAddr,
    filter: Option<&WasmFilter>,
    routing: Routing,
) -> Value {
    let http_filters: Vec<Value> = filter
        .map(wasm_filter)
        .into_iter()
        .chain([router(routing)])
        .collect();
    http_listener(
        name,
        addr,
        ("upcheck", "apps", routes(routing)),
        http_filters,
    )
}

/// A listener `name` on `addr` whose HTTP connection manager has one virtual host for every
/// domain, `(route config name, virtual host name, routes)`, and `http_filters`.
fn http_listener(
    name: &str,
    addr: SocketAddr,
    (route_config, virtual_host, routes): (&str, &str, Value),
    http_filters: Vec<Value>,
) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": name,
        "address": socket_address(addr),
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": name,
                "route_config": {
                    "name": route_config,
                    "virtual_hosts": [{
                        "name": virtual_host,
                        "domains": ["*"],
                        "routes": routes,
                    }],
                },
                "http_filters": http_filters,
            },
        }]}],
    })
}

/// The status page's listener `name` on `addr`, as the shipped configurations have it: the
/// filter (the pool's plugin configuration with `"role": "status_page"`) answers every request
/// itself, and the route behind it answers 404 and routes nowhere.
pub fn status_listener(name: &str, addr: SocketAddr, filter: &WasmFilter) -> Value {
    let not_found = json!([{"match": {"prefix": "/"}, "direct_response": {"status": 404}}]);
    http_listener(
        name,
        addr,
        ("status", "status", not_found),
        vec![
            named_wasm_filter(filter, "upcheck-status"),
            router(Routing::Cluster),
        ],
    )
}

/// The routes of `routing`: one `cluster_header` route that removes the header, or the pool's
/// two routes (reads retried after any failure, other methods only before reaching a backend).
fn routes(routing: Routing) -> Value {
    match routing {
        Routing::Cluster => json!([{
            "match": {"prefix": "/"},
            "route": {"cluster_header": ROUTING_HEADER},
            "request_headers_to_remove": [ROUTING_HEADER],
        }]),
        Routing::Host { per_try_timeout } => {
            let mut reads = retry_once("gateway-error,reset,connect-failure,refused-stream");
            reads["per_try_timeout"] = json!(format!("{}s", per_try_timeout.as_secs_f64()));
            json!([
                {
                    "match": {
                        "prefix": "/",
                        "headers": [{"name": ":method", "string_match": {"safe_regex": {"regex": "GET|HEAD"}}}],
                    },
                    "route": {"cluster": POOL, "retry_policy": reads},
                },
                {
                    "match": {"prefix": "/"},
                    "route": {"cluster": POOL, "retry_policy": retry_once("connect-failure,refused-stream")},
                },
            ])
        }
    }
}

/// A retry policy: once, on `retry_on`, never on the host that already failed the request.
fn retry_once(retry_on: &str) -> Value {
    json!({
        "retry_on": retry_on,
        "num_retries": 1,
        "retry_host_predicate": [{
            "name": "envoy.retry_host_predicates.previous_hosts",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"},
        }],
        "host_selection_retry_max_attempts": 3,
    })
}

/// The router; in [`Routing::Host`] an upstream filter removes the routing header from each
/// attempt once its backend is chosen (the route must leave it for the load balancer).
fn router(routing: Routing) -> Value {
    let mut router = json!({
        "name": "envoy.filters.http.router",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
    });
    if let Routing::Host { .. } = routing {
        router["typed_config"]["upstream_http_filters"] = json!([
            {
                "name": "envoy.filters.http.header_mutation",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
                    "mutations": {"request_mutations": [{"remove": ROUTING_HEADER}]},
                },
            },
            {
                "name": "envoy.filters.http.upstream_codec",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"},
            },
        ]);
    }
    router
}

fn wasm_filter(filter: &WasmFilter) -> Value {
    named_wasm_filter(filter, "upcheck")
}

/// The wasm filter as plugin `name`, in the `upcheck` VM.
fn named_wasm_filter(filter: &WasmFilter, name: &str) -> Value {
    json!({
        "name": "envoy.filters.http.wasm",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
            "config": {
                "name": name,
                "root_id": "upcheck",
                "vm_config": vm_config(filter),
                "failure_policy": "FAIL_RELOAD",
                "configuration": plugin_configuration(filter),
            },
        },
    })
}

/// The VM every listener's upcheck runs in: one `vm_id`, one runtime, one module, so Envoy gives
/// each thread one VM for all of them.
fn vm_config(filter: &WasmFilter) -> Value {
    json!({
        "vm_id": "upcheck",
        "runtime": "envoy.wasm.runtime.v8",
        "code": {"local": {"filename": filter.module}},
    })
}

fn plugin_configuration(filter: &WasmFilter) -> Value {
    json!({
        "@type": "type.googleapis.com/google.protobuf.StringValue",
        "value": filter.config.to_string(),
    })
}

/// The listener `name` on `addr` with upcheck.wasm loaded by mistake as a network (TCP) filter,
/// in the users' filter's VM and with its plugin configuration, before an echo filter.
///
/// upcheck is an HTTP filter: Envoy creates a context for each connection, the proxy-wasm SDK's
/// dispatcher makes it an HTTP context (what upcheck's root context creates), then finds no
/// stream context to hand the connection to and panics (`invalid context_id`, in the SDK's
/// `on_new_connection`, not in upcheck's code), which traps the VM. So each connection to this listener fails the VM of the thread that accepts it, with
/// everything that VM runs for the users' listener: the one way found to make the real module's
/// VM fail in Envoy 1.40 (V8 fails a VM only on a trap, and nothing a backend or a client sends
/// makes upcheck trap). Its own plugin is left failed (no `failure_policy`: closed).
pub fn misloaded_listener(name: &str, addr: SocketAddr, filter: &WasmFilter) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": name,
        "address": socket_address(addr),
        "filter_chains": [{"filters": [
            {
                "name": "envoy.filters.network.wasm",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm",
                    "config": {
                        "name": "misloaded",
                        "root_id": "misloaded",
                        "vm_config": vm_config(filter),
                        "configuration": plugin_configuration(filter),
                    },
                },
            },
            {
                "name": "envoy.filters.network.echo",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.network.echo.v3.Echo"},
            },
        ]}],
    })
}

/// The clusters of `backends` (name, address) under `routing`: one per backend, and in
/// [`Routing::Host`] the [`POOL`] of them all.
pub fn clusters(backends: &[(String, SocketAddr)], routing: Routing) -> Vec<Value> {
    let own = backends.iter().map(|(name, addr)| cluster(name, &[*addr]));
    match routing {
        Routing::Cluster => own.collect(),
        Routing::Host { .. } => {
            let addrs: Vec<_> = backends.iter().map(|(_, addr)| *addr).collect();
            own.chain([pool(&addrs)]).collect()
        }
    }
}

/// A cluster of static endpoints, with no Envoy health checks or outlier detection.
fn cluster(name: &str, addrs: &[SocketAddr]) -> Value {
    let endpoints: Vec<_> = addrs
        .iter()
        .map(|addr| json!({"endpoint": {"address": socket_address(*addr)}}))
        .collect();
    json!({
        "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]},
    })
}

/// The [`POOL`] of `addrs`: the override_host load balancer follows the routing header and falls
/// back to round robin (no header, or a retry); the retry breaker is as large as the request one.
fn pool(addrs: &[SocketAddr]) -> Value {
    let mut pool = cluster(POOL, addrs);
    pool["load_balancing_policy"] = json!({"policies": [{"typed_extension_config": {
        "name": "envoy.load_balancing_policies.override_host",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost",
            "override_host_sources": [{"header": ROUTING_HEADER}],
            "fallback_policy": {"policies": [{"typed_extension_config": {
                "name": "envoy.load_balancing_policies.round_robin",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"},
            }}]},
        },
    }}]});
    pool["circuit_breakers"] = json!({"thresholds": [{
        "priority": "DEFAULT",
        "max_connections": 1024,
        "max_pending_requests": 1024,
        "max_requests": 1024,
        "max_retries": 1024,
    }]});
    pool
}

fn socket_address(addr: SocketAddr) -> Value {
    json!({"socket_address": {"address": addr.ip().to_string(), "port_value": addr.port()}})
}
