//! The Envoy configuration a test runs, rendered in code.
//!
//! The shapes are those of `config/envoy.yaml` (one STATIC cluster per backend with no Envoy
//! health checks, a `cluster_header` route that removes the header, the wasm filter before the
//! router, loopback admin); only the addresses, the module path and the plugin configuration
//! vary. Rendering JSON values instead of filling a text template means the plugin configuration,
//! itself JSON inside a string, needs no escaping.
//!
//! The listener and clusters are not put in the bootstrap: they are dynamic resources read from
//! files (see [`crate::xds`]), so a test can add a backend or change the plugin configuration
//! while Envoy runs, as an operator would.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

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
        "admin": {"address": socket_address(admin)},
        "dynamic_resources": {
            "lds_config": from_file(lds),
            "cds_config": from_file(cds),
        },
    })
}

/// A bootstrap with everything static: loopback admin on `admin`, and `listener` and `clusters`
/// (as [`listener`] and [`cluster`] render them) in `static_resources`, for a start-up that must
/// fail. A plugin configuration the filter rejects fails a static listener, and Envoy with it;
/// served over LDS it only gets the update rejected, and Envoy stays up without the listener.
pub fn static_bootstrap(admin: SocketAddr, listener: Value, clusters: Vec<Value>) -> Value {
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
            "listeners": [untyped(listener)],
            "clusters": clusters.into_iter().map(untyped).collect::<Vec<_>>(),
        },
    })
}

/// The listener on `addr`: the route sends each request to the cluster named in the routing
/// header (set by the filter, or by the client when there is no filter), which is then removed.
pub fn listener(addr: SocketAddr, filter: Option<&WasmFilter>) -> Value {
    let router = json!({
        "name": "envoy.filters.http.router",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
    });
    let http_filters: Vec<Value> = filter
        .map(wasm_filter)
        .into_iter()
        .chain([router])
        .collect();
    json!({
        "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
        "name": "web",
        "address": socket_address(addr),
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "web",
                "route_config": {
                    "name": "upcheck",
                    "virtual_hosts": [{
                        "name": "apps",
                        "domains": ["*"],
                        "routes": [{
                            "match": {"prefix": "/"},
                            "route": {"cluster_header": ROUTING_HEADER},
                            "request_headers_to_remove": [ROUTING_HEADER],
                        }],
                    }],
                },
                "http_filters": http_filters,
            },
        }]}],
    })
}

fn wasm_filter(filter: &WasmFilter) -> Value {
    json!({
        "name": "envoy.filters.http.wasm",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
            "config": {
                "name": "upcheck",
                "root_id": "upcheck",
                "vm_config": {
                    "vm_id": "upcheck",
                    "runtime": "envoy.wasm.runtime.v8",
                    "code": {"local": {"filename": filter.module}},
                },
                "failure_policy": "FAIL_RELOAD",
                "configuration": {
                    "@type": "type.googleapis.com/google.protobuf.StringValue",
                    "value": filter.config.to_string(),
                },
            },
        },
    })
}

/// The cluster of one backend: a single static endpoint, no Envoy health checks or outlier detection.
pub fn cluster(name: &str, addr: SocketAddr) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": socket_address(addr)}}]}],
        },
    })
}

fn socket_address(addr: SocketAddr) -> Value {
    json!({"socket_address": {"address": addr.ip().to_string(), "port_value": addr.port()}})
}
