//! Each other balancer's clock against this one's, measured from the watch's own deliveries, so
//! that a failure another balancer timed by its clock is remembered here by this one's: a clock
//! seconds off neither lengthens nor shortens how long the failure counts.
//!
//! A balancer's failures value says when it was written, by the writer's clock; the watch
//! delivers a put within milliseconds (40 ms at the 99th percentile, measured: docs/fleet.md), so
//! its arrival here, minus the time it says it was written, is the writer's offset plus that
//! delay. The smallest such sample is the best estimate, and it stands until a sample more than
//! [`STEP`] larger says the writer's clock stepped back. An offset under [`SKEW`] (the delay
//! itself, on clocks kept by NTP) is taken as none. Without a watch (NGINX), or before a
//! balancer's first delivery, its times are taken as they are: the skew then lengthens or
//! shortens its failures by itself, as before.

use crate::time::{nanos, Time};
use std::time::Duration;

/// A sample this much larger than the estimate is a clock stepped back, not a slow delivery.
const STEP: Duration = Duration::from_secs(1);

/// An offset smaller than this is the delivery's delay on clocks in step: none is applied.
const SKEW: Duration = Duration::from_millis(100);

/// Each balancer's offset (this clock minus that one, in nanoseconds), by lease.
#[derive(Debug, Clone, Default)]
pub(super) struct Clocks {
    offsets: Vec<(i64, i128)>,
}

impl Clocks {
    /// A value balancer `lease` wrote at `written` (its clock) arrived at `arrived` (this one's).
    pub(super) fn heard(&mut self, lease: i64, written: Time, arrived: Time) {
        let sample = i128::from(nanos(arrived)) - i128::from(nanos(written));
        match self.offsets.iter_mut().find(|(l, _)| *l == lease) {
            Some((_, offset)) => {
                if sample < *offset || sample - *offset > i128::from(nanos(STEP)) {
                    *offset = sample;
                }
            }
            None => self.offsets.push((lease, sample)),
        }
    }

    /// Forgets the balancers not in `leases` (gone from the fleet).
    pub(super) fn keep(&mut self, leases: &[i64]) {
        self.offsets.retain(|(l, _)| leases.contains(l));
    }

    /// `at`, by balancer `lease`'s clock, as this one's.
    pub(super) fn here(&self, lease: i64, at: Time) -> Time {
        let Some((_, offset)) = self.offsets.iter().find(|(l, _)| *l == lease) else {
            return at;
        };
        if offset.unsigned_abs() < u128::from(nanos(SKEW)) {
            return at;
        }
        let local = i128::from(nanos(at)) + offset;
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
        clocks.heard(1, ms(15_000), ms(10_030));
        clocks.heard(1, ms(16_000), ms(11_008));
        assert_eq!(clocks.here(1, ms(16_000)), ms(11_008));
        // 5 s behind.
        clocks.heard(2, ms(5_000), ms(10_012));
        assert_eq!(clocks.here(2, ms(6_000)), ms(11_012));
        // Never heard: as it is.
        assert_eq!(clocks.here(3, ms(6_000)), ms(6_000));
    }

    #[test]
    fn clocks_in_step_are_left_alone_and_a_clock_stepped_back_is_followed() {
        let mut clocks = Clocks::default();
        clocks.heard(1, ms(10_000), ms(10_020));
        assert_eq!(
            clocks.here(1, ms(9_000)),
            ms(9_000),
            "20 ms is the delivery"
        );
        // A slow delivery does not move it; a clock stepped back 3 s does.
        clocks.heard(1, ms(11_000), ms(11_600));
        assert_eq!(clocks.here(1, ms(9_000)), ms(9_000));
        clocks.heard(1, ms(9_000), ms(12_010));
        assert_eq!(clocks.here(1, ms(9_000)), ms(12_010));
        clocks.keep(&[]);
        assert_eq!(clocks.here(1, ms(9_000)), ms(9_000), "gone from the fleet");
    }
}
