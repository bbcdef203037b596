//! The fleet's calls to etcd on the wire ([`upcheck_policy::etcd`]): on the VM that probes for
//! this Envoy, each tick's requests go out by `dispatch_http_call` to the `fleet.cluster`
//! (etcd's JSON gateway), each answer goes back to the core as read, and the core's notes become
//! log lines. The watch the core asks for is a gRPC stream to the `fleet.watch_cluster`, each of
//! its messages handed to the core as it arrives, and cancelled when this VM's part in the fleet
//! ends (the lease to probe moved, or the configuration changed). Which backends this balancer
//! then probes, and what the others published, the pool takes in
//! ([`upcheck_policy::Pool::fleet_view`]).
//!
//! The stats show it, named as every metric of the pool is ([`upcheck_policy::series`]):
//! `upcheck.fleet_local` (1 while fallen back to probing everything here),
//! `upcheck.fleet_balancers` (how many the last read counted) and, per backend,
//! `upcheck.<name>.probe_duty` (1 on the balancer that probes it), each set when it changes;
//! with a watch, `upcheck.fleet_watch` (1 while it is in place), `upcheck.fleet_revision` (the
//! store's revision held), `upcheck.fleet_watch_events` (changes heard) and
//! `upcheck.fleet_resyncs` (fresh reads after the first), as gauges of the prober.
//! The status page, answered by another VM, reads the same from shared data
//! ([`crate::shared::write_fleet`]).

use crate::abi::{BufferType, HeaderMap, MetricType, Status};
use crate::hostcall as hostcalls;
use crate::metrics;
use crate::shared;
use crate::vm::Vm;
use upcheck_policy::etcd::shown::{Holder, Shown};
use upcheck_policy::etcd::{watch, Membership, Request, MAX_ANSWER};
use upcheck_policy::outcome::status_code;
use upcheck_policy::{series, Level, Pool, Time};

/// This balancer's part in the fleet, with the gauges that show it.
pub struct Part {
    fleet: Membership,
    local: Gauge,
    balancers: Gauge,
    /// Per backend key, its `probe_duty` gauge.
    duties: Vec<(String, Gauge)>,
    /// The watch's gauges, with one.
    watch: Option<WatchGauges>,
    /// What the status page was last given, as bytes.
    shown: Vec<u8>,
    /// The passive table's compare-and-swap number when its failures were last offered to etcd.
    offered: Option<u32>,
}

/// What the stats show of the watch.
struct WatchGauges {
    live: Gauge,
    revision: Gauge,
    events: Gauge,
    resyncs: Gauge,
}

/// A gauge and the value it was last set to.
struct Gauge {
    id: Option<u32>,
    shown: Option<u64>,
}

impl Gauge {
    fn define(name: &str) -> Gauge {
        let id = match hostcalls::define_metric(MetricType::Gauge, name) {
            Ok(id) => Some(id),
            Err(status) => {
                log::warn!("upcheck: metric {name} not reported: the host refused it ({status:?})");
                None
            }
        };
        Gauge { id, shown: None }
    }

    fn show(&mut self, value: u64) {
        if self.shown != Some(value) {
            metrics::set(self.id, value);
            self.shown = Some(value);
        }
    }
}

/// A part that ends takes its watch with it.
impl Drop for Part {
    fn drop(&mut self) {
        if let Some(token) = self.fleet.watch_token() {
            let _ = hostcalls::grpc_cancel(token);
        }
    }
}

impl Part {
    fn new<H>(fleet: Membership, pool: &Pool<H>) -> Part {
        let name = pool.config().pool.as_deref();
        let gauge = |stat: &str| Gauge::define(&series::pool_stat(name, stat));
        Part {
            watch: fleet.watch().map(|_| WatchGauges {
                live: gauge("fleet_watch"),
                revision: gauge("fleet_revision"),
                events: gauge("fleet_watch_events"),
                resyncs: gauge("fleet_resyncs"),
            }),
            fleet,
            local: gauge("fleet_local"),
            balancers: gauge("fleet_balancers"),
            duties: Vec::new(),
            shown: Vec::new(),
            offered: None,
        }
    }

    /// Sets the gauges to what the fleet says now.
    fn show<H>(&mut self, pool: &Pool<H>) {
        let members = pool.members();
        let same = self.duties.len() == members.len()
            && self
                .duties
                .iter()
                .zip(members)
                .all(|((k, _), m)| *k == m.key);
        if !same {
            self.duties = members
                .iter()
                .map(|m| {
                    let pool = pool.config().pool.as_deref();
                    let name = series::backend_stat(pool, m.name(), "probe_duty");
                    (m.key.clone(), Gauge::define(&name))
                })
                .collect();
        }
        let shown = Shown::of(&self.fleet, members.iter().map(|m| m.key.as_str()));
        self.local.show(u64::from(shown.local()));
        self.balancers.show(shown.balancers());
        for (key, gauge) in &mut self.duties {
            gauge.show(u64::from(matches!(shown.holder(key), Some(Holder::Here))));
        }
        if let (Some(gauges), Some(watching)) = (self.watch.as_mut(), shown.watching()) {
            gauges.live.show(u64::from(watching.live));
            gauges.revision.show(watching.revision);
            gauges.events.show(watching.events);
            gauges.resyncs.show(watching.resyncs);
        }
        let bytes = shown.encode();
        if self.shown != bytes {
            shared::write_fleet(&self.fleet.settings().prefix, &bytes);
            self.shown = bytes;
        }
    }
}

/// Time passing on the prober: the fleet's calls go out, and the pool takes in where each
/// backend's duty is. Without a `fleet` in the configuration there is none.
pub fn tick(v: &mut Vm, now: Time) {
    let Some(pool) = v.pool.as_mut() else {
        return;
    };
    let Some(settings) = pool.config().fleet.clone() else {
        v.fleet = None;
        return;
    };
    let part = match &mut v.fleet {
        Some(part) if *part.fleet.settings() == settings => part,
        slot => slot.insert(Part::new(Membership::new(settings, now), pool)),
    };
    let fleet = &mut part.fleet;
    let mut requests = fleet.tick(now, &pool.active_table());
    requests.extend(pool.evidence(fleet, now));
    send(fleet, requests, now);
    if let Some(token) = fleet.watch_stalled(now) {
        let _ = hostcalls::grpc_cancel(token);
    }
    open_watch(fleet, now);
    log(fleet);
    let effects = pool.fleet_view(fleet, now);
    part.show(pool);
    v.carry_out(effects, now);
}

/// A wake-up between ticks on the prober: when its process counted a failure since its
/// failures were last offered to etcd (the passive table's compare-and-swap number moved, read
/// without copying the table; whichever VM wrote it, this one included), they go to etcd now,
/// so that the other balancers hold them a stream event later rather than a tick.
pub fn between_ticks(v: &mut Vm, now: Time) {
    let Some(part) = v.fleet.as_ref() else {
        return;
    };
    let cas = shared::passive_cas();
    if cas == part.offered {
        return;
    }
    v.take_in_passive(now);
    offer(v, cas, now);
}

/// The pool's failures, counts and ejections for etcd, as of the passive table at `cas`.
fn offer(v: &mut Vm, cas: Option<u32>, now: Time) {
    let (Some(part), Some(pool)) = (v.fleet.as_mut(), v.pool.as_ref()) else {
        return;
    };
    part.offered = cas;
    let fleet = &mut part.fleet;
    let requests = pool.evidence(fleet, now);
    send(fleet, requests, now);
    log(fleet);
}

/// Opens the watch the core asks for: the stream, then its create request.
fn open_watch(fleet: &mut Membership, now: Time) {
    let Some(open) = fleet.watch_due(now) else {
        return;
    };
    let metadata: Vec<(&str, &str)> = open
        .metadata
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let opened =
        hostcalls::open_grpc_stream(&open.cluster, watch::SERVICE, watch::METHOD, &metadata)
            .and_then(|token| match hostcalls::grpc_send(token, &open.message) {
                Ok(()) => Ok(token),
                Err(status) => {
                    let _ = hostcalls::grpc_cancel(token);
                    Err(status)
                }
            });
    match opened {
        Ok(token) => fleet.watch_opened(token, now),
        Err(status) => fleet.watch_refused(describe(status), now),
    }
}

/// A message of gRPC stream `token`, `size` bytes: the watch's, handed to the core; a stream
/// that is not (any more) the watch's is cancelled.
pub fn watch_message(v: &mut Vm, token: u32, size: usize, now: Time) {
    let (Some(part), Some(pool)) = (v.fleet.as_mut(), v.pool.as_mut()) else {
        let _ = hostcalls::grpc_cancel(token);
        return;
    };
    let fleet = &mut part.fleet;
    if !fleet.owns_watch(token) {
        let _ = hostcalls::grpc_cancel(token);
        return;
    }
    let message = hostcalls::get_buffer(BufferType::GrpcReceiveBuffer, 0, size.min(MAX_ANSWER))
        .ok()
        .flatten()
        .unwrap_or_default();
    let watched = fleet.watch_message(token, &message, now);
    if !watched.keep {
        let _ = hostcalls::grpc_cancel(token);
    }
    log(fleet);
    // Request counts wait for the tick, which takes the view in anyway.
    if !watched.view_changed {
        return;
    }
    let effects = pool.fleet_view(fleet, now);
    part.show(pool);
    v.carry_out(effects, now);
}

/// gRPC stream `token` ended with `status`.
pub fn watch_closed(v: &mut Vm, token: u32, status: u32) {
    if let Some(part) = v.fleet.as_mut() {
        part.fleet.watch_closed(token, status);
        log(&mut part.fleet);
    }
}

/// The answer to call `token`, if it was the fleet's (else false: a probe's).
pub fn answer(v: &mut Vm, token: u32, body_size: usize, now: Time) -> bool {
    let (Some(part), Some(pool)) = (v.fleet.as_mut(), v.pool.as_mut()) else {
        return false;
    };
    let fleet = &mut part.fleet;
    if !fleet.owns(token) {
        return false;
    }
    let headers = hostcalls::get_map(HeaderMap::CallResponse).unwrap_or_default();
    let status = headers
        .iter()
        .find(|(n, _)| n == ":status")
        .and_then(|(_, v)| status_code(v.as_bytes()));
    let body = hostcalls::get_buffer(
        BufferType::HttpCallResponseBody,
        0,
        body_size.min(MAX_ANSWER),
    )
    .ok()
    .flatten()
    .unwrap_or_default();
    fleet.answered(token, status, &body, now);
    log(fleet);
    let effects = pool.fleet_view(fleet, now);
    part.show(pool);
    v.carry_out(effects, now);
    true
}

fn send(fleet: &mut Membership, requests: Vec<Request>, now: Time) {
    let cluster = fleet.settings().cluster.clone();
    for request in requests {
        let mut headers: Vec<(&str, &str)> = vec![
            (":method", "POST"),
            (":path", request.path),
            (":authority", cluster.as_str()),
            ("content-type", "application/json"),
        ];
        if let Some(token) = &request.token {
            headers.push(("authorization", token.as_str()));
        }
        let call = hostcalls::dispatch_http_call(
            &cluster,
            headers,
            Some(request.body.as_bytes()),
            vec![],
            request.timeout,
        );
        match call {
            Ok(token) => fleet.sent(request.call, token),
            Err(status) => fleet.refused(request.call, describe(status), now),
        }
    }
}

fn log(fleet: &mut Membership) {
    for note in fleet.take_notes() {
        let level = match note.level {
            Level::Error => log::Level::Error,
            Level::Warn => log::Level::Warn,
            Level::Info => log::Level::Info,
            Level::Debug => log::Level::Debug,
        };
        log::log!(level, "upcheck: {}", note.text);
    }
}

fn describe(status: Status) -> &'static str {
    match status {
        Status::BadArgument => "bad argument: is the fleet's cluster defined?",
        // Envoy's answer to a gRPC stream to a cluster it does not know.
        Status::ParseFailure => "parse failure: is the watch's cluster defined?",
        Status::NotFound => "not found",
        _ => "refused",
    }
}
