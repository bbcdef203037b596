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
//!
//! Each failure says what it is about ([`About`]): a 5xx the backend answered is about the
//! backend and counts on every balancer at once; a refused or broken connection, a timeout or an
//! attempt the proxy repeated without saying why may be about the publisher's own path to the
//! backend (a firewall rule, a route, a zone link), which the others need not share. Those count
//! on another balancer only once corroborated: by a failure of the same kind its own process
//! remembers, or by two balancers besides it ([`crate::pool::Pool::fleet_view`]). So one
//! balancer's broken path takes the backend out of its own rotation at once, and out of the
//! fleet's only when another balancer meets it too.

use super::clocks::{Arrival, Clocks};
use super::{gateway, Call, FleetPart, Request};
use crate::outcome::About;
use crate::passive::Remembered;
use crate::time::{nanos, Time};
use std::fmt::Write;
use std::time::Duration;
use upcheck_config::MAX_FAILS_LIMIT as MAX;

/// How a value starts: the kind and its version.
const HEAD: &str = "failures/v2";

/// What follows a failure's time when it is about the path (one about the backend has nothing).
const PATH: char = 'p';

/// What this balancer shares of its evidence and what it read of the others'.
#[derive(Debug, Clone, Default)]
pub(super) struct SharedFailures {
    /// By backend key, the value this balancer last published.
    pub(super) told: Vec<(String, String)>,
    /// What the last read found: by backend key, the publisher's lease and its failures, their
    /// times by this balancer's clock ([`Clocks`]).
    pub(super) read: Vec<(String, i64, Vec<Remembered>)>,
    /// The other balancers' clocks against this one's, from the watch's deliveries.
    pub(super) clocks: Clocks,
}

/// When a value says it was written: `@` and the writer's clock, in nanoseconds.
const WRITTEN: char = '@';

/// When the failures value `value` says it was written, by its writer's clock, if it says.
pub(super) fn written(value: &[u8]) -> Option<Time> {
    let text = std::str::from_utf8(value).ok()?;
    let mut words = text.split_ascii_whitespace();
    (words.next() == Some(HEAD)).then_some(())?;
    let nanos = words.next()?.strip_prefix(WRITTEN)?.parse::<u64>().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Reads the value at `…/failures/{name}`, `name` being `{lease}/{backend}`: the value is
/// `failures/v2 @{written} {nanoseconds}[p]…`, as text, `p` after a failure about the path, each
/// time by the writer's clock and taken to this one's by `clocks`.
pub(super) fn read(
    kv: &gateway::KeyValue,
    name: &str,
    (now, latest): (Time, Time),
    clocks: &mut Clocks,
) -> Result<(String, i64, Vec<Remembered>), &'static str> {
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
    let stamped = |w: &str| {
        w.strip_prefix(WRITTEN)
            .is_some_and(|n| n.parse::<u64>().is_ok())
    };
    if words.next() != Some(HEAD) || !words.next().is_some_and(stamped) {
        return refused;
    }
    if let Some(at) = written(&kv.value) {
        clocks.heard(kv.lease, at, now, Arrival::Read);
    }
    let mut times = Vec::new();
    for word in words {
        let (number, about) = match word.strip_suffix(PATH) {
            Some(number) => (number, About::Path),
            None => (word, About::Backend),
        };
        let t = number
            .parse::<i64>()
            .map(|n| Duration::from_nanos(n.unsigned_abs()));
        match t.map(|at| clocks.here(kv.lease, at)) {
            Ok(at) if at <= latest && !word.starts_with('-') && times.len() < MAX as usize => {
                times.push(Remembered { at, about });
            }
            _ => return Err("failures corrupt, too many, or in the future"),
        }
    }
    Ok((backend.to_owned(), kv.lease, times))
}

impl FleetPart {
    /// The failures the other balancers published for the backend whose key is `key`, each
    /// with the lease of the balancer that published it (none while fallen back to local).
    pub fn fleet_failures(&self, key: &str) -> Vec<(i64, Remembered)> {
        let mut failures = Vec::new();
        for (k, by, theirs) in &self.evidence.read {
            if k == key && Some(*by) != self.lease() && !self.local {
                failures.extend(theirs.iter().map(|f| (*by, *f)));
            }
        }
        failures
    }

    /// The failures this balancer's process remembers at the backend whose key is `key`
    /// (`own`): if those it counted itself (not read from another) changed since it last
    /// published them, and there are any, the put that publishes them.
    pub fn evidence<'a>(
        &self,
        key: &str,
        own: impl Iterator<Item = &'a Remembered>,
        now: Time,
    ) -> Option<Request> {
        let lease = self.sharing()?;
        let theirs = self.fleet_failures(key);
        let since = self.lease_since();
        let mut value = HEAD.to_owned();
        let head = value.len();
        // Those before this balancer's lease, maybe before a pause that lost the last one, are
        // not told ([`FleetPart::lease_since`]).
        let told = own
            .filter(|f| !theirs.iter().any(|(_, t)| t.at == f.at))
            .filter(|f| since.is_none_or(|since| f.at >= since));
        for f in told {
            let _ = write!(value, " {}", nanos(f.at));
            if f.about == About::Path {
                value.push(PATH);
            }
        }
        // Nothing to tell: a value published before lists failures whose times age out by
        // themselves, so none is written (with N balancers and M backends, a read would
        // otherwise carry N × M values).
        let told = value.len() == head
            || self
                .evidence
                .told
                .iter()
                .any(|(k, v)| k == key && *v == value);
        if told || self.busy(|c| matches!(c, Call::Evidence(k, _) if k == key)) {
            return None;
        }
        // When it is written, by this clock, after the head: what the others time it by. What
        // is remembered as told is the failures alone.
        let mut put = value.clone();
        put.insert_str(head, &format!(" {WRITTEN}{}", nanos(now)));
        let at = self.keys.failures(lease, key);
        let body = gateway::put(&at, put.as_bytes(), lease);
        Some(self.request(Call::Evidence(key.to_owned(), value), "/v3/kv/put", body))
    }

    /// A put of this balancer's failures at `key` was taken.
    pub(super) fn told(&mut self, key: String, value: String) {
        self.evidence.told.retain(|(k, _)| *k != key);
        self.evidence.told.push((key, value));
    }
}
