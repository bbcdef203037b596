//! The tables of who probes and what they found: the probing leases by configuration
//! ([`crate::lease`]), the announcements (for each backend, the newest configuration that lists
//! it, whose prober probes it) and the probe table (every backend's probe state, each entry
//! written only by the prober of the configuration it is announced to).

use super::bytes::{decode, encode, TableError, ACTIVE, ANNOUNCE, LEASES};
use crate::active::ActiveHealth;
use crate::lease::LeaseTable;

/// Probe state by backend key.
pub type ActiveTable = Vec<(String, ActiveHealth)>;
/// By backend key, the fingerprint of the newest configuration that lists it.
pub type AnnounceTable = Vec<(String, u64)>;

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
