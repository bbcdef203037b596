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
//! [`Etcd::start_apart`] starts member 0 in a network namespace of the test's own, so that the
//! kernel can part it from its peers while every client still reaches it ([`Etcd::partition`]).
//!
//! The pieces, each in a module of its own: the members' processes (`cluster`), what the harness
//! reads and writes through the gateway (`client`), member 0's network of its own and the
//! partition (`apart`), and the balancers ([`Balancer`]).

mod apart;
mod balancer;
mod client;
mod cluster;

use std::net::SocketAddr;
use std::process::Child;

use tempfile::TempDir;

use crate::envoy::Turn;
use crate::tls::Certificates;

pub use apart::Partition;
pub use balancer::{plugin, Balancer, Machine, Visit};

/// One etcd member.
struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    /// The network namespace it runs in, if not this machine's own.
    netns: Option<String>,
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
    /// Member 0's network of its own, when it has one ([`Etcd::start_apart`]); removed after the
    /// members are killed.
    network: Option<apart::Network>,
    /// The Envoy turns of the test binary its test holds: every one for a fleet test that times
    /// what etcd carries between its balancers, as many as it runs Envoys for one whose bars
    /// are counts ([`Etcd::start_beside`]).
    _turn: Turn,
}

impl Etcd {
    /// The URL of `path` on member `m`, over HTTPS when TLS is on.
    fn url(&self, m: &Member, path: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}{path}", m.client)
    }
}
