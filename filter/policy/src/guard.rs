//! The pool guard: which backends may take traffic, given everything known about all of them.
//!
//! The rules, in order:
//! 1. A backend whose latest contact (probe or request) was refused has nothing serving; it is
//!    left out while any other backend accepts connections.
//! 2. Routable = passing active checks, or unknown while no backend is known healthy (cold start),
//!    and not passively ejected: for a full failure window, or as an outlier among its peers
//!    ([`crate::outlier`]), which passing probes do not lift either.
//! 3. If nothing is left, the answer is never "no backend". When the last backends went down
//!    less than one probe round (interval + timeout) apart, that is a correlated failure of
//!    something they share (a database behind `/up`), not a dead pool: those of them that accept
//!    connections stay in rotation, and a backend that was already out before stays out. A
//!    backend went down when the probe that took it down was sent
//!    ([`crate::active::ActiveHealth::down_since`]): a probe that timed out is not dated by its timeout,
//!    which would put a backend that hung a round before the others next to them.
//!    A shared cause need not strike at once: a slow database times probes out one backend after
//!    another, rounds apart. So the backend whose probes failed last while its pages answered
//!    sets how they fail (timed out, or answered the same status); when each of those that went
//!    down last went down that way with its pages answering, or has failed pages since, every
//!    backend that went down that way while its own pages answered is back too, however long
//!    ago, and those that went down last with failing pages are left out. A backend that went
//!    down for its own reasons (its pages failing, or another kind of probe failure) stays out,
//!    and so does one ejected by its requests (rule 4 still applies). Pages answering beat pages
//!    failing: when the last to go down broke for its own reasons, the backends an earlier
//!    shared cause took out serve instead of it.
//! 4. Passive ejections are capped: one more may go while (ejected + 1) / N stays within
//!    `max_ejection_percent` of the backends that rule 2 or 3 left, and never the last one.
//! 5. With `min_healthy_percent` set and fewer routable than that share of the pool, traffic is
//!    spread over every backend that accepts connections (Envoy's panic mode).
//!
//! A backend that drains ([`crate::drain`]) is out of all of this: the rules work over the
//! backends that do not drain, as if the draining ones were not configured, so a draining
//! backend is never brought back by rule 3 or 5 and is no evidence that every backend is down;
//! for the cap (rule 4) it is neither ejected nor a candidate, and is not one of the N (with one
//! of two draining, the other is the last one and is never ejected). Only when every backend
//! drains do the rules work over all of them, drains aside, so traffic keeps flowing
//! ([`Guard::AllDraining`]). And when none of those that do not drain accepts connections (the
//! one left restarts while the other drains), the draining backends that still accept take the
//! traffic until one of them does ([`Guard::DrainingServe`]): a draining backend still serves,
//! and a user sent to a closed port gets nothing. Only connections refused count here, never a
//! failed probe, so the guard's own evidence still never brings a draining backend back.

use crate::active::{ActiveHealth, Health, ProbeOutcome};
use crate::drain::Drain;
use crate::outcome::Contact;
use crate::passive::PassiveHealth;
use crate::time::{nanos, Time};
use std::borrow::Borrow;
use std::fmt;
use upcheck_config::Config;

/// Everything known about one backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// What probes say.
    pub active: ActiveHealth,
    /// What real requests say.
    pub passive: PassiveHealth,
    /// While the configuration drains it (`upstreams[].drain`): since this VM took that in. It
    /// outlasts every probe, and ends with the configuration that says so.
    pub operator_drain: Option<Drain>,
}

impl Evidence {
    /// A backend nothing is known about, as of `now`.
    pub fn new(now: Time) -> Evidence {
        Evidence {
            active: ActiveHealth::new(now),
            passive: PassiveHealth::default(),
            operator_drain: None,
        }
    }

    /// Whether something is serving, by the latest probe or request (true when nothing is known;
    /// a request and a probe settled at the same instant: the request's word stands).
    pub fn accepting(&self) -> bool {
        let probe = self
            .active
            .last
            .map(|(t, outcome)| (t, outcome == ProbeOutcome::Refused));
        let request = self
            .passive
            .last_contact
            .map(|c| (c.at, c.found == Contact::Refused));
        match (probe, request) {
            (Some(p), Some(r)) => !if r.0 >= p.0 { r.1 } else { p.1 },
            (Some((_, refused)), None) | (None, Some((_, refused))) => !refused,
            (None, None) => true,
        }
    }

    /// Its drain, if it drains: the operator's, else what the backend said.
    pub fn drain(&self) -> Option<Drain> {
        self.operator_drain.or(self.passive.drain)
    }

    /// Whether it drains.
    pub fn draining(&self) -> bool {
        self.drain().is_some()
    }

    /// Whether anything at all has been heard from it.
    pub fn heard_from(&self) -> bool {
        self.active.last.is_some() || self.passive.last_contact.is_some()
    }
}

/// Why the routable set is wider than "healthy and not ejected".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Guard {
    /// It is not: the guard is not engaged.
    #[default]
    Off,
    /// Every backend failed its probes; those that went down last, together, keep serving.
    LastDown,
    /// No backend accepts connections; all are tried.
    NothingServing,
    /// Fewer than `min_healthy_percent` were routable; every backend that accepts connections is.
    Panic,
    /// Every backend drains: all keep taking traffic, by the rules as if none drained.
    AllDraining,
    /// No backend that stays accepts connections; the draining ones that do take the traffic.
    DrainingServe,
}

impl Guard {
    /// Whether the guard widened the set.
    pub fn engaged(self) -> bool {
        self != Guard::Off
    }
}

impl fmt::Display for Guard {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Guard::Off => "off",
            Guard::LastDown => "every backend fails its probes; keeping those that went down last, together, in rotation",
            Guard::NothingServing => "no backend accepts connections; trying all",
            Guard::Panic => "fewer backends healthy than min_healthy_percent; spreading over all that accept connections",
            Guard::AllDraining => "every backend drains; all keep taking traffic",
            Guard::DrainingServe => "no backend that stays accepts connections; the draining ones that do keep serving",
        })
    }
}

/// The outcome of the rules: who may take traffic now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Routing {
    /// Per backend, in config order: may take traffic. Never all false for a non-empty pool.
    pub routable: Vec<bool>,
    /// Per backend: passively ejected (within the cap).
    pub ejected: Vec<bool>,
    /// Whether, and why, the guard widened the set.
    pub guard: Guard,
    /// When rule 3 found a shared cause spread over time: how the probes fail alike, which
    /// backends went down last, and which came back with them.
    pub shared_cause: Option<SharedCause>,
}

/// A failure of something every backend's probe depends on, told by probes failing alike while
/// pages answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedCause {
    /// How the probes fail: as the last probe to fail while its backend's pages answered.
    pub outcome: ProbeOutcome,
    /// Per backend: went down last, together, alike.
    pub last: Vec<bool>,
    /// Per backend: went down earlier the same way while its pages answered, and is back.
    pub back: Vec<bool>,
    /// Per backend: went down last, but its pages failed; left out.
    pub failing: Vec<bool>,
}

/// Applies the rules to `backends` at `now`: to those that do not drain, or to all when every
/// one drains.
pub fn route<B: Borrow<Evidence>>(backends: &[B], now: Time, config: &Config) -> Routing {
    // References only: the pool routes by its members' evidence in place, never by copies.
    let backends: Vec<&Evidence> = backends.iter().map(Borrow::borrow).collect();
    let draining: Vec<bool> = backends.iter().map(|b| b.draining()).collect();
    if !draining.contains(&true) {
        return route_among(&backends, now, config);
    }
    if !draining.contains(&false) {
        return Routing {
            guard: Guard::AllDraining,
            ..route_among(&backends, now, config)
        };
    }
    let staying: Vec<&Evidence> = backends
        .iter()
        .zip(&draining)
        .filter(|(_, d)| !**d)
        .map(|(b, _)| *b)
        .collect();
    if !staying.iter().any(|b| b.accepting()) {
        let serving: Vec<bool> = backends
            .iter()
            .zip(&draining)
            .map(|(b, d)| *d && b.accepting())
            .collect();
        if serving.contains(&true) {
            return Routing {
                routable: serving,
                ejected: vec![false; backends.len()],
                guard: Guard::DrainingServe,
                shared_cause: None,
            };
        }
    }
    let among = route_among(&staying, now, config);
    // Back to one entry per backend, false for each that drains.
    let spread = |of: &[bool]| -> Vec<bool> {
        let mut of = of.iter();
        draining
            .iter()
            .map(|d| !d && of.next().copied().unwrap_or(false))
            .collect()
    };
    Routing {
        routable: spread(&among.routable),
        ejected: spread(&among.ejected),
        guard: among.guard,
        shared_cause: among.shared_cause.map(|cause| SharedCause {
            outcome: cause.outcome,
            last: spread(&cause.last),
            back: spread(&cause.back),
            failing: spread(&cause.failing),
        }),
    }
}

/// The rules over `backends`, none of them set aside for draining.
fn route_among(backends: &[&Evidence], now: Time, config: &Config) -> Routing {
    let accepting: Vec<bool> = backends.iter().map(|b| b.accepting()).collect();
    let any_accepting = accepting.contains(&true);
    // Rule 1: when nothing accepts connections, everything is usable.
    let usable: Vec<bool> = accepting.iter().map(|a| *a || !any_accepting).collect();
    let status = |b: &Evidence| b.active.status;
    let healthy_known = backends
        .iter()
        .zip(&usable)
        .any(|(b, u)| *u && status(b) == Health::Healthy);

    // Rule 2, active part.
    let mut base: Vec<bool> = backends
        .iter()
        .zip(&usable)
        .map(|(b, u)| {
            *u && match status(b) {
                Health::Healthy => true,
                Health::Unknown => !healthy_known,
                Health::Unhealthy => false,
            }
        })
        .collect();
    let mut guard = Guard::Off;
    let mut shared_cause = None;

    // Rule 3.
    if !base.contains(&true) {
        if any_accepting {
            let last_down = backends
                .iter()
                .zip(&usable)
                .filter(|(_, u)| **u)
                .filter_map(|(b, _)| b.active.down_since())
                .max();
            if let Some(latest) = last_down {
                let cutoff = latest.saturating_sub(config.probe_round());
                base = backends
                    .iter()
                    .zip(&usable)
                    .map(|(b, u)| *u && b.active.down_since().is_some_and(|t| t > cutoff))
                    .collect();
                shared_cause = spread_out_cause(backends, &usable, &base, now, config);
                if let Some(cause) = &shared_cause {
                    for ((b, back), failing) in base.iter_mut().zip(&cause.back).zip(&cause.failing)
                    {
                        *b = (*b && !failing) || *back;
                    }
                }
            }
            guard = Guard::LastDown;
        } else {
            guard = Guard::NothingServing;
        }
        if !base.contains(&true) {
            base.clone_from(&usable);
        }
    }

    // Rules 2 (passive part) and 4.
    let ejected = capped_ejections(backends, &base, now, config);
    let mut routable: Vec<bool> = base.iter().zip(&ejected).map(|(b, e)| *b && !e).collect();

    // Rule 5.
    if let Some(min) = config.min_healthy_percent {
        let routable_count = routable.iter().filter(|r| **r).count();
        if routable_count * 100 < usize::from(min) * backends.len() {
            routable = usable;
            guard = Guard::Panic;
        }
    }
    Routing {
        routable,
        ejected,
        guard,
        shared_cause,
    }
}

/// Rule 3's shared cause spread over time. The backend whose probes failed last while its pages
/// answered sets how the probes fail; if each backend in `last` (those that went down last,
/// together) went down that way with its pages answering, or has failed pages since, the
/// backends that went down the same way with their pages answering, earlier, come back, and
/// those in `last` whose pages failed are left out. A backend whose pages failed since it went
/// down (a request failure on record, a run of them, an outlier ejection) is no longer alike:
/// brought back, the first page it fails takes it out again.
fn spread_out_cause(
    backends: &[&Evidence],
    usable: &[bool],
    last: &[bool],
    now: Time,
    config: &Config,
) -> Option<SharedCause> {
    let passive = &config.health_checks.passive;
    let pages_failed = |b: &Evidence| {
        b.passive.run > 0 || b.passive.count(now, passive) > 0 || b.passive.outlier.is_ejected(now)
    };
    let down = |i: usize| {
        let b = backends.get(i)?;
        b.active.down.filter(|d| d.pages && !pages_failed(b))
    };
    let outcome = (0..backends.len())
        .filter(|i| usable.get(*i) == Some(&true))
        .filter_map(|i| Some((backends.get(i)?.active.since, down(i)?)))
        .max_by_key(|(since, _)| *since)?
        .1
        .outcome;
    let alike = |i: usize| down(i).is_some_and(|d| d.outcome.alike(outcome));
    let in_last = |i: usize| last.get(i) == Some(&true);
    let failing: Vec<bool> = (0..backends.len())
        .map(|i| in_last(i) && backends.get(i).is_some_and(|b| pages_failed(b)))
        .collect();
    let explained = (0..backends.len())
        .filter(|i| in_last(*i))
        .all(|i| alike(i) || failing.get(i) == Some(&true));
    if !explained {
        return None;
    }
    let back: Vec<bool> = (0..backends.len())
        .map(|i| usable.get(i) == Some(&true) && !in_last(i) && alike(i))
        .collect();
    Some(SharedCause {
        outcome,
        last: (0..backends.len())
            .map(|i| in_last(i) && alike(i))
            .collect(),
        back,
        failing,
    })
}

/// Which of `base` are ejected: those with a full failure window or an outlier ejection in force,
/// earliest ejection first, as many as the cap allows.
fn capped_ejections(
    backends: &[&Evidence],
    base: &[bool],
    now: Time,
    config: &Config,
) -> Vec<bool> {
    let passive = &config.health_checks.passive;
    let mut ejected = vec![false; backends.len()];
    // By the nanosecond of the ejection's start: (u64, usize) pairs, as the rotation sorts its
    // members ([`crate::select`]).
    let mut candidates: Vec<(u64, usize)> = backends
        .iter()
        .zip(base)
        .enumerate()
        .filter(|(_, (_, in_base))| **in_base)
        .filter_map(|(i, (b, _))| b.passive.ejected_since(now, passive).map(|t| (nanos(t), i)))
        .collect();
    if candidates.is_empty() {
        return ejected;
    }
    candidates.sort_unstable();
    let n = base.iter().filter(|b| **b).count();
    let cap = (usize::from(config.max_ejection_percent) * n / 100).min(n.saturating_sub(1));
    for (_, i) in candidates.into_iter().take(cap) {
        if let Some(slot) = ejected.get_mut(i) {
            *slot = true;
        }
    }
    ejected
}
