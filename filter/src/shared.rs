//! Process-wide state in proxy-wasm shared data.
//!
//! Envoy runs one VM per worker plus the main thread's; shared data (per `vm_id`) is what they
//! have in common, and several plugin configurations can share a `vm_id` (two listeners, or an
//! old configuration draining after an update). The keys, named with the tables' format version
//! ([`upcheck_policy::tables::keys`], `upcheck.v7.…`) so that two builds of upcheck sharing a
//! `vm_id` keep apart:
//! - `leases`: for each configuration running (by fingerprint), which VM probes for it
//!   and until when, taken and renewed by compare-and-swap, so exactly one prober runs per
//!   configuration whatever the worker count, in any host. One key for all configurations,
//!   because a key cannot be deleted: leases of configurations gone are dropped from the table
//!   instead ([`upcheck_policy::lease`]), so shared data stays bounded however often the
//!   configuration changes;
//! - `announce`: for each backend, the newest configuration that lists it, whose prober
//!   probes it ([`upcheck_policy::tables`]);
//! - `active`: every backend's probe state, each entry merged in by its prober;
//! - `passive`: every backend's remembered request failures and outlier record, updated
//!   by compare-and-swap from whichever worker saw the failure (and by each worker's tick, with
//!   its request counts), so 1 failure on worker A and 2 on worker B are 3.
//! - `history`: the newest changes of every pool's backends and pool guard, appended by
//!   compare-and-swap by the VM that reports each ([`upcheck_policy::history`]), read by the
//!   status page;
//! - `fleet.<prefix>`: what the prober of that fleet shows of it (who holds each backend's
//!   probe duty, when etcd was last read, whether it fell back to local), written by the prober
//!   when it changes and read by the status page ([`upcheck_policy::etcd::shown`]).
//!
//! Every table is keyed by backend (name, cluster and address), so a pool never reads another
//! pool's backends. Values that do not decode (corrupt, or written by something else under
//! these keys) are reported and ignored rather than trusted; a table that does not decode is
//! replaced when written.

use crate::abi::Status;
use crate::hostcall as hostcalls;
use std::time::Duration;
use upcheck_policy::config::HealthChecks;
use upcheck_policy::etcd::shown::Shown;
use upcheck_policy::history::HistoryTable;
use upcheck_policy::host::PassiveWrite;
use upcheck_policy::lease::{self, LeaseTable};
use upcheck_policy::tables::keys::{ACTIVE, ANNOUNCE, HISTORY, LEASES, PASSIVE};
use upcheck_policy::tables::{
    self, ActiveTable, AnnounceTable, PassiveChange, PassiveTable, TableError,
};
use upcheck_policy::Time;

/// Numbers VMs apart, whatever their version: a plain counter.
const VM_SEQUENCE: &str = "upcheck.vm_sequence";

/// How many passive changes took a backend out ([`Applied::takes_out`]): an empty value set
/// after each such write of the passive table, whose compare-and-swap number a VM reads before
/// each pick. Reading it copies nothing, so learning that another worker just took a backend
/// out costs a request one host call, and the table itself is read only then (the failures
/// that do not take a backend out wait for the tick, as every other table does).
const PASSIVE_TAKEN_OUT: &str = "upcheck.v7.passive_taken_out";

/// How often a compare-and-swap is retried against other workers' writes.
const CAS_ATTEMPTS: usize = 16;

fn get(key: &str) -> Option<(Vec<u8>, u32)> {
    match hostcalls::get_shared_data(key) {
        Ok((Some(bytes), Some(cas))) => Some((bytes, cas)),
        Ok(_) => None,
        Err(status) => {
            log::warn!("upcheck: reading shared data {key} failed ({status:?})");
            None
        }
    }
}

/// Creates `key` with `initial` if it does not exist yet.
fn ensure(key: &str, initial: &[u8]) {
    if get(key).is_none() {
        let _ = hostcalls::set_shared_data(key, Some(initial), None);
    }
}

/// Replaces `key` if nobody wrote it since `cas`; false on a lost race.
fn swap(key: &str, value: &[u8], cas: u32) -> bool {
    match hostcalls::set_shared_data(key, Some(value), Some(cas)) {
        Ok(()) => true,
        Err(Status::CasMismatch) => false,
        Err(status) => {
            log::warn!("upcheck: writing shared data {key} failed ({status:?})");
            false
        }
    }
}

/// A process-unique id for a root context.
pub fn vm_id() -> u64 {
    ensure(VM_SEQUENCE, &0u64.to_le_bytes());
    for _ in 0..CAS_ATTEMPTS {
        let Some((bytes, cas)) = get(VM_SEQUENCE) else {
            break;
        };
        let next = decode_u64(&bytes).unwrap_or(0).wrapping_add(1);
        if swap(VM_SEQUENCE, &next.to_le_bytes(), cas) {
            return next;
        }
    }
    // Without shared data there is nobody to collide with.
    1
}

fn decode_u64(bytes: &[u8]) -> Option<u64> {
    bytes.get(..8)?.try_into().ok().map(u64::from_le_bytes)
}

/// A fingerprint of a plugin configuration ([`lease::fingerprint`]).
pub fn fingerprint(config: &[u8]) -> u64 {
    lease::fingerprint(config)
}

/// Takes or renews the probing lease of the configuration whose fingerprint is `config`, for
/// root context `me`, until `now + ttl` (the rule is [`lease::claim`]); true if it holds it.
/// Only a grant is written: VMs refused the lease read the table and leave it alone.
pub fn hold_lease(me: u64, config: u64, now: Time, ttl: Duration) -> bool {
    let claim = |table: &mut LeaseTable| lease::claim(table, config, me, now, ttl).then_some(());
    update_if(LEASES, tables::decode_leases, tables::encode_leases, claim).is_some()
}

/// Applies `change` to the table at `key`, atomically with respect to other VMs; returns the
/// table as written and what `change` returned.
fn update<T: Default, R>(
    key: &str,
    decode: fn(&[u8]) -> Result<T, TableError>,
    encode: fn(&T) -> Vec<u8>,
    mut change: impl FnMut(&mut T) -> R,
) -> Option<(T, R)> {
    update_if(key, decode, encode, |table| Some(change(table)))
}

/// [`update`] with a change that may decline (`None`): then nothing is written and the result
/// is `None`.
fn update_if<T: Default, R>(
    key: &str,
    decode: fn(&[u8]) -> Result<T, TableError>,
    encode: fn(&T) -> Vec<u8>,
    mut change: impl FnMut(&mut T) -> Option<R>,
) -> Option<(T, R)> {
    for _ in 0..CAS_ATTEMPTS {
        let Some((bytes, cas)) = get(key) else {
            ensure(key, &encode(&T::default()));
            continue;
        };
        // A table that does not decode is replaced rather than trusted.
        let mut table = decode(&bytes).unwrap_or_default();
        let result = change(&mut table)?;
        if swap(key, &encode(&table), cas) {
            return Some((table, result));
        }
    }
    log::warn!("upcheck: {key} was not updated: shared data kept changing");
    None
}

/// Announces a configuration as the newest for each of its backends (`announce` does it).
pub fn announce(announce: impl FnMut(&mut AnnounceTable)) {
    update(
        ANNOUNCE,
        tables::decode_announce,
        tables::encode_announce,
        announce,
    );
}

/// The announcements, if they changed since `seen`.
pub fn read_announced(seen: Option<u32>) -> Option<(AnnounceTable, u32)> {
    read_if_changed(ANNOUNCE, seen, tables::decode_announce)
}

/// Reads a table if it changed since `seen` (its last compare-and-swap value).
fn read_if_changed<T>(
    key: &str,
    seen: Option<u32>,
    decode: fn(&[u8]) -> Result<T, TableError>,
) -> Option<(T, u32)> {
    let (bytes, cas) = get(key)?;
    if seen == Some(cas) {
        return None;
    }
    match decode(&bytes) {
        Ok(table) => Some((table, cas)),
        Err(e) => {
            log::warn!("upcheck: shared data {key} is not this upcheck's ({e}); ignoring it");
            None
        }
    }
}

/// The probe table, if it changed since `seen`.
pub fn read_active(seen: Option<u32>) -> Option<(ActiveTable, u32)> {
    read_if_changed(ACTIVE, seen, tables::decode_active)
}

/// The passive table, if it changed since `seen`.
pub fn read_passive(seen: Option<u32>) -> Option<(PassiveTable, u32)> {
    read_if_changed(PASSIVE, seen, tables::decode_passive)
}

/// Merges a prober's entries into the probe table.
pub fn write_active(mine: &ActiveTable) {
    update(
        ACTIVE,
        tables::decode_active,
        tables::encode_active,
        |table| tables::merge_active(table, mine),
    );
}

/// Applies `change` to the passive table, atomically with respect to other VMs; returns the
/// table as written and what the change did.
pub fn update_passive(change: &PassiveChange, checks: &HealthChecks) -> Option<PassiveWrite> {
    let written = update(
        PASSIVE,
        tables::decode_passive,
        tables::encode_passive,
        |table| change.apply(table, checks),
    );
    if written
        .as_ref()
        .is_some_and(|(_, applied)| applied.takes_out())
    {
        let _ = hostcalls::set_shared_data(PASSIVE_TAKEN_OUT, Some(&[]), None);
    }
    written.map(|(table, applied)| PassiveWrite { table, applied })
}

/// The passive table's compare-and-swap number, read without copying the table.
pub fn passive_cas() -> Option<u32> {
    hostcalls::shared_data_cas(PASSIVE)
}

/// The count of passive changes that took a backend out ([`PASSIVE_TAKEN_OUT`]) if it moved
/// since `seen`.
pub fn passive_taken_out_since(seen: Option<u32>) -> Option<u32> {
    hostcalls::shared_data_cas(PASSIVE_TAKEN_OUT).filter(|cas| seen != Some(*cas))
}

/// The history of changes, if it changed since `seen`.
pub fn read_history(seen: Option<u32>) -> Option<(HistoryTable, u32)> {
    read_if_changed(HISTORY, seen, tables::decode_history)
}

/// Changes the history with `append`, atomically with respect to other VMs; returns the
/// history as written.
pub fn update_history(append: &dyn Fn(&mut HistoryTable)) -> Option<HistoryTable> {
    update(
        HISTORY,
        tables::decode_history,
        tables::encode_history,
        append,
    )
    .map(|(table, ())| table)
}

/// Writes what this prober shows of the fleet at `prefix` ([`Shown::encode`]).
pub fn write_fleet(prefix: &str, bytes: &[u8]) {
    // Only the status page reads it, and it says nothing of the fleet without it.
    let _ = hostcalls::set_shared_data(&tables::fleet_key(prefix), Some(bytes), None);
}

/// What the prober of the fleet at `prefix` last showed of it; bytes that are not such a record
/// show nothing (the page then says nothing of the fleet).
pub fn read_fleet(prefix: &str) -> Option<Shown> {
    let (bytes, _) = get(&tables::fleet_key(prefix))?;
    Shown::decode(&bytes).ok()
}
