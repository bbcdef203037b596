//! The tables every VM of a process shares, their byte form, and the changes made to them.
//!
//! proxy-wasm shared data holds bytes, per `vm_id`; several plugin configurations (listeners,
//! or an old one draining after an update) can share one. Every table is keyed by a backend's
//! [`Upstream::key`](crate::config::Upstream::key), so a pool only ever reads its own backends.
//! Three tables live there:
//! - the announcements ([`AnnounceTable`]): for each backend, the newest configuration that lists
//!   it, written when a configuration is taken; that configuration's prober probes it, so a
//!   backend is probed once however many configurations list it, and an update's new backends
//!   are probed at once rather than after the old configuration drains;
//! - the probe table ([`ActiveTable`]): every backend's probe state, each entry written only by
//!   the prober of the configuration it is announced to, merged by compare-and-swap;
//! - the passive table ([`PassiveTable`]): every backend's remembered request failures and last
//!   contact, changed by compare-and-swap from whichever VM saw the request, so one failure on
//!   worker A and two on worker B are three. A change is a value ([`PassiveChange`]) applied to
//!   the table as read; the adapter only retries the swap.
//!
//! The byte form is postcard over the types themselves, behind a four-byte tag (`u`, `c`, the
//! table's kind, the format version): a table written by another version of upcheck sharing the
//! `vm_id` is refused, never misread. Decoding is bounds-checked by postcard, and a table with
//! more failures per backend than any configuration keeps is refused too, so corrupt or hostile
//! bytes give an error, never a panic or an unbounded allocation.

use crate::active::ActiveHealth;
use crate::config::{Passive as PassiveConfig, MAX_FAILS_LIMIT};
use crate::passive::{Failure, PassiveHealth, Recorded};
use crate::Time;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;

/// The format version; bump it whenever a table's types change.
const VERSION: u8 = 2;
const ACTIVE: u8 = b'a';
const PASSIVE: u8 = b'p';
const ANNOUNCE: u8 = b'n';

/// Probe state by backend key.
pub type ActiveTable = Vec<(String, ActiveHealth)>;
/// Passive state by backend key.
pub type PassiveTable = Vec<(String, PassiveHealth)>;
/// By backend key, the fingerprint of the newest configuration that lists it.
pub type AnnounceTable = Vec<(String, u64)>;

/// Bytes that are not a table this build can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableError(&'static str);

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
}

fn encode<T: Serialize>(kind: u8, table: &T) -> Vec<u8> {
    let tag = vec![b'u', b'c', kind, VERSION];
    // Serializing plain data into a Vec cannot fail; an empty table is the safe fallback.
    postcard::to_extend(table, tag).unwrap_or_default()
}

fn decode<T: DeserializeOwned>(kind: u8, bytes: &[u8]) -> Result<T, TableError> {
    let body = match bytes.split_first_chunk::<4>() {
        Some((tag, body)) if *tag == [b'u', b'c', kind, VERSION] => body,
        _ => return Err(TableError("not an upcheck table of this version")),
    };
    match postcard::take_from_bytes(body) {
        Ok((table, [])) => Ok(table),
        Ok(_) => Err(TableError("the table has trailing bytes")),
        Err(_) => Err(TableError("the table is truncated or corrupt")),
    }
}

/// The probe table's bytes.
pub fn encode_active(table: &ActiveTable) -> Vec<u8> {
    encode(ACTIVE, table)
}

/// Reads what [`encode_active`] wrote.
pub fn decode_active(bytes: &[u8]) -> Result<ActiveTable, TableError> {
    decode(ACTIVE, bytes)
}

/// Puts `mine` (entries this VM probes) into `table`, replacing those entries and keeping the
/// others (written by other configurations' probers).
pub fn merge_active(table: &mut ActiveTable, mine: &ActiveTable) {
    for (key, health) in mine {
        match table.iter_mut().find(|(k, _)| k == key) {
            Some((_, entry)) => *entry = *health,
            None => table.push((key.clone(), *health)),
        }
    }
}

/// The announcements' bytes.
pub fn encode_announce(table: &AnnounceTable) -> Vec<u8> {
    encode(ANNOUNCE, table)
}

/// Reads what [`encode_announce`] wrote.
pub fn decode_announce(bytes: &[u8]) -> Result<AnnounceTable, TableError> {
    decode(ANNOUNCE, bytes)
}

/// The passive table's bytes.
pub fn encode_passive(table: &PassiveTable) -> Vec<u8> {
    encode(PASSIVE, table)
}

/// Reads what [`encode_passive`] wrote.
pub fn decode_passive(bytes: &[u8]) -> Result<PassiveTable, TableError> {
    let table: PassiveTable = decode(PASSIVE, bytes)?;
    let limit = usize::try_from(MAX_FAILS_LIMIT).unwrap_or(usize::MAX);
    if table.iter().any(|(_, p)| p.failures.len() > limit) {
        return Err(TableError("more failures than any max_fails"));
    }
    Ok(table)
}

/// One request's news for the process-wide passive table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassiveChange {
    /// The backend's key.
    pub key: String,
    /// When it happened.
    pub at: Time,
    /// Whether the request found something serving (`Some(false)`) or nothing (`Some(true)`);
    /// `None` when it does not say.
    pub refused: Option<bool>,
    /// The failure to remember, if it counted.
    pub failure: Option<Failure>,
}

/// What applying a change did: the failure it recorded and whether that filled the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The failure recorded.
    pub failure: Failure,
    /// Whether it filled the window.
    pub recorded: Recorded,
}

impl PassiveChange {
    /// Applies the change to `table` (adding the backend if it is not there yet).
    pub fn apply(&self, table: &mut PassiveTable, config: &PassiveConfig) -> Option<Applied> {
        let entry = match table.iter().position(|(k, _)| *k == self.key) {
            Some(at) => table.get_mut(at),
            None => {
                table.push((self.key.clone(), PassiveHealth::default()));
                table.last_mut()
            }
        };
        let (_, health) = entry?;
        if let Some(refused) = self.refused {
            health.contact(self.at, refused);
        }
        let failure = self.failure?;
        Some(Applied {
            failure,
            recorded: health.record(self.at, config),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::active::ProbeOutcome;
    use crate::config::Config;
    use crate::passive::RequestOutcome;
    use proptest::prelude::*;
    use std::time::Duration;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn config() -> Config {
        Config::parse(br#"{"upstreams":[{"name":"a"}]}"#).unwrap_or_else(|e| panic!("{e}"))
    }

    fn probe_outcome() -> impl Strategy<Value = ProbeOutcome> {
        prop_oneof![
            Just(ProbeOutcome::Pass),
            any::<Option<u16>>().prop_map(ProbeOutcome::Soft),
            (0u64..10_000).prop_map(|ms| ProbeOutcome::Timeout(Duration::from_millis(ms))),
            Just(ProbeOutcome::Refused),
        ]
    }

    proptest! {
        #[test]
        fn any_probe_table_survives_the_round_trip(
            entries in proptest::collection::vec(
                ("\\PC{0,12}", proptest::collection::vec((probe_outcome(), 0u64..1_000_000), 0..6)),
                0..8,
            )
        ) {
            let active = config().health_checks.active;
            let table: ActiveTable = entries
                .into_iter()
                .map(|(name, probes)| {
                    let mut health = ActiveHealth::new(Duration::ZERO);
                    for (outcome, ms) in probes {
                        health.observe(outcome, Duration::from_millis(ms), &active);
                    }
                    (name, health)
                })
                .collect();
            prop_assert_eq!(decode_active(&encode_active(&table)), Ok(table));
        }

        #[test]
        fn any_passive_table_survives_the_round_trip(
            entries in proptest::collection::vec(
                ("\\PC{0,12}", proptest::collection::vec((0u64..100_000, any::<Option<bool>>(), any::<bool>()), 0..8)),
                0..8,
            )
        ) {
            let passive = config().health_checks.passive;
            let mut table = PassiveTable::new();
            for (name, changes) in entries {
                for (ms, refused, failed) in changes {
                    let change = PassiveChange {
                        key: name.clone(),
                        at: Duration::from_millis(ms),
                        refused,
                        failure: RequestOutcome::Answered { status: 502, latency: Duration::ZERO }
                            .failure(&passive)
                            .filter(|_| failed),
                    };
                    change.apply(&mut table, &passive);
                }
            }
            prop_assert_eq!(decode_passive(&encode_passive(&table)), Ok(table));
        }
    }

    #[test]
    fn bytes_that_are_not_a_table_of_this_version_are_an_error_not_a_panic() {
        let passive = config().health_checks.passive;
        let mut table = PassiveTable::new();
        let change = PassiveChange {
            key: "app1".into(),
            at: secs(1),
            refused: Some(false),
            failure: RequestOutcome::Answered {
                status: 502,
                latency: Duration::ZERO,
            }
            .failure(&passive),
        };
        change.apply(&mut table, &passive);
        let good = encode_passive(&table);
        for len in 0..good.len() {
            assert!(
                decode_passive(good.get(..len).unwrap_or_default()).is_err(),
                "prefix of {len}"
            );
        }
        assert!(
            decode_active(&good).is_err(),
            "a passive table is not a probe table"
        );
        let mut older = good.clone();
        if let Some(version) = older.get_mut(3) {
            *version = VERSION - 1;
        }
        assert!(
            decode_passive(&older).is_err(),
            "another version is refused"
        );
        assert!(decode_passive(b"{\"app1\": {}}").is_err());
        let mut trailing = good;
        trailing.push(0);
        assert!(decode_passive(&trailing).is_err());
    }

    #[test]
    fn a_table_claiming_more_failures_than_any_max_fails_is_refused() {
        let health = PassiveHealth {
            failures: (0..=u64::from(MAX_FAILS_LIMIT)).map(secs).collect(),
            ..PassiveHealth::default()
        };
        let bytes = encode_passive(&vec![("a".to_owned(), health)]);
        assert!(decode_passive(&bytes).is_err());
    }

    #[test]
    fn a_change_adds_a_backend_the_table_did_not_have_and_reports_the_window_filling() {
        let passive = config().health_checks.passive;
        let mut table = PassiveTable::new();
        let failure = RequestOutcome::Answered {
            status: 502,
            latency: Duration::ZERO,
        }
        .failure(&passive);
        let applied: Vec<Option<Applied>> = (1..=3)
            .map(|t| {
                PassiveChange {
                    key: "app2".into(),
                    at: secs(t),
                    refused: Some(false),
                    failure,
                }
                .apply(&mut table, &passive)
            })
            .collect();
        assert_eq!(table.len(), 1);
        assert!(matches!(
            applied.last(),
            Some(Some(Applied {
                recorded: Recorded::Filled { .. },
                ..
            }))
        ));
    }
}
