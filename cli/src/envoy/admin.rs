//! What Envoy shows its operator: the admin interface, on loopback, and the tag rules that make
//! upcheck's metrics Prometheus labels.

use std::net::SocketAddr;

use upcheck_policy::series;

use crate::endpoint::{socket, Endpoint};
use crate::tree::{double_quoted, list, map, text, Node};

/// Envoy's tag rules for upcheck's metrics ([`series::STATS_TAGS`]), so that Prometheus sees
/// the backend (and the state, and the pool where the configuration names one) as a label: the
/// bootstrap's `stats_config`.
pub fn stats_config() -> Node {
    let rules = series::STATS_TAGS.iter().map(|rule| {
        map([
            ("tag_name", text(rule.label)),
            ("regex", double_quoted(rule.regex)),
        ])
        .note(rule.about)
    });
    map([("stats_tags", list(rules))]).note(
        "upcheck's metrics carry the backend in their names (wasmcustom.upcheck.app1.healthy); \
         these rules make it a label, so /stats/prometheus shows upcheck_healthy{backend=\"app1\"} \
         and one alert or dashboard panel covers every backend (docs/operating.md lists the \
         series). A plugin configuration with a `pool` name adds a pool label, for an Envoy that \
         runs several pools.",
    )
}

/// Envoy's admin interface at `address`, which `upcheck envoy` keeps on loopback.
pub(super) fn admin(address: SocketAddr) -> Node {
    map([(
        "address",
        map([("socket_address", socket(&Endpoint::Ip(address)))]).note(
            "Stats (/stats?filter=wasmcustom.upcheck), readiness (/ready) and control \
             endpoints: loopback only, never on the public interface.",
        ),
    )])
}
