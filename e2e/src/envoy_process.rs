//! Starting an Envoy binary and waiting for it: the one launcher the e2e harness ([`crate::envoy`])
//! and the benchmarks (`bench/src/proxy.rs`) share.
//!
//! Every Envoy here runs on a bootstrap file in a directory of its own, with its log
//! (`envoy.log`) and its own output (`envoy.out`) beside it, without hot restart (no shared
//! memory, so no base id to keep unique: Envoys never meet through it), and is killed by its own
//! pid when its handle drops. Its ports are picked free before it starts, so another process can
//! take one in between: [`EnvoyProcess::port_taken`] tells, and the caller starts it again.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::time::Instant;

/// How long Envoy may take to start (V8 compiles the module once per VM), apply an update or
/// stop.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// How many times a caller starts Envoy when a port it picked was taken meanwhile.
pub const PORT_ATTEMPTS: u32 = 3;

/// How to start one Envoy.
#[derive(Clone, Copy, Debug)]
pub struct Launch<'a> {
    /// The Envoy binary.
    pub binary: &'a Path,
    /// Its bootstrap (JSON or YAML).
    pub bootstrap: &'a Path,
    /// Where its log and its output go.
    pub dir: &'a Path,
    /// Worker threads (`--concurrency`).
    pub concurrency: u32,
    /// The core to pin it to with `taskset`, if any.
    pub cpu: Option<usize>,
    /// Further arguments, e.g. `--mode validate` or a log level.
    pub args: &'a [&'a str],
    /// Variables added to its environment, e.g. a clock set off ([`crate::clock`]).
    pub env: &'a [(&'a str, String)],
}

/// A running (or exited) Envoy, killed when dropped.
#[derive(Debug)]
pub struct EnvoyProcess {
    child: Child,
    dir: PathBuf,
}

impl EnvoyProcess {
    /// Starts Envoy as `launch` says.
    pub fn spawn(launch: Launch<'_>) -> Result<EnvoyProcess> {
        let mut command = match launch.cpu {
            Some(cpu) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", &cpu.to_string()]).arg(launch.binary);
                taskset
            }
            None => Command::new(launch.binary),
        };
        let output = std::fs::File::create(launch.dir.join("envoy.out"))?;
        let child = command
            .arg("--config-path")
            .arg(launch.bootstrap)
            .args(["--concurrency", &launch.concurrency.to_string()])
            .arg("--disable-hot-restart")
            .arg("--log-path")
            .arg(launch.dir.join("envoy.log"))
            .args(launch.args)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .spawn()
            .with_context(|| format!("cannot run {}", launch.binary.display()))?;
        Ok(EnvoyProcess {
            child,
            dir: launch.dir.to_owned(),
        })
    }

    /// Waits until the admin interface on `admin` answers `/ready` with 200 and Envoy's own
    /// `LIVE` (not any server that took the port first, whose answer would pass for Envoy's
    /// while Envoy exits for want of it), asking every `every`; an error if Envoy exits first or
    /// is not ready within [`PATIENCE`].
    pub async fn until_ready(&mut self, admin: SocketAddr, every: Duration) -> Result<()> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()?;
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.exited()? {
                bail!("exited ({status})");
            }
            if let Ok(answer) = client.get(format!("http://{admin}/ready")).send().await {
                let ok = answer.status().is_success();
                if ok && answer.text().await.is_ok_and(|t| t.trim() == "LIVE") {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!("not ready after {PATIENCE:?}");
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Waits until Envoy exits by itself; an error if it still runs after [`PATIENCE`] (it is
    /// killed then).
    pub async fn until_exit(&mut self) -> Result<ExitStatus> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.exited()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                self.kill();
                bail!("Envoy (pid {}) still ran after {PATIENCE:?}", self.pid());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// Whether it could not bind a port picked for it (another process took it meanwhile).
    pub fn port_taken(&self) -> bool {
        (self.log() + &self.output()).contains("Address already in use")
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The directory of its log and output.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("envoy.log")).unwrap_or_default()
    }

    /// Its own stdout and stderr so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.dir.join("envoy.out")).unwrap_or_default()
    }

    /// Stops it with SIGTERM, so that it flushes its log, and returns the log; an error if it has
    /// not exited after [`PATIENCE`] (it is then killed, as a dropped one is).
    pub async fn stop(mut self) -> Result<String> {
        let pid = libc::pid_t::try_from(self.pid())?;
        // SAFETY: kill only sends a signal to the process this handle spawned and still owns.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + PATIENCE;
        while self.exited()?.is_none() {
            if Instant::now() > deadline {
                bail!("Envoy did not exit on SIGTERM; see {}", self.dir.display());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let log = self.dir.join("envoy.log");
        std::fs::read_to_string(&log).with_context(|| format!("{}", log.display()))
    }

    /// Kills it (SIGKILL by its own pid; Envoy keeps nothing a clean stop would save) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for EnvoyProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
