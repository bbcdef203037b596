//! Envoy as the benchmarks run it: a static bootstrap, pinned to a core when asked.
//!
//! The e2e harness's `Envoy` serves listeners and clusters over file-based xDS and runs one Envoy
//! at a time per process, which suits tests that change the configuration and assert timing. The
//! bench needs other things: several Envoys at once (the setups of a throughput round stay up
//! side by side; the detection runs overlap), a cluster with Envoy's own health checks, and a
//! process pinned with `taskset`. It renders its bootstraps from the harness's public pieces
//! ([`envoy_config`], the CLI's) and starts Envoy with the harness's launcher
//! ([`EnvoyProcess`]).

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use upcheck_e2e::envoy_config::{self, Routing, WasmFilter, POOL};
use upcheck_e2e::envoy_process::{EnvoyProcess, Launch, PORT_ATTEMPTS};
use upcheck_e2e::ports::free_addr;

/// What sits in front of the backends.
#[derive(Clone, Debug)]
pub enum Front {
    /// A wasm filter (upcheck or the floor) with this plugin configuration, routed by the header
    /// the filter sets: one cluster per backend (`Routing::Cluster`, `cluster_header`, as
    /// `config/envoy-simple.yaml`), or also one pool cluster with `override_host` and retries
    /// (`Routing::Host`, as `config/envoy.yaml`).
    Wasm {
        /// The module.
        module: PathBuf,
        /// Its plugin configuration.
        config: Value,
        /// How the pick reaches Envoy.
        routing: Routing,
    },
    /// No filter: one round-robin cluster over every backend with Envoy's own active health
    /// checks (`GET /up` every 10 s, 5 s timeout) and outlier detection (3 consecutive 5xx).
    EnvoyChecks,
}

/// The bootstrap for `front` before `backends`, listening on `listener`, admin on `admin`.
fn bootstrap(
    front: &Front,
    backends: &[(String, SocketAddr)],
    listener: SocketAddr,
    admin: SocketAddr,
) -> Value {
    match front {
        Front::Wasm {
            module,
            config,
            routing,
        } => {
            let filter = WasmFilter {
                module: module.clone(),
                config: config.clone(),
            };
            envoy_config::static_bootstrap(
                admin,
                vec![envoy_config::listener(
                    "web",
                    listener,
                    Some(&filter),
                    *routing,
                )],
                envoy_config::clusters(backends, *routing),
            )
        }
        Front::EnvoyChecks => {
            let mut listener = envoy_config::listener("web", listener, None, Routing::Cluster);
            let route = "/filter_chains/0/filters/0/typed_config/route_config/virtual_hosts/0/routes/0/route";
            if let Some(route) = listener.pointer_mut(route) {
                *route = json!({"cluster": POOL});
            }
            envoy_config::static_bootstrap(admin, vec![listener], vec![pool(backends)])
        }
    }
}

/// One cluster over every backend with Envoy's health checking, the anchor upcheck replaces.
fn pool(backends: &[(String, SocketAddr)]) -> Value {
    let endpoints: Vec<Value> = backends
        .iter()
        .map(|(_, addr)| {
            json!({"endpoint": {"address": {"socket_address": {
                "address": addr.ip().to_string(), "port_value": addr.port()}}}})
        })
        .collect();
    json!({
        "name": POOL,
        "type": "STATIC",
        "connect_timeout": "1s",
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": {"cluster_name": POOL, "endpoints": [{"lb_endpoints": endpoints}]},
        "health_checks": [{
            "timeout": "5s",
            "interval": "10s",
            "unhealthy_threshold": 1,
            "healthy_threshold": 1,
            "http_health_check": {"path": "/up"},
        }],
        "outlier_detection": {
            "consecutive_5xx": 3,
            "interval": "10s",
            "max_ejection_percent": 50,
        },
    })
}

/// A running Envoy, killed (by its pid) when dropped.
pub struct Proxy {
    process: EnvoyProcess,
    listener: SocketAddr,
    admin: SocketAddr,
    /// From just before the spawn to the first `/ready` answering 200.
    ready_after: Duration,
}

impl Proxy {
    /// Starts `envoy` with `workers` worker threads for `front` before `backends`, on core `cpu`
    /// if given, and waits until it is ready. Its files go to a directory under `out`.
    pub async fn start(
        envoy: &Path,
        front: &Front,
        backends: &[(String, SocketAddr)],
        workers: u32,
        cpu: Option<usize>,
        out: &Path,
    ) -> Result<Proxy> {
        Proxy::start_with(envoy, front, backends, workers, cpu, out, &[]).await
    }

    /// [`Proxy::start`] with `extra` arguments to Envoy (a log level, say). Ports are picked
    /// free but bound by Envoy later, so another process may take one in between (the bench's
    /// own Envoys and upstreams start concurrently): an Envoy that could not bind is started again
    /// on new ports, [`PORT_ATTEMPTS`] times at most.
    pub async fn start_with(
        envoy: &Path,
        front: &Front,
        backends: &[(String, SocketAddr)],
        workers: u32,
        cpu: Option<usize>,
        out: &Path,
        extra: &[&str],
    ) -> Result<Proxy> {
        let mut tries = 1;
        loop {
            let (listener, admin) = (free_addr()?, free_addr()?);
            let dir = out.join(format!("envoy-{}", listener.port()));
            std::fs::create_dir_all(&dir)?;
            let config = dir.join("bootstrap.json");
            std::fs::write(
                &config,
                bootstrap(front, backends, listener, admin).to_string(),
            )?;
            let spawned = Instant::now();
            let mut process = EnvoyProcess::spawn(Launch {
                binary: envoy,
                bootstrap: &config,
                dir: &dir,
                concurrency: workers,
                cpu,
                args: extra,
                env: &[],
            })?;
            // Every 5 ms: start-up is measured by it.
            match process.until_ready(admin, Duration::from_millis(5)).await {
                Ok(()) => {
                    return Ok(Proxy {
                        process,
                        listener,
                        admin,
                        ready_after: spawned.elapsed(),
                    })
                }
                Err(_) if tries < PORT_ATTEMPTS && process.port_taken() => tries += 1,
                Err(error) => bail!("Envoy {error}; see {}", dir.display()),
            }
        }
    }

    /// How long Envoy took from its spawn to `/ready` answering 200.
    pub fn ready_after(&self) -> Duration {
        self.ready_after
    }

    /// The value of counter or gauge `name` on the admin `/stats`.
    pub async fn stat(&self, name: &str) -> Result<u64> {
        let url = format!("http://{}/stats?filter={name}", self.admin);
        let text = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()?
            .get(url)
            .send()
            .await?
            .text()
            .await?;
        text.lines()
            .find_map(|line| {
                line.strip_prefix(name)?
                    .strip_prefix(": ")?
                    .trim()
                    .parse()
                    .ok()
            })
            .with_context(|| format!("no stat {name} in {text:?}"))
    }

    /// Stops Envoy with SIGTERM, so that it flushes its log, and returns the log; an error if it
    /// has not exited in time (it is then killed, as any dropped `Proxy`).
    pub async fn stop(self) -> Result<String> {
        self.process.stop().await
    }

    /// The URL of `path` on the listener.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listener)
    }

    /// CPU time Envoy has used so far (user + system, all threads).
    pub fn cpu_time(&self) -> Result<Duration> {
        crate::machine::cpu_time(self.process.pid())
    }

    /// Envoy's resident memory now, in bytes.
    pub fn resident(&self) -> Result<u64> {
        crate::machine::resident(self.process.pid())
    }

    /// CPU time each of Envoy's worker threads has used so far.
    pub fn workers_cpu_time(&self) -> Result<Vec<Duration>> {
        crate::machine::threads_cpu_time(self.process.pid(), "wrk:")
    }
}
