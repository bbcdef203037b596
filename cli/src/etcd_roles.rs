//! The two etcd roles of a fleet, with the exact keys each may read and write, so that the
//! balancers cannot change the membership and the operators can change nothing else: what
//! docs/fleet.md gives as `etcdctl` commands ([`etcdctl`]) and the tests grant a real etcd.
//!
//! Both read the whole prefix (`{prefix}/`, which the module reads and watches in one range).
//! The balancers' role writes its evidence and its followers' reports, kind by kind
//! ([`upcheck_policy::etcd::keys`]), and not `{prefix}/v1/membership`; the operators' role
//! writes that one key. A removed backend's keys the balancers kept live by their leases and
//! expire with them: the operators' role need not delete them.

use upcheck_policy::etcd::keys::{
    Layout, ACTIVE, APPLIED, BALANCERS, DUTY, EJECTED, FAILURES, TRAFFIC,
};

/// What a role may do with a key or the keys under a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Perm {
    /// Read only.
    Read,
    /// Read and write (put, delete).
    ReadWrite,
}

/// One permission of a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// What it allows.
    pub perm: Perm,
    /// The key, or the prefix.
    pub key: String,
    /// Whether `key` is a prefix (every key under it) rather than one key.
    pub prefix: bool,
}

/// The balancers' role for a fleet under `prefix`: read everything under it, write the kinds
/// of keys the balancers and their followers write.
pub fn balancers(prefix: &str) -> Vec<Grant> {
    let keys = Layout::new(prefix);
    let mut grants = vec![Grant {
        perm: Perm::Read,
        key: keys.all().to_owned(),
        prefix: true,
    }];
    for kind in [BALANCERS, DUTY, ACTIVE, FAILURES, TRAFFIC, EJECTED, APPLIED] {
        grants.push(Grant {
            perm: Perm::ReadWrite,
            key: format!("{}{kind}/", keys.mine()),
            prefix: true,
        });
    }
    grants
}

/// The operators' role for a fleet under `prefix`: read everything under it (the followers'
/// reports), write the membership key and nothing else.
pub fn operators(prefix: &str) -> Vec<Grant> {
    let keys = Layout::new(prefix);
    vec![
        Grant {
            perm: Perm::Read,
            key: keys.all().to_owned(),
            prefix: true,
        },
        Grant {
            perm: Perm::ReadWrite,
            key: keys.membership(),
            prefix: false,
        },
    ]
}

/// The `etcdctl` commands that make `role` with `grants`.
pub fn etcdctl(role: &str, grants: &[Grant]) -> Vec<String> {
    let mut lines = vec![format!("etcdctl role add {role}")];
    for g in grants {
        let perm = match g.perm {
            Perm::Read => "read",
            Perm::ReadWrite => "readwrite",
        };
        let prefix = if g.prefix { " --prefix" } else { "" };
        lines.push(format!(
            "etcdctl role grant-permission {role}{prefix} {perm} {}",
            g.key
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_balancers_role_may_not_write_the_membership_and_the_operators_may_write_only_it() {
        let keys = Layout::new("upcheck");
        let writes = |grants: &[Grant], key: &str| {
            grants.iter().any(|g| {
                g.perm == Perm::ReadWrite
                    && match g.prefix {
                        true => key.starts_with(&g.key),
                        false => key == g.key,
                    }
            })
        };
        let balancers = balancers("upcheck");
        let operators = operators("upcheck");
        assert!(!writes(&balancers, &keys.membership()));
        assert!(writes(&operators, &keys.membership()));
        for key in [
            keys.duty("app1@app1"),
            keys.active("app1@app1"),
            keys.failures(7, "app1@app1"),
            keys.traffic(7),
            keys.ejected("app1@app1"),
            keys.balancer(7),
            keys.applied("lb-a"),
        ] {
            assert!(writes(&balancers, &key), "{key}");
            assert!(!writes(&operators, &key), "{key}");
        }
    }

    #[test]
    fn the_fleet_guide_gives_both_roles_as_etcdctl_commands() {
        let guide = include_str!("../../docs/fleet.md");
        for line in etcdctl("upcheck-balancer", &balancers("upcheck"))
            .into_iter()
            .chain(etcdctl("upcheck-operator", &operators("upcheck")))
        {
            assert!(guide.contains(&line), "docs/fleet.md lacks `{line}`");
        }
    }
}
