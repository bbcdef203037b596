//! Figures from the wasmtime host (host-tests): fuel and linear memory, deterministic.
//!
//! Fuel is wasmtime's count of wasm instructions, so these figures do not depend on the machine
//! or on what else runs: they say what the filter itself spends, apart from Envoy. Every run is a
//! process as the shipped configurations run it, `--concurrency 2` (a main-thread VM and two
//! workers), whose backends all answer 200, so the health table never changes once warm.

use crate::callbacks::REQUEST_CALLBACKS;
use crate::instrument::{self, Instrumented};
use crate::profile::{self, Spent};
use anyhow::Result;
use std::collections::BTreeMap;
use std::time::Duration;
use upcheck_host_tests::{Fuel, Host, HostError, HostOptions, Val};

/// Requests per second of the traffic the host sends.
const RATE: u32 = 500;

/// The plugin configuration for backends `app1..=appN` with the given probe interval and timeout.
pub fn fleet(backends: usize, interval: &str, timeout: &str) -> String {
    let upstreams: Vec<_> = (1..=backends)
        .map(|i| serde_json::json!({"name": format!("app{i}")}))
        .collect();
    serde_json::json!({
        "upstreams": upstreams,
        "health_checks": {
            "active": {"path": "/up", "interval": interval, "timeout": timeout},
            "passive": {"fail_duration": "10s", "max_fails": 3},
        },
    })
    .to_string()
}

/// How a configuration routes, for the clusters the host must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// `routing: cluster` (`config/envoy-simple.yaml`): the route header names the backend's
    /// cluster.
    Cluster,
    /// `routing: host` (`config/envoy.yaml`): the route header lists the pick's address, then
    /// the retry's; the filter also reads how many attempts a request took.
    Host,
}

impl Routing {
    /// `config` routing this way: for [`Routing::Host`], `routing: host` with backend `appN` at
    /// its address in the host (see [`address`]).
    pub fn config(self, config: &str) -> Result<String> {
        let mut config: serde_json::Value = serde_json::from_str(config)?;
        if self == Routing::Host {
            config["routing"] = "host".into();
            if let Some(upstreams) = config["upstreams"].as_array_mut() {
                for (i, upstream) in upstreams.iter_mut().enumerate() {
                    upstream["address"] = address(i + 1).into();
                }
            }
        }
        Ok(config.to_string())
    }

    /// The clusters user requests go to besides `app1..=appN` (which take the probes). The test
    /// host routes by the header's whole value, so in host routing every `pick,retry` pair of
    /// addresses is a cluster of its own, one more upstream answering 200.
    fn routes(self, backends: usize) -> Vec<String> {
        match self {
            Routing::Cluster => Vec::new(),
            Routing::Host => (1..=backends)
                .flat_map(|i| (1..=backends).map(move |j| (i, j)))
                .map(|(i, j)| match i == j {
                    true => address(i),
                    false => format!("{},{}", address(i), address(j)),
                })
                .collect(),
        }
    }
}

/// Backend `appN`'s address in the host: upstreams get `127.0.0.1:3001`, `:3002`, … in the
/// order they are created, and `app1..=appN` are created first.
fn address(n: usize) -> String {
    format!("127.0.0.1:{}", 3000 + n)
}

/// A host running `wasm` in front of `backends` healthy backends (routed to by `routing`), after
/// the first probe round.
fn started(wasm: &[u8], backends: usize, config: &str, routing: Routing) -> Result<Host> {
    let mut host = Host::new(wasm, HostOptions::default()).map_err(host_error)?;
    for i in 1..=backends {
        host.upstream(&format!("app{i}"));
    }
    for route in routing.routes(backends) {
        host.upstream(&route);
    }
    host.start(config).map_err(host_error)?;
    host.advance(Duration::from_secs(1)).map_err(host_error)?;
    Ok(host)
}

fn host_error(e: HostError) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// Fuel per export, summed over every VM.
fn fuel_of(host: &Host) -> BTreeMap<String, Fuel> {
    host.fuel()
}

/// What `export` spent between two snapshots.
fn spent(before: &BTreeMap<String, Fuel>, after: &BTreeMap<String, Fuel>, export: &str) -> Fuel {
    let (b, a) = (
        before.get(export).copied().unwrap_or_default(),
        after.get(export).copied().unwrap_or_default(),
    );
    Fuel {
        calls: a.calls - b.calls,
        fuel: a.fuel - b.fuel,
    }
}

/// Fuel per routed request, in all and per callback.
#[derive(Clone, Debug)]
pub struct RequestFuel {
    /// Mean fuel per request over every callback of its context.
    pub total: u64,
    /// Mean fuel per request in each of [`REQUEST_CALLBACKS`].
    pub callbacks: Vec<(&'static str, u64)>,
}

/// Fuel per request of `wasm` in front of `backends` (`config` its plugin configuration, routing
/// by `routing`), after a warm-up batch, over 4 s of requests at [`RATE`].
pub fn request_fuel(
    wasm: &[u8],
    backends: usize,
    config: &str,
    routing: Routing,
) -> Result<RequestFuel> {
    let mut host = started(wasm, backends, config, routing)?;
    host.traffic(RATE, Duration::from_secs(1))
        .map_err(host_error)?;
    let before = fuel_of(&host);
    let traffic = host
        .traffic(RATE, Duration::from_secs(4))
        .map_err(host_error)?;
    let after = fuel_of(&host);
    let n = traffic.len() as u64;
    anyhow::ensure!(
        traffic.failures().is_empty(),
        "requests failed in the host: {traffic}"
    );
    Ok(RequestFuel {
        total: traffic.mean_fuel(),
        callbacks: REQUEST_CALLBACKS
            .iter()
            .map(|export| (*export, spent(&before, &after, export).fuel / n.max(1)))
            .collect(),
    })
}

/// Fuel of active checking with `backends` backends and the default 10 s interval.
#[derive(Clone, Copy, Debug)]
pub struct ProbeFuel {
    /// `on_tick` + `on_http_call_response` fuel, all VMs, over whole rounds ÷ probes sent.
    pub per_backend_round: u64,
    /// The same with the ticks' idle cost ([`ProbeFuel::idle_tick`] per tick) taken out: what
    /// probing itself costs.
    pub probing_per_backend: u64,
    /// Mean fuel of one `on_tick` (any VM) while no probe is due or answered.
    pub idle_tick: u64,
}

/// Measures [`ProbeFuel`] for upcheck `wasm` without traffic.
pub fn probe_fuel(wasm: &[u8], backends: usize) -> Result<ProbeFuel> {
    let interval = Duration::from_secs(10);
    let mut host = started(
        wasm,
        backends,
        &fleet(backends, "10s", "5s"),
        Routing::Cluster,
    )?;
    // The first round went out at start; the next is due 9-11 s after it (jitter ± 10 %).
    let before = fuel_of(&host);
    host.advance(Duration::from_millis(7_500))
        .map_err(host_error)?;
    let after = fuel_of(&host);
    anyhow::ensure!(
        spent(&before, &after, "proxy_on_http_call_response").calls == 0,
        "probes were answered between rounds"
    );
    let idle = spent(&before, &after, "proxy_on_tick");
    // Then whole intervals, from round 2 on.
    host.advance(Duration::from_millis(1_000))
        .map_err(host_error)?;
    let probes = |host: &Host| -> u64 {
        (1..=backends)
            .map(|i| host.probes_sent(&format!("app{i}")))
            .sum()
    };
    let (sent_before, before) = (probes(&host), fuel_of(&host));
    host.advance(interval * 3).map_err(host_error)?;
    let (sent_after, after) = (probes(&host), fuel_of(&host));
    let ticks = spent(&before, &after, "proxy_on_tick");
    let fuel = ticks.fuel + spent(&before, &after, "proxy_on_http_call_response").fuel;
    let idle_tick = idle.fuel / idle.calls.max(1);
    let probes = (sent_after - sent_before).max(1);
    Ok(ProbeFuel {
        per_backend_round: fuel / probes,
        probing_per_backend: fuel.saturating_sub(idle_tick * ticks.calls) / probes,
        idle_tick,
    })
}

/// Linear memory of the VMs over a long run.
#[derive(Clone, Copy, Debug)]
pub struct MemoryRun {
    /// Largest memory of any VM after warm-up, in 64 KiB pages.
    pub warm_pages: u64,
    /// Largest memory of any VM at the end.
    pub end_pages: u64,
    /// Requests sent.
    pub requests: u64,
    /// Probe rounds (probes sent ÷ backends).
    pub rounds: u64,
}

/// The probe interval of the memory runs: the shortest the tick (200 ms) serves, so that many
/// rounds fit; with jitter a backend is due every second tick.
const MEMORY_INTERVAL: &str = "200ms";
/// Virtual time per batch of a memory run, and of its warm-up: the outlier window (10 s).
const MEMORY_BATCH: Duration = Duration::from_secs(10);

/// Runs the instrumented `wasm` with `backends` backends until at least `rounds` probe rounds
/// went out and `requests` requests were sent, spread over the rounds, in batches.
pub fn memory_run(
    instrumented: &Instrumented,
    backends: usize,
    requests: u64,
    rounds: u64,
) -> Result<MemoryRun> {
    let config = fleet(backends, MEMORY_INTERVAL, "100ms");
    let mut host = started(&instrumented.wasm, backends, &config, Routing::Cluster)?;
    // A round every other 200 ms tick: rounds × 400 ms of traffic.
    let seconds = (rounds * 2).div_ceil(5).max(1);
    let rate = u32::try_from(requests.div_ceil(seconds))?.max(1);
    // Warm-up: one batch at the run's rate, as long as the outlier window, so that every
    // backend has had requests and the shared tables hold every backend's full window (at
    // 1,000 backends, a second at a few hundred requests reached only some of them).
    host.traffic(rate, MEMORY_BATCH).map_err(host_error)?;
    let warm_pages = pages(&mut host)?;
    let probes = |host: &Host| -> u64 {
        (1..=backends)
            .map(|i| host.probes_sent(&format!("app{i}")))
            .sum::<u64>()
            / backends as u64
    };
    let first_rounds = probes(&host);
    let mut sent = 0;
    while sent < requests || probes(&host) - first_rounds < rounds {
        let traffic = host.traffic(rate, MEMORY_BATCH).map_err(host_error)?;
        sent += traffic.len() as u64;
    }
    Ok(MemoryRun {
        warm_pages,
        end_pages: pages(&mut host)?,
        requests: sent,
        rounds: probes(&host) - first_rounds,
    })
}

/// The largest memory of any VM, in pages.
fn pages(host: &mut Host) -> Result<u64> {
    (0..host.vm_count())
        .map(|vm| read_export(host, vm, instrument::MEMORY_PAGES))
        .try_fold(0, |max, pages| Ok(max.max(pages?)))
}

fn read_export(host: &mut Host, vm: usize, export: &str) -> Result<u64> {
    let results = host.call(vm, export, &[]).map_err(host_error)?;
    match results.as_deref() {
        Some([Val::I32(v)]) => Ok(u64::from(*v as u32)),
        Some([Val::I64(v)]) => Ok(*v as u64),
        _ => anyhow::bail!("{export} answered {results:?}"),
    }
}

/// Hostcall counts by (callback, import), summed over the VMs; the callback is `None` for
/// calls made outside any `proxy_on_*` export.
fn hostcalls(
    host: &mut Host,
    instrumented: &Instrumented,
) -> Result<BTreeMap<(Option<String>, String), u64>> {
    let callbacks: Vec<Option<&str>> = std::iter::once(None)
        .chain(instrumented.callbacks.iter().map(|c| Some(c.as_str())))
        .collect();
    let mut counts = BTreeMap::new();
    for import in &instrumented.imports {
        for callback in &callbacks {
            let export = instrument::counter_export(import, *callback);
            let mut sum = 0;
            for vm in 0..host.vm_count() {
                sum += read_export(host, vm, &export)?;
            }
            if sum > 0 {
                counts.insert((callback.map(str::to_owned), import.clone()), sum);
            }
        }
    }
    Ok(counts)
}

/// Hostcalls per request, by import (most frequent first), in one callback.
pub type CallbackCalls = (&'static str, Vec<(String, f64)>);

/// Hostcalls per request in each of [`REQUEST_CALLBACKS`], of the instrumented `wasm` in front
/// of `backends` after warm-up (routing by `routing`), over the same traffic as
/// [`request_fuel`]: 4 s at [`RATE`], ticks and probes running as they do in a process. Each
/// call is counted in the callback that made it, so the ticks' own calls are not in these
/// figures; what a tick leaves a request to do (reading a table it refreshed) is.
pub fn hostcalls_per_request(
    instrumented: &Instrumented,
    backends: usize,
    config: &str,
    routing: Routing,
) -> Result<Vec<CallbackCalls>> {
    let mut host = started(&instrumented.wasm, backends, config, routing)?;
    host.traffic(RATE, Duration::from_secs(1))
        .map_err(host_error)?;
    let before = hostcalls(&mut host, instrumented)?;
    let traffic = host
        .traffic(RATE, Duration::from_secs(4))
        .map_err(host_error)?;
    anyhow::ensure!(
        traffic.failures().is_empty(),
        "requests failed in the host: {traffic}"
    );
    let requests = traffic.len().max(1) as f64;
    let after = hostcalls(&mut host, instrumented)?;
    Ok(REQUEST_CALLBACKS
        .iter()
        .map(|callback| {
            let mut calls: Vec<(String, f64)> = after
                .iter()
                .filter(|((c, _), _)| c.as_deref() == Some(*callback))
                .map(|(key, n)| {
                    let delta = n - before.get(key).copied().unwrap_or(0);
                    (key.1.clone(), delta as f64 / requests)
                })
                .filter(|(_, n)| *n > 0.0)
                .collect();
            calls.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            (*callback, calls)
        })
        .collect())
}

/// Each function's own instructions per request (see [`crate::profile`]) of `named`, a copy of
/// the module with its function names, in front of 2 backends with `config` (routing by
/// `routing`), over the same traffic as [`request_fuel`], every VM's counts summed.
pub fn per_function(named: &[u8], config: &str, routing: Routing) -> Result<Vec<Spent>> {
    let counting = profile::counting(named)?;
    let mut host = started(&counting.wasm, 2, config, routing)?;
    host.traffic(RATE, Duration::from_secs(1))
        .map_err(host_error)?;
    let before = function_counts(&mut host, counting.functions.len())?;
    let traffic = host
        .traffic(RATE, Duration::from_secs(4))
        .map_err(host_error)?;
    anyhow::ensure!(
        traffic.failures().is_empty(),
        "requests failed in the host: {traffic}"
    );
    let after = function_counts(&mut host, counting.functions.len())?;
    Ok(profile::spent(
        &counting.functions,
        &before,
        &after,
        traffic.len() as u64,
    ))
}

/// Each of `functions` defined functions' instruction count, summed over the VMs.
fn function_counts(host: &mut Host, functions: usize) -> Result<Vec<u64>> {
    let mut counts = vec![0; functions];
    for vm in 0..host.vm_count() {
        for (i, count) in (0..).zip(counts.iter_mut()) {
            *count += read_export(host, vm, &profile::counter_export(i))?;
        }
    }
    Ok(counts)
}

/// Hostcalls per request over all its callbacks, by import, most frequent first.
pub fn total_calls(per_callback: &[CallbackCalls]) -> Vec<(String, f64)> {
    let mut total: BTreeMap<&str, f64> = BTreeMap::new();
    for (_, calls) in per_callback {
        for (import, n) in calls {
            *total.entry(import).or_default() += n;
        }
    }
    let mut total: Vec<(String, f64)> = total
        .into_iter()
        .map(|(import, n)| (import.to_owned(), n))
        .collect();
    total.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    total
}

/// The backend counts every fuel and memory figure is given for.
pub const BACKENDS: [usize; 3] = [2, 100, 1_000];

/// One module's figures per request in one routing mode, 2 backends.
#[derive(Clone, Debug)]
pub struct PerRequest {
    /// Fuel per request, in all and per callback.
    pub fuel: RequestFuel,
    /// Hostcalls per request in each callback.
    pub hostcalls: Vec<CallbackCalls>,
}

/// Every figure from the host.
#[derive(Clone, Debug)]
pub struct HostFigures {
    /// upcheck's fuel per request in cluster routing, by [`BACKENDS`].
    pub requests: Vec<RequestFuel>,
    /// upcheck per request with the deployed configuration (outlier detection on), 2 backends,
    /// in cluster routing, then in host routing.
    pub routed: [PerRequest; 2],
    /// upcheck per request with the deployed configuration and outlier detection off, 2
    /// backends, cluster routing: the request path as it was before detection.
    pub detection_off: RequestFuel,
    /// The floor per request (2 backends; it routes every request to one).
    pub floor: PerRequest,
    /// Where upcheck's instructions per request go, function by function, in cluster routing
    /// then in host routing (deployed configuration, 2 backends).
    pub functions: [Vec<Spent>; 2],
    /// upcheck's probing fuel, by [`BACKENDS`].
    pub probes: Vec<ProbeFuel>,
    /// upcheck's memory runs, by [`BACKENDS`]; none when not asked for.
    pub memory: Vec<MemoryRun>,
    /// How long measuring all this took.
    pub elapsed: Duration,
}

/// Measures every host figure for `upcheck` (and its copy `named` with function names) and
/// `floor` (the memory runs, the long part, only with
/// `memory`, at the effort's counts), one thread per backend count, each at the lowest CPU
/// priority so that Envoys running meanwhile are not slowed down.
pub fn figures(
    upcheck: &[u8],
    floor: &[u8],
    named: &[u8],
    memory: Option<[(u64, u64); 3]>,
) -> Result<HostFigures> {
    let started = std::time::Instant::now();
    let instrumented = instrument::instrument(upcheck)?;
    let per_count = std::thread::scope(|scope| {
        let threads: Vec<_> = BACKENDS
            .into_iter()
            .zip(memory.map_or([None; 3], |runs| runs.map(Some)))
            .map(|(backends, run)| {
                let instrumented = &instrumented;
                scope.spawn(move || {
                    lowest_priority();
                    let config = fleet(backends, "10s", "5s");
                    anyhow::Ok((
                        request_fuel(upcheck, backends, &config, Routing::Cluster)?,
                        probe_fuel(upcheck, backends)?,
                        run.map(|(requests, rounds)| {
                            memory_run(instrumented, backends, requests, rounds)
                        })
                        .transpose()?,
                    ))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .map_err(|_| anyhow::anyhow!("a host thread panicked"))?
            })
            .collect::<Result<Vec<_>>>()
    })?;
    let deployed = crate::deployed_config().to_string();
    let per_request = |routing: Routing| -> Result<PerRequest> {
        let config = routing.config(&deployed)?;
        Ok(PerRequest {
            fuel: request_fuel(upcheck, 2, &config, routing)?,
            hostcalls: hostcalls_per_request(&instrumented, 2, &config, routing)?,
        })
    };
    let mut figures = HostFigures {
        requests: Vec::new(),
        routed: [per_request(Routing::Cluster)?, per_request(Routing::Host)?],
        detection_off: request_fuel(upcheck, 2, &detection_off(&deployed)?, Routing::Cluster)?,
        floor: PerRequest {
            fuel: request_fuel(floor, 2, "{}", Routing::Cluster)?,
            hostcalls: hostcalls_per_request(
                &instrument::instrument(floor)?,
                2,
                "{}",
                Routing::Cluster,
            )?,
        },
        functions: [
            per_function(
                named,
                &Routing::Cluster.config(&deployed)?,
                Routing::Cluster,
            )?,
            per_function(named, &Routing::Host.config(&deployed)?, Routing::Host)?,
        ],
        probes: Vec::new(),
        memory: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for (requests, probes, memory) in per_count {
        figures.requests.push(requests);
        figures.probes.push(probes);
        figures.memory.extend(memory);
    }
    figures.elapsed = started.elapsed();
    Ok(figures)
}

/// `config` with `health_checks.outlier.enabled` false.
fn detection_off(config: &str) -> Result<String> {
    let mut config: serde_json::Value = serde_json::from_str(config)?;
    config["health_checks"]["outlier"] = serde_json::json!({"enabled": false});
    Ok(config.to_string())
}

/// Gives the calling thread the lowest CPU priority (nice 19; on Linux, per thread).
fn lowest_priority() {
    // SAFETY: setpriority only reads its arguments; `0` is the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
}
