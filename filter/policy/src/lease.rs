//! Who probes for a configuration: one lease per plugin configuration, all in one table in shared
//! data, taken and renewed by compare-and-swap.
//!
//! Envoy ticks every VM (one per worker plus the main thread's); probes must go out once per
//! backend per interval whatever their number, so for each plugin configuration one VM holds a
//! lease and probes for all of them. Which backends a configuration's prober probes is the
//! business of [`crate::tables`]'s announcements: each backend is probed for the newest
//! configuration that lists it. The adapter reads the table, asks [`claim`], and swaps in the
//! table it leaves when it grants the lease.
//!
//! Why one table and not a key per configuration: proxy-wasm cannot delete a shared-data key, so
//! a key per configuration would outlive its configuration, and an Envoy whose configuration
//! keeps changing (every listener update has a new fingerprint) would gain a key per change for
//! as long as it runs. In the table, a lease is stale once it has expired: its holder stopped
//! renewing it because its configuration was replaced or removed (or its VM died). Every grant
//! drops the stale leases, which changes no decision, since a lease that expired may be taken
//! exactly as one that is missing. So the table holds the configurations running now, plus those
//! that stopped within the last `ttl`, however many came before.
//!
//! Staleness is decided by expiry, not by the announcements: a configuration that is no longer
//! the newest for any backend but still runs (an old listener draining) keeps its lease until it
//! stops, then it goes like any other.

use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long a VM may hold the probing lease without renewing it: two ticks ([`crate::time::TICK`]),
/// so a holder late by one tick keeps it, and a holder gone is replaced within two.
pub const TTL: Duration = Duration::from_millis(400);

/// One configuration's probing lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The fingerprint of the plugin configuration it is for.
    pub config: u64,
    /// The root context that holds it (a process-unique id).
    pub holder: u64,
    /// When it expires unless its holder renews it.
    pub until: Time,
}

/// Every running configuration's lease, at most one per configuration.
pub type LeaseTable = Vec<Lease>;

/// Whether root context `me` may hold the lease of configuration `config` from `now` until
/// `now + ttl`: it may when nobody else holds it or the holder's lease expired. If so, `table`
/// now says so, without its stale leases, and must be written back; if not, `table` is left as
/// it was and there is nothing to write.
pub fn claim(table: &mut LeaseTable, config: u64, me: u64, now: Time, ttl: Duration) -> bool {
    let live = |lease: &Lease| lease.until > now;
    if table
        .iter()
        .any(|lease| lease.config == config && lease.holder != me && live(lease))
    {
        return false;
    }
    table.retain(|lease| lease.config != config && live(lease));
    table.push(Lease {
        config,
        holder: me,
        until: now.saturating_add(ttl),
    });
    true
}

/// A fingerprint of some bytes (FNV-1a): a plugin configuration's, which names its lease, or a
/// pool's backends' ([`crate::pool::Pool::history_key`]).
pub fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const TTL: Duration = Duration::from_millis(400);
    const TICK: Duration = Duration::from_millis(200);

    #[test]
    fn a_free_lease_is_taken_and_renewed_by_its_holder_only_until_it_expires() {
        let mut table = LeaseTable::new();
        assert!(claim(&mut table, 7, 1, S, S), "free");
        assert!(!claim(&mut table, 7, 2, S, S), "held by 1");
        assert!(!claim(&mut table, 7, 2, 2 * S - TICK, S), "held by 1");
        assert!(claim(&mut table, 7, 1, S, S), "renewed");
        assert!(claim(&mut table, 7, 2, 2 * S, S), "expired");
        assert_eq!(
            table,
            [Lease {
                config: 7,
                holder: 2,
                until: 3 * S
            }]
        );
    }

    #[test]
    fn each_configuration_has_a_lease_of_its_own() {
        let mut table = LeaseTable::new();
        assert!(claim(&mut table, 7, 1, S, TTL));
        assert!(claim(&mut table, 8, 2, S, TTL), "8 is not 7's");
        assert!(!claim(&mut table, 8, 1, S, TTL), "8 is held by 2");
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn a_refused_claim_leaves_the_table_as_it_was() {
        let mut table = LeaseTable::new();
        assert!(claim(&mut table, 7, 1, S, TTL));
        assert!(claim(&mut table, 8, 2, S + TTL - TICK, TTL));
        let before = table.clone();
        let expired = S + TTL;
        assert!(!claim(&mut table, 8, 3, expired, TTL));
        assert_eq!(table, before, "7's stale lease stays until a grant");
    }

    #[test]
    fn a_lease_nobody_renews_is_dropped_by_the_next_grant_once_it_expired() {
        let mut table = LeaseTable::new();
        assert!(claim(&mut table, 7, 1, S, TTL));
        assert!(claim(&mut table, 8, 2, S + TTL - TICK, TTL));
        assert_eq!(table.len(), 2, "7's lease has not expired yet");
        assert!(claim(&mut table, 8, 2, S + TTL, TTL));
        assert_eq!(
            table.iter().map(|l| l.config).collect::<Vec<_>>(),
            [8],
            "7's lease expired"
        );
        assert!(claim(&mut table, 7, 3, S + TTL, TTL), "and 7 may come back");
    }

    #[test]
    fn configurations_that_keep_changing_leave_only_the_running_ones_in_the_table() {
        // Two listeners: one steady (fingerprint 1), one whose configuration changes every
        // 10 s, 10,000 times; each held by its own VM, renewed every tick.
        let mut table = LeaseTable::new();
        let mut longest = 0;
        let mut now = Duration::ZERO;
        for change in 0..10_000u64 {
            let changing = 100 + change;
            for _ in 0..50 {
                assert!(claim(&mut table, 1, 1, now, TTL));
                assert!(claim(&mut table, changing, 2, now, TTL));
                longest = longest.max(table.len());
                now += TICK;
            }
        }
        assert_eq!(longest, 3, "the steady, the new and the one just replaced");
        assert_eq!(table.len(), 2);
    }
}
