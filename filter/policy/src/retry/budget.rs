//! The retry budget: extra attempts at most a share of the requests of a sliding window, plus a
//! floor, so that a fleet failing at once never doubles its load while a quiet balancer can
//! still repeat a request.
//!
//! Counted per VM, over that VM's own requests: the proxy spreads requests over its workers, so
//! the share holds for the process as it does for each worker; the floor is each worker's. Two
//! buckets of half a window each make the sliding window (as [`crate::outlier::Traffic`] does), so
//! the memory is fixed and a request costs two additions.

use crate::time::Time;
use std::time::Duration;
use upcheck_config::Retries;

/// Requests and the extra attempts made for them, over a sliding window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budget {
    /// Which half-window the `current` bucket is (time since start / half a window).
    bucket: u64,
    /// Requests and extra attempts of the current half-window.
    current: Counts,
    /// Those of the half-window before it.
    previous: Counts,
    /// Requests refused advice for want of budget, ever (for the metric).
    pub refused: u64,
    /// Extra attempts made, ever (for the metric).
    pub spent: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    requests: u32,
    extra: u32,
}

impl Budget {
    /// Moves the buckets on to `now`, over a window of `window`.
    fn roll(&mut self, now: Time, window: Duration) {
        let half = (window.as_nanos() / 2).max(1);
        let bucket = u64::try_from(now.as_nanos() / half).unwrap_or(u64::MAX);
        if bucket == self.bucket {
            return;
        }
        self.previous = if bucket == self.bucket.saturating_add(1) {
            self.current
        } else {
            Counts::default()
        };
        self.current = Counts::default();
        self.bucket = bucket;
    }

    /// A request asks at `now` whether one more extra attempt would be within the budget over
    /// `window`: counted as a request either way. Whether it is.
    pub fn allows(&mut self, now: Time, window: Duration, retries: &Retries) -> bool {
        self.roll(now, window);
        self.current.requests = self.current.requests.saturating_add(1);
        let requests = u64::from(self.current.requests) + u64::from(self.previous.requests);
        let extra = u64::from(self.current.extra) + u64::from(self.previous.extra);
        let floor = u64::from(retries.min_per_second).saturating_mul(window.as_secs().max(1));
        let allowed = requests.saturating_mul(u64::from(retries.budget_percent)) / 100 + floor;
        let within = extra < allowed;
        if !within {
            self.refused = self.refused.saturating_add(1);
        }
        within
    }

    /// An extra attempt was made at `now` (the proxy repeated or hedged a request).
    pub fn spend(&mut self, now: Time, window: Duration) {
        self.roll(now, window);
        self.current.extra = self.current.extra.saturating_add(1);
        self.spent = self.spent.saturating_add(1);
    }
}
