//! The passive table: every backend's remembered request failures, last contact and outlier
//! record (traffic counts, run of failures, standing), changed by compare-and-swap from whichever
//! VM saw the request, so one failure on worker A and two on worker B are three. A change is a
//! value ([`PassiveChange`]) applied to the table as read; the adapter only retries the swap, so
//! a decision made while applying (an ejection by the run rule) is atomic.

use super::bytes::{decode, encode, TableError, PASSIVE};
use crate::drain::{Drain, Signal};
use crate::outcome::{Contact, Failure, FailureKind};
use crate::outlier::{Ejection, RunRule, Standing, Traffic, Verdict};
use crate::passive::{LastContact, PassiveHealth, Recorded, Remembered};
use crate::time::Time;
use upcheck_config::{HealthChecks, MAX_FAILS_LIMIT};

/// Passive state by backend key.
pub type PassiveTable = Vec<(String, PassiveHealth)>;

/// The passive table's bytes.
pub fn encode_passive(table: &PassiveTable) -> Vec<u8> {
    encode(PASSIVE, table)
}

/// Reads what [`encode_passive`] wrote.
pub fn decode_passive(bytes: &[u8]) -> Result<PassiveTable, TableError> {
    let table: PassiveTable = decode(PASSIVE, bytes)?;
    let limit = usize::try_from(MAX_FAILS_LIMIT).unwrap_or(usize::MAX);
    if table.iter().any(|(_, p)| p.failures.len() > limit) {
        return Err(TableError("more failures than any max_fails"));
    }
    Ok(table)
}

/// A change to the process-wide passive table, made by one VM and applied to the table as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassiveChange {
    /// One request's news about its backend.
    Request(RequestNews),
    /// One VM's request outcomes since it last shared them, per backend key: added to the shared
    /// counts, once a tick, so every VM judges on the whole process's traffic.
    Traffic(Vec<(String, Traffic)>),
    /// An outlier ejection one VM's judgment at a tick decided (unless another VM's already
    /// ejected the backend).
    Eject {
        /// The backend's key.
        key: String,
        /// When it was judged.
        at: Time,
        /// Why.
        verdict: Verdict,
    },
    /// A backend's answer said it drains (kept as first signalled while it lasts).
    Drain {
        /// The backend's key.
        key: String,
        /// When the signal was read.
        at: Time,
        /// What said so.
        by: Signal,
    },
    /// Failures the other balancers of the fleet counted at a backend ([`crate::etcd`]): each
    /// not remembered yet is remembered as this process's own are.
    Fleet {
        /// The backend's key.
        key: String,
        /// When they happened, and what each is about.
        failures: Vec<Remembered>,
    },
    /// An outlier ejection another balancer of the fleet decided and shares ([`crate::etcd`]),
    /// held here until its end unless one is in force already.
    Adopt {
        /// The backend's key.
        key: String,
        /// When it was read.
        at: Time,
        /// The deciding balancer's lease.
        by: i64,
        /// Its standing of the backend, with the ejection in force.
        standing: Standing,
    },
    /// A probe sent at `sent` passed without the signal: a drain signalled before then is over.
    Drained {
        /// The backend's key.
        key: String,
        /// When the passing probe was sent.
        sent: Time,
    },
}

/// One request's news for the process-wide passive table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestNews {
    /// The backend's key.
    pub key: String,
    /// When it happened.
    pub at: Time,
    /// What the request found of the backend, when it says.
    pub contact: Option<Contact>,
    /// The failure to remember, if it counted.
    pub failure: Option<Failure>,
    /// What it means for the outlier rules, when it changes anything there.
    pub outlier: Option<OutlierNews>,
}

/// A request's news for the outlier rules: a failure, or a success that ends a run of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutlierNews {
    /// How it failed; `None` for a success.
    pub failure: Option<FailureKind>,
    /// The run rule as the settling VM saw it: the run is counted in the shared table, so the
    /// ejection it calls for is decided as the change is applied, atomically.
    pub run: Option<RunRule>,
    /// The verdict the settling VM reached on the backend's share of failures, if any.
    pub verdict: Option<Verdict>,
}

/// What applying a change did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// The request failure it recorded, and whether that filled the failure window.
    pub failure: Option<(Failure, Recorded)>,
    /// The outlier ejection it started: why, and until when.
    pub ejection: Option<(Verdict, Ejection)>,
    /// Whether it started a backend's drain.
    pub drain_started: bool,
}

impl Applied {
    /// Whether the change took its backend out: a failure that filled the window, an outlier
    /// ejection, or the start of a drain. Every other VM must hear of that before its next pick,
    /// not at its next tick, or a worker that has seen no failure of its own sends the backend
    /// one more user (a draining one, a call it would refuse).
    pub fn takes_out(&self) -> bool {
        matches!(self.failure, Some((_, Recorded::Filled { .. })))
            || self.ejection.is_some()
            || self.drain_started
    }
}

/// Backend `name`'s entry in `table`, added if it is not there yet.
fn entry_mut<'a>(table: &'a mut PassiveTable, key: &str) -> Option<&'a mut PassiveHealth> {
    let at = match table.iter().position(|(k, _)| k == key) {
        Some(at) => at,
        None => {
            table.push((key.to_owned(), PassiveHealth::default()));
            table.len() - 1
        }
    };
    table.get_mut(at).map(|(_, health)| health)
}

impl PassiveChange {
    /// The backend it is about, if one.
    pub fn key(&self) -> Option<&str> {
        match self {
            PassiveChange::Request(news) => Some(&news.key),
            PassiveChange::Traffic(_) => None,
            PassiveChange::Eject { key, .. }
            | PassiveChange::Drain { key, .. }
            | PassiveChange::Fleet { key, .. }
            | PassiveChange::Adopt { key, .. }
            | PassiveChange::Drained { key, .. } => Some(key),
        }
    }

    /// Applies the change to `table` (adding backends it does not have yet).
    pub fn apply(&self, table: &mut PassiveTable, checks: &HealthChecks) -> Applied {
        let mut applied = Applied::default();
        match self {
            PassiveChange::Request(news) => {
                let Some(health) = entry_mut(table, &news.key) else {
                    return applied;
                };
                if let Some(found) = news.contact {
                    health.contact(LastContact { at: news.at, found });
                }
                if let Some(failure) = news.failure {
                    let recorded = health.record(news.at, failure.about(), &checks.passive);
                    applied.failure = Some((failure, recorded));
                }
                if let Some(outlier) = &news.outlier {
                    applied.ejection = outlier.apply(health, news.at, checks);
                }
            }
            PassiveChange::Traffic(deltas) => {
                for (key, delta) in deltas {
                    if let Some(health) = entry_mut(table, key) {
                        health.traffic.merge(delta);
                    }
                }
            }
            PassiveChange::Eject { key, at, verdict } => {
                if let Some(health) = entry_mut(table, key) {
                    if !health.outlier.is_ejected(*at) {
                        let ejection = health.outlier.eject(verdict.clone(), *at, &checks.outlier);
                        applied.ejection = Some((verdict.clone(), ejection));
                    }
                }
            }
            PassiveChange::Drain { key, at, by } => {
                if let Some(health) = entry_mut(table, key) {
                    applied.drain_started = health.drain.is_none();
                    health.drain.get_or_insert(Drain {
                        since: *at,
                        by: *by,
                    });
                }
            }
            PassiveChange::Fleet { key, failures } => {
                if let Some(health) = entry_mut(table, key) {
                    for failure in failures {
                        if !health.remembers(failure.at) {
                            health.record(failure.at, failure.about, &checks.passive);
                        }
                    }
                }
            }
            PassiveChange::Adopt {
                key, at, standing, ..
            } => {
                if let (Some(health), Some((verdict, _))) =
                    (entry_mut(table, key), standing.in_force(*at))
                {
                    let adopted = health.outlier.adopt(standing, *at);
                    applied.ejection = adopted.map(|e| (verdict.clone(), e));
                }
            }
            PassiveChange::Drained { key, sent } => {
                if let Some(health) = entry_mut(table, key) {
                    if health.drain.is_some_and(|d| d.since <= *sent) {
                        health.drain = None;
                    }
                }
            }
        }
        applied
    }
}

impl OutlierNews {
    /// Counts the outcome in the backend's run and ejects it if the share verdict or the run
    /// rule says so and it is not ejected already.
    fn apply(
        &self,
        health: &mut PassiveHealth,
        at: Time,
        checks: &HealthChecks,
    ) -> Option<(Verdict, Ejection)> {
        let Some(kind) = self.failure else {
            health.run = 0;
            return None;
        };
        health.run = health.run.saturating_add(1);
        if health.outlier.is_ejected(at) {
            return None;
        }
        let verdict = self
            .verdict
            .clone()
            .or_else(|| self.run.and_then(|rule| rule.verdict(health.run, kind)))?;
        let ejection = health.outlier.eject(verdict.clone(), at, &checks.outlier);
        Some((verdict, ejection))
    }
}
