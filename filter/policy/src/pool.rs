//! One VM's view of the fleet, and the one way in for everything it observes.
//!
//! Each kind of observation enters through one method, and each returns its [`Effects`]:
//! - [`Pool::configure`]: a (re)configuration; backends that stay keep their state, by name;
//! - [`Pool::lease`]: whether this VM holds the probing lease (it then schedules and reports);
//! - [`Pool::tick`]: time passing: probes due, probes never answered, requests overdue,
//!   failures expiring; with outlier detection on, this VM's request counts shared in one change
//!   and every backend in rotation judged against its peers (a stall shows only here);
//! - [`Pool::probe_sent`], [`Pool::probe_refused`], [`Pool::probe_answered`]: active checks;
//! - [`Pool::request_routed`], [`Pool::request_settled`]: real requests, including a retried
//!   attempt and a client gone. Each outcome is counted in this VM's traffic; a failure is also
//!   shared at once with this VM's verdict on its backend and the run rule as it sees the peers,
//!   so a broken backend goes out within a few requests, not at the next tick;
//! - [`Pool::active_published`], [`Pool::passive_written`]: tables another VM (or this one)
//!   wrote to shared data.
//!
//! The pool never calls the host. The adapter carries out the effects (compare-and-swap, probes,
//! log lines, metrics) and hands back what came of them through the same entry points, so the
//! tests drive exactly the path that ships.
//!
//! Both routing modes share all of this: in `cluster` routing the pick names the backend's
//! cluster (Envoy's `cluster_header`), in `host` routing its address (the `override_host` load
//! balancing policy), and then [`Pool::retry_choice`] names where a retry goes.

use crate::active::{contains, Health, Pages, ProbeOutcome, Transition, PROXY_REASON_BYTES, SHED};
use crate::config::{Config, Upstream};
use crate::events::{Effects, EjectionReason, Event};
use crate::fleet::{route, Evidence, Guard};
use crate::outcome::{FailureKind, RequestOutcome};
use crate::outlier::{judge, run_rule, Traffic, WindowClock};
use crate::passive::{Outstanding, Recorded};
use crate::schedule::{ProbeSlot, Schedule};
use crate::select::Rotation;
use crate::tables::{
    ActiveTable, AnnounceTable, Applied, OutlierNews, PassiveChange, PassiveTable, RequestNews,
};
use crate::time::Time;
use std::time::Duration;

/// Where a request should go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// To this backend (position in the configuration).
    Backend(usize),
    /// Nowhere yet: nothing at all is known about any backend (cold start). Ask again once a
    /// probe has answered, or at this time at the latest (one probe timeout after start).
    Wait(Time),
}

/// The backend a request was sent to, as the pool numbered it then: positions change when a
/// configuration adds, removes or reorders backends while requests are in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routed {
    /// Its position in the configuration of `generation`.
    pub index: usize,
    /// Which configuration that was (see [`Pool::generation`]).
    pub generation: u32,
}

/// Everything this VM keeps about one backend.
#[derive(Debug, Clone)]
pub struct Member<H> {
    /// Its configuration: name, weight, cluster, address.
    pub upstream: Upstream,
    /// Its key in the process-wide tables ([`Upstream::key`]).
    pub key: String,
    /// Whether this configuration is the newest that lists it, so its prober probes it.
    probed_here: bool,
    /// Back in rotation with the backends whose probes fail alike (fleet rule 3).
    pub back: bool,
    /// What probes and requests say about it.
    pub evidence: Evidence,
    /// Whether it takes traffic now.
    pub routable: bool,
    /// Whether it is passively ejected now (within the cap).
    pub ejected: bool,
    /// Whether anything accepted its latest contact, as last reported.
    accepting: bool,
    /// Passing probes and not ejected, as last reported (`None`: not yet).
    in_service: Option<bool>,
    /// When it is probed next.
    probe: ProbeSlot,
    /// Whether a probe the proxy refused to send was reported.
    unprobeable: bool,
    /// When the newest probe whose answer was taken was sent: an answer to an older one, late
    /// (a slow answer overtaken by a newer probe's), says less and is dropped.
    newest_probe: Option<Time>,
    /// The ejection applied to it and not yet over: `Some(true)` for an outlier ejection,
    /// `Some(false)` for a full failure window. An ejection ends when it is no longer earned,
    /// not when the backend leaves the set the cap counts (failing its probes meanwhile).
    ejection: Option<bool>,
    /// Whether it earned an ejection that the cap keeps in rotation, as last refreshed: when
    /// the cap lets that ejection take effect, the prober reports it ([`Event::CapLifted`]).
    held_back: bool,
    /// This VM's request outcomes not yet added to the process-wide counts (at the next tick).
    traffic: Traffic,
    /// The adapter's own data about it (its metric handles).
    pub handles: H,
}

impl<H> Member<H> {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.upstream.name
    }
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

/// The fleet as one VM sees it.
#[derive(Debug, Clone)]
pub struct Pool<H = ()> {
    config: Config,
    members: Vec<Member<H>>,
    guard: Guard,
    rotation: Rotation,
    started: Time,
    /// Whether anything was heard from any backend (then there is no cold-start wait).
    heard: bool,
    /// Whether an observation changed a backend since the routing was last worked out.
    changed: bool,
    /// When a remembered failure next expires (the routing can change by time alone then).
    expires: Option<Time>,
    prober: Option<Prober>,
    /// Counts configurations taken.
    generation: u32,
    /// Whether the rotation must be laid out again though no backend's routability changed:
    /// a configuration renumbered the backends.
    relayout: bool,
    /// Per position in the previous configuration, the backend's position now.
    renumbered: Vec<Option<usize>>,
    /// This VM's requests in flight, tracked while `unhealthy_latency` is set or outliers are
    /// detected.
    outstanding: Outstanding,
    /// The time of the latest tick: when outliers are detected without `unhealthy_latency`, what
    /// a request's start and end are taken to be, so no request reads the clock. Starts and
    /// latencies are then known to within one tick (200 ms in the module): a request may count as
    /// stalled up to one tick early, which is why `stall_after` is 500 ms or more, and a latency
    /// is a whole number of ticks, which `min_latency` (250 ms) and the factor of 4 absorb.
    ticked: Time,
}

/// How long a probe may go unanswered, past its timeout, before it is given up on: the host
/// answers every call by its timeout, so only a broken host needs this, but nothing may grow
/// without bound.
fn abandon_after(timeout: std::time::Duration) -> std::time::Duration {
    timeout.saturating_mul(2)
}

impl<H> Pool<H> {
    /// A pool that knows nothing yet about `config`'s backends, as of `now`; `handles` makes the
    /// adapter's data for each.
    pub fn new(config: Config, now: Time, handles: impl FnMut(&Upstream) -> H) -> Pool<H> {
        let mut pool = Pool {
            config: config.clone(),
            members: Vec::new(),
            guard: Guard::Off,
            rotation: Rotation::default(),
            started: now,
            heard: false,
            changed: true,
            expires: None,
            prober: None,
            generation: 0,
            relayout: true,
            renumbered: Vec::new(),
            outstanding: Outstanding::default(),
            ticked: now,
        };
        pool.configure(config, now, handles);
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
                    member
                }
                None => Member {
                    upstream: upstream.clone(),
                    key,
                    probed_here: true,
                    back: false,
                    evidence: Evidence::new(now),
                    routable: false,
                    ejected: false,
                    accepting: true,
                    in_service: None,
                    probe: ProbeSlot::due_at(now),
                    unprobeable: false,
                    newest_probe: None,
                    ejection: None,
                    held_back: false,
                    traffic: Traffic::default(),
                    handles: handles(upstream),
                },
            };
            kept.push(previous);
            self.members.push(member);
        }
        if kept.iter().all(Option::is_none) {
            self.started = now;
        }
        self.outstanding.remap(&kept);
        self.renumbered = vec![None; old.len()];
        for (new, previous) in kept.iter().enumerate() {
            if let Some(slot) = previous.and_then(|p| self.renumbered.get_mut(p)) {
                *slot = Some(new);
            }
        }
        self.generation = self.generation.wrapping_add(1);
        self.relayout = true;
        if config.health_checks.outlier.window != self.config.health_checks.outlier.window {
            // Counts keyed by the old window's halves mean nothing under the new one.
            for m in &mut self.members {
                m.traffic = Traffic::default();
            }
        }
        self.config = config;
        self.heard = self.members.iter().any(|m| m.evidence.heard_from());
        self.changed = true;
        // The new configuration has a lease of its own, which another VM may win: until this
        // one wins it (at its next tick, see `lease`), it neither probes nor publishes, so two
        // VMs never write the same backends' probe state at once, and the answers of probes sent
        // under the old lease are left out.
        self.prober = None;
        let mut effects = Effects::default();
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
    pub fn announced(&mut self, table: &AnnounceTable, fingerprint: u64, now: Time) {
        for m in &mut self.members {
            let here = entry(table, usize::MAX, &m.key).is_none_or(|newest| *newest == fingerprint);
            if here && !m.probed_here {
                m.probe = ProbeSlot::due_at(now);
                if let Some(prober) = self.prober.as_mut() {
                    prober.earliest = now;
                }
            }
            m.probed_here = here;
        }
    }

    /// The backend whose address (what `host` routing names) is `address`.
    pub fn index_at(&self, address: &str) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.upstream.address.as_deref() == Some(address))
    }

    /// Whether, and why, the fleet guard widens the routable set.
    pub fn guard(&self) -> Guard {
        self.guard
    }

    /// Whether this VM holds the probing lease.
    pub fn probing(&self) -> bool {
        self.prober.is_some()
    }

    /// Whether requests are timed (only when `unhealthy_latency` is set: then a request counts
    /// the moment it is late, and the clock is read for each).
    pub fn times_requests(&self) -> bool {
        self.config
            .health_checks
            .passive
            .unhealthy_latency
            .is_some()
    }

    /// Whether outliers are detected: then every request is tracked while in flight, started at
    /// the latest tick unless it is timed.
    pub fn detects_outliers(&self) -> bool {
        self.config.health_checks.outlier.enabled
    }

    /// Whether this VM holds the probing lease: a VM that gains it probes every backend at once
    /// and from then on reports what probes and time change; one that loses it stops.
    pub fn lease(&mut self, held: bool, now: Time, seed: u64) -> Effects {
        let mut effects = Effects::default();
        match (held, self.prober.is_some()) {
            (true, false) => {
                for m in &mut self.members {
                    m.probe = ProbeSlot::due_at(now);
                    // Report every gauge and contact afresh from this VM.
                    m.in_service = None;
                }
                self.prober = Some(Prober {
                    schedule: Schedule::new(seed),
                    sent: Vec::new(),
                    earliest: now,
                    unpublished: true,
                });
                effects.events.push(Event::Probing);
                self.changed = true;
                self.refresh(now, &mut effects);
            }
            (false, true) => self.prober = None,
            _ => {}
        }
        effects
    }

    /// Time passing: on the prober, the probes due and those never answered; on every VM,
    /// requests that just became `unhealthy_latency` late, and failures that expired.
    pub fn tick(&mut self, now: Time) -> Effects {
        let mut effects = Effects::default();
        self.ticked = now;
        if let Some(latency) = self.config.health_checks.passive.unhealthy_latency {
            for late in self.outstanding.overdue(now, latency) {
                let outcome = RequestOutcome::StillWaiting(late.waited);
                self.settle(late.backend, outcome, true, None, late.at, &mut effects);
            }
        }
        if self.detects_outliers() {
            self.judge_outliers(now, &mut effects);
            self.share_traffic(&mut effects);
        }
        self.abandon_probes(now, &mut effects);
        self.refresh(now, &mut effects);
        self.schedule_probes(now, &mut effects);
        if let Some(prober) = self.prober.as_mut() {
            effects.publish_active |= std::mem::take(&mut prober.unpublished);
        }
        effects
    }

    /// Hands this VM's outcomes since the last tick to the process-wide counts, in one change.
    fn share_traffic(&mut self, effects: &mut Effects) {
        let deltas: Vec<(String, Traffic)> = self
            .members
            .iter_mut()
            .filter(|m| !m.traffic.is_empty())
            .map(|m| (m.key.clone(), std::mem::take(&mut m.traffic)))
            .collect();
        if !deltas.is_empty() {
            effects.share.push(PassiveChange::Traffic(deltas));
        }
    }

    /// Judges every backend in rotation against its peers, with its requests in flight here:
    /// the tick is when a stalled backend shows (its requests do not end).
    fn judge_outliers(&mut self, now: Time, effects: &mut Effects) {
        // Nobody can be judged before the backends in rotation have `min_requests` requests
        // between them (every rule needs the peers to have had that many): a quiet pool, of any
        // size, costs a sum per tick, not a comparison per backend.
        let config = &self.config.health_checks.outlier;
        let clock = WindowClock::new(now, config.window);
        let requests: f64 = self
            .members
            .iter()
            .filter(|m| m.routable)
            .map(|m| m.evidence.passive.traffic.requests_at(clock) + m.traffic.requests_at(clock))
            .sum();
        if requests < f64::from(config.min_requests) {
            return;
        }
        let peers = self.all_peers();
        for ((index, m), peers) in self.members.iter().enumerate().zip(peers) {
            let (true, Some(peers)) = (m.routable, peers) else {
                continue;
            };
            let starts = self.outstanding.starts(index);
            let traffic = view(m);
            let standing = &m.evidence.passive.outlier;
            let config = &self.config.health_checks.outlier;
            if let Some(verdict) = judge(&traffic, standing, &starts, [&peers], config, now) {
                effects.share.push(PassiveChange::Eject {
                    key: m.key.clone(),
                    at: now,
                    verdict,
                });
            }
        }
    }

    /// For every backend, the process-wide traffic of the others in rotation, pooled (`None`
    /// when it has no peer in rotation), in O(N) merges rather than O(N²): what precedes each
    /// and what follows it are accumulated once each.
    fn all_peers(&self) -> Vec<Option<Traffic>> {
        let views: Vec<Option<Traffic>> = self
            .members
            .iter()
            .map(|m| m.routable.then(|| view(m)))
            .collect();
        let mut before = Vec::with_capacity(views.len());
        let mut pooled = None;
        for v in &views {
            before.push(pooled.clone());
            pooled = pool_traffic(&pooled, v);
        }
        let mut after = vec![None; views.len()];
        let mut pooled = None;
        for (slot, v) in after.iter_mut().zip(&views).rev() {
            *slot = pooled.clone();
            pooled = pool_traffic(&pooled, v);
        }
        before
            .iter()
            .zip(&after)
            .map(|(b, a)| pool_traffic(b, a))
            .collect()
    }

    /// The process-wide traffic of the backends in rotation other than `index`, pooled, as this
    /// VM knows it; `None` when it has no peer in rotation.
    fn peers(&self, index: usize) -> Option<Traffic> {
        let mut pooled: Option<Traffic> = None;
        for (j, m) in self.members.iter().enumerate() {
            if j != index && m.routable {
                pooled.get_or_insert_with(Traffic::default).merge(&view(m));
            }
        }
        pooled
    }

    /// Marks probe results published when `effects` publishes them.
    fn published(&mut self, effects: &Effects) {
        if let (Some(prober), true) = (self.prober.as_mut(), effects.publish_active) {
            prober.unpublished = false;
        }
    }

    /// Gives up on probes the host never answered, as timed out.
    fn abandon_probes(&mut self, now: Time, effects: &mut Effects) {
        let timeout = self.config.health_checks.active.timeout;
        let Some(prober) = self.prober.as_mut() else {
            return;
        };
        let (gone, kept): (Vec<SentProbe>, Vec<SentProbe>) = prober
            .sent
            .drain(..)
            .partition(|p| now.saturating_sub(p.sent) >= abandon_after(timeout));
        prober.sent = kept;
        for probe in gone {
            if let Some(i) = self.index_of_key(&probe.key) {
                self.observe_probe(i, ProbeOutcome::Timeout(timeout), probe.sent, now, effects);
            }
        }
    }

    fn schedule_probes(&mut self, now: Time, effects: &mut Effects) {
        let interval = self.config.health_checks.active.interval;
        let jitter = self.config.jitter();
        let Some(prober) = self.prober.as_mut() else {
            return;
        };
        if now < prober.earliest {
            return;
        }
        let mut earliest = now.saturating_add(interval);
        for (i, m) in self.members.iter_mut().enumerate() {
            if !m.probed_here {
                continue;
            }
            if prober.schedule.take(&mut m.probe, now, interval, jitter) {
                effects.probes.push(i);
            }
            earliest = earliest.min(m.probe.next());
        }
        prober.earliest = earliest;
    }

    /// A probe to backend `index` is on the wire as `token`.
    pub fn probe_sent(&mut self, index: usize, token: u32, now: Time) {
        let (Some(prober), Some(m)) = (self.prober.as_mut(), self.members.get(index)) else {
            return;
        };
        prober.sent.push(SentProbe {
            token,
            key: m.key.clone(),
            sent: now,
        });
    }

    /// The proxy refused to send a probe to backend `index` (`why`: what it said): the backend
    /// is treated as not serving, and the refusal is reported once.
    pub fn probe_refused(&mut self, index: usize, why: &str, now: Time) -> Effects {
        let mut effects = Effects::default();
        if let Some(m) = self.members.get_mut(index) {
            if !m.unprobeable {
                m.unprobeable = true;
                effects.events.push(Event::Unprobeable {
                    name: m.name().to_owned(),
                    cluster: m.upstream.cluster().to_owned(),
                    why: why.to_owned(),
                });
            }
        }
        self.observe_probe(index, ProbeOutcome::Refused, now, now, &mut effects);
        self.refresh(now, &mut effects);
        self.published(&effects);
        effects
    }

    /// The answer to probe `token`: its status (none if the call was reset before any answer),
    /// whether the proxy made the answer itself rather than the backend, and the first
    /// `max_size` bytes of its body. A token that is not one of this VM's is ignored.
    pub fn probe_answered(
        &mut self,
        token: u32,
        status: Option<u16>,
        proxy_made: bool,
        body: &[u8],
        now: Time,
    ) -> Effects {
        let mut effects = Effects::default();
        let Some(prober) = self.prober.as_mut() else {
            return effects;
        };
        let Some(at) = prober.sent.iter().position(|p| p.token == token) else {
            return effects;
        };
        let probe = prober.sent.swap_remove(at);
        let Some(index) = self.index_of_key(&probe.key) else {
            return effects; // removed by a reconfiguration meanwhile
        };
        if proxy_made && status == Some(503) && contains(body, SHED) {
            // Shed by the proxy's circuit breaker, never sent: no word on the backend, whose
            // next probe goes out at its time.
            return effects;
        }
        let active = &self.config.health_checks.active;
        let outcome = match status {
            Some(status) => ProbeOutcome::classify(status, proxy_made, body, active),
            None => ProbeOutcome::Refused,
        };
        self.observe_probe(index, outcome, probe.sent, now, &mut effects);
        self.refresh(now, &mut effects);
        self.published(&effects);
        effects
    }

    /// How many bytes of a probe's body the policy needs: of an answer the proxy made itself,
    /// enough to read its reason ([`PROXY_REASON_BYTES`]); of the backend's, none unless
    /// `expect_body` is set.
    pub fn probe_body_wanted(&self, body_size: usize, proxy_made: bool) -> usize {
        let active = &self.config.health_checks.active;
        let wanted = match (proxy_made, &active.expect_body) {
            (true, _) => PROXY_REASON_BYTES,
            (false, Some(_)) => usize::try_from(active.max_size).unwrap_or(usize::MAX),
            (false, None) => 0,
        };
        body_size.min(wanted)
    }

    /// Takes a probe sent at `sent` that settled with `outcome` at `now`.
    fn observe_probe(
        &mut self,
        index: usize,
        outcome: ProbeOutcome,
        sent: Time,
        now: Time,
        effects: &mut Effects,
    ) {
        let active = &self.config.health_checks.active;
        let pages = self.pages(index, sent, now);
        let Some(m) = self.members.get_mut(index) else {
            return;
        };
        if m.newest_probe.is_some_and(|newest| sent < newest) {
            return;
        }
        m.newest_probe = Some(sent);
        if let Some(prober) = self.prober.as_mut() {
            prober.unpublished = true;
        }
        self.heard = true;
        // A pass on a healthy backend whose last probe passed too (the steady state) changes
        // nothing the routing reads, so the routing is not worked out again: at 1,000 backends
        // that would be 1,000 backends' worth of work for each of the 1,000 answers of a round.
        let before = m.evidence.active;
        let accepting = m.evidence.accepting();
        let transition = m.evidence.active.observe(outcome, now, active, pages);
        let steady = before.status == Health::Healthy
            && before.contradicted.is_none()
            && before.last.is_some_and(|(_, last)| last.passed())
            && outcome.passed()
            && m.evidence.accepting() == accepting;
        self.changed |= !steady;
        effects.events.push(Event::Probed {
            index,
            name: m.name().to_owned(),
            outcome,
        });
        if transition == (Transition::Contradicted { first: true }) {
            effects.events.push(Event::ProbeContradicted {
                name: m.name().to_owned(),
                outcome,
            });
            effects.publish_active = true;
        }
        if let Transition::Changed { from, to, reason } = transition {
            effects.events.push(Event::HealthChanged {
                name: m.name().to_owned(),
                from,
                to,
                reason,
            });
            effects.publish_active = true;
        }
        if m.accepting != m.evidence.accepting() {
            effects.publish_active = true;
        }
    }

    /// What backend `index`'s real requests say, process-wide, against a probe sent at `sent`
    /// that failed at `now` (see [`Pages`]). Requests are counted only with outlier detection on.
    fn pages(&self, index: usize, sent: Time, now: Time) -> Pages {
        let Some(m) = self.members.get(index) else {
            return Pages::Unknown;
        };
        let passive = &m.evidence.passive;
        let failing = passive.run > 0
            || passive.outlier.is_ejected(now)
            || passive.full(now, &self.config.health_checks.passive);
        match view(m).last_served() {
            _ if failing || !self.detects_outliers() => Pages::Unknown,
            Some(served) if served >= sent => Pages::AnsweredMeanwhile,
            Some(served)
                if now.saturating_sub(served) <= self.config.health_checks.outlier.window =>
            {
                Pages::Answering
            }
            _ => Pages::Unknown,
        }
    }

    /// A request `id` was sent to backend `index` at `now` (when requests are timed; otherwise,
    /// when outliers are detected, it is taken to have started at the latest tick).
    pub fn request_routed(&mut self, id: u32, index: usize, now: Option<Time>) {
        let started = now.or_else(|| self.detects_outliers().then_some(self.ticked));
        if let Some(started) = started {
            self.outstanding.begin(id, index, started);
        }
    }

    /// Request `id`, sent to backend `picked`, ended with `outcome`. When the proxy retried it,
    /// `retried` names the backend that gave the final answer (if the proxy says which): the
    /// picked backend's attempt failed, and `outcome` belongs to the other. `now` is read only
    /// if the outcome changes anything.
    pub fn request_settled(
        &mut self,
        id: u32,
        picked: Routed,
        retried: Option<Option<usize>>,
        outcome: RequestOutcome,
        now: impl Fn() -> Time,
    ) -> Effects {
        let mut effects = Effects::default();
        let ended = self.outstanding.end(id);
        // A backend removed meanwhile, or a request from two configurations ago: its outcome
        // belongs to no backend this pool knows by that position.
        let Some(picked) = self.current(picked) else {
            return effects;
        };
        // A request counted when it became late is not counted again when it ends (though the
        // outlier rules take its outcome).
        let counted_late = ended.is_some_and(|(_, late)| late);
        let first = match retried {
            Some(_) => RequestOutcome::RetriedElsewhere,
            None => outcome,
        };
        let latency = match first {
            RequestOutcome::Answered { latency, .. } if self.times_requests() => Some(latency),
            RequestOutcome::Answered { .. } => {
                ended.map(|(started, _)| self.ticked.saturating_sub(started))
            }
            _ => None,
        };
        self.settle_lazily(picked, first, !counted_late, latency, &now, &mut effects);
        if let Some(Some(other)) = retried.filter(|o| *o != Some(picked)) {
            self.settle_lazily(other, outcome, true, None, &now, &mut effects);
        }
        effects
    }

    /// The configuration in force: a request routed now carries it.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Where the backend a request was routed to is now, if it is still configured.
    fn current(&self, routed: Routed) -> Option<usize> {
        if routed.generation == self.generation {
            Some(routed.index)
        } else if routed.generation.wrapping_add(1) == self.generation {
            self.renumbered.get(routed.index).copied().flatten()
        } else {
            None
        }
    }

    /// Settles one outcome unless it changes nothing shared (a success at a backend known to
    /// be serving and not on a run of failures): the common case costs no clock read and no
    /// shared-data write, only this VM's count. `passive`: whether the passive checks still take
    /// it (not if it was counted late); `latency`: how long its answer took, if known.
    fn settle_lazily(
        &mut self,
        index: usize,
        outcome: RequestOutcome,
        passive: bool,
        latency: Option<Duration>,
        now: &impl Fn() -> Time,
        effects: &mut Effects,
    ) {
        let outlier = self.count_outcome(index, outcome, latency);
        let Some(m) = self.members.get(index) else {
            return;
        };
        let counts = passive
            && outcome
                .failure(&self.config.health_checks.passive)
                .is_some();
        let changes_contact = passive
            && outcome
                .contact()
                .is_some_and(|refused| refused == m.evidence.accepting());
        if counts || changes_contact || outlier.is_some() {
            self.settle(index, outcome, passive, outlier, now(), effects);
        }
    }

    /// Counts an outcome in this VM's traffic for backend `index`; returns it as news for the
    /// shared run of failures (a failure, or a success ending a run), if it is any.
    fn count_outcome(
        &mut self,
        index: usize,
        outcome: RequestOutcome,
        latency: Option<Duration>,
    ) -> Option<Option<FailureKind>> {
        let config = &self.config.health_checks.outlier;
        let m = self.members.get_mut(index)?;
        if !config.enabled || !outcome.judged() {
            return None;
        }
        let kind = outcome.outlier_failure();
        m.traffic.record(self.ticked, kind, latency, config.window);
        (kind.is_some() || m.evidence.passive.run > 0).then_some(kind)
    }

    /// Shares one outcome: for the passive checks if `passive`, and for the outlier rules if
    /// `outlier` is news (a failure is judged here and now, with this VM's view of its peers).
    fn settle(
        &mut self,
        index: usize,
        outcome: RequestOutcome,
        passive: bool,
        outlier: Option<Option<FailureKind>>,
        at: Time,
        effects: &mut Effects,
    ) {
        let outlier = outlier.map(|kind| self.outlier_news(index, kind, at));
        let Some(m) = self.members.get(index) else {
            return;
        };
        let failure = outcome
            .failure(&self.config.health_checks.passive)
            .filter(|_| passive);
        if let Some(failure) = failure {
            effects.events.push(Event::RequestFailed {
                index,
                name: m.name().to_owned(),
                failure,
            });
        }
        effects.share.push(PassiveChange::Request(RequestNews {
            key: m.key.clone(),
            at,
            refused: outcome.contact().filter(|_| passive),
            failure,
            outlier,
        }));
    }

    /// The outlier rules' news of a failure (`kind`) or a success at backend `index`: a failure
    /// comes with this VM's verdict on its share and with the run rule as it sees the peers.
    fn outlier_news(&self, index: usize, kind: Option<FailureKind>, at: Time) -> OutlierNews {
        let config = &self.config.health_checks.outlier;
        let judged = kind.and_then(|_| Some((self.members.get(index)?, self.peers(index)?)));
        let Some((m, peers)) = judged else {
            return OutlierNews {
                failure: kind,
                run: None,
                verdict: None,
            };
        };
        let starts = self.outstanding.starts(index);
        let standing = &m.evidence.passive.outlier;
        OutlierNews {
            failure: kind,
            run: run_rule(&peers, config, at),
            verdict: judge(&view(m), standing, &starts, [&peers], config, at),
        }
    }

    /// The passive table as this VM just wrote it, with what its change did: the VM whose
    /// failure filled a backend's window, or whose change started its outlier ejection, reports
    /// that ejection (or that the cap kept it).
    pub fn passive_written(
        &mut self,
        table: &PassiveTable,
        applied: Option<(&PassiveChange, Applied)>,
        now: Time,
    ) -> Effects {
        let mut effects = Effects::default();
        self.adopt_passive(table);
        self.refresh(now, &mut effects);
        let Some((change, applied)) = applied else {
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
            let reason = EjectionReason::Outlier(verdict);
            self.report_ejection(index, ejection.until, reason, now, &mut effects);
        }
        effects
    }

    /// Reports that backend `index` earned an ejection until `until`: started, or kept in
    /// rotation by the cap.
    fn report_ejection(
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
        effects.events.push(if m.ejected {
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
    /// skipped: its own state is newer).
    pub fn active_published(&mut self, table: &ActiveTable, now: Time) -> Effects {
        let mut effects = Effects::default();
        let probing = self.prober.is_some();
        for (i, m) in self.members.iter_mut().enumerate() {
            if probing && m.probed_here {
                continue;
            }
            if let Some(active) = entry(table, i, &m.key) {
                if m.evidence.active != *active {
                    m.evidence.active = *active;
                    self.changed = true;
                    self.heard |= m.evidence.heard_from();
                }
            }
        }
        self.refresh(now, &mut effects);
        effects
    }

    /// The probe state of the backends this VM probes, for it to merge into the probe table.
    pub fn active_table(&self) -> ActiveTable {
        self.members
            .iter()
            .filter(|m| m.probed_here)
            .map(|m| (m.key.clone(), m.evidence.active))
            .collect()
    }

    fn adopt_passive(&mut self, table: &PassiveTable) {
        for (i, m) in self.members.iter_mut().enumerate() {
            if let Some(passive) = entry(table, i, &m.key) {
                if m.evidence.passive != *passive {
                    m.evidence.passive = passive.clone();
                    self.changed = true;
                    self.heard |= m.evidence.heard_from();
                }
            }
        }
    }

    /// Works out the routing again if anything changed or a failure expired, and reports what
    /// changed: on the prober, everything process-wide (so it is logged once per process).
    fn refresh(&mut self, now: Time, effects: &mut Effects) {
        if !self.changed && self.expires.is_none_or(|e| now < e) {
            return;
        }
        self.changed = false;
        let passive = &self.config.health_checks.passive;
        self.expires = self
            .members
            .iter()
            .flat_map(|m| {
                let outlier = m.evidence.passive.outlier.in_force(now).map(|(_, t)| t);
                [m.evidence.passive.next_expiry(now, passive), outlier]
            })
            .flatten()
            .min();
        let evidence: Vec<&Evidence> = self.members.iter().map(|m| &m.evidence).collect();
        let routing = route(&evidence, now, &self.config);
        let prober = self.prober.is_some();
        let mut routable_changed = false;
        for (i, m) in self.members.iter_mut().enumerate() {
            // Each backend's changes are reported by its own prober, so once per process.
            let reporting = prober && m.probed_here;
            let routable = routing.routable.get(i).copied().unwrap_or(false);
            let ejected = routing.ejected.get(i).copied().unwrap_or(false);
            routable_changed |= routable != m.routable;
            // A probe sent since the ejection began, answered or on its way, says whether it
            // is still broken (a backend re-added with failures on record, probed as it joined).
            let since = m.evidence.passive.ejected_since(now, passive);
            let probed_since = since.is_some_and(|since| {
                m.newest_probe.is_some_and(|sent| sent >= since)
                    || self.prober.as_ref().is_some_and(|p| {
                        p.sent
                            .iter()
                            .any(|probe| probe.key == m.key && probe.sent >= since)
                    })
            });
            if reporting && ejected && m.ejection.is_none() && !probed_since {
                // Probed at once, once per ejection (not again when the cap lets it back and
                // takes it out anew): by the time its failures expire, a probe has said whether
                // it is still broken.
                m.probe.due_now();
                if let Some(prober) = self.prober.as_mut() {
                    prober.earliest = now;
                }
            }
            let outlier = m.evidence.passive.outlier.is_ejected(now);
            let earned = outlier || m.evidence.passive.ejected_since(now, passive).is_some();
            if reporting && ejected && m.held_back {
                let until = [
                    m.evidence.passive.outlier.in_force(now).map(|(_, t)| t),
                    m.evidence.passive.window_ends(now, passive),
                ];
                effects.events.push(Event::CapLifted {
                    index: i,
                    name: m.name().to_owned(),
                    length: until
                        .into_iter()
                        .flatten()
                        .max()
                        .unwrap_or(now)
                        .saturating_sub(now),
                });
            }
            m.held_back = earned && !ejected;
            if ejected {
                m.ejection = Some(outlier);
            }
            if let Some(was_outlier) = m.ejection.filter(|_| !earned) {
                m.ejection = None;
                if reporting {
                    effects.events.push(Event::EjectionEnded {
                        name: m.name().to_owned(),
                        outlier: was_outlier,
                    });
                }
            }
            let accepting = m.evidence.accepting();
            if accepting != m.accepting {
                m.accepting = accepting;
                if reporting {
                    effects.events.push(Event::ContactChanged {
                        name: m.name().to_owned(),
                        accepting,
                    });
                }
            }
            let in_service = m.evidence.active.status == Health::Healthy && !ejected;
            if reporting && m.in_service != Some(in_service) {
                m.in_service = Some(in_service);
                effects.events.push(Event::InService {
                    index: i,
                    name: m.name().to_owned(),
                    in_service,
                });
            }
            m.routable = routable;
            m.ejected = ejected;
        }
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
                if prober && m.probed_here {
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
        if routable_changed || std::mem::take(&mut self.relayout) {
            let routable: Vec<bool> = self.members.iter().map(|m| m.routable).collect();
            let weights: Vec<u32> = self.members.iter().map(|m| m.upstream.weight).collect();
            self.rotation = Rotation::new(&routable, &weights);
        }
        if routing.guard != self.guard {
            self.guard = routing.guard;
            if prober {
                effects.events.push(Event::Guard(routing.guard));
            }
        }
    }

    /// Where a retry of a request picked for `first` should go: another routable backend, the
    /// one whose turn is next, or `first` again when it is the only one. A retry never goes to a
    /// backend out of rotation: in host routing, a header naming one address would let the
    /// proxy's fallback balancer pick any backend of the pool for the retry.
    pub fn retry_choice(&self, first: usize) -> usize {
        self.rotation.next_other_than(first).unwrap_or(first)
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

    /// Picks the backend for one request. `now` matters only at cold start, so a caller may
    /// pass a recent time (its last tick) rather than read the clock per request.
    pub fn pick(&mut self, now: Time) -> Pick {
        let wait_until = self
            .started
            .saturating_add(self.config.health_checks.active.timeout);
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

/// Two traffic records pooled (either may be absent).
fn pool_traffic(a: &Option<Traffic>, b: &Option<Traffic>) -> Option<Traffic> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let mut pooled = a.clone();
            pooled.merge(b);
            Some(pooled)
        }
        (Some(one), None) | (None, Some(one)) => Some(one.clone()),
        (None, None) => None,
    }
}

/// A backend's traffic as this VM knows it: the process-wide counts as last shared, plus its own
/// since.
fn view<H>(m: &Member<H>) -> Traffic {
    let mut traffic = m.evidence.passive.traffic.clone();
    traffic.merge(&m.traffic);
    traffic
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
