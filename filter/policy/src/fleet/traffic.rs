//! The peer comparison's counts shared: behind N balancers, each sees only its share of the
//! requests, so a backend that fails a few of its pages on each is judged on a few requests
//! behind each; with the counts shared, each judges on the whole fleet's.
//!
//! Each balancer publishes the request outcomes its own process counted at each backend
//! ([`Traffic`], the counts its VMs add up), one value per balancer,
//! `{prefix}/v1/traffic/{lease}`, living by its lease, at most once a read and only when they
//! changed. The prober adds the others' to its own when it judges
//! ([`crate::pool::Pool::fleet_view`]): counts kept in half-windows of absolute time add up
//! wherever they were made. A value that does not decode, lists more backends than any
//! configuration or counts no build could have made by now is refused with a log line.

use super::{etcd, Call, Fleet, Request, READ_EVERY, VERSION};
use crate::history::MAX_KEY_LEN;
use crate::outlier::Traffic;
use crate::tables::{tagged, untagged};
use crate::time::Time;
use std::time::Duration;
use upcheck_config::MAX_UPSTREAMS;

/// The tag of a value: `u`, `c`, `t` and the key layout's version.
const TAG: [u8; 4] = [b'u', b'c', b't', VERSION];

/// Per backend key, its counts.
pub type Counts = Vec<(String, Traffic)>;

/// What this balancer published of its counts and read of the others'.
#[derive(Debug, Clone, Default)]
pub(super) struct PeerCounts {
    /// What the last read found: by publisher's lease, its counts.
    pub(super) read: Vec<(i64, Counts)>,
    /// When this balancer last published, and what.
    pub(super) told: Option<(Time, Counts)>,
    /// The outlier window the counts are kept in, as the pool last said.
    pub(super) window: Option<Duration>,
}

/// Reads the value at `…/traffic/{lease}` (`name`), counts made by `latest` at the latest.
pub(super) fn read(
    kv: &etcd::KeyValue,
    name: &str,
    latest: Time,
    window: Option<Duration>,
) -> Result<Counts, &'static str> {
    if i64::from_str_radix(name, 16) != Ok(kv.lease) || kv.lease == 0 {
        return Err("counts under another lease than the one they live by");
    }
    let counts: Counts = untagged(TAG, &kv.value).map_err(|_| "counts upcheck did not write")?;
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

impl Fleet {
    /// The other balancers' counts at the backend whose key is `key`, added up (none while
    /// fallen back to local).
    pub fn fleet_traffic(&self, key: &str) -> Option<Traffic> {
        if self.local {
            return None;
        }
        let mut sum: Option<Traffic> = None;
        for (by, counts) in &self.traffic.read {
            if Some(*by) == self.lease() {
                continue;
            }
            for (_, t) in counts.iter().filter(|(k, _)| k == key) {
                sum.get_or_insert_with(Traffic::default).merge(t);
            }
        }
        sum
    }

    /// The counts this balancer's process made (`own`), kept in `window`, at `now`: the put
    /// that publishes them, if they changed and the last was a read ago or more.
    pub fn share_traffic(&mut self, own: Counts, window: Duration, now: Time) -> Option<Request> {
        self.traffic.window = Some(window);
        let lease = self.lease()?;
        if !self.registered || self.local || self.read.is_none() {
            return None;
        }
        let recent = self
            .traffic
            .told
            .as_ref()
            .is_some_and(|(at, told)| now.saturating_sub(*at) < READ_EVERY || *told == own);
        if recent || self.busy(|c| matches!(c, Call::Traffic(_))) {
            return None;
        }
        let body = etcd::put(
            &self.key("traffic", &format!("{lease:x}")),
            &tagged(TAG, &own),
            lease,
        );
        Some(self.request(Call::Traffic(own), "/v3/kv/put", body))
    }
}
