//! The tables the status page shows: the history of changes ([`crate::history`]), which every
//! VM appends to, and each fleet's record ([`crate::etcd::shown`]), which that fleet's prober
//! writes. Both are bounded on the way in, so no writer can grow a reader's memory past what
//! upcheck itself writes.

use super::bytes::{decode, encode, TableError, FLEET, HISTORY};
use super::keys;
use super::probing::AnnounceTable;
use crate::history::{Change, HistoryTable, MAX_CAUSE_LEN, MAX_KEY_LEN};
use upcheck_config::{MAX_HISTORY, MAX_NAME_LEN, MAX_UPSTREAMS};

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
