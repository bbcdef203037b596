//! The retry advice's part of the pool ([`crate::retry`]): each backend's plan worked out at each
//! tick from the counts the outlier rules keep, and a request's advice read from it under the
//! budget, so that the request path compares nothing.

use super::peers::view;
use super::{Member, Pool};
use crate::events::{Effects, Event};
use crate::outcome::RequestOutcome;
use crate::outlier::odd_one_out;
use crate::outlier::Traffic;
use crate::retry::{Advice, Extra, Grounds, Plan, Spent};
use crate::time::Time;
use crate::warm_up::warming;
use upcheck_config::{Config, RoutingMode};

impl<H> Pool<H> {
    /// Whether requests get retry advice at all: retries on, in host routing (in cluster
    /// routing a route names one backend, and the proxy's retry would go back to it).
    #[inline(always)]
    pub fn advises_retries(&self) -> bool {
        self.config.retries.enabled && self.config.routing == RoutingMode::Host
    }

    /// Works every backend's plan out again at `now`: its grounds among its peers, and the
    /// per-try timeout their latency gives.
    pub(super) fn plan_retries(&mut self, now: Time, spent: Spent, effects: &mut Effects) {
        if !self.advises_retries() {
            return;
        }
        let peers = self.all_peers();
        let guarded = self.layout.guard().engaged();
        let config = &self.config;
        let outlier = &config.health_checks.outlier;
        for (m, peers) in self.members.iter_mut().zip(peers) {
            let grounds = grounds(m, peers.as_ref(), guarded, config, now);
            let p99 = peers
                .as_ref()
                .and_then(|p| p.p99_upper(now, outlier.window));
            m.counts.retry = Advice::of(Plan::new(grounds, p99, &config.retries), &config.retries);
        }
        if let Some(news) = self.budget.tick(spent, outlier.window, &config.retries) {
            effects.events.push(Event::RetryBudget(news));
        }
    }

    /// Why backend `index`'s 5xx are repeated elsewhere or not, as of the latest tick; `None`
    /// when requests get no retry advice ([`Pool::advises_retries`]).
    pub fn retry_grounds(&self, index: usize) -> Option<Grounds> {
        self.members
            .get(index)
            .filter(|_| self.advises_retries())
            .map(|m| m.counts.retry.grounds)
    }

    /// A failure at backend `index` reached the process-wide table by `now`, and `peers` is the
    /// traffic of the others in rotation: its grounds are worked out again at once, so that the
    /// failure that makes it stand out from its peers has the next request's 5xx repeated, rather
    /// than the next tick's (up to 200 ms, several requests, later). The per-try timeout stays
    /// the tick's.
    pub(super) fn replan_retries(&mut self, index: usize, peers: Option<&Traffic>, now: Time) {
        if !self.advises_retries() {
            return;
        }
        let guarded = self.layout.guard().engaged();
        let config = &self.config;
        let Some(m) = self.members.get_mut(index) else {
            return;
        };
        let grounds = grounds(m, peers, guarded, config, now);
        let plan = Plan {
            grounds,
            try_timeout_ms: m.counts.retry.try_timeout_ms,
        };
        m.counts.retry = Advice::of(plan, &config.retries);
    }

    /// The advice for a request that is safe to repeat, routed to backend `index` (as of the
    /// latest tick): the backend's, within the budget; nothing past it.
    #[inline(always)]
    pub(super) fn advise(&mut self, index: usize) -> Advice {
        match self.members.get(index) {
            Some(m) if self.budget.allows() => m.counts.retry,
            _ => Advice::default(),
        }
    }

    /// The proxy made an extra attempt for a request first sent to backend `index` (a repeat or
    /// a hedge, as `extra` says), and `by` gave the answer, `outcome`: spent from the budget,
    /// counted in the backend's traffic for the process's budget, and reported.
    pub(super) fn spend_retry(
        &mut self,
        index: usize,
        extra: Extra,
        by: Option<usize>,
        outcome: RequestOutcome,
        effects: &mut Effects,
    ) {
        self.budget.spend();
        let by = by
            .filter(|by| *by != index)
            .and_then(|by| self.members.get(by))
            .map(|m| m.name().to_owned());
        let clock = self.clock.window;
        let Some(m) = self.members.get_mut(index) else {
            return;
        };
        m.counts.own.record_extra(clock);
        effects.events.push(Event::Retried {
            index,
            name: m.name().to_owned(),
            extra,
            by,
            status: match outcome {
                RequestOutcome::Answered { status, .. } => Some(status),
                _ => None,
            },
        });
    }

    /// The process's requests and extra attempts over the outlier window at the latest tick, as
    /// this VM knows them: the process-wide counts as last read, plus its own not yet shared.
    /// Taken before the tick shares its own.
    pub(super) fn retries_spent(&self) -> Spent {
        if !self.advises_retries() {
            return Spent::default();
        }
        let clock = self.clock.window;
        self.members.iter().fold(Spent::default(), |spent, m| {
            let (shared, own) = (&m.evidence.passive.traffic, &m.counts.own);
            Spent {
                requests: spent.requests + shared.requests_at(clock) + own.requests_at(clock),
                extra: spent.extra + shared.extra_at(clock) + own.extra_at(clock),
            }
        })
    }
}

/// Why backend `m`'s 5xx are repeated or not at `now`, with `peers` the traffic of the others in
/// rotation (`None`: it has none) and the pool guard `guarded` or not.
fn grounds<H>(
    m: &Member<H>,
    peers: Option<&Traffic>,
    guarded: bool,
    config: &Config,
    now: Time,
) -> Grounds {
    let outlier = &config.health_checks.outlier;
    match peers {
        _ if guarded => Grounds::Guarded,
        _ if m.evidence.draining() => Grounds::Draining,
        None => Grounds::Alone,
        Some(_) if warming(&config.health_checks.slow_start, &m.evidence.active, now).is_some() => {
            Grounds::Warming
        }
        Some(peers)
            if outlier.enabled
                && odd_one_out(&view(m), m.evidence.passive.run, peers, outlier, now) =>
        {
            Grounds::OddOneOut
        }
        Some(peers) if peers.failures(now, outlier.window) >= f64::from(outlier.min_failures) => {
            Grounds::Alike
        }
        Some(_) => Grounds::NoEvidence,
    }
}
