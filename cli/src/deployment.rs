//! What an Envoy configuration is made of: the routing, the checked plugin configuration as it
//! is embedded, and each backend with the Envoy endpoints of its requests and of its probes.
//!
//! The module's own parser checks the plugin configuration. What is checked here is what the
//! Envoy configuration needs on top and would otherwise get wrong without a word: every backend
//! has an address, no two share one or share a cluster, no cluster is named like the pool. What
//! an address may be depends on the routing. In host routing the module reads it, as the filter
//! does: the `override_host` load balancer matches the header against the addresses Envoy connects
//! to, character for character, and silently round-robins when nothing matches, so it must be an
//! IP address, and is written into the pool as the module reads it (as Envoy prints it). In
//! cluster routing the plugin configuration carries no address, and each backend's cluster may
//! resolve a host name by DNS.

use serde_json::Value;
use upcheck_policy::config::Active;
use upcheck_policy::{Config, ConfigError, RoutingMode, StatusPage};

pub use crate::endpoint::Endpoint;
use crate::etcd::Etcd;
use crate::plugin::{compact, Addresses, Document, Source};
use crate::refuse;

/// The cluster every backend is an endpoint of in host routing.
pub const POOL: &str = "pool";

/// What each probe of `active` asks, in a sentence's words: `GET /up`, or `the gRPC Health
/// Check of service ""` (`grpc.health.v1.Health/Check`, which passes when it answers `SERVING`).
pub fn probe_text(active: &Active) -> String {
    match &active.grpc {
        None => format!("GET {}", active.path),
        Some(grpc) => format!("the gRPC Health Check of service {:?}", grpc.service),
    }
}

/// Everything the Envoy configuration is written from.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    /// How the filter's pick reaches Envoy. Default (when neither the command line nor the input
    /// says): host routing.
    pub routing: RoutingMode,
    /// The plugin configuration as embedded, parsed by the module.
    pub config: Config,
    /// The plugin configuration as embedded (JSON).
    pub plugin: String,
    /// The status page listener's plugin configuration as embedded (JSON): `plugin` with
    /// `"role": "status_page"`, and the input's `status_path` and `status_public`.
    pub page_plugin: String,
    /// The status page that configuration serves.
    pub page: StatusPage,
    /// The backends, in the configuration's order.
    pub backends: Vec<Backend>,
    /// The etcd cluster the balancers share their view through, with `upcheck envoy --etcd`
    /// ([`crate::etcd`]). Default: none, the balancer runs alone.
    pub etcd: Option<Etcd>,
}

impl Deployment {
    /// Refuses a deployment whose users could be routed to its etcd cluster ([`Etcd`]): a
    /// backend's cluster (or the pool) named like it.
    pub fn check_etcd(&self) -> Result<(), ConfigError> {
        let Some(etcd) = &self.etcd else {
            return Ok(());
        };
        for (name, field) in [
            (Some(&etcd.cluster), "fleet.cluster"),
            (etcd.watch_cluster.as_ref(), "fleet.watch_cluster"),
        ] {
            let Some(name) = name else { continue };
            if name == POOL {
                return Err(refuse(
                    field,
                    format!("{POOL:?} is the pool's cluster; name etcd's another"),
                ));
            }
            if let Some(i) = self
                .config
                .upstreams
                .iter()
                .position(|u| u.cluster() == name)
            {
                return Err(refuse(
                    format!("upstreams[{i}].cluster"),
                    format!(
                        "{name:?} is etcd's cluster ({field}); users must never be routed to it"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// One backend as Envoy sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    /// Its upstream name.
    pub name: String,
    /// Its own cluster: for probes, and in cluster routing for its requests too.
    pub cluster: String,
    /// Where its requests go.
    pub address: Endpoint,
    /// Where its probes go: `address`, or another port of the same host.
    pub probe: Endpoint,
}

/// The deployment of `source` under `routing` (else the input's, else host routing); an error
/// names the path in the input.
pub fn plan(source: &Source, routing: Option<RoutingMode>) -> Result<Deployment, ConfigError> {
    let routing = routing.or(source.routing).unwrap_or(RoutingMode::Host);
    let locate = |error| source.origins.locate(error);
    // Every field but the addresses as the module checks it: in cluster routing that is the
    // whole plugin configuration, which leaves the addresses to the clusters.
    let without_addresses = source.document.text(RoutingMode::Cluster, Addresses::Drop);
    let checked = Config::parse(without_addresses.as_bytes()).map_err(locate)?;
    let written = addresses(&source.document, checked.upstreams.len()).map_err(locate)?;
    let (plugin, config, endpoints, addresses_kept) = match routing {
        RoutingMode::Cluster => (without_addresses, checked, written, Addresses::Drop),
        RoutingMode::Host => {
            host_names(&written).map_err(locate)?;
            // The module checks the rest: an IP address each, none twice, read as Envoy prints it.
            let plugin = source.document.text(RoutingMode::Host, Addresses::Keep);
            let config = Config::parse(plugin.as_bytes()).map_err(locate)?;
            let endpoints = config
                .upstreams
                .iter()
                .map(|u| u.address.clone().unwrap_or_default())
                .collect();
            (plugin, config, endpoints, Addresses::Keep)
        }
    };
    let backends = backends(&config, &endpoints, routing, source.probe_port).map_err(locate)?;
    let page_plugin = source.document.page_text(routing, addresses_kept);
    let page = Config::parse(page_plugin.as_bytes())
        .map_err(locate)?
        .status_page()
        .cloned()
        .unwrap_or_default();
    Ok(Deployment {
        routing,
        config,
        plugin,
        page_plugin,
        page,
        backends,
        etcd: None,
    })
}

/// Each of the `count` upstreams' `address`, as written.
fn addresses(document: &Document, count: usize) -> Result<Vec<String>, ConfigError> {
    (0..count)
        .map(|i| {
            let at = format!("upstreams[{i}].address");
            match document.address(i) {
                Some(Value::String(text)) => Ok(text.clone()),
                Some(Value::Null) | None => Err(refuse(
                    at,
                    "missing; the Envoy configuration needs each backend's address: add \
                     \"address\": \"ip:port\"",
                )),
                Some(other) => Err(refuse(
                    at,
                    format!("expected host:port, got {}", compact(other)),
                )),
            }
        })
        .collect()
}

/// Refuses a host name in host routing, where the pool's load balancer matches IP addresses.
fn host_names(written: &[String]) -> Result<(), ConfigError> {
    for (i, text) in written.iter().enumerate() {
        if let Some(Endpoint::Name { .. }) = Endpoint::parse(text) {
            return Err(refuse(
                format!("upstreams[{i}].address"),
                format!(
                    "{text:?} is a host name; host routing needs the IP address, which is what \
                     the pool's load balancer matches: write the IP address the name resolves \
                     to, or use cluster routing, whose clusters resolve names"
                ),
            ));
        }
    }
    Ok(())
}

/// The backends of `config`, whose upstreams are at `addresses` (in order).
fn backends(
    config: &Config,
    addresses: &[String],
    routing: RoutingMode,
    probe_port: Option<u16>,
) -> Result<Vec<Backend>, ConfigError> {
    if probe_port.is_some() && routing == RoutingMode::Cluster {
        return Err(refuse(
            "health_checks.active.port",
            "probes go to another port than requests, so each backend needs a probe cluster of \
             its own: use host routing (the default)",
        ));
    }
    let mut backends: Vec<Backend> = Vec::new();
    for (i, (upstream, text)) in config.upstreams.iter().zip(addresses).enumerate() {
        let at = format!("upstreams[{i}]");
        let address_at = format!("{at}.address");
        let address = Endpoint::parse(text)
            .ok_or_else(|| refuse(&address_at, format!("expected host:port, got {text:?}")))?;
        if backends.iter().any(|b| b.address == address) {
            return Err(refuse(
                address_at,
                format!("{text:?} is another upstream's address too"),
            ));
        }
        let cluster = upstream.cluster().to_owned();
        if let Some(other) = backends.iter().position(|b| b.cluster == cluster) {
            return Err(refuse(
                at,
                format!(
                    "its cluster {cluster:?} is upstreams[{other}]'s too; each backend needs a \
                     cluster of its own: set another `cluster`"
                ),
            ));
        }
        if routing == RoutingMode::Host && cluster == POOL {
            return Err(refuse(
                at,
                format!(
                    "its cluster is named {POOL:?}, like the cluster every backend shares in \
                     host routing: set another `cluster`"
                ),
            ));
        }
        let probe = probe_port.map_or_else(|| address.clone(), |port| address.with_port(port));
        backends.push(Backend {
            name: upstream.name.clone(),
            cluster,
            address,
            probe,
        });
    }
    Ok(backends)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::read;

    fn plan_of(json: &str, routing: Option<RoutingMode>) -> Result<Deployment, String> {
        let source = read(json.as_bytes()).map_err(|e| e.to_string())?;
        plan(&source, routing).map_err(|e| e.to_string())
    }

    const TWO: &str = r#"{"upstreams": [{"name": "app1", "address": "127.0.0.1:3001"},
                                      {"name": "app2", "address": "[::1]:3002"}]}"#;

    #[test]
    fn host_routing_is_the_default_and_keeps_the_addresses_in_the_plugin_configuration() {
        let d = plan_of(TWO, None).expect("valid");
        assert_eq!(d.routing, RoutingMode::Host);
        assert_eq!(d.config.routing, RoutingMode::Host);
        assert!(
            d.plugin.contains(r#""address": "[::1]:3002""#),
            "{}",
            d.plugin
        );
        assert_eq!(d.backends[1].address.host(), "::1");
        assert_eq!(d.backends[1].probe, d.backends[1].address);
    }

    #[test]
    fn cluster_routing_leaves_the_addresses_to_the_clusters() {
        let d = plan_of(TWO, Some(RoutingMode::Cluster)).expect("valid");
        assert_eq!(d.config.routing, RoutingMode::Cluster);
        assert!(!d.plugin.contains("address"), "{}", d.plugin);
        assert_eq!(d.backends[0].address.to_string(), "127.0.0.1:3001");
    }

    #[test]
    fn the_command_line_routing_wins_over_the_inputs_and_the_inputs_over_the_default() {
        let cluster =
            r#"{"routing": "cluster", "upstreams": [{"name": "a", "address": "10.0.0.1:80"}]}"#;
        assert_eq!(
            plan_of(cluster, None).map(|d| d.routing),
            Ok(RoutingMode::Cluster)
        );
        assert_eq!(
            plan_of(cluster, Some(RoutingMode::Host)).map(|d| d.routing),
            Ok(RoutingMode::Host)
        );
    }

    #[test]
    fn an_upstream_without_an_address_is_refused_in_either_routing() {
        let json = r#"{"upstreams": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b"}]}"#;
        let expected = "upstreams[1].address: missing; the Envoy configuration needs each \
                        backend's address: add \"address\": \"ip:port\"";
        assert_eq!(
            plan_of(json, Some(RoutingMode::Cluster)).err().as_deref(),
            Some(expected)
        );
        assert_eq!(
            plan_of(json, Some(RoutingMode::Host)).err().as_deref(),
            Some(expected)
        );
    }

    #[test]
    fn two_upstreams_at_one_address_are_refused_in_cluster_routing_too() {
        let json = r#"{"upstreams": [{"name": "a", "address": "10.0.0.1:80"},
                                     {"name": "b", "address": "10.0.0.1:80"}]}"#;
        assert_eq!(
            plan_of(json, Some(RoutingMode::Cluster)).err().as_deref(),
            Some("upstreams[1].address: \"10.0.0.1:80\" is another upstream's address too")
        );
    }

    #[test]
    fn two_upstreams_in_one_cluster_are_refused() {
        let json = r#"{"upstreams": [{"name": "a", "cluster": "b", "address": "10.0.0.1:80"},
                                     {"name": "b", "address": "10.0.0.2:80"}]}"#;
        assert_eq!(
            plan_of(json, None).err().as_deref(),
            Some(
                "upstreams[1]: its cluster \"b\" is upstreams[0]'s too; each backend needs a \
                 cluster of its own: set another `cluster`"
            )
        );
    }

    #[test]
    fn a_cluster_named_like_the_pool_is_refused_in_host_routing_only() {
        let json = r#"{"upstreams": [{"name": "pool", "address": "10.0.0.1:80"}]}"#;
        assert!(plan_of(json, Some(RoutingMode::Cluster)).is_ok());
        assert_eq!(
            plan_of(json, Some(RoutingMode::Host)).err().as_deref(),
            Some(
                "upstreams[0]: its cluster is named \"pool\", like the cluster every backend \
                 shares in host routing: set another `cluster`"
            )
        );
    }

    #[test]
    fn host_names_resolve_in_cluster_routing_and_are_refused_in_host_routing() {
        let json = r#"{"upstreams": [{"name": "a", "address": "app1.internal:3000"}]}"#;
        let d = plan_of(json, Some(RoutingMode::Cluster)).expect("valid");
        assert_eq!(
            d.backends[0].address,
            Endpoint::Name {
                host: "app1.internal".into(),
                port: 3000
            }
        );
        let error = plan_of(json, Some(RoutingMode::Host)).expect_err("a host name");
        assert!(
            error.starts_with("upstreams[0].address: \"app1.internal:3000\" is a host name;"),
            "{error}"
        );
    }

    #[test]
    fn an_ip_address_spelled_another_way_is_written_as_envoy_prints_it() {
        let json = r#"{"upstreams": [{"name": "a", "address": "[0:0::1]:3000"}]}"#;
        for routing in [RoutingMode::Host, RoutingMode::Cluster] {
            let d = plan_of(json, Some(routing)).expect("valid");
            assert_eq!(d.backends[0].address.to_string(), "[::1]:3000");
        }
        let host = plan_of(json, Some(RoutingMode::Host)).expect("valid");
        assert_eq!(
            host.config.upstreams[0].address.as_deref(),
            Some("[::1]:3000")
        );
    }

    #[test]
    fn an_address_that_is_not_host_and_port_is_refused_in_either_routing() {
        let json = r#"{"upstreams": [{"name": "a", "address": "10.0.0.1"}]}"#;
        assert_eq!(
            plan_of(json, Some(RoutingMode::Cluster)).err().as_deref(),
            Some("upstreams[0].address: expected host:port, got \"10.0.0.1\"")
        );
        assert_eq!(
            plan_of(json, Some(RoutingMode::Host)).err().as_deref(),
            Some(
                "upstreams[0].address: expected ip:port like \"10.0.0.1:8080\" or \"[::1]:8080\", \
                 got \"10.0.0.1\""
            )
        );
    }

    #[test]
    fn the_status_page_is_the_same_pool_in_either_routing_with_the_inputs_page_members() {
        let json = r#"{"upstreams": [{"name": "a", "address": "10.0.0.1:80"}],
                       "status_path": "/lb", "status_public": true}"#;
        for routing in [RoutingMode::Host, RoutingMode::Cluster] {
            let d = plan_of(json, Some(routing)).expect("valid");
            assert_eq!(
                d.page,
                StatusPage {
                    path: "/lb".into(),
                    public: true
                }
            );
            let page = Config::parse(d.page_plugin.as_bytes()).expect("the module reads it");
            assert_eq!(page.upstreams, d.config.upstreams, "{routing:?}");
            assert!(!d.plugin.contains("status_"), "{}", d.plugin);
        }
        let plain = plan_of(TWO, None).expect("valid");
        assert_eq!(plain.page, StatusPage::default());
    }

    #[test]
    fn a_status_path_the_module_refuses_is_refused_at_its_path() {
        let json = r#"{"upstreams": [{"name": "a", "address": "10.0.0.1:80"}],
                       "status_path": "lb"}"#;
        assert_eq!(
            plan_of(json, None).err().as_deref(),
            Some("status_path: must be a path like \"/upcheck/status\", got \"lb\"")
        );
    }

    #[test]
    fn the_modules_own_message_comes_first() {
        let json = r#"{"upstreams": [{"name": "a", "address": "10.0.0.1:80"}],
                       "health_checks": {"passive": {"max_fails": 0}}}"#;
        assert_eq!(
            plan_of(json, None).err().as_deref(),
            Some("health_checks.passive.max_fails: must be at least 1, got 0")
        );
    }
}
