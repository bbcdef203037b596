//! gRPC user traffic at a fixed rate, and what the users saw: [`crate::replay`] for gRPC.
//!
//! A gRPC user does not see an HTTP status: a call fails with a `grpc-status` that may come in
//! the one header block of a trailers-only answer, in trailers after an answer of HTTP 200, or
//! from the client itself when the connection fails. So each call is reported by its gRPC code,
//! transport failures counted as `UNAVAILABLE` as gRPC clients report them, with where the code
//! came from, which backend answered ([`NAME_HEADER`]) and how long it took; the summary counts
//! calls, failures, codes, backends and calls slower than 1 s.
//!
//! The calls are unary calls of the fake backends' test service ([`ECHO_CALL`]) to `http://ADDR`
//! over HTTP/2 in plaintext (a backend, or later Envoy's listener), on one connection unless
//! asked otherwise. They go out on a fixed schedule (open loop, as in [`crate::replay`]), each
//! with its own deadline (sent as `grpc-timeout` and kept by the client), so a run is bounded by
//! `duration + deadline` whatever the other end does, and sends `rate × duration` calls.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::body::Body;
use tonic::codegen::http::{self, uri::PathAndQuery};
use tonic::codegen::Service;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

use crate::grpc_upstream::{EchoReply, EchoRequest, ECHO_CALL, NAME_HEADER};

/// A load run: `rate` unary calls a second to `url` for `duration`.
#[derive(Clone, Debug)]
pub struct GrpcReplay {
    url: String,
    rate: u32,
    duration: Duration,
    deadline: Duration,
    fresh_connections: bool,
}

/// What one user saw of one call.
#[derive(Clone, Debug)]
pub struct GrpcCall {
    /// When it was sent, from the start of the run.
    pub sent: Duration,
    /// How long until its outcome was known.
    pub latency: Duration,
    /// Its gRPC status code: OK, the code answered, `UNAVAILABLE` for a transport failure (the
    /// connection refused, reset or closed mid-call), `DEADLINE_EXCEEDED` past its deadline.
    pub code: Code,
    /// The status message, or what broke.
    pub message: String,
    /// Whether the code was answered by the other end (a backend, or a proxy's own answer);
    /// false for a transport failure or the client's own deadline.
    pub answered: bool,
    /// Whether the answer was trailers-only: `grpc-status` in its one header block.
    pub trailers_only: bool,
    /// The backend that answered ([`NAME_HEADER`] of the answer's headers), if one did.
    pub backend: Option<String>,
}

impl GrpcCall {
    /// Whether the user saw a failure: any code but OK.
    pub fn is_failure(&self) -> bool {
        self.code != Code::Ok
    }
}

/// Every call of a run, in the order they were sent.
#[derive(Clone, Debug)]
pub struct GrpcReport {
    /// The calls, by `sent`.
    pub samples: Vec<GrpcCall>,
}

impl GrpcReplay {
    /// `rate` calls a second to `url` (`http://ADDR`) for `duration`, all on one connection,
    /// each with a deadline of 2 s.
    pub fn new(url: impl Into<String>, rate: u32, duration: Duration) -> Self {
        GrpcReplay {
            url: url.into(),
            rate,
            duration,
            deadline: Duration::from_secs(2),
            fresh_connections: false,
        }
    }

    /// Sets each call's deadline (2 s unless set).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Opens a new connection for every call, as many separate users do, instead of sending
    /// every call on one HTTP/2 connection, which a proxy keeps on one of its workers.
    pub fn connection_per_call(mut self) -> Self {
        self.fresh_connections = true;
        self
    }

    /// How many calls a run sends.
    pub fn count(&self) -> u64 {
        (self.duration.as_secs_f64() * f64::from(self.rate)).round() as u64
    }

    /// Sends every call on schedule from now and waits for all outcomes. An error only if `url`
    /// is not one to connect to.
    pub async fn run(&self) -> anyhow::Result<GrpcReport> {
        self.run_from(Instant::now()).await
    }

    /// Sends every call on schedule from `start`, the origin of the report's times, and waits
    /// for all outcomes; see [`crate::replay::Replay::run_from`].
    pub async fn run_from(&self, start: Instant) -> anyhow::Result<GrpcReport> {
        let endpoint = endpoint(&self.url)?;
        let shared = endpoint.connect_lazy();
        let mut calls = JoinSet::new();
        for i in 0..self.count() {
            let due = Duration::from_secs_f64(i as f64 / f64::from(self.rate.max(1)));
            tokio::time::sleep_until(start + due).await;
            let channel = if self.fresh_connections {
                endpoint.connect_lazy()
            } else {
                shared.clone()
            };
            let deadline = self.deadline;
            calls.spawn(async move {
                let sent = start.elapsed();
                let mut call = call(channel, deadline).await;
                call.sent = sent;
                call
            });
        }
        let mut samples = calls.join_all().await;
        samples.sort_by_key(|call| call.sent);
        Ok(GrpcReport { samples })
    }
}

/// One call to `url` (`http://ADDR`) on a connection of its own, with `deadline`. An error only
/// if `url` is not one to connect to.
pub async fn call_once(url: &str, deadline: Duration) -> anyhow::Result<GrpcCall> {
    Ok(call(endpoint(url)?.connect_lazy(), deadline).await)
}

fn endpoint(url: &str) -> anyhow::Result<Endpoint> {
    Endpoint::from_shared(url.to_owned()).with_context(|| format!("not a URL to call: {url}"))
}

/// One call of the test service on `channel`, timed from now.
async fn call(channel: Channel, deadline: Duration) -> GrpcCall {
    let started = Instant::now();
    let head = Arc::new(Mutex::new(Head::default()));
    let mut grpc = tonic::client::Grpc::new(Observed {
        channel,
        head: head.clone(),
    });
    let mut request = tonic::Request::new(EchoRequest {
        text: "hello".to_owned(),
    });
    request.set_timeout(deadline);
    let attempt = async {
        grpc.ready()
            .await
            .map_err(|e| Status::from_error(Box::new(e)))?;
        let codec = ProstCodec::<EchoRequest, EchoReply>::default();
        grpc.unary(request, PathAndQuery::from_static(ECHO_CALL), codec)
            .await
    };
    // The channel keeps the deadline too, until the answer's headers (tonic's own timeout,
    // which it reports as CANCELLED); this one covers the whole call.
    let outcome = tokio::time::timeout(deadline, attempt).await;
    let latency = started.elapsed();
    let head = lock(&head).clone();
    let past_deadline = || {
        (
            Code::DeadlineExceeded,
            format!("no answer within {deadline:?}"),
            false,
        )
    };
    let (code, message, answered) = match outcome {
        Err(_) => past_deadline(),
        Ok(Ok(_)) => (Code::Ok, String::new(), true),
        Ok(Err(status)) if caused_by::<tonic::TimeoutExpired>(&status) => past_deadline(),
        // A status the client made up from a failed transport carries the error as its source;
        // one answered does not.
        Ok(Err(status)) if std::error::Error::source(&status).is_some() => {
            (Code::Unavailable, failure_text(&status), false)
        }
        Ok(Err(status)) => (status.code(), status.message().to_owned(), true),
    };
    GrpcCall {
        sent: Duration::ZERO,
        latency,
        code,
        message,
        answered,
        trailers_only: head.trailers_only,
        backend: head.backend,
    }
}

/// Whether an error of type `E` is among the causes of `status`.
fn caused_by<E: std::error::Error + 'static>(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        if cause.is::<E>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// What a status made up by the client says, with the errors that caused it.
fn failure_text(status: &Status) -> String {
    let mut text = format!("{}: {}", code_name(status.code()), status.message());
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

/// What the answer's header block said, as [`Observed`] saw it.
#[derive(Clone, Debug, Default)]
struct Head {
    backend: Option<String>,
    trailers_only: bool,
}

fn lock(head: &Mutex<Head>) -> std::sync::MutexGuard<'_, Head> {
    head.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A channel that notes what the answer's header block said, which tonic's client keeps from
/// its caller when the call fails: the backend's name and whether `grpc-status` was there.
#[derive(Clone)]
struct Observed {
    channel: Channel,
    head: Arc<Mutex<Head>>,
}

type ResponseFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl Service<http::Request<Body>> for Observed {
    type Response = http::Response<Body>;
    type Error = tonic::transport::Error;
    type Future = ResponseFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let answer = self.channel.call(request);
        let head = self.head.clone();
        Box::pin(async move {
            let response = answer.await?;
            let headers = response.headers();
            *lock(&head) = Head {
                backend: headers
                    .get(NAME_HEADER)
                    .and_then(|name| name.to_str().ok())
                    .map(str::to_owned),
                trailers_only: headers.contains_key(Status::GRPC_STATUS),
            };
            Ok(response)
        })
    }
}

/// The canonical name of a gRPC status code, as the protocol spells it: `OK`, `UNAVAILABLE`.
pub fn code_name(code: Code) -> &'static str {
    upcheck_policy::grpc::status::Code::of(u32::try_from(code as i32).unwrap_or(2)).name()
}

impl GrpcReport {
    /// How many calls were sent.
    pub fn calls(&self) -> usize {
        self.samples.len()
    }

    /// How many of them failed (any code but OK).
    pub fn failed(&self) -> usize {
        self.samples.iter().filter(|c| c.is_failure()).count()
    }

    /// Calls that took longer than `slow`, failed or not.
    pub fn slower_than(&self, slow: Duration) -> usize {
        self.samples.iter().filter(|c| c.latency > slow).count()
    }

    /// How many calls ended with each code, by name: `{"OK": 38, "UNAVAILABLE": 2}`.
    pub fn by_code(&self) -> BTreeMap<&'static str, usize> {
        let mut codes = BTreeMap::new();
        for call in &self.samples {
            *codes.entry(code_name(call.code)).or_default() += 1;
        }
        codes
    }

    /// How many calls each backend answered, failed or not; `-` for calls no backend answered.
    pub fn by_backend(&self) -> BTreeMap<String, usize> {
        let mut backends = BTreeMap::new();
        for call in &self.samples {
            let backend = call.backend.clone().unwrap_or_else(|| "-".to_owned());
            *backends.entry(backend).or_default() += 1;
        }
        backends
    }

    /// The latency below which `percent` % of all calls completed (nearest rank).
    pub fn latency_percentile(&self, percent: f64) -> Duration {
        crate::replay::percentile(self.samples.iter().map(|c| c.latency), percent)
    }
}

/// The one summary line:
/// `calls=40 failed=2 slower_than_1s=0 p50=1.2ms p99=3.4ms codes=OK:38,UNAVAILABLE:2 backends=app1:40`.
impl fmt::Display for GrpcReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| format!("{:.1}ms", d.as_secs_f64() * 1e3);
        let join = |counts: Vec<String>| counts.join(",");
        write!(
            f,
            "calls={} failed={} slower_than_1s={} p50={} p99={} codes={} backends={}",
            self.calls(),
            self.failed(),
            self.slower_than(Duration::from_secs(1)),
            ms(self.latency_percentile(50.0)),
            ms(self.latency_percentile(99.0)),
            join(
                self.by_code()
                    .iter()
                    .map(|(c, n)| format!("{c}:{n}"))
                    .collect()
            ),
            join(
                self.by_backend()
                    .iter()
                    .map(|(b, n)| format!("{b}:{n}"))
                    .collect()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(latency_ms: u64, code: Code, backend: Option<&str>) -> GrpcCall {
        GrpcCall {
            sent: Duration::ZERO,
            latency: Duration::from_millis(latency_ms),
            code,
            message: String::new(),
            answered: backend.is_some(),
            trailers_only: code != Code::Ok,
            backend: backend.map(str::to_owned),
        }
    }

    #[test]
    fn the_summary_counts_calls_failures_codes_backends_and_slow_calls() {
        let report = GrpcReport {
            samples: vec![
                sample(1, Code::Ok, Some("app1")),
                sample(2, Code::Unavailable, Some("app2")),
                sample(1500, Code::DeadlineExceeded, None),
                sample(4, Code::Ok, Some("app1")),
            ],
        };
        assert_eq!(
            report.to_string(),
            "calls=4 failed=2 slower_than_1s=1 p50=2.0ms p99=1500.0ms \
             codes=DEADLINE_EXCEEDED:1,OK:2,UNAVAILABLE:1 backends=-:1,app1:2,app2:1"
        );
    }

    #[test]
    fn an_empty_run_summarises_without_panicking() {
        let report = GrpcReport { samples: vec![] };
        assert_eq!(
            report.to_string(),
            "calls=0 failed=0 slower_than_1s=0 p50=0.0ms p99=0.0ms codes= backends="
        );
    }

    #[test]
    fn a_run_sends_rate_times_duration_calls() {
        let replay = GrpcReplay::new("http://127.0.0.1:1", 20, Duration::from_secs(2));
        assert_eq!(replay.count(), 40);
    }

    #[test]
    fn every_code_has_its_protocol_name() {
        assert_eq!(code_name(Code::from(14)), "UNAVAILABLE");
        assert_eq!(code_name(Code::from(16)), "UNAUTHENTICATED");
        assert_eq!(code_name(Code::from(0)), "OK");
    }
}
