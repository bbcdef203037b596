//! The retry advice's part of the pool ([`crate::retry`]): each backend's plan worked out at each
//! tick from the counts the outlier rules keep, and a request's advice read from it under the
//! budget, so that the request path compares nothing.

use super::peers::view;
use super::Pool;
use crate::outlier::odd_one_out;
use crate::retry::{Advice, Grounds, Plan};
use crate::time::Time;
use crate::warm_up::warming;
use upcheck_config::RoutingMode;

impl<H> Pool<H> {
    /// Whether requests get retry advice at all: retries on, in host routing (in cluster
    /// routing a route names one backend, and the proxy's retry would go back to it).
    #[inline(always)]
    pub fn advises_retries(&self) -> bool {
        self.config.retries.enabled && self.config.routing == RoutingMode::Host
    }

    /// Works every backend's plan out again at `now`: its grounds among its peers, and the
    /// per-try timeout their latency gives.
    pub(super) fn plan_retries(&mut self, now: Time) {
        if !self.advises_retries() {
            return;
        }
        let peers = self.all_peers();
        let guarded = self.layout.guard().engaged();
        let config = &self.config;
        let outlier = &config.health_checks.outlier;
        for (m, peers) in self.members.iter_mut().zip(peers) {
            let grounds = match &peers {
                _ if guarded => Grounds::Guarded,
                _ if m.evidence.draining() => Grounds::Draining,
                None => Grounds::Alone,
                Some(_)
                    if warming(&config.health_checks.slow_start, &m.evidence.active, now)
                        .is_some() =>
                {
                    Grounds::Warming
                }
                Some(peers) if outlier.enabled && odd_one_out(&view(m), peers, outlier, now) => {
                    Grounds::OddOneOut
                }
                Some(peers)
                    if peers.failures(now, outlier.window) >= f64::from(outlier.min_failures) =>
                {
                    Grounds::Alike
                }
                Some(_) => Grounds::NoEvidence,
            };
            let p99 = peers
                .as_ref()
                .and_then(|p| p.p99_upper(now, outlier.window));
            m.counts.retry = Advice::of(Plan::new(grounds, p99, &config.retries), &config.retries);
        }
        let window = outlier.window;
        self.budget.tick(self.clock.window, window, &config.retries);
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

    /// The proxy made an extra attempt for a request (a repeat or a hedge).
    pub(super) fn spend_retry(&mut self) {
        self.budget.spend();
    }
}
