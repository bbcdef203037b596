//! Why a host operation failed: one error type for the host's lifecycle, its requests and its
//! event loop, below all of them.

use crate::process::LogLine;
use std::fmt;

/// Why a host operation failed.
#[derive(Debug)]
pub enum HostError {
    /// The module did not compile, link (an import the host does not provide) or initialize.
    Load(String),
    /// `proxy_on_vm_start` or `proxy_on_configure` returned false: Envoy refuses the config.
    Rejected {
        /// The VM that refused.
        vm: usize,
        /// The callback that returned false.
        callback: &'static str,
        /// What that VM logged during the callback (the reason, normally).
        log: Vec<LogLine>,
    },
    /// The guest trapped.
    Trap {
        /// The VM that trapped.
        vm: usize,
        /// The export that was running.
        callback: String,
        /// wasmtime's account of the trap, with the wasm backtrace.
        message: String,
        /// That VM's last log lines (a Rust panic message is among them).
        log: Vec<LogLine>,
    },
    /// The guest or the test asked for something this host does not emulate.
    Unsupported(String),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines = |f: &mut fmt::Formatter<'_>, log: &[LogLine]| {
            log.iter().try_for_each(|line| write!(f, "\n  {line}"))
        };
        match self {
            HostError::Load(message) => write!(f, "the module could not be loaded: {message}"),
            HostError::Rejected { vm, callback, log } => {
                write!(
                    f,
                    "vm{vm} {callback} returned false (configuration rejected)"
                )?;
                lines(f, log)
            }
            HostError::Trap {
                vm,
                callback,
                message,
                log,
            } => {
                write!(
                    f,
                    "vm{vm} trapped in {callback}: {message}\nits last log lines:"
                )?;
                lines(f, log)
            }
            HostError::Unsupported(what) => write!(f, "not emulated by this host: {what}"),
        }
    }
}

impl std::error::Error for HostError {}
