//! What a read of the prefix (or the watch's keys) comes to. Everything etcd holds is
//! untrusted: a key of another version or one upcheck does not write, a value that does not
//! parse, was written by another version, or claims a holder other than the lease it lives by,
//! is ignored with one log line per key ([`FleetPart::refuse`]); only what passes is taken in.

use super::{ejections, evidence, gateway, keys, publish, traffic, watch, FleetPart};
use crate::level::Level;
use crate::time::Time;

/// At most this many keys with a bad value are remembered, so each is logged once.
const MAX_REFUSED: usize = 64;

impl FleetPart {
    /// How many balancers the last read counted.
    pub fn balancers(&self) -> usize {
        self.balancers
    }

    /// Refuses the value at `key`, logging it once.
    pub(super) fn refuse(&mut self, key: &str, why: &str) {
        if self.refused.iter().any(|k| k == key) {
            return;
        }
        if self.refused.len() < MAX_REFUSED {
            self.refused.push(key.to_owned());
        }
        self.note(
            Level::Warn,
            format!("fleet: ignored the value at {key:?}: {why}"),
        );
    }

    /// A read of the prefix, of which the keys of the kinds `wanted` are taken in; the others
    /// stand as last taken in. Who is in the fleet is always counted again, and request counts
    /// are read again with it, since they count only from balancers of the fleet.
    pub(super) fn take_in(&mut self, kvs: &[gateway::KeyValue], wanted: watch::Kinds, now: Time) {
        use watch::Kinds;
        let wanted = match wanted.has(Kinds::BALANCERS) {
            true => wanted.with(Kinds::TRAFFIC),
            false => wanted,
        };
        let lease_of = |kv: &gateway::KeyValue| {
            let value = std::str::from_utf8(&kv.value).ok()?.parse::<i64>().ok();
            (value == Some(kv.lease) && kv.lease != 0).then_some(kv.lease)
        };
        let members: Vec<i64> = kvs
            .iter()
            .filter(|kv| matches!(self.keys.split(&kv.key), Some((keys::BALANCERS, Some(_)))))
            .filter_map(lease_of)
            .collect();
        let mut duties = Vec::new();
        let mut results = Vec::new();
        let mut failures = Vec::new();
        let mut counts = Vec::new();
        let mut ejected = Vec::new();
        let latest = now.saturating_add(self.ttl());
        let times = (now, latest);
        for kv in kvs {
            if !wanted.has(Kinds::of(&kv.key, &self.keys)) {
                continue;
            }
            let Some((kind, name)) = self.keys.split(&kv.key) else {
                if kv.key.starts_with(self.keys.all()) {
                    self.refuse(&kv.key, "not a key of this version of upcheck");
                }
                continue;
            };
            let name = name.unwrap_or_default();
            let holder = lease_of(kv);
            match kind {
                keys::BALANCERS if holder.is_some() => {}
                keys::DUTY if holder.is_some() && !name.is_empty() => {
                    duties.push((name.to_owned(), kv.lease));
                }
                keys::ACTIVE => match publish::read(kv, now, latest, &mut self.evidence.clocks) {
                    Ok(health) => results.push((name.to_owned(), kv.lease, health)),
                    Err(why) => {
                        self.refuse(&kv.key, &why);
                        continue;
                    }
                },
                keys::FAILURES => {
                    match evidence::read(kv, name, times, &mut self.evidence.clocks) {
                        Ok(published) => failures.push(published),
                        Err(why) => {
                            self.refuse(&kv.key, why);
                            continue;
                        }
                    }
                }
                keys::TRAFFIC => match traffic::read(
                    kv,
                    name,
                    times,
                    self.traffic.window,
                    &mut self.evidence.clocks,
                ) {
                    Ok(_) if !members.contains(&kv.lease) => {
                        self.refuse(&kv.key, "counts of no balancer of the fleet");
                        continue;
                    }
                    Ok(read) => counts.push((kv.lease, read)),
                    Err(why) => {
                        self.refuse(&kv.key, why);
                        continue;
                    }
                },
                keys::EJECTED => match ejections::read(
                    kv,
                    now,
                    latest,
                    self.ejections.longest,
                    &mut self.evidence.clocks,
                ) {
                    Ok(Some(shared)) => ejected.push((name.to_owned(), shared)),
                    Ok(None) => {}
                    Err(why) => {
                        self.refuse(&kv.key, &why);
                        continue;
                    }
                },
                keys::BALANCERS | keys::DUTY => {
                    self.refuse(&kv.key, "its value is not the lease it lives by");
                    continue;
                }
                // The operators' membership and its followers' reports (`upcheck backends`):
                // the balancers' evidence is none of it.
                keys::MEMBERSHIP | keys::APPLIED => {}
                _ => {
                    self.refuse(&kv.key, "not a key upcheck writes");
                    continue;
                }
            }
            self.refused.retain(|k| *k != kv.key);
        }
        self.balancers = members.len();
        self.evidence.clocks.keep(&members);
        if wanted.has(Kinds::DUTY) {
            self.duties = duties;
        }
        if wanted.has(Kinds::ACTIVE) {
            self.results.read = results;
        }
        if wanted.has(Kinds::FAILURES) {
            self.evidence.read = failures;
        }
        if wanted.has(Kinds::TRAFFIC) {
            self.traffic.read = traffic::others(counts, self.lease());
        }
        if wanted.has(Kinds::EJECTED) {
            self.ejections_read(ejected, now);
        }
    }
}
