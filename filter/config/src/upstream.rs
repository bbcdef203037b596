//! One backend (`upstreams[]`): its name, the cluster and authority its probes go to, its
//! weight, its address in host routing, and whether the operator drains it. A module of its own
//! because an upstream is what every table and metric is keyed by ([`Upstream::key`]), and its
//! fields are read and checked apart from the health checks.

use crate::limits::MAX_WEIGHT;
use crate::proxy::RoutingMode;
use crate::{grammar, json};
use serde::{Deserialize, Deserializer, Serialize};
use std::ops::RangeInclusive;

/// One backend. What a left-out field takes is in [`Upstream::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Upstream {
    /// Its name, in logs, metrics and the status page: an HTTP token (`:` allowed), at most
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes. Required.
    #[serde(deserialize_with = "grammar::upstream_name")]
    pub name: String,
    /// The proxy cluster that probes are dispatched to and requests are routed to. Default:
    /// `name`, which [`Config::parse`](crate::Config::parse) fills in.
    #[serde(deserialize_with = "grammar::cluster")]
    pub cluster: Option<String>,
    /// `:authority` of probes: `host[:port]`. Default: `name` (which must then be a valid
    /// authority), filled in by [`Config::parse`](crate::Config::parse).
    #[serde(deserialize_with = "grammar::authority")]
    pub authority: Option<String>,
    /// Share of traffic relative to the others, within [`Upstream::WEIGHT`].
    #[serde(deserialize_with = "grammar::count")]
    pub weight: u32,
    /// `ip:port` of the backend in the pool cluster, kept in the form Envoy reports addresses
    /// (`[0:0::1]:80` becomes `[::1]:80`); required with `routing: "host"`, where it is what the
    /// route header carries. Default: none (`null`).
    #[serde(deserialize_with = "grammar::address")]
    pub address: Option<String>,
    /// Whether the operator drains it (`upcheck backends drain`, HAProxy's `state drain`): it
    /// takes no new requests whatever its probes say, those already sent finish, and it is still
    /// probed, so that the status page tells what it would be. Default: `false`.
    #[serde(deserialize_with = "grammar::flag")]
    pub drain: bool,
    /// The operator's last change to it, who asked and why, as `upcheck backends` records it
    /// (`add 10.0.0.7:8080 by alice@lb-1 at 2026-12-06 22:30:01 UTC: new release`), shown on
    /// the status page: printable ASCII, at most [`MAX_NOTE_LEN`](crate::MAX_NOTE_LEN) bytes. Default: none (`null`).
    #[serde(deserialize_with = "grammar::note")]
    pub note: Option<String>,
}

/// An upstream's fields as they are when left out: no name (which is required), and the cluster
/// and authority none, for [`Config::parse`](crate::Config::parse) to fill in with the name.
impl Default for Upstream {
    fn default() -> Self {
        Upstream {
            name: String::new(),
            cluster: None,
            authority: None,
            weight: 1,
            address: None,
            drain: false,
            note: None,
        }
    }
}

impl Upstream {
    /// What `weight` may be.
    pub const WEIGHT: RangeInclusive<u32> = 1..=MAX_WEIGHT;

    /// The cluster probes and requests go to.
    #[inline]
    pub fn cluster(&self) -> &str {
        self.cluster.as_deref().unwrap_or(&self.name)
    }

    /// The `:authority` of its probes.
    #[inline]
    pub fn authority(&self) -> &str {
        self.authority.as_deref().unwrap_or(&self.name)
    }

    /// Where its state lives in the process-wide tables: its name, cluster and address. Pools
    /// that share a `vm_id` share a backend's state only when all three agree, that is, when it
    /// is the same backend.
    pub fn key(&self) -> String {
        match &self.address {
            Some(address) => format!("{}@{}@{address}", self.name, self.cluster()),
            None => format!("{}@{}", self.name, self.cluster()),
        }
    }

    /// What the route header carries for it under `routing`.
    #[inline]
    pub fn route_value(&self, routing: RoutingMode) -> &str {
        match (routing, &self.address) {
            (RoutingMode::Host, Some(address)) => address,
            _ => self.cluster(),
        }
    }
}

/// An upstream as an item of `upstreams`: an object.
impl<'de> json::Item<'de> for Upstream {
    fn item<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        json::object(d)
    }
}
