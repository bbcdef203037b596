//! `upcheck nginx`: the NGINX configuration of a deployment, for an NGINX built with
//! ngx_wasm_module.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::files::{invalid, name, source, write_out};
use crate::Failure;

#[derive(Args)]
pub(crate) struct NginxArgs {
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

pub(crate) fn run(args: NginxArgs) -> Result<(), Failure> {
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
