//! Member 0 of a test's etcd cluster on a network of its own, so that the kernel can part it
//! from its peers while every client still reaches it: the partition a data centre makes when
//! one member loses the others but not the balancers. Killing or freezing a member cannot make
//! it (both take the member from its clients too), and with every member on 127.0.0.1 the
//! kernel has no address to tell member 0's packets from the others' by.
//!
//! The test makes a network namespace of its own (`ip netns add`) joined to this machine by a
//! veth pair in a private /30 of 10.201.0.0/16 ([`Network`]): member 0 runs inside it
//! (`ip netns exec`) on the inner address, the other members listen for peers on the host end,
//! and their clients on 127.0.0.1 as in any test; the balancers, on this machine, reach member 0
//! at the inner address. A [`Partition`] is a pair of `iptables` rules on this machine's INPUT
//! and OUTPUT chains ([`crate::path_cut`]'s way) that drop every TCP packet from and to the inner
//! address on the members' peer ports, both directions, and nothing of member 0's client port.
//!
//! Names are unique per test process and short (an interface's name is at most 15 characters):
//! the process ID and a count. The /30 is one no other test holds, in this process or another:
//! a lock (`flock`) on a file of the temporary directory per /30, held while the network lives
//! and released by the kernel if the process dies, and one in which no interface of this machine
//! has an address already (left by a test killed before it could clean up). Everything goes
//! when its handle drops, the test's failure included; a test killed by SIGKILL leaves its
//! namespace behind (`ip netns del upcheck-PID-N` removes it and its veth).
//!
//! It needs root, `ip` (iproute2) and Debian's `iptables`; a machine without them fails the test
//! that asks for it, saying so.

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, ensure, Context, Result};

use crate::path_cut::iptables;

/// The networks made so far by this process: the count in their names.
static MADE: AtomicU32 = AtomicU32::new(0);

/// The longest name Linux gives an interface.
const IFNAMSIZ: usize = 15;

/// A network namespace joined to this machine by a veth pair; removed when dropped.
pub(super) struct Network {
    /// The namespace's name (`ip netns`).
    pub(super) name: String,
    /// The host end of the veth pair.
    link: String,
    /// Whether the veth pair was made (and is deleted on drop).
    linked: bool,
    /// The host end's address.
    pub(super) host: Ipv4Addr,
    /// The address inside the namespace.
    pub(super) inside: Ipv4Addr,
    /// The lock on the /30, held while this lives.
    _subnet: File,
}

impl Network {
    /// Makes a namespace and its veth pair in a /30 no other test holds, both ends up.
    pub(super) fn make() -> Result<Network> {
        let pid = std::process::id();
        let count = MADE.fetch_add(1, Ordering::Relaxed);
        let (third, subnet) = free_subnet(pid)?;
        let inner = format!("u{pid}-{count}n");
        let mut network = Network {
            name: format!("upcheck-{pid}-{count}"),
            link: format!("u{pid}-{count}h"),
            linked: false,
            host: Ipv4Addr::new(10, 201, third, 1),
            inside: Ipv4Addr::new(10, 201, third, 2),
            _subnet: subnet,
        };
        ensure!(
            network.link.len() <= IFNAMSIZ && inner.len() <= IFNAMSIZ,
            "interface names too long: {} {inner}",
            network.link
        );
        ip(&["netns", "add", &network.name])?;
        // From here on, a failure drops `network`, which removes what was made.
        let (link, name) = (network.link.as_str(), network.name.as_str());
        ip(&[
            "link", "add", link, "type", "veth", "peer", "name", &inner, "netns", name,
        ])?;
        network.linked = true;
        let host = format!("{}/30", network.host);
        let inside = format!("{}/30", network.inside);
        let ns = ["-n", network.name.as_str()];
        ip(&["addr", "add", &host, "dev", &network.link])?;
        ip(&["link", "set", &network.link, "up"])?;
        ip(&[&ns[..], &["addr", "add", &inside, "dev", &inner]].concat())?;
        ip(&[&ns[..], &["link", "set", &inner, "up"]].concat())?;
        ip(&[&ns[..], &["link", "set", "lo", "up"]].concat())?;
        Ok(network)
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // The namespace's end goes with the host's; the namespace itself once no process runs in
        // it (the members were killed before).
        if self.linked {
            if let Err(e) = ip(&["link", "del", &self.link]) {
                eprintln!(
                    "etcd network: the veth stays ({e}); remove it with ip link del {}",
                    self.link
                );
            }
        }
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!(
                "etcd network: the namespace stays ({e}); remove it with ip netns del {}",
                self.name
            );
        }
    }
}

/// A /30 of 10.201.0.0/16 (its third byte) that no other test holds, and the lock that holds it
/// for this one: tried from one the process ID picks, so that tests of two processes seldom try
/// the same first.
fn free_subnet(pid: u32) -> Result<(u8, File)> {
    for k in 0..256 {
        let third = u8::try_from((pid + k) % 256)?;
        let path = std::env::temp_dir().join(format!("upcheck-e2e-10.201.{third}.0-30.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns; it touches no memory.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if locked && !addressed(third)? {
            return Ok((third, file));
        }
    }
    bail!("no /30 of 10.201.0.0/16 is free: every one is held by a test or has an address here")
}

/// Whether an interface of this machine has an address in 10.201.`third`.0/30.
fn addressed(third: u8) -> Result<bool> {
    let prefix = format!("10.201.{third}.0/30");
    let output = Command::new("ip")
        .args(["-o", "-4", "addr", "show", "to", &prefix])
        .output()
        .context("ip could not be run (needs iproute2)")?;
    ensure!(
        output.status.success(),
        "ip addr show to {prefix}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(!output.stdout.is_empty())
}

/// Runs `ip ARGS…`.
fn ip(args: &[&str]) -> Result<()> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .context("ip could not be run (needs root and iproute2)")?;
    ensure!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// Member 0 parted from its peers while this lives: every TCP packet between its address and
/// the members' peer ports dropped, both directions; its clients reach it as before.
#[derive(Debug)]
pub struct Partition {
    rules: Vec<Vec<String>>,
}

impl Partition {
    /// Drops what comes from and goes to `inside` on any of `peer_ports`, at the head of this
    /// machine's INPUT (packets from the namespace) and OUTPUT (packets to it) chains.
    pub(super) fn new(inside: Ipv4Addr, peer_ports: &[u16]) -> Result<Partition> {
        let ports: Vec<String> = peer_ports.iter().map(u16::to_string).collect();
        let (address, ports) = (inside.to_string(), ports.join(","));
        let mut partition = Partition { rules: Vec::new() };
        for (chain, side) in [("INPUT", "-s"), ("OUTPUT", "-d")] {
            let rule: Vec<String> = [
                chain,
                "-p",
                "tcp",
                side,
                &address,
                "-m",
                "multiport",
                "--ports",
                &ports,
                "-j",
                "DROP",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            // Inserted rather than appended: no rule of the chain accepts these packets first.
            iptables("-I", &rule)?;
            partition.rules.push(rule);
        }
        Ok(partition)
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        for rule in &self.rules {
            if let Err(e) = iptables("-D", rule) {
                eprintln!(
                    "etcd partition: the rule stays ({e}); remove it with iptables -D {}",
                    rule.join(" ")
                );
            }
        }
    }
}
