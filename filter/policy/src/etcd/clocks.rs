//! Each other balancer's clock against this one's, measured from what it writes, so that every
//! time it shares (a failure, a probe state, an ejection, its request counts) is taken by this
//! balancer's clock: a clock seconds off neither lengthens nor shortens what it shares, nor gets
//! it refused as from the future.
//!
//! Every value a balancer puts says when it was written, by the writer's clock ([`written`]).
//! The watch delivers a put within milliseconds (40 ms at the 99th percentile, measured:
//! docs/fleet.md), so its arrival here, minus the time it says it was written, is the writer's
//! offset plus that delay; a value read later (a read of the prefix, or NGINX's reads without a
//! watch) gives the offset plus its age. Either is never less than the offset, so the smallest
//! sample is the best estimate ([`Arrival`]). It stands until a delivery more than [`STEP`] larger
//! says the writer's clock stepped back. A read, whose value may be old, only ever lowers it, and
//! before any delivery it counts only when it shows the writer ahead (a time in this clock's
//! future is no age): a balancer that only reads (NGINX) takes out a clock ahead, never one
//! behind, which it cannot tell from age. An offset under [`SKEW`] (the delay itself, on clocks
//! kept by NTP) is taken as none.

use super::keys::VALUES;
use super::{evidence, gateway};
use crate::time::{nanos, Time};
use std::time::Duration;

/// A sample this much larger than the estimate is a clock stepped back, not a slow delivery.
const STEP: Duration = Duration::from_secs(1);

/// An offset smaller than this is the delivery's delay on clocks in step: none is applied.
const SKEW: Duration = Duration::from_millis(100);

/// What is known of one balancer's clock.
#[derive(Debug, Clone, Copy)]
struct Offset {
    lease: i64,
    /// This clock minus that one, in nanoseconds.
    nanos: i128,
    /// Whether a delivery measured it (or only reads bounded it).
    delivered: bool,
}

/// Each other balancer's offset, by lease.
#[derive(Debug, Clone, Default)]
pub(super) struct Clocks {
    offsets: Vec<Offset>,
}

/// How a value came here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arrival {
    /// Delivered by the watch as it was put: its age here is the delivery's.
    Delivered,
    /// Found by a read, maybe long after it was put.
    Read,
}

/// Which balancer wrote the value `kv` holds, and when, by its clock: the stamp every value a
/// balancer puts begins with (a failures value's `@…`, or the time the others' postcard bytes
/// begin with behind their tag, of the values' layout [`VALUES`]). The writer is the lease the
/// value lives by, but for an ejection, which lives by a lease of its own and names its decider
/// next. `None` for a value without a stamp (a key's holder, the operators' membership).
pub(super) fn written(kv: &gateway::KeyValue) -> Option<(i64, Time)> {
    if let Some(written) = evidence::written(&kv.value) {
        return Some((kv.lease, written));
    }
    match kv.value.split_first_chunk::<4>() {
        Some(([b'u', b'c', b'e', VALUES], body)) => postcard::take_from_bytes::<(Time, i64)>(body)
            .ok()
            .map(|((at, by), _)| (by, at)),
        Some(([b'u', b'c', _, VALUES], body)) => postcard::take_from_bytes::<Time>(body)
            .ok()
            .map(|(at, _)| (kv.lease, at)),
        _ => None,
    }
}

impl Clocks {
    /// A value balancer `lease` wrote at `written` (its clock) arrived at `arrived` (this
    /// one's), as `how` says.
    pub(super) fn heard(&mut self, lease: i64, written: Time, arrived: Time, how: Arrival) {
        let sample = i128::from(nanos(arrived)) - i128::from(nanos(written));
        let delivered = how == Arrival::Delivered;
        let Some(known) = self.offsets.iter_mut().find(|o| o.lease == lease) else {
            let nanos = if delivered { sample } else { sample.min(0) };
            self.offsets.push(Offset {
                lease,
                nanos,
                delivered,
            });
            return;
        };
        let first_delivery = delivered && !known.delivered;
        let stepped = delivered && sample - known.nanos > i128::from(nanos(STEP));
        if sample < known.nanos || first_delivery || stepped {
            known.nanos = sample;
        }
        known.delivered |= delivered;
    }

    /// [`Clocks::heard`] for the value `kv`, if it says who wrote it and when.
    pub(super) fn heard_value(&mut self, kv: &gateway::KeyValue, arrived: Time, how: Arrival) {
        if let Some((writer, at)) = written(kv) {
            self.heard(writer, at, arrived, how);
        }
    }

    /// Forgets the balancers not in `leases` (gone from the fleet).
    pub(super) fn keep(&mut self, leases: &[i64]) {
        self.offsets.retain(|o| leases.contains(&o.lease));
    }

    /// `at`, by balancer `lease`'s clock, as this one's (as it is for a balancer not heard yet,
    /// or whose clock is within [`SKEW`] of this one's).
    pub(super) fn here(&self, lease: i64, at: Time) -> Time {
        let Some(offset) = self.offsets.iter().find(|o| o.lease == lease) else {
            return at;
        };
        if offset.nanos.unsigned_abs() < u128::from(nanos(SKEW)) {
            return at;
        }
        let local = i128::from(nanos(at)) + offset.nanos;
        Duration::from_nanos(u64::try_from(local.max(0)).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Time {
        Duration::from_millis(n)
    }

    #[test]
    fn a_clock_five_seconds_ahead_or_behind_is_taken_out_to_within_the_fastest_delivery() {
        let mut clocks = Clocks::default();
        // Written at 15 s by a clock 5 s ahead; delivered 30 ms, then 8 ms, later.
        clocks.heard(1, ms(15_000), ms(10_030), Arrival::Delivered);
        clocks.heard(1, ms(16_000), ms(11_008), Arrival::Delivered);
        assert_eq!(clocks.here(1, ms(16_000)), ms(11_008));
        // 5 s behind.
        clocks.heard(2, ms(5_000), ms(10_012), Arrival::Delivered);
        assert_eq!(clocks.here(2, ms(6_000)), ms(11_012));
        // Never heard: as it is.
        assert_eq!(clocks.here(3, ms(6_000)), ms(6_000));
    }

    #[test]
    fn clocks_in_step_are_left_alone_and_a_clock_stepped_back_is_followed() {
        let mut clocks = Clocks::default();
        clocks.heard(1, ms(10_000), ms(10_020), Arrival::Delivered);
        assert_eq!(
            clocks.here(1, ms(9_000)),
            ms(9_000),
            "20 ms is the delivery"
        );
        // A slow delivery does not move it; a clock stepped back 3 s does.
        clocks.heard(1, ms(11_000), ms(11_600), Arrival::Delivered);
        assert_eq!(clocks.here(1, ms(9_000)), ms(9_000));
        clocks.heard(1, ms(9_000), ms(12_010), Arrival::Delivered);
        assert_eq!(clocks.here(1, ms(9_000)), ms(12_010));
        clocks.keep(&[]);
        assert_eq!(clocks.here(1, ms(9_000)), ms(9_000), "gone from the fleet");
    }

    #[test]
    fn a_value_read_long_after_it_was_written_never_moves_the_estimate_up() {
        let mut clocks = Clocks::default();
        // First found by a read, 3 s after a clock 5 s ahead wrote it: taken as 2 s ahead.
        clocks.heard(1, ms(15_000), ms(13_000), Arrival::Read);
        assert_eq!(clocks.here(1, ms(15_000)), ms(13_000));
        // Read again later, older still: no step. Delivered, 10 ms after its put: 5 s.
        clocks.heard(1, ms(15_000), ms(19_000), Arrival::Read);
        assert_eq!(clocks.here(1, ms(15_000)), ms(13_000));
        clocks.heard(1, ms(20_000), ms(15_010), Arrival::Delivered);
        assert_eq!(clocks.here(1, ms(20_000)), ms(15_010));
        // Read 3 s after a clock in step (or 3 s behind) wrote it: the age cannot be told from
        // the offset, so none is taken until a delivery says.
        clocks.heard(2, ms(10_000), ms(13_000), Arrival::Read);
        assert_eq!(clocks.here(2, ms(10_000)), ms(10_000));
        clocks.heard(2, ms(14_000), ms(17_005), Arrival::Delivered);
        assert_eq!(clocks.here(2, ms(14_000)), ms(17_005));
    }

    #[test]
    fn a_stamped_value_says_when_it_was_written_and_one_without_a_stamp_says_nothing() {
        let value = |bytes: Vec<u8>| gateway::KeyValue {
            key: String::new(),
            value: bytes,
            lease: 1,
        };
        let stamped = crate::tables::tagged([b'u', b'c', b't', VALUES], &(ms(1_500), 7u8));
        assert_eq!(written(&value(stamped)), Some((1, ms(1_500))));
        let ejection = crate::tables::tagged([b'u', b'c', b'e', VALUES], &(ms(1_500), 9i64));
        assert_eq!(
            written(&value(ejection)),
            Some((9, ms(1_500))),
            "by its decider"
        );
        let older = crate::tables::tagged([b'u', b'c', b't', VALUES - 1], &(ms(1_500), 7u8));
        assert_eq!(written(&value(older)), None);
        assert_eq!(written(&value(b"7000000000000001".to_vec())), None);
        assert_eq!(
            written(&value(b"failures/v2 @2000000000 1000000000".to_vec())),
            Some((1, ms(2_000)))
        );
    }
}
