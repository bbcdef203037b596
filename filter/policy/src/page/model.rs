//! What every form of the page shows, read from the pool once: one [`Line`] per backend, and the
//! words the forms for a person (text and HTML) share, so that the forms differ in markup only.

use crate::active::{Health, ProbeOutcome};
use crate::drain::Drain;
use crate::etcd::shown::{Holder, Shown};
use crate::history::Change;
use crate::outcome::About;
use crate::pool::Pool;
use crate::retry::Grounds;
use crate::time::Time;
use crate::warm_up::Warming;
use std::fmt::Write;
use upcheck_config::duration;

/// One backend's line, shared by every form.
pub(super) struct Line<'a> {
    pub(super) name: &'a str,
    pub(super) routable: bool,
    pub(super) status: Health,
    /// When `status` last changed.
    pub(super) status_since: Time,
    /// Consecutive passes (positive) or failures (negative) of its probes.
    pub(super) streak: i64,
    pub(super) ejected: bool,
    pub(super) failures: u32,
    /// When its next remembered failure expires: the end of an ejection for its failures.
    pub(super) next_expiry: Option<Time>,
    /// Whether `max_fails` failures are remembered: enough to eject it.
    pub(super) failures_full: bool,
    pub(super) last_probe: Option<(Time, ProbeOutcome)>,
    pub(super) accepting: bool,
    /// The outlier ejection in force: why, and when it ends.
    pub(super) outlier: Option<(String, Time)>,
    /// Since when its probes time out while its pages answer (they count neither way).
    pub(super) contradicted: Option<Time>,
    /// Back in rotation with the backends whose probes fail alike.
    pub(super) back: bool,
    /// While it drains: since when, and what said so.
    pub(super) drain: Option<Drain>,
    /// Its warm-up under way, if it is warming up.
    pub(super) warming: Option<Warming>,
    /// Where its probe duty is, with a fleet.
    pub(super) duty: Option<Holder>,
    /// Why its 5xx are repeated on its peers or not, when requests get retry advice.
    pub(super) retry: Option<Grounds>,
    /// The other balancers that see it failing (within `fail_duration`), with a fleet: each
    /// one's lease, and whether what it sees may be its path.
    pub(super) failing_elsewhere: Vec<(i64, About)>,
    /// The operator's last change to it, who asked and why (`upstreams[].note`).
    pub(super) note: Option<&'a str>,
}

impl Line<'_> {
    /// Whether it takes traffic, in a word: `in` or `out`.
    pub(super) fn traffic(&self) -> &'static str {
        if self.routable {
            "in"
        } else {
            "out"
        }
    }

    /// What overrides its probes, if anything, in a few words.
    pub(super) fn overruled(&self, now: Time) -> Option<String> {
        if self.back {
            return Some(
                "back in rotation: every backend fails its probes, and its own failed alike while its pages answered"
                    .to_owned(),
            );
        }
        self.contradicted.map(|since| {
            format!(
                "its probes time out while its pages answer (for {}): they count neither way",
                ago(now, since)
            )
        })
    }
}

/// Every backend's line at `now`, in the pool's order.
pub(super) fn lines<'a, H>(
    pool: &'a Pool<H>,
    fleet: Option<&'a Shown>,
    now: Time,
) -> impl Iterator<Item = Line<'a>> {
    let passive = &pool.config().health_checks.passive;
    pool.members().iter().enumerate().map(move |(i, m)| Line {
        name: m.name(),
        routable: m.routable,
        status: m.evidence.active.status,
        status_since: m.evidence.active.since,
        streak: m.evidence.active.streak,
        ejected: m.ejected(),
        failures: m.evidence.passive.count(now, passive),
        next_expiry: m.evidence.passive.next_expiry(now, passive),
        failures_full: m.evidence.passive.full(now, passive),
        last_probe: m.evidence.active.last,
        accepting: m.evidence.accepting(),
        outlier: m
            .evidence
            .passive
            .outlier
            .in_force(now)
            .map(|(verdict, until)| (verdict.to_string(), until)),
        contradicted: m.evidence.active.contradicted,
        back: m.back,
        drain: m.draining(),
        warming: pool.warming_up(i, now),
        duty: fleet.and_then(|f| f.holder(&m.key)),
        retry: pool.retry_grounds(i),
        failing_elsewhere: fleet.map_or_else(Vec::new, |f| {
            f.failing(&m.key, now.saturating_sub(passive.fail_duration))
        }),
        note: pool
            .config()
            .upstreams
            .get(i)
            .filter(|u| u.name == m.name())
            .and_then(|u| u.note.as_deref()),
    })
}

/// How long before `now` `at` was, as the configuration writes durations (and, with the two
/// swapped, how long after `now` a time to come is).
pub(super) fn ago(now: Time, at: Time) -> String {
    duration::display(now.saturating_sub(at))
}

/// Which balancer probes a backend, in a few words, onto `out`.
pub(super) fn duty(out: &mut String, holder: &Holder) {
    match holder {
        Holder::Here => out.push_str("probed here"),
        Holder::Other(lease) => {
            let _ = write!(out, "probed by balancer {lease:x}");
        }
        Holder::Nobody => out.push_str("probed by no balancer yet"),
    }
}

/// The other balancers that see a backend failing, in a few words, onto `out`: `failing behind
/// balancer 2a (its path?), 3b`; nothing when none does.
pub(super) fn failing_elsewhere(out: &mut String, failing: &[(i64, About)]) {
    for (n, (lease, about)) in failing.iter().enumerate() {
        out.push_str(if n == 0 {
            "failing behind balancer "
        } else {
            ", "
        });
        let _ = write!(out, "{lease:x}");
        if *about == About::Path {
            out.push_str(" (its path?)");
        }
    }
}

/// This balancer's name: its lease ID, 0 before it has one.
pub(super) fn balancer(fleet: &Shown) -> i64 {
    fleet.me().unwrap_or(0)
}

/// The fleet in a sentence, onto `out`: this balancer's name ([`balancer`]), whether it has fallen
/// back to local, and when it last read the shared view (if ever). Nothing in it needs escaping
/// in HTML.
pub(super) fn fleet_summary(out: &mut String, fleet: &Shown, now: Time) {
    let local = if fleet.local() {
        ", fallen back to local (etcd unreachable): every backend is probed here"
    } else {
        ""
    };
    let _ = write!(
        out,
        "fleet: balancer {:x} of {}{local}",
        balancer(fleet),
        fleet.balancers()
    );
    if let Some(at) = fleet.read() {
        out.push_str("; shared view read ");
        out.push_str(&ago(now, at));
        out.push_str(" ago");
    }
    match fleet.watching() {
        Some(w) if w.live => {
            let _ = write!(
                out,
                "; following etcd at revision {}, {} changes heard",
                w.revision, w.events
            );
            if let Some(at) = w.last_event {
                out.push_str(", the last ");
                out.push_str(&ago(now, at));
                out.push_str(" ago");
            }
            if w.resyncs > 0 {
                let _ = write!(out, ", {} fresh reads", w.resyncs);
            }
        }
        Some(_) => out.push_str("; etcd's watch not in place: the prefix is read until it is"),
        None => {}
    }
}

/// The pool's changes, newest first, as every form lists them.
pub(super) fn changes<H>(pool: &Pool<H>) -> impl Iterator<Item = &Change> {
    pool.history().iter().rev()
}

/// What a change is about, in the forms for a person: its backend, or the pool guard.
pub(super) fn subject(change: &Change) -> &str {
    change.backend.as_deref().unwrap_or("pool guard")
}
