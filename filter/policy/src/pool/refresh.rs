//! Working out the routing again, in steps, after every observation.
//!
//! When something changed, or a remembered failure or outlier ejection expired, the routing is
//! worked out anew from every backend's evidence, and each backend's part in it is followed in
//! turn: a probe at once when it is newly ejected, its ejection's lifecycle ([`EjectionState`]:
//! held back by the cap, taken out, over), whether anything accepts its connections, whether it
//! is in service; then which backends are back in rotation with peers whose probes fail alike,
//! the rotation laid out again, and the pool guard. Only the VM probing a backend reports its
//! changes, so each is logged once per process.

use super::followed::{Backend, Seen};
use super::{Member, Pool, Prober};
use crate::events::{Effects, Event};
use crate::guard::{route, Evidence, Guard, Routing};
use crate::select::Rotation;
use crate::time::Time;
use crate::warm_up::{warming, STEPS};
use upcheck_config::Passive;

/// The routing as last worked out, and when to work it out again.
#[derive(Debug, Clone)]
pub(super) struct RoutingState {
    /// Whether, and why, the pool guard widens the routable set.
    guard: Guard,
    /// The weighted round robin over the routable set.
    rotation: Rotation,
    /// Whether an observation changed a backend since the routing was last worked out.
    changed: bool,
    /// When a remembered failure next expires (the routing can change by time alone then).
    expires: Option<Time>,
    /// Whether the rotation must be laid out again though no backend's routability changed:
    /// a configuration renumbered the backends.
    relayout: bool,
    /// Whether a backend was warming up when the rotation was last laid out: then each tick
    /// works its weight out again ([`crate::warm_up`]).
    warming: bool,
    /// The weights the rotation was last laid out with, warm-ups applied.
    weights: Vec<u32>,
}

impl RoutingState {
    /// Marks the routing to be worked out again: an observation changed a backend.
    #[inline(always)]
    pub(super) fn changed(&mut self) {
        self.changed = true;
    }

    /// Marks the rotation to be laid out again: a configuration renumbered the backends.
    pub(super) fn renumbered(&mut self) {
        self.relayout = true;
        self.changed = true;
    }

    /// Whether, and why, the pool guard widens the routable set.
    #[inline(always)]
    pub(super) fn guard(&self) -> Guard {
        self.guard
    }

    /// Whether a backend was warming up when the rotation was last laid out.
    #[inline(always)]
    pub(super) fn warming(&self) -> bool {
        self.warming
    }

    /// The next backend in rotation.
    #[inline(always)]
    pub(super) fn next(&mut self) -> Option<usize> {
        self.rotation.advance()
    }

    /// The backend in rotation whose turn is next, other than `first`.
    #[inline(always)]
    pub(super) fn next_other_than(&self, first: usize) -> Option<usize> {
        self.rotation.next_other_than(first)
    }

    /// Nothing laid out yet: the first refresh works everything out.
    pub(super) fn new() -> RoutingState {
        RoutingState {
            guard: Guard::Off,
            rotation: Rotation::default(),
            changed: true,
            expires: None,
            relayout: true,
            warming: false,
            weights: Vec::new(),
        }
    }
}

impl<H> Pool<H> {
    /// Works out the routing again if anything changed or a failure expired, and reports what
    /// changed: on the prober, everything process-wide (so it is logged once per process).
    pub(super) fn refresh(&mut self, now: Time, effects: &mut Effects) {
        if !self.layout.changed && self.layout.expires.is_none_or(|e| now < e) {
            return;
        }
        self.layout.changed = false;
        self.layout.expires = self.next_expiry(now);
        let evidence: Vec<&Evidence> = self.members.iter().map(|m| &m.evidence).collect();
        let routing = route(&evidence, now, &self.config);
        let routable_changed = self.follow_members(&routing, now, effects);
        self.follow_back_alike(&routing, effects);
        self.follow_guard(routing.guard, effects);
        self.lay_out(routable_changed, now);
    }

    /// When a remembered failure or an outlier ejection next expires: the routing can change by
    /// time alone then.
    fn next_expiry(&self, now: Time) -> Option<Time> {
        let passive = &self.config.health_checks.passive;
        self.members
            .iter()
            .flat_map(|m| {
                let outlier = m.evidence.passive.outlier.in_force(now).map(|(_, t)| t);
                [m.evidence.passive.next_expiry(now, passive), outlier]
            })
            .flatten()
            .min()
    }

    /// Follows each backend's part in `routing`; returns whether any backend's routability
    /// changed.
    fn follow_members(&mut self, routing: &Routing, now: Time, effects: &mut Effects) -> bool {
        let passive = &self.config.health_checks.passive;
        let probing = self.prober.is_some();
        let mut routable_changed = false;
        for (i, m) in self.members.iter_mut().enumerate() {
            // Each backend's changes are reported by its own prober, so once per process.
            let reporting = probing && m.probing.probed_here;
            let routable = routing.routable.get(i).copied().unwrap_or(false);
            let ejected = routing.ejected.get(i).copied().unwrap_or(false);
            routable_changed |= routable != m.routable;
            if reporting && ejected {
                m.probe_on_ejection(self.prober.as_mut(), now, passive);
            }
            let backend = Backend {
                index: i,
                name: &m.upstream.name,
                evidence: &m.evidence,
            };
            let seen = Seen {
                ejected,
                reporting,
                now,
            };
            m.followed.follow(backend, seen, passive, effects);
            m.routable = routable;
        }
        routable_changed
    }

    /// Reports each backend newly back in rotation with the backends whose probes fail alike
    /// (guard rule 3), and remembers which are.
    fn follow_back_alike(&mut self, routing: &Routing, effects: &mut Effects) {
        let probing = self.prober.is_some();
        let cause = routing.shared_cause.as_ref();
        let names = |pick: &[bool]| -> Vec<String> {
            self.members
                .iter()
                .zip(pick)
                .filter(|(_, p)| **p)
                .map(|(m, _)| m.name().to_owned())
                .collect()
        };
        let last = cause.map(|c| names(&c.last)).unwrap_or_default();
        let failing = cause.map(|c| names(&c.failing)).unwrap_or_default();
        for (i, m) in self.members.iter_mut().enumerate() {
            let back = cause.is_some_and(|c| c.back.get(i) == Some(&true));
            if let (true, false, Some(cause)) = (back, m.back, cause) {
                if probing && m.probing.probed_here {
                    effects.events.push(Event::BackAlike {
                        name: m.name().to_owned(),
                        peers: last.clone(),
                        failing: failing.clone(),
                        outcome: cause.outcome,
                    });
                }
            }
            m.back = back;
        }
    }

    /// Lays the rotation out again when a backend's routability changed or a configuration
    /// renumbered the backends.
    fn lay_out(&mut self, routable_changed: bool, now: Time) {
        if routable_changed || std::mem::take(&mut self.layout.relayout) {
            let routable: Vec<bool> = self.members.iter().map(|m| m.routable).collect();
            let (weights, warming) = self.weights(now);
            self.layout.rotation = Rotation::new(&routable, &weights);
            self.layout.weights = weights;
            self.layout.warming = warming;
        }
    }

    /// While a backend warms up, at each tick: lays the rotation out again when a warming
    /// backend's share took a step, continuing the cycle where it was.
    pub(super) fn warm_up(&mut self, now: Time) {
        if !self.layout.warming {
            return;
        }
        let (weights, warming) = self.weights(now);
        if weights != self.layout.weights {
            let routable: Vec<bool> = self.members.iter().map(|m| m.routable).collect();
            self.layout.rotation = self.layout.rotation.reweighted(&routable, &weights);
            self.layout.weights = weights;
        }
        self.layout.warming = warming;
    }

    /// Each backend's weight in the rotation at `now`, and whether any is warming up. A warming
    /// backend's weight is its share, in steps, of its weight in [`STEPS`], the others' their
    /// whole weight in `STEPS`; with none warming, the configured weights as they are. Nobody
    /// warms up while the guard is engaged or the cap keeps a failing backend in rotation: a
    /// warm-up then would push its share onto backends that fail. Only routable backends share
    /// the traffic, so a lone routable backend gets all of it, warming or not.
    fn weights(&self, now: Time) -> (Vec<u32>, bool) {
        let slow_start = &self.config.health_checks.slow_start;
        let configured = || self.members.iter().map(|m| m.upstream.weight).collect();
        if slow_start.window.is_none()
            || self.layout.guard.engaged()
            || self
                .members
                .iter()
                .any(|m| m.routable && m.followed.ejection().held_back())
        {
            return (configured(), false);
        }
        let steps: Vec<Option<u32>> = self
            .members
            .iter()
            .map(|m| {
                warming(slow_start, &m.evidence.active, now)
                    .filter(|_| m.routable)
                    .map(|w| w.steps)
            })
            .collect();
        if steps.iter().all(Option::is_none) {
            return (configured(), false);
        }
        let weights = self
            .members
            .iter()
            .zip(&steps)
            .map(|(m, s)| m.upstream.weight.saturating_mul(s.unwrap_or(STEPS)))
            .collect();
        (weights, true)
    }

    /// Follows the pool guard, reported by the prober.
    fn follow_guard(&mut self, guard: Guard, effects: &mut Effects) {
        if guard != self.layout.guard {
            self.layout.guard = guard;
            if self.prober.is_some() {
                effects.events.push(Event::Guard(guard));
            }
        }
    }
}

impl<H> Member<H> {
    /// Probes an ejected backend at once, once per ejection (not again when the cap lets it back
    /// and takes it out anew), unless a probe sent since the ejection began, answered or on its
    /// way, says already whether it is still broken (a backend re-added with failures on record,
    /// probed as it joined): by the time its failures expire, a probe has said.
    fn probe_on_ejection(&mut self, prober: Option<&mut Prober>, now: Time, passive: &Passive) {
        if self.followed.ejection().taken_out() {
            return;
        }
        let since = self.evidence.passive.ejected_since(now, passive);
        let probed_since = since.is_some_and(|since| {
            self.probing.newest.is_some_and(|sent| sent >= since)
                || prober.as_ref().is_some_and(|p| {
                    p.sent
                        .iter()
                        .any(|probe| probe.key == self.key && probe.sent >= since)
                })
        });
        if probed_since {
            return;
        }
        self.probing.slot.due_now();
        if let Some(prober) = prober {
            prober.earliest = now;
        }
    }
}
