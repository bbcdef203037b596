//! One VM's view of its backends, and the one way in for everything it observes.
//!
//! Each kind of observation enters through one method, and each returns its [`Effects`]:
//! - [`Pool::configure`]: a (re)configuration; backends that stay keep their state, by name;
//! - [`Pool::lease`]: whether this VM holds the probing lease (it then schedules and reports);
//! - [`Pool::tick`]: time passing: probes due, probes never answered, requests overdue,
//!   failures expiring; with outlier detection on, this VM's request counts shared in one change
//!   and every backend in rotation judged against its peers (a stall shows only here);
//! - [`Pool::probe_sent`], [`Pool::probe_refused`], [`Pool::probe_answered`]: active checks;
//!   [`Pool::health_pushed`]: what a gRPC backend's health `Watch` pushes (`watching`);
//! - [`Pool::request_routed`], [`Pool::request_ended`]: real
//!   requests, including a retried attempt and a client gone. Each outcome is counted in this
//!   VM's traffic; a failure is also shared at once with this VM's verdict on its backend and the
//!   run rule as it sees the peers, so a broken backend goes out within a few requests, not at
//!   the next tick;
//! - [`Pool::active_published`], [`Pool::passive_written`]: tables another VM (or this one)
//!   wrote to shared data;
//! - [`Pool::fleet_view`]: on the prober, which backends other balancers probe and what they
//!   published ([`crate::etcd`]).
//!
//! The pool never calls the host. The effects are carried out by [`crate::host::carry_out`]
//! (compare-and-swap, probes, log lines, metrics), which hands back what came of them through the
//! same entry points, in the adapter and the tests alike, so the tests drive the path that ships.
//!
//! The entry points are split by observation: `probes` (active checks), `requests` (real
//! requests), `peers` (the outlier comparison), `published` (the process-wide tables
//! ([`crate::tables`]) as published, in, and this VM's part of them, out), `changes` (which
//! events are changes, and the pool's share of the history of them, [`crate::history`]),
//! `balancers` (the other balancers' view in, this balancer's evidence out), and every one of
//! them ends in `refresh`, which works the routing out again in named steps.
//!
//! Both routing modes share all of this: in `cluster` routing the pick names the backend's
//! cluster (Envoy's `cluster_header`), in `host` routing its address (the `override_host` load
//! balancing policy), and then [`Pool::retry_choice`] names where a retry goes.

use crate::drain::{Drain, Signal};
use crate::etcd::FleetPart;
use crate::events::{Effects, Event};
use crate::guard::{Evidence, Guard};
use crate::history::Change;
use crate::outcome::RequestOutcome;
use crate::outlier::{Traffic, WindowClock};
use crate::passive::{InFlight, Outstanding};
use crate::retry::Budget;
use crate::schedule::{ProbeSlot, Schedule};
use crate::tables::PassiveTable;
use crate::time::Time;
use crate::warm_up::{warming, Warming};
use followed::Followed;
pub use followed::{EjectionState, StateSeen};
use held::ColdStart;
pub use member::Member;
use member::{PeerTraffic, ProbeRecord};
pub use published::Written;
use refresh::RoutingState;
use requests::{Counting, ForOutliers};
use upcheck_config::{Config, Upstream};

mod balancers;
mod changes;
mod fleet;
mod followed;
mod held;
mod member;
mod peers;
mod probes;
mod published;
mod refresh;
mod requests;
mod retries;
mod watching;

/// Where a request should go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// To this backend (position in the configuration).
    Backend(usize),
    /// Nowhere yet: nothing at all is known about any backend (cold start). Ask again once a
    /// probe has answered, or one probe timeout after start at the latest (then unknown
    /// backends are used).
    Wait,
    /// Nowhere yet, as for [`Pick::Wait`], on a proxy that resumes a request only when a call
    /// the request made is answered ([`upcheck_config::Proxy::resumes_held_requests`]): the
    /// request sends a probe to this backend itself ([`Pool::held_probe_sent`]) and asks again
    /// when it is answered. The backends are offered in turn.
    Probe(usize),
}

/// The backend a request was sent to, as the pool numbered it then: positions change when a
/// configuration adds, removes or reorders backends while requests are in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routed {
    /// Its position in the configuration of `generation`.
    pub index: usize,
    /// Which configuration that was (see [`Pool::generation`]).
    pub generation: u32,
    /// Where the pool keeps the request while it is in flight, if it does
    /// ([`Pool::request_routed`]).
    pub flight: Option<InFlight>,
    /// The per-try timeout the proxy was asked to give its attempts, in milliseconds, if it was
    /// ([`crate::retry`]): an attempt repeated after at least that long was slow, maybe an
    /// ordinary slow page, and counts for the outlier rules only; one repeated sooner failed,
    /// and counts as any failure.
    pub timed: Option<u32>,
}

/// Whether this VM holds its process's probing lease ([`crate::lease`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseHeld {
    /// It does: it probes, its schedule jittered from `seed`.
    Here {
        /// Seeds the probe schedule's jitter ([`Schedule::new`]).
        seed: u64,
    },
    /// Another VM holds it (or nobody could be granted it).
    Elsewhere,
}

/// Whether the proxy retried a request, by its own word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retried {
    /// It did not: the picked backend gave the answer.
    No,
    /// It did: the picked backend's attempt failed.
    Yes {
        /// The backend that gave the final answer (its position now), if the proxy says which.
        final_answer: Option<usize>,
    },
}

/// A probe on the wire.
#[derive(Debug, Clone)]
struct SentProbe {
    token: u32,
    key: String,
    sent: Time,
}

/// What the VM holding the probing lease keeps.
#[derive(Debug, Clone)]
struct Prober {
    schedule: Schedule,
    sent: Vec<SentProbe>,
    /// The earliest time a probe is due, so an idle tick costs nothing per backend.
    earliest: Time,
    /// Whether probe results are waiting to be published (at the next tick at the latest).
    unpublished: bool,
}

/// The backends as one VM sees them: one record per backend, one per concern of the pool.
#[derive(Debug, Clone)]
pub struct Pool<H = ()> {
    config: Config,
    members: Vec<Member<H>>,
    /// The routing as last worked out, and when to work it out again.
    layout: RoutingState,
    /// Which configuration is in force, and how the one before it numbered the backends.
    numbering: Numbering,
    /// Whether anything was heard yet, and the requests held until it is.
    cold_start: ColdStart,
    /// The latest tick, as requests that do not read the clock take it.
    clock: TickClock,
    /// On the VM holding the probing lease: its schedule and the probes on the wire.
    prober: Option<Prober>,
    /// On the prober, with a `fleet` configured: this balancer's part in the fleet of balancers
    /// ([`crate::etcd`]); boxed, as most pools have none and it is larger than the rest.
    fleet: Option<Box<FleetPart>>,
    /// This VM's requests in flight, tracked while `unhealthy_latency` is set or outliers are
    /// detected.
    outstanding: Outstanding,
    /// This pool's newest changes, oldest first, as the process-wide history was last read or
    /// written ([`crate::history`]).
    history: Vec<Change>,
    /// The process's extra attempts against its requests, as this VM knows them
    /// ([`crate::retry::Budget`]).
    budget: Budget,
}

/// Which configuration is in force, and how the one before it numbered the backends: a request
/// routed under an older one is renumbered as it ends.
#[derive(Debug, Clone, Default)]
struct Numbering {
    /// How many configurations were taken.
    generation: u32,
    /// Per position in the previous configuration, the backend's position now.
    renumbered: Vec<Option<usize>>,
}

/// The latest tick: when outliers are detected without `unhealthy_latency`, what a request's
/// start and end are taken to be, so no request reads the clock. Starts and latencies are then
/// known to within one tick (200 ms in the module): a request may count as stalled up to one
/// tick early, which is why `stall_after` is 500 ms or more, and a latency is a whole number of
/// ticks, which `min_latency` (250 ms) and the factor of 4 absorb.
#[derive(Debug, Clone)]
struct TickClock {
    /// When.
    at: Time,
    /// Where it falls in the outlier rules' window: worked out once a tick (and at each
    /// configuration, which may change the window) for every request counted until the next.
    window: WindowClock,
}

impl<H> Pool<H> {
    /// A pool that knows nothing yet about `config`'s backends, as of `now`; `handles` makes the
    /// adapter's data for each.
    pub fn new(config: Config, now: Time, handles: impl FnMut(&Upstream) -> H) -> Pool<H> {
        let mut pool = Pool {
            config: config.clone(),
            members: Vec::new(),
            layout: RoutingState::new(),
            numbering: Numbering::default(),
            cold_start: ColdStart::new(now),
            clock: TickClock {
                at: now,
                window: WindowClock::default(),
            },
            prober: None,
            fleet: None,
            outstanding: Outstanding::default(),
            history: Vec::new(),
            budget: Budget::default(),
        };
        // Nothing is reported yet: no VM probes for a pool just made (`lease` starts that).
        let _unreported = pool.configure(config, now, handles);
        pool
    }

    /// Takes a (new) configuration. Backends that stay (by name) keep what is known about them
    /// and their handles; new ones are unknown. Probing stops until this VM holds the new
    /// configuration's lease ([`Pool::lease`]); the VM that does probes every backend at once.
    pub fn configure(
        &mut self,
        config: Config,
        now: Time,
        mut handles: impl FnMut(&Upstream) -> H,
    ) -> Effects {
        let mut effects = Effects::default();
        // Watches were opened under the old configuration's lease (and service).
        self.end_health_watches(&mut effects);
        let mut old: Vec<Option<Member<H>>> = self.members.drain(..).map(Some).collect();
        let mut kept = Vec::with_capacity(config.upstreams.len());
        for upstream in &config.upstreams {
            let key = upstream.key();
            let previous = old
                .iter()
                .position(|m| m.as_ref().is_some_and(|m| m.key == key));
            let member = match previous.and_then(|at| old.get_mut(at).and_then(Option::take)) {
                Some(mut member) => {
                    member.upstream = upstream.clone();
                    member.evidence.operator_drain =
                        operator_drain(upstream, member.evidence.operator_drain, now);
                    // Where its duty is, the next fleet view says (before any probe is due).
                    member.probing.elsewhere = false;
                    member
                }
                None => Member {
                    upstream: upstream.clone(),
                    key,
                    back: false,
                    evidence: Evidence {
                        operator_drain: operator_drain(upstream, None, now),
                        ..Evidence::new(now)
                    },
                    routable: false,
                    probing: ProbeRecord::new(now),
                    counts: PeerTraffic::default(),
                    followed: Followed::new(now),
                    handles: handles(upstream),
                },
            };
            kept.push(previous);
            self.members.push(member);
        }
        if kept.iter().all(Option::is_none) {
            self.cold_start.restart(now);
        }
        self.outstanding.remap(&kept);
        self.numbering.renumbered = vec![None; old.len()];
        for (new, previous) in kept.iter().enumerate() {
            if let Some(slot) = previous.and_then(|p| self.numbering.renumbered.get_mut(p)) {
                *slot = Some(new);
            }
        }
        self.numbering.generation = self.numbering.generation.wrapping_add(1);
        self.layout.renumbered();
        if config.health_checks.outlier.window != self.config.health_checks.outlier.window {
            // Counts keyed by the old window's halves mean nothing under the new one.
            for m in &mut self.members {
                m.counts.own = Traffic::default();
            }
        }
        self.config = config;
        self.clock.window =
            WindowClock::new(self.clock.at, self.config.health_checks.outlier.window);
        self.cold_start.heard_of_configured(self.settled());
        self.layout.changed();
        // The new configuration has a lease of its own, which another VM may win: until this
        // one wins it (at its next tick, see `lease`), it neither probes nor publishes, so two
        // VMs never write the same backends' probe state at once, and the answers of probes sent
        // under the old lease are left out.
        self.prober = None;
        self.refresh(now, &mut effects);
        effects
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Every backend, in configuration order.
    pub fn members(&self) -> &[Member<H>] {
        &self.members
    }

    /// The adapter's own data about backend `index` (its handles), to update in place.
    pub fn handles_mut(&mut self, index: usize) -> Option<&mut H> {
        self.members.get_mut(index).map(|m| &mut m.handles)
    }

    /// The position of the backend named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.members.iter().position(|m| m.name() == name)
    }

    /// The position of the backend whose key is `key`.
    fn index_of_key(&self, key: &str) -> Option<usize> {
        self.members.iter().position(|m| m.key == key)
    }

    /// The backend whose address (what `host` routing names) is `address`.
    pub fn index_at(&self, address: &str) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.upstream.address.as_deref() == Some(address))
    }

    /// Whether, and why, the pool guard widens the routable set.
    pub fn guard(&self) -> Guard {
        self.layout.guard()
    }

    /// Backend `index`'s warm-up as the rotation applies it at `now`, if it is warming up
    /// ([`crate::warm_up`]; as of the rotation's latest layout, at most a tick old).
    pub fn warming_up(&self, index: usize, now: Time) -> Option<Warming> {
        let m = self
            .members
            .get(index)
            .filter(|m| self.layout.warming() && m.routable)?;
        warming(
            &self.config.health_checks.slow_start,
            &m.evidence.active,
            now,
        )
    }

    /// Whether this VM holds the probing lease.
    pub fn probing(&self) -> bool {
        self.prober.is_some()
    }

    /// Whether requests are timed: when `unhealthy_latency` is set (then a request counts the
    /// moment it is late), and for gRPC backends (a call's latency is to its response headers,
    /// not to its trailers, which a streaming call sends when it ends). The clock is then read
    /// for each request.
    pub fn times_requests(&self) -> bool {
        let checks = &self.config.health_checks;
        checks.passive.unhealthy_latency.is_some() || checks.active.grpc.is_some()
    }

    /// Whether the backends speak gRPC (the active check is gRPC's): a call's outcome is then
    /// read from `grpc-status` ([`crate::grpc::call`]), its latency to its response headers,
    /// and it stops counting as waiting once they came ([`Pool::request_answered`]).
    pub fn speaks_grpc(&self) -> bool {
        self.config.health_checks.active.grpc.is_some()
    }

    /// Whether outliers are detected: then every request is tracked while in flight, started at
    /// the latest tick unless it is timed.
    pub fn detects_outliers(&self) -> bool {
        self.config.health_checks.outlier.enabled
    }

    /// Whether this VM holds the probing lease: a VM that gains it probes every backend at once
    /// and from then on reports what probes and time change; one that loses it stops.
    pub fn lease(&mut self, lease: LeaseHeld, now: Time) -> Effects {
        let mut effects = Effects::default();
        match (lease, self.prober.is_some()) {
            (LeaseHeld::Here { seed }, false) => {
                for m in &mut self.members {
                    m.probing.slot = ProbeSlot::due_at(now);
                    // Report every gauge and contact afresh from this VM.
                    m.followed.report_afresh();
                }
                self.prober = Some(Prober {
                    schedule: Schedule::new(seed),
                    sent: Vec::new(),
                    earliest: now,
                    unpublished: true,
                });
                effects.events.push(Event::Probing);
                self.layout.changed();
                self.refresh(now, &mut effects);
            }
            (LeaseHeld::Elsewhere, true) => {
                self.end_health_watches(&mut effects);
                self.prober = None;
            }
            _ => {}
        }
        if lease == LeaseHeld::Elsewhere {
            self.end_fleet(&mut effects);
        }
        effects
    }

    /// Time passing: on the prober, the probes due and those never answered; on every VM,
    /// requests that just became `unhealthy_latency` late, and failures that expired.
    pub fn tick(&mut self, now: Time) -> Effects {
        let mut effects = Effects::default();
        if self.prober.is_some() {
            self.tick_fleet(now, &mut effects);
        }
        self.clock.at = now;
        self.clock.window = WindowClock::new(now, self.config.health_checks.outlier.window);
        if let Some(latency) = self.config.health_checks.passive.unhealthy_latency {
            for late in self.outstanding.overdue(now, latency) {
                if self.draining(late.backend) {
                    continue; // its requests finish without counting
                }
                let outcome = RequestOutcome::StillWaiting(late.waited);
                self.settle(
                    late.backend,
                    outcome,
                    Counting::Counts,
                    ForOutliers::Nothing,
                    late.at,
                    &mut effects,
                );
            }
        }
        let spent = self.retries_spent();
        if self.detects_outliers() {
            self.judge_outliers(now, &mut effects);
            self.share_traffic(&mut effects);
        }
        self.abandon_probes(now, &mut effects);
        self.forget_held_probes(now);
        self.refresh(now, &mut effects);
        self.plan_retries(now, spent, &mut effects);
        self.warm_up(now);
        self.schedule_probes(now, &mut effects);
        self.tick_health_watches(now, &mut effects);
        if let Some(prober) = self.prober.as_mut() {
            effects.publish_active |= std::mem::take(&mut prober.unpublished);
        }
        effects
    }

    /// The configuration in force: a request routed now carries it.
    pub fn generation(&self) -> u32 {
        self.numbering.generation
    }

    /// Where a retry of a request picked for `first` should go: another routable backend, the
    /// one whose turn is next; when `first` is the only one, a draining backend that still
    /// accepts connections (it serves while it drains, and the retry would otherwise meet the
    /// backend that just failed it); else `first` again. A retry never goes to a backend out of
    /// rotation for its health: in host routing, a header naming one address would let the
    /// proxy's fallback balancer pick any backend of the pool for the retry.
    pub fn retry_choice(&self, first: usize) -> usize {
        self.layout
            .next_other_than(first)
            .or_else(|| {
                self.members
                    .iter()
                    .position(|m| m.evidence.draining() && m.evidence.accepting() && !m.routable)
            })
            .filter(|other| *other != first)
            .unwrap_or(first)
    }

    /// Whether a pick of backend `index` should be checked against the process-wide table
    /// first: it has failures on record or is on a run of them, so another VM may just have
    /// ejected it.
    pub fn suspect(&self, index: usize, now: Time) -> bool {
        let passive = &self.config.health_checks.passive;
        self.members.get(index).is_some_and(|m| {
            m.evidence.passive.count(now, passive) > 0 || m.evidence.passive.run > 0
        })
    }

    /// Picks the backend for one request, checking a suspect pick against the process-wide
    /// passive table first ([`Pool::suspect`]), so a backend another VM just ejected is not sent
    /// one more request: `latest` reads that table (`None` when it did not change since this VM
    /// last took it in), and only for a suspect pick, so a clean backend costs no read of the
    /// table. (A VM that has seen no failure of a backend another took out learns of it before
    /// this, from the count [`crate::tables::Applied::takes_out`] keeps the adapter's pick
    /// reading.) What taking the table in asks for goes to `carry_out` (only then, so the common
    /// pick carries nothing); returns the final pick.
    pub fn pick_checked(
        &mut self,
        now: Time,
        latest: impl FnOnce() -> Option<PassiveTable>,
        carry_out: impl FnOnce(&mut Self, Effects),
    ) -> Pick {
        let pick = self.pick(now);
        let Pick::Backend(i) = pick else {
            return pick;
        };
        if !self.suspect(i, now) {
            return pick;
        }
        let Some(table) = latest() else {
            return pick;
        };
        let effects = self.passive_published(&table, now);
        // A backend still in rotation keeps its turn: one whose turns are few (a light weight,
        // a warm-up) would otherwise give each away whenever the table changed since its last.
        let pick = if self.members.get(i).is_some_and(|m| m.routable) {
            pick
        } else {
            self.pick(now)
        };
        carry_out(self, effects);
        pick
    }

    /// Picks the backend for one request. `now` matters only at cold start, so a caller may
    /// pass a recent time (its last tick) rather than read the clock per request.
    pub fn pick(&mut self, now: Time) -> Pick {
        if !self.cold_start.heard() {
            if let Some(held) = self.held(now) {
                return held;
            }
        }
        match self.layout.next() {
            Some(i) => Pick::Backend(i),
            // The guard never leaves the set empty; this is only reachable with no backends.
            None => Pick::Backend(0),
        }
    }
}

/// Backend `upstream`'s drain by the operator, once this VM takes in its configuration at `now`:
/// the one it had, kept while the configuration still drains it (from when it began).
fn operator_drain(upstream: &Upstream, had: Option<Drain>, now: Time) -> Option<Drain> {
    upstream.drain.then(|| {
        had.unwrap_or(Drain {
            since: now,
            by: Signal::Operator,
        })
    })
}
