//! Envoy throughput and latency with wrk: the floor filter, upcheck (in both routing modes, with
//! the deployed configuration, so outlier detection on), and Envoy's own checks.
//!
//! Envoy runs one worker pinned to core 0; wrk and the upstreams (a separate process of this
//! binary) share core 1, so neither steals Envoy's core. The setups stay up side by side and are
//! measured in alternating rounds (A B C D A B C D …), so a drift of the machine over the run
//! hits every setup alike. Whether Envoy is the bottleneck is checked, not assumed: wrk against
//! the upstream alone must go well past any setup, and Envoy's core must be the busy one. (The
//! e2e fake upstream did not: see [`crate::upstream`].)

use crate::effort::Effort;
use crate::machine::CpuTimes;
use crate::proxy::{Front, Proxy};
use crate::wrk::{self, Wrk};
use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use upcheck_e2e::envoy_config::Routing;

/// Core of Envoy, and core of wrk and the upstreams (when the machine has two).
const ENVOY_CPU: usize = 0;
const LOAD_CPU: usize = 1;

/// How wrk loads every setup: one thread and 8 connections, enough to keep Envoy's one worker
/// busy (the table shows its CPU use) with little queueing in the latencies.
pub const WRK: Wrk = Wrk {
    threads: 1,
    connections: 8,
    cpu: None,
};

/// One setup's runs.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Its label in the table.
    pub name: &'static str,
    /// The measured runs, in round order.
    pub runs: Vec<wrk::Run>,
    /// Envoy's CPU use per run, in cores (1.0 = one core busy).
    pub envoy_cores: Vec<f64>,
    /// Busy share of the load core per run.
    pub load_core: Vec<f64>,
}

/// All setups, and the bottleneck check.
#[derive(Clone, Debug)]
pub struct Throughput {
    /// The floor (a), upcheck (b), Envoy's checks (c), upcheck in host routing (d).
    pub setups: Vec<Setup>,
    /// wrk straight at one of the upstreams used, same settings and cores.
    pub upstream_alone: wrk::Run,
    /// wrk straight at the e2e fake upstream in `ok` mode, same settings and cores.
    pub e2e_alone: wrk::Run,
    /// How wrk ran.
    pub wrk: Wrk,
    /// Whether Envoy and the load were pinned to separate cores.
    pub pinned: bool,
}

/// Upstreams in their own process (this binary's `upstreams` command), pinned to the load core;
/// it ends when this handle drops.
struct Upstreams {
    _child: Child,
    addrs: Vec<(String, SocketAddr)>,
}

impl Upstreams {
    /// The bench's fast upstreams, or with `e2e` the e2e fake upstream (see [`crate::upstream`]).
    async fn start(names: &[&str], cpu: Option<usize>, e2e: bool) -> Result<Upstreams> {
        let exe = std::env::current_exe()?;
        let mut command = match cpu {
            Some(cpu) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", &cpu.to_string()]).arg(exe);
                taskset
            }
            None => Command::new(exe),
        };
        command.arg("upstreams");
        if e2e {
            command.arg("--e2e");
        }
        let mut child = command
            .args(names)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut addrs = Vec::new();
        while addrs.len() < names.len() {
            let line = lines.next_line().await?.context("the upstreams exited")?;
            let (name, addr) = line.split_once(' ').context("expected `NAME ADDR`")?;
            addrs.push((name.to_owned(), addr.parse()?));
        }
        Ok(Upstreams {
            _child: child,
            addrs,
        })
    }
}

/// Measures the four setups in front of two `ok` upstreams, for as many rounds and as long as
/// `effort` says.
pub async fn measure(
    envoy: &Path,
    upcheck: &Path,
    floor: &Path,
    out: &Path,
    effort: &Effort,
) -> Result<Throughput> {
    let pinned = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let (envoy_cpu, load_cpu) = if pinned {
        (Some(ENVOY_CPU), Some(LOAD_CPU))
    } else {
        (None, None)
    };
    let wrk = Wrk {
        cpu: load_cpu,
        ..WRK
    };
    let e2e_alone = {
        let fake = Upstreams::start(&["fake"], load_cpu, true).await?;
        wrk.run(
            &format!("http://{}/", fake.addrs[0].1),
            effort.throughput_run,
        )
        .await?
    };
    let upstreams = Upstreams::start(&["app1", "app2"], load_cpu, false).await?;
    let backends = &upstreams.addrs;
    let mut host_config = crate::deployed_config();
    host_config["routing"] = serde_json::json!("host");
    for (i, (_, addr)) in backends.iter().enumerate() {
        host_config["upstreams"][i]["address"] = serde_json::json!(addr.to_string());
    }
    let host = Routing::Host {
        per_try_timeout: Duration::from_secs(3),
    };
    let fronts: [(&'static str, Front); 4] = [
        (
            "(a) floor",
            wasm(floor, serde_json::json!({}), Routing::Cluster),
        ),
        (
            "(b) upcheck, cluster routing",
            wasm(upcheck, crate::deployed_config(), Routing::Cluster),
        ),
        ("(c) Envoy checks", Front::EnvoyChecks),
        (
            "(d) upcheck, host routing + retries",
            wasm(upcheck, host_config, host),
        ),
    ];
    let mut proxies = Vec::new();
    for (_, front) in &fronts {
        proxies.push(Proxy::start(envoy, front, backends, 1, envoy_cpu, out).await?);
    }
    for proxy in &proxies {
        wrk.run(&proxy.url("/"), effort.throughput_warm_up).await?;
    }
    let upstream_alone = wrk
        .run(&format!("http://{}/", backends[0].1), effort.throughput_run)
        .await?;
    let mut setups: Vec<Setup> = fronts
        .iter()
        .map(|(name, _)| Setup {
            name,
            runs: Vec::new(),
            envoy_cores: Vec::new(),
            load_core: Vec::new(),
        })
        .collect();
    for _ in 0..effort.throughput_rounds {
        for (setup, proxy) in setups.iter_mut().zip(&proxies) {
            let (cpus, envoy_time) = (CpuTimes::now()?, proxy.cpu_time()?);
            let run = wrk.run(&proxy.url("/"), effort.throughput_run).await?;
            let busy = CpuTimes::now()?.busy_since(&cpus);
            let envoy_time = proxy.cpu_time()? - envoy_time;
            if run.errors > 0 {
                bail!("{}: {} errors under load", setup.name, run.errors);
            }
            setup.runs.push(run);
            setup
                .envoy_cores
                .push(envoy_time.as_secs_f64() / effort.throughput_run.as_secs_f64());
            setup
                .load_core
                .push(busy.get(LOAD_CPU).copied().unwrap_or(0.0));
        }
    }
    Ok(Throughput {
        setups,
        upstream_alone,
        e2e_alone,
        wrk,
        pinned,
    })
}

fn wasm(module: &Path, config: serde_json::Value, routing: Routing) -> Front {
    Front::Wasm {
        module: PathBuf::from(module),
        config,
        routing,
    }
}
