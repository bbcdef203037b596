//! The fleet of balancers on the wire ([`upcheck_policy::etcd`]): the core's calls to etcd go
//! out by `dispatch_http_call` to the `fleet.cluster` (etcd's JSON gateway), its watch is a gRPC
//! stream to the `fleet.watch_cluster`, and each answer and message goes back to the core as
//! read. What to send, when, and what an answer means is the core's: these only do each thing
//! ([`crate::vm`]'s host hands them the core's effects).
//!
//! The stats show the fleet, named as every metric of the pool is ([`upcheck_policy::series`]):
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
use upcheck_policy::etcd::shown::{Holder, Shown};
use upcheck_policy::etcd::{watch, OpenWatch, Request, MAX_ANSWER};
use upcheck_policy::outcome::status_code;
use upcheck_policy::{series, Effects, Pool, Time};

/// The gauges that show the fleet, defined when first shown, and what the status page was last
/// given.
#[derive(Default)]
pub struct FleetGauges {
    /// The gauges, once defined.
    defined: Option<Defined>,
    /// What the status page was last given, as bytes.
    shown: Vec<u8>,
}

/// The fleet's gauges, named by one pool.
struct Defined {
    /// The pool name they are named by.
    pool: Option<String>,
    local: Gauge,
    balancers: Gauge,
    /// Per backend key, its `probe_duty` gauge.
    duties: Vec<(String, Gauge)>,
    /// The watch's gauges, once there is a watch.
    watch: Option<WatchGauges>,
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
        Gauge {
            id: metrics::define(MetricType::Gauge, name),
            shown: None,
        }
    }

    fn show(&mut self, value: u64) {
        if self.shown != Some(value) {
            metrics::set(self.id, value);
            self.shown = Some(value);
        }
    }
}

impl FleetGauges {
    /// Sets the gauges to what `shown` says (defining them again under a pool's new name), and
    /// gives the status page its record when it changed.
    pub fn show<H>(&mut self, pool: &Pool<H>, shown: &Shown, prefix: &str) {
        let name = pool.config().pool.as_deref();
        let defined = match self.defined.take() {
            Some(defined) if defined.pool.as_deref() == name => defined,
            _ => Defined::new(name),
        };
        self.defined.insert(defined).show(pool, shown);
        let bytes = shown.encode();
        if self.shown != bytes {
            shared::write_fleet(prefix, &bytes);
            self.shown = bytes;
        }
    }
}

impl Defined {
    /// The gauges of the pool named `name`; a backend's and the watch's as they are shown.
    fn new(name: Option<&str>) -> Defined {
        let gauge = |stat: &str| Gauge::define(&series::pool_stat(name, stat));
        Defined {
            pool: name.map(str::to_owned),
            local: gauge(series::FLEET_LOCAL),
            balancers: gauge(series::FLEET_BALANCERS),
            duties: Vec::new(),
            watch: None,
        }
    }

    /// Sets the gauges to what `shown` says of `pool`'s backends.
    fn show<H>(&mut self, pool: &Pool<H>, shown: &Shown) {
        let name = self.pool.as_deref();
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
                    let stat = series::backend_stat(name, m.name(), series::PROBE_DUTY);
                    (m.key.clone(), Gauge::define(&stat))
                })
                .collect();
        }
        self.local.show(u64::from(shown.local()));
        self.balancers.show(shown.balancers());
        for (key, gauge) in &mut self.duties {
            gauge.show(u64::from(matches!(shown.holder(key), Some(Holder::Here))));
        }
        if let Some(watching) = shown.watching() {
            let gauge = |stat: &str| Gauge::define(&series::pool_stat(name, stat));
            let gauges = self.watch.get_or_insert_with(|| WatchGauges {
                live: gauge(series::FLEET_WATCH),
                revision: gauge(series::FLEET_REVISION),
                events: gauge(series::FLEET_WATCH_EVENTS),
                resyncs: gauge(series::FLEET_RESYNCS),
            });
            gauges.live.show(u64::from(watching.live));
            gauges.revision.show(watching.revision);
            gauges.events.show(watching.events);
            gauges.resyncs.show(watching.resyncs);
        }
    }
}

/// Sends `request` to etcd's JSON gateway through `cluster`.
pub fn call(cluster: &str, request: &Request) -> Result<u32, &'static str> {
    let mut headers: Vec<(&str, &str)> = vec![
        (":method", "POST"),
        (":path", request.path),
        (":authority", cluster),
        ("content-type", "application/json"),
    ];
    if let Some(token) = &request.token {
        headers.push(("authorization", token.as_str()));
    }
    hostcalls::dispatch_http_call(
        cluster,
        headers,
        Some(request.body.as_bytes()),
        vec![],
        request.timeout,
    )
    .map_err(describe)
}

/// Opens the watch: the stream, then its create request.
pub fn open_watch(open: &OpenWatch) -> Result<u32, &'static str> {
    let metadata: Vec<(&str, &str)> = open
        .metadata
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    hostcalls::open_grpc_stream(
        &open.cluster,
        (watch::SERVICE, watch::METHOD),
        &metadata,
        (&open.message, false),
    )
    .map_err(describe)
}

/// Cancels gRPC stream `token`.
pub fn cancel(token: u32) {
    let _ = hostcalls::grpc_cancel(token);
}

/// The answer to the fleet's call `token`, its body `body_size` bytes, handed to the core as
/// read.
pub fn answer<H>(pool: &mut Pool<H>, token: u32, body_size: usize, now: Time) -> Effects {
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
    pool.etcd_answered(token, status, &body, now)
}

/// A message of gRPC stream `token`, `size` bytes, handed to the core as read.
pub fn message<H>(pool: &mut Pool<H>, token: u32, size: usize, now: Time) -> Effects {
    let message = hostcalls::get_buffer(BufferType::GrpcReceiveBuffer, 0, size.min(MAX_ANSWER))
        .ok()
        .flatten()
        .unwrap_or_default();
    pool.watch_message(token, &message, now)
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
