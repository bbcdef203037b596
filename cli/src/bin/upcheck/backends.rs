//! `upcheck backends`: a running balancer's backends added, drained, removed and listed, or its
//! fleet's membership followed.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use upcheck_cli::membership::{Access, Operator};
use upcheck_cli::{etcd_membership, membership};

use crate::Failure;

#[derive(Args)]
pub(crate) struct BackendsArgs {
    /// The Envoy configuration `upcheck envoy --membership -o FILE` wrote for the balancer.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The client certificate (PEM) shown to a fleet's etcd on TLS. Default: FILE's (the
    /// balancers').
    #[arg(long, value_name = "FILE", env = "UPCHECK_ETCD_CERT", global = true)]
    cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, value_name = "FILE", env = "UPCHECK_ETCD_KEY", global = true)]
    key: Option<PathBuf>,
    /// The etcd user to authenticate as, its password from UPCHECK_ETCD_PASSWORD (never an
    /// option). Default: the plugin configuration's `fleet.user` (the balancers').
    #[arg(long, value_name = "NAME", env = "UPCHECK_ETCD_USER", global = true)]
    user: Option<String>,
    /// Who asks for the change, recorded with it: letters, digits and `._@:+-`, at most 64.
    /// Default: the local user at the host's name.
    #[arg(long, value_name = "WHO", global = true)]
    by: Option<String>,
    /// Why, recorded with the change: printable ASCII, at most 200 characters.
    #[arg(long, value_name = "TEXT", global = true)]
    reason: Option<String>,
    #[command(subcommand)]
    command: BackendsCommand,
}

#[derive(Subcommand)]
enum BackendsCommand {
    /// Each backend: its name, its address, and its state on the status page, since when (for
    /// a fleet, on each balancer).
    List,
    /// The membership's last changes (up to 20), oldest first: when, the backend, what, who
    /// asked and why.
    History,
    /// Follows the fleet's membership in etcd (FILE written with `--etcd`): run beside each
    /// balancer's Envoy, it makes FILE's backends those the fleet's membership names, as they
    /// change, and reports what this balancer has in force.
    Follow {
        /// This balancer's name in the reports. Default: the host's name and the listener.
        #[arg(long)]
        name: Option<String>,
    },
    /// Adds a backend: probed at once, and no user before its first probe passes.
    Add {
        /// Its name (as upstreams are named: logs, metrics and the status page show it).
        name: String,
        /// Where it listens: `ip:port` (host routing), or `host:port` (cluster routing).
        address: String,
        /// Its share of the traffic relative to the others. Default 1.
        #[arg(long, value_name = "N")]
        weight: Option<u32>,
    },
    /// Drains a backend: no new request from the moment the command runs, whatever its probes
    /// say, while it stays probed and its requests in flight finish; `--end` ends the drain.
    Drain {
        /// Its name.
        name: String,
        /// End the drain: it takes users again as its probes allow.
        #[arg(long)]
        end: bool,
    },
    /// Removes a backend: no new request from the moment the command runs, then its cluster
    /// goes once its requests in flight have ended (or --timeout passed).
    Remove {
        /// Its name.
        name: String,
        /// How long to wait for its requests in flight, e.g. `30s`.
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
        timeout: std::time::Duration,
        /// Remove it even if it is the last backend in service.
        #[arg(long)]
        force: bool,
    },
}

/// A duration as the plugin configuration writes one (`30s`, `500ms`).
fn duration(text: &str) -> Result<std::time::Duration, String> {
    upcheck_policy::duration::parse(text)
}

pub(crate) fn run(args: BackendsArgs) -> Result<(), Failure> {
    let password = std::env::var("UPCHECK_ETCD_PASSWORD").ok();
    let access = Access::given(args.cert, args.key, args.user, password)?;
    let local = Operator::local();
    let operator = Operator {
        by: args.by.unwrap_or(local.by),
        reason: args.reason,
        access: access.clone(),
    };
    let said = match args.command {
        BackendsCommand::List => membership::list_as(&args.config, &access),
        BackendsCommand::History => membership::history(&args.config, &access),
        BackendsCommand::Follow { name } => {
            let state = membership::read(&args.config).map_err(Failure::from)?;
            let name = name.unwrap_or_else(|| etcd_membership::balancer_name(&state));
            let stop = std::sync::atomic::AtomicBool::new(false);
            eprintln!("follow: {name} follows the fleet's membership");
            etcd_membership::follow(&args.config, &name, &stop, |line| eprintln!("{line}"))
                .map(|()| Vec::new())
        }
        BackendsCommand::Add {
            name,
            address,
            weight,
        } => membership::change_as(
            &args.config,
            &membership::Change::Add {
                name,
                address,
                weight,
            },
            &operator,
        ),
        BackendsCommand::Drain { name, end } => membership::change_as(
            &args.config,
            &membership::Change::Drain {
                name,
                drained: !end,
            },
            &operator,
        ),
        BackendsCommand::Remove {
            name,
            timeout,
            force,
        } => membership::change_as(
            &args.config,
            &membership::Change::Remove {
                name,
                timeout,
                force,
            },
            &operator,
        ),
    }
    .map_err(Failure::from)?;
    for line in said {
        println!("{line}");
    }
    Ok(())
}
