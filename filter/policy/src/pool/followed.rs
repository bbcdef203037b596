//! What a VM follows of each backend, and reports as it changes: its ejection's lifecycle,
//! whether anything accepts its connections, whether it is in service, its drain and its state
//! in one word. Each is worked out anew from the backend's evidence and its part in the routing
//! at every refresh; only the VM probing a backend reports, so each change is logged once per
//! process.

use crate::active::Health;
use crate::drain::Drain;
use crate::events::{Effects, Event};
use crate::guard::Evidence;
use crate::state::{Facts, State};
use crate::time::Time;
use upcheck_config::Passive;

/// What a VM follows of one backend.
#[derive(Debug, Clone)]
pub(super) struct Followed {
    /// Whether anything accepted its latest contact, as last reported.
    accepting: bool,
    /// Passing probes and not ejected, as last reported (`None`: not yet).
    in_service: Option<bool>,
    /// Its state in one word, as this VM follows it.
    state: StateSeen,
    /// Its drain, as this VM last reported it ([`crate::drain`]).
    drain: Option<Drain>,
    /// Where it stands in its passive ejection's lifecycle, as last refreshed.
    ejection: EjectionState,
}

/// The backend followed: its position, its name and what probes and requests say of it.
pub(super) struct Backend<'a> {
    pub(super) index: usize,
    pub(super) name: &'a str,
    pub(super) evidence: &'a Evidence,
}

/// Its part in the routing just worked out, at `now`.
pub(super) struct Seen {
    /// Whether the routing takes it out now, within the cap.
    pub(super) ejected: bool,
    /// Whether this VM reports its changes (it probes the backend).
    pub(super) reporting: bool,
    pub(super) now: Time,
}

/// A backend's state in one word, as a VM follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSeen {
    /// The state.
    pub current: State,
    /// Since when, as this VM saw it change.
    pub since: Time,
    /// Whether this VM reported it: its prober does when it changes, and again on taking the
    /// probing lease.
    reported: bool,
}

/// Where a backend stands in its passive ejection's lifecycle (a full failure window or an
/// outlier ejection), as last refreshed. An ejection ends when it is no longer earned, not when
/// the backend leaves the set the cap counts (failing its probes meanwhile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EjectionState {
    /// No ejection earned.
    None,
    /// It earned an ejection that the cap keeps in rotation: when the cap lets that ejection take
    /// effect, the prober reports it ([`Event::CapLifted`]).
    HeldBack,
    /// Out of rotation (within the cap).
    Ejected {
        /// As an outlier among its peers, rather than for a full failure window.
        outlier: bool,
    },
    /// Taken out, then kept in rotation by the cap while its ejection is still earned: the
    /// ejection is not over (its end is reported once it is no longer earned), and the cap
    /// letting it take effect again is reported as lifted.
    HeldBackAfterEjection {
        /// As an outlier among its peers, rather than for a full failure window.
        outlier: bool,
    },
}

impl EjectionState {
    /// Whether an ejection took effect and is not over.
    pub(super) fn taken_out(self) -> bool {
        matches!(
            self,
            EjectionState::Ejected { .. } | EjectionState::HeldBackAfterEjection { .. }
        )
    }

    /// Whether the cap keeps an earned ejection from taking effect.
    pub(super) fn held_back(self) -> bool {
        matches!(
            self,
            EjectionState::HeldBack | EjectionState::HeldBackAfterEjection { .. }
        )
    }
}

impl Followed {
    /// A backend this VM has followed since `now`: unknown, accepting, not ejected.
    pub(super) fn new(now: Time) -> Followed {
        Followed {
            accepting: true,
            in_service: None,
            state: StateSeen {
                current: State::Unknown,
                since: now,
                reported: false,
            },
            drain: None,
            ejection: EjectionState::None,
        }
    }

    /// Where it stands in its passive ejection's lifecycle.
    pub(super) fn ejection(&self) -> EjectionState {
        self.ejection
    }

    /// Whether anything accepted its latest contact, as last followed.
    pub(super) fn accepting(&self) -> bool {
        self.accepting
    }

    /// Its state in one word, and since when.
    pub(super) fn state(&self) -> StateSeen {
        self.state
    }

    /// Reports every gauge afresh: this VM began probing.
    pub(super) fn report_afresh(&mut self) {
        self.in_service = None;
        self.state.reported = false;
    }

    /// Follows `backend` as the routing just `seen` it.
    pub(super) fn follow(
        &mut self,
        backend: Backend<'_>,
        seen: Seen,
        passive: &Passive,
        effects: &mut Effects,
    ) {
        self.follow_ejection(&backend, &seen, passive, effects);
        self.follow_contact(&backend, &seen, effects);
        self.follow_service(&backend, &seen, effects);
        self.follow_drain(&backend, &seen, effects);
        self.follow_state(&backend, &seen, effects);
    }

    /// Moves its ejection along: reports the cap letting an ejection it held back take effect,
    /// and an ejection over.
    fn follow_ejection(
        &mut self,
        backend: &Backend<'_>,
        seen: &Seen,
        passive: &Passive,
        effects: &mut Effects,
    ) {
        let Seen {
            ejected,
            reporting,
            now,
        } = *seen;
        let evidence = &backend.evidence.passive;
        let outlier = evidence.outlier.is_ejected(now);
        let earned = outlier || evidence.ejected_since(now, passive).is_some();
        if reporting && ejected && self.ejection.held_back() {
            let until = [
                evidence.outlier.in_force(now).map(|(_, t)| t),
                evidence.window_ends(now, passive),
            ];
            effects.events.push(Event::CapLifted {
                index: backend.index,
                name: backend.name.to_owned(),
                length: until
                    .into_iter()
                    .flatten()
                    .max()
                    .unwrap_or(now)
                    .saturating_sub(now),
            });
        }
        self.ejection = match (ejected, earned, self.ejection) {
            (true, _, _) => EjectionState::Ejected { outlier },
            (
                false,
                true,
                EjectionState::Ejected { outlier: was }
                | EjectionState::HeldBackAfterEjection { outlier: was },
            ) => EjectionState::HeldBackAfterEjection { outlier: was },
            (false, true, _) => EjectionState::HeldBack,
            (
                false,
                false,
                EjectionState::Ejected { outlier: was }
                | EjectionState::HeldBackAfterEjection { outlier: was },
            ) => {
                if reporting {
                    effects.events.push(Event::EjectionEnded {
                        name: backend.name.to_owned(),
                        outlier: was,
                    });
                }
                EjectionState::None
            }
            (false, false, _) => EjectionState::None,
        };
    }

    /// Follows its drain, reported by its prober as it starts and as it ends (its gauge and one
    /// log line each); a VM that begins probing reports the drain in force then.
    fn follow_drain(&mut self, backend: &Backend<'_>, seen: &Seen, effects: &mut Effects) {
        let drain = backend.evidence.drain();
        if drain == self.drain || !seen.reporting {
            return;
        }
        if let Some(ended) = self.drain.filter(|_| drain.is_none()) {
            effects.events.push(Event::DrainEnded {
                index: backend.index,
                name: backend.name.to_owned(),
                by: ended.by,
                lasted: seen.now.saturating_sub(ended.since),
            });
        }
        if let Some(drain) = drain {
            effects.events.push(Event::DrainStarted {
                index: backend.index,
                name: backend.name.to_owned(),
                drain,
            });
        }
        self.drain = drain;
    }

    /// Follows whether anything accepts its connections, reported when it changes.
    fn follow_contact(&mut self, backend: &Backend<'_>, seen: &Seen, effects: &mut Effects) {
        let accepting = backend.evidence.accepting();
        if accepting != self.accepting {
            self.accepting = accepting;
            if seen.reporting {
                effects.events.push(Event::ContactChanged {
                    name: backend.name.to_owned(),
                    accepting,
                });
            }
        }
    }

    /// Follows its state in one word, reported by its prober when it changes and when that VM
    /// begins probing (its gauges).
    fn follow_state(&mut self, backend: &Backend<'_>, seen: &Seen, effects: &mut Effects) {
        let state = State::of(Facts {
            health: backend.evidence.active.status,
            ejected: seen.ejected,
            draining: backend.evidence.draining(),
        });
        let change = state != self.state.current;
        if change {
            self.state = StateSeen {
                current: state,
                since: seen.now,
                reported: false,
            };
        }
        if seen.reporting && !self.state.reported {
            self.state.reported = true;
            effects.events.push(Event::State {
                index: backend.index,
                name: backend.name.to_owned(),
                state,
                since: self.state.since,
                change,
            });
        }
    }

    /// Follows whether it is in service (passing probes and not ejected), reported by its prober
    /// when it changes (its gauge).
    fn follow_service(&mut self, backend: &Backend<'_>, seen: &Seen, effects: &mut Effects) {
        let in_service = backend.evidence.active.status == Health::Healthy && !seen.ejected;
        if seen.reporting && self.in_service != Some(in_service) {
            self.in_service = Some(in_service);
            effects.events.push(Event::InService {
                index: backend.index,
                name: backend.name.to_owned(),
                in_service,
            });
        }
    }
}
