//! Where Envoy connects: a backend's, an etcd member's or a listener's address, as the input
//! gives it and as the Envoy configuration writes it.
//!
//! The deployment reads each backend's endpoint from the input; the Envoy configuration writes
//! every endpoint the same way, whichever cluster or listener it belongs to ([`socket`]).

use std::fmt;
use std::net::SocketAddr;

use crate::tree::{map, number, text, Node};

/// A TCP endpoint: an IP address, or a host name Envoy resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// An IP address and port.
    Ip(SocketAddr),
    /// A host name (resolved by DNS) and port.
    Name {
        /// The host name.
        host: String,
        /// The port.
        port: u16,
    },
}

impl Endpoint {
    /// `host:port`, `ip:port` or `[ipv6]:port`.
    pub(crate) fn parse(text: &str) -> Option<Endpoint> {
        if let Ok(ip) = text.parse::<SocketAddr>() {
            return Some(Endpoint::Ip(ip));
        }
        let (host, port) = text.rsplit_once(':')?;
        if host.starts_with('[') {
            return None;
        }
        Some(Endpoint::Name {
            host: host.to_owned(),
            port: port.parse().ok()?,
        })
    }

    /// The host: an IP address (IPv6 without brackets) or a name.
    pub fn host(&self) -> String {
        match self {
            Endpoint::Ip(ip) => ip.ip().to_string(),
            Endpoint::Name { host, .. } => host.clone(),
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            Endpoint::Ip(ip) => ip.port(),
            Endpoint::Name { port, .. } => *port,
        }
    }

    pub(crate) fn with_port(&self, port: u16) -> Endpoint {
        match self {
            Endpoint::Ip(ip) => Endpoint::Ip(SocketAddr::new(ip.ip(), port)),
            Endpoint::Name { host, .. } => Endpoint::Name {
                host: host.clone(),
                port,
            },
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Endpoint::Ip(ip) => write!(f, "{ip}"),
            Endpoint::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// `{ address: …, port_value: … }`.
pub fn socket(endpoint: &Endpoint) -> Node {
    map([
        ("address", text(endpoint.host())),
        ("port_value", number(u64::from(endpoint.port()))),
    ])
    .flow()
}
