//! Latencies, known to within a power of two: a fixed histogram per backend costs the same
//! memory at any traffic, and adds up across VMs bucket by bucket. What a histogram cannot say
//! exactly it says as [`Bounds`], so a comparison can take each side the cautious way.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;
use upcheck_config::duration;

/// Buckets of the latency histogram: bucket 0 is under 1 ms, bucket b is [2^(b−1), 2^b) ms, and
/// the last is 16.384 s or more.
pub const LATENCY_BUCKETS: usize = 16;

/// A latency known to within its histogram bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    /// The bucket's lower edge: the latency is at least this.
    pub low: Duration,
    /// The bucket's upper edge: the latency is below this; `Duration::MAX` for the last bucket.
    pub high: Duration,
}

impl Bounds {
    pub(super) fn of_bucket(bucket: usize) -> Bounds {
        let high = match bucket {
            b if b + 1 >= LATENCY_BUCKETS => Duration::MAX,
            b => Duration::from_millis(1 << b),
        };
        let low = match bucket {
            0 => Duration::ZERO,
            b => Duration::from_millis(1 << (b - 1).min(LATENCY_BUCKETS - 2)),
        };
        Bounds { low, high }
    }
}

impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.high == Duration::MAX {
            write!(f, "{} or longer", duration::display(self.low))
        } else {
            write!(
                f,
                "{} to {}",
                duration::display(self.low),
                duration::display(self.high)
            )
        }
    }
}

/// The latency bucket of `latency`.
pub(super) fn latency_bucket(latency: Duration) -> usize {
    // Under a second, as nearly every answer is, the milliseconds need no overflow check.
    let ms = match latency.as_secs() {
        0 => u64::from(latency.subsec_millis()),
        _ => crate::time::millis(latency),
    };
    let bits = usize::try_from(u64::BITS - ms.leading_zeros()).unwrap_or(LATENCY_BUCKETS);
    bits.min(LATENCY_BUCKETS - 1)
}
