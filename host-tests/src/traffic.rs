//! What the test sends and what the users saw: the request specifications, the loads, and the
//! record of each request with the summaries of a batch. Plain data, shared by the host that
//! fills the records in and the tests that read them.

use crate::abi::Headers;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// One user request to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestSpec {
    /// `:method`. Default `GET`.
    pub method: String,
    /// `:path`. Default `/`.
    pub path: String,
    /// `:authority`. Default `app.example.com`.
    pub authority: String,
    /// More request headers (a client-supplied routing header, for instance).
    pub headers: Headers,
    /// The client's address (`source.address`). Default a remote `203.0.113.7:50000`.
    pub source_address: String,
    /// The address the client connected to (`destination.address`). Default the proxy's
    /// public `198.51.100.1:8080`, the users' listener; another listener's address
    /// ([`crate::Host::listen`]) sends the request to that listener.
    pub destination_address: String,
    /// The client disconnects this long after sending, if it has no answer yet.
    pub give_up_after: Option<Duration>,
}

impl Default for RequestSpec {
    fn default() -> Self {
        RequestSpec {
            method: "GET".to_string(),
            path: "/".to_string(),
            authority: "app.example.com".to_string(),
            headers: Headers::new(),
            source_address: "203.0.113.7:50000".to_string(),
            destination_address: "198.51.100.1:8080".to_string(),
            give_up_after: None,
        }
    }
}

/// Requests at a fixed rate, round robin over the running workers.
#[derive(Clone, Debug)]
pub struct Load {
    /// Requests per second.
    pub rate: u32,
    /// How long to keep sending.
    pub duration: Duration,
    /// What every request looks like.
    pub request: RequestSpec,
}

/// What the user saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not finished (still paused, or waiting beyond the drain limit).
    Pending,
    /// A response with this status (from a backend, from Envoy, or from the filter).
    Status(u16),
    /// The client gave up before any response.
    Disconnected,
    /// The filter reset the stream.
    Reset,
}

/// One request and what became of it. Times are virtual, since the host started.
#[derive(Clone, Debug)]
pub struct RequestRecord {
    /// What was sent.
    pub request: RequestSpec,
    /// When it was sent.
    pub sent: Duration,
    /// The worker VM that handled it (0 until it arrived).
    pub worker: usize,
    /// The cluster it was routed to, if any.
    pub upstream: Option<String>,
    /// When the route sent it there.
    pub routed: Option<Duration>,
    /// The route header as the filter left it, when the route sent it on.
    pub route_header: Option<String>,
    /// What the user saw.
    pub outcome: Outcome,
    /// When the user saw it.
    pub completed: Option<Duration>,
    /// Envoy response flags (`UF`, `UT`, `DC`, `NC` in [`crate::envoy`]).
    pub flags: u64,
    /// Envoy response code details.
    pub details: String,
    /// Fuel the filter spent on this request, over all its callbacks.
    pub fuel: u64,
    /// The response body the user got.
    pub body: Vec<u8>,
    /// The response headers the user got, after the filter.
    pub headers: Headers,
}

impl RequestRecord {
    /// The user-visible status, if a response came.
    pub fn status(&self) -> Option<u16> {
        match self.outcome {
            Outcome::Status(status) => Some(status),
            _ => None,
        }
    }

    /// A failure for the user: a 5xx, or no response at all.
    pub fn failed(&self) -> bool {
        !matches!(self.status(), Some(status) if status < 500)
    }
}

/// The requests of one batch, with summaries.
#[derive(Clone, Debug)]
pub struct Traffic {
    /// Every request, in sending order.
    pub requests: Vec<RequestRecord>,
}

impl Traffic {
    /// Number of requests.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether no request was sent.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// The requests that failed for the user.
    pub fn failures(&self) -> Vec<&RequestRecord> {
        self.requests.iter().filter(|r| r.failed()).collect()
    }

    /// Failed requests per cluster they were routed to (`-` when not routed).
    pub fn failures_by_upstream(&self) -> BTreeMap<String, usize> {
        count_by(self.failures().into_iter(), upstream_of)
    }

    /// Requests per cluster they were routed to (`-` when not routed).
    pub fn by_upstream(&self) -> BTreeMap<String, usize> {
        count_by(self.requests.iter(), upstream_of)
    }

    /// Requests per outcome: `200`, `503`, `disconnected`, `reset`, `pending`.
    pub fn outcomes(&self) -> BTreeMap<String, usize> {
        count_by(self.requests.iter(), |r| match r.outcome {
            Outcome::Status(status) => status.to_string(),
            Outcome::Disconnected => "disconnected".to_string(),
            Outcome::Reset => "reset".to_string(),
            Outcome::Pending => "pending".to_string(),
        })
    }

    /// When the last failing request was sent.
    pub fn last_failure_sent(&self) -> Option<Duration> {
        self.failures().iter().map(|r| r.sent).max()
    }

    /// Mean fuel the filter spent per request.
    pub fn mean_fuel(&self) -> u64 {
        let total: u64 = self.requests.iter().map(|r| r.fuel).sum();
        total / (self.requests.len().max(1) as u64)
    }
}

impl fmt::Display for Traffic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests, outcomes {:?}, by upstream {:?}, failures by upstream {:?}",
            self.len(),
            self.outcomes(),
            self.by_upstream(),
            self.failures_by_upstream()
        )?;
        if let Some(last) = self.last_failure_sent() {
            write!(f, ", last failure sent at {last:?}")?;
        }
        Ok(())
    }
}

fn upstream_of(record: &RequestRecord) -> String {
    record.upstream.clone().unwrap_or_else(|| "-".to_string())
}

fn count_by<'a>(
    records: impl Iterator<Item = &'a RequestRecord>,
    key: impl Fn(&RequestRecord) -> String,
) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for record in records {
        *counts.entry(key(record)).or_default() += 1;
    }
    counts
}
