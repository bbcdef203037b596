//! Probe duties: which balancer probes which backend. A duty is claimed by a transaction that
//! creates its key only if absent, under the claimer's lease, so one balancer holds it and loses
//! it with its lease. Each claims free duties up to its share (M / N, rounded up), starting at a
//! place of its own in the list, and gives one back per tick while it holds more, so duties
//! spread over the balancers rather than all landing on the first.

use super::{gateway, Call, Duty, FleetPart, Request};
use crate::active::ActiveHealth;

impl FleetPart {
    /// The lease that holds the duty of the backend whose key is `key`, as last read.
    fn holder(&self, key: &str) -> Option<i64> {
        self.duties.iter().find(|(k, _)| k == key).map(|(_, h)| *h)
    }

    /// Whether this balancer, holding `lease`, holds the duty of the backend whose key is `key`.
    pub(super) fn holds(&self, lease: i64, key: &str) -> bool {
        self.holder(key) == Some(lease)
    }

    /// The claims and the giving back that spread the duties of `own` (by backend key), from the
    /// last read, into `out`.
    pub(super) fn claim(&self, lease: i64, own: &[(String, ActiveHealth)], out: &mut Vec<Request>) {
        let held: Vec<&String> = own
            .iter()
            .map(|(k, _)| k)
            .filter(|k| self.holds(lease, k))
            .collect();
        let claiming = self
            .on_wire
            .iter()
            .filter(|(_, c)| matches!(c, Call::Claim(_)))
            .count();
        let share = own.len().div_ceil(self.balancers.max(1));
        let free: Vec<&String> = own
            .iter()
            .map(|(k, _)| k)
            .filter(|k| self.holder(k).is_none())
            .filter(|k| !self.busy(|c| matches!(c, Call::Claim(c) if c == *k)))
            .collect();
        let mut wanted = share.saturating_sub(held.len() + claiming);
        if !free.is_empty() && wanted > 0 {
            // Start at a place of this balancer's own, so balancers claiming at once mostly
            // want different duties.
            let start = usize::try_from(lease.unsigned_abs() % free.len() as u64).unwrap_or(0);
            let mut claims = Vec::new();
            for key in free.iter().cycle().skip(start).take(free.len()) {
                if wanted == 0 {
                    break;
                }
                wanted -= 1;
                claims.push((*key).clone());
            }
            for key in claims {
                let body =
                    gateway::create(&self.keys.duty(&key), lease.to_string().as_bytes(), lease);
                out.push(self.request(Call::Claim(key), "/v3/kv/txn", body));
            }
        }
        if held.len() > share && !self.busy(|c| matches!(c, Call::Release(_))) {
            if let Some(key) = held.last() {
                let key = (*key).clone();
                let body = gateway::delete_if(&self.keys.duty(&key), lease.to_string().as_bytes());
                out.push(self.request(Call::Release(key), "/v3/kv/txn", body));
            }
        }
    }

    /// What came of claiming the duty of `key`: taken (if this balancer still has a lease),
    /// held by another already, or no answer.
    pub(super) fn claimed(&mut self, key: String, answer: Result<bool, String>) {
        match (answer, self.lease()) {
            (Ok(true), Some(lease)) => {
                self.duties.retain(|(k, _)| *k != key);
                self.duties.push((key, lease));
            }
            (Ok(_), _) => {}
            (Err(why), _) => self.failed(why),
        }
    }

    /// What came of giving the duty of `key` back.
    pub(super) fn released(&mut self, key: String, answer: Result<bool, String>) {
        match answer {
            Ok(_) => self.duties.retain(|(k, _)| *k != key),
            Err(why) => self.failed(why),
        }
    }

    /// Where the duty of the backend whose key is `key` is.
    pub fn duty(&self, key: &str) -> Duty {
        if self.local {
            return Duty::Here;
        }
        let holder = self.holder(key);
        if holder.is_some() && holder == self.lease() {
            return Duty::Here;
        }
        let health = holder.and_then(|holder| self.results.of(key, holder));
        Duty::Elsewhere { holder, health }
    }
}
