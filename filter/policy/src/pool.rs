//! One proxy worker's view of the fleet: the state of every backend, the routing the fleet guard
//! derives from it, and the rotation picks come from.
//!
//! Inputs are observations with the time they happened; outputs are values (a [`Transition`], a
//! [`Pick`], a list of [`Event`]s) that the caller turns into logs, metrics and headers.

use crate::active::{ProbeOutcome, Transition};
use crate::config::Config;
use crate::fleet::{route, Backend, Guard, Routing};
use crate::passive::{Failure, Recorded, RequestOutcome};
use crate::select::Rotation;
use crate::Time;

/// Where a request should go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// To this backend (index in config order).
    Backend(usize),
    /// Nowhere yet: nothing at all is known about any backend (cold start). Ask again once a
    /// probe has answered, or at this time at the latest (one probe timeout after start).
    Wait(Time),
}

/// A change in who takes traffic, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The backend now takes traffic (`true`) or no longer does.
    Routable(usize, bool),
    /// The backend was passively ejected.
    Ejected(usize),
    /// The fleet guard changed.
    Guard(Guard),
}

/// A passive failure and what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// Why it counted.
    pub failure: Failure,
    /// Whether it filled the window.
    pub recorded: Recorded,
}

/// The fleet as one worker sees it.
#[derive(Debug, Clone)]
pub struct Pool {
    config: Config,
    weights: Vec<u32>,
    backends: Vec<Backend>,
    routing: Routing,
    rotation: Rotation,
    started: Time,
    /// Whether anything was heard from any backend (then there is no cold-start wait).
    heard: bool,
    /// Whether an observation changed a backend since the last refresh.
    changed: bool,
    /// When a remembered failure next expires (the routing can change by time alone then).
    expires: Option<Time>,
    /// Counts routing changes.
    generation: u64,
}

impl Pool {
    /// A pool that knows nothing yet about the configured backends, as of `now`.
    pub fn new(config: Config, now: Time) -> Pool {
        let backends = config.upstreams.iter().map(|_| Backend::new(now)).collect();
        let mut pool = Pool {
            weights: config.upstreams.iter().map(|u| u.weight).collect(),
            config,
            backends,
            routing: Routing::default(),
            rotation: Rotation::default(),
            started: now,
            heard: false,
            changed: true,
            expires: None,
            generation: 0,
        };
        pool.refresh(now);
        pool
    }

    /// Takes a new configuration, keeping what is known about backends that stay (by name).
    /// Returns, per new backend, its index in the old configuration if it had one.
    pub fn reconfigure(&mut self, config: Config, now: Time) -> Vec<Option<usize>> {
        let kept: Vec<Option<usize>> = config
            .upstreams
            .iter()
            .map(|u| self.index_of(&u.name))
            .collect();
        if kept.iter().all(Option::is_none) {
            self.started = now;
        }
        self.backends = kept
            .iter()
            .map(|old| {
                old.and_then(|o| self.backends.get(o).cloned())
                    .unwrap_or_else(|| Backend::new(now))
            })
            .collect();
        self.weights = config.upstreams.iter().map(|u| u.weight).collect();
        self.config = config;
        self.routing = Routing::default();
        self.heard = self.backends.iter().any(Backend::heard_from);
        self.changed = true;
        self.refresh(now);
        kept
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Every backend's state, in config order.
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// The index of the backend named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.config.upstreams.iter().position(|u| u.name == name)
    }

    /// The routing in force.
    pub fn routing(&self) -> &Routing {
        &self.routing
    }

    /// Replaces a backend's state with one learnt elsewhere (another worker, the prober).
    pub fn set_backend(&mut self, i: usize, backend: Backend) {
        if let Some(slot) = self.backends.get_mut(i) {
            self.heard |= backend.heard_from();
            self.changed = true;
            *slot = backend;
        }
    }

    /// Takes one probe's outcome into account.
    pub fn observe_probe(&mut self, i: usize, outcome: ProbeOutcome, now: Time) -> Transition {
        let active = &self.config.health_checks.active;
        match self.backends.get_mut(i) {
            Some(b) => {
                self.heard = true;
                self.changed = true;
                b.active.observe(outcome, now, active)
            }
            None => Transition::Unchanged,
        }
    }

    /// Takes one request's outcome into account; returns the failure if it counted.
    pub fn observe_request(
        &mut self,
        i: usize,
        outcome: RequestOutcome,
        now: Time,
    ) -> Option<Counted> {
        let passive = &self.config.health_checks.passive;
        let b = self.backends.get_mut(i)?;
        self.heard = true;
        self.changed = true;
        match outcome {
            RequestOutcome::Answered { .. } => b.passive.contact(now, false),
            RequestOutcome::Failed(_) => b.passive.contact(now, outcome.refused()),
            RequestOutcome::StillWaiting(_)
            | RequestOutcome::RetriedElsewhere
            | RequestOutcome::ClientGone => {}
        }
        let failure = outcome.failure(passive)?;
        let recorded = b.passive.record(now, passive);
        Some(Counted { failure, recorded })
    }

    /// How many times the routing has changed: a cheap way to ask "anything new?".
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Recomputes the routing at `now`; returns what changed. Costs nothing when no backend
    /// changed and no remembered failure expired since the last call.
    pub fn refresh(&mut self, now: Time) -> Vec<Event> {
        if !self.changed && self.expires.is_none_or(|e| now < e) {
            return Vec::new();
        }
        self.changed = false;
        let passive = &self.config.health_checks.passive;
        self.expires = self
            .backends
            .iter()
            .filter_map(|b| b.passive.next_expiry(now, passive))
            .min();
        let next = route(&self.backends, now, &self.config);
        let mut events = Vec::new();
        if next.routable != self.routing.routable {
            for (i, now_routable) in next.routable.iter().enumerate() {
                if self.routing.routable.get(i) != Some(now_routable) {
                    events.push(Event::Routable(i, *now_routable));
                }
            }
            self.rotation = Rotation::new(&next.routable, &self.weights);
        }
        for (i, ejected) in next.ejected.iter().enumerate() {
            if *ejected && self.routing.ejected.get(i) != Some(&true) {
                events.push(Event::Ejected(i));
            }
        }
        if next.guard != self.routing.guard {
            events.push(Event::Guard(next.guard));
        }
        if next != self.routing {
            self.generation += 1;
        }
        self.routing = next;
        events
    }

    /// Where a retry of a request picked for `first` should go: another routable backend, the
    /// one whose turn is next; `None` when `first` is the only one.
    pub fn retry_choice(&self, first: usize) -> Option<usize> {
        self.rotation.next_other_than(first)
    }

    /// Picks the backend for one request. `now` matters only at cold start, so a caller may
    /// pass a recent time (its last tick) rather than read the clock per request.
    pub fn pick(&mut self, now: Time) -> Pick {
        let wait_until = self.started + self.config.health_checks.active.timeout;
        if !self.heard && now < wait_until {
            return Pick::Wait(wait_until);
        }
        match self.rotation.advance() {
            Some(i) => Pick::Backend(i),
            // The guard never leaves the set empty; this is only reachable with no backends.
            None => Pick::Backend(0),
        }
    }
}
