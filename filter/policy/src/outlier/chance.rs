//! How unlikely a backend's failures are at its peers' rate, and how unlikely is unlikely.
//!
//! The question is the run rule's: would the peers, failing as they do, fail this much by chance?
//! The backend's k failures in n requests are set against the highest rate the peers plausibly fail
//! at ([`Tally::rate`]: their failures two standard deviations high, plus half a failure, so that
//! spotless peers make one failure unlikely, not impossible) by their log-likelihood ratio
//! ([`Tally::surprise`]), whose exponential bounds the binomial tail (Chernoff): cheap (two
//! logarithms, and only for a backend past the count and the floor), exact when every request
//! failed, and defined for the window's weighted counts. So a release that fails a third of one
//! backend's pages while its peers fail none is out by its fifth to eighth failure, whatever its
//! share's gap; an app bug failing a third of the pages on every backend is not, because each one's
//! share is likely at the others'; 1 % of failures on one backend is likely enough at low traffic
//! and under the floor at high traffic. Taking the peers' rate high keeps two backends with the
//! same share apart from chance even though each is the other's only peer.

/// Requests and failures, as weighted in a window.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tally {
    pub(super) requests: f64,
    pub(super) failures: f64,
}

impl Tally {
    /// The share of requests that failed, 0 to 1.
    pub(super) fn share(&self) -> f64 {
        if self.requests > 0.0 {
            self.failures / self.requests
        } else {
            0.0
        }
    }

    /// The highest failure rate these counts plausibly stand for, what a backend is compared with:
    /// the failures taken two standard deviations high (2√f, the spread of a count), since the
    /// peers' share is a measurement too, and half a failure more, over one request more (as
    /// Jeffreys' prior does), so that peers without a failure make a backend's failures unlikely,
    /// not impossible. Above 0 and, for a failure share under 1, below 1 but for few requests.
    pub(super) fn rate(&self) -> f64 {
        let failures = self.failures + 2.0 * self.failures.sqrt() + 0.5;
        (failures / (self.requests + 1.0)).min(1.0)
    }

    /// How surprising these counts are at the failure rate `rate`: the log-likelihood ratio of
    /// the share they show against `rate`, `k ln(q/p) + (n−k) ln((1−q)/(1−p))`, 0 when the share
    /// is no higher. `exp(−surprise)` bounds the chance of failing this share or more at `rate`
    /// (the Chernoff bound of the binomial tail); when every request failed it is that chance
    /// exactly, `p^n`, as in the run rule. Counts are weighted by the window, so not whole.
    pub(super) fn surprise(&self, rate: f64) -> f64 {
        let share = self.share();
        if share <= rate {
            return 0.0;
        }
        let failed = self.failures * (share / rate).ln();
        let served = self.requests - self.failures;
        if served > 0.0 {
            failed + served * ((1.0 - share) / (1.0 - rate)).ln()
        } else {
            failed
        }
    }
}

/// Rounds an estimated count for display.
pub(super) fn count(estimate: f64) -> u32 {
    // `as` saturates: NaN is 0, huge is u32::MAX.
    estimate.round() as u32
}

/// How unlikely a run of failures must be, at the peers' failure share, before it is the backend's
/// own: one in a million.
pub const RUN_CHANCE: f64 = 1e-6;

/// How unlikely a backend's failures in the window must be, at its peers' failure rate, before
/// they are its own: one in a million, as for a run (see [`Tally::surprise`] for how it is
/// reckoned).
pub const SHARE_CHANCE: f64 = RUN_CHANCE;

/// How unlikely its failures since its re-admission must be for a backend on probation: one in a
/// hundred. It was found failing already, so less evidence that it still is will do: two failures
/// in its first two requests while its peers fail up to about 5 in 100.
pub const PROBATION_CHANCE: f64 = 1e-2;

/// How unlikely a backend's failures must be, at its peers' failure share, before a request to it
/// is repeated elsewhere for standing out ([`crate::retry`]): one in a thousand. A repeat costs one
/// attempt, not a backend's share of the traffic, so it may act on thinner evidence than an
/// ejection; it is not so thin that an app bug every backend shares makes one stand out by chance.
pub const RETRY_CHANCE: f64 = 1e-3;
