//! `upcheck envoy --etcd ADDR:PORT[,ADDR:PORT…]`: balancers that share one view of health.
//!
//! The plugin configuration gets a `fleet` object naming the cluster that reaches etcd (the
//! input's own `fleet` is kept, and names the cluster), and the Envoy
//! configuration gets that cluster: every etcd member an endpoint, Envoy's own connection
//! handling, timeouts and active checks of etcd's `/health`, so a member that is down is passed
//! over without the filter knowing. It is never a cluster users are routed to: a backend's
//! cluster named like it is refused.

use std::net::SocketAddr;

use serde_json::Value;
use upcheck_policy::{Config, ConfigError};

use crate::deployment::{Deployment, Endpoint, POOL};
use crate::envoy::socket;
use crate::plugin::Source;
use crate::refuse;
use crate::tree::{list, map, number, plain, text, Node};

/// The etcd cluster's name when the input's `fleet` does not name one.
pub const CLUSTER: &str = "etcd";

/// The etcd cluster as the Envoy configuration has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Etcd {
    /// Its name, as the plugin configuration's `fleet.cluster`.
    pub cluster: String,
    /// etcd's client endpoints (each member's JSON gateway).
    pub members: Vec<SocketAddr>,
}

/// Completes `source`'s `fleet` for etcd at `members`: its cluster is the input's
/// `fleet.cluster`, else [`CLUSTER`].
pub fn join(source: &mut Source, members: Vec<SocketAddr>) -> Result<Etcd, ConfigError> {
    if members.is_empty() {
        return Err(refuse("--etcd", "give at least one etcd member, ADDR:PORT"));
    }
    if let Some(twice) = members
        .iter()
        .enumerate()
        .find_map(|(i, m)| members.get(..i)?.contains(m).then_some(m))
    {
        return Err(refuse("--etcd", format!("{twice} is listed twice")));
    }
    let fleet = source.document.fleet_mut();
    let Value::Object(fields) = fleet else {
        return Err(refuse(
            "fleet",
            "with --etcd the input's fleet must be an object (or left out)",
        ));
    };
    let cluster = match fields.get("cluster") {
        Some(Value::String(name)) => name.clone(),
        Some(_) => return Err(refuse("fleet.cluster", "expected a cluster name")),
        None => {
            fields.insert("cluster".into(), Value::String(CLUSTER.into()));
            CLUSTER.to_owned()
        }
    };
    Ok(Etcd { cluster, members })
}

/// Refuses a deployment whose users could be routed to the etcd cluster: a backend's cluster
/// (or the pool) named like it.
pub fn check(deployment: &Deployment, config: &Config) -> Result<(), ConfigError> {
    let Some(etcd) = &deployment.etcd else {
        return Ok(());
    };
    if etcd.cluster == POOL {
        return Err(refuse(
            "fleet.cluster",
            format!("{POOL:?} is the pool's cluster; name etcd's another"),
        ));
    }
    match config
        .upstreams
        .iter()
        .position(|u| u.cluster() == etcd.cluster)
    {
        Some(i) => Err(refuse(
            format!("upstreams[{i}].cluster"),
            format!(
                "{:?} is etcd's cluster (fleet.cluster); users must never be routed to it",
                etcd.cluster
            ),
        )),
        None => Ok(()),
    }
}

/// The etcd cluster: plain HTTP/1.1 to each member's JSON gateway, Envoy checking each
/// member's `/health` so that requests go to members that have a leader.
pub fn cluster(etcd: &Etcd) -> Node {
    let endpoints = etcd.members.iter().map(|m| {
        map([(
            "endpoint",
            map([(
                "address",
                map([("socket_address", socket(&Endpoint::Ip(*m)))]),
            )]),
        )])
    });
    map([
        ("name", text(&etcd.cluster)),
        ("type", text("STATIC")),
        ("connect_timeout", plain("1s")),
        ("lb_policy", text("ROUND_ROBIN")),
        (
            "health_checks",
            list([map([
                ("timeout", plain("1s")),
                ("interval", plain("2s")),
                ("unhealthy_threshold", number(1)),
                ("healthy_threshold", number(1)),
                (
                    "http_health_check",
                    map([("path", text("/health"))]),
                ),
            ])])
            .note(
            "Envoy's own checks of etcd's members (GET /health answers 200 while the member has \
             a leader): upcheck's calls go to members that can answer.",
            ),
        ),
        (
            "load_assignment",
            map([
                ("cluster_name", text(&etcd.cluster)),
                ("endpoints", list([map([("lb_endpoints", list(endpoints))])])),
            ]),
        ),
    ])
    .gap()
    .note(format!(
        "etcd ({} member{}), through which the balancers share one view of health (the plugin \
         configuration's fleet). Never a cluster users are routed to.",
        etcd.members.len(),
        if etcd.members.len() == 1 { "" } else { "s" }
    ))
}
