//! Pushed health on the prober of a gRPC pool: each backend's health `Watch`
//! ([`crate::grpc::watch`]) opened at a tick, opened again after its backoff when it ends, and
//! each message taken in as the backend's newest word, a drain or a probe, at once. The streams
//! live while this VM holds the probing lease for this configuration, and for the backends it
//! probes itself: losing the lease, a new configuration, or another balancer of the fleet taking
//! a backend's duty cancels them.
//!
//! An HTTP pool pays one comparison per tick here, and nothing per request.

use super::probes::Word;
use super::Pool;
use crate::active::{ProbeOutcome, Said};
use crate::drain::Signal;
use crate::events::{Effects, Event, WatchNews};
use crate::grpc::health::Serving;
use crate::grpc::status::Code;
use crate::grpc::watch::{self, Pushed, WatchCall};
use crate::time::Time;

impl<H> Pool<H> {
    /// Whether this VM watches its backends' health: it probes, and the check is gRPC.
    fn watches(&self) -> bool {
        self.prober.is_some() && self.config.health_checks.active.grpc.is_some()
    }

    /// On the prober of a gRPC pool, time passing for the Watches: a stream silent past the
    /// probe timeout is cancelled, and each backend probed here whose stream is due is opened;
    /// a backend another balancer probes has none.
    pub(super) fn tick_health_watches(&mut self, now: Time, effects: &mut Effects) {
        if !self.watches() {
            return;
        }
        let timeout = self.config.health_checks.active.timeout;
        for (i, m) in self.members.iter_mut().enumerate() {
            let watch = &mut m.probing.watch;
            if !m.probing.probed_here || m.probing.elsewhere {
                if let Some(token) = watch.stop() {
                    effects.health_watches.push(WatchCall::Cancel(token));
                }
                continue;
            }
            if let Some(token) = watch.stalled(now, timeout) {
                effects.health_watches.push(WatchCall::Cancel(token));
            }
            if watch.due(now) {
                effects.health_watches.push(WatchCall::Open(i));
            }
        }
    }

    /// Cancels every backend's Watch: the lease or the configuration it was opened under is
    /// gone.
    pub(super) fn end_health_watches(&mut self, effects: &mut Effects) {
        for m in &mut self.members {
            if let Some(token) = m.probing.watch.stop() {
                effects.health_watches.push(WatchCall::Cancel(token));
            }
        }
    }

    /// Whether gRPC stream `token` is a backend's health `Watch` (its messages go to
    /// [`Pool::health_pushed`], its end to [`Pool::health_watch_closed`]).
    pub fn awaits_health_watch(&self, token: u32) -> bool {
        self.watch_of(token).is_some()
    }

    /// The backend whose Watch is stream `token`.
    fn watch_of(&self, token: u32) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.probing.watch.owns(token))
    }

    /// Backend `index`'s Watch is open as `token`; one no longer wanted is cancelled.
    pub fn health_watch_opened(&mut self, index: usize, token: u32, now: Time) -> Effects {
        let mut effects = Effects::default();
        match self.members.get_mut(index) {
            Some(m) if m.probing.watch.opening() => m.probing.watch.opened(token, now),
            _ => effects.health_watches.push(WatchCall::Cancel(token)),
        }
        effects
    }

    /// The proxy would not open backend `index`'s Watch, saying `why`: it is tried again after
    /// the backoff, its `Check` covering it meanwhile (a cluster the proxy does not know is
    /// reported by the `Check`'s refusal).
    pub fn health_watch_refused(&mut self, index: usize, why: &str, now: Time) -> Effects {
        let mut effects = Effects::default();
        if let Some(m) = self.members.get_mut(index) {
            if m.probing.watch.opening() {
                m.probing.watch.refused(now);
                effects.events.push(Event::Watch {
                    index,
                    name: m.name().to_owned(),
                    news: WatchNews::NotOpened(why.to_owned()),
                });
            }
        }
        effects
    }

    /// A message on gRPC stream `token`, a backend's Watch: its serving status, taken in at
    /// once as the backend's newest word ([`crate::grpc::watch`]). A message that is no health
    /// answer ends the stream, which is opened again after the backoff.
    pub fn health_pushed(&mut self, token: u32, message: &[u8], now: Time) -> Effects {
        let mut effects = Effects::default();
        let Some(index) = self.watch_of(token) else {
            effects.health_watches.push(WatchCall::Cancel(token));
            return effects;
        };
        let heard = watch::heard(message);
        let Some(m) = self.members.get_mut(index) else {
            return effects;
        };
        let name = m.name().to_owned();
        let news = match heard {
            Ok(pushed) => {
                m.probing.watch.heard();
                let serving = match pushed {
                    Pushed::Serving => Serving::Serving,
                    Pushed::NotServing => Serving::NotServing,
                    Pushed::Failed(serving) => serving,
                    Pushed::EndedFailing(_) | Pushed::Nothing => Serving::Unknown,
                };
                effects.events.push(Event::Watch {
                    index,
                    name,
                    news: WatchNews::Pushed(serving),
                });
                self.take_pushed(index, pushed, now, &mut effects);
                return effects;
            }
            Err(why) => {
                m.probing.watch.refused(now);
                effects.health_watches.push(WatchCall::Cancel(token));
                WatchNews::Refused(why)
            }
        };
        effects.events.push(Event::Watch { index, name, news });
        effects
    }

    /// gRPC stream `token`, a backend's Watch, ended with `code`, `by_backend` if the backend
    /// ended it (not the proxy, for want of it): opened again after the backoff, and what the
    /// end says of the backend taken in (`NOT_FOUND`, a failure; `UNIMPLEMENTED`, said once).
    pub fn health_watch_closed(
        &mut self,
        token: u32,
        code: Code,
        by_backend: bool,
        now: Time,
    ) -> Effects {
        let mut effects = Effects::default();
        let Some(index) = self.watch_of(token) else {
            return effects;
        };
        let Some(m) = self.members.get_mut(index) else {
            return effects;
        };
        let (pushed, unimplemented) = m.probing.watch.closed(code, by_backend, now);
        // A backend its Check found serving no health service at all was said to be so once,
        // as a configuration problem: its Watch's UNIMPLEMENTED says nothing more.
        let news = if unimplemented && !m.probing.no_health_service {
            WatchNews::Unimplemented
        } else {
            WatchNews::Ended(code)
        };
        effects.events.push(Event::Watch {
            index,
            name: m.name().to_owned(),
            news,
        });
        self.take_pushed(index, pushed, now, &mut effects);
        effects
    }

    /// Takes in what backend `index`'s Watch said at `now`, as a probe sent and answered then:
    /// `SERVING` passes (and ends a drain), `NOT_SERVING` drains, a failure fails.
    fn take_pushed(&mut self, index: usize, pushed: Pushed, now: Time, effects: &mut Effects) {
        let word = (now, Word::Watch);
        match pushed {
            Pushed::Nothing => return,
            Pushed::NotServing => self.observe_drain(index, Signal::Watch, None, now, now, effects),
            Pushed::Serving => {
                self.observe_word(index, ProbeOutcome::Pass, word, now, effects);
                self.end_drain(index, now, effects);
            }
            Pushed::Failed(serving) => {
                let outcome = ProbeOutcome::Soft(Said::Watch(serving));
                self.observe_word(index, outcome, word, now, effects);
            }
            Pushed::EndedFailing(code) => {
                let outcome = ProbeOutcome::Soft(Said::WatchEnded(code));
                self.observe_word(index, outcome, word, now, effects);
            }
        }
        self.refresh(now, effects);
        self.published(effects);
    }

    /// What a gRPC health check that found `outcome` says of backend `index`'s drain: a `Check`
    /// answering `NOT_SERVING` while the backend drains by its Watch agrees with the Watch, and
    /// is the same drain, not a failure.
    pub(super) fn watch_agrees(&self, index: usize, outcome: ProbeOutcome) -> Option<Signal> {
        let by_watch = self
            .members
            .get(index)
            .and_then(|m| m.evidence.drain())
            .is_some_and(|d| d.by == Signal::Watch);
        (by_watch && outcome == ProbeOutcome::Soft(Said::Health(Serving::NotServing)))
            .then_some(Signal::Watch)
    }
}
