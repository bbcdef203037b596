//! Passive evidence shared: each balancer's own request failures, so that behind N balancers a
//! backend is ejected after `max_fails` user failures in all, as behind one.
//!
//! Each balancer publishes, per backend, the failures its own process counted
//! (`{prefix}/v1/failures/{lease}/{backend}`, living by its lease, so a balancer that dies
//! leaves nothing behind in etcd), whenever they change; every read of the prefix takes in the
//! others'. The pool remembers a failure read from another balancer as its own process's
//! ([`crate::tables::PassiveChange::Fleet`]) and never publishes it again, so the failure that
//! fills the window behind any balancer ejects the backend there at once and on every other
//! within a read ([`super::READ_EVERY`]), where the pool guard and the ejection cap judge it as
//! any other. A value that does not parse, was written by another version, lives by another
//! lease than its key names or its content claims, lists more failures than any `max_fails` or
//! times in the future is refused with a log line, and counts nothing.

use super::{gateway, Call, FleetPart, Request};
use crate::time::{nanos, Time};
use std::fmt::Write;
use std::time::Duration;
use upcheck_config::MAX_FAILS_LIMIT as MAX;

/// How a value starts: the kind and the version of the key layout ([`super::keys::VERSION`]).
const HEAD: &str = "failures/v1";

/// What this balancer shares of its evidence and what it read of the others'.
#[derive(Debug, Clone, Default)]
pub(super) struct SharedFailures {
    /// By backend key, the value this balancer last published.
    pub(super) told: Vec<(String, String)>,
    /// What the last read found: by backend key, the publisher's lease and its failures.
    pub(super) read: Vec<(String, i64, Vec<Time>)>,
}

/// Reads the value at `…/failures/{name}`, `name` being `{lease}/{backend}`: the value is
/// `failures/v1 {nanoseconds}…`, as text.
pub(super) fn read(
    kv: &gateway::KeyValue,
    name: &str,
    latest: Time,
) -> Result<(String, i64, Vec<Time>), &'static str> {
    let refused = Err("not failures this version of upcheck wrote under the lease it lives by");
    let text = std::str::from_utf8(&kv.value).unwrap_or_default();
    let mut words = text.split_ascii_whitespace();
    let backend = match name.split_once('/') {
        Some((lease, backend))
            if i64::from_str_radix(lease, 16) == Ok(kv.lease) && kv.lease != 0 =>
        {
            backend
        }
        _ => return refused,
    };
    if words.next() != Some(HEAD) {
        return refused;
    }
    let mut times = Vec::new();
    for word in words {
        let t = word
            .parse::<i64>()
            .map(|n| Duration::from_nanos(n.unsigned_abs()));
        match t {
            Ok(t) if t <= latest && !word.starts_with('-') && times.len() < MAX as usize => {
                times.push(t);
            }
            _ => return Err("failures corrupt, too many, or in the future"),
        }
    }
    Ok((backend.to_owned(), kv.lease, times))
}

impl FleetPart {
    /// The failures the other balancers published for the backend whose key is `key` (none
    /// while fallen back to local).
    pub fn fleet_failures(&self, key: &str) -> Vec<Time> {
        let mut times = Vec::new();
        for (k, by, t) in &self.evidence.read {
            if k == key && Some(*by) != self.lease() && !self.local {
                times.extend_from_slice(t);
            }
        }
        times
    }

    /// The failures this balancer's process remembers at the backend whose key is `key`
    /// (`own`): if those it counted itself (not read from another) changed since it last
    /// published them, and there are any, the put that publishes them.
    pub fn evidence<'a>(&self, key: &str, own: impl Iterator<Item = &'a Time>) -> Option<Request> {
        let lease = self.sharing()?;
        let theirs = self.fleet_failures(key);
        let mut value = HEAD.to_owned();
        for t in own.filter(|t| !theirs.contains(t)) {
            let _ = write!(value, " {}", nanos(*t));
        }
        // Nothing to tell: a value published before lists failures whose times age out by
        // themselves, so none is written (with N balancers and M backends, a read would
        // otherwise carry N × M values).
        let told = value.len() == HEAD.len()
            || self
                .evidence
                .told
                .iter()
                .any(|(k, v)| k == key && *v == value);
        if told || self.busy(|c| matches!(c, Call::Evidence(k, _) if k == key)) {
            return None;
        }
        let at = self.keys.failures(lease, key);
        let body = gateway::put(&at, value.as_bytes(), lease);
        Some(self.request(Call::Evidence(key.to_owned(), value), "/v3/kv/put", body))
    }

    /// A put of this balancer's failures at `key` was taken.
    pub(super) fn told(&mut self, key: String, value: String) {
        self.evidence.told.retain(|(k, _)| *k != key);
        self.evidence.told.push((key, value));
    }
}
