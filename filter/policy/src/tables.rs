//! The tables every VM of a process shares, their byte form, and the changes made to them.
//!
//! proxy-wasm shared data holds bytes, per `vm_id`; several plugin configurations (listeners,
//! or an old one draining after an update) can share one. The backend tables are keyed by a
//! backend's [`Upstream::key`](upcheck_config::Upstream::key), so a pool only ever reads its own
//! backends; the lease table ([`LeaseTable`], see [`crate::lease`]) is keyed by configuration.
//! Besides the leases and the history of changes ([`HistoryTable`], see [`crate::history`]),
//! three tables live there:
//! - the announcements ([`AnnounceTable`]): for each backend, the newest configuration that lists
//!   it, written when a configuration is taken; that configuration's prober probes it, so a
//!   backend is probed once however many configurations list it, and an update's new backends
//!   are probed at once rather than after the old configuration drains;
//! - the probe table ([`ActiveTable`]): every backend's probe state, each entry written only by
//!   the prober of the configuration it is announced to, merged by compare-and-swap;
//! - the passive table ([`PassiveTable`]): every backend's remembered request failures, last
//!   contact and outlier record (traffic counts, run of failures, standing), changed by
//!   compare-and-swap from whichever VM saw the request, so one failure on worker A and two on
//!   worker B are three. A change is a value ([`PassiveChange`]) applied to the table as read;
//!   the adapter only retries the swap, so a decision made while applying (an ejection by the
//!   run rule) is atomic.
//!
//! The byte form is postcard over the types themselves, behind a four-byte tag (`u`, `c`, the
//! table's kind, the format version): a table written by another version of upcheck sharing the
//! `vm_id` is refused, never misread. Decoding is bounds-checked by postcard, and a table with
//! more failures per backend than any configuration keeps is refused too, so corrupt or hostile
//! bytes give an error, never a panic or an unbounded allocation.

use crate::active::ActiveHealth;
use crate::drain::{Drain, Signal};
use crate::history::{Change, HistoryTable, MAX_CAUSE_LEN, MAX_KEY_LEN};
use crate::lease::LeaseTable;
use crate::outcome::{Failure, FailureKind};
use crate::outlier::{Ejection, RunRule, Standing, Traffic, Verdict};
use crate::passive::{PassiveHealth, Recorded};
use crate::time::Time;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;
use upcheck_config::{HealthChecks, MAX_FAILS_LIMIT, MAX_HISTORY, MAX_NAME_LEN, MAX_UPSTREAMS};

/// The format version; bump it whenever a table's types change, with the keys in [`keys`].
const VERSION: u8 = 5;

/// The shared-data keys of the tables, named with the format version: a build of another
/// version reads and writes keys of its own, so two builds that share a `vm_id` (an upgrade
/// while the old listener drains) never overwrite each other's tables or leases; each runs its
/// own prober for its own VMs. Shared data has no delete, so a version leaves at most these five
/// keys behind.
pub mod keys {
    /// Probing leases by configuration ([`crate::lease`]).
    pub const LEASES: &str = "upcheck.v5.leases";
    /// By backend, the newest configuration that lists it.
    pub const ANNOUNCE: &str = "upcheck.v5.announce";
    /// Probe state by backend.
    pub const ACTIVE: &str = "upcheck.v5.active";
    /// Request failures and outlier records by backend.
    pub const PASSIVE: &str = "upcheck.v5.passive";
    /// The newest changes of every pool's backends and fleet guard ([`crate::history`]).
    pub const HISTORY: &str = "upcheck.v5.history";
    /// Followed by `.` and a fleet prefix ([`super::fleet_key`]): what that fleet's prober
    /// shows of it ([`crate::etcd::shown`]).
    pub const FLEET: &str = "upcheck.v5.fleet";
}
const ACTIVE: u8 = b'a';
const PASSIVE: u8 = b'p';
const ANNOUNCE: u8 = b'n';
const LEASES: u8 = b'l';
const HISTORY: u8 = b'h';
const FLEET: u8 = b'b';

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
    tagged([b'u', b'c', kind, VERSION], table)
}

fn decode<T: DeserializeOwned>(kind: u8, bytes: &[u8]) -> Result<T, TableError> {
    untagged([b'u', b'c', kind, VERSION], bytes)
}

/// `value` in postcard behind the four bytes of `tag` (`u`, `c`, its kind, its format version),
/// so that bytes of another kind or version are refused, never misread: the tables here, and
/// the values the fleet keeps in etcd ([`crate::etcd`]).
pub(crate) fn tagged<T: Serialize>(tag: [u8; 4], value: &T) -> Vec<u8> {
    // Serializing plain data into a Vec cannot fail; empty bytes are the safe fallback.
    postcard::to_extend(value, tag.to_vec()).unwrap_or_default()
}

/// Reads what [`tagged`] wrote behind `tag`.
pub(crate) fn untagged<T: DeserializeOwned>(tag: [u8; 4], bytes: &[u8]) -> Result<T, TableError> {
    let body = match bytes.split_first_chunk::<4>() {
        Some((found, body)) if *found == tag => body,
        Some(([b'u', b'c', kind, _], _)) if *kind == tag[2] => {
            return Err(TableError("written by another version of upcheck"))
        }
        _ => return Err(TableError("not written by upcheck")),
    };
    match postcard::take_from_bytes(body) {
        Ok((value, [])) => Ok(value),
        Ok(_) => Err(TableError("trailing bytes")),
        Err(_) => Err(TableError("truncated or corrupt")),
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
///
/// A table written from one configuration lists its backends in that configuration's order, so
/// each entry is looked for at its own position first: merging costs O(N), not O(N²).
pub fn merge_active(table: &mut ActiveTable, mine: &ActiveTable) {
    for (i, (key, health)) in mine.iter().enumerate() {
        let at = match table.get(i) {
            Some((k, _)) if k == key => Some(i),
            _ => table.iter().position(|(k, _)| k == key),
        };
        match at.and_then(|at| table.get_mut(at)) {
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

/// The lease table's bytes.
pub fn encode_leases(table: &LeaseTable) -> Vec<u8> {
    encode(LEASES, table)
}

/// Reads what [`encode_leases`] wrote.
pub fn decode_leases(bytes: &[u8]) -> Result<LeaseTable, TableError> {
    decode(LEASES, bytes)
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

/// The history's bytes.
pub fn encode_history(table: &HistoryTable) -> Vec<u8> {
    encode(HISTORY, table)
}

/// Reads what [`encode_history`] wrote, refusing more changes, or longer names, keys or causes,
/// than any writer writes.
pub fn decode_history(bytes: &[u8]) -> Result<HistoryTable, TableError> {
    let table: HistoryTable = decode(HISTORY, bytes)?;
    let limit = usize::try_from(MAX_HISTORY).unwrap_or(usize::MAX);
    if table.len() > limit {
        return Err(TableError("more changes than any history keeps"));
    }
    let oversized = |c: &Change| {
        c.cause.len() > MAX_CAUSE_LEN
            || c.key.len() > MAX_KEY_LEN
            || c.backend.as_ref().is_some_and(|b| b.len() > MAX_NAME_LEN)
    };
    if table.iter().any(oversized) {
        return Err(TableError("a change longer than any written"));
    }
    Ok(table)
}

/// The shared-data key of what the prober of the fleet at `prefix` shows of it: one key per
/// prefix, written by that prober alone, so no compare-and-swap is needed.
pub fn fleet_key(prefix: &str) -> String {
    format!("{}.{prefix}", keys::FLEET)
}

/// What a prober shows of its fleet ([`crate::etcd::shown`]) as bytes: entries of the
/// announcements' form, so they cost no code of their own.
pub fn encode_fleet(entries: &AnnounceTable) -> Vec<u8> {
    encode(FLEET, entries)
}

/// The entries of a fleet record before its backends' ([`crate::etcd::shown`]).
pub const FLEET_HEAD: usize = 9;

/// Reads what [`encode_fleet`] wrote, refusing fewer entries than the head's, more than those
/// and a backend's each, or longer keys than any writer writes.
pub fn decode_fleet(bytes: &[u8]) -> Result<AnnounceTable, TableError> {
    let entries: AnnounceTable = decode(FLEET, bytes)?;
    if entries.len() < FLEET_HEAD {
        return Err(TableError("a fleet without its head"));
    }
    if entries.len() > MAX_UPSTREAMS + FLEET_HEAD
        || entries.iter().any(|(k, _)| k.len() > MAX_KEY_LEN)
    {
        return Err(TableError("a fleet larger than any written"));
    }
    Ok(entries)
}

/// A change to the process-wide passive table, made by one VM and applied to the table as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassiveChange {
    /// One request's news about its backend.
    Request(RequestNews),
    /// One VM's request outcomes since it last shared them, per backend key: added to the shared
    /// counts, once a tick, so every VM judges on the whole process's traffic.
    Traffic(Vec<(String, Traffic)>),
    /// An outlier ejection one VM's judgment at a tick decided (unless another VM's already
    /// ejected the backend).
    Eject {
        /// The backend's key.
        key: String,
        /// When it was judged.
        at: Time,
        /// Why.
        verdict: Verdict,
    },
    /// A backend's answer said it drains (kept as first signalled while it lasts).
    Drain {
        /// The backend's key.
        key: String,
        /// When the signal was read.
        at: Time,
        /// What said so.
        by: Signal,
    },
    /// Failures the other balancers of the fleet counted at a backend ([`crate::etcd`]): each
    /// not remembered yet is remembered as this process's own are.
    Fleet {
        /// The backend's key.
        key: String,
        /// When they happened.
        failures: Vec<Time>,
    },
    /// An outlier ejection another balancer of the fleet decided and shares ([`crate::etcd`]),
    /// held here until its end unless one is in force already.
    Adopt {
        /// The backend's key.
        key: String,
        /// When it was read.
        at: Time,
        /// The deciding balancer's lease.
        by: i64,
        /// Its standing of the backend, with the ejection in force.
        standing: Standing,
    },
    /// A probe sent at `sent` passed without the signal: a drain signalled before then is over.
    Drained {
        /// The backend's key.
        key: String,
        /// When the passing probe was sent.
        sent: Time,
    },
}

/// One request's news for the process-wide passive table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestNews {
    /// The backend's key.
    pub key: String,
    /// When it happened.
    pub at: Time,
    /// Whether the request found something serving (`Some(false)`) or nothing (`Some(true)`);
    /// `None` when it does not say.
    pub refused: Option<bool>,
    /// The failure to remember, if it counted.
    pub failure: Option<Failure>,
    /// What it means for the outlier rules, when it changes anything there.
    pub outlier: Option<OutlierNews>,
}

/// A request's news for the outlier rules: a failure, or a success that ends a run of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutlierNews {
    /// How it failed; `None` for a success.
    pub failure: Option<FailureKind>,
    /// The run rule as the settling VM saw it: the run is counted in the shared table, so the
    /// ejection it calls for is decided as the change is applied, atomically.
    pub run: Option<RunRule>,
    /// The verdict the settling VM reached on the backend's share of failures, if any.
    pub verdict: Option<Verdict>,
}

/// What applying a change did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// The request failure it recorded, and whether that filled the failure window.
    pub failure: Option<(Failure, Recorded)>,
    /// The outlier ejection it started: why, and until when.
    pub ejection: Option<(Verdict, Ejection)>,
}

impl Applied {
    /// Whether the change took its backend out: a failure that filled the window, or an outlier
    /// ejection. Every other VM must hear of that before its next pick, not at its next tick,
    /// or a worker that has seen no failure of its own sends the backend one more user.
    pub fn takes_out(&self) -> bool {
        matches!(self.failure, Some((_, Recorded::Filled { .. }))) || self.ejection.is_some()
    }
}

/// Backend `name`'s entry in `table`, added if it is not there yet.
fn entry_mut<'a>(table: &'a mut PassiveTable, key: &str) -> Option<&'a mut PassiveHealth> {
    let at = match table.iter().position(|(k, _)| k == key) {
        Some(at) => at,
        None => {
            table.push((key.to_owned(), PassiveHealth::default()));
            table.len() - 1
        }
    };
    table.get_mut(at).map(|(_, health)| health)
}

impl PassiveChange {
    /// The backend it is about, if one.
    pub fn key(&self) -> Option<&str> {
        match self {
            PassiveChange::Request(news) => Some(&news.key),
            PassiveChange::Traffic(_) => None,
            PassiveChange::Eject { key, .. }
            | PassiveChange::Drain { key, .. }
            | PassiveChange::Fleet { key, .. }
            | PassiveChange::Adopt { key, .. }
            | PassiveChange::Drained { key, .. } => Some(key),
        }
    }

    /// Applies the change to `table` (adding backends it does not have yet).
    pub fn apply(&self, table: &mut PassiveTable, checks: &HealthChecks) -> Applied {
        let mut applied = Applied::default();
        match self {
            PassiveChange::Request(news) => {
                let Some(health) = entry_mut(table, &news.key) else {
                    return applied;
                };
                if let Some(refused) = news.refused {
                    health.contact(news.at, refused);
                }
                if let Some(failure) = news.failure {
                    applied.failure = Some((failure, health.record(news.at, &checks.passive)));
                }
                if let Some(outlier) = &news.outlier {
                    applied.ejection = outlier.apply(health, news.at, checks);
                }
            }
            PassiveChange::Traffic(deltas) => {
                for (key, delta) in deltas {
                    if let Some(health) = entry_mut(table, key) {
                        health.traffic.merge(delta);
                    }
                }
            }
            PassiveChange::Eject { key, at, verdict } => {
                if let Some(health) = entry_mut(table, key) {
                    if !health.outlier.is_ejected(*at) {
                        let ejection = health.outlier.eject(verdict.clone(), *at, &checks.outlier);
                        applied.ejection = Some((verdict.clone(), ejection));
                    }
                }
            }
            PassiveChange::Drain { key, at, by } => {
                if let Some(health) = entry_mut(table, key) {
                    health.drain.get_or_insert(Drain {
                        since: *at,
                        by: *by,
                    });
                }
            }
            PassiveChange::Fleet { key, failures } => {
                if let Some(health) = entry_mut(table, key) {
                    for at in failures {
                        if !health.failures.contains(at) {
                            health.record(*at, &checks.passive);
                        }
                    }
                }
            }
            PassiveChange::Adopt {
                key, at, standing, ..
            } => {
                if let (Some(health), Some((verdict, _))) =
                    (entry_mut(table, key), standing.in_force(*at))
                {
                    let adopted = health.outlier.adopt(standing, *at);
                    applied.ejection = adopted.map(|e| (verdict.clone(), e));
                }
            }
            PassiveChange::Drained { key, sent } => {
                if let Some(health) = entry_mut(table, key) {
                    if health.drain.is_some_and(|d| d.since <= *sent) {
                        health.drain = None;
                    }
                }
            }
        }
        applied
    }
}

impl OutlierNews {
    /// Counts the outcome in the backend's run and ejects it if the share verdict or the run
    /// rule says so and it is not ejected already.
    fn apply(
        &self,
        health: &mut PassiveHealth,
        at: Time,
        checks: &HealthChecks,
    ) -> Option<(Verdict, Ejection)> {
        let Some(kind) = self.failure else {
            health.run = 0;
            return None;
        };
        health.run = health.run.saturating_add(1);
        if health.outlier.is_ejected(at) {
            return None;
        }
        let verdict = self
            .verdict
            .clone()
            .or_else(|| self.run.and_then(|rule| rule.verdict(health.run, kind)))?;
        let ejection = health.outlier.eject(verdict.clone(), at, &checks.outlier);
        Some((verdict, ejection))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::active::{Pages, ProbeOutcome};
    use crate::outcome::RequestOutcome;
    use proptest::prelude::*;
    use std::time::Duration;
    use upcheck_config::Config;

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

    fn pages() -> impl Strategy<Value = Pages> {
        prop_oneof![
            Just(Pages::Unknown),
            Just(Pages::Answering),
            Just(Pages::AnsweredMeanwhile),
        ]
    }

    proptest! {
        #[test]
        fn any_probe_table_survives_the_round_trip(
            entries in proptest::collection::vec(
                ("\\PC{0,12}", proptest::collection::vec((probe_outcome(), 0u64..1_000_000, pages()), 0..6)),
                0..8,
            )
        ) {
            let active = config().health_checks.active;
            let table: ActiveTable = entries
                .into_iter()
                .map(|(name, probes)| {
                    let mut health = ActiveHealth::new(Duration::ZERO);
                    for (outcome, ms, pages) in probes {
                        health.observe(outcome, Duration::from_millis(ms), &active, pages);
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
            let checks = config().health_checks;
            let mut table = PassiveTable::new();
            for (name, changes) in entries {
                for (ms, refused, failed) in changes {
                    let at = Duration::from_millis(ms);
                    let kind = failed.then_some(FailureKind::Status(502));
                    let mut traffic = Traffic::default();
                    traffic.record(at, kind, Some(Duration::from_millis(ms % 300)), checks.outlier.window);
                    let changes = [
                        PassiveChange::Request(RequestNews {
                            key: name.clone(),
                            at,
                            refused,
                            failure: RequestOutcome::Answered { status: 502, latency: Duration::ZERO }
                                .failure(&checks.passive)
                                .filter(|_| failed),
                            outlier: Some(OutlierNews {
                                failure: kind,
                                run: Some(RunRule { limit: 2, peers_failed: 0, peers_requests: 9 }),
                                verdict: None,
                            }),
                        }),
                        PassiveChange::Traffic(vec![(name.clone(), traffic)]),
                    ];
                    for change in changes {
                        change.apply(&mut table, &checks);
                    }
                }
            }
            prop_assert_eq!(decode_passive(&encode_passive(&table)), Ok(table));
        }
    }

    #[test]
    fn bytes_that_are_not_a_table_of_this_version_are_an_error_not_a_panic() {
        let checks = config().health_checks;
        let mut table = PassiveTable::new();
        news("app1", secs(1), &checks).apply(&mut table, &checks);
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
    fn a_lease_table_survives_the_round_trip_and_no_other_table_reads_as_one() {
        let mut leases = LeaseTable::new();
        for (config, holder) in [(u64::MAX, 1), (0, u64::MAX), (7, 3)] {
            crate::lease::claim(&mut leases, config, holder, secs(1), secs(1));
        }
        assert_eq!(decode_leases(&encode_leases(&leases)), Ok(leases));
        let announce = encode_announce(&vec![("app1".to_owned(), 7)]);
        assert!(decode_leases(&announce).is_err());
        assert!(decode_leases(&[0; 16]).is_err(), "a lease of the old form");
    }

    #[test]
    fn a_fleet_record_is_bounded_and_no_other_table_reads_as_one() {
        let entries = vec![(String::new(), 1); FLEET_HEAD];
        assert_eq!(decode_fleet(&encode_fleet(&entries)), Ok(entries));
        let headless = vec![(String::new(), 1); FLEET_HEAD - 1];
        assert!(decode_fleet(&encode_fleet(&headless)).is_err());
        let long = vec![("k".repeat(MAX_KEY_LEN + 1), 0)];
        assert!(decode_fleet(&encode_fleet(&long)).is_err());
        assert!(decode_fleet(&encode_announce(&vec![(String::new(), 1)])).is_err());
        assert!(decode_fleet(&encode_history(&HistoryTable::default())).is_err());
        assert_eq!(fleet_key("site/pool-1"), "upcheck.v5.fleet.site/pool-1");
    }

    proptest! {
        #[test]
        fn any_bytes_under_the_fleet_tag_decode_or_are_refused_without_a_panic(
            body in proptest::collection::vec(any::<u8>(), 0..256)
        ) {
            let mut bytes = vec![b'u', b'c', FLEET, VERSION];
            bytes.extend(body);
            if let Ok(entries) = decode_fleet(&bytes) {
                prop_assert!(entries.len() <= MAX_UPSTREAMS + 4);
            }
        }
    }

    proptest! {
        #[test]
        fn any_bytes_under_the_history_tag_decode_or_are_refused_without_a_panic(
            body in proptest::collection::vec(any::<u8>(), 0..256)
        ) {
            let mut bytes = vec![b'u', b'c', HISTORY, VERSION];
            bytes.extend(body);
            if let Ok(table) = decode_history(&bytes) {
                prop_assert!(table.len() <= MAX_HISTORY as usize);
            }
        }
    }

    fn change(cause: &str) -> Change {
        Change {
            at: secs(1),
            backend: Some("app2".into()),
            key: "app2@app2".into(),
            kind: crate::history::Kind::Ejected,
            cause: cause.into(),
        }
    }

    #[test]
    fn a_history_that_is_cut_short_mislabelled_or_oversized_is_refused() {
        let good = encode_history(&vec![change("ejected for 30s")]);
        assert!(decode_history(&good).is_ok());
        for len in 0..good.len() {
            assert!(
                decode_history(good.get(..len).unwrap_or_default()).is_err(),
                "prefix of {len}"
            );
        }
        assert!(
            decode_passive(&good).is_err(),
            "a history is not a passive table"
        );
        let long = encode_history(&vec![change(&"x".repeat(MAX_CAUSE_LEN + 1))]);
        assert!(
            decode_history(&long).is_err(),
            "a cause longer than any written"
        );
        let many = vec![change("c"); MAX_HISTORY as usize + 1];
        assert!(
            decode_history(&encode_history(&many)).is_err(),
            "more than the limit"
        );
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

    /// A 502 at `name`, at `at`, that counts for both the failure window and the run rule.
    fn news(name: &str, at: Duration, checks: &HealthChecks) -> PassiveChange {
        PassiveChange::Request(RequestNews {
            key: name.into(),
            at,
            refused: Some(false),
            failure: RequestOutcome::Answered {
                status: 502,
                latency: Duration::ZERO,
            }
            .failure(&checks.passive),
            outlier: Some(OutlierNews {
                failure: Some(FailureKind::Status(502)),
                run: Some(RunRule {
                    limit: 5,
                    peers_failed: 0,
                    peers_requests: 40,
                }),
                verdict: None,
            }),
        })
    }

    #[test]
    fn a_change_adds_a_backend_the_table_did_not_have_and_reports_the_window_filling() {
        let checks = config().health_checks;
        let mut table = PassiveTable::new();
        let applied: Vec<Applied> = (1..=3)
            .map(|t| news("app2", secs(t), &checks).apply(&mut table, &checks))
            .collect();
        assert_eq!(table.len(), 1);
        assert!(matches!(
            applied.last(),
            Some(Applied {
                failure: Some((_, Recorded::Filled { .. })),
                ..
            })
        ));
        let took_out: Vec<bool> = applied.iter().map(Applied::takes_out).collect();
        assert_eq!(
            took_out,
            [false, false, true],
            "only the failure that filled it"
        );
    }

    #[test]
    fn the_run_rule_ejects_at_its_limit_once_and_a_success_resets_the_run() {
        let checks = config().health_checks;
        let mut table = PassiveTable::new();
        let ejected: Vec<bool> = (1..=6)
            .map(|t| {
                news("app2", secs(t), &checks)
                    .apply(&mut table, &checks)
                    .ejection
                    .is_some()
            })
            .collect();
        assert_eq!(ejected, [false, false, false, false, true, false]);
        // The ejection takes the backend out, whatever the window says.
        let mut table = PassiveTable::new();
        let applied: Vec<Applied> = (1..=6)
            .map(|t| news("app2", secs(t), &checks).apply(&mut table, &checks))
            .collect();
        let ejecting = applied.iter().find(|a| a.ejection.is_some());
        assert!(ejecting.is_some_and(Applied::takes_out), "{applied:?}");
        let success = PassiveChange::Request(RequestNews {
            key: "app2".into(),
            at: secs(7),
            refused: Some(false),
            failure: None,
            outlier: Some(OutlierNews {
                failure: None,
                run: None,
                verdict: None,
            }),
        });
        success.apply(&mut table, &checks);
        assert_eq!(table.first().map(|(_, h)| h.run), Some(0));
    }

    #[test]
    fn failures_dated_at_the_end_of_time_are_taken_in_without_a_panic() {
        // Another plugin in the same vm_id can write a table of this version with any times.
        let config = Config::parse(br#"{"upstreams":[{"name":"app1"},{"name":"app2"}]}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        let checks = config.health_checks.clone();
        let mut table = PassiveTable::new();
        for before_the_end in [2, 1, 0] {
            news("app2", Duration::MAX - secs(before_the_end), &checks).apply(&mut table, &checks);
        }
        let table = decode_passive(&encode_passive(&table)).expect("a table of this version");
        let now = secs(10);
        let mut pool = crate::pool::Pool::new(config, now, |_| ());
        pool.passive_published(&table, now);
        // Past the cold start's wait for a first probe: unknown backends serve.
        let later = now + secs(6);
        pool.tick(later);
        let app1 = pool.index_of("app1");
        assert_eq!(
            pool.pick(later),
            crate::pool::Pick::Backend(app1.expect("configured")),
            "app2's failures are in force, app1 serves"
        );
    }

    #[test]
    fn every_shared_data_key_names_the_format_version_its_tables_are_written_in() {
        let prefix = format!("upcheck.v{VERSION}.");
        for key in [
            keys::LEASES,
            keys::ANNOUNCE,
            keys::ACTIVE,
            keys::PASSIVE,
            keys::HISTORY,
        ] {
            assert!(
                key.starts_with(&prefix),
                "{key} is not named for version {VERSION}"
            );
        }
    }
}
