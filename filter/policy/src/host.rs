//! What the policy asks of its host, and the one loop that carries it out.
//!
//! Every entry point of [`Pool`] returns [`Effects`]; what they ask for is always done the same
//! way, so it is written once, here: events are reported, changes are shared by
//! compare-and-swap and each written table goes back in ([`Pool::passive_written`]), probes are
//! sent and each send goes back in ([`Pool::probe_sent`], [`Pool::probe_refused`]), the probe
//! table is published, the fleet's calls to etcd are sent and its watch opened or cancelled,
//! each token or refusal going back in ([`Pool::etcd_sent`], [`Pool::watch_opened`]), gRPC
//! backends' health `Watch` streams opened or cancelled likewise
//! ([`Pool::health_watch_opened`]), the fleet
//! is shown, the changes among the events are appended to the process-wide history and the
//! history as written goes back in ([`Pool::history_published`]), and whatever that asked for in
//! turn is carried out after. The host ([`Host`]) only does each thing: the proxy-wasm adapter
//! with host calls, the tests by recording what they were asked.

use crate::etcd::shown::Shown;
use crate::etcd::{OpenWatch, Request, ToEtcd};
use crate::events::{Effects, Event};
use crate::grpc::watch::WatchCall;
use crate::history::{self, Change, HistoryTable};
use crate::pool::{Member, Pick, Pool, Written};
use crate::tables::{ActiveTable, Applied, PassiveChange, PassiveTable};
use crate::time::Time;
use upcheck_config::{Config, HealthChecks};

/// What a host does for the policy, one thing at a time. `H` is the adapter's data per backend
/// (see [`Pool::new`]).
pub trait Host<H> {
    /// Reports one event: a log line, and the metrics it moves.
    fn report(&mut self, pool: &Pool<H>, event: &Event);

    /// Applies `change` to the process-wide passive table: the table as written and what the
    /// change did, or `None` if it could not be written (it is then lost, as a failure the
    /// host could not share).
    fn share(&mut self, change: &PassiveChange, checks: &HealthChecks) -> Option<PassiveWrite>;

    /// Sends a probe, by `config`, to `member` (backend `index`).
    fn probe(&mut self, config: &Config, index: usize, member: &Member<H>) -> Dispatch;

    /// Publishes the probe table of the backends this VM probes.
    fn publish_active(&mut self, table: ActiveTable);

    /// Changes the process-wide history by compare-and-swap, `append` changing the table as
    /// read ([`history::append`]): the table as written, or `None` if it could not be written
    /// (the changes are then missing from the history, though not from the log).
    fn record(&mut self, append: &dyn Fn(&mut HistoryTable)) -> Option<HistoryTable>;

    /// Sends `request` to etcd's JSON gateway through `cluster` (`fleet.cluster`): its token,
    /// whose answer comes back through [`Pool::etcd_answered`], or the proxy's word for
    /// refusing it.
    fn call_etcd(&mut self, cluster: &str, request: &Request) -> Result<u32, &'static str>;

    /// Opens etcd's watch as `open` says: the stream's token, whose messages come back through
    /// [`Pool::watch_message`], or the proxy's word for refusing it.
    fn open_watch(&mut self, open: &OpenWatch) -> Result<u32, &'static str>;

    /// Opens the gRPC health `Watch` of `member` (backend `index`), by `config`: the stream's
    /// token, whose messages come back through [`Pool::health_pushed`], or the proxy's word for
    /// refusing it.
    fn open_health_watch(
        &mut self,
        config: &Config,
        index: usize,
        member: &Member<H>,
    ) -> Result<u32, &'static str>;

    /// Cancels gRPC stream `token`.
    fn cancel_stream(&mut self, token: u32);

    /// Shows what the fleet of balancers looks like from here: its gauges, and the record the
    /// status page reads.
    fn show_fleet(&mut self, pool: &Pool<H>, shown: &Shown);
}

/// The passive table as a host wrote it, and what the change did there.
#[derive(Debug, Clone)]
pub struct PassiveWrite {
    /// The table as written.
    pub table: PassiveTable,
    /// What the change did.
    pub applied: Applied,
}

/// What came of asking the host for a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// On the wire as this token; its answer comes back through [`Pool::probe_answered`].
    Sent(u32),
    /// The proxy refused to send it, and said this.
    Refused(&'static str),
    /// Left to the host, which sends and answers probes itself when it chooses (through
    /// [`Pool::probe_sent`] and [`Pool::probe_answered`]), as the tests' proxy does.
    Left,
}

/// Carries out `effects` on `host`, and what carrying them out asks for in turn, until nothing
/// is left.
pub fn carry_out<H>(pool: &mut Pool<H>, host: &mut impl Host<H>, effects: Effects, now: Time) {
    let mut effects = effects;
    while !effects.is_empty() {
        let Effects {
            events,
            share,
            probes,
            publish_active,
            etcd,
            show_fleet,
            health_watches,
        } = effects;
        for event in &events {
            host.report(pool, event);
        }
        let mut more = record(pool, host, &events, now);
        if !share.is_empty() {
            let checks = pool.config().health_checks.clone();
            for change in share {
                if let Some(PassiveWrite { table, applied }) = host.share(&change, &checks) {
                    let written = Written {
                        change: &change,
                        applied,
                    };
                    more.extend(pool.passive_written(&table, Some(written), now));
                }
            }
        }
        for index in probes {
            let Some(member) = pool.members().get(index) else {
                continue;
            };
            match host.probe(pool.config(), index, member) {
                Dispatch::Sent(token) => more.extend(pool.probe_sent(index, token, now)),
                Dispatch::Refused(why) => more.extend(pool.probe_refused(index, why, now)),
                Dispatch::Left => {}
            }
        }
        if publish_active {
            host.publish_active(pool.active_table());
        }
        for call in etcd {
            more.extend(carry_out_etcd(pool, host, call, now));
        }
        for call in health_watches {
            more.extend(carry_out_watch(pool, host, call, now));
        }
        if show_fleet {
            if let Some(shown) = pool.fleet_shown() {
                host.show_fleet(pool, &shown);
            }
        }
        effects = more;
    }
}

/// Where a request held at cold start goes ([`Pick::Wait`], [`Pick::Probe`]), once [`hold`]
/// tried the probes it may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// To this backend after all: a probe's refusal settled it.
    Backend(usize),
    /// Parked until a tick can pick for it.
    Parked,
    /// Paused on its own probe of backend `index`, on the wire as `token`: the request is
    /// picked for again when its answer comes.
    OnProbe {
        /// The backend probed.
        index: usize,
        /// The probe's token.
        token: u32,
    },
    /// Nowhere: the pool has no backend.
    Nowhere,
}

/// Holds a request at cold start as `pick` says, at `now` (`picked_at`: the time picks are
/// made at, the VM's latest tick). A probe the proxy refuses to send is the policy's word on
/// that backend, so the request is picked for again, at most once per backend; what a refusal
/// asks for is carried out on `host`.
pub fn hold<H>(
    pool: &mut Pool<H>,
    host: &mut impl Host<H>,
    pick: Pick,
    now: Time,
    picked_at: Time,
) -> Held {
    let mut pick = pick;
    for _ in 0..=pool.members().len() {
        match pick {
            Pick::Backend(index) => return Held::Backend(index),
            Pick::Wait => return Held::Parked,
            Pick::Probe(index) => {
                let Some(member) = pool.members().get(index) else {
                    return Held::Nowhere;
                };
                match host.probe(pool.config(), index, member) {
                    Dispatch::Sent(token) => {
                        let effects = pool.held_probe_sent(index, token, now);
                        carry_out(pool, host, effects, now);
                        return Held::OnProbe { index, token };
                    }
                    Dispatch::Refused(why) => {
                        let effects = pool.probe_refused(index, why, now);
                        carry_out(pool, host, effects, now);
                    }
                    Dispatch::Left => {}
                }
            }
        }
        pick = pool.pick(picked_at);
    }
    Held::Nowhere
}

/// Does what the fleet's part asked of etcd, and hands back what came of it.
fn carry_out_etcd<H>(
    pool: &mut Pool<H>,
    host: &mut impl Host<H>,
    call: ToEtcd,
    now: Time,
) -> Effects {
    match call {
        ToEtcd::Call(request) => {
            let cluster = pool.config().fleet.as_ref().map(|f| f.cluster.clone());
            let Some(cluster) = cluster else {
                return Effects::default();
            };
            match host.call_etcd(&cluster, &request) {
                Ok(token) => pool.etcd_sent(request.call, token),
                Err(why) => pool.etcd_refused(request.call, why, now),
            }
        }
        ToEtcd::Watch(open) => match host.open_watch(&open) {
            Ok(token) => pool.watch_opened(token, now),
            Err(why) => pool.watch_refused(why, now),
        },
        ToEtcd::Cancel(token) => {
            host.cancel_stream(token);
            Effects::default()
        }
    }
}

/// Opens or cancels a gRPC backend's health `Watch` as the pool asked, and hands back what came
/// of it.
fn carry_out_watch<H>(
    pool: &mut Pool<H>,
    host: &mut impl Host<H>,
    call: WatchCall,
    now: Time,
) -> Effects {
    match call {
        WatchCall::Open(index) => {
            let Some(member) = pool.members().get(index) else {
                return Effects::default();
            };
            match host.open_health_watch(pool.config(), index, member) {
                Ok(token) => pool.health_watch_opened(index, token, now),
                Err(why) => pool.health_watch_refused(index, why, now),
            }
        }
        WatchCall::Cancel(token) => {
            host.cancel_stream(token);
            Effects::default()
        }
    }
}

/// Appends the changes among `events` (those [`Pool::change_of`] finds) to the process-wide
/// history, keeping its newest `history`, and takes the history as written in: what that asks
/// for.
fn record<H>(pool: &mut Pool<H>, host: &mut impl Host<H>, events: &[Event], now: Time) -> Effects {
    let changes: Vec<Change> = events
        .iter()
        .filter_map(|e| pool.change_of(e, now))
        .collect();
    if changes.is_empty() {
        return Effects::default();
    }
    let size = usize::try_from(pool.config().history).unwrap_or(usize::MAX);
    let append = |table: &mut HistoryTable| history::append(table, &changes, size);
    match host.record(&append) {
        Some(table) => pool.history_published(&table),
        None => Effects::default(),
    }
}
