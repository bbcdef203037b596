//! `fleet`: several balancers sharing one view of health through etcd ([`crate::fleet`]).
//!
//! Left out, upcheck runs alone, exactly as without it. Given, it names the Envoy cluster that
//! reaches etcd's JSON gateway (never one upcheck routes users to), the key prefix the balancers
//! of one pool share, the TTL of each balancer's etcd lease, and the credentials of an etcd user
//! when etcd has authentication on. The TTL is in whole seconds because etcd's leases are, and at
//! least [`MIN_LEASE_TTL`], below which etcd would silently lengthen it.

use super::grammar;
use super::json::{or_off, read, text, Refusal};
use super::{duration, MAX_NAME_LEN, MAX_VALUE_LEN};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

/// The default `fleet.prefix` when the configuration names no `pool`.
pub const DEFAULT_PREFIX: &str = "upcheck";
/// The default `fleet.lease_ttl`.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(6);
/// etcd's shortest lease with its default timing (`--heartbeat-interval 100ms`,
/// `--election-timeout 1000ms`): one and a half election timeouts, rounded up to a second.
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(2);
/// The longest `fleet.lease_ttl`: how long a dead balancer may keep its duties.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(3600);
/// The longest `fleet.prefix`, in bytes.
pub const MAX_PREFIX_LEN: usize = 128;

/// The balancers' shared view, as configured. Defaults in [`Fleet::default`], except `cluster`,
/// which is required, and `prefix`, which the configuration completes when left out.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Fleet {
    /// The Envoy cluster whose members are etcd's client endpoints (its JSON gateway).
    /// Required; a name as an upstream's cluster is.
    #[serde(deserialize_with = "cluster")]
    pub cluster: String,
    /// Where in etcd's key space the pool's balancers meet: segments of letters, digits, `.`,
    /// `_` and `-` joined by `/`, at most [`MAX_PREFIX_LEN`] bytes. Default: the configuration's
    /// `pool` when set, else [`DEFAULT_PREFIX`] (left out, it reads as empty, and the
    /// configuration fills it in).
    #[serde(deserialize_with = "prefix", default = "String::new")]
    pub prefix: String,
    /// How long a balancer that stopped answering keeps its probe duties: its etcd lease's TTL,
    /// in whole seconds, within [`Fleet::LEASE_TTL`]. Default [`DEFAULT_LEASE_TTL`].
    #[serde(with = "duration")]
    pub lease_ttl: Duration,
    /// The etcd user, when etcd has authentication on (with `password`): a name as a cluster's
    /// is. Default: none (`null`).
    #[serde(deserialize_with = "user")]
    pub user: Option<String>,
    /// The etcd user's password (with `user`), at most [`MAX_VALUE_LEN`] bytes; never logged, and
    /// errors about it do not repeat it. Default: none (`null`).
    #[serde(deserialize_with = "password")]
    pub password: Option<String>,
    /// The Envoy cluster, speaking HTTP/2, whose members are etcd's client endpoints for gRPC:
    /// the prefix is then read once and followed by etcd's Watch over a gRPC stream through it,
    /// where without it the prefix is read on a clock (hosts without gRPC streams, such as
    /// NGINX's ngx_wasm_module). A name as a cluster's is. Default: none (`null`).
    #[serde(deserialize_with = "grammar::cluster_or_none")]
    pub watch_cluster: Option<String>,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet {
            cluster: String::new(),
            prefix: DEFAULT_PREFIX.into(),
            lease_ttl: DEFAULT_LEASE_TTL,
            user: None,
            password: None,
            watch_cluster: None,
        }
    }
}

impl Fleet {
    /// What `lease_ttl` may be.
    pub const LEASE_TTL: RangeInclusive<Duration> = MIN_LEASE_TTL..=MAX_LEASE_TTL;

    /// The user and password, when etcd has authentication on.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        Some((self.user.as_deref()?, self.password.as_deref()?))
    }
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("cluster", &self.cluster)
            .field("prefix", &self.prefix)
            .field("lease_ttl", &self.lease_ttl)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("watch_cluster", &self.watch_cluster)
            .finish()
    }
}

fn cluster<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    grammar::cluster(d).map(Option::unwrap_or_default)
}

fn user<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    read(d, "a string or null", |found| {
        or_off(found, |found| {
            let user = text(found)?;
            if user.is_empty() {
                return Err("must not be empty".into());
            }
            if user.len() > MAX_NAME_LEN {
                return Err(format!(
                    "must be at most {MAX_NAME_LEN} bytes long, got {}",
                    user.len()
                )
                .into());
            }
            if user.chars().any(|c| c.is_control() || c == ' ') {
                return Err("must not contain spaces or control characters".into());
            }
            Ok(user)
        })
    })
}

fn password<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    read(d, "a string or null", |found| {
        or_off(found, |found| {
            let password = text(found)?;
            if password.is_empty() {
                return Err("must not be empty".into());
            }
            if password.len() > MAX_VALUE_LEN {
                return Err(format!("must be at most {MAX_VALUE_LEN} bytes long").into());
            }
            if password.chars().any(char::is_control) {
                return Err("must not contain control characters".into());
            }
            Ok(password)
        })
    })
}

/// `user` and `password` given together or not at all.
pub fn check_credentials(fleet: &Fleet) -> Result<(), (&'static str, &'static str)> {
    match (&fleet.user, &fleet.password) {
        (Some(_), None) => Err((
            "fleet.password",
            "missing; a user for etcd's authentication needs its password",
        )),
        (None, Some(_)) => Err((
            "fleet.user",
            "missing; a password is for etcd's authentication, which needs its user",
        )),
        _ => Ok(()),
    }
}

/// Whether `c` may be in a prefix's segment.
fn is_segment_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

fn prefix<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    read(d, "a string", |found| {
        let prefix = text(found)?;
        clean_path(&prefix).map_err(Refusal::from)?;
        Ok(prefix)
    })
}

/// A clean key path: non-empty segments joined by `/`, none of them `.` or `..`.
fn clean_path(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Err("must not be empty".into());
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(format!(
            "must be at most {MAX_PREFIX_LEN} bytes long, got {}",
            prefix.len()
        ));
    }
    if let Some(c) = prefix.chars().find(|c| *c != '/' && !is_segment_char(*c)) {
        return Err(format!(
            "{prefix:?} contains {c:?}; a prefix is segments of letters, digits, '.', '_' and '-' joined by '/'"
        ));
    }
    if prefix
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return Err(format!(
            "{prefix:?} is not a clean path: no leading, trailing or doubled '/', no '.' or '..' segment"
        ));
    }
    Ok(())
}

/// `fleet.lease_ttl` within its range and in whole seconds.
pub fn check_lease_ttl(ttl: Duration) -> Result<(), String> {
    let range = Fleet::LEASE_TTL;
    if ttl < *range.start() {
        return Err(format!(
            "must be at least {} (etcd's shortest lease), got {}",
            duration::exact(*range.start()),
            duration::exact(ttl)
        ));
    }
    if ttl > *range.end() {
        return Err(format!(
            "must be at most {}, got {}",
            duration::exact(*range.end()),
            duration::exact(ttl)
        ));
    }
    if ttl.subsec_nanos() != 0 {
        return Err(format!(
            "must be whole seconds (etcd's leases are), got {}",
            duration::exact(ttl)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_a_clean_path_of_plain_segments() {
        for good in ["upcheck", "site/pool-1", "a.b/c_d"] {
            assert_eq!(clean_path(good), Ok(()), "{good}");
        }
        for bad in [
            "", "/upcheck", "upcheck/", "a//b", "a/../b", "./a", "a b", "a/é",
        ] {
            assert!(clean_path(bad).is_err(), "{bad:?}");
        }
        assert!(clean_path(&"a".repeat(MAX_PREFIX_LEN)).is_ok());
        assert!(clean_path(&"a".repeat(MAX_PREFIX_LEN + 1)).is_err());
    }

    #[test]
    fn a_lease_ttl_is_whole_seconds_from_etcds_minimum() {
        assert!(check_lease_ttl(Duration::from_secs(2)).is_ok());
        assert!(check_lease_ttl(Duration::from_millis(1999)).is_err());
        assert!(check_lease_ttl(Duration::from_millis(2500)).is_err());
        assert!(check_lease_ttl(Duration::from_secs(3600)).is_ok());
        assert!(check_lease_ttl(Duration::from_secs(3601)).is_err());
    }

    #[test]
    fn a_fleet_never_shows_its_password_when_debugged() {
        let fleet = Fleet {
            user: Some("upcheck".into()),
            password: Some("s3cret".into()),
            ..Fleet::default()
        };
        let shown = format!("{fleet:?}");
        assert!(
            shown.contains("upcheck") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}
