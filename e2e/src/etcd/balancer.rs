//! One balancer of a fleet: a real Envoy with upcheck, started from what `upcheck envoy --etcd`
//! writes, and what a test reads from it.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use tempfile::TempDir;
use upcheck_cli::envoy::{render, Settings};

use super::Etcd;
use crate::envoy::{binary, module, Turn};
use crate::envoy_process::{EnvoyProcess, Launch, PORT_ATTEMPTS};
use crate::ports::free_addr;
use crate::upstream::{FakeUpstream, NAME_HEADER};

/// One user request through a balancer, as the user met it.
#[derive(Debug, Clone)]
pub struct Visit {
    /// Whether it was answered 200.
    pub ok: bool,
    /// The backend that answered, as it names itself.
    pub by: Option<String>,
    /// How long the answer took.
    pub took: Duration,
}

/// One balancer: a real Envoy with upcheck, started from `upcheck envoy`'s configuration.
pub struct Balancer {
    process: Option<EnvoyProcess>,
    /// Where users connect.
    pub listener: SocketAddr,
    /// Its admin interface.
    pub admin: SocketAddr,
    /// Its status page listener.
    pub status: SocketAddr,
    _dir: TempDir,
    http: reqwest::Client,
    /// The turn it runs on when it follows no etcd (an etcd holds the turns of its balancers),
    /// shared by the balancers started together; released once its Envoy is gone.
    _turn: Option<Arc<Turn>>,
}

/// Where a balancer runs, as far as the faults of a test are concerned: as if on a machine of its
/// own. The default is this machine as it is.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    /// The address its connections to backends and to etcd leave from (one of 127.0.0.0/8,
    /// which every loopback address reaches): what lets a test cut its path alone
    /// ([`crate::path_cut`]). Default: the kernel's choice.
    pub source: Option<Ipv4Addr>,
    /// How far its wall clock is off, in milliseconds (ahead when positive; [`crate::clock`]).
    /// Default: none.
    pub clock_offset_ms: Option<i64>,
    /// Where it reaches etcd's members, e.g. through a slow relay ([`crate::relay`]). Default:
    /// the members' own addresses.
    pub etcd_via: Option<Vec<SocketAddr>>,
}

/// The plugin configuration of the fleet tests: `backends` in host routing, probed every second
/// with a 500 ms timeout, and with `fleet` when given (its `cluster` filled in by `--etcd`).
pub fn plugin(backends: &[&FakeUpstream], fleet: Option<Value>) -> Value {
    let upstreams: Vec<Value> = backends
        .iter()
        .map(|b| json!({"name": b.name(), "address": b.addr().to_string()}))
        .collect();
    let mut config = json!({
        "routing": "host",
        "upstreams": upstreams,
        "health_checks": {
            "active": {"path": "/up", "interval": "1s", "timeout": "500ms"},
            "passive": {"fail_duration": "2s", "max_fails": 3},
        },
    });
    if let Some(fleet) = fleet {
        config["fleet"] = fleet;
    }
    config
}

impl Balancer {
    /// Starts an Envoy (one worker) with `plugin`, joined to `etcd` if given, as `upcheck envoy
    /// [--etcd …]` writes it, and waits until it is ready; started again on other ports when one
    /// was taken meanwhile, up to [`PORT_ATTEMPTS`] times in all. Without `etcd`, it first waits
    /// for one of the test binary's Envoy turns ([`Turn`]).
    pub async fn start(plugin: &Value, etcd: Option<&Etcd>) -> Result<Balancer> {
        Balancer::start_on(plugin, etcd, &Machine::default()).await
    }

    /// [`Balancer::start`], as if on `machine`.
    pub async fn start_on(
        plugin: &Value,
        etcd: Option<&Etcd>,
        machine: &Machine,
    ) -> Result<Balancer> {
        let turn = match etcd {
            Some(_) => None,
            None => Some(Arc::new(Turn::one().await?)),
        };
        Balancer::start_with(plugin, etcd, machine, turn).await
    }

    /// `N` balancers following no etcd, each with `plugin`, started once `N` turns are free,
    /// taken at once so that two tests each holding some never wait on each other.
    pub async fn start_many_unjoined<const N: usize>(plugin: &Value) -> Result<[Balancer; N]> {
        let turn = Arc::new(Turn::many(u32::try_from(N)?).await?);
        let mut balancers = Vec::with_capacity(N);
        for _ in 0..N {
            let balancer =
                Balancer::start_with(plugin, None, &Machine::default(), Some(turn.clone())).await?;
            balancers.push(balancer);
        }
        balancers
            .try_into()
            .map_err(|_| anyhow::anyhow!("{N} balancers started"))
    }

    /// A balancer following no etcd, run within the turns `etcd` holds for its fleet: for
    /// a test comparing a lone balancer with its fleet.
    pub async fn start_unjoined_within(plugin: &Value, _etcd: &Etcd) -> Result<Balancer> {
        Balancer::start_with(plugin, None, &Machine::default(), None).await
    }

    async fn start_with(
        plugin: &Value,
        etcd: Option<&Etcd>,
        machine: &Machine,
        turn: Option<Arc<Turn>>,
    ) -> Result<Balancer> {
        let mut attempt = 1;
        loop {
            match Balancer::start_once(plugin, etcd, machine, turn.clone()).await {
                Err(e)
                    if attempt < PORT_ATTEMPTS
                        && e.to_string().contains("Address already in use") =>
                {
                    eprintln!("attempt {attempt}: a port was taken; starting Envoy on other ports");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn start_once(
        plugin: &Value,
        etcd: Option<&Etcd>,
        machine: &Machine,
        turn: Option<Arc<Turn>>,
    ) -> Result<Balancer> {
        let mut source = upcheck_cli::plugin::read(plugin.to_string().as_bytes())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let joined = match etcd {
            Some(etcd) => {
                let members = machine.etcd_via.clone().unwrap_or_else(|| etcd.clients());
                let mut joined = upcheck_cli::etcd::join(&mut source, members)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                joined.tls = etcd
                    .tls_flags()
                    .tls(true)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                Some(joined)
            }
            None => None,
        };
        let mut deployment =
            upcheck_cli::deployment::plan(&source, None).map_err(|e| anyhow::anyhow!("{e}"))?;
        deployment.etcd = joined;
        let dir = tempfile::Builder::new().prefix("upcheck-e2e-").tempdir()?;
        let (listener, admin, status) = (free_addr()?, free_addr()?, free_addr()?);
        let settings = Settings {
            listen: listener,
            admin,
            status,
            wasm: module()?.display().to_string(),
            concurrency: 1,
            input: "the fleet test".into(),
            membership: None,
        };
        let config = dir.path().join("envoy.yaml");
        let mut yaml = render(&deployment, &settings);
        if let Some(bind) = machine.source {
            // Envoy's default for every cluster's upstream connections.
            yaml.push_str(&format!(
                "cluster_manager:\n  upstream_bind_config:\n    source_address: {{ address: {bind}, port_value: 0 }}\n"
            ));
        }
        std::fs::write(&config, yaml)?;
        let mut process = EnvoyProcess::spawn(Launch {
            binary: binary()?,
            bootstrap: &config,
            dir: dir.path(),
            concurrency: 1,
            cpu: None,
            // The log is read while Envoy runs: flushed every 100 ms rather than every 10 s.
            args: &["--log-level", "info", "--file-flush-interval-msec", "100"],
            env: &match machine.clock_offset_ms {
                Some(offset) => crate::clock::offset(offset)?,
                None => Vec::new(),
            },
        })?;
        if let Err(e) = process.until_ready(admin, Duration::from_millis(50)).await {
            bail!("{e}: {}{}", process.log(), process.output());
        }
        Ok(Balancer {
            process: Some(process),
            listener,
            admin,
            status,
            _dir: dir,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()?,
            _turn: turn,
        })
    }

    /// Its Envoy's process ID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(EnvoyProcess::pid)
    }

    /// Kills it with SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.process
            .as_ref()
            .map(EnvoyProcess::log)
            .unwrap_or_default()
    }

    /// Waits until its log says `text` (read every 20 ms, flushed every 100 ms): how long that
    /// took; an error naming `text` after 10 s.
    pub async fn until_logged(&self, text: &str) -> Result<Duration> {
        let started = Instant::now();
        while !self.log().contains(text) {
            if started.elapsed() >= Duration::from_secs(10) {
                bail!("no {text:?} in the log within 10 s: {}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(started.elapsed())
    }

    /// One user request to `/`: whether it was answered 200.
    pub async fn user_request(&self) -> bool {
        let answer = self
            .http
            .get(format!("http://{}/", self.listener))
            .send()
            .await;
        answer.is_ok_and(|r| r.status().is_success())
    }

    /// One user request to `/`, as the user met it.
    pub async fn visit(&self) -> Visit {
        let started = Instant::now();
        let answer = self
            .http
            .get(format!("http://{}/", self.listener))
            .send()
            .await;
        let took = started.elapsed();
        match answer {
            Ok(r) => Visit {
                ok: r.status().is_success(),
                by: r
                    .headers()
                    .get(NAME_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                took,
            },
            Err(_) => Visit {
                ok: false,
                by: None,
                took,
            },
        }
    }

    /// Its statistics (`/stats`) and status page (text) as served now.
    pub async fn stats_and_page(&self) -> Result<String> {
        let stats = self
            .http
            .get(format!("http://{}/stats", self.admin))
            .send()
            .await?
            .text()
            .await?;
        let page = self
            .http
            .get(format!("http://{}/upcheck/status", self.status))
            .send()
            .await?
            .text()
            .await?;
        Ok(stats + &page)
    }

    /// Its status page in JSON, as served now.
    pub async fn page_json(&self) -> Result<Value> {
        let url = format!("http://{}/upcheck/status.json", self.status);
        let text = self.http.get(url).send().await?.text().await?;
        serde_json::from_str(&text).with_context(|| format!("not JSON: {text}"))
    }

    /// One of Envoy's figures of each endpoint of `cluster` (its `/clusters`: `rq_active`,
    /// `rq_success`, `rq_error`, `rq_timeout`…), by address: `rq_active` of the watch's cluster
    /// (`etcd_grpc`) says which member the watch's stream is on.
    pub async fn endpoint_stats(&self, cluster: &str, stat: &str) -> Result<Vec<(String, u64)>> {
        let url = format!("http://{}/clusters", self.admin);
        let body = self.http.get(url).send().await?.text().await?;
        let prefix = format!("{cluster}::");
        let infix = format!("::{stat}::");
        Ok(body
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|l| l.split_once(&infix))
            .map(|(host, n)| (host.to_owned(), n.trim().parse().unwrap_or(0)))
            .collect())
    }

    /// A counter of upcheck's (`wasmcustom.upcheck.<name>`), 0 when Envoy has none yet.
    pub async fn counter(&self, name: &str) -> Result<u64> {
        let stat = format!("wasmcustom.upcheck.{name}");
        let url = format!(
            "http://{}/stats?filter=^{}$",
            self.admin,
            stat.replace('.', "\\.")
        );
        let body = self.http.get(url).send().await?.text().await?;
        Ok(body
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{stat}: ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0))
    }
}
