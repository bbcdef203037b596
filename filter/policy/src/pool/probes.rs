//! Active checks: the probes the prober schedules, sends and gives up on, and what their
//! answers do to a backend's probe state (read beside what its pages say meanwhile). An answer
//! with the drain signal starts the backend's drain instead, and the first probe that passes
//! without it ends the drain ([`crate::drain`]).

use super::member::HeldOver;
use super::peers::view;
use super::{Pool, SentProbe};
use crate::active::{
    contains, GrpcProbeAnswer, Health, MadeBy, Pages, ProbeAnswer, ProbeOutcome, Transition,
    PROXY_REASON_BYTES, SHED,
};
use crate::drain::Signal;
use crate::events::{Effects, Event};
use crate::grpc::status::Code;
use crate::tables::PassiveChange;
use crate::time::Time;

/// How long a probe may go unanswered, past its timeout, before it is given up on: the host
/// answers every call by its timeout, so only a broken host needs this, but nothing may grow
/// without bound.
pub(super) fn abandon_after(timeout: std::time::Duration) -> std::time::Duration {
    timeout.saturating_mul(2)
}

impl<H> Pool<H> {
    /// Marks probe results published when `effects` publishes them.
    pub(super) fn published(&mut self, effects: &Effects) {
        if let (Some(prober), true) = (self.prober.as_mut(), effects.publish_active) {
            prober.unpublished = false;
        }
    }

    /// Gives up on probes the host never answered, as timed out.
    pub(super) fn abandon_probes(&mut self, now: Time, effects: &mut Effects) {
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

    pub(super) fn schedule_probes(&mut self, now: Time, effects: &mut Effects) {
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
            if !m.probing.probed_here || m.probing.elsewhere {
                continue;
            }
            if prober
                .schedule
                .take(&mut m.probing.slot, now, interval, jitter)
            {
                effects.probes.push(i);
            }
            earliest = earliest.min(m.probing.slot.next());
        }
        prober.earliest = earliest;
    }

    /// Probe `token`, sent by the prober or by a request held at cold start, taken off the
    /// probes awaiting an answer; `None` if it is not one of this VM's.
    /// Whether probe `token` is on its way (sent by the prober, or held at cold start): what
    /// tells a gRPC health check's callbacks from the fleet's watch's.
    pub fn awaits_probe(&self, token: u32) -> bool {
        let sent = self.prober.as_ref().map(|p| p.sent.as_slice());
        sent.unwrap_or_default().iter().any(|p| p.token == token) || self.cold_start.holds(token)
    }

    fn take_sent(&mut self, token: u32) -> Option<SentProbe> {
        if let Some(prober) = self.prober.as_mut() {
            if let Some(at) = prober.sent.iter().position(|p| p.token == token) {
                return Some(prober.sent.swap_remove(at));
            }
        }
        self.cold_start.take(token)
    }

    /// A probe to backend `index` is on the wire as `token`.
    pub fn probe_sent(&mut self, index: usize, token: u32, now: Time) -> Effects {
        if let (Some(prober), Some(m)) = (self.prober.as_mut(), self.members.get(index)) {
            prober.sent.push(SentProbe {
                token,
                key: m.key.clone(),
                sent: now,
            });
        }
        Effects::default()
    }

    /// The proxy refused to send a probe to backend `index` (`why`: what it said): the backend
    /// is treated as not serving, and the refusal is reported once.
    pub fn probe_refused(&mut self, index: usize, why: &str, now: Time) -> Effects {
        let mut effects = Effects::default();
        if let Some(m) = self.members.get_mut(index) {
            if !m.probing.unprobeable {
                m.probing.unprobeable = true;
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

    /// The answer to probe `token`: its status, who made it, whether it carried the drain
    /// signal, and the first bytes of its body ([`ProbeAnswer`]). A token that is not one of this
    /// VM's is ignored.
    pub fn probe_answered(&mut self, token: u32, answer: ProbeAnswer, now: Time) -> Effects {
        self.settle_probe(token, Reply::Answer(answer), now)
    }

    /// gRPC health check `token` ended as `answer` says.
    pub fn probe_grpc_answered(
        &mut self,
        token: u32,
        answer: GrpcProbeAnswer,
        now: Time,
    ) -> Effects {
        let found = ProbeOutcome::classify_grpc(&answer, &self.config.health_checks.active);
        let without_service =
            answer.code == Code::Unimplemented && answer.made_by == MadeBy::Backend;
        let probed = self
            .prober
            .as_ref()
            .and_then(|p| p.sent.iter().find(|s| s.token == token));
        let index = probed.and_then(|p| self.index_of_key(&p.key));
        let mut said = Effects::default();
        if let Some(m) = index.and_then(|i| self.members.get_mut(i)) {
            if without_service && !m.probing.no_health_service {
                said.events.push(Event::NoHealthService {
                    name: m.name().to_owned(),
                    service: self
                        .config
                        .health_checks
                        .active
                        .grpc
                        .as_ref()
                        .map(|g| g.service.clone())
                        .unwrap_or_default(),
                });
            }
            m.probing.no_health_service =
                without_service || (m.probing.no_health_service && !found.passed());
        }
        let mut effects = self.settle_probe(token, Reply::Grpc(found), now);
        effects.events.splice(0..0, said.events);
        effects
    }

    /// Probe `token` came back with no answer at all, and the proxy's word for why: `reason` is
    /// ngx_wasm_module's `:dispatch_status` ([`ProbeOutcome::unanswered`]); Envoy gives none,
    /// since it answers a failed call with a 503 or 504 of its own.
    pub fn probe_unanswered(&mut self, token: u32, reason: Option<&str>, now: Time) -> Effects {
        let found = ProbeOutcome::unanswered(reason, &self.config.health_checks.active);
        self.settle_probe(token, Reply::Found(found), now)
    }

    fn settle_probe(&mut self, token: u32, reply: Reply, now: Time) -> Effects {
        let mut effects = Effects::default();
        let Some(probe) = self.take_sent(token) else {
            return effects;
        };
        let Some(index) = self.index_of_key(&probe.key) else {
            return effects; // removed by a reconfiguration meanwhile
        };
        let active = &self.config.health_checks.active;
        let (drain, outcome) = match reply {
            Reply::Answer(answer) if is_shed(&answer) => {
                // Shed by the proxy's circuit breaker, never sent: no word on the backend, whose
                // next probe goes out at its time.
                return effects;
            }
            Reply::Answer(answer) => (
                Signal::of_probe(&answer, active),
                ProbeOutcome::classify(&answer, active),
            ),
            Reply::Found(found) => (None, found),
            Reply::Grpc(found) => (self.watch_agrees(index, found), found),
        };
        match drain {
            Some(by) => self.observe_drain(index, by, Some(outcome), probe.sent, now, &mut effects),
            None => {
                self.observe_probe(index, outcome, probe.sent, now, &mut effects);
                if outcome.passed() {
                    self.end_drain(index, probe.sent, &mut effects);
                }
            }
        }
        self.refresh(now, &mut effects);
        self.published(&effects);
        effects
    }

    /// How many bytes of a probe's body the policy needs: of an answer the proxy made itself,
    /// enough to read its reason ([`PROXY_REASON_BYTES`]); of the backend's, none unless
    /// `expect_body` is set.
    pub fn probe_body_wanted(&self, body_size: usize, made_by: MadeBy) -> usize {
        let active = &self.config.health_checks.active;
        let wanted = match (made_by, &active.expect_body) {
            (MadeBy::Proxy, _) => PROXY_REASON_BYTES,
            (MadeBy::Backend, Some(_)) => usize::try_from(active.max_size).unwrap_or(usize::MAX),
            (MadeBy::Backend, None) => 0,
        };
        body_size.min(wanted)
    }

    /// Takes a probe sent at `sent` that settled with `outcome` at `now`.
    pub(super) fn observe_probe(
        &mut self,
        index: usize,
        outcome: ProbeOutcome,
        sent: Time,
        now: Time,
        effects: &mut Effects,
    ) {
        self.observe_word(index, outcome, (sent, Word::Probe), now, effects);
    }

    /// Takes a backend's word at `now` as a probe's outcome, sent at `sent`: a probe's answer
    /// (reported as a probe, [`Event::Probed`]) or what its health `Watch` pushed (reported
    /// by the Watch's own event, so it moves no probe metric).
    pub(super) fn observe_word(
        &mut self,
        index: usize,
        outcome: ProbeOutcome,
        (sent, word): (Time, Word),
        now: Time,
        effects: &mut Effects,
    ) {
        let active = &self.config.health_checks.active;
        let pages = self.pages(index, sent, now);
        // Only the prober publishes the probe table; a VM that does not probe hears a backend
        // only through a probe a request held at cold start sent, and keeps what it heard until
        // the table says something else of it.
        let probing = self.prober.is_some();
        let Some(m) = self.members.get_mut(index) else {
            return;
        };
        if m.probing.newest.is_some_and(|newest| sent < newest) {
            return;
        }
        m.probing.newest = Some(sent);
        if !probing && m.probing.held_over == HeldOver::No {
            m.probing.held_over = HeldOver::Since(m.evidence.active.last);
        }
        if let Some(prober) = self.prober.as_mut() {
            prober.unpublished = true;
        }
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
        if !steady {
            self.layout.changed();
        }
        if word == Word::Probe {
            effects.events.push(Event::Probed {
                index,
                name: m.name().to_owned(),
                outcome,
                latency: now.saturating_sub(sent),
            });
        }
        if transition == (Transition::Contradicted { first: true }) {
            effects.events.push(Event::ProbeContradicted {
                name: m.name().to_owned(),
                outcome,
            });
            effects.publish_active |= probing;
        }
        if let Transition::Changed { from, to, reason } = transition {
            effects.events.push(Event::HealthChanged {
                name: m.name().to_owned(),
                from,
                to,
                reason,
                pushed: word == Word::Watch,
            });
            effects.publish_active |= probing;
        }
        if m.followed.accepting() != m.evidence.accepting() {
            effects.publish_active |= probing;
        }
        if let Transition::Changed { to, .. } = transition {
            let warm_up =
                (to == Health::Healthy && self.others_in_service(index, now)).then_some(now);
            if let Some(m) = self.members.get_mut(index) {
                m.evidence.active.warm_up = warm_up;
            }
        }
        self.hear();
    }

    /// Whether a backend other than `index` has been passing its probes for a probe interval
    /// or more at `now`: then backend `index`, entering service now, warms up. Backends that
    /// enter service within one interval of each other with none in service before (cold start,
    /// or the end of an outage of all) do not: nobody is ramped against backends as cold as it.
    fn others_in_service(&self, index: usize, now: Time) -> bool {
        let interval = self.config.health_checks.active.interval;
        self.members.iter().enumerate().any(|(i, m)| {
            let active = &m.evidence.active;
            i != index
                && active.status == Health::Healthy
                && active.since.saturating_add(interval) <= now
        })
    }

    /// Takes a word sent at `sent` that said at `now` the backend drains (`by`): no word on its
    /// health either way, and its drain shared unless it drains already. A probe's answer
    /// (`probed`) is still its last probe, as the page shows it.
    pub(super) fn observe_drain(
        &mut self,
        index: usize,
        by: Signal,
        probed: Option<ProbeOutcome>,
        sent: Time,
        now: Time,
        effects: &mut Effects,
    ) {
        let Some(m) = self.members.get_mut(index) else {
            return;
        };
        if m.probing.newest.is_some_and(|newest| sent < newest) {
            return;
        }
        m.probing.newest = Some(sent);
        if let Some(outcome) = probed {
            m.evidence.active.last = Some((now, outcome));
        }
        if !m.evidence.draining() {
            effects.share.push(PassiveChange::Drain {
                key: m.key.clone(),
                at: now,
                by,
            });
        }
    }

    /// Ends backend `index`'s drain, if it drains, on a probe sent at `sent` that passed without
    /// the signal (and was taken, not dropped as older than the newest).
    pub(super) fn end_drain(&mut self, index: usize, sent: Time, effects: &mut Effects) {
        let Some(m) = self.members.get(index) else {
            return;
        };
        if m.evidence.draining() && m.probing.newest == Some(sent) {
            effects.share.push(PassiveChange::Drained {
                key: m.key.clone(),
                sent,
            });
        }
    }

    /// What backend `index`'s real requests say, process-wide, against a probe sent at `sent`
    /// that failed at `now` (see [`Pages`]). Requests are counted only with outlier detection on.
    pub(super) fn pages(&self, index: usize, sent: Time, now: Time) -> Pages {
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
}

/// What came back of a probe, as [`Pool::settle_probe`] takes it in.
enum Reply<'a> {
    /// An answer.
    Answer(ProbeAnswer<'a>),
    /// No HTTP answer to read (none at all): what it comes to.
    Found(ProbeOutcome),
    /// A gRPC health check's end: what it comes to.
    Grpc(ProbeOutcome),
}

/// Whose word a backend's probe state takes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Word {
    /// A probe's answer.
    Probe,
    /// What its health `Watch` pushed.
    Watch,
}

/// Whether `answer` is the proxy's own 503 for a probe its circuit breaker shed, never sent.
fn is_shed(answer: &ProbeAnswer) -> bool {
    answer.made_by == MadeBy::Proxy && answer.status == 503 && contains(answer.body, SHED)
}
