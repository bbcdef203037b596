//! Closed-loop load with wrk (Debian's package), and what it printed.
//!
//! wrk is a C load generator that keeps a fixed number of connections busy; one wrk thread on one
//! core drives far more than one Envoy worker serves (the bench checks this against the upstream
//! alone), so the figures are Envoy's, not wrk's.

use anyhow::{bail, Context, Result};
use std::time::Duration;
use tokio::process::Command;

/// How wrk is run.
#[derive(Clone, Copy, Debug)]
pub struct Wrk {
    /// wrk threads (`-t`).
    pub threads: u32,
    /// Open connections (`-c`).
    pub connections: u32,
    /// The core it is pinned to, if any.
    pub cpu: Option<usize>,
}

/// What one wrk run measured.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// Requests per second.
    pub rate: f64,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Responses other than 2xx/3xx, and socket errors.
    pub errors: u64,
}

impl Wrk {
    /// Loads `url` for `duration`.
    pub async fn run(&self, url: &str, duration: Duration) -> Result<Run> {
        let mut command = match self.cpu {
            Some(cpu) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", &cpu.to_string(), "wrk"]);
                taskset
            }
            None => Command::new("wrk"),
        };
        let output = command
            .args(["-t", &self.threads.to_string()])
            .args(["-c", &self.connections.to_string()])
            .args(["-d", &format!("{}s", duration.as_secs().max(1))])
            .arg("--latency")
            .arg(url)
            .output()
            .await
            .context("cannot run wrk (apt-get install wrk)")?;
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "wrk failed ({}): {text}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        parse(&text).with_context(|| format!("unexpected wrk output:\n{text}"))
    }
}

/// Reads wrk's `--latency` report.
fn parse(text: &str) -> Option<Run> {
    let field = |prefix: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix).map(str::trim))
    };
    let errors = |prefix: &str| -> u64 {
        // "Socket errors: connect 0, read 0, write 0, timeout 0" or "Non-2xx or 3xx responses: 12"
        field(prefix).map_or(0, |rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse::<u64>().ok())
                .sum()
        })
    };
    Some(Run {
        rate: field("Requests/sec:")?.parse().ok()?,
        p50: duration(field("50%")?)?,
        p99: duration(field("99%")?)?,
        errors: errors("Non-2xx or 3xx responses:") + errors("Socket errors:"),
    })
}

/// wrk's durations: `812.00us`, `1.20ms`, `2.00s`.
fn duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let seconds = match unit {
        "us" => value / 1e6,
        "ms" => value / 1e3,
        "s" => value,
        "m" => value * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latency_report_reads_as_rate_percentiles_and_errors() {
        let report = "Running 5s test @ http://127.0.0.1:1/\n  1 threads and 8 connections\n  \
            Latency Distribution\n     50%  412.00us\n     75%  500.00us\n     90%    1.01ms\n     \
            99%    1.20ms\n  100 requests in 5.00s, 1.00MB read\n  Non-2xx or 3xx responses: 3\n\
            Requests/sec:  20000.50\nTransfer/sec:      2.00MB\n";
        let run = parse(report).unwrap();
        assert_eq!(run.rate, 20000.5);
        assert_eq!(run.p50, Duration::from_micros(412));
        assert_eq!(run.p99, Duration::from_micros(1200));
        assert_eq!(run.errors, 3);
    }
}
