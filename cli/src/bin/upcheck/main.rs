//! `upcheck`: writes the Envoy configuration of an upcheck deployment, checks plugin
//! configurations with the module's own parser, and simulates what a configuration would do.
//!
//! Here the command line is read and each subcommand handed to its own module; a subcommand that
//! fails says why as a [`Failure`], which is the exit status: 0 done, 2 the input or the command
//! line cannot be used (nothing is written), 1 the output could not be written or the simulated
//! module failed.

mod backends;
mod check;
mod envoy;
mod files;
mod nginx;
#[cfg(feature = "simulate")]
mod simulate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use upcheck_cli::membership::Refusal;

#[derive(Parser)]
#[command(
    name = "upcheck",
    version,
    about = "upcheck's deployment tools: Envoy configurations, configuration checks, simulations"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a complete, commented Envoy 1.40 configuration (YAML) for upcheck: the pool and
    /// probe clusters, the routes and their retries, the wasm filter with the plugin
    /// configuration, admin on loopback.
    Envoy(envoy::EnvoyArgs),
    /// Add, drain, remove or list the backends of a running balancer whose configuration `upcheck
    /// envoy -o FILE` wrote (without --static): no restart, no file edited by hand.
    Backends(backends::BackendsArgs),
    /// Write a complete, commented NGINX configuration for upcheck, for an NGINX built with
    /// Kong's ngx_wasm_module: the wasm block, one upstream per backend, the routing map and
    /// proxy_pass with failover where it is safe, the status page on loopback.
    Nginx(nginx::NginxArgs),
    /// Check a plugin configuration as the module does: print the configuration in force, every
    /// default filled in (JSON, on standard output), and a one-line summary (on standard error).
    Check {
        /// The plugin configuration (JSON); `-` reads standard input.
        config: PathBuf,
    },
    /// Run a plugin configuration through a scenario in the real upcheck.wasm (two workers, on
    /// virtual time) and print what it would have done: each health change and why, ejections,
    /// the pool guard, and what users saw each second.
    #[cfg(feature = "simulate")]
    Simulate(simulate::SimulateArgs),
    /// Not built into this upcheck (it needs the `simulate` feature); says how to build it.
    #[cfg(not(feature = "simulate"))]
    #[command(hide = true, disable_help_flag = true)]
    Simulate {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Why the command failed.
pub(crate) enum Failure {
    /// The input or the command line cannot be used (exit status 2).
    Input(String),
    /// The output could not be written, or the simulated module failed (exit status 1).
    Output(String),
}

/// A membership command's refusal fails the command with the exit status of its kind.
impl From<Refusal> for Failure {
    fn from(refusal: Refusal) -> Failure {
        match refusal {
            Refusal::Input(message) => Failure::Input(message),
            Refusal::Output(message) => Failure::Output(message),
        }
    }
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Envoy(args) => envoy::run(args),
        Command::Backends(args) => backends::run(args),
        Command::Nginx(args) => nginx::run(args),
        Command::Check { config } => check::run(&config),
        #[cfg(feature = "simulate")]
        Command::Simulate(args) => simulate::run(args),
        #[cfg(not(feature = "simulate"))]
        Command::Simulate { .. } => Err(Failure::Input(
            "simulate is not built into this upcheck: it runs the module in wasmtime, which \
             `upcheck envoy` and `upcheck check` do without; build it with `cargo build -p \
             upcheck-cli --features simulate`"
                .into(),
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Input(message)) => {
            eprintln!("upcheck: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Output(message)) => {
            eprintln!("upcheck: {message}");
            ExitCode::from(1)
        }
    }
}
