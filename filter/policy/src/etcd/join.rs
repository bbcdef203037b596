//! Joining the fleet: a token first when etcd has authentication on, then this balancer's lease
//! (granted, kept alive every third of its TTL, asked for again when etcd lets it expire), and
//! its key under `balancers/`, by which the others count it. Everything this balancer writes
//! lives by that lease, so what it leaves behind goes with it.

use super::{due, gateway, Call, FleetPart, Request};
use crate::level::Level;
use crate::time::Time;

/// Where this balancer is in joining the fleet: whether it holds an etcd lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Joined {
    /// No lease: to be granted (after authenticating, with credentials).
    #[default]
    Out,
    /// A grant (or authentication) is on the wire.
    Joining,
    /// Holding this lease, granted `since`, last renewed `kept`.
    In { lease: i64, since: Time, kept: Time },
}

/// This balancer's standing with etcd: its token, its lease, its key.
#[derive(Debug, Clone, Default)]
pub(super) struct Join {
    joined: Joined,
    /// etcd's auth token, once one is granted.
    pub(super) auth: Option<String>,
    /// Whether this balancer's key is in place under its lease.
    pub(super) registered: bool,
    /// When the last grant or authentication was asked for.
    tried: Option<Time>,
}

impl FleetPart {
    /// This balancer's etcd lease ID, once it has one.
    pub fn lease(&self) -> Option<i64> {
        match self.join.joined {
            Joined::In { lease, .. } => Some(lease),
            _ => None,
        }
    }

    /// When this balancer's lease was granted, while it holds one: what it measured before is
    /// never published under it ([`FleetPart::publish`], [`FleetPart::evidence`]), so a balancer
    /// that lost its lease (frozen by SIGSTOP, a long pause, a VM stopped) and joined again
    /// writes nothing it saw before the loss. Fenced by the lease, not by a clock read elsewhere:
    /// etcd refuses every write under the lease it lost.
    pub fn lease_since(&self) -> Option<Time> {
        match self.join.joined {
            Joined::In { since, .. } => Some(since),
            _ => None,
        }
    }

    /// When etcd last kept this balancer's lease alive (or granted it), while it holds one.
    pub(super) fn last_kept(&self) -> Option<Time> {
        match self.join.joined {
            Joined::In { kept, .. } => Some(kept),
            _ => None,
        }
    }

    /// This balancer's name in the fleet: its lease ID in hex, once it has one.
    pub fn me(&self) -> Option<String> {
        self.lease().map(|l| format!("{l:x}"))
    }

    /// This balancer's lease while it shares what its process saw: it is registered, has not
    /// fallen back to local, and has read the prefix.
    pub(super) fn sharing(&self) -> Option<i64> {
        let lease = self.lease()?;
        (self.join.registered && !self.local && self.read.is_some()).then_some(lease)
    }

    /// The calls at `now` that join the fleet and keep this balancer in it, into `out`: false
    /// while it has yet to authenticate, when nothing else goes out.
    pub(super) fn join(&mut self, now: Time, out: &mut Vec<Request>) -> bool {
        let retry = self.ttl() / 3;
        if let Some((user, password)) = self.settings.credentials() {
            if self.join.auth.is_none() {
                if !self.busy(|c| matches!(c, Call::Authenticate))
                    && due(now, self.join.tried, retry)
                {
                    self.join.tried = Some(now);
                    let body = gateway::authenticate(user, password);
                    out.push(self.request(Call::Authenticate, "/v3/auth/authenticate", body));
                }
                return false;
            }
        }
        match self.join.joined {
            Joined::Out => {
                if due(now, self.join.tried, retry) {
                    self.join.tried = Some(now);
                    self.join.joined = Joined::Joining;
                    let body = gateway::grant(self.ttl().as_secs());
                    out.push(self.request(Call::Grant, "/v3/lease/grant", body));
                }
            }
            Joined::Joining => {}
            Joined::In { lease, kept, .. } => {
                if now.saturating_sub(kept) >= retry && !self.busy(|c| matches!(c, Call::KeepAlive))
                {
                    out.push(self.request(
                        Call::KeepAlive,
                        "/v3/lease/keepalive",
                        gateway::keepalive(lease),
                    ));
                }
                if !self.join.registered && !self.busy(|c| matches!(c, Call::Register)) {
                    let key = self.keys.balancer(lease);
                    let body = gateway::put(&key, lease.to_string().as_bytes(), lease);
                    out.push(self.request(Call::Register, "/v3/kv/put", body));
                }
            }
        }
        true
    }

    /// What came of authenticating: a token, or why not.
    pub(super) fn authenticated(&mut self, answer: Result<String, String>) {
        match answer {
            Ok(token) => {
                self.join.auth = Some(token);
                self.join.tried = None;
            }
            Err(why) => self.failed(why),
        }
    }

    /// What came of the grant of this balancer's lease, at `now`: with a new lease, nothing it
    /// put under the last is there any more.
    pub(super) fn granted(&mut self, answer: Result<i64, String>, now: Time) {
        match answer {
            Ok(lease) => {
                self.join.joined = Joined::In {
                    lease,
                    since: now,
                    kept: now,
                };
                self.join.registered = false;
                self.results.told.clear();
                self.evidence.told.clear();
                self.traffic.told = None;
            }
            Err(why) => {
                self.join.joined = Joined::Out;
                self.failed(why);
            }
        }
    }

    /// What came of keeping the lease alive, at `now`: kept, gone from etcd, or no answer.
    pub(super) fn kept_alive(&mut self, answer: Result<bool, String>, now: Time) {
        match answer {
            Ok(true) => {
                if let Joined::In { lease, since, .. } = self.join.joined {
                    self.join.joined = Joined::In {
                        lease,
                        since,
                        kept: now,
                    };
                }
            }
            Ok(false) => {
                let me = self.me().unwrap_or_default();
                self.note(
                    Level::Warn,
                    format!("fleet: lease {me} expired in etcd; its probe duties are free, and a new lease is asked for"),
                );
                self.join.joined = Joined::Out;
                self.join.registered = false;
                self.join.tried = None;
            }
            Err(why) => self.failed(why),
        }
    }

    /// What came of putting this balancer's key.
    pub(super) fn put_registered(&mut self, answer: Result<(), String>) {
        match answer {
            Ok(()) => self.join.registered = true,
            Err(why) => self.failed(why),
        }
    }
}
