//! The plugin configuration the incident scenarios run with.
//!
//! It is the operators' Caddy block (`config/upcheck.json`) with its times shortened, so that a
//! scenario needing several probe rounds and an ejection window takes seconds instead of minutes.
//! The counts stay as the operators wrote them (3 failures eject), because the scenarios assert
//! counts. [`fast_host_checks`] is the same block for `routing: host` (`config/envoy.yaml`), and
//! [`status_page`] turns a pool's configuration into its status page listener's.

use std::time::Duration;

use serde_json::{json, Value};

use crate::upstream::FakeUpstream;

/// Time between probes of one backend.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// Requests per second of user traffic in the scenarios, as in the incident's measurement.
pub const RATE: u32 = 40;

/// The operators' block for `upstreams` (each also a cluster): probe `GET /up` every 1 s with a
/// 500 ms timeout, eject a backend after 3 failures within 2 s.
pub fn fast_checks(upstreams: &[&str]) -> Value {
    let upstreams: Vec<Value> = upstreams.iter().map(|name| json!({"name": name})).collect();
    json!({
        "upstreams": upstreams,
        "health_checks": {
            "active": {"path": "/up", "interval": "1s", "timeout": "500ms"},
            "passive": {"fail_duration": "2s", "max_fails": 3},
        },
    })
}

/// [`fast_checks`] for `routing: host`: each upstream named as its fake backend (so also its probe
/// cluster) and routed to by its address in the pool cluster.
pub fn fast_host_checks(upstreams: &[&FakeUpstream]) -> Value {
    let names: Vec<&str> = upstreams.iter().map(|u| u.name()).collect();
    let mut config = fast_checks(&names);
    config["routing"] = json!("host");
    for (i, upstream) in upstreams.iter().enumerate() {
        config["upstreams"][i]["address"] = json!(upstream.addr().to_string());
    }
    config
}

/// The status page listener's plugin configuration for the pool configured by `config`: the same
/// document with `"role": "status_page"`, as `upcheck envoy` writes it; `None` when `config` is
/// not a JSON object (a configuration meant to be refused).
pub fn status_page(config: &Value) -> Option<Value> {
    let mut page = config.as_object()?.clone();
    page.insert("role".into(), json!("status_page"));
    Some(Value::Object(page))
}
