//! `upcheck envoy --etcd ADDR:PORT[,ADDR:PORT…]`: balancers that share one view of health.
//!
//! The plugin configuration gets a `fleet` object naming the cluster that reaches etcd (the
//! input's own `fleet` is kept, and names the cluster), and the Envoy
//! configuration gets that cluster: every etcd member an endpoint, Envoy's own connection
//! handling, timeouts and active checks of etcd's `/health`, so a member that is down is passed
//! over without the filter knowing. It is never a cluster users are routed to: a backend's
//! cluster named like it is refused.
//!
//! TLS to etcd (`--etcd-ca`, with `--etcd-cert` and `--etcd-key` when etcd asks clients for a
//! certificate, `--etcd-sni`) is the cluster's transport socket, so the module's calls and
//! Envoy's checks of `/health` go over it alike and the module knows nothing of it. The members'
//! certificates are checked against the CA and for the name they are reached by: each member's
//! IP address (what etcd's own clients check when they dial an IP), or the `--etcd-sni` name.
//! Each file is read here, so that a path that cannot be read is refused now rather than by an
//! Envoy that will not start.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use upcheck_policy::ConfigError;

use crate::endpoint::{socket, Endpoint};
use crate::plugin::Source;
use crate::refuse;
use crate::tree::{list, map, number, plain, text, Node};

/// The etcd cluster's name when the input's `fleet` does not name one.
pub const CLUSTER: &str = "etcd";

/// The etcd cluster as the Envoy configuration has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Etcd {
    /// Its name, as the plugin configuration's `fleet.cluster`.
    pub cluster: String,
    /// etcd's client endpoints (each member's JSON gateway).
    pub members: Vec<SocketAddr>,
    /// TLS to the members ([`TlsFlags::tls`]). Default: none, plain HTTP.
    pub tls: Option<Tls>,
    /// The cluster through which the watch reaches the same members' gRPC service, HTTP/2, as
    /// the plugin configuration's `fleet.watch_cluster`. Default: none (the prefix is read on a
    /// clock).
    #[serde(default)]
    pub watch_cluster: Option<String>,
}

/// TLS to etcd, as the cluster's transport socket has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tls {
    /// The CA that signed the members' certificates (absolute, as Envoy reads it wherever it runs).
    pub ca: PathBuf,
    /// The certificate Envoy shows when etcd asks for one (`--client-cert-auth`). Default: none.
    pub client: Option<ClientCertificate>,
    /// The server name Envoy sends and the members' certificates must carry. Default: none; each
    /// member's certificate must then carry its IP address.
    pub sni: Option<String>,
}

/// A client certificate and its private key (absolute paths).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCertificate {
    /// The certificate chain, PEM.
    pub cert: PathBuf,
    /// Its private key, PEM.
    pub key: PathBuf,
}

/// `--etcd-ca`, `--etcd-cert`, `--etcd-key` and `--etcd-sni` as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFlags {
    /// `--etcd-ca FILE`.
    pub ca: Option<PathBuf>,
    /// `--etcd-cert FILE`.
    pub cert: Option<PathBuf>,
    /// `--etcd-key FILE`.
    pub key: Option<PathBuf>,
    /// `--etcd-sni NAME`.
    pub sni: Option<String>,
}

impl TlsFlags {
    /// TLS to etcd as these flags ask: none without any of them. `with_members` says whether
    /// `--etcd` was given, without which they mean nothing. Refused, naming the flag: any of them
    /// without `--etcd`, the others without `--etcd-ca`, a certificate without its key or a key
    /// without its certificate, a file that cannot be read or holds no PEM, an SNI that is not a
    /// host name.
    pub fn tls(&self, with_members: bool) -> Result<Option<Tls>, ConfigError> {
        let given = [
            ("--etcd-ca", self.ca.is_some()),
            ("--etcd-cert", self.cert.is_some()),
            ("--etcd-key", self.key.is_some()),
            ("--etcd-sni", self.sni.is_some()),
        ];
        let Some(&(first, _)) = given.iter().find(|(_, given)| *given) else {
            return Ok(None);
        };
        if !with_members {
            return Err(refuse(
                first,
                "TLS to etcd needs etcd's members: add --etcd ADDR:PORT[,ADDR:PORT…]",
            ));
        }
        let Some(ca) = &self.ca else {
            return Err(refuse(
                first,
                "TLS to etcd needs the CA that signed the members' certificates: add --etcd-ca FILE",
            ));
        };
        let client = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some(ClientCertificate {
                cert: pem("--etcd-cert", cert)?,
                key: pem("--etcd-key", key)?,
            }),
            (Some(_), None) => {
                return Err(refuse(
                    "--etcd-cert",
                    "the client certificate needs its private key: add --etcd-key FILE",
                ))
            }
            (None, Some(_)) => {
                return Err(refuse(
                    "--etcd-key",
                    "the private key needs its client certificate: add --etcd-cert FILE",
                ))
            }
            (None, None) => None,
        };
        let sni = self.sni.as_deref().map(server_name).transpose()?;
        Ok(Some(Tls {
            ca: pem("--etcd-ca", ca)?,
            client,
            sni,
        }))
    }
}

/// `path`, made absolute, once it reads as PEM; else refused at `flag`. The file's contents are
/// never quoted: a private key must not end up in a message.
fn pem(flag: &str, path: &Path) -> Result<PathBuf, ConfigError> {
    let shown = path.display();
    let bytes =
        std::fs::read(path).map_err(|e| refuse(flag, format!("{shown}: cannot read it: {e}")))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(refuse(
            flag,
            format!("{shown}: not PEM (no -----BEGIN line); Envoy reads PEM files"),
        ));
    }
    let absolute = std::path::absolute(path)
        .map_err(|e| refuse(flag, format!("{shown}: no absolute path: {e}")))?;
    if absolute.to_str().is_none() {
        return Err(refuse(
            flag,
            format!("{shown}: the path is not UTF-8, which the YAML cannot carry"),
        ));
    }
    Ok(absolute)
}

/// `name` as the SNI: a host name (labels of letters, digits and hyphens), never an IP address.
fn server_name(name: &str) -> Result<String, ConfigError> {
    if name.parse::<IpAddr>().is_ok() {
        return Err(refuse(
            "--etcd-sni",
            format!(
                "{name:?} is an IP address, which TLS does not send as a server name; leave \
                 --etcd-sni out and each member's certificate is checked for its IP address"
            ),
        ));
    }
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if name.len() > 253 || !name.split('.').all(label) {
        return Err(refuse(
            "--etcd-sni",
            format!("expected a host name like etcd.internal, got {name:?}"),
        ));
    }
    Ok(name.to_owned())
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
    let watch_cluster = match fields.get("watch_cluster") {
        Some(Value::String(name)) => Some(name.clone()),
        // The operator's choice: the prefix read on a clock.
        Some(Value::Null) => None,
        Some(_) => return Err(refuse("fleet.watch_cluster", "expected a cluster name")),
        None => {
            let name = format!("{cluster}_grpc");
            fields.insert("watch_cluster".into(), Value::String(name.clone()));
            Some(name)
        }
    };
    Ok(Etcd {
        cluster,
        members,
        tls: None,
        watch_cluster,
    })
}

/// The etcd clusters: the JSON gateway's, and the watch's when there is one.
pub fn clusters(etcd: &Etcd) -> Vec<Node> {
    let mut clusters = vec![cluster(etcd, &etcd.cluster, false)];
    if let Some(watch) = &etcd.watch_cluster {
        clusters.push(cluster(etcd, watch, true));
    }
    clusters
}

/// A cluster's protocol options for HTTP/2 upstream (h2c, or h2 over its TLS): what a gRPC
/// backend speaks, and etcd's gRPC service.
pub fn http2() -> (&'static str, Node) {
    (
        "typed_extension_protocol_options",
        map([(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            map([
                (
                    "@type",
                    text("type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"),
                ),
                (
                    "explicit_http_config",
                    map([(
                        "http2_protocol_options",
                        map(Vec::<(String, Node)>::new()).flow(),
                    )]),
                ),
            ]),
        )]),
    )
}

/// An etcd cluster named `name`: HTTP/1.1 to each member's JSON gateway, or with `grpc` HTTP/2
/// to its gRPC service (over TLS when asked), Envoy checking each member's `/health` so that
/// requests go to members that have a leader.
fn cluster(etcd: &Etcd, name: &str, grpc: bool) -> Node {
    let endpoints = etcd.members.iter().map(|m| {
        map([(
            "endpoint",
            map([(
                "address",
                map([("socket_address", socket(&Endpoint::Ip(*m)))]),
            )]),
        )])
    });
    let tls = etcd
        .tls
        .as_ref()
        .map(|tls| ("transport_socket", transport_socket(tls, etcd)));
    let http2 = grpc.then(http2);
    map([
        ("name", text(name)),
        ("type", text("STATIC")),
        ("connect_timeout", plain("1s")),
        ("lb_policy", text("ROUND_ROBIN")),
    ]
    .into_iter()
    .chain(tls)
    .chain(http2)
    .chain([
        (
            "health_checks",
            list([map([
                ("timeout", plain("1s")),
                ("interval", plain("2s")),
                (
                    "no_traffic_interval",
                    plain("2s").note(
                        "Also before upcheck's first call: Envoy's default (60s) would leave a \
                         member whose first check failed (Envoy busy starting) unhealthy a minute.",
                    ),
                ),
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
                ("cluster_name", text(name)),
                ("endpoints", list([map([("lb_endpoints", list(endpoints))])])),
            ]),
        ),
    ]))
    .gap()
    .note(match grpc {
        false => format!(
            "etcd ({} member{}), through which the balancers share one view of health (the \
             plugin configuration's fleet). Never a cluster users are routed to.",
            etcd.members.len(),
            if etcd.members.len() == 1 { "" } else { "s" }
        ),
        true => "The same members' gRPC service, HTTP/2: the stream on which each balancer \
                 follows the fleet's keys (etcd's Watch; fleet.watch_cluster)."
            .into(),
    })
}

/// TLS to the members: their certificates checked against the CA and for the name they are
/// reached by, and the client certificate when there is one.
fn transport_socket(tls: &Tls, etcd: &Etcd) -> Node {
    let file = |path: &Path| map([("filename", text(path.to_string_lossy()))]).flow();
    let names: Vec<Node> = match &tls.sni {
        Some(name) => vec![san("DNS", name)],
        None => {
            let mut ips: Vec<IpAddr> = Vec::new();
            for ip in etcd.members.iter().map(SocketAddr::ip) {
                if !ips.contains(&ip) {
                    ips.push(ip);
                }
            }
            ips.iter()
                .map(|ip| san("IP_ADDRESS", &ip.to_string()))
                .collect()
        }
    };
    let validation = map([
        ("trusted_ca", file(&tls.ca)),
        (
            "match_typed_subject_alt_names",
            list(names).note(match &tls.sni {
                Some(_) => "The members' certificates must name the server name sent.",
                None => {
                    "A member's certificate must name a member's IP address, as etcd's own \
                         clients check."
                }
            }),
        ),
    ]);
    let certificates = tls.client.as_ref().map(|c| {
        (
            "tls_certificates",
            list([map([
                ("certificate_chain", file(&c.cert)),
                ("private_key", file(&c.key)),
            ])])
            .note("Shown to etcd, which asks for it with --client-cert-auth."),
        )
    });
    let context = map(certificates
        .into_iter()
        .chain([("validation_context", validation)]));
    map([
        ("name", text("envoy.transport_sockets.tls")),
        (
            "typed_config",
            map([
                (
                    "@type",
                    text("type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"),
                ),
                ("common_tls_context", context),
            ]
            .into_iter()
            .chain(tls.sni.as_ref().map(|name| ("sni", text(name))))),
        ),
    ])
    .note(
        "TLS to etcd: upcheck's calls and Envoy's checks of /health alike; the members' \
         certificates are checked against the CA.",
    )
}

/// A subject alternative name the members' certificates must carry: `kind` (`DNS`,
/// `IP_ADDRESS`) and the exact value.
fn san(kind: &str, value: &str) -> Node {
    map([
        ("san_type", text(kind)),
        ("matcher", map([("exact", text(value))]).flow()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd(tls: Tls) -> Etcd {
        Etcd {
            cluster: CLUSTER.into(),
            members: ["127.0.0.1:2379", "127.0.0.1:22379", "[::1]:2379"]
                .iter()
                .map(|m| m.parse().expect("an address"))
                .collect(),
            tls: Some(tls),
            watch_cluster: Some("etcd_grpc".into()),
        }
    }

    fn tls(client: bool, sni: Option<&str>) -> Tls {
        Tls {
            ca: "/etc/etcd/ca.pem".into(),
            client: client.then(|| ClientCertificate {
                cert: "/etc/etcd/balancer.pem".into(),
                key: "/etc/etcd/balancer.key".into(),
            }),
            sni: sni.map(str::to_owned),
        }
    }

    #[test]
    fn without_tls_neither_cluster_has_a_transport_socket() {
        let mut plain = etcd(tls(false, None));
        plain.tls = None;
        let written = clusters(&plain);
        assert_eq!(written.len(), 2);
        for cluster in written {
            assert_eq!(cluster.json().get("transport_socket"), None);
        }
    }

    #[test]
    fn the_watch_goes_to_the_same_members_over_http2_with_the_same_tls() {
        let written: Vec<serde_json::Value> = clusters(&etcd(tls(true, None)))
            .iter()
            .map(Node::json)
            .collect();
        let [gateway, watch] = written.as_slice() else {
            panic!("two clusters: {written:?}");
        };
        assert_eq!(watch["name"], "etcd_grpc");
        let options = &watch["typed_extension_protocol_options"]
            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
        assert_eq!(
            options["explicit_http_config"],
            serde_json::json!({"http2_protocol_options": {}})
        );
        assert_eq!(gateway.get("typed_extension_protocol_options"), None);
        assert_eq!(watch["transport_socket"], gateway["transport_socket"]);
        assert_eq!(
            watch["load_assignment"]["endpoints"],
            gateway["load_assignment"]["endpoints"]
        );
    }

    #[test]
    fn tls_checks_the_members_against_the_ca_and_for_each_members_ip_address() {
        let json = cluster(&etcd(tls(false, None)), CLUSTER, false).json();
        let socket = &json["transport_socket"];
        assert_eq!(socket["name"], "envoy.transport_sockets.tls");
        let config = &socket["typed_config"];
        assert_eq!(
            config["@type"],
            "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
        );
        assert_eq!(config.get("sni"), None);
        let context = &config["common_tls_context"];
        assert_eq!(context.get("tls_certificates"), None);
        let validation = &context["validation_context"];
        assert_eq!(
            validation["trusted_ca"],
            serde_json::json!({"filename": "/etc/etcd/ca.pem"})
        );
        assert_eq!(
            validation["match_typed_subject_alt_names"],
            serde_json::json!([
                {"san_type": "IP_ADDRESS", "matcher": {"exact": "127.0.0.1"}},
                {"san_type": "IP_ADDRESS", "matcher": {"exact": "::1"}},
            ]),
            "each address once"
        );
        assert_eq!(
            json["health_checks"][0]["http_health_check"]["path"],
            "/health"
        );
    }

    #[test]
    fn a_client_certificate_is_shown_and_an_sni_is_sent_and_checked_instead_of_the_addresses() {
        let json = cluster(&etcd(tls(true, Some("etcd.internal"))), CLUSTER, false).json();
        let config = &json["transport_socket"]["typed_config"];
        assert_eq!(config["sni"], "etcd.internal");
        let context = &config["common_tls_context"];
        assert_eq!(
            context["tls_certificates"],
            serde_json::json!([{
                "certificate_chain": {"filename": "/etc/etcd/balancer.pem"},
                "private_key": {"filename": "/etc/etcd/balancer.key"},
            }])
        );
        assert_eq!(
            context["validation_context"]["match_typed_subject_alt_names"],
            serde_json::json!([{"san_type": "DNS", "matcher": {"exact": "etcd.internal"}}])
        );
    }

    #[test]
    fn an_sni_must_be_a_host_name() {
        assert_eq!(
            server_name("etcd-1.internal").ok().as_deref(),
            Some("etcd-1.internal")
        );
        for bad in [
            "",
            "etcd..internal",
            "-etcd",
            "etcd_1",
            "etcd internal",
            "etcd.internal.",
        ] {
            assert_eq!(
                server_name(bad).map_err(|e| e.path),
                Err("--etcd-sni".to_owned()),
                "{bad:?}"
            );
        }
        let ip = server_name("127.0.0.1").expect_err("an IP address");
        assert!(ip.reason.contains("is an IP address"), "{}", ip.reason);
    }
}
