//! A backend's state in one word, as operators alert on it.
//!
//! The policy's own view of a backend is several facts (its probes' verdict, an ejection, a
//! drain); an alert or a dashboard wants one of them at a time, so that
//! `upcheck_state{state="ejected"} == 1` means exactly that. The facts are ranked: a drain
//! (someone asked for it) shows over an ejection, an ejection over the probes' verdict.

use crate::active::Health;

/// A backend's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Passing its probes and not ejected: it takes traffic.
    Healthy,
    /// Failing its probes.
    Unhealthy,
    /// Passively ejected (a full failure window or an outlier), within the cap.
    Ejected,
    /// Draining: no new requests.
    Draining,
    /// Not probed yet.
    Unknown,
}

/// The facts a backend's state is ranked from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// What its probes say.
    pub health: Health,
    /// Whether it is passively ejected (within the cap).
    pub ejected: bool,
    /// Whether it drains.
    pub draining: bool,
}

impl State {
    /// Every state, in the order the docs list them.
    pub const ALL: [State; 5] = [
        State::Healthy,
        State::Unhealthy,
        State::Ejected,
        State::Draining,
        State::Unknown,
    ];

    /// The state of a backend of these facts.
    pub fn of(facts: Facts) -> State {
        let Facts {
            health,
            ejected,
            draining,
        } = facts;
        match (draining, ejected, health) {
            (true, _, _) => State::Draining,
            (false, true, _) => State::Ejected,
            (false, false, Health::Unhealthy) => State::Unhealthy,
            (false, false, Health::Unknown) => State::Unknown,
            (false, false, Health::Healthy) => State::Healthy,
        }
    }

    /// Its name, as the `state` label shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Healthy => "healthy",
            State::Unhealthy => "unhealthy",
            State::Ejected => "ejected",
            State::Draining => "draining",
            State::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_shows_over_an_ejection_and_an_ejection_over_the_probes() {
        let facts = |health, ejected, draining| Facts {
            health,
            ejected,
            draining,
        };
        let table = [
            (facts(Health::Healthy, true, true), State::Draining),
            (facts(Health::Unhealthy, true, false), State::Ejected),
            (facts(Health::Unhealthy, false, false), State::Unhealthy),
            (facts(Health::Unknown, false, false), State::Unknown),
            (facts(Health::Healthy, false, false), State::Healthy),
        ];
        for (facts, state) in table {
            assert_eq!(State::of(facts), state, "{facts:?}");
        }
    }
}
