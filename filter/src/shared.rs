//! Process-wide state in proxy-wasm shared data.
//!
//! Envoy runs one VM per worker plus the main thread's; shared data (per `vm_id`) is what they
//! have in common. Four keys:
//! - `upcheck.lease`: which VM probes (holder id, expiry), taken and renewed by compare-and-swap,
//!   so exactly one prober runs per process whatever the worker count, in any host;
//! - `upcheck.config`: a fingerprint of the newest plugin configuration. After a config update
//!   Envoy keeps the old root contexts ticking until the old filter chain drains (up to
//!   `--drain-time-s`); only a root with the newest configuration may hold the lease, so a
//!   backend added by the update is probed at once, not after the drain;
//! - `upcheck.active`: every backend's probe state, written only by the lease holder;
//! - `upcheck.passive`: every backend's remembered request failures and outlier record, updated
//!   by compare-and-swap from whichever worker saw the failure (and by each worker's tick, with
//!   its request counts), so 1 failure on worker A and 2 on worker B are 3.
//!
//! Values that do not decode (another version of upcheck sharing the `vm_id`) are reported and
//! ignored rather than trusted.

use proxy_wasm::hostcalls;
use proxy_wasm::types::Status;
use std::time::Duration;
use upcheck_policy::config::HealthChecks;
use upcheck_policy::lease;
use upcheck_policy::tables::{self, ActiveTable, Applied, PassiveChange, PassiveTable, TableError};
use upcheck_policy::Time;

const LEASE: &str = "upcheck.lease";
const CONFIG: &str = "upcheck.config";
const ACTIVE: &str = "upcheck.active";
const PASSIVE: &str = "upcheck.passive";
const VM_SEQUENCE: &str = "upcheck.vm_sequence";

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

/// A fingerprint of a plugin configuration (FNV-1a).
pub fn fingerprint(config: &[u8]) -> u64 {
    config.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Announces the configuration a root context was just given: the newest one.
pub fn announce_config(fingerprint: u64) {
    if let Err(status) = hostcalls::set_shared_data(CONFIG, Some(&fingerprint.to_le_bytes()), None)
    {
        log::warn!("upcheck: announcing the configuration failed ({status:?})");
    }
}

/// Takes or renews the probing lease for root context `me`, configured with `config`, until
/// `now + ttl` (the rule is [`lease::claim`]); true if it holds it.
pub fn hold_lease(me: u64, config: u64, now: Time, ttl: Duration) -> bool {
    let newest = get(CONFIG).and_then(|(bytes, _)| decode_u64(&bytes));
    // Created empty, then taken by compare-and-swap like any other time: two VMs creating it
    // at once cannot both win.
    let Some((bytes, cas)) = get(LEASE).or_else(|| {
        ensure(LEASE, &[0; 16]);
        get(LEASE)
    }) else {
        return false;
    };
    match lease::claim(Some(&bytes), me, config, newest, now, ttl) {
        Some(lease) => swap(LEASE, &lease, cas),
        None => false,
    }
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

/// Publishes the probe table (only the lease holder writes it).
pub fn write_active(table: &ActiveTable) {
    let bytes = tables::encode_active(table);
    if let Err(status) = hostcalls::set_shared_data(ACTIVE, Some(&bytes), None) {
        log::warn!("upcheck: publishing probe results failed ({status:?})");
    }
}

/// Applies `change` to the passive table, atomically with respect to other VMs; returns the
/// table as written and what the change did.
pub fn update_passive(
    change: &PassiveChange,
    checks: &HealthChecks,
) -> Option<(PassiveTable, Applied)> {
    for _ in 0..CAS_ATTEMPTS {
        let Some((bytes, cas)) = get(PASSIVE) else {
            ensure(PASSIVE, &tables::encode_passive(&PassiveTable::new()));
            continue;
        };
        // A table that does not decode is replaced rather than trusted.
        let mut table = tables::decode_passive(&bytes).unwrap_or_default();
        let applied = change.apply(&mut table, checks);
        if swap(PASSIVE, &tables::encode_passive(&table), cas) {
            return Some((table, applied));
        }
    }
    log::warn!(
        "upcheck: news of {} was not shared: shared data kept changing",
        change.name().unwrap_or("request counts")
    );
    None
}
