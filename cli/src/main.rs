//! `upcheck`: writes the Envoy configuration of an upcheck deployment, checks plugin
//! configurations with the module's own parser, and simulates what a configuration would do.
//!
//! `check` prints the configuration in force, every default filled in, on standard output (JSON
//! the module reads back to the same configuration, so it can be saved and diffed), and its
//! one-line verdict on standard error, where it is seen without spoiling the JSON.
//!
//! Exit status: 0 done, 2 the input or the command line cannot be used (nothing is written),
//! 1 the output could not be written or the simulated module failed.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use upcheck_cli::deployment::plan;
use upcheck_cli::envoy::{render, Settings};
use upcheck_cli::plugin::{self, Source};
use upcheck_cli::{caddy, etcd, etcd_membership, membership, output};
use upcheck_policy::duration::display;
use upcheck_policy::{Config, ConfigError, RoutingMode};

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
    Envoy(EnvoyArgs),
    /// Add, drain, remove or list the backends of a running balancer whose configuration `upcheck envoy
    /// --membership -o FILE` wrote: no restart, no file edited by hand.
    Backends(BackendsArgs),
    /// Write a complete, commented NGINX configuration for upcheck, for an NGINX built with
    /// Kong's ngx_wasm_module: the wasm block, one upstream per backend, the routing map and
    /// proxy_pass with failover where it is safe, the status page on loopback.
    Nginx(NginxArgs),
    /// Check a plugin configuration as the module does: print the configuration in force, every
    /// default filled in (JSON, on standard output), and a one-line summary (on standard error).
    Check {
        /// The plugin configuration (JSON); `-` reads standard input.
        config: PathBuf,
    },
    /// Run a plugin configuration through a scenario in the real upcheck.wasm (two workers, on
    /// virtual time) and print what it would have done: each health change and why, ejections,
    /// the fleet guard, and what users saw each second.
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

#[derive(Args)]
struct EnvoyArgs {
    /// An upcheck plugin configuration (JSON) whose upstreams carry `address`; `-` reads
    /// standard input.
    #[arg(required_unless_present = "from_caddy", conflicts_with = "from_caddy")]
    config: Option<PathBuf>,
    /// Caddy's JSON configuration (`curl localhost:2019/config/`) instead: its reverse_proxy
    /// handler's upstreams (named app1, app2, … in order) and health_checks.
    #[arg(long, value_name = "CADDY.json")]
    from_caddy: Option<PathBuf>,
    /// How the filter's pick reaches Envoy. Default: the input's `routing`, else host.
    #[arg(long, value_enum)]
    routing: Option<Routing>,
    /// Where users connect.
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Envoy's admin interface; must be a loopback address.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9901")]
    admin: SocketAddr,
    /// The status page's own listener; a loopback address unless the input sets
    /// `status_public`.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9902")]
    status: SocketAddr,
    /// Path of upcheck.wasm on the load balancer.
    #[arg(long, value_name = "PATH", default_value = "/etc/upcheck/upcheck.wasm")]
    wasm: String,
    /// Envoy's worker threads, for the command line shown in the file.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
    /// etcd's client endpoints: several balancers then share one view of health through it (the
    /// plugin configuration gets a `fleet` object, the Envoy configuration the etcd cluster).
    #[arg(long, value_name = "ADDR:PORT[,ADDR:PORT…]", value_delimiter = ',')]
    etcd: Vec<SocketAddr>,
    /// TLS to etcd: the CA (PEM) that signed the members' certificates, which must carry each
    /// member's IP address (or the --etcd-sni name).
    #[arg(long, value_name = "FILE")]
    etcd_ca: Option<PathBuf>,
    /// The client certificate (PEM) Envoy shows etcd, for etcd's --client-cert-auth; with
    /// --etcd-key.
    #[arg(long, value_name = "FILE")]
    etcd_cert: Option<PathBuf>,
    /// The private key (PEM) of --etcd-cert.
    #[arg(long, value_name = "FILE")]
    etcd_key: Option<PathBuf>,
    /// The server name sent to etcd, which the members' certificates must carry instead of their
    /// IP addresses. Default: none.
    #[arg(long, value_name = "NAME")]
    etcd_sni: Option<String>,
    /// Write here (replaced atomically) instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: Option<PathBuf>,
    /// Let `upcheck backends --config OUT` change the backends while Envoy runs: Envoy reads
    /// the clusters and both filters' configurations from files in OUT.d/, which that command
    /// rewrites. Needs -o.
    #[arg(long, requires = "output")]
    membership: bool,
    /// With --membership: the networks a backend's address must be in, whoever changes the
    /// membership (a backend named by a host name is then refused). Default: any address but
    /// the balancer's own listeners.
    #[arg(
        long,
        value_name = "CIDR[,CIDR…]",
        value_delimiter = ',',
        requires = "membership"
    )]
    allow: Vec<ipnet::IpNet>,
}

#[derive(Args)]
struct BackendsArgs {
    /// The Envoy configuration `upcheck envoy --membership -o FILE` wrote for the balancer.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    #[command(subcommand)]
    command: BackendsCommand,
}

#[derive(Subcommand)]
enum BackendsCommand {
    /// Each backend: its name, its address, and its state on the status page, since when (for
    /// a fleet, on each balancer).
    List,
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

#[derive(Args)]
struct NginxArgs {
    /// An upcheck plugin configuration (JSON) whose upstreams carry `address`; `-` reads
    /// standard input.
    #[arg(required_unless_present = "from_caddy", conflicts_with = "from_caddy")]
    config: Option<PathBuf>,
    /// Caddy's JSON configuration (`curl localhost:2019/config/`) instead: its reverse_proxy
    /// handler's upstreams (named app1, app2, … in order) and health_checks.
    #[arg(long, value_name = "CADDY.json")]
    from_caddy: Option<PathBuf>,
    /// Where users connect.
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// The status page's server; must be a loopback address (ngx_wasm_module does not tell
    /// the filter which address a connection was made to, so the listen closes the page).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9902")]
    status: SocketAddr,
    /// Path of upcheck.wasm on the load balancer.
    #[arg(long, value_name = "PATH", default_value = "/etc/upcheck/upcheck.wasm")]
    wasm: String,
    /// NGINX's worker processes.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    workers: u32,
    /// ngx_wasm_module built as a dynamic module (`ngx_wasmx_module.so`): written as a
    /// `load_module` line. Leave it out for an NGINX with the module built in.
    #[arg(long, value_name = "PATH")]
    module: Option<String>,
    /// NGINX's error log (at level info: upcheck's health changes).
    #[arg(long, value_name = "PATH", default_value = "/var/log/nginx/error.log")]
    error_log: String,
    /// NGINX's pid file.
    #[arg(long, value_name = "PATH", default_value = "/run/nginx.pid")]
    pid: String,
    /// Write here (replaced atomically) instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Routing {
    /// One pool cluster; a failed attempt is retried on another backend (recommended).
    Host,
    /// One cluster per backend, named by the routing header; no retries.
    Cluster,
}

/// Why the command failed.
enum Failure {
    /// The input or the command line cannot be used (exit status 2).
    Input(String),
    /// The output could not be written, or the simulated module failed (exit status 1).
    Output(String),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Envoy(args) => envoy(args),
        Command::Backends(args) => backends(args),
        Command::Nginx(args) => nginx(args),
        Command::Check { config } => check(&config),
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

/// The name an input goes by in messages and in the written file.
fn name(path: &Path) -> String {
    if path == Path::new("-") {
        "standard input".into()
    } else {
        path.display().to_string()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, Failure> {
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        io::stdin().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::read(path).map(|b| bytes = b)
    };
    read.map_err(|e| Failure::Input(format!("{}: cannot read: {e}", name(path))))?;
    Ok(bytes)
}

fn invalid(path: &Path, error: ConfigError) -> Failure {
    Failure::Input(format!("{}: {error}", name(path)))
}

fn envoy(args: EnvoyArgs) -> Result<(), Failure> {
    if !args.admin.ip().is_loopback() {
        return Err(Failure::Input(format!(
            "--admin {}: Envoy's admin interface can reconfigure and stop it; keep it on \
             loopback (127.0.0.1 or [::1])",
            args.admin
        )));
    }
    let (path, mut source) = source(args.from_caddy.as_ref(), args.config.as_ref())?;
    let path = path.as_path();
    let routing = args.routing.map(|r| match r {
        Routing::Host => RoutingMode::Host,
        Routing::Cluster => RoutingMode::Cluster,
    });
    let tls = etcd::TlsFlags {
        ca: args.etcd_ca,
        cert: args.etcd_cert,
        key: args.etcd_key,
        sni: args.etcd_sni,
    }
    .tls(!args.etcd.is_empty())
    .map_err(|e| invalid(path, e))?;
    let etcd = if args.etcd.is_empty() {
        None
    } else {
        let mut etcd = etcd::join(&mut source, args.etcd.clone()).map_err(|e| invalid(path, e))?;
        etcd.tls = tls;
        Some(etcd)
    };
    let mut deployment = plan(&source, routing).map_err(|e| invalid(path, e))?;
    deployment.etcd = etcd;
    deployment.check_etcd().map_err(|e| invalid(path, e))?;
    if !args.status.ip().is_loopback() && !deployment.page.public {
        return Err(Failure::Input(format!(
            "--status {}: the status page names every backend, so it is served only on \
             connections made to a loopback address; keep it on loopback (127.0.0.1 or [::1]), \
             or set \"status_public\": true in the input to serve it on another address",
            args.status
        )));
    }
    for (flag, other) in [("--listen", args.listen), ("--admin", args.admin)] {
        let overlap = other.ip() == args.status.ip()
            || other.ip().is_unspecified()
            || args.status.ip().is_unspecified();
        if other.port() == args.status.port() && overlap {
            return Err(Failure::Input(format!(
                "--status {}: {flag} {other} takes that port; give the status page another one",
                args.status
            )));
        }
    }
    let input = match &source.part {
        Some(part) => format!("{} ({part})", name(path)),
        None => name(path),
    };
    if let (true, Some(out)) = (args.membership, args.output.as_ref()) {
        let state = membership::State {
            input: source.document.input(deployment.routing),
            probe_port: source.probe_port,
            listen: args.listen,
            admin: args.admin,
            status: args.status,
            wasm: args.wasm,
            concurrency: args.concurrency,
            written_from: input,
            removed: Default::default(),
            etcd: deployment.etcd.clone(),
            allowed: args.allow,
        };
        return membership::write(out, &state).map_err(refusal);
    }
    let settings = Settings {
        listen: args.listen,
        admin: args.admin,
        status: args.status,
        wasm: args.wasm,
        concurrency: args.concurrency,
        input,
        membership: None,
    };
    write_out(args.output.as_ref(), &render(&deployment, &settings))
}

fn refusal(refusal: membership::Refusal) -> Failure {
    match refusal {
        membership::Refusal::Input(message) => Failure::Input(message),
        membership::Refusal::Output(message) => Failure::Output(message),
    }
}

fn backends(args: BackendsArgs) -> Result<(), Failure> {
    let said = match args.command {
        BackendsCommand::List => membership::list(&args.config),
        BackendsCommand::Follow { name } => {
            let state = membership::read(&args.config).map_err(refusal)?;
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
        } => membership::change(
            &args.config,
            &membership::Change::Add {
                name,
                address,
                weight,
            },
        ),
        BackendsCommand::Drain { name, end } => membership::change(
            &args.config,
            &membership::Change::Drain {
                name,
                drained: !end,
            },
        ),
        BackendsCommand::Remove {
            name,
            timeout,
            force,
        } => membership::change(
            &args.config,
            &membership::Change::Remove {
                name,
                timeout,
                force,
            },
        ),
    }
    .map_err(refusal)?;
    for line in said {
        println!("{line}");
    }
    Ok(())
}

/// The input of `upcheck envoy` or `upcheck nginx`: where it was read from, and what it says.
fn source(
    from_caddy: Option<&PathBuf>,
    config: Option<&PathBuf>,
) -> Result<(PathBuf, Source), Failure> {
    match (from_caddy, config) {
        (Some(path), _) => Ok((
            path.clone(),
            caddy::import(&read(path)?).map_err(|e| invalid(path, e))?,
        )),
        (None, Some(path)) => Ok((
            path.clone(),
            plugin::read(&read(path)?).map_err(|e| invalid(path, e))?,
        )),
        (None, None) => Err(Failure::Input(
            "give a plugin configuration, or Caddy's with --from-caddy".into(),
        )),
    }
}

/// Writes `text` to `out`, or to standard output.
fn write_out(out: Option<&PathBuf>, text: &str) -> Result<(), Failure> {
    match out {
        Some(out) => output::replace(out, text)
            .map_err(|e| Failure::Output(format!("{}: cannot write: {e}", out.display()))),
        None => io::stdout()
            .write_all(text.as_bytes())
            .map_err(|e| Failure::Output(format!("standard output: {e}"))),
    }
}

fn nginx(args: NginxArgs) -> Result<(), Failure> {
    if !args.status.ip().is_loopback() {
        return Err(Failure::Input(format!(
            "--status {}: the status page names every backend, and in NGINX only the address              its server listens on closes it to other machines; keep it on loopback (127.0.0.1              or [::1])",
            args.status
        )));
    }
    let overlap = args.listen.ip() == args.status.ip() || args.listen.ip().is_unspecified();
    if args.listen.port() == args.status.port() && overlap {
        return Err(Failure::Input(format!(
            "--status {}: --listen {} takes that port; give the status page another one",
            args.status, args.listen
        )));
    }
    let (path, source) = source(args.from_caddy.as_ref(), args.config.as_ref())?;
    let plan = upcheck_cli::nginx::plan(&source).map_err(|e| invalid(&path, e))?;
    let input = match &source.part {
        Some(part) => format!("{} ({part})", name(&path)),
        None => name(&path),
    };
    let settings = upcheck_cli::nginx::Settings {
        listen: args.listen,
        status: args.status,
        wasm: args.wasm,
        workers: args.workers,
        module: args.module,
        error_log: args.error_log,
        pid: args.pid,
        input,
    };
    write_out(
        args.output.as_ref(),
        &upcheck_cli::nginx::render(&plan, &settings),
    )
}

fn check(path: &Path) -> Result<(), Failure> {
    let config = plugin::check(&read(path)?).map_err(|e| invalid(path, e))?;
    let mut effective = config.effective_json();
    effective.push('\n');
    io::stdout()
        .write_all(effective.as_bytes())
        .map_err(|e| Failure::Output(format!("standard output: {e}")))?;
    eprintln!("ok: {}", summary(&config));
    Ok(())
}

/// One line: the upstreams, the routing, the probes and the ejection rule; for a status page,
/// the page and whose it is.
fn summary(config: &Config) -> String {
    let names: Vec<&str> = config.upstreams.iter().map(|u| u.name.as_str()).collect();
    if let Some(page) = config.status_page() {
        return format!(
            "the status page of {} upstream{} ({}) at {}, on {}; it never probes or routes",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            names.join(", "),
            page.path,
            if page.public {
                "every connection"
            } else {
                "connections made to a loopback address only"
            },
        );
    }
    let routing = match config.routing {
        RoutingMode::Host => "host",
        RoutingMode::Cluster => "cluster",
    };
    let active = &config.health_checks.active;
    let passive = &config.health_checks.passive;
    let shared = match &config.fleet {
        Some(fleet) => format!(
            "; probe duties shared with the other balancers through etcd (cluster {}, prefix {}, \
             lease {})",
            fleet.cluster,
            fleet.prefix,
            display(fleet.lease_ttl)
        ),
        None => String::new(),
    };
    format!(
        "{} upstream{} ({}), routing {routing}; probes GET {} every {}, timeout {}; {} failure{} \
         within {} eject a backend{shared}",
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        names.join(", "),
        active.path,
        display(active.interval),
        display(active.timeout),
        passive.max_fails,
        if passive.max_fails == 1 { "" } else { "s" },
        display(passive.fail_duration),
    )
}

/// `upcheck simulate`: the module in the wasmtime host, on virtual time.
#[cfg(feature = "simulate")]
mod simulate {
    use std::io::{self, Write};
    use std::path::{Path, PathBuf};
    use std::time::Instant;

    use clap::Args;
    use upcheck_cli::scenario::{self, Scenario};
    use upcheck_cli::simulation::{self, Plan, Run};
    use upcheck_cli::timeline::{self, Shown};
    use upcheck_host_tests::HostError;
    use upcheck_policy::duration::display;

    use crate::{invalid, name, read, Failure};

    #[derive(Args)]
    pub(crate) struct SimulateArgs {
        /// The plugin configuration (JSON); `-` reads standard input. Default: each of the
        /// scenario's backends an upstream, everything else default.
        config: Option<PathBuf>,
        /// A built-in scenario: incident, hang, db-blip, blip-after-down, pages-500, slow.
        #[arg(
            long,
            value_name = "NAME",
            required_unless_present = "scenario_file",
            conflicts_with = "scenario_file"
        )]
        scenario: Option<String>,
        /// A scenario file (JSON): backends, what each answers over time, request rate, duration.
        #[arg(long, value_name = "FILE")]
        scenario_file: Option<PathBuf>,
        /// A second plugin configuration: the same scenario runs with it, shown beside the first.
        #[arg(long, value_name = "OTHER.json")]
        compare: Option<PathBuf>,
        /// The module to run, as on the load balancer (`make build` writes target/upcheck.wasm).
        #[arg(
            long,
            value_name = "PATH",
            env = "UPCHECK_WASM",
            default_value = "/etc/upcheck/upcheck.wasm"
        )]
        wasm: PathBuf,
        /// A row for every second; by default seconds where nothing changed and nobody failed or
        /// waited are folded into one row with their totals.
        #[arg(long)]
        every_second: bool,
    }

    /// The scenario named on the command line.
    fn scenario(args: &SimulateArgs) -> Result<Scenario, Failure> {
        match (&args.scenario, &args.scenario_file) {
            (Some(name), _) => {
                scenario::builtin(name).map_err(|e| Failure::Input(format!("--scenario: {e}")))
            }
            (None, Some(path)) => scenario::read(&read(path)?).map_err(|e| invalid(path, e)),
            (None, None) => Err(Failure::Input(
                "give a scenario: --scenario NAME or --scenario-file FILE".into(),
            )),
        }
    }

    /// The configuration at `path` (the default one without), fitted to `scenario`, and its label.
    fn fitted(path: Option<&Path>, scenario: &Scenario) -> Result<(Plan, String), Failure> {
        match path {
            Some(path) => {
                let plan =
                    simulation::plan(&read(path)?, scenario).map_err(|e| invalid(path, e))?;
                Ok((plan, name(path)))
            }
            None => {
                let document = simulation::default_document(scenario).to_string();
                let plan = simulation::plan(document.as_bytes(), scenario)
                    .map_err(|e| Failure::Input(format!("the default configuration: {e}")))?;
                Ok((plan, format!("default ({document})")))
            }
        }
    }

    pub(crate) fn run(args: SimulateArgs) -> Result<(), Failure> {
        let scenario = scenario(&args)?;
        let mut plans = vec![fitted(args.config.as_deref(), &scenario)?];
        if let Some(other) = &args.compare {
            plans.push(fitted(Some(other), &scenario)?);
        }
        let started = Instant::now();
        let runs = plans
            .iter()
            .map(|(plan, _)| plan.run(&args.wasm, &scenario))
            .collect::<Result<Vec<Run>, HostError>>()
            .map_err(|e| match e {
                HostError::Load(why) => Failure::Input(format!(
                    "--wasm {}: {why} (`make build` writes target/upcheck.wasm)",
                    args.wasm.display()
                )),
                other => Failure::Output(format!("the simulation stopped: {other}")),
            })?;
        let took = started.elapsed();

        let mut text = String::new();
        let title = args
            .scenario
            .clone()
            .unwrap_or_else(|| args.scenario_file.as_deref().map(name).unwrap_or_default());
        text.push_str(&format!("scenario {title}: {}\n", scenario.about));
        text.push_str(&format!(
            "{}, {} workers, {}\n",
            timeline::pace(&scenario),
            simulation::WORKERS,
            args.wasm
                .canonicalize()
                .unwrap_or(args.wasm.clone())
                .display()
        ));
        let labels: Vec<&str> = if plans.len() == 1 {
            vec![""]
        } else {
            vec!["A", "B"]
        };
        for ((plan, label), tag) in plans.iter().zip(&labels) {
            if tag.is_empty() {
                text.push_str(&format!("configuration: {label}\n"));
            } else {
                text.push_str(&format!("{tag}: {label}\n"));
            }
            if let Some(note) = plan.routing_note() {
                text.push_str(&format!("note: {note}\n"));
            }
        }
        text.push('\n');
        let shown: Vec<Shown> = labels
            .iter()
            .zip(&runs)
            .map(|(label, run)| Shown { label, run })
            .collect();
        text.push_str(&timeline::render(&scenario, &shown, args.every_second));
        let requests: usize = runs.iter().map(|run| run.requests.len()).sum();
        text.push_str(&format!(
            "\nsimulated {} of traffic ({requests} requests over {} run{}) in {:.2} s\n",
            display(scenario.duration),
            runs.len(),
            if runs.len() == 1 { "" } else { "s" },
            took.as_secs_f64()
        ));
        io::stdout()
            .write_all(text.as_bytes())
            .map_err(|e| Failure::Output(format!("standard output: {e}")))
    }
}
