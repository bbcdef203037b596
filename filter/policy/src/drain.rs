//! Drain: a backend saying it is going away (a deploy is about to restart it).
//!
//! A backend drains when any of its answers carries [`SIGNAL_HEADER`] (what Envoy's own
//! health-check filter adds while a sidecar drains; a probe's answer or a user's response), or
//! when its probe answers `health_checks.active.drain_status` (HAProxy's `disable-on-404`
//! convention), or when a gRPC backend's health `Watch` pushes `NOT_SERVING`
//! ([`crate::grpc::watch`]; a `SERVING` pushed there ends it as a passing probe does). A request
//! from a client carrying the header says nothing: only a backend's answers are read for it.
//!
//! Draining is not a failure. A draining backend takes no new requests, and those already sent
//! to it finish without their outcomes counting anywhere (passive ejection, the outlier
//! comparison); the pool guard and the ejection cap work over the backends that do not drain,
//! so the guard never brings a draining backend back ([`crate::guard`]). It ends at the first
//! probe that passes without the signal: a user response without the header does not end it,
//! since a draining app still serves what it was sent.
//!
//! The drain lives in the process-wide passive table ([`crate::passive::PassiveHealth::drain`]),
//! the one table every VM writes: the VM that reads the signal (the prober on a probe or a Watch,
//! any worker on a response) shares it at once, and every other VM takes it in before its next
//! pick, as it does a backend another VM ejected ([`crate::tables::Applied::takes_out`]).

use crate::active::{MadeBy, ProbeAnswer};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::fmt;
use upcheck_config::Active;

/// The header by which a backend's answer says it drains (in any case). The adapter removes it
/// from every response on its way to the client.
pub const SIGNAL_HEADER: &str = "x-envoy-immediate-health-check-fail";

/// What said a backend drains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Signal {
    /// A probe's answer carried [`SIGNAL_HEADER`].
    ProbeHeader,
    /// A user request's response carried [`SIGNAL_HEADER`].
    ResponseHeader,
    /// A probe answered this status, one of `health_checks.active.drain_status`.
    Status(u16),
    /// The configuration drains it (`upstreams[].drain`, `upcheck backends drain`).
    Operator,
    /// Its gRPC health `Watch` pushed `NOT_SERVING` ([`crate::grpc::watch`]).
    Watch,
}

/// A backend draining: since when, and what said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    /// When the signal was first read.
    pub since: Time,
    /// What said so.
    pub by: Signal,
}

/// Whether an answer whose header names are `names` carries [`SIGNAL_HEADER`].
pub fn signalled<'a>(names: impl IntoIterator<Item = &'a str>) -> bool {
    names
        .into_iter()
        .any(|name| name.eq_ignore_ascii_case(SIGNAL_HEADER))
}

impl Signal {
    /// What a probe's answer says of a drain: one the proxy made itself is no word from the
    /// backend; the backend's says so by the header, or by its status.
    pub fn of_probe(answer: &ProbeAnswer, config: &Active) -> Option<Signal> {
        if answer.made_by == MadeBy::Proxy {
            return None;
        }
        if answer.signalled {
            return Some(Signal::ProbeHeader);
        }
        config
            .drain_status
            .filter(|m| m.matches(answer.status))
            .map(|_| Signal::Status(answer.status))
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Signal::ProbeHeader => write!(f, "its probe's answer carried {SIGNAL_HEADER}"),
            Signal::ResponseHeader => write!(f, "a response carried {SIGNAL_HEADER}"),
            Signal::Status(status) => write!(f, "its probe answered {status} (drain_status)"),
            Signal::Operator => f.write_str("the configuration drains it (upstreams[].drain)"),
            Signal::Watch => f.write_str("it said NOT_SERVING on its Watch"),
        }
    }
}
