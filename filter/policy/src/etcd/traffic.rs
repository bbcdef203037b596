//! The peer comparison's counts shared: behind N balancers, each sees only its share of the
//! requests, so a backend that fails a few of its pages on each is judged on a few requests
//! behind each; with the counts shared, each judges on the whole fleet's.
//!
//! Each balancer publishes the request outcomes its own process counted at each backend
//! ([`Traffic`], the counts its VMs add up), one value per balancer,
//! `{prefix}/v1/traffic/{lease}`, living by its lease, at most once a read and only when they
//! changed. The prober adds the others' to its own when it judges
//! ([`crate::pool::Pool::fleet_view`]): counts kept in half-windows of absolute time add up
//! wherever they were made, once taken to this balancer's clock ([`super::clocks`]). A value
//! that does not decode, lists more backends than any configuration or counts no build could
//! have made by now is refused with a log line.

use super::clocks::{Arrival, Clocks};
use super::keys::VALUES;
use super::{gateway, Call, FleetPart, Request, READ_EVERY};
use crate::history::MAX_KEY_LEN;
use crate::outlier::Traffic;
use crate::tables::{tagged, untagged};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use upcheck_config::MAX_UPSTREAMS;

/// The tag of a value: `u`, `c`, `t` and the values' layout.
const TAG: [u8; 4] = [b'u', b'c', b't', VALUES];

/// Per backend key, its counts.
pub type Counts = Vec<(String, Traffic)>;

/// A balancer's counts as etcd holds them.
#[derive(Debug, Serialize, Deserialize)]
struct Told {
    /// When they were put, by the balancer's clock.
    written: Time,
    counts: Counts,
}

/// What this balancer published of its counts and read of the others'.
#[derive(Debug, Clone, Default)]
pub(super) struct PeerCounts {
    /// What the last read found of the other balancers' counts, added up per backend key.
    pub(super) read: Counts,
    /// When this balancer last published, and what.
    pub(super) told: Option<(Time, Counts)>,
    /// The outlier window the counts are kept in, as the pool last said.
    pub(super) window: Option<Duration>,
}

/// Reads the value at `…/traffic/{lease}` (`name`), arrived at `now`, counts made by `latest`
/// at the latest once `clocks` took them to this clock.
pub(super) fn read(
    kv: &gateway::KeyValue,
    name: &str,
    (now, latest): (Time, Time),
    window: Option<Duration>,
    clocks: &mut Clocks,
) -> Result<Counts, &'static str> {
    if i64::from_str_radix(name, 16) != Ok(kv.lease) || kv.lease == 0 {
        return Err("counts under another lease than the one they live by");
    }
    let told: Told = untagged(TAG, &kv.value).map_err(|_| "counts upcheck did not write")?;
    clocks.heard(kv.lease, told.written, now, Arrival::Read);
    let counts: Counts = match window {
        Some(window) => told
            .counts
            .into_iter()
            .map(|(k, t)| (k, t.retimed(|at| clocks.here(kv.lease, at), window)))
            .collect(),
        None => told.counts,
    };
    let plausible = |t: &Traffic| window.is_none_or(|w| t.plausible(latest, w));
    if counts.len() > MAX_UPSTREAMS
        || counts
            .iter()
            .any(|(k, t)| k.len() > MAX_KEY_LEN || !plausible(t))
    {
        return Err("counts larger than any or from the future");
    }
    Ok(counts)
}

/// The counts of the balancers other than `me` (by publisher's lease), added up per backend key,
/// once a read. Balancers of one configuration list the backends in one order, so each is
/// looked for at its own position first.
pub(super) fn others(read: Vec<(i64, Counts)>, me: Option<i64>) -> Counts {
    let mut sum: Counts = Vec::new();
    for (_, counts) in read.into_iter().filter(|(by, _)| Some(*by) != me) {
        for (i, (key, t)) in counts.into_iter().enumerate() {
            let at = match sum.get(i) {
                Some((k, _)) if *k == key => Some(i),
                _ => sum.iter().position(|(k, _)| *k == key),
            };
            match at.and_then(|at| sum.get_mut(at)) {
                Some((_, total)) => total.merge(&t),
                None => sum.push((key, t)),
            }
        }
    }
    sum
}

impl FleetPart {
    /// The other balancers' counts at the backend whose key is `key`, added up (none while
    /// fallen back to local). `index` is where the pool lists it, tried first.
    pub fn fleet_traffic(&self, index: usize, key: &str) -> Option<&Traffic> {
        if self.local {
            return None;
        }
        let read = &self.traffic.read;
        let found = read.get(index).filter(|(k, _)| k == key);
        found
            .or_else(|| read.iter().find(|(k, _)| k == key))
            .map(|(_, t)| t)
    }

    /// The counts this balancer's process made (`own`, asked for only when due), kept in
    /// `window`, at `now`: the put that publishes them, if the last was a read ago or more and
    /// they changed.
    pub fn share_traffic(
        &mut self,
        own: impl FnOnce() -> Counts,
        window: Duration,
        now: Time,
    ) -> Option<Request> {
        self.traffic.window = Some(window);
        let lease = self.sharing()?;
        let recent = |(at, _): &(Time, Counts)| now.saturating_sub(*at) < READ_EVERY;
        if self.traffic.told.as_ref().is_some_and(recent)
            || self.busy(|c| matches!(c, Call::Traffic(_)))
        {
            return None;
        }
        let own = own();
        if self
            .traffic
            .told
            .as_ref()
            .is_some_and(|(_, told)| *told == own)
        {
            return None;
        }
        let told = Told {
            written: now,
            counts: own,
        };
        let body = gateway::put(&self.keys.traffic(lease), &tagged(TAG, &told), lease);
        Some(self.request(Call::Traffic(told.counts), "/v3/kv/put", body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::FailureKind;

    #[test]
    fn a_busy_backends_counts_take_about_a_hundred_bytes_in_etcd() {
        let window = Duration::from_secs(10);
        let now = Duration::from_secs(1_764_000_000);
        let mut busy = Traffic::default();
        // 50 requests a second for 10 s, one in seven failing, latencies up to 300 ms.
        for i in 0..500u64 {
            let at = now + Duration::from_millis(i * 20);
            let failed = (i % 7 == 0).then_some(FailureKind::Status(500));
            busy.record(at, failed, Some(Duration::from_millis(i % 300)), window);
        }
        let counts: Counts = (0..10)
            .map(|i| (format!("app{i}@app{i}"), busy.clone()))
            .collect();
        let told = Told {
            written: now,
            counts,
        };
        let bytes = tagged(TAG, &told).len();
        println!("a balancer's counts for 10 busy backends: {bytes} bytes");
        assert!(bytes <= 10 * 110, "{bytes}");
        let read: Told = untagged(TAG, &tagged(TAG, &told)).unwrap();
        assert_eq!((read.written, read.counts), (told.written, told.counts));
    }
}
