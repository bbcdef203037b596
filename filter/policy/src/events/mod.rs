//! What an observation did, as values: the adapter logs and counts these and decides nothing.
//!
//! Every entry point of [`crate::pool::Pool`] returns [`Effects`]: the events it caused, each complete
//! with its reason, the changes the process-wide tables must take, and the probes to send. The
//! core also decides which VM reports what, so each change is logged once per process: the VM
//! holding the probing lease reports what probes and the passage of time change (health,
//! ejection ends, the pool guard, the gauges); the VM whose write filled a backend's failure
//! window, or started its outlier ejection, reports that ejection.

mod described;

use crate::active::{Health, ProbeOutcome, Reason};
use crate::drain::{Drain, Signal};
use crate::etcd::{Note, ToEtcd};
use crate::grpc::health::{self, Serving};
use crate::grpc::status::Code;
use crate::grpc::watch::{self, WatchCall};
use crate::guard::Guard;
use crate::outcome::Failure;
use crate::outlier::Verdict;
use crate::retry::{BudgetNews, Extra};
use crate::state::State;
use crate::tables::PassiveChange;
use crate::time::Time;
pub use described::{Counted, Described, InHistory};
use std::fmt;
use std::time::Duration;
use upcheck_config::duration;

/// Why a backend was ejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EjectionReason {
    /// `count` failures were remembered within `within`; `last` is the one that filled the window.
    Failures {
        /// `max_fails`.
        count: u32,
        /// `fail_duration`.
        within: Duration,
        /// The failure that filled the window.
        last: Failure,
    },
    /// It stood out from its peers ([`crate::outlier`]).
    Outlier(Verdict),
    /// Another balancer of the fleet, with this lease, found it standing out ([`crate::etcd`]).
    Shared {
        /// The deciding balancer's lease.
        by: i64,
        /// What it found.
        verdict: Verdict,
    },
}

impl fmt::Display for EjectionReason {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            EjectionReason::Failures {
                count,
                within,
                last,
            } => write!(
                f,
                "{count} failures within {}, the last: {last}",
                duration::display(*within)
            ),
            EjectionReason::Outlier(verdict) => write!(f, "{verdict}"),
            EjectionReason::Shared { by, verdict } => {
                write!(f, "{verdict}, as balancer {by:x} found")
            }
        }
    }
}

/// One thing that happened, for one log line and the metrics that go with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// This VM now holds the probing lease and probes for the process.
    Probing,
    /// A probe answered; `index` is the backend's position in the configuration.
    Probed {
        /// Backend position.
        index: usize,
        /// Backend name.
        name: String,
        /// What the probe found.
        outcome: ProbeOutcome,
        /// How long it took to settle, from being sent.
        latency: Duration,
    },
    /// A backend's state in one word ([`State`]), reported by its prober as it changes and
    /// afresh by a VM that begins probing (its gauges).
    State {
        /// Backend position.
        index: usize,
        /// Backend name.
        name: String,
        /// The state it is in.
        state: State,
        /// Since when.
        since: Time,
        /// Whether it just changed to it (rather than being reported afresh).
        change: bool,
    },
    /// A backend's health by probes changed.
    HealthChanged {
        /// Backend name.
        name: String,
        /// Before.
        from: Health,
        /// After.
        to: Health,
        /// The probes that tipped it.
        reason: Reason,
        /// Whether the last of them was the backend's own word on its health `Watch`
        /// ([`crate::grpc::watch`]) rather than a probe's answer.
        pushed: bool,
    },
    /// A probe could not be sent at all: the proxy refused the call (no such cluster). Reported
    /// once per backend; the backend is treated as not serving and retried every interval.
    Unprobeable {
        /// Backend name.
        name: String,
        /// The cluster the call named.
        cluster: String,
        /// What the proxy said.
        why: String,
    },
    /// A gRPC backend answered its `Check` with `UNIMPLEMENTED`: it serves no health service, a
    /// configuration problem, not a failure of the moment. Reported once per backend, until a
    /// check passes; the backend is treated as not serving.
    NoHealthService {
        /// Backend name.
        name: String,
        /// The service its checks ask for.
        service: String,
    },
    /// A request counted against its backend.
    RequestFailed {
        /// Backend position.
        index: usize,
        /// Backend name.
        name: String,
        /// Why it counted.
        failure: Failure,
    },
    /// The proxy made an extra attempt for a request first sent to a backend: a repeat on
    /// another backend or a hedge ([`crate::retry`]).
    Retried {
        /// Backend position (the first attempt's).
        index: usize,
        /// Backend name.
        name: String,
        /// What became of its attempt.
        extra: Extra,
        /// The backend that gave the answer instead, by name, if the proxy says which.
        by: Option<String>,
        /// The status its user got, if one was answered.
        status: Option<u16>,
    },
    /// The retry budget was spent, is still, or is available again ([`crate::retry::Budget`]).
    RetryBudget(BudgetNews),
    /// A backend was ejected until `until` (at most `length` from now).
    EjectionStarted {
        /// Backend position.
        index: usize,
        /// Backend name.
        name: String,
        /// How long the ejection lasts, as far as is known now.
        length: Duration,
        /// Why.
        reason: EjectionReason,
    },
    /// A backend earned an ejection but stays: `max_ejection_percent` is reached.
    CapReached {
        /// Backend name.
        name: String,
        /// Why it would have been ejected.
        reason: EjectionReason,
    },
    /// A backend whose ejection the cap held back ([`Event::CapReached`]) goes out now, its
    /// ejection still earned: a backend that was out came back, or the pool changed.
    CapLifted {
        /// Backend position.
        index: usize,
        /// Backend name.
        name: String,
        /// How long the ejection lasts from now, as far as is known now.
        length: Duration,
    },
    /// A backend's ejection ended.
    EjectionEnded {
        /// Backend name.
        name: String,
        /// Whether it was an outlier ejection, which ends at its set time (rather than as its
        /// failures expire).
        outlier: bool,
    },
    /// Whether anything is serving at a backend changed (by its latest probe or request).
    ContactChanged {
        /// Backend name.
        name: String,
        /// Whether it now accepts connections.
        accepting: bool,
    },
    /// A backend entered or left service: passing probes and not ejected (the `healthy` gauge).
    InService {
        /// Backend position.
        index: usize,
        /// Backend name.
        name: String,
        /// The new value.
        in_service: bool,
    },
    /// The pool guard engaged (with why) or was released ([`Guard::Off`]).
    Guard(Guard),
    /// A probe timed out while the backend answered real requests: it stays as it was.
    /// Reported once per stretch of such probes.
    ProbeContradicted {
        /// Backend name.
        name: String,
        /// The probe.
        outcome: ProbeOutcome,
    },
    /// A backend that went down on its probes while its pages answered is back in rotation:
    /// the backends that went down last fail their probes the same way, pages answering, or
    /// fail their pages.
    BackAlike {
        /// Backend name.
        name: String,
        /// Those that went down last, alike.
        peers: Vec<String>,
        /// Those that went down last with their pages failing, left out.
        failing: Vec<String>,
        /// How their probes fail.
        outcome: ProbeOutcome,
    },
    /// A backend drains: no new requests go to it, and those already sent finish without
    /// counting ([`crate::drain`]).
    DrainStarted {
        /// Backend position.
        index: usize,
        /// Backend name.
        name: String,
        /// Since when, and what said so.
        drain: Drain,
    },
    /// A backend's drain ended: a probe passed without the signal.
    DrainEnded {
        /// Backend position.
        index: usize,
        /// Backend name.
        name: String,
        /// What had said it drains.
        by: Signal,
        /// How long it drained.
        lasted: Duration,
    },
    /// What this balancer's part in the fleet of balancers has to say ([`crate::etcd`]): joining,
    /// falling back to probing everything here, a value refused, the watch's life.
    Fleet(Note),
    /// What a gRPC backend's health `Watch` said or did ([`crate::grpc::watch`]); what it means
    /// for the backend follows as the events of a probe or a drain.
    Watch {
        /// Backend position.
        index: usize,
        /// Backend name.
        name: String,
        /// What it said or did.
        news: WatchNews,
    },
}

/// What a gRPC backend's health `Watch` said or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchNews {
    /// It pushed this serving status.
    Pushed(Serving),
    /// It ended with this gRPC status: it is opened again after a backoff, the backend's `Check`
    /// covering it meanwhile.
    Ended(Code),
    /// The backend answered `UNIMPLEMENTED` (no health service, or no `Watch`): said once, and
    /// again only after a Watch of it worked.
    Unimplemented,
    /// It sent something that is no health answer (what is wrong with it): it is opened again.
    Refused(String),
    /// The proxy would not open it (what it said): it is tried again after a backoff.
    NotOpened(String),
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Event::Probing => f.write_str("this VM now probes for the process"),
            Event::Fleet(note) => f.write_str(&note.text),
            Event::Probed { name, outcome, .. } => write!(f, "{name}: probe {outcome}"),
            Event::State { name, state, .. } => write!(f, "{name} is {}", state.as_str()),
            Event::HealthChanged {
                name,
                to,
                reason,
                pushed: true,
                ..
            } => {
                let said = match reason.outcome {
                    ProbeOutcome::Pass => "said SERVING on its Watch".to_owned(),
                    other => other.to_string(),
                };
                match reason.streak {
                    1 => write!(f, "{name} {to}: it {said}"),
                    n => write!(f, "{name} {to}: {n} probes, the last: it {said}"),
                }
            }
            Event::HealthChanged { name, to, reason, .. } => write!(f, "{name} {to}: {reason}"),
            Event::Unprobeable { name, cluster, why } => write!(
                f,
                "cannot probe {name}: the proxy refused a call to cluster {cluster:?} ({why}); is it defined? Treating {name} as not serving, retrying every interval"
            ),
            Event::NoHealthService { name, service } => write!(
                f,
                "cannot check {name}: it answered UNIMPLEMENTED, so it serves no gRPC health service (grpc.health.v1.Health, asked for service {service:?}); serve it, or check it by `path`. Treating {name} as not serving"
            ),
            Event::RequestFailed { name, failure, .. } => write!(f, "{name}: {failure}"),
            Event::Retried {
                name,
                extra,
                by,
                status,
                ..
            } => {
                let by = by.as_deref().unwrap_or("another backend");
                match extra {
                    Extra::Repeated => write!(f, "{name}: an attempt failed, repeated on {by}")?,
                    Extra::HedgeWon => write!(
                        f,
                        "{name}: an attempt outlasted the per-try timeout its peers give, {by} answered first"
                    )?,
                    Extra::HedgeLost => write!(
                        f,
                        "{name}: an attempt outlasted the per-try timeout its peers give, and answered before its hedge"
                    )?,
                }
                match status {
                    Some(status) => write!(f, ": the user got {status}"),
                    None => f.write_str(": the user got no answer"),
                }
            }
            Event::RetryBudget(BudgetNews::Spent { refused }) => write!(
                f,
                "retry budget spent: {refused} requests got no retry advice; extra attempts are held to retries.budget_percent of the requests plus retries.min_per_second, and past that a 5xx reaches its user"
            ),
            Event::RetryBudget(BudgetNews::StillSpent { refused }) => {
                write!(f, "retry budget still spent: {refused} more requests got no retry advice")
            }
            Event::RetryBudget(BudgetNews::Available) => f.write_str(
                "retry budget available again: a 5xx of a backend failing alone is repeated on its peers",
            ),
            Event::EjectionStarted {
                name,
                length,
                reason,
                ..
            } => write!(
                f,
                "{name} ejected for {}: {reason}",
                duration::display(*length)
            ),
            Event::CapReached { name, reason } => write!(
                f,
                "{name} stays in rotation although {reason}: max_ejection_percent reached"
            ),
            Event::CapLifted { name, length, .. } => write!(
                f,
                "{name} ejected for {}: the ejection max_ejection_percent held back takes effect",
                duration::display(*length)
            ),
            Event::EjectionEnded {
                name,
                outlier: true,
            } => write!(f, "{name} no longer ejected: its ejection ended"),
            Event::EjectionEnded {
                name,
                outlier: false,
            } => write!(f, "{name} no longer ejected: its failures expired"),
            Event::ContactChanged { name, accepting } => {
                if *accepting {
                    write!(f, "{name} accepts connections again")
                } else {
                    write!(f, "{name} refuses connections: nothing is serving")
                }
            }
            Event::InService {
                name, in_service, ..
            } => {
                if *in_service {
                    write!(f, "{name} takes traffic")
                } else {
                    write!(f, "{name} out of service")
                }
            }
            Event::DrainStarted { name, drain, .. } => {
                write!(f, "{name} draining, no new requests: {}", drain.by)
            }
            Event::DrainEnded {
                name, by, lasted, ..
            } => {
                let why = match by {
                    Signal::Operator => "the configuration no longer drains it",
                    Signal::Watch => "it serves again (its Watch or its Check said SERVING)",
                    _ => "a probe passed without the signal",
                };
                write!(
                    f,
                    "{name} no longer draining: {why} (it drained for {}, since {by})",
                    duration::display(*lasted)
                )
            }
            Event::Watch { name, news, .. } => match news {
                WatchNews::Pushed(serving) => {
                    write!(f, "{name} said {} on its Watch", serving.name())
                }
                WatchNews::Ended(code) => write!(
                    f,
                    "{name}: its Watch ended ({code}); opened again after a backoff, its Check covering it meanwhile"
                ),
                WatchNews::Unimplemented => write!(
                    f,
                    "{name} does not implement {}/{} (it answered UNIMPLEMENTED): its Check covers it on the interval, and the Watch is tried again every {}",
                    health::SERVICE,
                    health::WATCH,
                    duration::display(watch::MAX_WAIT)
                ),
                WatchNews::Refused(why) => {
                    write!(f, "{name}: its Watch sent {why}; opened again")
                }
                WatchNews::NotOpened(why) => write!(
                    f,
                    "{name}: the proxy would not open its Watch ({why}); tried again after a backoff, its Check covering it meanwhile"
                ),
            },
            Event::Guard(Guard::Off) => f.write_str("pool guard released"),
            Event::Guard(guard) => write!(f, "pool guard engaged: {guard}"),
            Event::ProbeContradicted { name, outcome } => write!(
                f,
                "{name} stays as it was: its probe {outcome} while its pages answer"
            ),
            Event::BackAlike {
                name,
                peers,
                failing,
                outcome,
            } => {
                let kind = match outcome {
                    ProbeOutcome::Timeout(_) => "timeout".to_owned(),
                    other => other.to_string(),
                };
                let whose = |names: &[String]| {
                    let names: Vec<String> = names.iter().map(|p| format!("{p}'s")).collect();
                    names.join(" and ")
                };
                if peers.is_empty() {
                    write!(
                        f,
                        "{name} back in rotation: its probes failed ({kind}) while its pages answered"
                    )?;
                } else {
                    write!(
                        f,
                        "{name} back in rotation: its probes and {} fail alike ({kind}) while pages answer",
                        whose(peers)
                    )?;
                }
                if !failing.is_empty() {
                    write!(f, "; {} pages fail", whose(failing))?;
                }
                Ok(())
            }
        }
    }
}

/// Everything one observation asks of the adapter.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[must_use = "effects are carried out (host::carry_out), or they are lost"]
pub struct Effects {
    /// What happened, in order.
    pub events: Vec<Event>,
    /// Changes for the process-wide passive table, to apply by compare-and-swap in order; each
    /// written table goes back in through [`crate::pool::Pool::passive_written`].
    pub share: Vec<PassiveChange>,
    /// Backends (by position) to probe now.
    pub probes: Vec<usize>,
    /// Whether the probe table must be published now (the prober's, after a change others
    /// must see at once).
    pub publish_active: bool,
    /// What this balancer asks of etcd, in order: calls to send, the watch to open or cancel
    /// ([`crate::etcd`]); what came of each goes back in through the pool.
    pub etcd: Vec<ToEtcd>,
    /// Whether what the fleet of balancers looks like from here changed, so its gauges and the
    /// status page's record are to be shown again ([`crate::pool::Pool::fleet_shown`]).
    pub show_fleet: bool,
    /// gRPC backends' health `Watch` streams to open or cancel, in order
    /// ([`crate::grpc::watch`]); what came of each opening goes back in through the pool.
    pub health_watches: Vec<WatchCall>,
}

impl Effects {
    /// Appends `other`'s effects after these.
    pub fn extend(&mut self, other: Effects) {
        self.events.extend(other.events);
        self.share.extend(other.share);
        self.probes.extend(other.probes);
        self.publish_active |= other.publish_active;
        self.etcd.extend(other.etcd);
        self.show_fleet |= other.show_fleet;
        self.health_watches.extend(other.health_watches);
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
            && self.share.is_empty()
            && self.probes.is_empty()
            && !self.publish_active
            && self.etcd.is_empty()
            && !self.show_fleet
            && self.health_watches.is_empty()
    }
}
