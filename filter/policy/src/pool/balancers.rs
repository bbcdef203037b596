//! The other balancers of the fleet, as the pool meets them ([`crate::etcd`]). Their view in: on
//! the prober, which backends another balancer probes, and the probe state it published, taken
//! in as this VM's own so its workers get it from the probe table as they get every other
//! result; the others' failures and ejections, taken into the process's passive table; their
//! request counts, for the prober's peer comparison. And this balancer's evidence out: its
//! failures, ejections and counts.

use super::{Member, Pool};
use crate::active::{ActiveHealth, Health, ProbeOutcome};
use crate::etcd::{Duty, FleetPart};
use crate::events::{Effects, Event};
use crate::outcome::About;
use crate::outlier::Traffic;
use crate::passive::Remembered;
use crate::tables::PassiveChange;
use crate::time::Time;
use std::time::Duration;

impl<H> Pool<H> {
    /// Takes in where each backend's probe duty is: a backend another balancer probes is not
    /// probed here and takes that balancer's published state; one whose duty comes here is
    /// probed at its time (at once if that has passed).
    pub(crate) fn fleet_view(&mut self, fleet: &FleetPart, now: Time) -> Effects {
        let mut effects = Effects::default();
        let mut adopted = false;
        let mut back = false;
        let interval = self.config.health_checks.active.interval;
        for (i, m) in self.members.iter_mut().enumerate() {
            match fleet.fleet_traffic(i, &m.key) {
                Some(theirs) if *theirs != m.counts.fleet => m.counts.fleet = theirs.clone(),
                Some(_) => {}
                None => m.counts.fleet = Traffic::default(),
            }
            let outlier = &m.evidence.passive.outlier;
            if let Some(shared) = fleet.shared_ejection(&m.key) {
                if !outlier.is_ejected(now) && shared.standing.is_ejected(now) {
                    effects.share.push(PassiveChange::Adopt {
                        key: m.key.clone(),
                        at: now,
                        by: shared.by,
                        standing: shared.standing.clone(),
                    });
                }
            }
            match fleet.duty(&m.key) {
                Duty::Here => {
                    back |= std::mem::take(&mut m.probing.elsewhere);
                }
                Duty::Elsewhere { health, .. } => {
                    m.probing.elsewhere = true;
                    match health.filter(|h| *h != m.evidence.active) {
                        Some(theirs) if answered_here_since(m, &theirs, interval) => {
                            // Their probe found no answer; this balancer's pages were answered
                            // since it was sent: their path fails, not the backend. It stays as
                            // it is here, and the page says why.
                            if m.evidence.active.contradicted.is_none() {
                                if let Some((_, outcome)) = theirs.last {
                                    effects.events.push(Event::ProbeContradicted {
                                        name: m.name().to_owned(),
                                        outcome,
                                    });
                                }
                                self.layout.changed();
                            }
                            m.evidence.active.contradicted.get_or_insert(now);
                        }
                        Some(theirs) => {
                            m.evidence.active = theirs;
                            self.layout.changed();
                            adopted = true;
                        }
                        None => {}
                    }
                }
            }
        }
        self.hear();
        self.fleet_evidence(fleet, now, &mut effects);
        if let Some(prober) = self.prober.as_mut() {
            prober.unpublished |= adopted;
            if back {
                prober.earliest = now;
            }
        }
        if adopted {
            self.refresh(now, &mut effects);
        }
        effects
    }

    /// Shares the failures read from the other balancers that this process does not remember
    /// yet and would still count: those about the backend, and those about a path once
    /// corroborated, by a path failure this process remembers or by two balancers besides it
    /// ([`crate::etcd::evidence`]).
    fn fleet_evidence(&self, fleet: &FleetPart, now: Time, effects: &mut Effects) {
        let passive = &self.config.health_checks.passive;
        for m in &self.members {
            let known = &m.evidence.passive;
            let theirs = fleet.fleet_failures(&m.key);
            let live = |f: &Remembered| now < f.at.saturating_add(passive.fail_duration);
            let mut seen_by: Vec<i64> = theirs
                .iter()
                .filter(|(_, f)| f.about == About::Path && live(f))
                .map(|(by, _)| *by)
                .collect();
            seen_by.sort_unstable();
            seen_by.dedup();
            let corroborated = known.path_failing(now, passive) || seen_by.len() >= 2;
            let mut failures: Vec<Remembered> = theirs
                .into_iter()
                .map(|(_, f)| f)
                .filter(|f| f.about == About::Backend || corroborated)
                .collect();
            failures.retain(|f| !known.remembers(f.at) && known.counts(f.at, now, passive));
            if !failures.is_empty() {
                effects.share.push(PassiveChange::Fleet {
                    key: m.key.clone(),
                    failures,
                });
            }
        }
    }

    /// What this process has to tell the fleet at `now`: the failures it counted at its
    /// backends, where they changed ([`FleetPart::evidence`]); the outlier ejections in force, not
    /// published yet ([`FleetPart::share_ejections`]); its request counts ([`FleetPart::share_traffic`]).
    pub(crate) fn evidence(&self, fleet: &mut FleetPart, now: Time) -> Vec<crate::etcd::Request> {
        let mut out: Vec<_> = self
            .members
            .iter()
            .filter_map(|m| fleet.evidence(&m.key, m.evidence.passive.failures.iter(), now))
            .collect();
        // An ejection for what may be this balancer's path stays its own.
        let about_backend = |m: &&super::Member<H>| {
            let standing = &m.evidence.passive.outlier;
            standing
                .in_force(now)
                .is_some_and(|(verdict, _)| verdict.about() == About::Backend)
        };
        let ejections: Vec<_> = self
            .members
            .iter()
            .filter(about_backend)
            .map(|m| (m.key.clone(), m.evidence.passive.outlier.clone()))
            .collect();
        let outlier = &self.config.health_checks.outlier;
        out.extend(fleet.share_ejections(&ejections, outlier.max_ejection, now));
        // Every backend, in the configuration's order, so the others find each at its place.
        let counts = || {
            let count =
                |m: &super::Member<H>| (m.key.clone(), m.evidence.passive.traffic.about_backend());
            self.members.iter().map(count).collect()
        };
        out.extend(fleet.share_traffic(counts, outlier.window, now));
        out
    }

    /// Whether another balancer probes backend `index` ([`Pool::fleet_view`]).
    pub fn probed_elsewhere(&self, index: usize) -> bool {
        self.members.get(index).is_some_and(|m| m.probing.elsewhere)
    }
}

/// Whether the probe state another balancer published (`theirs`) takes the backend out for want
/// of an answer (a timeout, a refused connection: what a broken path between that balancer and
/// the backend looks like) while this process's own requests to it were answered within a probe
/// `interval` of that probe being sent. Then the two balancers disagree about their paths, not
/// about the backend, and each keeps to what its own requests say. (A backend that broke for
/// everyone is taken out here at the prober's next probe, once this process's requests to it
/// have failed for an interval, or sooner by those failures.)
fn answered_here_since<H>(m: &Member<H>, theirs: &ActiveHealth, interval: Duration) -> bool {
    let Some((settled, outcome)) = theirs.last else {
        return false;
    };
    let sent = match outcome {
        ProbeOutcome::Timeout(waited) => settled.saturating_sub(waited),
        ProbeOutcome::Refused => settled,
        ProbeOutcome::Pass | ProbeOutcome::Soft(_) => return false,
    }
    .saturating_sub(interval);
    let mut here = m.evidence.passive.traffic.clone();
    here.merge(&m.counts.own);
    theirs.status == Health::Unhealthy && here.last_served().is_some_and(|served| served >= sent)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod evidence_tests;
