//! `upcheck envoy`: the Envoy configuration of a deployment, from a plugin configuration or
//! Caddy's, with the command line's listeners, module path, etcd and membership: written to a
//! file (`-o`), its backends kept in files `upcheck backends` changes while Envoy runs, unless
//! `--static`; with `--units`, the systemd units that run it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use upcheck_cli::deployment::plan;
use upcheck_cli::envoy::{render, Settings};
use upcheck_cli::units::{hidden, Units};
use upcheck_cli::{etcd, file_membership, membership, output};
use upcheck_policy::RoutingMode;

use crate::files::{invalid, name, source, write_out};
use crate::Failure;

#[derive(Args)]
pub(crate) struct EnvoyArgs {
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
    /// Write here (replaced atomically), with the membership's files in OUT.d/ unless
    /// --static, instead of standard output (which gets the single-file shape).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: Option<PathBuf>,
    /// The default with -o, named: `upcheck backends --config OUT` changes the backends while
    /// Envoy runs. Envoy reads the clusters and both filters' configurations from files in
    /// OUT.d/, which that command rewrites. Needs -o.
    #[arg(long, requires = "output", conflicts_with = "static_file")]
    membership: bool,
    /// The single-file shape instead: everything in OUT, whose backends change only by writing
    /// it again and restarting Envoy.
    #[arg(long = "static", id = "static_file")]
    static_file: bool,
    /// The networks a backend's address must be in, whoever changes the membership (a backend
    /// named by a host name is then refused). Default: any address but the balancer's own
    /// listeners. Needs -o, and not --static.
    #[arg(
        long,
        value_name = "CIDR[,CIDR…]",
        value_delimiter = ',',
        requires = "output",
        conflicts_with = "static_file"
    )]
    allow: Vec<ipnet::IpNet>,
    /// Also write systemd units into DIR: upcheck-envoy.service, and upcheck-follow.service
    /// when OUT follows a fleet's membership (--etcd). Needs -o.
    #[arg(long, value_name = "DIR", requires = "output")]
    units: Option<PathBuf>,
    /// With --units: Envoy's binary on the balancer.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/usr/local/bin/envoy",
        requires = "units"
    )]
    envoy_binary: PathBuf,
    /// With --units: the `upcheck` binary on the balancer, which the follower runs.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/usr/local/bin/upcheck",
        requires = "units"
    )]
    upcheck_binary: PathBuf,
    /// With --units: the user (and group) the services run as.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "upcheck",
        requires = "units"
    )]
    unit_user: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum Routing {
    /// One pool cluster; a failed attempt is retried on another backend (recommended).
    Host,
    /// One cluster per backend, named by the routing header; no retries.
    Cluster,
}

pub(crate) fn run(args: EnvoyArgs) -> Result<(), Failure> {
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
        ca: args.etcd_ca.clone(),
        cert: args.etcd_cert.clone(),
        key: args.etcd_key.clone(),
        sni: args.etcd_sni.clone(),
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
    // Checked before anything is written: a refused option leaves every file as it was.
    let units = match (&args.units, &args.output) {
        (Some(dir), Some(out)) => Some((
            dir.clone(),
            unit_settings(&args, out, deployment.etcd.is_some())?,
        )),
        _ => None,
    };
    if let (false, Some(out)) = (args.static_file, args.output.as_ref()) {
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
            history: Vec::new(),
        };
        membership::write(out, &state).map_err(Failure::from)?;
        return units.map_or(Ok(()), |(dir, units)| write_units(&dir, &units));
    }
    if args.output.is_none() && !args.static_file {
        eprintln!(
            "upcheck: standard output gets the single-file shape, whose backends change only by \
             writing it again; -o FILE writes one whose backends `upcheck backends` changes while \
             Envoy runs (--static says the single file on purpose)"
        );
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
    write_out(args.output.as_ref(), &render(&deployment, &settings))?;
    units.map_or(Ok(()), |(dir, units)| write_units(&dir, &units))
}

/// The units' settings from the command line, for the configuration at `out`; a path the
/// units cannot use is refused, one a service could not see is warned of.
fn unit_settings(args: &EnvoyArgs, out: &Path, fleet: bool) -> Result<Units, Failure> {
    let absolute = |path: &Path| {
        std::path::absolute(path).map_err(|e| Failure::Input(format!("{}: {e}", path.display())))
    };
    let config = absolute(out)?;
    let wasm = PathBuf::from(&args.wasm);
    if !wasm.is_absolute() {
        return Err(Failure::Input(format!(
            "--wasm {}: the units need the module's absolute path (a service has no working \
             directory of yours)",
            args.wasm
        )));
    }
    let membership = if args.static_file {
        None
    } else {
        Some(file_membership::directory(&config).map_err(|e| Failure::Input(e.to_string()))?)
    };
    let units = Units {
        envoy: absolute(&args.envoy_binary)?,
        upcheck: absolute(&args.upcheck_binary)?,
        config,
        wasm,
        follows: fleet && membership.is_some(),
        membership,
        user: args.unit_user.clone(),
        concurrency: args.concurrency,
        ports: vec![args.listen.port(), args.admin.port(), args.status.port()],
    };
    for path in [&units.envoy, &units.upcheck, &units.config, &units.wasm] {
        if let Some(why) = hidden(path) {
            eprintln!(
                "upcheck: --units: {}: {why}; install it elsewhere",
                path.display()
            );
        }
    }
    Ok(units)
}

/// Writes each unit into `dir`, replaced atomically.
fn write_units(dir: &Path, units: &Units) -> Result<(), Failure> {
    for (name, text) in upcheck_cli::units::units(units) {
        let path = dir.join(name);
        output::replace(&path, &text)
            .map_err(|e| Failure::Output(format!("{}: cannot write: {e}", path.display())))?;
    }
    Ok(())
}
