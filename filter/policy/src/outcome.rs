//! What a request's end means to each rule family, in one place both read.
//!
//! A request ends in a [`RequestOutcome`]: the backend answered, the proxy failed to reach it,
//! it is still waiting, it was retried elsewhere, the client left, or the proxy never sent it.
//! The passive checks ([`crate::passive`]) count some of those as failures
//! ([`RequestOutcome::failure`], by the configured statuses and latency); the outlier rules
//! ([`crate::outlier`]) count others ([`RequestOutcome::outlier_failure`]: any 5xx and every
//! proxy failure, as a [`FailureKind`]). Both families import this module and neither imports
//! the other for it.

use crate::config::Passive as PassiveConfig;
use crate::duration;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

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
        /// The backend's own status.
        status: u16,
        /// Time from the request to the response headers (zero when not measured).
        latency: Duration,
    },
    /// The proxy gave up on the backend.
    Failed(ProxyFailure),
    /// The request is still waiting for its answer after this long (see `unhealthy_latency`).
    StillWaiting(Duration),
    /// The proxy retried the request on another backend: this backend's attempt failed (how,
    /// the proxy does not say).
    RetriedElsewhere,
    /// The client went away first: says nothing about the backend.
    ClientGone,
    /// The proxy answered for itself and never sent the request: its circuit breaker was full
    /// (overflow) or it had no healthy host for the backend. Says nothing about the backend; a
    /// backend slow enough to fill the breaker is the outlier rules' business, by the latency of
    /// the requests it does answer.
    NotSent,
}

/// Why a request counted against its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure(RequestOutcome);

impl RequestOutcome {
    /// Whether this outcome counts against the backend, and why.
    pub fn failure(self, config: &PassiveConfig) -> Option<Failure> {
        let late = |latency: Duration| config.unhealthy_latency.is_some_and(|l| latency >= l);
        let counts = match self {
            RequestOutcome::Answered { status, latency } => {
                config.unhealthy_status.iter().any(|m| m.matches(status)) || late(latency)
            }
            RequestOutcome::Failed(_) | RequestOutcome::RetriedElsewhere => true,
            RequestOutcome::StillWaiting(waited) => late(waited),
            RequestOutcome::ClientGone | RequestOutcome::NotSent => false,
        };
        counts.then_some(Failure(self))
    }

    /// Whether the outcome is a failure for the outlier rules, and how: any 5xx from the backend
    /// (500 included), a connection failure, a reset, a timeout, an attempt retried elsewhere.
    /// `None` for a success; a request still waiting or whose client left is not an outcome
    /// (see [`RequestOutcome::judged`]).
    pub fn outlier_failure(self) -> Option<FailureKind> {
        match self {
            RequestOutcome::Answered { status, .. } if status >= 500 => {
                Some(FailureKind::Status(status))
            }
            RequestOutcome::Failed(failure) => Some(failure.into()),
            RequestOutcome::RetriedElsewhere => Some(FailureKind::Retried),
            RequestOutcome::Answered { .. }
            | RequestOutcome::StillWaiting(_)
            | RequestOutcome::ClientGone
            | RequestOutcome::NotSent => None,
        }
    }

    /// Whether the outcome says how the backend did, for the outlier rules: everything but a
    /// request still waiting, one whose client left first and one the proxy never sent.
    pub fn judged(self) -> bool {
        !matches!(
            self,
            RequestOutcome::StillWaiting(_) | RequestOutcome::ClientGone | RequestOutcome::NotSent
        )
    }

    /// What the outcome says about whether anything is serving: `Some(true)` when the
    /// connection was refused, `Some(false)` when the backend was reached, `None` when it
    /// does not say.
    pub fn contact(self) -> Option<bool> {
        match self {
            RequestOutcome::Answered { .. } => Some(false),
            RequestOutcome::Failed(failure) => Some(failure == ProxyFailure::Refused),
            RequestOutcome::StillWaiting(_)
            | RequestOutcome::RetriedElsewhere
            | RequestOutcome::ClientGone
            | RequestOutcome::NotSent => None,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self.0 {
            // Latency is measured only when unhealthy_latency is set; zero means not measured.
            RequestOutcome::Answered { status, latency } if latency.is_zero() => {
                write!(f, "a request answered {status}")
            }
            RequestOutcome::Answered { status, latency } => write!(
                f,
                "a request answered {status} after {}",
                duration::display(latency)
            ),
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
            RequestOutcome::ClientGone => f.write_str("the client went away"),
            RequestOutcome::NotSent => f.write_str("the proxy never sent a request"),
        }
    }
}

/// How a request failed, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum FailureKind {
    /// The backend answered with this 5xx status.
    Status(u16),
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
            FailureKind::ConnectionFailed => f.write_str("connection failed"),
            FailureKind::Reset => f.write_str("reset"),
            FailureKind::Timeout => f.write_str("timeout"),
            FailureKind::Retried => f.write_str("retried elsewhere"),
        }
    }
}
