//! The machine a run was made on, and how busy its CPUs and processes were: the figures only mean
//! something next to the machine line, and "Envoy was the bottleneck" is a claim to check.

use anyhow::{Context, Result};
use std::time::Duration;

/// `nproc`, the CPU model and the kernel, as one line.
pub fn line() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_owned())
        .unwrap_or_else(|_| "unknown kernel".to_owned());
    format!("nproc {cpus}, {model}, Linux {kernel}")
}

/// Clock ticks per second of `/proc` times (`getconf CLK_TCK`; 100 on every Linux in practice).
fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU time (user + system) process `pid` has used, all its threads.
pub fn cpu_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces; the fields after its closing parenthesis do not.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("unexpected /proc/PID/stat")?
        .1
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<f64>().ok())
        .sum();
    Ok(Duration::from_secs_f64(ticks / ticks_per_second()))
}

/// Resident memory of process `pid` (`VmRSS` in `/proc/PID/status`), in bytes.
pub fn resident(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kb| kb.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .context("no VmRSS in /proc/PID/status")
}

/// CPU time of each thread of process `pid` whose name starts with `prefix` (Envoy names its
/// workers `wrk:worker_N`), from `/proc/PID/task/*/schedstat`, in nanoseconds (not ticks).
pub fn threads_cpu_time(pid: u32, prefix: &str) -> Result<Vec<Duration>> {
    let mut times = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let task = task?.path();
        if !std::fs::read_to_string(task.join("comm"))?.starts_with(prefix) {
            continue;
        }
        let schedstat = std::fs::read_to_string(task.join("schedstat"))?;
        let on_cpu: u64 = schedstat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse().ok())
            .with_context(|| format!("unexpected {}/schedstat", task.display()))?;
        times.push(Duration::from_nanos(on_cpu));
    }
    Ok(times)
}

/// Busy and total time of each CPU so far, in clock ticks, from `/proc/stat`.
#[derive(Clone, Debug)]
pub struct CpuTimes(Vec<(f64, f64)>);

impl CpuTimes {
    /// Reads them now.
    pub fn now() -> Result<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        let cpus = stat
            .lines()
            .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
            .map(|l| {
                let v: Vec<f64> = l
                    .split_whitespace()
                    .skip(1)
                    .filter_map(|x| x.parse().ok())
                    .collect();
                let total: f64 = v.iter().sum();
                // idle and iowait are the 4th and 5th values.
                let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
                (total - idle, total)
            })
            .collect();
        Ok(CpuTimes(cpus))
    }

    /// Per CPU, the busy share of the time since `earlier` (0..=1).
    pub fn busy_since(&self, earlier: &CpuTimes) -> Vec<f64> {
        self.0
            .iter()
            .zip(&earlier.0)
            .map(|((busy, total), (busy0, total0))| (busy - busy0) / (total - total0).max(1.0))
            .collect()
    }
}
