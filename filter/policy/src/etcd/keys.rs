//! The key layout under a fleet's prefix, in one place: the balancers write and read their keys
//! through it, and so does `upcheck backends` (the operators' membership, its followers'
//! reports, and the keys it deletes of a backend removed), so the two cannot drift apart.
//!
//! Every key is `{prefix}/v{VERSION}/{kind}/{name}`; the kinds are the constants below.

/// The version of the key layout and of the values (the `v1` in every key).
pub const VERSION: u8 = 1;

/// The layout of the values balancers put (a probe state, an ejection, request counts), in the
/// last byte of each one's tag: 2 since each begins with when it was written, by its writer's
/// clock ([`super::clocks`]), 3 since a probe that failed says what a gRPC backend answered
/// ([`crate::active::Said`]). A value of another layout is refused with a log line, never
/// misread.
pub const VALUES: u8 = 3;

/// One key per balancer, by its lease in hex, living by that lease.
pub const BALANCERS: &str = "balancers";
/// Per backend, which balancer probes it.
pub const DUTY: &str = "duty";
/// Per backend, the probe state its duty holder published.
pub const ACTIVE: &str = "active";
/// Per balancer and backend, the request failures that balancer counted there.
pub const FAILURES: &str = "failures";
/// Per balancer, the request outcomes it counted at each backend.
pub const TRAFFIC: &str = "traffic";
/// Per backend, an outlier ejection one balancer decided.
pub const EJECTED: &str = "ejected";
/// The pool's membership, which backends it has, as the operators set it (`upcheck backends`):
/// one key, no name.
pub const MEMBERSHIP: &str = "membership";
/// Per balancer, what its follower of the membership has in force (`upcheck backends follow`).
pub const APPLIED: &str = "applied";

/// The keys of one fleet: its prefix, and the part every key of this layout starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `{prefix}/`: every key of the fleet, of any version.
    all: String,
    /// `{prefix}/v{VERSION}/`: the keys of this layout.
    mine: String,
}

impl Layout {
    /// The layout under `prefix` (the plugin configuration's `fleet.prefix`).
    pub fn new(prefix: &str) -> Layout {
        Layout {
            all: format!("{prefix}/"),
            mine: format!("{prefix}/v{VERSION}/"),
        }
    }

    /// `{prefix}/`: what a read of the fleet asks for, keys of other versions included (they
    /// are refused by name rather than missed).
    pub fn all(&self) -> &str {
        &self.all
    }

    /// `{prefix}/v1/`: where every key of this layout starts.
    pub fn mine(&self) -> &str {
        &self.mine
    }

    fn key(&self, kind: &str, name: &str) -> String {
        format!("{}{kind}/{name}", self.mine)
    }

    /// `{prefix}/v1/balancers/{lease}`.
    pub fn balancer(&self, lease: i64) -> String {
        self.key(BALANCERS, &format!("{lease:x}"))
    }

    /// `{prefix}/v1/duty/{backend}`.
    pub fn duty(&self, backend: &str) -> String {
        self.key(DUTY, backend)
    }

    /// `{prefix}/v1/active/{backend}`.
    pub fn active(&self, backend: &str) -> String {
        self.key(ACTIVE, backend)
    }

    /// `{prefix}/v1/failures/{lease}/{backend}`.
    pub fn failures(&self, lease: i64, backend: &str) -> String {
        self.key(FAILURES, &format!("{lease:x}/{backend}"))
    }

    /// `{prefix}/v1/traffic/{lease}`.
    pub fn traffic(&self, lease: i64) -> String {
        self.key(TRAFFIC, &format!("{lease:x}"))
    }

    /// `{prefix}/v1/ejected/{backend}`.
    pub fn ejected(&self, backend: &str) -> String {
        self.key(EJECTED, backend)
    }

    /// `{prefix}/v1/membership`.
    pub fn membership(&self) -> String {
        format!("{}{MEMBERSHIP}", self.mine)
    }

    /// `{prefix}/v1/applied/{balancer}`; with an empty `balancer`, where every report starts.
    pub fn applied(&self, balancer: &str) -> String {
        self.key(APPLIED, balancer)
    }

    /// The kind and the name of `key`, if it is a key of this layout (no name for a key with
    /// no `/` after its kind, such as the membership's).
    pub fn split<'a>(&self, key: &'a str) -> Option<(&'a str, Option<&'a str>)> {
        let rest = key.strip_prefix(&self.mine)?;
        Some(match rest.split_once('/') {
            Some((kind, name)) => (kind, Some(name)),
            None => (rest, None),
        })
    }

    /// Whether `key` is one the balancers keep of the backend whose key is `backend`
    /// (`name@cluster`): its probe duty, its probe state, the failures any balancer counted at
    /// it, its ejection. A backend's key is the last part of each, with more after an `@` in
    /// host routing (`name@cluster@address`), which `name@cluster` covers.
    pub fn of_backend(&self, key: &str, backend: &str) -> bool {
        let Some((kind, name)) = self.split(key) else {
            return false;
        };
        let last = name
            .unwrap_or_default()
            .rsplit('/')
            .next()
            .unwrap_or_default();
        let named = last == backend
            || last
                .strip_prefix(backend)
                .is_some_and(|rest| rest.starts_with('@'));
        named && [DUTY, ACTIVE, FAILURES, EJECTED].contains(&kind)
    }
}

/// The key just past every key that starts with `prefix`: etcd's `range_end` for a prefix.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_just_past_its_last_byte() {
        assert_eq!(prefix_end(b"up/"), b"up0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
    }

    #[test]
    fn every_key_is_the_prefix_the_version_the_kind_and_the_name() {
        let keys = Layout::new("site/pool");
        assert_eq!(keys.all(), "site/pool/");
        assert_eq!(keys.mine(), "site/pool/v1/");
        assert_eq!(keys.balancer(0x2a), "site/pool/v1/balancers/2a");
        assert_eq!(keys.duty("app@app"), "site/pool/v1/duty/app@app");
        assert_eq!(keys.active("app@app"), "site/pool/v1/active/app@app");
        assert_eq!(keys.failures(255, "a@a"), "site/pool/v1/failures/ff/a@a");
        assert_eq!(keys.traffic(16), "site/pool/v1/traffic/10");
        assert_eq!(keys.ejected("a@a"), "site/pool/v1/ejected/a@a");
        assert_eq!(keys.membership(), "site/pool/v1/membership");
        assert_eq!(keys.applied("lb1"), "site/pool/v1/applied/lb1");
        assert_eq!(
            keys.split("site/pool/v1/duty/a@a"),
            Some(("duty", Some("a@a")))
        );
        assert_eq!(
            keys.split("site/pool/v1/membership"),
            Some(("membership", None))
        );
        assert_eq!(keys.split("site/pool/v2/duty/a@a"), None);
    }

    #[test]
    fn a_backends_keys_are_its_duty_state_failures_and_ejection_and_no_other() {
        let keys = Layout::new("p");
        for key in [
            keys.duty("app@app"),
            keys.active("app@app@10.0.0.1:80"),
            keys.failures(7, "app@app"),
            keys.ejected("app@app"),
        ] {
            assert!(keys.of_backend(&key, "app@app"), "{key}");
        }
        for key in [
            keys.duty("app@app2"),
            keys.duty("app2@app"),
            keys.traffic(7),
            keys.balancer(7),
            keys.membership(),
            "q/v1/duty/app@app".to_owned(),
        ] {
            assert!(!keys.of_backend(&key, "app@app"), "{key}");
        }
    }
}
