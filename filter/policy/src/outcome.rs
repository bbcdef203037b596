//! What a request's end means to each rule family, in one place both read.
//!
//! A request ends in a [`RequestOutcome`]: the backend answered, the proxy failed to reach it,
//! it is still waiting, it was retried elsewhere, the client left, or the proxy never sent it.
//! The passive checks ([`crate::passive`]) count some of those as failures
//! ([`RequestOutcome::failure`], by the configured statuses and latency); the outlier rules
//! ([`crate::outlier`]) count others ([`RequestOutcome::outlier_failure`]: any 5xx and every
//! proxy failure, as a [`FailureKind`]). Both families import this module and neither imports
//! the other for it.
//!
//! How a request ended is read from what the proxy reports ([`RequestOutcome::ended`]): its
//! status, and for a 5xx or no answer at all Envoy's response flags, which tell the proxy's own
//! failure to reach the backend, and the request it never sent, from the backend's own 5xx.

use crate::grpc::status::Code;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;
use upcheck_config::duration;
use upcheck_config::Passive;

/// How the proxy itself failed a request before the backend answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyFailure {
    /// The connection was refused or could not be made.
    Refused,
    /// The backend reset the connection or stream.
    Reset,
    /// The backend did not answer in time.
    Timeout,
}

/// How one real request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// The backend answered with this status after this long.
    Answered {
        /// The backend's own status; for a gRPC call, the one its code is judged as
        /// ([`crate::grpc::call`]).
        status: u16,
        /// Time from the request to the response headers (zero when not measured).
        latency: Duration,
        /// A gRPC call's code (`None` for an HTTP request): what the log and the page say.
        grpc: Option<Code>,
    },
    /// The proxy gave up on the backend.
    Failed(ProxyFailure),
    /// The request is still waiting for its answer after this long (see `unhealthy_latency`).
    StillWaiting(Duration),
    /// The proxy retried the request on another backend: this backend's attempt failed (how,
    /// the proxy does not say).
    RetriedElsewhere,
    /// The proxy sent the request to another backend after this attempt outlasted the per-try
    /// timeout upcheck set from its peers' latency ([`crate::retry`]): a slow attempt, maybe an
    /// ordinary slow page, so it is a failure for the outlier rules only, never toward
    /// `max_fails`.
    RetriedOnAdvice,
    /// The client went away first: says nothing about the backend.
    ClientGone,
    /// The proxy answered for itself and never sent the request: its circuit breaker was full
    /// (overflow) or it had no healthy host for the backend. Says nothing about the backend; a
    /// backend slow enough to fill the breaker is the outlier rules' business, by the latency of
    /// the requests it does answer.
    NotSent,
    /// The backend answered with the drain signal ([`crate::drain::SIGNAL_HEADER`]), whatever
    /// its status: it is going away, which is no failure.
    Drained,
}

/// Envoy's response flags (`response.flags`): the bits that say the backend failed, or that
/// the request never reached it.
pub mod response_flags {
    /// UH: no healthy host in the upstream cluster.
    pub const NO_HEALTHY_UPSTREAM: u64 = 1 << 1;
    /// UT: the upstream request timed out.
    pub const UPSTREAM_TIMEOUT: u64 = 1 << 2;
    /// UR: the upstream reset the stream.
    pub const UPSTREAM_RESET: u64 = 1 << 4;
    /// UF: the upstream connection failed.
    pub const UPSTREAM_CONNECT_FAILURE: u64 = 1 << 5;
    /// UC: the upstream connection was terminated.
    pub const UPSTREAM_TERMINATION: u64 = 1 << 6;
    /// UO: the upstream cluster's circuit breaker was full.
    pub const UPSTREAM_OVERFLOW: u64 = 1 << 7;
    /// SI: the stream idle timeout fired.
    pub const STREAM_IDLE_TIMEOUT: u64 = 1 << 16;
}

impl RequestOutcome {
    /// How a request ended, as the proxy tells it: the status of the response headers that
    /// reached the client (`None`: none did), how long they took (zero when not measured), and
    /// the proxy's response flags, read only where they matter. A status below 500 is the
    /// backend's answer. For a 5xx, or no answer at all, the flags tell the proxy's own failure
    /// to reach the backend (Envoy's "could not connect" 503) and the request it never sent
    /// (its circuit breaker full, or no healthy host) from the backend's own 5xx, or from a
    /// client that went away first.
    pub fn ended(status: Option<u16>, latency: Duration, flags: impl FnOnce() -> u64) -> Self {
        match status {
            Some(status) => RequestOutcome::answered(status, latency, None, flags),
            None => RequestOutcome::flagged(flags()).unwrap_or(RequestOutcome::ClientGone),
        }
    }

    /// How a gRPC call that ended with `code` went, as [`RequestOutcome::ended`] reads a
    /// status: the code judged as its HTTP status ([`crate::grpc::call`]). A proxy that could
    /// not reach the backend answers a gRPC client with a code of its own (`UNAVAILABLE`), so
    /// the flags are read for the codes judged as a 5xx.
    pub fn called(code: Code, latency: Duration, flags: impl FnOnce() -> u64) -> Self {
        RequestOutcome::answered(code.http_status(), latency, Some(code), flags)
    }

    /// An answer with `status` (a gRPC call's `grpc` code with it), or for a 5xx what the
    /// proxy's `flags` say happened instead.
    #[inline(always)]
    fn answered(
        status: u16,
        latency: Duration,
        grpc: Option<Code>,
        flags: impl FnOnce() -> u64,
    ) -> Self {
        let answered = RequestOutcome::Answered {
            status,
            latency,
            grpc,
        };
        match status < 500 {
            true => answered,
            false => RequestOutcome::flagged(flags()).unwrap_or(answered),
        }
    }

    /// This outcome, or [`RequestOutcome::Drained`] when the answer carried the drain signal
    /// (`signalled`): a backend that says it drains is taken at its word, whatever it answered.
    pub fn signalled(self, signalled: bool) -> Self {
        if signalled {
            RequestOutcome::Drained
        } else {
            self
        }
    }

    /// What Envoy's response `flags` say happened instead of the backend answering, if they
    /// say: a connection failure first, then a timeout, a reset, and a request never sent.
    pub fn flagged(flags: u64) -> Option<Self> {
        use response_flags::*;
        let failed = RequestOutcome::Failed;
        if flags & UPSTREAM_CONNECT_FAILURE != 0 {
            Some(failed(ProxyFailure::Refused))
        } else if flags & (UPSTREAM_TIMEOUT | STREAM_IDLE_TIMEOUT) != 0 {
            Some(failed(ProxyFailure::Timeout))
        } else if flags & (UPSTREAM_RESET | UPSTREAM_TERMINATION) != 0 {
            Some(failed(ProxyFailure::Reset))
        } else if flags & (UPSTREAM_OVERFLOW | NO_HEALTHY_UPSTREAM) != 0 {
            Some(RequestOutcome::NotSent)
        } else {
            None
        }
    }
}

/// The status code in a header value as a host reports it (`:status`): decimal digits, with an
/// optional `+` and whitespace around them, as `str::parse` reads them; none if it is not one.
/// Read from the bytes as the host handed them over, with no text made of them first: this runs
/// on every response, so the three digits every proxy sends are read in line, in a few
/// instructions, and any other spelling out of line.
#[inline(always)]
pub fn status_code(value: &[u8]) -> Option<u16> {
    if let [hundreds, tens, units] = *value {
        // A byte below '0' wraps to a large number, so one comparison tells a digit.
        let digit = |d: u8| u16::from(d).wrapping_sub(u16::from(b'0'));
        let (hundreds, tens, units) = (digit(hundreds), digit(tens), digit(units));
        if hundreds < 10 && tens < 10 && units < 10 {
            return Some(hundreds * 100 + tens * 10 + units);
        }
    }
    status_code_spelled_otherwise(value)
}

/// [`status_code`] of any value but three digits.
#[cold]
#[inline(never)]
fn status_code_spelled_otherwise(value: &[u8]) -> Option<u16> {
    let value = value.trim_ascii();
    let digits = value.strip_prefix(b"+").unwrap_or(value);
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u16, |code, digit| {
        let digit = digit.checked_sub(b'0').filter(|d| *d <= 9)?;
        code.checked_mul(10)?.checked_add(u16::from(digit))
    })
}

/// Why a request counted against its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure(RequestOutcome);

impl Failure {
    /// What it says something about ([`RequestOutcome::about`]).
    pub fn about(self) -> About {
        self.0.about()
    }
}

impl RequestOutcome {
    /// Whether this outcome counts against the backend, and why.
    pub fn failure(self, config: &Passive) -> Option<Failure> {
        let late = |latency: Duration| config.unhealthy_latency.is_some_and(|l| latency >= l);
        let counts = match self {
            RequestOutcome::Answered {
                status, latency, ..
            } => config.unhealthy_status.contains(status) || late(latency),
            RequestOutcome::Failed(_) | RequestOutcome::RetriedElsewhere => true,
            RequestOutcome::StillWaiting(waited) => late(waited),
            RequestOutcome::RetriedOnAdvice
            | RequestOutcome::ClientGone
            | RequestOutcome::NotSent
            | RequestOutcome::Drained => false,
        };
        counts.then_some(Failure(self))
    }

    /// Whether the outcome is a failure for the outlier rules, and how: any 5xx from the backend
    /// (500 included), a connection failure, a reset, a timeout, an attempt retried elsewhere.
    /// `None` for a success; a request still waiting or whose client left is not an outcome
    /// (see [`RequestOutcome::judged`]).
    pub fn outlier_failure(self) -> Option<FailureKind> {
        match self {
            RequestOutcome::Answered { status, grpc, .. } if status >= 500 => {
                Some(grpc.map_or(FailureKind::Status(status), FailureKind::Grpc))
            }
            RequestOutcome::Failed(failure) => Some(failure.into()),
            RequestOutcome::RetriedElsewhere | RequestOutcome::RetriedOnAdvice => {
                Some(FailureKind::Retried)
            }
            RequestOutcome::Answered { .. }
            | RequestOutcome::StillWaiting(_)
            | RequestOutcome::ClientGone
            | RequestOutcome::NotSent
            | RequestOutcome::Drained => None,
        }
    }

    /// What the outcome, as a failure, says something about: an answer is the backend's own,
    /// anything else may be the path's ([`About`]).
    pub fn about(self) -> About {
        match self {
            RequestOutcome::Answered { .. } | RequestOutcome::Drained => About::Backend,
            _ => About::Path,
        }
    }

    /// Whether the outcome says how the backend did, for the outlier rules: everything but a
    /// request still waiting, one whose client left first, one the proxy never sent and one
    /// answered by a backend that drains.
    pub fn judged(self) -> bool {
        !matches!(
            self,
            RequestOutcome::StillWaiting(_)
                | RequestOutcome::ClientGone
                | RequestOutcome::NotSent
                | RequestOutcome::Drained
        )
    }

    /// What the outcome says about whether anything is serving, if it says.
    pub fn contact(self) -> Option<Contact> {
        match self {
            RequestOutcome::Answered { .. } | RequestOutcome::Drained => Some(Contact::Reached),
            RequestOutcome::Failed(ProxyFailure::Refused) => Some(Contact::Refused),
            RequestOutcome::Failed(_) => Some(Contact::Reached),
            RequestOutcome::StillWaiting(_)
            | RequestOutcome::RetriedElsewhere
            | RequestOutcome::RetriedOnAdvice
            | RequestOutcome::ClientGone
            | RequestOutcome::NotSent => None,
        }
    }
}

/// What a request found of a backend: something serving, or nothing (the connection refused).
/// In the shared passive table: `Reached` and `Refused` are stored as 0 and 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Contact {
    /// Something accepted the connection.
    Reached,
    /// Nothing did: the connection was refused.
    Refused,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self.0 {
            // Latency is measured only when unhealthy_latency is set; zero means not measured.
            RequestOutcome::Answered {
                status,
                latency,
                grpc,
            } => {
                match grpc {
                    Some(code) => write!(f, "a call answered {code}")?,
                    None => write!(f, "a request answered {status}")?,
                }
                match latency.is_zero() {
                    true => Ok(()),
                    false => write!(f, " after {}", duration::display(latency)),
                }
            }
            RequestOutcome::Failed(ProxyFailure::Refused) => {
                f.write_str("a request found nothing serving (connection failed)")
            }
            RequestOutcome::Failed(ProxyFailure::Reset) => f.write_str("a request was reset"),
            RequestOutcome::Failed(ProxyFailure::Timeout) => f.write_str("a request timed out"),
            RequestOutcome::StillWaiting(waited) => write!(
                f,
                "a request is still unanswered after {}",
                duration::display(waited)
            ),
            RequestOutcome::RetriedElsewhere => {
                f.write_str("a request's attempt failed and was retried on another backend")
            }
            RequestOutcome::RetriedOnAdvice => f.write_str(
                "a request's attempt outlasted its per-try timeout and was sent to another backend",
            ),
            RequestOutcome::ClientGone => f.write_str("the client went away"),
            RequestOutcome::NotSent => f.write_str("the proxy never sent a request"),
            RequestOutcome::Drained => f.write_str("a request answered with the drain signal"),
        }
    }
}

/// What a failure says something about: the backend itself, wherever it is reached from (it
/// answered a 5xx), or this balancer's path to it (a refused or broken connection, a timeout, an
/// attempt the proxy gave up on), which another balancer need not share ([`crate::etcd`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum About {
    /// The backend answered for itself.
    Backend,
    /// Nothing says the backend answered: the path from here may be what failed.
    Path,
}

/// How a request failed, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum FailureKind {
    /// The backend answered with this 5xx status.
    Status(u16),
    /// A gRPC call ended with this code, judged as a 5xx ([`crate::grpc::call`]).
    Grpc(Code),
    /// The connection could not be made.
    ConnectionFailed,
    /// The backend reset the connection or stream.
    Reset,
    /// The backend did not answer in time.
    Timeout,
    /// The proxy retried the request on another backend (how this attempt failed, it does not
    /// say).
    Retried,
}

impl FailureKind {
    /// What it says something about: a 5xx the backend answered is about the backend; a
    /// connection that failed or broke, a timeout or an attempt the proxy repeated without
    /// saying why may be about the path.
    pub fn about(self) -> About {
        match self {
            FailureKind::Status(_) | FailureKind::Grpc(_) => About::Backend,
            _ => About::Path,
        }
    }
}

impl From<ProxyFailure> for FailureKind {
    fn from(failure: ProxyFailure) -> Self {
        match failure {
            ProxyFailure::Refused => FailureKind::ConnectionFailed,
            ProxyFailure::Reset => FailureKind::Reset,
            ProxyFailure::Timeout => FailureKind::Timeout,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            FailureKind::Status(status) => write!(f, "{status}"),
            FailureKind::Grpc(code) => write!(f, "{code}"),
            FailureKind::ConnectionFailed => f.write_str("connection failed"),
            FailureKind::Reset => f.write_str("reset"),
            FailureKind::Timeout => f.write_str("timeout"),
            FailureKind::Retried => f.write_str("retried elsewhere"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::response_flags::*;
    use super::*;

    const REFUSED: RequestOutcome = RequestOutcome::Failed(ProxyFailure::Refused);
    const TIMEOUT: RequestOutcome = RequestOutcome::Failed(ProxyFailure::Timeout);
    const RESET: RequestOutcome = RequestOutcome::Failed(ProxyFailure::Reset);

    fn answered(status: u16) -> RequestOutcome {
        RequestOutcome::Answered {
            status,
            latency: Duration::from_millis(7),
            grpc: None,
        }
    }

    #[test]
    fn each_response_flag_says_how_the_proxy_failed_or_that_it_never_sent() {
        let table = [
            (0, None),
            (UPSTREAM_CONNECT_FAILURE, Some(REFUSED)),
            (UPSTREAM_TIMEOUT, Some(TIMEOUT)),
            (STREAM_IDLE_TIMEOUT, Some(TIMEOUT)),
            (UPSTREAM_RESET, Some(RESET)),
            (UPSTREAM_TERMINATION, Some(RESET)),
            (UPSTREAM_OVERFLOW, Some(RequestOutcome::NotSent)),
            (NO_HEALTHY_UPSTREAM, Some(RequestOutcome::NotSent)),
            // Flags that say nothing about the backend (DC, LH, NR).
            (1 << 0 | 1 << 3 | 1 << 8, None),
            // A connection failure outranks every other flag, then a timeout, then a reset.
            (
                UPSTREAM_CONNECT_FAILURE | UPSTREAM_TIMEOUT | UPSTREAM_RESET,
                Some(REFUSED),
            ),
            (
                UPSTREAM_TIMEOUT | UPSTREAM_RESET | UPSTREAM_OVERFLOW,
                Some(TIMEOUT),
            ),
            (UPSTREAM_TERMINATION | NO_HEALTHY_UPSTREAM, Some(RESET)),
        ];
        for (flags, outcome) in table {
            assert_eq!(RequestOutcome::flagged(flags), outcome, "flags {flags:#x}");
        }
    }

    #[test]
    fn a_status_below_500_is_the_backends_answer_whatever_the_flags_and_they_are_not_read() {
        for status in [200, 302, 404, 499] {
            let outcome = RequestOutcome::ended(Some(status), Duration::from_millis(7), || {
                panic!("flags read for {status}")
            });
            assert_eq!(outcome, answered(status));
        }
    }

    #[test]
    fn a_5xx_is_the_proxys_failure_when_its_flags_say_so_and_the_backends_otherwise() {
        let latency = Duration::from_millis(7);
        let table = [
            (503, UPSTREAM_CONNECT_FAILURE, REFUSED),
            (504, UPSTREAM_TIMEOUT, TIMEOUT),
            (503, UPSTREAM_RESET, RESET),
            (503, UPSTREAM_OVERFLOW, RequestOutcome::NotSent),
            (503, NO_HEALTHY_UPSTREAM, RequestOutcome::NotSent),
            (503, 0, answered(503)),
            (502, 0, answered(502)),
            (500, 1 << 0, answered(500)),
        ];
        for (status, flags, outcome) in table {
            assert_eq!(
                RequestOutcome::ended(Some(status), latency, || flags),
                outcome,
                "{status} with flags {flags:#x}"
            );
        }
    }

    #[test]
    fn no_answer_is_the_proxys_failure_when_its_flags_say_so_and_the_client_gone_otherwise() {
        let ended = |flags| RequestOutcome::ended(None, Duration::ZERO, || flags);
        assert_eq!(ended(UPSTREAM_CONNECT_FAILURE), REFUSED);
        assert_eq!(ended(UPSTREAM_RESET), RESET);
        assert_eq!(ended(STREAM_IDLE_TIMEOUT), TIMEOUT);
        assert_eq!(ended(UPSTREAM_OVERFLOW), RequestOutcome::NotSent);
        assert_eq!(ended(0), RequestOutcome::ClientGone);
    }
}
