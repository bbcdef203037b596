//! `fleet`: several balancers sharing one view of health through etcd ([`crate::fleet`]).
//!
//! Left out, upcheck runs alone, exactly as without it. Given, it names the Envoy cluster that
//! reaches etcd's JSON gateway (never one upcheck routes users to), the key prefix the balancers
//! of one pool share, the TTL of each balancer's etcd lease, and the credentials of an etcd user
//! when etcd has authentication on. The TTL is in whole seconds because etcd's leases are, and at
//! least [`MIN_LEASE_TTL`], below which etcd would silently lengthen it.

use super::grammar;
use super::json::{mismatch, read, scalars_as_json, text, Json, Refusal};
use super::{duration, MAX_VALUE_LEN};
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

/// The default `fleet.prefix`.
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
/// which is required.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Fleet {
    /// The Envoy cluster whose members are etcd's client endpoints (its JSON gateway).
    /// Required; a name as an upstream's cluster is.
    #[serde(deserialize_with = "cluster")]
    pub cluster: String,
    /// Where in etcd's key space the pool's balancers meet: segments of letters, digits, `.`,
    /// `_` and `-` joined by `/`, at most [`MAX_PREFIX_LEN`] bytes. Default [`DEFAULT_PREFIX`].
    #[serde(deserialize_with = "prefix")]
    pub prefix: String,
    /// How long a balancer that stopped answering keeps its probe duties: its etcd lease's TTL,
    /// in whole seconds, within [`Fleet::LEASE_TTL`]. Default [`DEFAULT_LEASE_TTL`].
    #[serde(with = "duration")]
    pub lease_ttl: Duration,
    /// An etcd user and password, when etcd has authentication on. Default: none (`null`).
    #[serde(deserialize_with = "credentials")]
    pub credentials: Option<Credentials>,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet {
            cluster: String::new(),
            prefix: DEFAULT_PREFIX.into(),
            lease_ttl: DEFAULT_LEASE_TTL,
            credentials: None,
        }
    }
}

impl Fleet {
    /// What `lease_ttl` may be.
    pub const LEASE_TTL: RangeInclusive<Duration> = MIN_LEASE_TTL..=MAX_LEASE_TTL;
}

/// An etcd user, for etcd's authentication. The password is never logged: errors about it do
/// not repeat it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    /// The user's name. Required, a name as a cluster's is (at most
    /// [`super::MAX_NAME_LEN`] bytes).
    #[serde(deserialize_with = "user")]
    pub user: String,
    /// The user's password. Required, at most [`MAX_VALUE_LEN`] bytes.
    #[serde(deserialize_with = "password")]
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"…")
            .finish()
    }
}

fn cluster<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    grammar::cluster(d).map(Option::unwrap_or_default)
}

fn user<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    grammar::cluster(d).map(Option::unwrap_or_default)
}

fn password<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    read(d, "a string", |found| {
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
}

/// Serde: `credentials`, an object or `null`, read through `deserialize_any` as every other
/// field is (serde_json's `deserialize_option` and `deserialize_struct` would bring code of their
/// own into the module).
fn credentials<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Credentials>, D::Error> {
    d.deserialize_any(CredentialsOrOff)
}

/// What `credentials` takes, for "expected …".
const EXPECTED_CREDENTIALS: &str = "an object {\"user\", \"password\"} or null";

struct CredentialsOrOff;

impl CredentialsOrOff {
    fn scalar<E: de::Error>(self, found: Json) -> Result<Option<Credentials>, E> {
        match found {
            Json::Null => Ok(None),
            other => Err(E::custom(mismatch(EXPECTED_CREDENTIALS, &other))),
        }
    }
}

impl<'de> Visitor<'de> for CredentialsOrOff {
    type Value = Option<Credentials>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(EXPECTED_CREDENTIALS)
    }

    scalars_as_json!();

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::custom(mismatch(
            EXPECTED_CREDENTIALS,
            &Json::List,
        )))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Credentials::deserialize(MapAccessDeserializer::new(map)).map(Some)
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
    fn credentials_never_show_their_password_when_debugged() {
        let c = Credentials {
            user: "upcheck".into(),
            password: "s3cret".into(),
        };
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
