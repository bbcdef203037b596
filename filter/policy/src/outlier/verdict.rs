//! Why a backend is an outlier, as the log line says it: the comparison that found it, with the
//! figures on both sides, so an operator can tell a real fault from a close call.

use super::latency::Bounds;
use crate::outcome::{About, FailureKind};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;
use upcheck_config::duration;

/// Why a backend is an outlier: the comparison, for the log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// Its failure share is far above its peers'.
    Failing {
        /// Its failed requests (in the window, or since its re-admission).
        failed: u32,
        /// Its requests, over the same span.
        requests: u32,
        /// How its latest failure failed.
        kind: Option<FailureKind>,
        /// Whether it was judged on probation, on what it did since its re-admission.
        since_readmission: bool,
        /// Its peers' failed requests in the window.
        peers_failed: u32,
        /// Its peers' requests in the window.
        peers_requests: u32,
    },
    /// Its latest requests, process-wide, all failed: more in a row than its peers' failure share
    /// makes believable (see [`run_rule`](fn@super::run_rule)).
    Run {
        /// How many failed in a row.
        failed: u32,
        /// How its latest failure failed.
        kind: FailureKind,
        /// Its peers' failed requests in the window.
        peers_failed: u32,
        /// Its peers' requests in the window.
        peers_requests: u32,
    },
    /// Its median latency is far above its peers'.
    Slow {
        /// Its median latency.
        median: Bounds,
        /// What its peers' median is below.
        peers_median: Duration,
    },
    /// Its requests in flight have waited far longer than its peers take.
    Stalled {
        /// How many have waited at least `waited`.
        waiting: u32,
        /// The wait that makes a request stalled: `latency_factor` × `peers_p99`, at least
        /// `stall_after`.
        waited: Duration,
        /// How long the oldest has waited.
        oldest: Duration,
        /// What 99 in 100 of its peers' requests are answered within.
        peers_p99: Duration,
    },
}

impl Verdict {
    /// What the comparison says something about: failing or slow answers are the backend's;
    /// requests stalled, or failing by connections and timeouts, may be this balancer's path.
    /// Only a verdict about the backend is shared with the fleet ([`crate::etcd`]).
    pub fn about(&self) -> About {
        match self {
            Verdict::Failing { kind, .. } => kind.map_or(About::Backend, FailureKind::about),
            Verdict::Run { kind, .. } => kind.about(),
            Verdict::Slow { .. } => About::Backend,
            Verdict::Stalled { .. } => About::Path,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Verdict::Failing {
                failed,
                requests,
                kind,
                since_readmission,
                peers_failed,
                peers_requests,
            } => {
                write!(f, "{failed} of {requests} requests failed")?;
                if let Some(kind) = kind {
                    write!(f, " ({kind})")?;
                }
                if *since_readmission {
                    f.write_str(" since it was re-admitted")?;
                }
                write!(
                    f,
                    " while its peers failed {peers_failed} of {peers_requests}"
                )
            }
            Verdict::Run {
                failed,
                kind,
                peers_failed,
                peers_requests,
            } => write!(
                f,
                "its last {failed} requests failed ({kind}) while its peers failed {peers_failed} \
                 of {peers_requests}"
            ),
            Verdict::Slow {
                median,
                peers_median,
            } => write!(
                f,
                "its requests took {median} (median) while its peers answer within {} (median)",
                duration::display(*peers_median)
            ),
            Verdict::Stalled {
                waiting,
                waited,
                oldest,
                peers_p99,
            } => write!(
                f,
                "{waiting} of its requests have waited {} or longer (the oldest {}) while its \
                 peers answer within {} (99%)",
                duration::display(*waited),
                duration::display(*oldest),
                duration::display(*peers_p99)
            ),
        }
    }
}
