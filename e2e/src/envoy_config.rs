//! The Envoy configuration a test runs: the pieces `upcheck envoy` writes into the shipped
//! configurations ([`upcheck_cli::envoy::Shape`]), as JSON, and what only a test needs around
//! them (bootstraps, a module loaded by mistake).
//!
//! The shapes are those of the shipped configurations, one per [`Routing`] mode:
//! `config/envoy-simple.yaml` (one STATIC cluster per backend with no Envoy health checks, a
//! `cluster_header` route that removes the header) and `config/envoy.yaml` (a pool cluster whose
//! override_host load balancer follows the header, a probe cluster per backend, two routes that
//! retry once on another backend); both with the wasm filter before the router, and the status
//! page on a listener of its own ([`status_listener`]). They are stated once, in the CLI; only
//! the addresses, the module path, the plugin configuration and the per-try timeout vary here.
//! Every bootstrap carries the stats tag rules `upcheck envoy` writes, so the tests see the
//! labelled series operators do.
//!
//! The listener and clusters are not put in the bootstrap: they are dynamic resources read from
//! files (see [`crate::xds`]), so a test can add a backend or change the plugin configuration
//! while Envoy runs, as an operator would.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
/// The cluster of every backend in [`Routing::Host`], as in `config/envoy.yaml`.
pub use upcheck_cli::deployment::POOL;
use upcheck_cli::deployment::{Backend, Endpoint};
pub use upcheck_cli::envoy::Routing;
use upcheck_cli::envoy::{plugin_configuration, stats_config, Shape};

use crate::upstream::ROUTING_HEADER;

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
        "stats_config": stats_config().json(),
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
        "stats_config": stats_config().json(),
        "admin": {"address": socket_address(admin)},
        "static_resources": {
            "listeners": listeners.into_iter().map(untyped).collect::<Vec<_>>(),
            "clusters": clusters.into_iter().map(untyped).collect::<Vec<_>>(),
        },
    })
}

/// The listener `name` on `addr` (its name is also its stat prefix), with `filter` before the
/// router if any ([`Shape::listener`]).
pub fn listener(
    name: &str,
    addr: SocketAddr,
    filter: Option<&WasmFilter>,
    routing: Routing,
) -> Value {
    let module = filter.map(|f| f.module.as_path()).unwrap_or(Path::new(""));
    let plugin = filter.map(|f| f.config.to_string());
    let listener = shape(routing, module).listener(name, addr, plugin.as_deref());
    typed(LISTENER, listener.json())
}

/// The status page's listener `name` on `addr`, as the shipped configurations have it: the
/// filter (the pool's plugin configuration with `"role": "status_page"`) answers every request
/// itself, and the route behind it answers 404 and routes nowhere.
pub fn status_listener(name: &str, addr: SocketAddr, filter: &WasmFilter) -> Value {
    let page = shape(Routing::Cluster, &filter.module).status_listener(
        name,
        addr,
        &filter.config.to_string(),
    );
    typed(LISTENER, page.json())
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
        "@type": LISTENER,
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
                        "vm_config": shape(Routing::Cluster, &filter.module).vm_config().json(),
                        "configuration": plugin_configuration(&filter.config.to_string()).json(),
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

/// The clusters of `backends` (name, address) under `routing` ([`Shape::clusters`]): one per
/// backend, and in [`Routing::Host`] the [`POOL`] of them all.
pub fn clusters(backends: &[(String, SocketAddr)], routing: Routing) -> Vec<Value> {
    let backends: Vec<Backend> = backends
        .iter()
        .map(|(name, addr)| Backend {
            name: name.clone(),
            cluster: name.clone(),
            address: Endpoint::Ip(*addr),
            probe: Endpoint::Ip(*addr),
        })
        .collect();
    shape(routing, Path::new(""))
        .clusters(&backends)
        .iter()
        .map(|cluster| typed(CLUSTER, cluster.json()))
        .collect()
}

/// The type of a listener resource in a discovery response.
const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// The type of a cluster resource in a discovery response.
const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

/// The shape of a test's configuration: `routing` by the harness's routing header, `module`
/// loaded. (`max_fails` only shows in YAML comments, which JSON has none of.)
fn shape(routing: Routing, module: &Path) -> Shape {
    Shape {
        routing,
        header: ROUTING_HEADER.to_owned(),
        wasm: module.display().to_string(),
        max_fails: 0,
        discovery: None,
        grpc: false,
    }
}

/// `resource` with its type first, as a discovery response names it.
fn typed(kind: &str, resource: Value) -> Value {
    let mut fields = serde_json::Map::from_iter([("@type".to_owned(), json!(kind))]);
    if let Value::Object(rest) = resource {
        fields.extend(rest);
    }
    Value::Object(fields)
}

fn socket_address(addr: SocketAddr) -> Value {
    json!({"socket_address": {"address": addr.ip().to_string(), "port_value": addr.port()}})
}
