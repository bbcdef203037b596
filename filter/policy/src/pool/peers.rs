//! The outlier comparison: each backend's traffic set against its peers' (the other backends in
//! rotation, pooled), at every tick for all of them and at once for a backend whose request just
//! failed; and this VM's request counts handed to the process-wide ones.

use super::{Member, Pool};
use crate::events::Effects;
use crate::outcome::FailureKind;
use crate::outlier::{judge, run_rule, Traffic, WindowClock};
use crate::tables::{OutlierNews, PassiveChange};
use crate::time::Time;

impl<H> Pool<H> {
    /// Hands this VM's outcomes since the last tick to the process-wide counts, in one change.
    pub(super) fn share_traffic(&mut self, effects: &mut Effects) {
        let deltas: Vec<(String, Traffic)> = self
            .members
            .iter_mut()
            .filter(|m| !m.counts.own.is_empty())
            .map(|m| (m.key.clone(), std::mem::take(&mut m.counts.own)))
            .collect();
        if !deltas.is_empty() {
            effects.share.push(PassiveChange::Traffic(deltas));
        }
    }

    /// Judges every backend in rotation against its peers, with its requests in flight here:
    /// the tick is when a stalled backend shows (its requests do not end).
    pub(super) fn judge_outliers(&mut self, now: Time, effects: &mut Effects) {
        // Nobody can be judged before the backends in rotation have `min_requests` requests
        // between them (every rule needs the peers to have had that many): a quiet pool, of any
        // size, costs a sum per tick, not a comparison per backend.
        let config = &self.config.health_checks.outlier;
        let clock = WindowClock::new(now, config.window);
        let requests: f64 = self
            .members
            .iter()
            .filter(|m| m.routable)
            .map(|m| {
                let here = m.evidence.passive.traffic.requests_at(clock);
                here + m.counts.own.requests_at(clock) + m.counts.fleet.requests_at(clock)
            })
            .sum();
        if requests < f64::from(config.min_requests) {
            return;
        }
        let peers = self.all_peers();
        for ((index, m), peers) in self.members.iter().enumerate().zip(peers) {
            let (true, Some(peers)) = (m.routable, peers) else {
                continue;
            };
            let starts = self.outstanding.starts(index);
            let traffic = view(m);
            let standing = &m.evidence.passive.outlier;
            let config = &self.config.health_checks.outlier;
            if let Some(verdict) = judge(&traffic, standing, &starts, [&peers], config, now) {
                effects.share.push(PassiveChange::Eject {
                    key: m.key.clone(),
                    at: now,
                    verdict,
                });
            }
        }
    }

    /// For every backend, the process-wide traffic of the others in rotation, pooled (`None`
    /// when it has no peer in rotation), in O(N) merges rather than O(N²): what precedes each
    /// and what follows it are accumulated once each.
    pub(super) fn all_peers(&self) -> Vec<Option<Traffic>> {
        let views: Vec<Option<Traffic>> = self
            .members
            .iter()
            .map(|m| m.routable.then(|| view(m)))
            .collect();
        let mut before = Vec::with_capacity(views.len());
        let mut pooled = None;
        for v in &views {
            before.push(pooled.clone());
            pooled = pool_traffic(&pooled, v);
        }
        let mut after = vec![None; views.len()];
        let mut pooled = None;
        for (slot, v) in after.iter_mut().zip(&views).rev() {
            *slot = pooled.clone();
            pooled = pool_traffic(&pooled, v);
        }
        before
            .iter()
            .zip(&after)
            .map(|(b, a)| pool_traffic(b, a))
            .collect()
    }

    /// The process-wide traffic of the backends in rotation other than `index`, pooled, as this
    /// VM knows it; `None` when it has no peer in rotation.
    pub(super) fn peers(&self, index: usize) -> Option<Traffic> {
        let mut pooled: Option<Traffic> = None;
        for (j, m) in self.members.iter().enumerate() {
            if j != index && m.routable {
                pooled.get_or_insert_with(Traffic::default).merge(&view(m));
            }
        }
        pooled
    }

    /// The outlier rules' news of a failure (`kind`) or a success at backend `index`: a failure
    /// comes with this VM's verdict on its share and with the run rule as it sees the peers.
    pub(super) fn outlier_news(
        &self,
        index: usize,
        kind: Option<FailureKind>,
        at: Time,
    ) -> OutlierNews {
        let config = &self.config.health_checks.outlier;
        let judged = kind.and_then(|_| Some((self.members.get(index)?, self.peers(index)?)));
        let Some((m, peers)) = judged else {
            return OutlierNews {
                failure: kind,
                run: None,
                verdict: None,
            };
        };
        let starts = self.outstanding.starts(index);
        let standing = &m.evidence.passive.outlier;
        OutlierNews {
            failure: kind,
            run: run_rule(&peers, config, at),
            verdict: judge(&view(m), standing, &starts, [&peers], config, at),
        }
    }
}

/// Two traffic records pooled (either may be absent).
fn pool_traffic(a: &Option<Traffic>, b: &Option<Traffic>) -> Option<Traffic> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let mut pooled = a.clone();
            pooled.merge(b);
            Some(pooled)
        }
        (Some(one), None) | (None, Some(one)) => Some(one.clone()),
        (None, None) => None,
    }
}

/// A backend's traffic as this VM knows it: the process-wide counts as last shared, plus its own
/// since, plus (on the prober of a fleet) the other balancers'.
pub(super) fn view<H>(m: &Member<H>) -> Traffic {
    let mut traffic = m.evidence.passive.traffic.clone();
    traffic.merge(&m.counts.own);
    if !m.counts.fleet.is_empty() {
        traffic.merge(&m.counts.fleet);
    }
    traffic
}
