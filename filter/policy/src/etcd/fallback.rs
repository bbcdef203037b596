//! Fail local, never fail closed: without a usable read of the prefix for one lease TTL, this
//! balancer probes every backend itself again, exactly as without a `fleet`, and says so once;
//! when etcd answers again it rejoins, and says that once too.

use super::FleetPart;
use crate::level::Level;
use crate::time::Time;

impl FleetPart {
    /// Whether this balancer has fallen back to probing every backend itself.
    pub fn local(&self) -> bool {
        self.local
    }

    /// Falls back to local, or rejoins, as the time since the last usable read says.
    pub(super) fn judge(&mut self, now: Time) {
        let since = self.read.unwrap_or(self.started);
        let local = now.saturating_sub(since) > self.ttl();
        if local == self.local {
            return;
        }
        self.local = local;
        if local {
            let text = format!(
                "fleet: no usable answer from etcd for {}s ({}); every backend is probed here until it answers",
                self.ttl().as_secs(),
                self.why
            );
            self.note(Level::Warn, text);
        } else {
            let text = format!(
                "fleet: etcd answers again; probe duties are shared with {} balancer{}",
                self.balancers,
                if self.balancers == 1 { "" } else { "s" }
            );
            self.note(Level::Info, text);
        }
    }
}
