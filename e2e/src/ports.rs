//! Free ports, on 127.0.0.1 unless a test asks for another address of this machine, picked when
//! a test runs, so tests never collide on a fixed port.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};

/// An address on 127.0.0.1 where nothing listens right now.
///
/// The kernel picks the port; it is free again when this returns, for Envoy to bind (or for a
/// test to connect to and be refused). Another process could take it in between; the ephemeral
/// range is large enough that tests do not see that in practice.
pub fn free_addr() -> io::Result<SocketAddr> {
    free_addr_on(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// An address on `ip` (one of this machine's) where nothing listens right now; as [`free_addr`].
pub fn free_addr_on(ip: IpAddr) -> io::Result<SocketAddr> {
    TcpListener::bind((ip, 0))?.local_addr()
}
