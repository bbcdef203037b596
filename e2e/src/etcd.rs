//! A real etcd cluster on 127.0.0.1 for one test, and the balancers that share one view of health
//! through it: Envoys started from what `upcheck envoy --etcd` writes.
//!
//! The binary comes from `UPCHECK_ETCD` (set by `mk/etcd.mk`, which installs Debian's
//! `etcd-server`); a test fails, never skips, without it. Each member runs in a temporary
//! directory of its own on free loopback ports and is killed by its own pid when its handle
//! drops (or when the test kills it). The test reads and writes etcd itself through the same JSON
//! gateway the module uses ([`Etcd::range`], [`Etcd::put`]).
//!
//! [`Etcd::start_tls`] starts the members with client TLS on and a client certificate required
//! (`--client-cert-auth`), the certificates made by the test ([`crate::tls`]): the balancers
//! reach it as `upcheck envoy --etcd-ca --etcd-cert --etcd-key` writes, and the harness over
//! HTTPS with the same CA and client certificate.
//!
//! The pieces, each in a module of its own: the members' processes (`cluster`), what the harness
//! reads and writes through the gateway (`client`), and the balancers ([`Balancer`]).

mod balancer;
mod client;
mod cluster;

use std::net::SocketAddr;
use std::process::Child;

use tempfile::TempDir;

use crate::envoy::Turn;
use crate::tls::Certificates;

pub use balancer::{plugin, Balancer, Visit};

/// One etcd member.
struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    child: Option<Child>,
}

/// A running etcd cluster; every member is killed when it drops.
pub struct Etcd {
    members: Vec<Member>,
    dir: TempDir,
    http: reqwest::Client,
    /// The root user's token, once authentication is on ([`Etcd::enable_auth`]).
    token: Option<String>,
    /// The certificates of client TLS, when it is on ([`Etcd::start_tls`]).
    tls: Option<Certificates>,
    /// Every Envoy turn of the test binary: a fleet test runs its own balancers and times what
    /// etcd carries between them, alone.
    _alone: Turn,
}

impl Etcd {
    /// The URL of `path` on member `m`, over HTTPS when TLS is on.
    fn url(&self, m: &Member, path: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}{path}", m.client)
    }
}
