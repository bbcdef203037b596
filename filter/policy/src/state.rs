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

impl State {
    /// Every state, in the order the docs list them.
    pub const ALL: [State; 5] = [
        State::Healthy,
        State::Unhealthy,
        State::Ejected,
        State::Draining,
        State::Unknown,
    ];

    /// The state of a backend whose probes say `health`, which is `ejected` or not and drains
    /// or not.
    pub fn of(health: Health, ejected: bool, draining: bool) -> State {
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
        assert_eq!(State::of(Health::Healthy, true, true), State::Draining);
        assert_eq!(State::of(Health::Unhealthy, true, false), State::Ejected);
        assert_eq!(State::of(Health::Unhealthy, false, false), State::Unhealthy);
        assert_eq!(State::of(Health::Unknown, false, false), State::Unknown);
        assert_eq!(State::of(Health::Healthy, false, false), State::Healthy);
    }
}
