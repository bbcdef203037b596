//! The faults a test causes inside Envoy itself: a worker's VM failed, the main thread stalled.

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

use super::Envoy;

impl Envoy {
    /// Fails the VM of the worker that accepts a connection to the misloaded listener
    /// ([`EnvoyBuilder::misloaded_listener`]): connects, and returns once Envoy has closed the
    /// connection, which it does after the trap. With one worker, that worker's VM. An error
    /// without a misloaded listener, or if the connection is still open after 5 s.
    ///
    /// [`EnvoyBuilder::misloaded_listener`]: super::EnvoyBuilder::misloaded_listener
    pub async fn fail_a_worker_vm(&self) -> Result<()> {
        let addr = self
            .dynamic
            .as_ref()
            .and_then(|d| d.misloaded)
            .context("this Envoy has no misloaded listener")?;
        let mut connection = tokio::net::TcpStream::connect(addr).await?;
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read(&mut connection, &mut byte),
        )
        .await
        .with_context(|| format!("Envoy kept the connection to {addr} open for 5 s"))?;
        match read {
            Ok(0) | Err(_) => Ok(()),
            Ok(_) => bail!("the misloaded listener on {addr} answered: the VM did not fail"),
        }
    }

    /// Stops Envoy's main thread for `pause` while its workers run on, as a long configuration
    /// load would: meanwhile the main thread's VM neither ticks nor answers. ptrace stops one
    /// thread, not the process (a signal would stop them all), and may trace this process's own
    /// child. The main thread's id is Envoy's pid.
    pub async fn stall_main_thread(&self, pause: Duration) -> Result<()> {
        let main = libc::pid_t::try_from(self.pid())?;
        tokio::task::spawn_blocking(move || stall_thread(main, pause)).await?
    }
}

/// Stops thread `tid` of a child for `pause` with ptrace, then lets it go. Runs on one thread
/// from start to end: ptrace answers only the thread that attached.
fn stall_thread(tid: libc::pid_t, pause: Duration) -> Result<()> {
    let no_data = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: ptrace and waitpid on a thread of our own child, passing no memory but `status`.
    let attached = unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, no_data, no_data) } == 0;
    ensure!(
        attached,
        "ptrace cannot attach to Envoy's thread {tid}: {}",
        std::io::Error::last_os_error()
    );
    let mut status = 0;
    // SAFETY: as above.
    let stopped = unsafe {
        libc::ptrace(libc::PTRACE_INTERRUPT, tid, no_data, no_data) == 0
            && libc::waitpid(tid, &mut status, libc::__WALL) == tid
    };
    if stopped {
        std::thread::sleep(pause);
    }
    // SAFETY: as above; detaching also resumes the thread.
    let detached = unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, no_data, no_data) } == 0;
    ensure!(
        stopped && detached,
        "ptrace could not stop and release Envoy's thread {tid} (stopped: {stopped}): {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}
