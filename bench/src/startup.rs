//! Start-up: what loading the module costs Envoy (V8), next to the floor filter.
//!
//! Envoy compiles a module once per process, on the main thread (the "base" VM), then gives the
//! main thread and each worker a VM of its own made from that compiled module. So the cost has a
//! part paid once and a part paid per worker. Each setup (module × `--concurrency` 1 and 4) is
//! started as many times as the run's
//! [`Effort`](crate::effort::Effort) says, the setups taking turns, each Envoy alone, and three figures are
//! read per start:
//!
//! - wall time from the spawn to the admin `/ready` answering 200 (polled every 5 ms), when the
//!   listener is on the workers; the `wasm.envoy.wasm.runtime.v8.created` counter read right
//!   after shows every VM exists by then;
//! - Envoy's CPU time (all threads) at that moment, which on a shared machine says more than the
//!   wall time and, unlike it, adds up the workers that start in parallel;
//! - each worker thread's own CPU time at that moment (`/proc` schedstat, in nanoseconds): its
//!   VM made from the compiled module, started and configured, and the worker's own start;
//! - Envoy's resident memory at that moment: each VM is a V8 isolate with the module's code
//!   and its own linear memory, so the difference between 4 workers and 1 is what 3 VMs weigh;
//! - from Envoy's own log (the `wasm` component at debug), the time from `Base Wasm created` to
//!   the main thread's `Thread-Local Wasm created`: the base VM's load, compile and start, at the
//!   log's 1 ms resolution. Envoy has no statistic with a timing of VM creation.
//!
//! The per-worker cost is also derived from the process: the difference between 4 and 1 workers,
//! divided by 3. The backends do not exist (nothing listens on their ports): start-up does not
//! wait for them.

use crate::proxy::{Front, Proxy};
use anyhow::{Context, Result};
use std::path::Path;
use std::time::Duration;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::ports::free_addr;

/// The `--concurrency` values compared.
pub const WORKERS: [u32; 2] = [1, 4];

/// Envoy's count of VMs created (every runtime instance, the base VM's included).
const VMS_CREATED: &str = "wasm.envoy.wasm.runtime.v8.created";

/// One start of one setup.
#[derive(Clone, Copy, Debug)]
pub struct Start {
    /// Spawn to `/ready`.
    pub ready: Duration,
    /// Envoy's CPU time at `/ready`.
    pub cpu: Duration,
    /// The mean CPU time of a worker thread at `/ready`.
    pub worker_cpu: Duration,
    /// Envoy's resident memory at `/ready`, in bytes.
    pub resident: u64,
    /// The base VM's load, compile and start, from Envoy's log.
    pub compile: Duration,
    /// VMs created by `/ready`.
    pub vms: u64,
}

/// The starts of one module, by [`WORKERS`].
#[derive(Clone, Debug)]
pub struct ModuleStarts {
    /// Its label in the table.
    pub name: &'static str,
    /// The starts with 1 worker, then with 4.
    pub by_workers: [Vec<Start>; 2],
}

/// The floor's starts, then upcheck's.
#[derive(Clone, Debug)]
pub struct StartUp {
    /// The floor (its plugin configuration `{}`), then upcheck (the deployed configuration).
    pub modules: [ModuleStarts; 2],
}

/// Starts Envoy with the floor and with upcheck, at each of [`WORKERS`], `repeats` times.
pub async fn measure(
    envoy: &Path,
    upcheck: &Path,
    floor: &Path,
    out: &Path,
    repeats: usize,
) -> Result<StartUp> {
    let backends = vec![
        ("app1".to_owned(), free_addr()?),
        ("app2".to_owned(), free_addr()?),
    ];
    let fronts = [
        ("floor", floor, serde_json::json!({})),
        ("upcheck", upcheck, crate::deployed_config()),
    ]
    .map(|(name, module, config)| {
        (
            name,
            Front::Wasm {
                module: module.to_owned(),
                config,
                routing: Routing::Cluster,
            },
        )
    });
    let mut modules = fronts.clone().map(|(name, _)| ModuleStarts {
        name,
        by_workers: [Vec::new(), Vec::new()],
    });
    for _ in 0..repeats {
        for ((_, front), starts) in fronts.iter().zip(&mut modules) {
            for (workers, runs) in WORKERS.iter().zip(&mut starts.by_workers) {
                runs.push(start(envoy, front, &backends, *workers, out).await?);
            }
        }
    }
    Ok(StartUp { modules })
}

/// One start of Envoy with `workers` workers, stopped once measured.
async fn start(
    envoy: &Path,
    front: &Front,
    backends: &[(String, std::net::SocketAddr)],
    workers: u32,
    out: &Path,
) -> Result<Start> {
    let debug = ["--component-log-level", "wasm:debug"];
    let proxy = Proxy::start_with(envoy, front, backends, workers, None, out, &debug).await?;
    let (ready, cpu, threads, resident) = (
        proxy.ready_after(),
        proxy.cpu_time()?,
        proxy.workers_cpu_time()?,
        proxy.resident()?,
    );
    anyhow::ensure!(
        threads.len() == workers as usize,
        "{} worker threads in an Envoy with --concurrency {workers}",
        threads.len()
    );
    let vms = proxy.stat(VMS_CREATED).await?;
    let log = proxy.stop().await?;
    Ok(Start {
        ready,
        cpu,
        worker_cpu: threads.iter().sum::<Duration>() / workers,
        resident,
        compile: base_compile(&log)?,
        vms,
    })
}

/// From Envoy's log: the time from `Base Wasm created` to the first `Thread-Local Wasm created`
/// on the same thread (the main thread's VM, made once the base VM is compiled and started).
fn base_compile(log: &str) -> Result<Duration> {
    let lines: Vec<(u64, &str, &str)> = log.lines().filter_map(parse_line).collect();
    let (at, thread) = lines
        .iter()
        .find(|(_, _, message)| message.contains("Base Wasm created"))
        .map(|(at, thread, _)| (*at, *thread))
        .context("no `Base Wasm created` in Envoy's log")?;
    let main_vm = lines
        .iter()
        .find(|(ms, th, message)| {
            *ms >= at && *th == thread && message.contains("Thread-Local Wasm created")
        })
        .map(|(ms, _, _)| *ms)
        .context("no `Thread-Local Wasm created` on the main thread in Envoy's log")?;
    Ok(Duration::from_millis(main_vm - at))
}

/// An Envoy log line `[2026-11-30 14:24:19.697][21930][debug][wasm] …` as (milliseconds since
/// midnight, thread id, the rest).
fn parse_line(line: &str) -> Option<(u64, &str, &str)> {
    let (stamp, rest) = line.strip_prefix('[')?.split_once("][")?;
    let (thread, message) = rest.split_once(']')?;
    let (clock, millis) = stamp.split_once(' ')?.1.split_once('.')?;
    let seconds = clock.split(':').try_fold(0, |total, part| {
        Some(total * 60 + part.parse::<u64>().ok()?)
    })?;
    Some((
        seconds * 1000 + millis.parse::<u64>().ok()?,
        thread,
        message,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_compile_runs_to_the_main_threads_own_vm() {
        let log = "\
[2026-11-30 14:24:19.696][21930][info][config] loading 1 listener(s)
[2026-11-30 14:24:19.697][21930][debug][wasm] [wasm.cc:83] Base Wasm created 1 now active
[2026-11-30 14:24:19.800][21939][debug][wasm] [wasm.cc:101] Thread-Local Wasm created 3 now active
[2026-11-30 14:24:19.991][21930][debug][wasm] [wasm.cc:101] Thread-Local Wasm created 2 now active
";
        let compile = base_compile(log).unwrap();
        assert_eq!(compile.as_millis(), 294);
    }

    #[test]
    fn a_log_without_the_base_vm_is_an_error_naming_it() {
        let log = "[2026-11-30 14:24:19.696][21930][info][config] loading 1 listener(s)\n";
        let error = base_compile(log).unwrap_err().to_string();
        assert!(error.contains("Base Wasm created"), "{error}");
    }
}
