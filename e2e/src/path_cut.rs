//! A fault in one balancer's path to one backend, made by the kernel: an `iptables` rule on this
//! machine's OUTPUT chain matching the balancer's source address (each balancer of a test may
//! leave from an address of its own in 127.0.0.0/8, [`crate::etcd::Machine`]) and
//! the backend's address, so that one balancer's connections to the backend are dropped (a black
//! hole: they hang until the proxy's connect timeout) or refused, while every other balancer
//! reaches it as before. The rule goes when the cut is dropped, the test's failure included.
//!
//! It needs root and Debian's `iptables` (`make deps` installs it); a machine without them fails
//! the test that asks for a cut, saying so.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

use anyhow::{ensure, Context, Result};

/// What the cut path does to a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Its packets vanish: a connection hangs until the proxy gives up on it.
    BlackHole,
    /// It is refused at once (a TCP reset), as a firewall that rejects does.
    Refused,
}

/// One balancer's path to one backend, cut while this lives.
#[derive(Debug)]
pub struct PathCut {
    rule: Vec<String>,
}

impl PathCut {
    /// Cuts the path from `from` to `to` as `cut` says.
    pub fn new(from: Ipv4Addr, to: SocketAddr, cut: Cut) -> Result<PathCut> {
        let mut rule: Vec<String> = [
            "OUTPUT",
            "-p",
            "tcp",
            "-s",
            &from.to_string(),
            "-d",
            &to.ip().to_string(),
            "--dport",
            &to.port().to_string(),
            "-j",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        match cut {
            Cut::BlackHole => rule.push("DROP".into()),
            Cut::Refused => rule.extend(["REJECT", "--reject-with", "tcp-reset"].map(String::from)),
        }
        iptables("-A", &rule)?;
        Ok(PathCut { rule })
    }
}

impl Drop for PathCut {
    fn drop(&mut self) {
        if let Err(e) = iptables("-D", &self.rule) {
            eprintln!(
                "path cut: the rule stays ({e}); remove it with iptables -D {}",
                self.rule.join(" ")
            );
        }
    }
}

/// Runs `iptables ACTION RULE…` (also what [`crate::etcd::Partition`] makes its rules with).
pub(crate) fn iptables(action: &str, rule: &[String]) -> Result<()> {
    let output = Command::new("iptables")
        .arg(action)
        .args(rule)
        .output()
        .context("iptables could not be run (needs root and Debian's iptables: make deps)")?;
    ensure!(
        output.status.success(),
        "iptables {action} {}: {}",
        rule.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}
