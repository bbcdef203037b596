//! A fake backend's capacity: so many requests a second, as an app server's fixed workers and
//! its accept queue serve them.

use std::time::Duration;

/// How many requests a second a backend serves: a bucket of one second's worth of requests,
/// refilled at that rate, as an app server's fixed workers and its accept queue take a short burst
/// and then only their rate. A whole second counted from scratch instead would turn away a burst
/// that a stalled client or proxy merely delayed across the second's end.
#[derive(Debug, Default)]
pub(super) struct Capacity {
    /// The most it serves in a second, and the most it takes at once; `None`: no limit.
    per_second: Option<u32>,
    /// The requests it could take now, as of `at`.
    room: f64,
    /// When `room` was last worked out (since the backend's start).
    at: Duration,
}

impl Capacity {
    /// A capacity of `per_second`, its bucket full at `now`.
    pub(super) fn new(per_second: Option<u32>, now: Duration) -> Self {
        Self {
            per_second,
            room: per_second.map_or(0.0, f64::from),
            at: now,
        }
    }

    /// Counts one request arriving `elapsed` after the backend started; whether it is served.
    pub(super) fn admit(&mut self, elapsed: Duration) -> bool {
        let Some(per_second) = self.per_second else {
            return true;
        };
        let rate = f64::from(per_second);
        let refilled = elapsed.saturating_sub(self.at).as_secs_f64() * rate;
        self.room = (self.room + refilled).min(rate);
        self.at = self.at.max(elapsed);
        if self.room >= 1.0 {
            self.room -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capacity_takes_a_burst_of_a_second_s_worth_then_only_its_rate() {
        let mut capacity = Capacity::new(Some(2), Duration::ZERO);
        let served: Vec<bool> = [0, 0, 0, 400, 550, 900, 1100, 5000, 5000, 5000]
            .map(|ms| capacity.admit(Duration::from_millis(ms)))
            .into();
        assert_eq!(
            served,
            [true, true, false, false, true, false, true, true, true, false]
        );
    }

    #[test]
    fn without_a_capacity_every_request_is_served() {
        let mut capacity = Capacity::default();
        assert!((0..1000).all(|_| capacity.admit(Duration::ZERO)));
    }
}
