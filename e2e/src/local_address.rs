//! A non-loopback address on this machine, made for one test and removed with it.
//!
//! A rule keyed on "is the client on loopback" can only be tested from an address that is not
//! loopback. This machine's own interface addresses would do, but a listener on them is reachable
//! from the network; so a test gets an address of its own, `10.200.x.y/32`, on a veth pair made
//! for it (this kernel has no dummy interfaces) and named for the test process. Traffic between
//! two addresses of this machine never leaves it, whichever interface holds them, and a client
//! socket bound to the address connects from it, so the server sees a non-loopback peer.
//!
//! It needs root (`CAP_NET_ADMIN`) and `ip`; without them a test fails saying so. The pair is
//! deleted, by its own name, when the handle drops, also when the test panics.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context, Result};

/// How many addresses this process has made, so each gets its own link name and address.
static MADE: AtomicU32 = AtomicU32::new(0);

/// An address of this machine that is not loopback, on a veth pair of its own.
pub struct LocalAddress {
    ip: Ipv4Addr,
    /// The link holding the address; its peer is `{link}p`.
    link: String,
}

impl LocalAddress {
    /// Makes the pair and puts a fresh `10.200.x.y/32` on it.
    pub fn create() -> Result<Self> {
        let made = MADE.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // At most 4 + 6 + 1 characters (+ 1 for the peer): within Linux's 15.
        let link = format!("upck{:x}{}", pid & 0xff_ffff, made % 10);
        let host = (pid.wrapping_mul(16).wrapping_add(made) & 0xffff) as u16;
        let [x, y] = host.to_be_bytes();
        let ip = Ipv4Addr::new(10, 200, x, y);
        let peer = format!("{link}p");
        ip_command(&["link", "add", &link, "type", "veth", "peer", "name", &peer])?;
        // From here on, dropping it deletes the pair (and the address with it).
        let address = LocalAddress { ip, link };
        ip_command(&["addr", "add", &format!("{ip}/32"), "dev", &address.link])?;
        ip_command(&["link", "set", &address.link, "up"])?;
        ip_command(&["link", "set", &peer, "up"])?;
        Ok(address)
    }

    /// The address.
    pub fn ip(&self) -> IpAddr {
        IpAddr::V4(self.ip)
    }
}

impl Drop for LocalAddress {
    fn drop(&mut self) {
        if let Err(e) = ip_command(&["link", "del", &self.link]) {
            eprintln!("cannot remove the test address {}: {e:#}", self.ip);
        }
    }
}

/// Runs `ip` with `args`; an error with what it said if it failed.
fn ip_command(args: &[&str]) -> Result<()> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .context("cannot run `ip` (iproute2), needed to make a non-loopback test address")?;
    if !output.status.success() {
        bail!(
            "`ip {}` failed ({}): {} (a non-loopback test address needs root)",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}
