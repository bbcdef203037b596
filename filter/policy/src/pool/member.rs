//! One backend as a VM keeps it: its configuration, what probes and requests say of it, its part
//! in the routing, and one record per concern of the pool (its probes, its request counts, what
//! this VM follows of it), each owned by the module that works it.

use super::followed::{EjectionState, Followed, StateSeen};
use crate::active::ProbeOutcome;
use crate::drain::Drain;
use crate::grpc::watch::HealthWatch;
use crate::guard::Evidence;
use crate::outlier::Traffic;
use crate::retry::Advice;
use crate::schedule::ProbeSlot;
use crate::time::Time;
use upcheck_config::Upstream;

/// Everything this VM keeps about one backend.
#[derive(Debug, Clone)]
pub struct Member<H> {
    /// Its configuration: name, weight, cluster, address.
    pub upstream: Upstream,
    /// Its key in the process-wide tables ([`Upstream::key`]).
    pub key: String,
    /// Back in rotation with the backends whose probes fail alike (guard rule 3).
    pub back: bool,
    /// What probes and requests say about it.
    pub evidence: Evidence,
    /// Whether it takes traffic now.
    pub routable: bool,
    /// Who probes it, when, and what was heard of its probes.
    pub(super) probing: ProbeRecord,
    /// Its request outcomes, counted for the peer comparison.
    pub(super) counts: PeerTraffic,
    /// What this VM follows of it and reports as it changes.
    pub(super) followed: Followed,
    /// The adapter's own data about it (its metric handles).
    pub handles: H,
}

impl<H> Member<H> {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.upstream.name
    }

    /// Whether it is passively ejected now (within the cap).
    pub fn ejected(&self) -> bool {
        matches!(self.followed.ejection(), EjectionState::Ejected { .. })
    }

    /// Its drain, while it drains: since when, and what said so.
    pub fn draining(&self) -> Option<Drain> {
        self.evidence.drain()
    }

    /// Where it stands in its passive ejection's lifecycle.
    pub fn ejection(&self) -> EjectionState {
        self.followed.ejection()
    }

    /// Its state in one word, and since when, as of the last time the routing was worked out.
    pub fn state(&self) -> StateSeen {
        self.followed.state()
    }
}

/// Who probes a backend, when, and what was heard of its probes.
#[derive(Debug, Clone)]
pub(super) struct ProbeRecord {
    /// Whether this configuration is the newest that lists it, so its prober probes it.
    pub(super) probed_here: bool,
    /// Whether another balancer of the fleet probes it ([`crate::etcd`]): then its probe state
    /// comes from that balancer's published results, and it is not probed here.
    pub(super) elsewhere: bool,
    /// When it is probed next.
    pub(super) slot: ProbeSlot,
    /// Whether a probe the proxy refused to send was reported.
    pub(super) unprobeable: bool,
    /// Whether a gRPC backend's answer that it serves no health service (`UNIMPLEMENTED`) was
    /// reported: once, until a check passes.
    pub(super) no_health_service: bool,
    /// When the newest probe whose answer was taken was sent: an answer to an older one, late
    /// (a slow answer overtaken by a newer probe's), says less and is dropped.
    pub(super) newest: Option<Time>,
    /// What a probe a request held at cold start sent, answered here, holds over the probe
    /// table.
    pub(super) held_over: HeldOver,
    /// On the prober of a gRPC pool, its health `Watch` ([`crate::grpc::watch`]).
    pub(super) watch: HealthWatch,
}

impl ProbeRecord {
    /// A backend new to this VM at `now`: probed here, at once.
    pub(super) fn new(now: Time) -> ProbeRecord {
        ProbeRecord {
            probed_here: true,
            elsewhere: false,
            slot: ProbeSlot::due_at(now),
            unprobeable: false,
            no_health_service: false,
            newest: None,
            held_over: HeldOver::No,
            watch: HealthWatch::new(),
        }
    }
}

/// On a VM that does not probe, what a probe a request held at cold start sent, and answered
/// here, holds over the probe table. The table is taken for the backend again once it says
/// something else than it did then, so what this VM heard is not undone by a table that has
/// heard nothing since, and no clocks are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HeldOver {
    /// Nothing: the probe table is taken as it says.
    No,
    /// Heard here while the probe table's latest probe of it was this one (`None`: none).
    Since(Option<(Time, ProbeOutcome)>),
}

/// A backend's request outcomes, counted for the peer comparison ([`crate::outlier`]).
#[derive(Debug, Clone, Default)]
pub(super) struct PeerTraffic {
    /// This VM's, not yet added to the process-wide counts (at the next tick).
    pub(super) own: Traffic,
    /// On the prober, the other balancers' counts, added up, as last read
    /// ([`crate::etcd::traffic`]).
    pub(super) fleet: Traffic,
    /// What its requests are told of retries, as the comparison at the last tick found
    /// ([`crate::retry`]).
    pub(super) retry: Advice,
}
