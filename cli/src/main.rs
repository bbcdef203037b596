//! `upcheck`: writes the Envoy configuration of an upcheck deployment, and checks plugin
//! configurations, with the module's own parser.
//!
//! `check` prints the configuration in force, every default filled in, on standard output (JSON
//! the module reads back to the same configuration, so it can be saved and diffed), and its
//! one-line verdict on standard error, where it is seen without spoiling the JSON.
//!
//! Exit status: 0 done, 2 the input or the command line cannot be used (nothing is written),
//! 1 the output could not be written.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use upcheck_cli::deployment::plan;
use upcheck_cli::envoy::{render, Settings};
use upcheck_cli::plugin::{self, Source};
use upcheck_cli::{caddy, output};
use upcheck_policy::duration::display;
use upcheck_policy::{Config, ConfigError, RoutingMode};

#[derive(Parser)]
#[command(
    name = "upcheck",
    version,
    about = "upcheck's deployment tools: Envoy configurations and configuration checks"
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
    /// Check a plugin configuration as the module does: print the configuration in force, every
    /// default filled in (JSON, on standard output), and a one-line summary (on standard error).
    Check {
        /// The plugin configuration (JSON); `-` reads standard input.
        config: PathBuf,
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
    /// Path of upcheck.wasm on the load balancer.
    #[arg(long, value_name = "PATH", default_value = "/etc/upcheck/upcheck.wasm")]
    wasm: String,
    /// Envoy's worker threads, for the command line shown in the file.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
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
    /// The output could not be written (exit status 1).
    Output(String),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Envoy(args) => envoy(args),
        Command::Check { config } => check(&config),
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
    let (path, source): (&Path, Source) = match (&args.from_caddy, &args.config) {
        (Some(path), _) => (
            path,
            caddy::import(&read(path)?).map_err(|e| invalid(path, e))?,
        ),
        (None, Some(path)) => (
            path,
            plugin::read(&read(path)?).map_err(|e| invalid(path, e))?,
        ),
        (None, None) => {
            return Err(Failure::Input(
                "give a plugin configuration, or Caddy's with --from-caddy".into(),
            ))
        }
    };
    let routing = args.routing.map(|r| match r {
        Routing::Host => RoutingMode::Host,
        Routing::Cluster => RoutingMode::Cluster,
    });
    let deployment = plan(&source, routing).map_err(|e| invalid(path, e))?;
    let input = match &source.part {
        Some(part) => format!("{} ({part})", name(path)),
        None => name(path),
    };
    let settings = Settings {
        listen: args.listen,
        admin: args.admin,
        wasm: args.wasm,
        concurrency: args.concurrency,
        input,
    };
    let yaml = render(&deployment, &settings);
    match &args.output {
        Some(out) => output::replace(out, &yaml)
            .map_err(|e| Failure::Output(format!("{}: cannot write: {e}", out.display()))),
        None => io::stdout()
            .write_all(yaml.as_bytes())
            .map_err(|e| Failure::Output(format!("standard output: {e}"))),
    }
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

/// One line: the upstreams, the routing, the probes and the ejection rule.
fn summary(config: &Config) -> String {
    let names: Vec<&str> = config.upstreams.iter().map(|u| u.name.as_str()).collect();
    let routing = match config.routing {
        RoutingMode::Host => "host",
        RoutingMode::Cluster => "cluster",
    };
    let active = &config.health_checks.active;
    let passive = &config.health_checks.passive;
    format!(
        "{} upstream{} ({}), routing {routing}; probes GET {} every {}, timeout {}; {} failure{} \
         within {} eject a backend",
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
