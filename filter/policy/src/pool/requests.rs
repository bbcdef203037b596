//! Real requests: each routed one tracked while in flight, each outcome counted in this VM's
//! traffic, and shared (for the passive checks and the outlier rules) only when it changes
//! something, so the common success costs no clock read and no shared-data write. An answer
//! carrying the drain signal is shared as the backend's drain, and the outcomes of a draining
//! backend's requests count nowhere ([`crate::drain`]).

use super::{Pool, Retried, Routed};
use crate::drain::Signal;
use crate::events::{Effects, Event};
use crate::outcome::{Contact, FailureKind, RequestOutcome};
use crate::retry::{Advice, Extra};
use crate::tables::{PassiveChange, RequestNews};
use crate::time::Time;
use std::time::Duration;

impl<H> Pool<H> {
    /// A request `id` was sent to backend `index` at `now` (when requests are timed; otherwise,
    /// when outliers are detected, it is taken to have started at the latest tick): what the
    /// request is to carry until it settles, and the retry advice the proxy is to carry out for
    /// it: some when it is `repeatable` (a GET or a HEAD) and requests get advice
    /// ([`Pool::advises_retries`]).
    pub fn request_routed(
        &mut self,
        id: u32,
        index: usize,
        now: Option<Time>,
        repeatable: bool,
    ) -> (Routed, Advice) {
        let started = now.or_else(|| self.detects_outliers().then_some(self.clock.at));
        let advice = match repeatable && self.advises_retries() {
            true => self.advise(index),
            false => Advice::default(),
        };
        let routed = Routed {
            index,
            generation: self.numbering.generation,
            flight: started.and_then(|started| self.outstanding.begin(id, index, started)),
            timed: advice.try_timeout_ms,
        };
        (routed, advice)
    }

    /// Request `id`, sent as `picked`, has its response headers and waits for its trailers to
    /// say how it went (a gRPC call): it waits on its backend no longer
    /// ([`crate::passive::Outstanding::answered`]).
    pub fn request_answered(&mut self, id: u32, picked: Routed) {
        if let Some(flight) = picked.flight {
            self.outstanding.answered(id, flight);
        }
    }

    /// Request `id`, sent to backend `picked`, ended with `outcome`: what to carry out, `None`
    /// where there is nothing (a quiet success, the common case, or a backend no longer
    /// configured), so that such a request makes no effects to hand back and drop. When the proxy
    /// retried it ([`Retried::Yes`]), the picked backend's attempt failed, and `outcome` belongs to
    /// the backend that gave the final answer. `now` is read only if the outcome changes anything.
    pub fn request_ended(
        &mut self,
        id: u32,
        picked: Routed,
        retried: Retried,
        outcome: RequestOutcome,
        now: impl Fn() -> Time,
    ) -> Option<Effects> {
        let ended = picked
            .flight
            .and_then(|flight| self.outstanding.end(id, flight));
        if let (
            Retried::No,
            RequestOutcome::Answered {
                status, latency, ..
            },
        ) = (retried, outcome)
        {
            if self.settle_quiet(picked, ended, status, latency) {
                return None;
            }
        }
        // A backend removed meanwhile, or a request from two configurations ago: its outcome
        // belongs to no backend this pool knows by that position.
        let timed = picked.timed;
        let picked = self.current(picked)?;
        let mut effects = Effects::default();
        // A request counted when it became late is not counted again when it ends (though the
        // outlier rules take its outcome).
        let counted_late = ended.is_some_and(|(_, late)| late);
        let (first, extra) = match retried {
            Retried::No => (outcome, None),
            // A hedge the first attempt won: its backend answered, slowly.
            Retried::Yes { final_answer } if final_answer == Some(picked) => {
                (outcome, Some(Extra::HedgeLost))
            }
            Retried::Yes { .. } => {
                let waited = |ms: u32| {
                    ended.is_some_and(|(started, _)| {
                        now().saturating_sub(started) >= Duration::from_millis(u64::from(ms))
                    })
                };
                match timed {
                    Some(ms) if waited(ms) => {
                        (RequestOutcome::RetriedOnAdvice, Some(Extra::HedgeWon))
                    }
                    _ => (RequestOutcome::RetriedElsewhere, Some(Extra::Repeated)),
                }
            }
        };
        if let (Some(extra), Retried::Yes { final_answer }) = (extra, retried) {
            self.spend_retry(picked, extra, final_answer, outcome, &mut effects);
        }
        let latency = match first {
            RequestOutcome::Answered { latency, .. } if self.times_requests() => Some(latency),
            RequestOutcome::Answered { .. } => {
                ended.map(|(started, _)| self.clock.at.saturating_sub(started))
            }
            _ => None,
        };
        let passive = if counted_late {
            Counting::CountedLate
        } else {
            Counting::Counts
        };
        self.settle_lazily(picked, first, passive, latency, &now, &mut effects);
        if let Retried::Yes {
            final_answer: Some(other),
        } = retried
        {
            if other != picked {
                // The request's latency is both attempts': the final one's own is not known.
                let latency = None;
                self.settle_lazily(
                    other,
                    outcome,
                    Counting::Counts,
                    latency,
                    &now,
                    &mut effects,
                );
            }
        }
        Some(effects)
    }

    /// Settles a request answered `status` after `latency` (zero when not timed), which ended
    /// as `ended` says, if it is a quiet success: an answer the passive checks do not count, at
    /// a backend known to serve, not on a run of failures and not draining, so that it changes
    /// nothing shared and only this VM's traffic counts it ([`Pool::settle_lazily`] would come
    /// to the same, by the general way). Whether it was.
    fn settle_quiet(
        &mut self,
        picked: Routed,
        ended: Option<(Time, bool)>,
        status: u16,
        latency: Duration,
    ) -> bool {
        let passive = &self.config.health_checks.passive;
        let outlier = &self.config.health_checks.outlier;
        let late = passive.unhealthy_latency.is_some_and(|l| latency >= l);
        if status >= 500 || late || passive.unhealthy_status.contains(status) {
            return false;
        }
        let Some(index) = self.current(picked) else {
            return false;
        };
        let Some(m) = self.members.get_mut(index) else {
            return false;
        };
        let evidence = &m.evidence;
        if evidence.draining() || evidence.passive.run > 0 || !evidence.accepting() {
            return false;
        }
        if outlier.enabled {
            let latency = match (passive.unhealthy_latency, ended) {
                (Some(_), _) => Some(latency),
                (None, Some((started, _))) if started == self.clock.at => Some(Duration::ZERO),
                (None, Some((started, _))) => Some(self.clock.at.saturating_sub(started)),
                (None, None) => None,
            };
            m.counts
                .own
                .record_at(self.clock.window, self.clock.at, None, latency);
        }
        true
    }

    /// Where the backend a request was routed to is now, if it is still configured.
    pub(super) fn current(&self, routed: Routed) -> Option<usize> {
        if routed.generation == self.numbering.generation {
            Some(routed.index)
        } else if routed.generation.wrapping_add(1) == self.numbering.generation {
            self.numbering
                .renumbered
                .get(routed.index)
                .copied()
                .flatten()
        } else {
            None
        }
    }

    /// Whether backend `index` drains, as this VM knows.
    pub(super) fn draining(&self, index: usize) -> bool {
        self.members
            .get(index)
            .is_some_and(|m| m.evidence.draining())
    }

    /// Settles one outcome unless it changes nothing shared (a success at a backend known to
    /// be serving and not on a run of failures): the common case costs no clock read and no
    /// shared-data write, only this VM's count. `latency`: how long its answer took, if known.
    pub(super) fn settle_lazily(
        &mut self,
        index: usize,
        outcome: RequestOutcome,
        passive: Counting,
        latency: Option<Duration>,
        now: &impl Fn() -> Time,
        effects: &mut Effects,
    ) {
        if self.draining(index) {
            return; // a draining backend's requests finish without counting
        }
        if outcome == RequestOutcome::Drained {
            if let Some(m) = self.members.get(index) {
                effects.share.push(PassiveChange::Drain {
                    key: m.key.clone(),
                    at: now(),
                    by: Signal::ResponseHeader,
                });
            }
            return;
        }
        let outlier = self.count_outcome(index, outcome, latency);
        let Some(m) = self.members.get(index) else {
            return;
        };
        let counts = passive == Counting::Counts
            && outcome
                .failure(&self.config.health_checks.passive)
                .is_some();
        let changes_contact = passive == Counting::Counts
            && outcome
                .contact()
                .is_some_and(|found| (found == Contact::Refused) == m.evidence.accepting());
        if counts || changes_contact || outlier != ForOutliers::Nothing {
            self.settle(index, outcome, passive, outlier, now(), effects);
        }
    }

    /// Counts an outcome in this VM's traffic for backend `index`; returns what it is to the
    /// shared run of failures.
    pub(super) fn count_outcome(
        &mut self,
        index: usize,
        outcome: RequestOutcome,
        latency: Option<Duration>,
    ) -> ForOutliers {
        let config = &self.config.health_checks.outlier;
        let Some(m) = self.members.get_mut(index) else {
            return ForOutliers::Nothing;
        };
        if !config.enabled || !outcome.judged() {
            return ForOutliers::Nothing;
        }
        let kind = outcome.outlier_failure();
        m.counts
            .own
            .record_at(self.clock.window, self.clock.at, kind, latency);
        match kind {
            Some(kind) => ForOutliers::Failure(kind),
            None if m.evidence.passive.run > 0 => ForOutliers::EndsRun,
            None => ForOutliers::Nothing,
        }
    }

    /// Shares one outcome: for the passive checks if they count it, and for the outlier rules if
    /// it is news to them (a failure is judged here and now, with this VM's view of its peers).
    pub(super) fn settle(
        &mut self,
        index: usize,
        outcome: RequestOutcome,
        passive: Counting,
        outlier: ForOutliers,
        at: Time,
        effects: &mut Effects,
    ) {
        let outlier = match outlier {
            ForOutliers::Nothing => None,
            ForOutliers::Failure(kind) => Some(self.outlier_news(index, Some(kind), at)),
            ForOutliers::EndsRun => Some(self.outlier_news(index, None, at)),
        };
        let Some(m) = self.members.get(index) else {
            return;
        };
        let failure = outcome
            .failure(&self.config.health_checks.passive)
            .filter(|_| passive == Counting::Counts);
        if let Some(failure) = failure {
            effects.events.push(Event::RequestFailed {
                index,
                name: m.name().to_owned(),
                failure,
            });
        }
        effects.share.push(PassiveChange::Request(RequestNews {
            key: m.key.clone(),
            at,
            contact: outcome.contact().filter(|_| passive == Counting::Counts),
            failure,
            outlier,
        }));
    }
}

/// Whether the passive checks take a request's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counting {
    /// They count it.
    Counts,
    /// They counted it already, when it became `unhealthy_latency` late.
    CountedLate,
}

/// What a request's outcome is to the outlier rules' run of failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ForOutliers {
    /// Nothing: they are off or do not judge it, or it is a success with no run to end.
    Nothing,
    /// A failure of this kind, judged at once.
    Failure(FailureKind),
    /// A success that ends the backend's run of failures.
    EndsRun,
}
