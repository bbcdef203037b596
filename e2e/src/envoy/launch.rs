//! How an Envoy is described ([`EnvoyBuilder`]) and started: its ports picked, its configuration
//! written, the process spawned and waited for until it serves, and started again on other ports
//! when one was taken meanwhile.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::{bail, ensure, Result};
use serde_json::Value;
use tempfile::TempDir;
use tokio::time::Instant;

use super::changes::Dynamic;
use super::listeners::{listeners, pages, SecondListener};
use super::{binary, module, Envoy, Turn};
use crate::envoy_config::{self, Routing, WasmFilter};
use crate::envoy_process::{EnvoyProcess, Launch, PORT_ATTEMPTS};
use crate::plugin::{fast_checks, fast_host_checks};
use crate::ports::{free_addr, free_addr_on};
use crate::upstream::FakeUpstream;
use crate::xds::XdsFiles;

/// Envoy could not bind a port picked for it: something else took it after it was picked.
#[derive(Debug)]
struct PortTaken;

impl std::fmt::Display for PortTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a port picked for Envoy was taken before Envoy bound it")
    }
}

impl std::error::Error for PortTaken {}

/// How an Envoy is to be started.
#[derive(Clone, Debug)]
pub struct EnvoyBuilder {
    concurrency: u32,
    backends: Vec<(String, SocketAddr)>,
    filter: Option<Value>,
    routing: Routing,
    listen_ip: IpAddr,
    status_ip: IpAddr,
    second: Option<Value>,
    misloaded: bool,
    alone: bool,
}

/// How an Envoy that was meant to refuse its configuration ended.
#[derive(Debug)]
pub struct Exited {
    /// Its exit status.
    pub status: ExitStatus,
    /// Its log followed by its own stdout and stderr.
    pub output: String,
}

impl EnvoyBuilder {
    /// Sets the number of worker threads (`--concurrency`); 1 unless set.
    pub fn concurrency(mut self, workers: u32) -> Self {
        self.concurrency = workers;
        self
    }

    /// Adds a cluster named `name` whose one endpoint is `addr`.
    pub fn backend(mut self, name: &str, addr: SocketAddr) -> Self {
        self.backends.push((name.to_owned(), addr));
        self
    }

    /// Adds a cluster for a fake backend, named as the backend.
    pub fn upstream(self, upstream: &FakeUpstream) -> Self {
        self.backend(upstream.name(), upstream.addr())
    }

    /// Sets how the route reaches the filter's pick; [`Routing::Cluster`] unless set. With
    /// [`Routing::Host`] every backend is also in the pool cluster, and the plugin configuration
    /// should say `"routing": "host"` and each backend's address.
    pub fn routing(mut self, routing: Routing) -> Self {
        self.routing = routing;
        self
    }

    /// Binds the users' listener to `ip`, an address of this machine, instead of 127.0.0.1 (e.g.
    /// a [`crate::local_address::LocalAddress`], to be reached from a non-loopback client); the
    /// port is picked free on it. Admin stays on 127.0.0.1.
    pub fn listen_on(mut self, ip: IpAddr) -> Self {
        self.listen_ip = ip;
        self
    }

    /// Binds the status page listeners to `ip`, an address of this machine, instead of
    /// 127.0.0.1 (a free port on it); to show the page stays closed on a listener an operator
    /// bound elsewhere.
    pub fn status_on(mut self, ip: IpAddr) -> Self {
        self.status_ip = ip;
        self
    }

    /// Puts upcheck.wasm (from `UPCHECK_WASM`) before the router, with this plugin configuration.
    /// Without it requests are routed by the routing header the client sends.
    pub fn wasm_filter(mut self, plugin_config: Value) -> Self {
        self.filter = Some(plugin_config);
        self
    }

    /// Adds a second users' listener, on its own free port (of the same address as the first),
    /// with upcheck.wasm and this plugin configuration in the same `vm_id` as the first
    /// listener's: two pools in one Envoy process, as an operator with two sites would run. Its
    /// route is the first's and reaches every cluster, so which backends its users reach is the
    /// plugin's doing. Only in [`Routing::Cluster`]; see [`Envoy::second_url`].
    pub fn second_listener(mut self, plugin_config: Value) -> Self {
        self.second = Some(plugin_config);
        self
    }

    /// Adds a listener (127.0.0.1, a free port) that loads upcheck.wasm by mistake as a network
    /// filter in the users' filter's VM, with its plugin configuration: each connection to it
    /// fails the VM of the worker that accepts it ([`Envoy::fail_a_worker_vm`]; why, in
    /// [`envoy_config::misloaded_listener`]). Needs [`EnvoyBuilder::wasm_filter`].
    pub fn misloaded_listener(mut self) -> Self {
        self.misloaded = true;
        self
    }

    /// Runs this Envoy with no other of the test binary beside it ([`Turn::alone`]): for a
    /// scenario whose figure depends on how fast the backends' peers answer, which other Envoys
    /// and their users on the same cores would slow.
    pub fn alone(mut self) -> Self {
        self.alone = true;
        self
    }

    /// The wasm filter as configured, with the module from `UPCHECK_WASM`. In host routing the
    /// plugin's `retries.max_try_timeout` is the route's `per_try_timeout` unless the
    /// configuration sets it, as `upcheck envoy` writes the two: the advice only ever shortens
    /// the route's per-try timeout.
    fn wasm(&self) -> Result<Option<WasmFilter>> {
        let Some(config) = &self.filter else {
            return Ok(None);
        };
        let mut config = config.clone();
        if let (Routing::Host { per_try_timeout }, Some(object)) =
            (self.routing, config.as_object_mut())
        {
            let retries = object
                .entry("retries")
                .or_insert_with(|| serde_json::json!({}));
            if let Some(retries) = retries.as_object_mut() {
                retries
                    .entry("max_try_timeout")
                    .or_insert_with(|| format!("{}ms", per_try_timeout.as_millis()).into());
            }
        }
        Ok(Some(WasmFilter {
            module: module()?,
            config,
        }))
    }

    /// Runs Envoy with its listener and clusters in a static bootstrap until it exits by itself,
    /// `--mode validate` if `validate`: for a configuration it must refuse at start-up (see
    /// [`envoy_config::static_bootstrap`]). An error if it is still running after 30 s (it is
    /// killed then).
    pub async fn run_static(self, validate: bool) -> Result<Exited> {
        let binary = binary()?;
        let filter = self.wasm()?;
        let _turn = Turn::one().await?;
        let dir = tempfile::Builder::new().prefix("upcheck-e2e-").tempdir()?;
        let bootstrap = dir.path().join("bootstrap.json");
        let second = SecondListener::new(self.second.as_ref(), self.listen_ip, self.routing)?;
        let pages = pages(filter.as_ref(), second.as_ref(), self.status_ip)?;
        let listeners = listeners(
            free_addr_on(self.listen_ip)?,
            filter.as_ref(),
            self.routing,
            second.as_ref(),
            &pages,
            None,
        );
        let clusters = envoy_config::clusters(&self.backends, self.routing);
        let config = envoy_config::static_bootstrap(free_addr()?, listeners, clusters);
        std::fs::write(&bootstrap, config.to_string())?;
        let mut process = EnvoyProcess::spawn(Launch {
            binary,
            bootstrap: &bootstrap,
            dir: dir.path(),
            concurrency: self.concurrency,
            cpu: None,
            args: &["--mode", if validate { "validate" } else { "serve" }],
            env: &[],
        })?;
        let status = process.until_exit().await?;
        Ok(Exited {
            status,
            output: process.log() + &process.output(),
        })
    }

    /// Starts Envoy and waits until it serves on its listeners.
    ///
    /// Its ports are picked free just before it starts, but another process (any outgoing
    /// connection takes an ephemeral port from the same range) can take one in between: Envoy then
    /// rejects that listener, and it is started again on other ports, up to [`PORT_ATTEMPTS`]
    /// times in all.
    pub async fn start(self) -> Result<Envoy> {
        let mut attempt = 1;
        loop {
            match self.clone().start_once().await {
                Err(error) if again_on_other_ports(&mut attempt, &error) => {}
                result => return result,
            }
        }
    }

    /// Picks the ports, writes the configuration and starts Envoy, once.
    async fn start_once(self) -> Result<Envoy> {
        let turn = match self.alone {
            true => Turn::alone().await?,
            false => Turn::one().await?,
        };
        let filter = self.wasm()?;
        let second = SecondListener::new(self.second.as_ref(), self.listen_ip, self.routing)?;
        ensure!(
            !self.misloaded || filter.is_some(),
            "a misloaded listener needs the wasm filter (`wasm_filter`): it loads the same module and configuration"
        );
        let misloaded = if self.misloaded {
            Some(free_addr()?)
        } else {
            None
        };
        let pages = pages(filter.as_ref(), second.as_ref(), self.status_ip)?;
        let dir = tempfile::Builder::new().prefix("upcheck-e2e-").tempdir()?;
        let xds = XdsFiles::create(&dir.path().join("xds"))?;
        let (listener, admin) = (free_addr_on(self.listen_ip)?, free_addr()?);
        xds.write_clusters(&envoy_config::clusters(&self.backends, self.routing))?;
        xds.write_listeners(&listeners(
            listener,
            filter.as_ref(),
            self.routing,
            second.as_ref(),
            &pages,
            misloaded,
        ))?;
        let status = [&pages[0], &pages[1]].map(|page| page.as_ref().map(|p| p.addr));
        let bootstrap = dir.path().join("bootstrap.json");
        std::fs::write(
            &bootstrap,
            envoy_config::bootstrap(admin, &xds.lds(), &xds.cds()).to_string(),
        )?;
        let dynamic = Dynamic {
            xds,
            backends: self.backends,
            filter,
            routing: self.routing,
            second,
            pages,
            misloaded,
        };
        launch(
            self.concurrency,
            dir,
            &bootstrap,
            Ports {
                listener,
                admin,
                status,
            },
            Some(dynamic),
            turn,
        )
        .await
    }

    /// Starts Envoy with a whole configuration file's text (YAML, e.g. `config/envoy.yaml` with
    /// its addresses and module path replaced), which `config` writes for the free loopback ports
    /// it is given, and waits until it serves. Its clusters, backends and plugin configuration are
    /// the file's: the builder's are ignored, and the running Envoy cannot change them. As
    /// [`EnvoyBuilder::start`], started again on other ports if one was taken meanwhile.
    pub async fn start_yaml(
        self,
        mut config: impl FnMut(&ConfigPorts) -> Result<String>,
    ) -> Result<Envoy> {
        let mut attempt = 1;
        loop {
            let turn = Turn::one().await?;
            let ports = ConfigPorts {
                listener: free_addr()?,
                admin: free_addr()?,
                status: free_addr()?,
            };
            let dir = tempfile::Builder::new().prefix("upcheck-e2e-").tempdir()?;
            let bootstrap = dir.path().join("envoy.yaml");
            std::fs::write(&bootstrap, config(&ports)?)?;
            let serving = Ports {
                listener: ports.listener,
                admin: ports.admin,
                status: [Some(ports.status), None],
            };
            match launch(self.concurrency, dir, &bootstrap, serving, None, turn).await {
                Err(error) if again_on_other_ports(&mut attempt, &error) => {}
                result => return result,
            }
        }
    }
}

/// Whether to start Envoy again after `error` on attempt `attempt` (counted up if so): when a
/// port was taken, up to [`PORT_ATTEMPTS`] in all.
fn again_on_other_ports(attempt: &mut u32, error: &anyhow::Error) -> bool {
    if *attempt >= PORT_ATTEMPTS || !error.is::<PortTaken>() {
        return false;
    }
    eprintln!("attempt {attempt}: {error:#}; starting Envoy on other ports");
    *attempt += 1;
    true
}

/// The ports a whole configuration file is to serve on ([`EnvoyBuilder::start_yaml`]), free on
/// 127.0.0.1.
#[derive(Clone, Copy, Debug)]
pub struct ConfigPorts {
    /// The users' listener.
    pub listener: SocketAddr,
    /// Envoy's admin interface.
    pub admin: SocketAddr,
    /// The status page's listener.
    pub status: SocketAddr,
}

/// Where an Envoy serves: users, admin, and the status page listeners of the first and the
/// second users' listener.
struct Ports {
    listener: SocketAddr,
    admin: SocketAddr,
    status: [Option<SocketAddr>; 2],
}

/// Runs Envoy on `bootstrap` (in `dir`) with `concurrency` workers, serving on `ports`, and
/// waits until it is ready.
async fn launch(
    concurrency: u32,
    dir: TempDir,
    bootstrap: &Path,
    Ports {
        listener,
        admin,
        status,
    }: Ports,
    dynamic: Option<Dynamic>,
    turn: Turn,
) -> Result<Envoy> {
    let process = EnvoyProcess::spawn(Launch {
        binary: binary()?,
        bootstrap,
        dir: dir.path(),
        concurrency,
        cpu: None,
        args: &[
            // The log is read while Envoy runs; its default flush interval is 10 s.
            "--file-flush-interval-msec",
            "100",
            // A listener update drains connections on the old filter chain; with the defaults
            // (10 min, gradual) keep-alive clients would see the old plugin config for minutes.
            "--drain-time-s",
            "1",
            "--drain-strategy",
            "immediate",
        ],
        env: &[],
    })?;
    let mut envoy = Envoy {
        process,
        listener,
        admin,
        status,
        dir: dir.path().to_owned(),
        cleanup: Some(dir),
        dynamic,
        http: reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()?,
        _turn: turn,
    };
    if let Err(error) = envoy.until_ready().await {
        if envoy.process.port_taken() {
            return Err(error.context(PortTaken));
        }
        return Err(error);
    }
    Ok(envoy)
}

impl Envoy {
    /// A builder for the scenarios' Envoy: two workers in front of `upstreams` (each a cluster),
    /// in `routing`, with the operators' block shortened ([`fast_checks`], or
    /// [`fast_host_checks`] in host routing).
    pub fn scenario(routing: Routing, upstreams: &[&FakeUpstream]) -> EnvoyBuilder {
        let plugin = match routing {
            Routing::Cluster => {
                let names: Vec<&str> = upstreams.iter().map(|u| u.name()).collect();
                fast_checks(&names)
            }
            Routing::Host { .. } => fast_host_checks(upstreams),
        };
        upstreams
            .iter()
            .fold(Envoy::builder().concurrency(2), |envoy, up| {
                envoy.upstream(up)
            })
            .routing(routing)
            .wasm_filter(plugin)
    }

    /// A builder for an Envoy with one worker and no clusters yet.
    pub fn builder() -> EnvoyBuilder {
        EnvoyBuilder {
            concurrency: 1,
            backends: Vec::new(),
            filter: None,
            routing: Routing::Cluster,
            listen_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            status_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            second: None,
            misloaded: false,
            alone: false,
        }
    }

    /// Polls `/ready`, then checks that the first listeners and clusters were accepted: a
    /// rejection fails at once; the stats are read again until a listener is active (an admin
    /// answer just after `/ready` can hold none of them yet), for at most 5 s.
    async fn until_ready(&mut self) -> Result<()> {
        let admin = self.admin;
        if let Err(error) = self
            .process
            .until_ready(admin, Duration::from_millis(50))
            .await
        {
            bail!(self.failure(&error.to_string()));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let stats = self
                .stats("^(listener_manager\\.(lds\\.update_rejected|total_listeners_active)|cluster_manager\\.cds\\.update_rejected)$")
                .await?;
            let stat = |name: &str| stats.get(name).copied().unwrap_or_default();
            let rejected = stat("listener_manager.lds.update_rejected") > 0
                || stat("cluster_manager.cds.update_rejected") > 0;
            let active = stat("listener_manager.total_listeners_active") > 0;
            if rejected || (!active && Instant::now() >= deadline) {
                bail!(self.failure(&format!(
                    "ready but its listener or clusters were rejected: {stats:?}"
                )));
            }
            if active {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
