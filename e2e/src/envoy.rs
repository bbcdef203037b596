//! A real Envoy 1.40 started for one test, and stopped with it.
//!
//! The binary comes from `UPCHECK_ENVOY` (set by `mk/envoy.mk`, which installs it); a test fails,
//! never skips, without it, because a green run that tested nothing would hide a broken setup.
//! Every Envoy gets free loopback ports, its own temporary directory (config, xDS files, log) and
//! is killed by its own pid when its handle drops, also when the test panics; the directory is then
//! kept and the end of the log printed, so a failure can be read.
//!
//! The tests of one binary run side by side, and so do their Envoys, up to [`ENVOYS_AT_ONCE`]
//! (or `UPCHECK_E2E_ENVOYS`) at a time: a scenario spends most of its time waiting for probe
//! intervals and ejection windows, so a few Envoys share two cores without blurring the timing
//! they assert. Each holds a [`Turn`] for as long as it runs; an etcd cluster, whose tests run
//! three Envoys of their own, takes every turn ([`Turn::alone`]).
//!
//! As in the shipped configurations, each users' listener with the filter has the status page on
//! a listener of its own, on a free loopback port (or another address, [`EnvoyBuilder::status_on`]),
//! whose filter has the pool's plugin configuration with `"role": "status_page"`
//! ([`Envoy::status_url`]).
//!
//! The pieces, each in a module of its own: how an Envoy is described and started
//! ([`EnvoyBuilder`], `launch`), the listeners it is configured with (`listeners`), what can change
//! while it runs and how a change is waited for (`changes`), what its admin interface reads
//! (`admin`), the faults a test can cause in it (`faults`), the turns Envoys take ([`Turn`]), and
//! which Envoy binary and module run ([`binary`], [`module`]).

mod admin;
mod binaries;
mod changes;
mod faults;
mod launch;
mod listeners;
mod turn;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use tempfile::TempDir;

use crate::envoy_process::EnvoyProcess;

pub use binaries::{binary, module, VERSION};
use changes::Dynamic;
pub use launch::{ConfigPorts, EnvoyBuilder, Exited};
pub use turn::{Turn, ENVOYS_AT_ONCE};

/// A running Envoy.
pub struct Envoy {
    process: EnvoyProcess,
    listener: SocketAddr,
    admin: SocketAddr,
    /// The status page listeners of the first and the second users' listener, if they have one.
    status: [Option<SocketAddr>; 2],
    /// The temporary directory: config, xDS files, log.
    dir: PathBuf,
    /// Removes `dir` when dropped; taken (and the directory kept) when something went wrong.
    cleanup: Option<TempDir>,
    /// What can change while it runs; `None` when it runs a whole configuration file.
    dynamic: Option<Dynamic>,
    http: reqwest::Client,
    _turn: Turn,
}

impl Envoy {
    /// The address of the listener users reach.
    pub fn addr(&self) -> SocketAddr {
        self.listener
    }

    /// The URL of `path` (starting with `/`) on the listener users reach.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listener)
    }

    /// The URL of `path` on the second listener; an error if it was started without one
    /// ([`EnvoyBuilder::second_listener`]).
    pub fn second_url(&self, path: &str) -> Result<String> {
        let second = self
            .dynamic
            .as_ref()
            .and_then(|d| d.second.as_ref())
            .context("this Envoy has no second listener")?;
        Ok(format!("http://{}{path}", second.addr))
    }

    /// The address of the status page listener of the users' listener; an error if it has none
    /// (no filter).
    pub fn status_addr(&self) -> Result<SocketAddr> {
        self.status[0].context("this Envoy has no status page listener")
    }

    /// The URL of `path` (e.g. `/upcheck/status.json`) on the status page listener of the users'
    /// listener; an error if it has none.
    pub fn status_url(&self, path: &str) -> Result<String> {
        Ok(format!("http://{}{path}", self.status_addr()?))
    }

    /// The URL of `path` on the status page listener of the second users' listener; an error if
    /// there is none ([`EnvoyBuilder::second_listener`]).
    pub fn second_status_url(&self, path: &str) -> Result<String> {
        let addr = self.status[1].context("this Envoy has no second status page listener")?;
        Ok(format!("http://{addr}{path}"))
    }

    /// Envoy's pid.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The log so far (flushed every 100 ms).
    pub fn log(&self) -> String {
        self.process.log()
    }

    fn still_running(&mut self) -> Result<()> {
        match self.process.exited()? {
            None => Ok(()),
            Some(status) => bail!(self.failure(&format!("exited ({status})"))),
        }
    }

    /// Keeps the temporary directory after the test; false if it was kept already.
    fn keep_dir(&mut self) -> bool {
        // `keep` returns the path, which `self.dir` already holds.
        self.cleanup.take().map(TempDir::keep).is_some()
    }

    /// An error message with what Envoy said: the end of its log and of its own output. The
    /// temporary directory is kept for a closer look.
    fn failure(&mut self, what: &str) -> String {
        self.keep_dir();
        let output = self.process.output();
        format!(
            "Envoy (pid {}) {what}\n--- end of {}/envoy.log ---\n{}\n--- envoy stdout/stderr ---\n{}",
            self.pid(),
            self.dir.display(),
            tail(&self.log(), 30),
            tail(&output, 10),
        )
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        self.process.kill();
        if std::thread::panicking() && self.keep_dir() {
            eprintln!(
                "--- Envoy log kept in {} (last lines) ---\n{}",
                self.dir.display(),
                tail(&self.log(), 30)
            );
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<_> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
