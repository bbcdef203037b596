//! The process-wide tables ([`crate::tables`]) as published, in, and this VM's part of them,
//! out: the announcements of which configuration probes which backend, the probe table the
//! probers publish, and the passive table every VM writes by compare-and-swap, with the
//! ejections its changes started.

use super::member::HeldOver;
use super::Pool;
use crate::events::{Effects, EjectionReason, Event};
use crate::passive::Recorded;
use crate::schedule::ProbeSlot;
use crate::tables::{ActiveTable, AnnounceTable, Applied, PassiveChange, PassiveTable};
use crate::time::Time;

/// A change this VM wrote to the process-wide passive table, and what it did there.
#[derive(Debug, Clone)]
pub struct Written<'a> {
    /// The change.
    pub change: &'a PassiveChange,
    /// What it did.
    pub applied: Applied,
}

impl<H> Pool<H> {
    /// Announces this configuration, whose fingerprint is `fingerprint`, as the newest that
    /// lists each of its backends.
    pub fn announce(&self, table: &mut AnnounceTable, fingerprint: u64) {
        for m in &self.members {
            match table.iter_mut().find(|(k, _)| *k == m.key) {
                Some((_, newest)) => *newest = fingerprint,
                None => table.push((m.key.clone(), fingerprint)),
            }
        }
    }

    /// The announcements as published: this configuration (`fingerprint`) probes the backends
    /// it is the newest to list, and takes the others' probe state from their prober. A
    /// backend it starts to probe is probed at once.
    pub fn announced(&mut self, table: &AnnounceTable, fingerprint: u64, now: Time) -> Effects {
        for m in &mut self.members {
            let here = entry(table, usize::MAX, &m.key).is_none_or(|newest| *newest == fingerprint);
            if here && !m.probing.probed_here {
                m.probing.slot = ProbeSlot::due_at(now);
                if let Some(prober) = self.prober.as_mut() {
                    prober.earliest = now;
                }
            }
            m.probing.probed_here = here;
        }
        Effects::default()
    }

    /// The passive table as this VM just wrote it, with what its change did: the VM whose
    /// failure filled a backend's window, or whose change started its outlier ejection, reports
    /// that ejection (or that the cap kept it).
    pub fn passive_written(
        &mut self,
        table: &PassiveTable,
        written: Option<Written<'_>>,
        now: Time,
    ) -> Effects {
        let mut effects = Effects::default();
        self.adopt_passive(table);
        self.refresh(now, &mut effects);
        let Some(Written { change, applied }) = written else {
            return effects;
        };
        let Some(index) = change.key().and_then(|key| self.index_of_key(key)) else {
            return effects;
        };
        if let Some((last, Recorded::Filled { until })) = applied.failure {
            let passive = &self.config.health_checks.passive;
            let reason = EjectionReason::Failures {
                count: passive.max_fails,
                within: passive.fail_duration,
                last,
            };
            self.report_ejection(index, until, reason, now, &mut effects);
        }
        if let Some((verdict, ejection)) = applied.ejection {
            let reason = match change {
                PassiveChange::Adopt { by, .. } => EjectionReason::Shared { by: *by, verdict },
                _ => EjectionReason::Outlier(verdict),
            };
            self.report_ejection(index, ejection.until, reason, now, &mut effects);
        }
        effects
    }

    /// Reports that backend `index` earned an ejection until `until`: started, or kept in
    /// rotation by the cap.
    pub(super) fn report_ejection(
        &self,
        index: usize,
        until: Time,
        reason: EjectionReason,
        now: Time,
        effects: &mut Effects,
    ) {
        let Some(m) = self.members.get(index) else {
            return;
        };
        let lifted = |e: &Event| matches!(e, Event::CapLifted { index: i, .. } if *i == index);
        if effects.events.iter().any(lifted) {
            return; // the refresh before this report told already
        }
        effects.events.push(if m.ejected() {
            Event::EjectionStarted {
                index,
                name: m.name().to_owned(),
                length: until.saturating_sub(now),
                reason,
            }
        } else {
            Event::CapReached {
                name: m.name().to_owned(),
                reason,
            }
        });
    }

    /// The passive table as another VM wrote it.
    pub fn passive_published(&mut self, table: &PassiveTable, now: Time) -> Effects {
        let mut effects = Effects::default();
        self.adopt_passive(table);
        self.refresh(now, &mut effects);
        effects
    }

    /// The probe table as the probers published it (a backend this VM probes itself is
    /// skipped: its own state is newer; so is a backend a request held at cold start heard from
    /// here, until the table says something else of it).
    pub fn active_published(&mut self, table: &ActiveTable, now: Time) -> Effects {
        let mut effects = Effects::default();
        let probing = self.prober.is_some();
        for (i, m) in self.members.iter_mut().enumerate() {
            if probing && m.probing.probed_here {
                continue;
            }
            if let Some(active) = entry(table, i, &m.key) {
                if m.probing.held_over == HeldOver::Since(active.last) {
                    continue;
                }
                m.probing.held_over = HeldOver::No;
                if m.evidence.active != *active {
                    m.evidence.active = *active;
                    self.layout.changed();
                }
            }
        }
        self.hear();
        self.refresh(now, &mut effects);
        effects
    }

    /// The probe state of the backends this VM probes, for it to merge into the probe table.
    pub fn active_table(&self) -> ActiveTable {
        self.members
            .iter()
            .filter(|m| m.probing.probed_here)
            .map(|m| (m.key.clone(), m.evidence.active))
            .collect()
    }

    /// A backend whose run of failures grew in it (a failure this worker or another shared) has
    /// its retry advice worked out again at once ([`Pool::replan_retries`]): the failure that
    /// makes it stand out has the next request's 5xx repeated, rather than the next tick's.
    pub(super) fn adopt_passive(&mut self, table: &PassiveTable) {
        let mut runs = Vec::new();
        for (i, m) in self.members.iter_mut().enumerate() {
            if let Some(passive) = entry(table, i, &m.key) {
                if m.evidence.passive != *passive {
                    if passive.run > m.evidence.passive.run {
                        runs.push(i);
                    }
                    m.evidence.passive = passive.clone();
                    self.layout.changed();
                }
            }
        }
        self.hear();
        for i in runs {
            let peers = self.peers(i);
            let at = self.clock.at;
            self.replan_retries(i, peers.as_ref(), at);
        }
    }
}

/// The entry for `key` in a shared table; tables written from the same configuration list
/// backends in its order, so position `i` is tried first.
fn entry<'a, T>(table: &'a [(String, T)], i: usize, key: &str) -> Option<&'a T> {
    table
        .get(i)
        .filter(|(k, _)| k == key)
        .or_else(|| table.iter().find(|(k, _)| k == key))
        .map(|(_, t)| t)
}
