//! Passive health: what real requests say about a backend.
//!
//! A failure is remembered for `fail_duration`; a backend with `max_fails` remembered failures is
//! ejected until the oldest of them expires. Successes erase nothing (Caddy's semantics): a backend
//! that fails one request in three is still failing. Only the newest `max_fails` failures are kept,
//! so memory per backend is bounded however much traffic fails.

use crate::drain::Drain;
use crate::outcome::{About, Contact};
use crate::outlier::{Standing, Traffic};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::time::Duration;
use upcheck_config::Passive;

/// A request's word on whether anything is serving: when, and what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastContact {
    /// When the request ended.
    pub at: Time,
    /// What it found.
    pub found: Contact,
}

/// One failure a backend is remembered for: when, and whether it is about the backend or may be
/// about this balancer's path to it ([`About`]: the fleet shares the two differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remembered {
    /// When the request ended.
    pub at: Time,
    /// What it says something about.
    pub about: About,
}

/// The failures a backend is remembered for, and whether it is ejected.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PassiveHealth {
    /// The newest failures, oldest first; never more than `max_fails`.
    pub(crate) failures: VecDeque<Remembered>,
    /// When the current ejection began (the failure that filled the window).
    pub(crate) ejected_since: Option<Time>,
    /// The latest request outcome that told whether anything is serving.
    pub last_contact: Option<LastContact>,
    /// Its record as an outlier: the ejection in force, repeat offences, probation.
    pub outlier: Standing,
    /// Its request outcomes process-wide, as every VM last shared them (each tick).
    pub traffic: Traffic,
    /// How many of its latest requests, process-wide, failed in a row (by the outlier rules'
    /// account of a failure).
    pub run: u32,
    /// While it drains: since when, and what said so ([`crate::drain`]). Kept here, in the one
    /// table every VM writes, because any VM may read the signal on a response.
    pub drain: Option<Drain>,
}

/// What recording a failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Remembered; `count` of `max_fails`.
    Counted {
        /// Failures now remembered.
        count: u32,
    },
    /// This failure filled the window: the backend is due to be ejected until `until`
    /// (the pool guard's cap may still keep it in rotation).
    Filled {
        /// When the oldest counted failure expires.
        until: Time,
    },
}

impl PassiveHealth {
    /// Remembers a failure at `at`, about what `about` says.
    pub fn record(&mut self, at: Time, about: About, config: &Passive) -> Recorded {
        let was_full = self.full(at, config);
        let max = usize::try_from(config.max_fails).unwrap_or(usize::MAX);
        let pos = self.failures.partition_point(|r| r.at <= at);
        self.failures.insert(pos, Remembered { at, about });
        while self.failures.len() > max {
            self.failures.pop_front();
        }
        if self.full(at, config) {
            if !was_full || self.ejected_since.is_none() {
                self.ejected_since = Some(at);
            }
            if !was_full {
                return Recorded::Filled {
                    until: self.ejected_until(config).unwrap_or(at),
                };
            }
        }
        Recorded::Counted {
            count: self.count(at, config),
        }
    }

    /// Whether a failure at `at` would be remembered at `now`: still within `fail_duration`, and
    /// among the newest `max_fails`.
    pub fn counts(&self, at: Time, now: Time, config: &Passive) -> bool {
        let max = usize::try_from(config.max_fails).unwrap_or(usize::MAX);
        now < at.saturating_add(config.fail_duration)
            && (self.failures.len() < max || self.failures.front().is_some_and(|r| r.at < at))
    }

    /// Whether a failure at `at` is remembered.
    pub fn remembers(&self, at: Time) -> bool {
        self.failures.iter().any(|r| r.at == at)
    }

    /// Whether a failure about the path is remembered at `now`: what corroborates another
    /// balancer's ([`crate::etcd`]).
    pub fn path_failing(&self, now: Time, config: &Passive) -> bool {
        self.failures
            .iter()
            .any(|r| r.about == About::Path && now < r.at.saturating_add(config.fail_duration))
    }

    /// Failures remembered at `now`. In line up to the test for none, as for nearly every
    /// request's backend (a pick asks); the count out of line.
    #[inline(always)]
    pub fn count(&self, now: Time, config: &Passive) -> u32 {
        if self.failures.is_empty() {
            return 0;
        }
        self.count_remembered(now, config)
    }

    /// [`PassiveHealth::count`] of failures on record.
    #[inline(never)]
    fn count_remembered(&self, now: Time, config: &Passive) -> u32 {
        let live = self
            .failures
            .iter()
            .filter(|r| now < r.at.saturating_add(config.fail_duration))
            .count();
        u32::try_from(live).unwrap_or(u32::MAX)
    }

    /// When the next remembered failure expires, after `now`.
    pub fn next_expiry(&self, now: Time, config: &Passive) -> Option<Time> {
        self.failures
            .iter()
            .map(|r| r.at.saturating_add(config.fail_duration))
            .find(|expiry| *expiry > now)
    }

    /// Whether `max_fails` failures are remembered at `now`.
    pub fn full(&self, now: Time, config: &Passive) -> bool {
        self.count(now, config) >= config.max_fails
    }

    /// When the current ejection began, if its failure window is full at `now` or an outlier
    /// ejection is in force (the earlier start, if both).
    pub fn ejected_since(&self, now: Time, config: &Passive) -> Option<Time> {
        let window = if self.full(now, config) {
            self.ejected_since
        } else {
            None
        };
        match (window, self.outlier.ejected_since(now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the full failure window ejecting it ends, if it is full at `now`.
    pub fn window_ends(&self, now: Time, config: &Passive) -> Option<Time> {
        if self.full(now, config) {
            self.ejected_until(config)
        } else {
            None
        }
    }

    /// When the oldest counted failure expires, if the window is full.
    fn ejected_until(&self, config: &Passive) -> Option<Time> {
        self.failures
            .front()
            .map(|r| r.at.saturating_add(config.fail_duration))
    }

    /// Remembers what the latest request found of the backend.
    pub fn contact(&mut self, latest: LastContact) {
        if self.last_contact.is_none_or(|last| last.at <= latest.at) {
            self.last_contact = Some(latest);
        }
    }
}

/// The requests one VM has in flight, so one that hangs counts as failed the moment it is
/// `unhealthy_latency` late rather than when it finally ends. Each is kept in a slot it is
/// handed back by ([`InFlight`], carried with the request), so that beginning and ending one
/// costs the same however many are in flight; a slot a request ended in takes the next. The
/// slots no request holds are chained through themselves, so neither touches a second list.
#[derive(Debug, Default, Clone)]
pub struct Outstanding {
    slots: Vec<Slot>,
    /// The slot a request ended in last, the first of the chain of free slots.
    free: Option<InFlight>,
}

/// A slot of [`Outstanding`].
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// A request in flight.
    Held(Pending),
    /// No request: the next free slot, if any.
    Free(Option<InFlight>),
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    /// The host's number for the request: a slot since taken by another is not this one's.
    id: u32,
    backend: usize,
    started: Time,
    late: bool,
    /// Whether its response headers came (a gRPC call, whose outcome waits for its trailers):
    /// it waits for nothing of the backend's any more.
    answered: bool,
}

/// Where a request in flight is kept ([`Outstanding::begin`]); only the pool makes one. Its
/// slot, counted from one, so that a request's `Option<InFlight>` is four bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight(NonZeroU32);

impl InFlight {
    fn of(slot: usize) -> Option<InFlight> {
        let number = u32::try_from(slot).ok()?.checked_add(1)?;
        NonZeroU32::new(number).map(InFlight)
    }

    fn slot(self) -> usize {
        usize::try_from(self.0.get() - 1).unwrap_or(usize::MAX)
    }
}

/// A request that just became late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Late {
    /// Its backend's position.
    pub backend: usize,
    /// When it became late.
    pub at: Time,
    /// How long it has waited.
    pub waited: Duration,
}

impl Outstanding {
    /// Starts tracking request `id` to `backend`: where it is kept, for [`Outstanding::end`].
    /// `None` only past four billion requests in flight at once.
    pub fn begin(&mut self, id: u32, backend: usize, now: Time) -> Option<InFlight> {
        let pending = Slot::Held(Pending {
            id,
            backend,
            started: now,
            late: false,
            answered: false,
        });
        let Some(at) = self.free else {
            let at = InFlight::of(self.slots.len())?;
            self.slots.push(pending);
            return Some(at);
        };
        let slot = self.slots.get_mut(at.slot())?;
        let Slot::Free(next) = *slot else {
            return None; // never: the chain holds only free slots
        };
        self.free = next;
        *slot = pending;
        Some(at)
    }

    /// Stops tracking request `id`, kept `at`: when it started and whether it was already
    /// counted late (`None` if it is not tracked there).
    pub fn end(&mut self, id: u32, at: InFlight) -> Option<(Time, bool)> {
        let slot = self.slots.get_mut(at.slot())?;
        let ended = match slot {
            Slot::Held(p) if p.id == id => (p.started, p.late),
            _ => return None,
        };
        *slot = Slot::Free(self.free);
        self.free = Some(at);
        Some(ended)
    }

    /// Request `id`, kept `at`, has its response headers: it no longer waits on its backend, so
    /// it is neither late nor a stall from now on, though it is tracked until it ends.
    pub fn answered(&mut self, id: u32, at: InFlight) {
        if let Some(Slot::Held(p)) = self.slots.get_mut(at.slot()) {
            if p.id == id {
                p.answered = true;
            }
        }
    }

    /// When each request to `backend` still waiting on it started.
    pub fn starts(&self, backend: usize) -> Vec<Time> {
        self.pending()
            .filter(|p| p.backend == backend && !p.answered)
            .map(|p| p.started)
            .collect()
    }

    /// Every request in flight.
    fn pending(&self) -> impl Iterator<Item = &Pending> {
        self.slots.iter().filter_map(|slot| match slot {
            Slot::Held(p) => Some(p),
            Slot::Free(_) => None,
        })
    }

    /// Follows a reconfiguration (`kept[new] = Some(old)`): requests to a removed backend are
    /// no longer its business.
    pub fn remap(&mut self, kept: &[Option<usize>]) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Slot::Held(p) = slot else {
                continue;
            };
            match kept.iter().position(|old| *old == Some(p.backend)) {
                Some(new) => p.backend = new,
                None => {
                    *slot = Slot::Free(self.free);
                    self.free = InFlight::of(i);
                }
            }
        }
    }

    /// Marks every request that is `latency` late at `now` and not yet counted, and returns
    /// each.
    pub fn overdue(&mut self, now: Time, latency: Duration) -> Vec<Late> {
        let mut late = Vec::new();
        let held = self.slots.iter_mut().filter_map(|slot| match slot {
            Slot::Held(p) => Some(p),
            Slot::Free(_) => None,
        });
        for p in held.filter(|p| !p.late && !p.answered) {
            let waited = now.saturating_sub(p.started);
            if waited >= latency {
                p.late = true;
                late.push(Late {
                    backend: p.backend,
                    at: p.started.saturating_add(latency),
                    waited,
                });
            }
        }
        late
    }
}
