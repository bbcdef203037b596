//! A fake backend in a process of its own, so a test can crash it as a real app server crashes:
//! SIGKILL, no goodbye, the kernel closing its port and connections.
//!
//! It is the `fake-upstream` binary (the same server as [`crate::upstream`]); a test passes its
//! path, `env!("CARGO_BIN_EXE_fake-upstream")`, which Cargo gives integration tests only. The
//! process is killed by its own pid when its handle drops, also when the test panics. Its counts
//! come over HTTP (`GET /__counts`), so they start again from zero when it is restarted.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::mode::Schedule;
use crate::upstream::Counts;

/// A running `fake-upstream` process.
pub struct UpstreamProcess {
    child: Child,
    name: String,
    addr: SocketAddr,
    http: reqwest::Client,
}

impl UpstreamProcess {
    /// Runs `binary` as backend `name` on 127.0.0.1:`port` (0: any free port) following
    /// `schedule`, and waits until it listens. A backend restarted after a crash is spawned again
    /// with the port it had.
    pub fn spawn(
        binary: &Path,
        name: &str,
        port: u16,
        schedule: impl Into<Schedule>,
    ) -> Result<Self> {
        let schedule = schedule.into();
        let mut command = Command::new(binary);
        command
            .args(["--name", name, "--port", &port.to_string()])
            .args(["--mode", &schedule.first.to_string()]);
        for switch in &schedule.switches {
            let at = upcheck_policy::duration::exact(switch.at);
            command.args(["--then", &format!("{at}={}", switch.mode)]);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", binary.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut process = UpstreamProcess {
            child,
            name: name.to_owned(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(2))
                .build()?,
        };
        // The first line says where it listens; it ends (without one) if it could not bind.
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            bail!(
                "{} did not start as {name} on port {port}: {line:?} ({:?})",
                binary.display(),
                process.child.try_wait()
            );
        };
        process.addr = addr
            .parse()
            .with_context(|| format!("{} printed {line:?}", binary.display()))?;
        Ok(process)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it with SIGKILL, by its pid, and waits until it is gone.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// What it has received since it started.
    pub async fn counts(&self) -> Result<Counts> {
        let url = format!("http://{}/__counts", self.addr);
        let text = self.http.get(&url).send().await?.text().await?;
        let body: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("GET {url}: {text:?}"))?;
        let count = |key: &str| {
            body[key]
                .as_u64()
                .with_context(|| format!("GET {url}: no {key} in {body}"))
        };
        Ok(Counts {
            probes: count("probes")?,
            requests: count("requests")?,
            with_routing_header: count("with_routing_header")?,
        })
    }
}

impl Drop for UpstreamProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
