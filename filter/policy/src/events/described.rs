//! What each event is to its readers, said once per kind of event: how loud its log line is, the
//! change it records in the history, and what it moves in the metrics. A new kind of event is
//! described here, and its log line's text in its `Display`; the history and the adapter's
//! metrics read the description, never the event.

use super::{EjectionReason, Event, WatchNews};
use crate::history::Kind;
use crate::level::Level;
use crate::outlier::Verdict;
use crate::retry::{BudgetNews, Extra};
use crate::state::State;
use crate::time::Time;
use std::time::Duration;

/// What an event is to each of its readers, said once per kind of event ([`Event::described`]):
/// how loud its log line is, the change it records in the history if it is one, and what it
/// moves in the metrics. Its log line's text is its `Display`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Described<'a> {
    /// How loud its log line is.
    pub level: Level,
    /// The change it records in the history, if it is one. Probes, failed requests, gauges and
    /// the cap keeping a backend in are not changes: they are in the log and the metrics.
    pub change: Option<InHistory<'a>>,
    /// What it moves in the metrics.
    pub counted: Counted<'a>,
}

/// A change an event records in the history ([`crate::history`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InHistory<'a> {
    /// What changed.
    pub kind: Kind,
    /// The backend it is about, by name; `None` for the pool guard.
    pub backend: Option<&'a str>,
}

/// What an event moves in the metrics: backend `index`'s, or the pool's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Counted<'a> {
    /// Nothing.
    Nothing,
    /// A probe's latency, and a probe failure when it did not pass.
    Probe {
        /// The backend.
        index: usize,
        /// How long its answer took.
        latency: Duration,
        /// Whether it failed.
        failed: bool,
    },
    /// The state gauges, and a state change when it changed.
    State {
        /// The backend.
        index: usize,
        /// Its state.
        state: State,
        /// Since when.
        since: Time,
        /// Whether it changed (else it is reported afresh).
        change: bool,
    },
    /// A request failure.
    RequestFailure {
        /// The backend.
        index: usize,
    },
    /// An extra attempt for a request first sent to this backend ([`crate::retry`]).
    Retried {
        /// The backend of the first attempt.
        index: usize,
        /// What became of that attempt.
        extra: Extra,
        /// Whether its user got an answer that is no 5xx.
        recovered: bool,
    },
    /// Requests the retry budget withheld their advice from.
    RetriesRefused {
        /// How many.
        requests: u32,
    },
    /// An ejection that took effect, and the outlier rule that found it, if one did.
    Ejection {
        /// The backend.
        index: usize,
        /// The outlier rule's verdict, for an outlier ejection decided here.
        outlier: Option<&'a Verdict>,
    },
    /// Whether it is in service.
    InService {
        /// The backend.
        index: usize,
        /// Whether it is.
        in_service: bool,
    },
    /// Whether it drains.
    Draining {
        /// The backend.
        index: usize,
        /// Whether it does.
        draining: bool,
    },
    /// Whether the pool guard is engaged.
    Guard {
        /// Whether it is.
        engaged: bool,
    },
}

impl Event {
    /// What the event is to the log, the history and the metrics: the one place each kind of
    /// event is described.
    pub fn described(&self) -> Described<'_> {
        let (level, change, counted) = match self {
            Event::Probing => (Level::Info, None, Counted::Nothing),
            Event::Probed {
                index,
                outcome,
                latency,
                ..
            } => (
                Level::Debug,
                None,
                Counted::Probe {
                    index: *index,
                    latency: *latency,
                    failed: !outcome.passed(),
                },
            ),
            Event::State {
                index,
                state,
                since,
                change,
                ..
            } => (
                Level::Debug,
                None,
                Counted::State {
                    index: *index,
                    state: *state,
                    since: *since,
                    change: *change,
                },
            ),
            Event::HealthChanged { name, from, to, .. } => (
                Level::Info,
                recorded(
                    Kind::Health {
                        from: *from,
                        to: *to,
                    },
                    name,
                ),
                Counted::Nothing,
            ),
            Event::Unprobeable { .. } | Event::NoHealthService { .. } => {
                (Level::Error, None, Counted::Nothing)
            }
            Event::RequestFailed { index, .. } => (
                Level::Debug,
                None,
                Counted::RequestFailure { index: *index },
            ),
            Event::Retried {
                index,
                extra,
                status,
                ..
            } => (
                Level::Debug,
                None,
                Counted::Retried {
                    index: *index,
                    extra: *extra,
                    recovered: status.is_some_and(|s| s < 500),
                },
            ),
            Event::RetryBudget(news) => (
                match news {
                    BudgetNews::Spent { .. } => Level::Warn,
                    BudgetNews::StillSpent { .. } => Level::Debug,
                    BudgetNews::Available => Level::Info,
                },
                None,
                Counted::RetriesRefused {
                    requests: news.refused(),
                },
            ),
            Event::EjectionStarted {
                index,
                name,
                reason,
                ..
            } => (
                Level::Info,
                recorded(Kind::Ejected, name),
                Counted::Ejection {
                    index: *index,
                    outlier: match reason {
                        EjectionReason::Outlier(verdict) => Some(verdict),
                        _ => None,
                    },
                },
            ),
            Event::CapReached { .. } => (Level::Warn, None, Counted::Nothing),
            Event::CapLifted { index, name, .. } => (
                Level::Info,
                recorded(Kind::Ejected, name),
                Counted::Ejection {
                    index: *index,
                    outlier: None,
                },
            ),
            Event::EjectionEnded { name, .. } => (
                Level::Info,
                recorded(Kind::NoLongerEjected, name),
                Counted::Nothing,
            ),
            Event::ContactChanged { name, accepting } => {
                let kind = match accepting {
                    true => Kind::Accepting,
                    false => Kind::Refusing,
                };
                (Level::Info, recorded(kind, name), Counted::Nothing)
            }
            Event::InService {
                index, in_service, ..
            } => (
                Level::Debug,
                None,
                Counted::InService {
                    index: *index,
                    in_service: *in_service,
                },
            ),
            Event::Guard(guard) => {
                let engaged = guard.engaged();
                let (level, kind) = match engaged {
                    true => (Level::Warn, Kind::GuardEngaged),
                    false => (Level::Info, Kind::GuardReleased),
                };
                let change = Some(InHistory {
                    kind,
                    backend: None,
                });
                (level, change, Counted::Guard { engaged })
            }
            Event::ProbeContradicted { .. } => (Level::Info, None, Counted::Nothing),
            Event::BackAlike { name, .. } => (
                Level::Warn,
                recorded(Kind::BackAlike, name),
                Counted::Nothing,
            ),
            Event::DrainStarted { index, name, .. } => (
                Level::Info,
                recorded(Kind::Draining, name),
                Counted::Draining {
                    index: *index,
                    draining: true,
                },
            ),
            Event::DrainEnded { index, name, .. } => (
                Level::Info,
                recorded(Kind::NoLongerDraining, name),
                Counted::Draining {
                    index: *index,
                    draining: false,
                },
            ),
            Event::Fleet(note) => (note.level, None, Counted::Nothing),
            Event::Watch { news, .. } => {
                let level = match news {
                    WatchNews::Pushed(_) | WatchNews::Ended(_) | WatchNews::NotOpened(_) => {
                        Level::Debug
                    }
                    WatchNews::Unimplemented => Level::Info,
                    WatchNews::Refused(_) => Level::Warn,
                };
                (level, None, Counted::Nothing)
            }
        };
        Described {
            level,
            change,
            counted,
        }
    }

    /// How loud its log line is.
    pub fn level(&self) -> Level {
        self.described().level
    }
}

/// A change about backend `name`.
fn recorded(kind: Kind, name: &str) -> Option<InHistory<'_>> {
    Some(InHistory {
        kind,
        backend: Some(name),
    })
}
