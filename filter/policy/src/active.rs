//! Active health: what probes say about a backend.
//!
//! A backend starts *unknown*: nothing has answered for it yet, so it is neither trusted nor
//! blamed. `passes` consecutive passing probes make it healthy, `fails` consecutive failing ones
//! unhealthy. Each probe returns a [`Transition`], so the caller logs and counts only when
//! something actually changed.

use crate::grpc::health::Serving;
use crate::grpc::status::Code;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;
use upcheck_config::duration;
use upcheck_config::Active as ActiveConfig;

/// What one probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbeOutcome {
    /// Answered with the expected status and body (over gRPC: `OK`, `SERVING`).
    Pass,
    /// Answered, but not as a backend ready for traffic does: what it said. The backend is up;
    /// it says it is not ready.
    Soft(Said),
    /// Connected, then no answer within the probe timeout (that long).
    Timeout(Duration),
    /// Nothing is serving: the connection was refused, reset, or could not be made in time.
    Refused,
}

/// What a backend that answered a probe said instead of passing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Said {
    /// An HTTP status `expect_status` does not take.
    Status(u16),
    /// An expected status, with a body without `expect_body`'s text.
    WithoutBody,
    /// A gRPC status other than `OK` to the health check ([`crate::grpc::status`]).
    Grpc(Code),
    /// `OK`, with a serving status other than `SERVING` ([`crate::grpc::health`]).
    Health(Serving),
    /// A serving status its `Watch` pushed that is neither `SERVING` nor `NOT_SERVING`
    /// ([`crate::grpc::watch`]).
    Watch(Serving),
    /// Its `Watch` ended with this gRPC status, one that says the service is not there
    /// ([`crate::grpc::watch::ended`]).
    WatchEnded(Code),
}

/// How much of an answer the proxy made itself is read: its reason is in its first line.
pub const PROXY_REASON_BYTES: usize = 256;

/// What Envoy's 503 says when its circuit breaker shed the request, which never reached the
/// backend (`upstream connect error or disconnect/reset before headers. reset reason:
/// overflow`).
pub const SHED: &[u8] = b"reset reason: overflow";

/// The headers an answer the proxy made itself carries (Envoy's bare 503 when nothing accepts
/// the connection, 504 when the probe timed out); a backend's own answer has more (`date`,
/// `server`, …).
pub const PROXY_MADE_HEADERS: [&str; 3] = [":status", "content-length", "content-type"];

/// Who made a probe's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MadeBy {
    /// The backend.
    Backend,
    /// The proxy itself, for want of the backend's (Envoy's own 503 for a failed connection,
    /// 504 for a timeout).
    Proxy,
}

/// Who made a probe's answer, whose response headers are named `names`: the proxy when it
/// carries no header but [`PROXY_MADE_HEADERS`] (in any case). This is what turns Envoy's 503
/// for a refused connection into [`ProbeOutcome::Refused`], where a backend's own bare 503
/// would be a soft failure.
pub fn made_by<'a>(names: impl IntoIterator<Item = &'a str>) -> MadeBy {
    let proxy_made = names.into_iter().all(|name| {
        PROXY_MADE_HEADERS
            .iter()
            .any(|made| made.eq_ignore_ascii_case(name))
    });
    if proxy_made {
        MadeBy::Proxy
    } else {
        MadeBy::Backend
    }
}

/// Who ended a gRPC health check that failed, by its status message: Envoy writes one of its own
/// for a call it could not make, naming the stream's reset (measured on Envoy 1.40 for a backend
/// refusing connections: `upstream connect error or disconnect/reset before headers. reset
/// reason: remote connection failure{upstream_reset_before_response_started{…}}`); a backend's
/// own status carries the backend's message.
pub fn grpc_made_by(message: &str) -> MadeBy {
    const PROXY_MADE: [&str; 2] = ["upstream connect error", "upstream_reset_before_response"];
    if PROXY_MADE.iter().any(|m| message.contains(m)) {
        MadeBy::Proxy
    } else {
        MadeBy::Backend
    }
}

/// How a failed gRPC health check ended, from its `code` and status `message`: Envoy ends a call
/// it gave up on at its timeout with `UNAVAILABLE` and a message of its own (measured on Envoy
/// 1.40 for a backend that accepts and never answers: `upstream request
/// timeout{response_timeout}`), which is a timeout of the proxy's, not the backend's word; any
/// other end is its code, made by whom [`grpc_made_by`] says.
pub fn grpc_check_ended(code: u32, message: &str) -> (Code, MadeBy) {
    if message.starts_with("upstream request timeout") {
        return (Code::DeadlineExceeded, MadeBy::Proxy);
    }
    (Code::of(code), grpc_made_by(message))
}

/// A probe's answer, as the adapter read it ([`crate::Pool::probe_answered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeAnswer<'a> {
    /// Its status.
    pub status: u16,
    /// Who made it ([`made_by`]).
    pub made_by: MadeBy,
    /// Whether it carried the drain signal ([`crate::drain::signalled`]).
    pub signalled: bool,
    /// The first bytes of its body, as many as the policy wants
    /// ([`crate::Pool::probe_body_wanted`]).
    pub body: &'a [u8],
}

/// A gRPC health check's end, as the adapter read it ([`crate::Pool::probe_grpc_answered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcProbeAnswer {
    /// The call's gRPC status.
    pub code: Code,
    /// Who ended it: the proxy, for want of the backend (it could not connect, or the call
    /// timed out), or the backend.
    pub made_by: MadeBy,
    /// What the answer said of the service's health, with `OK` ([`crate::grpc::health`]);
    /// `None` without an answer that decodes.
    pub serving: Option<Serving>,
}

/// Whether `needle` occurs in `body`.
pub(crate) fn contains(body: &[u8], needle: &[u8]) -> bool {
    body.windows(needle.len()).any(|w| w == needle)
}

impl ProbeOutcome {
    /// Classifies a probe's answer: one the proxy made itself says the backend did not answer
    /// (a 504 that it timed out, another 5xx that nothing serves); the backend's own is judged by
    /// `expect_status`, then by `expect_body` in its body's first `max_size` bytes.
    pub fn classify(answer: &ProbeAnswer, config: &ActiveConfig) -> ProbeOutcome {
        let status = answer.status;
        let proxy_made = answer.made_by == MadeBy::Proxy;
        if proxy_made && status == 504 {
            return ProbeOutcome::Timeout(config.timeout);
        }
        if proxy_made && status >= 500 {
            return ProbeOutcome::Refused;
        }
        if !config.expect_status.matches(status) {
            return ProbeOutcome::Soft(Said::Status(status));
        }
        if let Some(expected) = &config.expect_body {
            if !contains(answer.body, expected.as_bytes()) {
                return ProbeOutcome::Soft(Said::WithoutBody);
            }
        }
        ProbeOutcome::Pass
    }

    /// Classifies a gRPC health check's end: one the proxy ended itself says the backend did not
    /// answer (in time, for `DEADLINE_EXCEEDED`; at all, for anything else); the backend's own
    /// passes with `OK` and `SERVING` only. `NOT_SERVING`, an unknown service, an unknown status
    /// and any other gRPC status fail, saying which.
    pub fn classify_grpc(answer: &GrpcProbeAnswer, config: &ActiveConfig) -> ProbeOutcome {
        match (answer.made_by, answer.code, answer.serving) {
            (MadeBy::Proxy, Code::DeadlineExceeded, _) => ProbeOutcome::Timeout(config.timeout),
            (MadeBy::Proxy, _, _) => ProbeOutcome::Refused,
            (MadeBy::Backend, Code::Ok, Some(Serving::Serving)) => ProbeOutcome::Pass,
            (MadeBy::Backend, Code::Ok, serving) => {
                ProbeOutcome::Soft(Said::Health(serving.unwrap_or(Serving::Unknown)))
            }
            (MadeBy::Backend, code, _) => ProbeOutcome::Soft(Said::Grpc(code)),
        }
    }

    /// What a probe found that came back without any answer, by the proxy's word for why
    /// (`reason`, ngx_wasm_module's `:dispatch_status`): `"timeout"` is a timeout after the
    /// probe's `timeout`; anything else, or no word at all, is nothing serving (`"broken
    /// connection"`, `"resolver failure"`, `"tls handshake failure"`, `"reader failure"`, or
    /// a reset before any answer).
    pub fn unanswered(reason: Option<&str>, config: &ActiveConfig) -> ProbeOutcome {
        match reason {
            Some("timeout") => ProbeOutcome::Timeout(config.timeout),
            _ => ProbeOutcome::Refused,
        }
    }

    /// Whether the probe passed.
    pub fn passed(self) -> bool {
        self == ProbeOutcome::Pass
    }

    /// Whether two failed probes failed the same way (timed out, or answered the same status),
    /// as probes do when a dependency they share is the cause. A refusal is never alike: nothing
    /// serving is a backend's own state.
    pub fn alike(self, other: ProbeOutcome) -> bool {
        match (self, other) {
            (ProbeOutcome::Timeout(_), ProbeOutcome::Timeout(_)) => true,
            (ProbeOutcome::Soft(a), ProbeOutcome::Soft(b)) => a == b,
            _ => false,
        }
    }
}

/// What real requests said about a backend when one of its probes failed: the evidence a probe
/// failure is weighed against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pages {
    /// No word: nothing answered recently, its latest requests fail, it is ejected, or requests
    /// are not counted (outlier detection off).
    Unknown,
    /// Its latest requests were answered without failing, though none while the probe waited.
    Answering,
    /// A request was answered without failing while the probe waited: a probe that timed out
    /// then was stuck behind something, not facing a backend that stopped answering.
    AnsweredMeanwhile,
}

/// How a backend went down: the probe that took it out, and whether its pages were answering
/// then (what the pool guard needs to tell a shared cause from a backend's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Down {
    /// The probe that took it out.
    pub outcome: ProbeOutcome,
    /// Whether its requests were being answered without failing at the time.
    pub pages: bool,
}

impl fmt::Display for ProbeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            ProbeOutcome::Pass => f.write_str("passed"),
            ProbeOutcome::Soft(Said::Status(status)) => write!(f, "answered {status}"),
            ProbeOutcome::Soft(Said::WithoutBody) => {
                f.write_str("answered without the expected body")
            }
            ProbeOutcome::Soft(Said::Grpc(code)) => write!(f, "answered {code}"),
            ProbeOutcome::Soft(Said::Health(serving)) => write!(f, "answered {}", serving.name()),
            ProbeOutcome::Soft(Said::Watch(serving)) => {
                write!(f, "said {} on its Watch", serving.name())
            }
            ProbeOutcome::Soft(Said::WatchEnded(code)) => write!(f, "ended its Watch with {code}"),
            ProbeOutcome::Timeout(after) => {
                write!(f, "timed out after {}", duration::display(*after))
            }
            ProbeOutcome::Refused => f.write_str("found nothing serving (connection failed)"),
        }
    }
}

/// A backend's standing with the prober.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Health {
    /// No verdict yet.
    Unknown,
    /// Passing probes.
    Healthy,
    /// Failing probes.
    Unhealthy,
}

impl Health {
    /// Its name, as the status page and the history write it.
    pub fn name(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Healthy => "healthy",
            Health::Unhealthy => "unhealthy",
        }
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Why a backend changed status: the probe that tipped it and how many in a row agreed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reason {
    /// The last probe.
    pub outcome: ProbeOutcome,
    /// Consecutive probes with the same verdict.
    pub streak: u32,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let probes = if self.streak == 1 { "probe" } else { "probes" };
        write!(f, "{} {probes} {}", self.streak, self.outcome)
    }
}

/// What a probe did to a backend's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changed.
    Unchanged,
    /// The probe timed out while the backend answered real requests: it counts neither way.
    /// `first`: the first such probe since the backend's last other verdict.
    Contradicted {
        /// Whether this starts a stretch of contradicted probes.
        first: bool,
    },
    /// The verdict leans towards `toward`, `seen` of `needed` probes so far.
    Pending {
        /// Where the streak leads.
        toward: Health,
        /// Probes in the streak.
        seen: u32,
        /// Probes the threshold needs.
        needed: u32,
    },
    /// The status changed.
    Changed {
        /// Before.
        from: Health,
        /// After.
        to: Health,
        /// Why.
        reason: Reason,
    },
}

/// One backend's active-check state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveHealth {
    /// Current verdict.
    pub status: Health,
    /// Consecutive passes (positive) or failures (negative) so far.
    pub(crate) streak: i64,
    /// The latest probe and when it settled.
    pub last: Option<(Time, ProbeOutcome)>,
    /// When `status` last changed.
    pub since: Time,
    /// How it went down, while it is down.
    pub down: Option<Down>,
    /// Since when its probes time out while its pages answer, if they do.
    pub contradicted: Option<Time>,
    /// When it entered service beside backends already in service, so its share warms up from
    /// then ([`crate::warm_up`]); `None` when it is not healthy, or entered service with none
    /// in service before it (cold start, or the first back after an outage of all).
    pub warm_up: Option<Time>,
}

impl ActiveHealth {
    /// The state with each of its times taken through `here`: another balancer's clock to this
    /// one's ([`crate::etcd`]).
    pub(crate) fn retimed(mut self, here: impl Fn(Time) -> Time) -> ActiveHealth {
        self.last = self.last.map(|(at, outcome)| (here(at), outcome));
        self.since = here(self.since);
        self.contradicted = self.contradicted.map(&here);
        self.warm_up = self.warm_up.map(&here);
        self
    }

    /// A backend nothing is known about yet, as of `now`.
    pub fn new(now: Time) -> ActiveHealth {
        ActiveHealth {
            status: Health::Unknown,
            streak: 0,
            last: None,
            since: now,
            down: None,
            contradicted: None,
            warm_up: None,
        }
    }

    /// Takes one probe's outcome into account, weighed against what its real requests said
    /// (`pages`). A timeout while requests were answered counts neither way: probes wait in the
    /// same queue as pages, so under load a probe can time out behind them while every page is
    /// served, and taking such a backend out would pile its traffic onto the rest.
    pub fn observe(
        &mut self,
        outcome: ProbeOutcome,
        now: Time,
        config: &ActiveConfig,
        pages: Pages,
    ) -> Transition {
        self.last = Some((now, outcome));
        if matches!(outcome, ProbeOutcome::Timeout(_)) && pages == Pages::AnsweredMeanwhile {
            let first = self.contradicted.is_none();
            self.contradicted.get_or_insert(now);
            return Transition::Contradicted { first };
        }
        self.contradicted = None;
        let passed = outcome.passed();
        self.streak = match (passed, self.streak) {
            (true, s) if s > 0 => s.saturating_add(1),
            (true, _) => 1,
            (false, s) if s < 0 => s.saturating_sub(1),
            (false, _) => -1,
        };
        let seen = u32::try_from(self.streak.unsigned_abs()).unwrap_or(u32::MAX);
        let (toward, needed) = if passed {
            (Health::Healthy, config.passes)
        } else {
            (Health::Unhealthy, config.fails)
        };
        if self.status == toward {
            return Transition::Unchanged;
        }
        if seen < needed {
            return Transition::Pending {
                toward,
                seen,
                needed,
            };
        }
        let from = self.status;
        self.status = toward;
        self.since = now;
        self.down = (toward == Health::Unhealthy).then_some(Down {
            outcome,
            pages: pages != Pages::Unknown,
        });
        Transition::Changed {
            from,
            to: toward,
            reason: Reason {
                outcome,
                streak: seen,
            },
        }
    }

    /// When it went down, if it is down: when the probe that took it down was sent, as near as
    /// is known. A probe that times out tells at send + timeout what was already true when it
    /// was sent, so the timeout it waited for is taken off. Then two backends struck by one
    /// cause lie within a probe round of each other, and one that went down rounds before lies
    /// rounds before, however late the proxy's timer fired.
    pub fn down_since(&self) -> Option<Time> {
        if self.status != Health::Unhealthy {
            return None;
        }
        let waited = match self.down.map(|d| d.outcome) {
            Some(ProbeOutcome::Timeout(after)) => after,
            _ => Duration::ZERO,
        };
        Some(self.since.saturating_sub(waited))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envoys_own_end_of_a_grpc_call_is_told_from_a_backends_status_by_its_message() {
        let refused = "upstream connect error or disconnect/reset before headers. reset reason: \
                       remote connection failure{upstream_reset_before_response_started{\
                       remote_connection_failure|delayed_connect_error:_Connection_refused}}";
        assert_eq!(grpc_made_by(refused), MadeBy::Proxy);
        assert_eq!(grpc_made_by("database unreachable"), MadeBy::Backend);
        assert_eq!(grpc_made_by(""), MadeBy::Backend);
    }

    #[test]
    fn a_dispatch_that_timed_out_is_a_timeout_and_any_other_failure_nothing_serving() {
        let config = ActiveConfig::default();
        assert_eq!(
            ProbeOutcome::unanswered(Some("timeout"), &config),
            ProbeOutcome::Timeout(config.timeout)
        );
        for reason in [Some("broken connection"), Some("resolver failure"), None] {
            assert_eq!(
                ProbeOutcome::unanswered(reason, &config),
                ProbeOutcome::Refused,
                "{reason:?}"
            );
        }
    }

    #[test]
    fn an_answer_is_the_proxys_own_only_when_it_carries_no_header_but_the_proxys_three() {
        let table: [(&[&str], MadeBy); 9] = [
            (
                &[":status", "content-length", "content-type"],
                MadeBy::Proxy,
            ),
            (&[":status", "content-length"], MadeBy::Proxy),
            (&[":status"], MadeBy::Proxy),
            (&[], MadeBy::Proxy),
            (
                &[":Status", "Content-Length", "CONTENT-TYPE"],
                MadeBy::Proxy,
            ),
            (
                &[":status", "content-length", "content-type", "date"],
                MadeBy::Backend,
            ),
            (&[":status", "server"], MadeBy::Backend),
            (
                &[":status", "content-length", "x-envoy-upstream-service-time"],
                MadeBy::Backend,
            ),
            (&["date", "server", "content-type"], MadeBy::Backend),
        ];
        for (names, made) in table {
            assert_eq!(made_by(names.iter().copied()), made, "{names:?}");
        }
    }
}
