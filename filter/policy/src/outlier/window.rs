//! One backend's recent outcomes, counted in a sliding window of fixed memory.
//!
//! It is a sliding window counter over two half-window buckets keyed by
//! `now / (window / 2)`: at `now` the estimate is the current bucket plus the previous one
//! weighted by the share of the current half-window still to come. An outcome counts fully until
//! its half-window ends, then fades over the next half and is gone at most one `window` after it
//! happened. Memory per backend is fixed, and because buckets are keyed by absolute time, counts
//! made apart add up: each VM counts its own outcomes in a private `Traffic` and adds it to the
//! process-wide copy each tick ([`Traffic::merge`]). A `Traffic` does not store its window; every
//! call takes it, and a changed window changes what every index means, so the caller starts
//! afresh then.

use super::chance::Tally;
use super::latency::{latency_bucket, Bounds, LATENCY_BUCKETS};
use crate::outcome::{About, FailureKind};
use crate::time::{nanos, Time};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The outcomes of one half-window.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
struct Bucket {
    /// Requests that ended, failed or not.
    requests: u32,
    /// Of those, the ones that failed.
    failures: u32,
    /// Of the failures, those that may be about this balancer's path to the backend rather
    /// than the backend ([`crate::outcome::About`]): left out of what the fleet is told.
    path: u32,
    /// Extra attempts the proxy made for requests first sent here (a repeat on another backend
    /// or a hedge): what the retry budget counts ([`crate::retry::Budget`]).
    extra: u32,
    /// Requests answered, by latency bucket.
    latency: [u32; LATENCY_BUCKETS],
    /// The latest failure and how it failed (the greatest, for two at the same instant, so that
    /// counts made apart merge to the same bucket whatever the order).
    last_failure: Option<(Time, FailureKind)>,
    /// The latest request the backend answered without failing: what contradicts a probe that
    /// timed out meanwhile.
    last_served: Option<Time>,
}

impl Bucket {
    fn record(&mut self, at: Time, failure: Option<FailureKind>, latency: Option<Duration>) {
        self.requests = self.requests.saturating_add(1);
        match failure {
            Some(kind) => {
                self.failures = self.failures.saturating_add(1);
                if kind.about() == About::Path {
                    self.path = self.path.saturating_add(1);
                }
                self.last_failure = self.last_failure.max(Some((at, kind)));
            }
            // Most requests end at the time of the latest tick, already the latest served.
            None if self.last_served.is_none_or(|t| t < at) => self.last_served = Some(at),
            None => {}
        }
        if let Some(slot) = latency.and_then(|l| self.latency.get_mut(latency_bucket(l))) {
            *slot = slot.saturating_add(1);
        }
    }

    fn add(&mut self, other: &Bucket) {
        self.requests = self.requests.saturating_add(other.requests);
        self.failures = self.failures.saturating_add(other.failures);
        self.path = self.path.saturating_add(other.path);
        self.extra = self.extra.saturating_add(other.extra);
        for (mine, theirs) in self.latency.iter_mut().zip(&other.latency) {
            *mine = mine.saturating_add(*theirs);
        }
        self.last_failure = self.last_failure.max(other.last_failure);
        self.last_served = self.last_served.max(other.last_served);
    }
}

/// How much each bucket counts at some instant, 0 to 1.
#[derive(Debug, Clone, Copy)]
pub(super) struct Weights {
    previous: f64,
    current: f64,
}

impl Weights {
    fn of(&self, previous: u32, current: u32) -> f64 {
        self.previous * f64::from(previous) + self.current * f64::from(current)
    }
}

/// One backend's recent request outcomes: a sliding window counter over two half-window buckets.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Traffic {
    /// Index of the current half-window: its start time divided by half the window.
    half: u64,
    /// The half-window before `half`.
    previous: Bucket,
    /// The half-window `half`.
    current: Bucket,
}

/// Half of `window`, never zero.
fn half_window(window: Duration) -> u64 {
    (nanos(window) / 2).max(1)
}

/// The half-window `at` falls in.
fn half_index(at: Time, window: Duration) -> u64 {
    nanos(at) / half_window(window)
}

/// Where a time falls among the half-windows of a window: worked out once, for a tick that
/// weighs every backend's traffic at the same time.
#[derive(Debug, Clone, Copy, Default)]
pub struct WindowClock {
    /// The half-window it falls in.
    half: u64,
    /// The share of that half-window still to come, 0 to 1.
    still_to_come: f64,
}

impl WindowClock {
    /// Where `now` falls among the half-windows of `window`.
    pub fn new(now: Time, window: Duration) -> WindowClock {
        let half = half_window(window);
        let at = nanos(now);
        WindowClock {
            half: at / half,
            still_to_come: 1.0 - (at % half) as f64 / half as f64,
        }
    }
}

impl Traffic {
    /// Counts one request that ended at `at`: `failure` says how it failed, if it did; `latency`
    /// is how long its answer took, if it was answered. An outcome older than the previous
    /// half-window is too old to count and is dropped.
    pub fn record(
        &mut self,
        at: Time,
        failure: Option<FailureKind>,
        latency: Option<Duration>,
        window: Duration,
    ) {
        self.record_at(WindowClock::new(at, window), at, failure, latency);
    }

    /// Counts one extra attempt (a repeat or a hedge) made at `clock` for a request first sent
    /// here.
    pub fn record_extra(&mut self, clock: WindowClock) {
        if let Some(bucket) = self.bucket_at(clock) {
            bucket.extra = bucket.extra.saturating_add(1);
        }
    }

    /// [`Traffic::record`] with `at`'s place in the window worked out already (`clock`): what
    /// a caller counting every request at the time of its latest tick works out once a tick.
    pub fn record_at(
        &mut self,
        clock: WindowClock,
        at: Time,
        failure: Option<FailureKind>,
        latency: Option<Duration>,
    ) {
        if let Some(bucket) = self.bucket_at(clock) {
            bucket.record(at, failure, latency);
        }
    }

    /// The bucket of the half-window `clock` falls in, the current one moved forward to it if
    /// need be; `None` for a time older than the previous half-window.
    #[inline(always)]
    fn bucket_at(&mut self, clock: WindowClock) -> Option<&mut Bucket> {
        let half = clock.half;
        if half != self.half {
            self.roll_to(half);
        }
        match self.half - half {
            0 => Some(&mut self.current),
            1 => Some(&mut self.previous),
            _ => None,
        }
    }

    /// Adds counts made elsewhere (another VM's outcomes not yet shared): buckets of the same
    /// half-window add up, and the older side is first rolled to the newer's half-window. Merging
    /// is commutative and associative and adds every outcome exactly once, so merging each VM's
    /// counts into a shared copy gives the counts of one VM that saw everything.
    pub fn merge(&mut self, other: &Traffic) {
        let half = self.half.max(other.half);
        self.roll_to(half);
        match half - other.half {
            0 => {
                self.previous.add(&other.previous);
                self.current.add(&other.current);
            }
            1 => self.previous.add(&other.current),
            _ => {}
        }
    }

    /// Moves the current half-window forward to `half` (never back). Out of line: it runs once
    /// a half-window, and inlined it would make every count pay for its moves.
    #[inline(never)]
    fn roll_to(&mut self, half: u64) {
        match half.saturating_sub(self.half) {
            0 => return,
            1 => self.previous = std::mem::take(&mut self.current),
            _ => {
                self.previous = Bucket::default();
                self.current = Bucket::default();
            }
        }
        self.half = half;
    }

    /// Whether counts read from elsewhere (another balancer's, [`crate::etcd`]) are counts this
    /// build could have made by `latest` with `window`: no half-window or time after `latest`'s,
    /// no more failures or latencies than requests.
    pub fn plausible(&self, latest: Time, window: Duration) -> bool {
        let half = nanos(latest) / half_window(window);
        let sane = |b: &Bucket| {
            let answered: u64 = b.latency.iter().map(|n| u64::from(*n)).sum();
            b.failures <= b.requests
                && b.path <= b.failures
                && answered <= u64::from(b.requests)
                && b.last_failure.is_none_or(|(t, _)| t <= latest)
                && b.last_served.is_none_or(|t| t <= latest)
        };
        self.half <= half && sane(&self.previous) && sane(&self.current)
    }

    /// The counts, kept in `window`, with their times taken through `here`: another balancer's
    /// clock to this one's ([`crate::etcd`]). The half-windows move to where the middle of the
    /// current one falls, so an offset moves the counts by whole half-windows, to the nearest.
    pub fn retimed(mut self, here: impl Fn(Time) -> Time, window: Duration) -> Traffic {
        let half = half_window(window);
        let middle = self.half.saturating_mul(half).saturating_add(half / 2);
        self.half = half_index(here(Duration::from_nanos(middle)), window);
        for bucket in [&mut self.previous, &mut self.current] {
            bucket.last_failure = bucket.last_failure.map(|(at, kind)| (here(at), kind));
            bucket.last_served = bucket.last_served.map(&here);
        }
        self
    }

    /// The counts without the failures that may be about this balancer's path: what another
    /// balancer is told, so that one balancer's broken path does not make the backend fail the
    /// comparison everywhere. Such a request says nothing about the backend, so it is left out
    /// of the requests too.
    pub fn about_backend(&self) -> Traffic {
        let mut told = self.clone();
        for bucket in [&mut told.previous, &mut told.current] {
            bucket.requests = bucket.requests.saturating_sub(bucket.path);
            bucket.failures = bucket.failures.saturating_sub(bucket.path);
            bucket.path = 0;
            if bucket
                .last_failure
                .is_some_and(|(_, kind)| kind.about() == About::Path)
            {
                bucket.last_failure = None;
            }
        }
        told
    }

    /// Whether it holds no outcome and no extra attempt at all.
    pub fn is_empty(&self) -> bool {
        let empty = |b: &Bucket| b.requests == 0 && b.extra == 0;
        empty(&self.previous) && empty(&self.current)
    }

    /// How much each bucket counts at `now`: the current one fully, the previous one by the share
    /// of the current half-window still to come.
    pub(super) fn weights(&self, now: Time, window: Duration) -> Weights {
        self.weights_at(WindowClock::new(now, window))
    }

    /// [`Traffic::weights`] with the clock worked out already.
    fn weights_at(&self, clock: WindowClock) -> Weights {
        let still_to_come = clock.still_to_come;
        match clock.half.checked_sub(self.half) {
            Some(0) => Weights {
                previous: still_to_come,
                current: 1.0,
            },
            Some(1) => Weights {
                previous: 0.0,
                current: still_to_come,
            },
            Some(_) => Weights {
                previous: 0.0,
                current: 0.0,
            },
            // Counted by a clock slightly ahead of this one.
            None => Weights {
                previous: 1.0,
                current: 1.0,
            },
        }
    }

    /// The buckets that hold outcomes since `since` and still count at `now`, each fully. The
    /// bucket `since` falls in counts whole: outcomes from before `since` in that same half-window
    /// count too, which after an ejection happens only if the ejection was shorter than half the
    /// window.
    pub(super) fn weights_since(&self, since: Time, now: Time, window: Duration) -> Weights {
        let from = half_index(since, window);
        let oldest = half_index(now, window).saturating_sub(1);
        let counts = |half: Option<u64>| match half {
            Some(h) if h >= from && h >= oldest => 1.0,
            _ => 0.0,
        };
        Weights {
            previous: counts(self.half.checked_sub(1)),
            current: counts(Some(self.half)),
        }
    }

    /// Every outcome still in either half-window at `now`, each counted whole: what a rate is
    /// estimated from. The sliding estimate counts about half a window's worth, which at a request
    /// a second hovers just under `min_requests`; a rate needs no sliding edge.
    pub(super) fn tally_whole(&self, now: Time, window: Duration) -> Tally {
        let weights = self.weights(now, window);
        let whole = |w: f64| if w > 0.0 { 1.0 } else { 0.0 };
        self.tally(Weights {
            previous: whole(weights.previous),
            current: whole(weights.current),
        })
    }

    pub(super) fn tally(&self, weights: Weights) -> Tally {
        Tally {
            requests: weights.of(self.previous.requests, self.current.requests),
            failures: weights.of(self.previous.failures, self.current.failures),
        }
    }

    fn histogram(&self, now: Time, window: Duration) -> [f64; LATENCY_BUCKETS] {
        let weights = self.weights(now, window);
        let mut histogram = [0.0; LATENCY_BUCKETS];
        let pairs = self.previous.latency.iter().zip(&self.current.latency);
        for (slot, (previous, current)) in histogram.iter_mut().zip(pairs) {
            *slot = weights.of(*previous, *current);
        }
        histogram
    }

    /// The bucket holding the `q` quantile of the latencies at `now`, if any was counted.
    fn quantile(&self, q: f64, now: Time, window: Duration) -> Option<usize> {
        let histogram = self.histogram(now, window);
        let total: f64 = histogram.iter().sum();
        if total <= 0.0 {
            return None;
        }
        let mut below = 0.0;
        for (bucket, count) in histogram.iter().enumerate() {
            below += count;
            if below >= q * total {
                return Some(bucket);
            }
        }
        Some(LATENCY_BUCKETS - 1)
    }

    /// Requests that ended in the window at `clock` (estimated), with the clock worked out once
    /// for many backends.
    pub fn requests_at(&self, clock: WindowClock) -> f64 {
        self.tally(self.weights_at(clock)).requests
    }

    /// Extra attempts made in the window at `clock` (estimated).
    pub fn extra_at(&self, clock: WindowClock) -> f64 {
        let weights = self.weights_at(clock);
        weights.of(self.previous.extra, self.current.extra)
    }

    /// Requests that failed in the window at `now` (estimated).
    pub fn failures(&self, now: Time, window: Duration) -> f64 {
        self.tally(self.weights(now, window)).failures
    }

    /// Requests answered in the window at `now`, whose latency is known (estimated).
    pub fn answered(&self, now: Time, window: Duration) -> f64 {
        self.histogram(now, window).iter().sum()
    }

    /// The median latency in the window at `now`, to within its bucket.
    pub fn median_latency_bounds(&self, now: Time, window: Duration) -> Option<Bounds> {
        self.quantile(0.5, now, window).map(Bounds::of_bucket)
    }

    /// What 99 in 100 requests in the window at `now` were answered within: the upper edge of the
    /// 99th percentile's bucket (`Duration::MAX` if that is the last bucket).
    pub fn p99_upper(&self, now: Time, window: Duration) -> Option<Duration> {
        self.quantile(0.99, now, window)
            .map(|b| Bounds::of_bucket(b).high)
    }

    /// How the latest failure in the window at `now` failed.
    pub fn last_failure(&self, now: Time, window: Duration) -> Option<FailureKind> {
        let weights = self.weights(now, window);
        let current = self.current.last_failure.filter(|_| weights.current > 0.0);
        let previous = self
            .previous
            .last_failure
            .filter(|_| weights.previous > 0.0);
        current.max(previous).map(|(_, kind)| kind)
    }

    /// When the backend last answered a request without failing, as far as the window still
    /// remembers.
    pub fn last_served(&self) -> Option<Time> {
        self.current.last_served.max(self.previous.last_served)
    }
}
