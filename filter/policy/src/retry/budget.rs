//! The retry budget: extra attempts at most a share of the requests of a sliding window, plus a
//! floor, so that a fleet failing at once never doubles its load while a quiet balancer can
//! still repeat a request.
//!
//! Counted per VM, over that VM's own requests: the proxy spreads requests over its workers, so
//! the share holds for the process as it does for each worker; the floor is each worker's. Two
//! buckets of half a window each make the sliding window (as [`crate::outlier::Traffic`] does), so
//! the memory is fixed and a request costs two additions.

use crate::outlier::WindowClock;
use std::time::Duration;
use upcheck_config::Retries;

/// Requests and the extra attempts made for them, over a sliding window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budget {
    /// Which half-window the `current` bucket is, as of the latest tick.
    bucket: u64,
    /// Requests and extra attempts of the current half-window.
    current: Counts,
    /// Those of the half-window before it.
    previous: Counts,
    /// The share of requests extra attempts may be, in percent, as configured at the latest tick.
    percent: u64,
    /// Extra attempts allowed over the window whatever the traffic.
    floor: u64,
    /// Whether one more extra attempt is within the budget: worked out at each tick and after
    /// each extra attempt, and while it is not, at each request (more requests allow more).
    open: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    requests: u32,
    extra: u32,
}

impl Budget {
    /// Time passing, as of `clock` (the tick's), over a window of `window`: the buckets move on,
    /// the configuration's budget is taken in.
    pub fn tick(&mut self, clock: WindowClock, window: Duration, retries: &Retries) {
        let bucket = clock.half();
        if bucket != self.bucket {
            self.previous = if bucket == self.bucket.saturating_add(1) {
                self.current
            } else {
                Counts::default()
            };
            self.current = Counts::default();
            self.bucket = bucket;
        }
        self.percent = u64::from(retries.budget_percent);
        // A product of two numbers under 2^32: it does not overflow.
        self.floor =
            u64::from(retries.min_per_second) * window.as_secs().clamp(1, u64::from(u32::MAX));
        self.open = self.within();
    }

    /// Whether one more extra attempt would be within the budget.
    fn within(&self) -> bool {
        let requests = u64::from(self.current.requests) + u64::from(self.previous.requests);
        let extra = u64::from(self.current.extra) + u64::from(self.previous.extra);
        // Requests under 2^33 times a percent under 2^7: no overflow.
        extra < requests * self.percent / 100 + self.floor
    }

    /// A request asks whether one more extra attempt would be within the budget: counted as a
    /// request either way. Whether it is.
    #[inline(always)]
    pub fn allows(&mut self) -> bool {
        self.current.requests = self.current.requests.saturating_add(1);
        if !self.open {
            self.open = self.within();
        }
        self.open
    }

    /// An extra attempt was made (the proxy repeated or hedged a request).
    pub fn spend(&mut self) {
        self.current.extra = self.current.extra.saturating_add(1);
        self.open = self.within();
    }
}
