//! This balancer's part in the fleet of balancers ([`crate::etcd`]), held by the pool of the VM
//! that probes for its process, and driven like every other observation: time passing, each
//! answer from etcd, each message and end of the watch come in here, and what the part asks for
//! (calls, the watch opened or cancelled, log lines, the fleet shown again) goes out in
//! [`Effects`], through the one loop that carries out everything else
//! ([`crate::host::carry_out`]).
//!
//! The part lives while this VM holds the probing lease and the configuration names the same
//! `fleet`: a part that ends (the lease moved, the `fleet` changed or went) takes its watch with
//! it.

use super::Pool;
use crate::etcd::shown::Shown;
use crate::etcd::{Call, FleetPart, ToEtcd};
use crate::events::{Effects, Event};
use crate::time::Time;

impl<H> Pool<H> {
    /// On the prober, time passing for its part in the fleet: the part starts (or starts again,
    /// when the configuration's `fleet` changed), makes its calls, offers this process's
    /// evidence, reopens a watch that stalled, and the pool takes in where each backend's duty
    /// is. Without a `fleet` there is no part.
    pub(super) fn tick_fleet(&mut self, now: Time, effects: &mut Effects) {
        let stale = self
            .fleet
            .as_ref()
            .is_some_and(|f| self.config.fleet.as_ref() != Some(f.settings()));
        if stale || self.config.fleet.is_none() {
            self.end_fleet(effects);
        }
        // The settings are copied when a part starts, not at every tick.
        let mut fleet = match (self.fleet.take(), &self.config.fleet) {
            (Some(fleet), _) => fleet,
            (None, Some(settings)) => Box::new(FleetPart::new(settings.clone(), now)),
            (None, None) => return,
        };
        let calls = fleet.tick(now, &self.active_table());
        effects.etcd.extend(calls.into_iter().map(ToEtcd::Call));
        let offered = self.evidence(&mut fleet, now);
        effects.etcd.extend(offered.into_iter().map(ToEtcd::Call));
        if let Some(token) = fleet.watch_stalled(now) {
            effects.etcd.push(ToEtcd::Cancel(token));
        }
        if let Some(open) = fleet.watch_due(now) {
            effects.etcd.push(ToEtcd::Watch(open));
        }
        self.take_fleet_in(fleet, now, effects);
    }

    /// Ends this balancer's part in the fleet, if it has one, and its watch with it.
    pub(super) fn end_fleet(&mut self, effects: &mut Effects) {
        if let Some(token) = self.fleet.take().and_then(|f| f.watch_token()) {
            effects.etcd.push(ToEtcd::Cancel(token));
        }
    }

    /// Whether this VM speaks for its process in a fleet of balancers.
    pub fn in_fleet(&self) -> bool {
        self.fleet.is_some()
    }

    /// A wake-up between ticks after this process counted a failure: its failures, counts and
    /// ejections go to etcd now, so that the other balancers hold them a watch event later
    /// rather than a tick.
    pub fn offer_to_fleet(&mut self, now: Time) -> Effects {
        let mut effects = Effects::default();
        let Some(mut fleet) = self.fleet.take() else {
            return effects;
        };
        let offered = self.evidence(&mut fleet, now);
        effects.etcd.extend(offered.into_iter().map(ToEtcd::Call));
        self.put_fleet_back(fleet, &mut effects);
        effects
    }

    /// Whether call `token` is one of the fleet's (its answer goes to
    /// [`Pool::etcd_answered`]) rather than a probe's.
    pub fn awaits_etcd(&self, token: u32) -> bool {
        self.fleet.as_ref().is_some_and(|f| f.owns(token))
    }

    /// `call` is on the wire as `token`.
    pub fn etcd_sent(&mut self, call: Call, token: u32) -> Effects {
        if let Some(fleet) = self.fleet.as_mut() {
            fleet.sent(call, token);
        }
        Effects::default()
    }

    /// The proxy refused to send `call`, saying `why`.
    pub fn etcd_refused(&mut self, call: Call, why: &str, now: Time) -> Effects {
        self.with_fleet(|fleet| fleet.refused(call, why, now))
    }

    /// The answer to the fleet's call `token` (status `None` if it was reset or timed out),
    /// `body` as read: the pool takes in what it changed.
    pub fn etcd_answered(
        &mut self,
        token: u32,
        status: Option<u16>,
        body: &[u8],
        now: Time,
    ) -> Effects {
        let mut effects = Effects::default();
        if let Some(mut fleet) = self.fleet.take() {
            fleet.answered(token, status, body, now);
            self.take_fleet_in(fleet, now, &mut effects);
        }
        effects
    }

    /// The watch asked for is open as `token`; one no part wants any more is cancelled.
    pub fn watch_opened(&mut self, token: u32, now: Time) -> Effects {
        match self.fleet.as_mut() {
            Some(fleet) => {
                fleet.watch_opened(token, now);
                Effects::default()
            }
            None => Effects {
                etcd: vec![ToEtcd::Cancel(token)],
                ..Effects::default()
            },
        }
    }

    /// The proxy would not open the watch, saying `why`.
    pub fn watch_refused(&mut self, why: &str, now: Time) -> Effects {
        self.with_fleet(|fleet| fleet.watch_refused(why, now))
    }

    /// A message on gRPC stream `token`: the watch's is taken in (the pool takes in the view at
    /// once when it changed, while request counts wait for the tick); a stream that is not, or
    /// no longer, the watch's is cancelled.
    pub fn watch_message(&mut self, token: u32, message: &[u8], now: Time) -> Effects {
        let mut effects = Effects::default();
        let Some(mut fleet) = self.fleet.take() else {
            effects.etcd.push(ToEtcd::Cancel(token));
            return effects;
        };
        if !fleet.owns_watch(token) {
            effects.etcd.push(ToEtcd::Cancel(token));
            self.fleet = Some(fleet);
            return effects;
        }
        let watched = fleet.watch_message(token, message, now);
        if !watched.keep {
            effects.etcd.push(ToEtcd::Cancel(token));
        }
        if watched.view_changed {
            self.take_fleet_in(fleet, now, &mut effects);
        } else {
            self.put_fleet_back(fleet, &mut effects);
        }
        effects
    }

    /// gRPC stream `token` ended with `status`: the watch's is opened again at a later tick.
    pub fn watch_closed(&mut self, token: u32, status: u32) -> Effects {
        self.with_fleet(|fleet| fleet.watch_closed(token, status))
    }

    /// What the fleet looks like from here, for its gauges and the status page: `None` outside
    /// a fleet.
    pub fn fleet_shown(&self) -> Option<Shown> {
        let fleet = self.fleet.as_ref()?;
        Some(Shown::of(
            fleet,
            self.members.iter().map(|m| m.key.as_str()),
        ))
    }

    /// Does `f` to the part, if there is one, and says what it noted.
    fn with_fleet(&mut self, f: impl FnOnce(&mut FleetPart)) -> Effects {
        let mut effects = Effects::default();
        if let Some(mut fleet) = self.fleet.take() {
            f(&mut fleet);
            self.put_fleet_back(fleet, &mut effects);
        }
        effects
    }

    /// Takes in where each backend's duty is and what the others published, and shows the
    /// fleet again.
    fn take_fleet_in(&mut self, fleet: Box<FleetPart>, now: Time, effects: &mut Effects) {
        let view = self.fleet_view(&fleet, now);
        self.put_fleet_back(fleet, effects);
        effects.extend(view);
        effects.show_fleet = true;
    }

    /// Puts the part back, its notes said as events.
    fn put_fleet_back(&mut self, mut fleet: Box<FleetPart>, effects: &mut Effects) {
        effects
            .events
            .extend(fleet.take_notes().into_iter().map(Event::Fleet));
        self.fleet = Some(fleet);
    }
}
