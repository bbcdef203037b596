//! User traffic at a fixed rate, and what the users saw.
//!
//! The incident was measured as "N of M user requests failed", so that is what a replay reports.
//! Requests go out on a fixed schedule (open loop: a slow answer does not slow the next request
//! down, as real users do not wait for each other), each with its own timeout, so a run is bounded
//! by `duration + timeout` whatever the backends do.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

/// A load run: `rate` requests per second to `url` for `duration`.
#[derive(Clone, Debug)]
pub struct Replay {
    url: String,
    rate: u32,
    duration: Duration,
    timeout: Duration,
    method: reqwest::Method,
    headers: Vec<(String, String)>,
    fresh_connections: bool,
}

/// What one user saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A response with this status.
    Status(u16),
    /// No complete response within the timeout.
    Timeout,
    /// The connection failed or broke; the text says how.
    Error(String),
}

impl Outcome {
    /// Whether a user would call it an error: anything but a 2xx or 3xx response.
    pub fn is_failure(&self) -> bool {
        !matches!(self, Outcome::Status(200..=399))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Status(status) => write!(f, "{status}"),
            Outcome::Timeout => write!(f, "timeout"),
            Outcome::Error(_) => write!(f, "error"),
        }
    }
}

/// One request of a run.
#[derive(Clone, Debug)]
pub struct Sample {
    /// When it was sent, from the start of the run.
    pub sent: Duration,
    /// How long until its outcome was known.
    pub latency: Duration,
    /// What the user saw.
    pub outcome: Outcome,
}

/// Every request of a run, in the order they were sent.
#[derive(Clone, Debug)]
pub struct Report {
    /// The samples, by `sent`.
    pub samples: Vec<Sample>,
}

impl Replay {
    /// `rate` GET requests per second to `url` for `duration`, each timing out after 2 s.
    pub fn new(url: impl Into<String>, rate: u32, duration: Duration) -> Self {
        Replay {
            url: url.into(),
            rate,
            duration,
            timeout: Duration::from_secs(2),
            method: reqwest::Method::GET,
            headers: Vec::new(),
            fresh_connections: false,
        }
    }

    /// Opens a new connection for every request, as many separate users do, instead of reusing
    /// idle ones. A proxy spreads connections over its workers, so this is how traffic reaches
    /// every worker; over kept-alive connections a light load stays on one or two.
    pub fn connection_per_request(mut self) -> Self {
        self.fresh_connections = true;
        self
    }

    /// Sets how long a user waits for a complete response.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends every request with `method` (without a body) instead of GET.
    pub fn method(mut self, method: reqwest::Method) -> Self {
        self.method = method;
        self
    }

    /// Adds a request header to every request.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// How many requests a run sends.
    pub fn count(&self) -> u64 {
        (self.duration.as_secs_f64() * f64::from(self.rate)).round() as u64
    }

    /// Sends every request on schedule from now and waits for all outcomes.
    pub async fn run(&self) -> Result<Report, reqwest::Error> {
        self.run_from(Instant::now()).await
    }

    /// Sends every request on schedule from `start`, the origin of the report's times, and waits
    /// for all outcomes. A test that times its own events from `start` reads them on the same
    /// clock as the samples, however late this task began.
    pub async fn run_from(&self, start: Instant) -> Result<Report, reqwest::Error> {
        // Never through a proxy from the environment: the targets are on this machine.
        let mut client = reqwest::Client::builder().no_proxy().timeout(self.timeout);
        if self.fresh_connections {
            client = client.pool_max_idle_per_host(0);
        }
        let client = client.build()?;
        let mut requests = JoinSet::new();
        for i in 0..self.count() {
            let due = Duration::from_secs_f64(i as f64 / f64::from(self.rate.max(1)));
            tokio::time::sleep_until(start + due).await;
            let mut request = client.request(self.method.clone(), &self.url);
            for (name, value) in &self.headers {
                request = request.header(name, value);
            }
            requests.spawn(async move {
                let sent = start.elapsed();
                let outcome = match request.send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        match response.bytes().await {
                            Ok(_) => Outcome::Status(status),
                            Err(e) => failure(e),
                        }
                    }
                    Err(e) => failure(e),
                };
                Sample {
                    sent,
                    latency: start.elapsed() - sent,
                    outcome,
                }
            });
        }
        let mut samples = requests.join_all().await;
        samples.sort_by_key(|sample| sample.sent);
        Ok(Report { samples })
    }
}

fn failure(e: reqwest::Error) -> Outcome {
    if e.is_timeout() {
        Outcome::Timeout
    } else {
        // The source chain says what broke (refused, reset, closed before the response).
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        Outcome::Error(text)
    }
}

impl Report {
    /// How many requests were sent.
    pub fn requests(&self) -> usize {
        self.samples.len()
    }

    /// Requests that took longer than `slow`, failed or not.
    pub fn slower_than(&self, slow: Duration) -> usize {
        self.samples.iter().filter(|s| s.latency > slow).count()
    }

    /// How many of them failed (see [`Outcome::is_failure`]).
    pub fn failures(&self) -> usize {
        self.samples
            .iter()
            .filter(|s| s.outcome.is_failure())
            .count()
    }

    /// The requests sent within `sent` (from the start of the run), as a report of their own.
    pub fn sent_within(&self, sent: std::ops::Range<Duration>) -> Report {
        Report {
            samples: self
                .samples
                .iter()
                .filter(|s| sent.contains(&s.sent))
                .cloned()
                .collect(),
        }
    }

    /// How many failed requests were sent at or after `from` (from the start of the run).
    pub fn failures_sent_from(&self, from: Duration) -> usize {
        self.samples
            .iter()
            .filter(|s| s.sent >= from && s.outcome.is_failure())
            .count()
    }

    /// How many failed requests were sent after the `n`th failed answer (a status, in the order
    /// the answers came back) had reached its user; 0 when fewer than `n` failed so.
    ///
    /// A backend the filter takes out at its `n`th failure gets no request sent after that
    /// answer, however slow the machine: the filter counts a failure, and tells every worker,
    /// before Envoy forwards the answer. Requests already on their way may still fail, as many as
    /// were in flight; a bound on the total would have to guess that number. A user's own timeout
    /// or broken connection never passed through the filter, so it does not set the instant.
    pub fn failures_after_nth_answered(&self, n: usize) -> usize {
        let mut answered: Vec<Duration> = self
            .samples
            .iter()
            .filter(|s| s.outcome.is_failure() && matches!(s.outcome, Outcome::Status(_)))
            .map(|s| s.sent + s.latency)
            .collect();
        answered.sort();
        let Some(out) = n.checked_sub(1).and_then(|i| answered.get(i)) else {
            return 0;
        };
        self.failures_sent_from(*out + Duration::from_nanos(1))
    }

    /// When the last failed request was sent, from the start of the run.
    pub fn last_failure(&self) -> Option<Duration> {
        self.samples
            .iter()
            .filter(|s| s.outcome.is_failure())
            .map(|s| s.sent)
            .max()
    }

    /// The latency below which `percent` % of all requests completed (nearest rank).
    pub fn latency_percentile(&self, percent: f64) -> Duration {
        percentile(self.samples.iter().map(|s| s.latency), percent)
    }

    /// How many requests ended in each outcome, e.g. `{"200": 790, "503": 10}`.
    pub fn outcomes(&self) -> BTreeMap<String, usize> {
        let mut outcomes = BTreeMap::new();
        for sample in &self.samples {
            *outcomes.entry(sample.outcome.to_string()).or_default() += 1;
        }
        outcomes
    }

    /// What users saw over time, one line each, in seconds from the start of the run: the
    /// scenario's `events` (what was done to the backends, measured from the same start) and
    /// every failed request (what it was, how long it took, and what broke when the connection
    /// did), in time order.
    pub fn timeline(&self, events: &[(&str, Duration)]) -> String {
        let mut lines: Vec<(Duration, String)> = events
            .iter()
            .map(|(event, at)| (*at, (*event).to_owned()))
            .collect();
        for sample in self.samples.iter().filter(|s| s.outcome.is_failure()) {
            let why = match &sample.outcome {
                Outcome::Error(text) => format!(": {text}"),
                _ => String::new(),
            };
            let line = format!(
                "user saw {} after {:.0} ms{why}",
                sample.outcome,
                sample.latency.as_secs_f64() * 1e3
            );
            lines.push((sample.sent, line));
        }
        lines.sort_by_key(|(at, _)| *at);
        lines
            .iter()
            .map(|(at, line)| format!("{:>7.3}s {line}", at.as_secs_f64()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Writes one line per request: `sent_ms,latency_ms,outcome,error`.
    pub fn write_csv(&self, path: &Path) -> io::Result<()> {
        let mut out = io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(out, "sent_ms,latency_ms,outcome,error")?;
        for sample in &self.samples {
            let error = match &sample.outcome {
                Outcome::Error(text) => text.replace('"', "'"),
                _ => String::new(),
            };
            writeln!(
                out,
                "{:.1},{:.1},{},\"{}\"",
                sample.sent.as_secs_f64() * 1e3,
                sample.latency.as_secs_f64() * 1e3,
                sample.outcome,
                error
            )?;
        }
        out.flush()
    }
}

/// The one summary line: `requests=400 failures=0 last_failure=- p50=1.2ms p99=3.4ms outcomes=200:400`.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| format!("{:.1}ms", d.as_secs_f64() * 1e3);
        let last = self
            .last_failure()
            .map_or_else(|| "-".to_owned(), |d| format!("{:.2}s", d.as_secs_f64()));
        let outcomes: Vec<_> = self
            .outcomes()
            .iter()
            .map(|(outcome, n)| format!("{outcome}:{n}"))
            .collect();
        write!(
            f,
            "requests={} failures={} last_failure={} p50={} p99={} outcomes={}",
            self.requests(),
            self.failures(),
            last,
            ms(self.latency_percentile(50.0)),
            ms(self.latency_percentile(99.0)),
            outcomes.join(",")
        )
    }
}

/// The `percent` percentile of `latencies` by the nearest rank (zero for none): a replay's, or a
/// gRPC replay's ([`crate::grpc_replay`]).
pub fn percentile(latencies: impl Iterator<Item = Duration>, percent: f64) -> Duration {
    let mut latencies: Vec<_> = latencies.collect();
    latencies.sort();
    let rank = (percent / 100.0 * latencies.len() as f64).ceil() as usize;
    latencies
        .get(rank.clamp(1, latencies.len().max(1)) - 1)
        .copied()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(sent_ms: u64, latency_ms: u64, outcome: Outcome) -> Sample {
        Sample {
            sent: Duration::from_millis(sent_ms),
            latency: Duration::from_millis(latency_ms),
            outcome,
        }
    }

    #[test]
    fn the_summary_counts_failures_and_says_when_the_last_one_was_sent() {
        let report = Report {
            samples: vec![
                sample(0, 1, Outcome::Status(200)),
                sample(25, 2, Outcome::Status(502)),
                sample(50, 500, Outcome::Timeout),
                sample(75, 4, Outcome::Status(301)),
            ],
        };
        assert_eq!(
            report.to_string(),
            "requests=4 failures=2 last_failure=0.05s p50=2.0ms p99=500.0ms \
             outcomes=200:1,301:1,502:1,timeout:1"
        );
    }

    #[test]
    fn the_timeline_puts_events_and_failures_in_time_order() {
        let report = Report {
            samples: vec![
                sample(0, 1, Outcome::Status(200)),
                sample(1250, 2, Outcome::Status(503)),
                sample(1500, 2000, Outcome::Timeout),
            ],
        };
        let events = [("app2 killed", Duration::from_millis(1200))];
        assert_eq!(
            report.timeline(&events),
            "  1.200s app2 killed\n  \
             1.250s user saw 503 after 2 ms\n  \
             1.500s user saw timeout after 2000 ms"
        );
    }

    #[test]
    fn failures_count_after_the_nth_failures_answer_in_the_order_answers_came_back() {
        let report = Report {
            samples: vec![
                // The first failure sent is the last to come back (at 400 ms).
                sample(0, 400, Outcome::Status(502)),
                sample(10, 5, Outcome::Status(502)),
                sample(20, 5, Outcome::Status(200)),
                // A user's own timeout, at 12 ms: counted, never the instant.
                sample(2, 10, Outcome::Timeout),
                // The second answered, at 35 ms: sent before it, after it.
                sample(30, 5, Outcome::Status(502)),
                sample(35, 1, Outcome::Status(502)),
                sample(40, 1, Outcome::Status(503)),
            ],
        };
        assert_eq!(report.failures_after_nth_answered(2), 1);
        assert_eq!(report.failures_after_nth_answered(1), 3);
        assert_eq!(report.failures_after_nth_answered(5), 0);
        assert_eq!(report.failures_after_nth_answered(6), 0);
        assert_eq!(report.failures_after_nth_answered(0), 0);
        let window = report.sent_within(Duration::from_millis(10)..Duration::from_millis(35));
        assert_eq!((window.requests(), window.failures()), (3, 2));
        assert_eq!(report.failures_sent_from(Duration::from_millis(2)), 5);
    }

    #[test]
    fn an_empty_run_summarises_without_panicking() {
        let report = Report { samples: vec![] };
        assert_eq!(
            report.to_string(),
            "requests=0 failures=0 last_failure=- p50=0.0ms p99=0.0ms outcomes="
        );
    }

    #[test]
    fn a_run_sends_rate_times_duration_requests() {
        let replay = Replay::new("http://127.0.0.1:1/", 40, Duration::from_secs(20));
        assert_eq!(replay.count(), 800);
    }
}
