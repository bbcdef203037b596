//! Who probes for a configuration: a lease in shared data, taken and renewed by compare-and-swap.
//!
//! Envoy ticks every VM (one per worker plus the main thread's); probes must go out once per
//! backend per interval whatever their number, so for each plugin configuration one VM holds a
//! lease and probes for all of them. The lease is 16 bytes: the holder's id and its expiry in
//! nanoseconds, little-endian. A VM may take it when it is free, expired or already its own.
//! Which backends a configuration's prober probes is the business of [`crate::tables`]'s
//! announcements: each backend is probed for the newest configuration that lists it. The adapter
//! reads the lease, asks [`claim`], and swaps in what it returns.

use crate::Time;
use std::time::Duration;

/// The lease's bytes: (holder, expiry in ns).
fn decode(bytes: &[u8]) -> (u64, u64) {
    let word = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .unwrap_or(0)
    };
    (word(0), word(8))
}

fn nanos(t: Time) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// The bytes to swap in for VM `me` to hold the lease until `now + ttl`, or `None` if another
/// VM holds it. `current` is the lease as read (`None` if there is none yet).
pub fn claim(current: Option<&[u8]>, me: u64, now: Time, ttl: Duration) -> Option<[u8; 16]> {
    let (holder, expiry) = current.map(decode).unwrap_or((0, 0));
    if holder != me && holder != 0 && expiry > nanos(now) {
        return None;
    }
    let until = nanos(now).saturating_add(nanos(ttl));
    let mut lease = [0u8; 16];
    let (id, time) = lease.split_at_mut(8);
    id.copy_from_slice(&me.to_le_bytes());
    time.copy_from_slice(&until.to_le_bytes());
    Some(lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_free_lease_is_taken_and_renewed_by_its_holder_only_until_it_expires() {
        let mine = claim(None, 1, S, S).unwrap_or_default();
        assert!(claim(Some(&mine), 2, S, S).is_none(), "held by 1");
        assert!(claim(Some(&mine), 1, S, S).is_some(), "renewed");
        let later = 2 * S + Duration::from_nanos(1);
        assert!(claim(Some(&mine), 2, later, S).is_some(), "expired");
    }

    #[test]
    fn lease_bytes_of_any_length_are_read_without_panicking() {
        for len in 0..20 {
            let bytes = vec![0xff; len];
            let _ = claim(Some(&bytes), 1, S, S);
        }
    }
}
