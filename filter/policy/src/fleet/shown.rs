//! What the status page shows of the fleet: per backend, which balancer holds its probe duty;
//! when the shared view was last read; whether this balancer has fallen back to local.
//!
//! Only the prober VM speaks to etcd, and the page is answered by another VM (the status page
//! listener's), so the prober writes this small record into shared data, by prefix
//! ([`crate::tables::keys::FLEET`]), whenever it changes, and the page reads it back as untrusted
//! bytes ([`crate::tables::decode_fleet`]). A balancer is named by its etcd lease ID, never by
//! anything of its credentials.

use super::{Duty, Fleet};
use crate::time::Time;

/// The fleet as one balancer sees it, for its status page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shown {
    /// This balancer's lease ID, once it has one.
    pub me: Option<i64>,
    /// Whether it has fallen back to probing every backend itself (etcd unreachable).
    pub local: bool,
    /// When it last read the shared view (to the millisecond).
    pub read: Option<Time>,
    /// How many balancers that read counted.
    pub balancers: u32,
    /// By backend key, the lease of the balancer holding its probe duty (`None`: nobody yet).
    pub duties: Vec<(String, Option<i64>)>,
}

/// Where one backend's probe duty is, as the page says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// Probed by this balancer: it holds the duty, or has fallen back to local.
    Here,
    /// Probed by the balancer with this lease ID.
    Other(i64),
    /// Nobody holds it yet.
    Nobody,
}

impl Shown {
    /// What `fleet` shows of the backends whose keys are `keys`.
    pub fn of<'a>(fleet: &Fleet, keys: impl Iterator<Item = &'a str>) -> Shown {
        let me = fleet.lease();
        Shown {
            me,
            local: fleet.local(),
            read: fleet.last_read(),
            balancers: u32::try_from(fleet.balancers()).unwrap_or(u32::MAX),
            duties: keys
                .map(|key| {
                    let holder = match fleet.duty(key) {
                        Duty::Here => me,
                        Duty::Elsewhere { holder, .. } => holder,
                    };
                    (key.to_owned(), holder)
                })
                .collect(),
        }
    }

    /// Where the probe duty of the backend whose key is `key` is; `None` if this record does
    /// not know the backend.
    pub fn holder(&self, key: &str) -> Option<Holder> {
        let (_, holder) = self.duties.iter().find(|(k, _)| k == key)?;
        Some(match holder {
            _ if self.local => Holder::Here,
            Some(lease) if Some(*lease) == self.me => Holder::Here,
            Some(lease) => Holder::Other(*lease),
            None => Holder::Nobody,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(local: bool) -> Shown {
        Shown {
            me: Some(0x2a),
            local,
            read: Some(Time::from_secs(3)),
            balancers: 3,
            duties: vec![
                ("a".into(), Some(0x2a)),
                ("b".into(), Some(0xff)),
                ("c".into(), None),
            ],
        }
    }

    #[test]
    fn a_duty_is_here_with_another_balancer_by_its_lease_or_with_nobody() {
        let s = shown(false);
        assert_eq!(s.holder("a"), Some(Holder::Here));
        assert_eq!(s.holder("b"), Some(Holder::Other(0xff)));
        assert_eq!(s.holder("c"), Some(Holder::Nobody));
        assert_eq!(s.holder("d"), None);
    }

    #[test]
    fn a_balancer_fallen_back_to_local_probes_every_backend_here() {
        let s = shown(true);
        for key in ["a", "b", "c"] {
            assert_eq!(s.holder(key), Some(Holder::Here), "{key}");
        }
    }
}
