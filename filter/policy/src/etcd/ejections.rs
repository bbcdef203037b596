//! Outlier ejections shared: an ejection one balancer decides holds on every balancer within a
//! read ([`super::READ_EVERY`]), and ends on all of them at the same time.
//!
//! The deciding balancer publishes `{prefix}/v1/ejected/{backend}`: its standing of the backend
//! ([`Standing`]: the ejection in force, its offences) and its own lease, as `by`. The key lives
//! by a lease of its own, granted for as long as the ejection lasts and never renewed, so the
//! ejection leaves etcd with its end whatever becomes of the balancer that decided it. Every
//! other balancer holds it until that end ([`crate::outlier::Standing::adopt`]), through its
//! process's passive table, where the pool guard and the ejection cap judge it as any other.
//! An ejection a balancer has read is never published by it, so one it holds that way stays the
//! decider's, and a balancer that joins after the decider died still reads it. Two balancers
//! that decide at about the same time each hold their own end (etcd keeps the later put). An
//! ejection longer than this configuration's `max_ejection` or beginning in the future (by this
//! balancer's clock, the decider's taken to it: [`super::clocks`]) is refused with a log line and
//! ejects nothing; one that is over is left to expire.

use super::clocks::{Arrival, Clocks};
use super::keys::VALUES;
use super::{gateway, Call, FleetPart, Request};
use crate::outlier::Standing;
use crate::tables::{tagged, untagged};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The tag of a value: `u`, `c`, `e` and the values' layout.
const TAG: [u8; 4] = [b'u', b'c', b'e', VALUES];

/// Room for clocks on a published ejection's length, past `max_ejection`.
const SLACK: Duration = Duration::from_secs(1);

/// An ejection as the fleet shares it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shared {
    /// When it was put, by the decider's clock.
    pub written: Time,
    /// The deciding balancer's lease.
    pub by: i64,
    /// Its standing of the backend, with the ejection in force.
    pub standing: Standing,
}

/// What this balancer published of its ejections and read of the others'.
#[derive(Debug, Clone, Default)]
pub(super) struct Ejections {
    /// What the last read found, by backend key.
    pub(super) read: Vec<(String, Shared)>,
    /// By backend key, the standing whose ejection's lease is granted, to be put, and the lease.
    pub(super) granted: Vec<(String, Standing, i64)>,
    /// By backend key, the end of an ejection in force that this balancer published or read:
    /// not to be published (again) by it.
    pub(super) known: Vec<(String, Time)>,
    /// The longest ejection this configuration allows (`max_ejection`), as the pool last said.
    pub(super) longest: Option<Duration>,
}

impl Ejections {
    /// Forgets what is over at `now`.
    fn settle(&mut self, now: Time) {
        self.known.retain(|(_, until)| *until > now);
        self.granted.retain(|(_, s, _)| s.is_ejected(now));
    }

    /// Remembers that the ejection of `key` until `until` is known to etcd.
    fn know(&mut self, key: &str, until: Time) {
        if !self.known.iter().any(|(k, u)| k == key && *u >= until) {
            self.known.retain(|(k, _)| k != key);
            self.known.push((key.to_owned(), until));
        }
    }
}

/// Reads the value at `…/ejected/{backend}`, arrived at `now`, its times taken to this clock by
/// `clocks`, ejections lasting `longest` at most: `None` for an ejection that is over.
pub(super) fn read(
    kv: &gateway::KeyValue,
    now: Time,
    ahead: Time,
    longest: Option<Duration>,
    clocks: &mut Clocks,
) -> Result<Option<Shared>, String> {
    let mut shared: Shared = untagged(TAG, &kv.value).map_err(|e| format!("an ejection {e}"))?;
    if kv.lease == 0 || shared.by == 0 {
        return Err("an ejection without its lease".into());
    }
    clocks.heard(shared.by, shared.written, now, Arrival::Read);
    let by = shared.by;
    shared.standing = shared.standing.retimed(|t| clocks.here(by, t));
    let standing = &shared.standing;
    let (Some((_, until)), Some(since)) = (standing.in_force(now), standing.ejected_since(now))
    else {
        return Ok(None);
    };
    let too_long = longest.is_some_and(|l| until.saturating_sub(since) > l.saturating_add(SLACK));
    if since > ahead || too_long {
        return Err("an ejection beginning in the future or longer than max_ejection".into());
    }
    Ok(Some(shared))
}

/// When the ejection in `standing` ends, if one is in force at `now`.
fn end(standing: &Standing, now: Time) -> Option<Time> {
    standing.in_force(now).map(|(_, until)| until)
}

impl FleetPart {
    /// The ejection another balancer decided and shares for the backend whose key is `key`
    /// (none while fallen back to local).
    pub fn shared_ejection(&self, key: &str) -> Option<&Shared> {
        let (_, shared) = self.ejections.read.iter().find(|(k, _)| k == key)?;
        (!self.local && Some(shared.by) != self.lease()).then_some(shared)
    }

    /// The standings of this balancer's process with an ejection in force (`own`, by backend
    /// key), ejections lasting `longest` at most, at `now`: the grants and puts that publish
    /// those neither published nor read yet.
    pub fn share_ejections(
        &mut self,
        own: &[(String, Standing)],
        longest: Duration,
        now: Time,
    ) -> Vec<Request> {
        self.ejections.longest = Some(longest);
        self.ejections.settle(now);
        let mut out = Vec::new();
        let Some(me) = self.sharing() else {
            return out;
        };
        let on_wire = |key: &str| {
            self.busy(|c| matches!(c, Call::GrantEjection(k, _) | Call::Eject(k, _) if k == key))
        };
        for (key, standing, lease) in &self.ejections.granted {
            if let (false, Some(until)) = (on_wire(key), end(standing, now)) {
                let shared = Shared {
                    written: now,
                    by: me,
                    standing: standing.clone(),
                };
                let body = gateway::put(&self.keys.ejected(key), &tagged(TAG, &shared), *lease);
                out.push(self.request(Call::Eject(key.clone(), until), "/v3/kv/put", body));
            }
        }
        for (key, standing) in own {
            let Some(until) = end(standing, now) else {
                continue;
            };
            let known = self
                .ejections
                .known
                .iter()
                .any(|(k, u)| k == key && *u >= until)
                || self.ejections.granted.iter().any(|(k, _, _)| k == key);
            if known || on_wire(key) {
                continue;
            }
            let left = until.saturating_sub(now);
            let ttl = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            let call = Call::GrantEjection(key.clone(), standing.clone());
            out.push(self.request(call, "/v3/lease/grant", gateway::grant(ttl.max(1))));
        }
        out
    }

    /// The lease for the ejection of `key` in `standing` was granted (`Some`) or not.
    pub(super) fn ejection_granted(&mut self, key: String, standing: Standing, lease: Option<i64>) {
        self.ejections.granted.retain(|(k, _, _)| *k != key);
        if let Some(lease) = lease {
            self.ejections.granted.push((key, standing, lease));
        }
    }

    /// The put of the ejection of `key`, until `until`, was taken, or failed saying `why`: it
    /// is tried again under the same lease, unless etcd no longer has that lease.
    pub(super) fn ejection_told(&mut self, key: String, until: Time, failed: Option<&str>) {
        match failed {
            None => {
                self.ejections.granted.retain(|(k, _, _)| *k != key);
                self.ejections.know(&key, until);
            }
            Some(why) if why.contains("lease") => {
                self.ejections.granted.retain(|(k, _, _)| *k != key);
            }
            Some(_) => {}
        }
    }

    /// The ejections a read found, by backend key: remembered as known to etcd.
    pub(super) fn ejections_read(&mut self, read: Vec<(String, Shared)>, now: Time) {
        for (key, shared) in &read {
            if let Some(until) = end(&shared.standing, now) {
                self.ejections.know(key, until);
            }
        }
        self.ejections.read = read;
    }
}
