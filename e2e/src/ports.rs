//! Free ports, on 127.0.0.1 unless a test asks for another address of this machine, picked when
//! a test runs, so tests never collide on a fixed port.

use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Mutex;

/// The ports handed out so far in this process: never handed out twice, so that two listeners of
/// one Envoy, or two tests side by side, are not given the same port the kernel offered again.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// How many ports the kernel may offer that were handed out already before one is taken anyway.
const OFFERS: usize = 64;

/// An address on 127.0.0.1 where nothing listens right now.
///
/// The kernel picks the port; it is free again when this returns, for Envoy to bind (or for a
/// test to connect to and be refused). A port handed out before in this process is not handed
/// out again. Another process could take it in between; the ephemeral range is large enough that
/// tests do not see that in practice.
pub fn free_addr() -> io::Result<SocketAddr> {
    free_addr_on(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// An address on `ip` (one of this machine's) where nothing listens right now; as [`free_addr`].
pub fn free_addr_on(ip: IpAddr) -> io::Result<SocketAddr> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut offered = TcpListener::bind((ip, 0))?.local_addr()?;
    for _ in 0..OFFERS {
        if handed_out.insert(offered.port()) {
            break;
        }
        offered = TcpListener::bind((ip, 0))?.local_addr()?;
    }
    Ok(offered)
}
