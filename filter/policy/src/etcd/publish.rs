//! Probe results published: the holder of a backend's duty puts its probe state under its lease
//! after each change, and every other balancer takes it in as its own workers take their
//! prober's. A state read back is trusted only from the lease it lives by, and only with no time
//! further ahead than one lease TTL once its times are taken to this balancer's clock
//! ([`super::clocks`]).

use super::clocks::{Arrival, Clocks};
use super::keys::VALUES;
use super::{gateway, Call, FleetPart, Request};
use crate::active::ActiveHealth;
use crate::tables::{tagged, untagged};
use crate::time::Time;
use serde::{Deserialize, Serialize};

/// A published probe state, as etcd holds it: postcard behind a four-byte tag (`u`, `c`, `f`,
/// [`VALUES`]), as the shared-data tables are ([`crate::tables::tagged`]), so a value of another
/// version is refused, never misread.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Published {
    /// When it was put, by the publisher's clock.
    pub(super) written: Time,
    /// The publisher's lease ID.
    pub(super) by: i64,
    /// The state.
    pub(super) health: ActiveHealth,
}

impl Published {
    pub(super) const TAG: [u8; 4] = [b'u', b'c', b'f', VALUES];
}

/// What this balancer published of its probe results and read of the others'.
#[derive(Debug, Clone, Default)]
pub(super) struct Results {
    /// By backend key, the holder's published state, as last read.
    pub(super) read: Vec<(String, i64, ActiveHealth)>,
    /// By backend key, what this balancer last published.
    pub(super) told: Vec<(String, ActiveHealth)>,
}

impl Results {
    /// The state `holder` published for the backend whose key is `key`, as last read.
    pub(super) fn of(&self, key: &str, holder: i64) -> Option<ActiveHealth> {
        self.read
            .iter()
            .find(|(k, by, _)| k == key && *by == holder)
            .map(|(_, _, h)| *h)
    }
}

/// Reads the value at `…/active/{backend}`, arrived at `now`, its times taken to this clock by
/// `clocks` and no later than `ahead` then.
pub(super) fn read(
    kv: &gateway::KeyValue,
    now: Time,
    ahead: Time,
    clocks: &mut Clocks,
) -> Result<ActiveHealth, String> {
    let value: Published =
        untagged(Published::TAG, &kv.value).map_err(|e| format!("a probe state {e}"))?;
    if value.by != kv.lease || kv.lease == 0 {
        return Err("published by another than the lease it lives by".into());
    }
    clocks.heard(kv.lease, value.written, now, Arrival::Read);
    let health = value.health.retimed(|t| clocks.here(kv.lease, t));
    let times = [
        health.last.map(|(t, _)| t),
        Some(health.since),
        health.contradicted,
        health.warm_up,
    ];
    if times.into_iter().flatten().any(|t| t > ahead) {
        return Err("its times are in the future".into());
    }
    Ok(health)
}

impl FleetPart {
    /// The puts of the probe states of `own` (by backend key) whose duty this balancer holds
    /// and that changed since it last published them, into `out`. A state whose latest probe
    /// settled before this balancer's lease was granted is not published: it was measured before
    /// the lease it would live by, maybe before a pause that lost the last one
    /// ([`FleetPart::lease_since`]); the next probe's is.
    pub(super) fn publish(
        &self,
        lease: i64,
        own: &[(String, ActiveHealth)],
        now: Time,
        out: &mut Vec<Request>,
    ) {
        let publish: Vec<(String, ActiveHealth)> = own
            .iter()
            .filter(|(k, _)| self.holds(lease, k))
            .filter(|(_, h)| {
                let since = self.lease_since();
                h.last
                    .is_none_or(|(at, _)| since.is_none_or(|since| at >= since))
            })
            .filter(|(k, h)| !self.results.told.iter().any(|(p, ph)| p == k && ph == h))
            .filter(|(k, _)| !self.busy(|c| matches!(c, Call::Publish(p, _) if p == k)))
            .cloned()
            .collect();
        for (key, health) in publish {
            let published = Published {
                written: now,
                by: lease,
                health,
            };
            let bytes = tagged(Published::TAG, &published);
            let body = gateway::put(&self.keys.active(&key), &bytes, lease);
            out.push(self.request(Call::Publish(key, health), "/v3/kv/put", body));
        }
    }

    /// What came of publishing `health` for `key`.
    pub(super) fn published(
        &mut self,
        key: String,
        health: ActiveHealth,
        answer: Result<(), String>,
    ) {
        match answer {
            Ok(()) => {
                self.results.told.retain(|(k, _)| *k != key);
                self.results.told.push((key, health));
            }
            Err(why) => self.failed(why),
        }
    }
}
