//! Peer-relative outlier detection: the backend that fails or lags while its peers do not.
//!
//! The app's `/up` does not query the database, by design, so a backend that booted but cannot
//! reach it passes every probe while every page answers 500; a slow or hung backend passes too, or
//! is caught only once its probe times out. What gives such a backend away is its peers: backends
//! behind one balancer serve the same mix of requests, so the one whose failures or latency are
//! far from theirs is the odd one out.
//!
//! **What is compared.** Each backend's recent outcomes are counted in a [`Traffic`]: requests,
//! failures (any 5xx from the backend, 500 included, plus connection failures, resets and
//! timeouts) and a histogram of latencies. [`judge`] sets one backend against its peers (the
//! other backends in rotation, pooled into one) and finds it
//! - *failing* when it has at least `min_failures` failures, so many that they would be less
//!   likely than [`SHARE_CHANCE`] (one in a million) at its peers' failure rate, and a failure
//!   share at least `failure_gap` percentage points above theirs (the floor: a difference too
//!   small to be worth an ejection, 5 points by default);
//! - *slow* when its median latency is at least `min_latency` and `latency_factor` times its
//!   peers';
//! - *stalled* when [`STALLED_REQUESTS`] of its requests still in flight have waited longer than
//!   `latency_factor` times what its peers' slowest requests (99th percentile) take, and at least
//!   `stall_after`: a hung backend goes out without waiting for its probe to time out, while an app
//!   whose pages routinely take 5 s everywhere is left alone.
//!
//! Latencies are known to within a power of two, and compared the cautious way: the backend's
//! median is taken at its bucket's lower edge, the peers' at their bucket's upper edge.
//!
//! **Why a shared cause ejects nobody.** Only the difference from the peers counts. When the
//! shared database is slow, every backend's median moves with it; when an app bug fails one
//! request in five, it does so on every backend, and the shares stay level. Absolute limits remain
//! the passive checks' business (`unhealthy_status`, `unhealthy_latency`).
//!
//! **Why it is safe at two backends and at low traffic.** At two backends each is compared with
//! the other alone, and while one is out the other has no peer in rotation, so it cannot be
//! judged: the detector never empties a pool (its ejections also count toward the fleet's cap).
//! Nothing is judged on thin evidence: the peers must have had `min_requests` requests in the
//! window, the backend `min_failures` failures (or `min_requests` answers before its latency is
//! judged). At 2 requests a second a backend failing everything is out after 5 to 8 failures;
//! one with a few unlucky failures is not.
//!
//! **How unlikely is unlikely.** The question is the run rule's: would the peers, failing as they
//! do, fail this much by chance? The backend's k failures in n requests are set against the
//! highest rate the peers plausibly fail at ([`Tally::rate`]: their failures two standard
//! deviations high, plus half a failure, so that spotless peers make one failure unlikely, not
//! impossible) by their log-likelihood ratio ([`Tally::surprise`]), whose exponential bounds the
//! binomial tail (Chernoff): cheap (two logarithms, and only for a backend past the count and the
//! floor), exact when every request failed, and defined for the window's weighted counts. So a
//! release that fails a third of one backend's pages while its peers fail none is out by its
//! fifth to eighth failure, whatever its share's gap; an app bug failing a third of the pages on
//! every backend is not, because each one's share is likely at the others'; 1 % of failures on
//! one backend is likely enough at low traffic and under the floor at high traffic. Taking the
//! peers' rate high keeps two backends with the same share apart from chance even though each is
//! the other's only peer.
//!
//! A backend that was serving and then breaks is judged later than one broken from the start:
//! its successes still in the window dilute its failure share (under the floor and as evidence).
//! The run rule ([`run_rule`]) closes that gap: its last few requests, process-wide, all failing
//! while its peers rarely fail make it failing within a few requests.
//!
//! **Repeat offenders** are tracked in a [`Standing`]: each ejection is twice as long as the one
//! before (up to `max_ejection`), and a re-admitted backend is on probation: [`PROBATION_FAILURES`]
//! failures since its re-admission eject it again (under the same share rule, at
//! [`PROBATION_CHANCE`]: it was found failing already), so a backend that 500s every page costs at
//! most two requests per re-admission. Back in rotation for as long as its
//! last ejection lasted without a new offence, it is clean again.
//!
//! **The window** is a sliding window counter over two half-window buckets keyed by
//! `now / (window / 2)`: at `now` the estimate is the current bucket plus the previous one
//! weighted by the share of the current half-window still to come. An outcome counts fully until
//! its half-window ends, then fades over the next half and is gone at most one `window` after it
//! happened. Memory per backend is fixed, and because buckets are keyed by absolute time, counts
//! made apart add up: each VM counts its own outcomes in a private `Traffic` and adds it to the
//! process-wide copy each tick ([`Traffic::merge`]). A `Traffic` does not store its window; every
//! call takes it, and a changed window changes what every index means, so the caller starts
//! afresh then.

pub use crate::outcome::FailureKind;
use crate::time::{nanos, Time};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;
use upcheck_config::duration;
use upcheck_config::Outlier as OutlierConfig;

/// Buckets of the latency histogram: bucket 0 is under 1 ms, bucket b is [2^(b−1), 2^b) ms, and
/// the last is 16.384 s or more.
pub const LATENCY_BUCKETS: usize = 16;

/// Failures since its re-admission that eject a backend on probation again.
pub const PROBATION_FAILURES: u32 = 2;

/// Requests in flight that must have waited too long before a backend is judged stalled: one
/// slow request is a slow page, three at once are a backend that stopped answering.
pub const STALLED_REQUESTS: u32 = 3;

/// A latency known to within its histogram bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    /// The bucket's lower edge: the latency is at least this.
    pub low: Duration,
    /// The bucket's upper edge: the latency is below this; `Duration::MAX` for the last bucket.
    pub high: Duration,
}

impl Bounds {
    fn of_bucket(bucket: usize) -> Bounds {
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
fn latency_bucket(latency: Duration) -> usize {
    let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
    let bits = usize::try_from(u64::BITS - ms.leading_zeros()).unwrap_or(LATENCY_BUCKETS);
    bits.min(LATENCY_BUCKETS - 1)
}

/// The outcomes of one half-window.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
struct Bucket {
    /// Requests that ended, failed or not.
    requests: u32,
    /// Of those, the ones that failed.
    failures: u32,
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
                self.last_failure = self.last_failure.max(Some((at, kind)));
            }
            None => self.last_served = self.last_served.max(Some(at)),
        }
        if let Some(slot) = latency.and_then(|l| self.latency.get_mut(latency_bucket(l))) {
            *slot = slot.saturating_add(1);
        }
    }

    fn add(&mut self, other: &Bucket) {
        self.requests = self.requests.saturating_add(other.requests);
        self.failures = self.failures.saturating_add(other.failures);
        for (mine, theirs) in self.latency.iter_mut().zip(&other.latency) {
            *mine = mine.saturating_add(*theirs);
        }
        self.last_failure = self.last_failure.max(other.last_failure);
        self.last_served = self.last_served.max(other.last_served);
    }
}

/// How much each bucket counts at some instant, 0 to 1.
#[derive(Debug, Clone, Copy)]
struct Weights {
    previous: f64,
    current: f64,
}

impl Weights {
    fn of(&self, previous: u32, current: u32) -> f64 {
        self.previous * f64::from(previous) + self.current * f64::from(current)
    }
}

/// Requests and failures, as weighted in a window.
#[derive(Debug, Clone, Copy)]
struct Tally {
    requests: f64,
    failures: f64,
}

impl Tally {
    /// The share of requests that failed, 0 to 1.
    fn share(&self) -> f64 {
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
    fn rate(&self) -> f64 {
        let failures = self.failures + 2.0 * self.failures.sqrt() + 0.5;
        (failures / (self.requests + 1.0)).min(1.0)
    }

    /// How surprising these counts are at the failure rate `rate`: the log-likelihood ratio of
    /// the share they show against `rate`, `k ln(q/p) + (n−k) ln((1−q)/(1−p))`, 0 when the share
    /// is no higher. `exp(−surprise)` bounds the chance of failing this share or more at `rate`
    /// (the Chernoff bound of the binomial tail); when every request failed it is that chance
    /// exactly, `p^n`, as in the run rule. Counts are weighted by the window, so not whole.
    fn surprise(&self, rate: f64) -> f64 {
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

/// Where a time falls among the half-windows of a window: worked out once, for a tick that
/// weighs every backend's traffic at the same time.
#[derive(Debug, Clone, Copy)]
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

/// The half-window `at` falls in.
fn half_index(at: Time, window: Duration) -> u64 {
    nanos(at) / half_window(window)
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
        let half = half_index(at, window);
        self.roll_to(half);
        let bucket = match self.half - half {
            0 => &mut self.current,
            1 => &mut self.previous,
            _ => return,
        };
        bucket.record(at, failure, latency);
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

    /// Moves the current half-window forward to `half` (never back).
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
                && answered <= u64::from(b.requests)
                && b.last_failure.is_none_or(|(t, _)| t <= latest)
                && b.last_served.is_none_or(|t| t <= latest)
        };
        self.half <= half && sane(&self.previous) && sane(&self.current)
    }

    /// Whether it holds no outcome at all.
    pub fn is_empty(&self) -> bool {
        self.previous.requests == 0 && self.current.requests == 0
    }

    /// How much each bucket counts at `now`: the current one fully, the previous one by the share
    /// of the current half-window still to come.
    fn weights(&self, now: Time, window: Duration) -> Weights {
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
    fn weights_since(&self, since: Time, now: Time, window: Duration) -> Weights {
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
    fn tally_whole(&self, now: Time, window: Duration) -> Tally {
        let weights = self.weights(now, window);
        let whole = |w: f64| if w > 0.0 { 1.0 } else { 0.0 };
        self.tally(Weights {
            previous: whole(weights.previous),
            current: whole(weights.current),
        })
    }

    fn tally(&self, weights: Weights) -> Tally {
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

/// Why a backend is an outlier: the comparison, for the log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// Its failure share is far above its peers'.
    Failing {
        /// Its failed requests (in the window, or since its re-admission).
        failed: u32,
        /// Its requests, over the same span.
        requests: u32,
        /// How its latest failure failed.
        kind: Option<FailureKind>,
        /// Whether it was judged on probation, on what it did since its re-admission.
        since_readmission: bool,
        /// Its peers' failed requests in the window.
        peers_failed: u32,
        /// Its peers' requests in the window.
        peers_requests: u32,
    },
    /// Its latest requests, process-wide, all failed: more in a row than its peers' failure share
    /// makes believable (see [`run_rule`]).
    Run {
        /// How many failed in a row.
        failed: u32,
        /// How its latest failure failed.
        kind: FailureKind,
        /// Its peers' failed requests in the window.
        peers_failed: u32,
        /// Its peers' requests in the window.
        peers_requests: u32,
    },
    /// Its median latency is far above its peers'.
    Slow {
        /// Its median latency.
        median: Bounds,
        /// What its peers' median is below.
        peers_median: Duration,
    },
    /// Its requests in flight have waited far longer than its peers take.
    Stalled {
        /// How many have waited at least `waited`.
        waiting: u32,
        /// The wait that makes a request stalled: `latency_factor` × `peers_p99`, at least
        /// `stall_after`.
        waited: Duration,
        /// How long the oldest has waited.
        oldest: Duration,
        /// What 99 in 100 of its peers' requests are answered within.
        peers_p99: Duration,
    },
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Verdict::Failing {
                failed,
                requests,
                kind,
                since_readmission,
                peers_failed,
                peers_requests,
            } => {
                write!(f, "{failed} of {requests} requests failed")?;
                if let Some(kind) = kind {
                    write!(f, " ({kind})")?;
                }
                if *since_readmission {
                    f.write_str(" since it was re-admitted")?;
                }
                write!(
                    f,
                    " while its peers failed {peers_failed} of {peers_requests}"
                )
            }
            Verdict::Run {
                failed,
                kind,
                peers_failed,
                peers_requests,
            } => write!(
                f,
                "its last {failed} requests failed ({kind}) while its peers failed {peers_failed} \
                 of {peers_requests}"
            ),
            Verdict::Slow {
                median,
                peers_median,
            } => write!(
                f,
                "its requests took {median} (median) while its peers answer within {} (median)",
                duration::display(*peers_median)
            ),
            Verdict::Stalled {
                waiting,
                waited,
                oldest,
                peers_p99,
            } => write!(
                f,
                "{waiting} of its requests have waited {} or longer (the oldest {}) while its \
                 peers answer within {} (99%)",
                duration::display(*waited),
                duration::display(*oldest),
                duration::display(*peers_p99)
            ),
        }
    }
}

/// Rounds an estimated count for display.
fn count(estimate: f64) -> u32 {
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

/// The longest run [`run_rule`] asks for: peers failing so much that a longer one is believable
/// leave nothing to compare with.
const LONGEST_RUN: u32 = 1000;

/// The run rule as one VM sees it at some instant: how many failures in a row, process-wide, make
/// a backend failing, and its peers' figures for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRule {
    /// Failures in a row that make the backend failing.
    pub limit: u32,
    /// Its peers' failed requests in the window.
    pub peers_failed: u32,
    /// Its peers' requests in the window.
    pub peers_requests: u32,
}

impl RunRule {
    /// The verdict on a backend whose last `run` requests failed, the latest as `kind`.
    pub fn verdict(&self, run: u32, kind: FailureKind) -> Option<Verdict> {
        (run >= self.limit).then_some(Verdict::Run {
            failed: run,
            kind,
            peers_failed: self.peers_failed,
            peers_requests: self.peers_requests,
        })
    }
}

/// The run rule at `now`, given a backend's `peers` (pooled): at least `min_failures` failures in
/// a row, and as many as make the run less likely than [`RUN_CHANCE`] at the peers' failure share
/// p over the whole window (the smallest k with p^k below it): 5 with peers at 0–1 %, 9 at 20 %, 20 at 50 %. A backend
/// that served well and then broke is judged on its run within a few requests, where its earlier
/// successes would dilute its share for many more; a fault every backend shares never makes such
/// a run. `None`: detection is off, the peers had fewer than `min_requests` requests in the
/// window (each half-window counted whole), or they fail nearly everything themselves.
pub fn run_rule(peers: &Traffic, config: &OutlierConfig, now: Time) -> Option<RunRule> {
    if !config.enabled {
        return None;
    }
    let theirs = peers.tally_whole(now, config.window);
    if theirs.requests < f64::from(config.min_requests) {
        return None;
    }
    let share = theirs.share();
    let limit = (1..=LONGEST_RUN).find(|k| {
        let k = i32::try_from(*k).unwrap_or(i32::MAX);
        share.powi(k) < RUN_CHANCE
    })?;
    Some(RunRule {
        limit: limit.max(config.min_failures),
        peers_failed: count(theirs.failures),
        peers_requests: count(theirs.requests),
    })
}

/// Decides whether one backend is an outlier at `now`.
///
/// `traffic` and `standing` are the backend's; `in_flight` holds when each of its requests still
/// waiting for an answer started, as far as the caller tracks them (start times rather than a
/// count of old ones, because how old is too old depends on the peers' latency, known only here);
/// `peers` are the other backends in rotation, pooled. Nothing is judged while the detector is
/// off, while the backend is ejected, without peers, or while the peers have too little traffic
/// to compare with.
pub fn judge<'a>(
    traffic: &Traffic,
    standing: &Standing,
    in_flight: &[Time],
    peers: impl IntoIterator<Item = &'a Traffic>,
    config: &OutlierConfig,
    now: Time,
) -> Option<Verdict> {
    if !config.enabled || standing.is_ejected(now) {
        return None;
    }
    let mut pooled: Option<Traffic> = None;
    for peer in peers {
        pooled.get_or_insert_with(Traffic::default).merge(peer);
    }
    let peers = pooled?;
    let enough = f64::from(config.min_requests);
    let peers_answered = peers.answered(now, config.window) >= enough;
    let answered = traffic.answered(now, config.window) >= enough;
    if let Some(verdict) = failing(traffic, standing, &peers, config, now) {
        Some(verdict)
    } else if answered && peers_answered {
        slow(traffic, &peers, config, now).or_else(|| stalled(in_flight, &peers, config, now))
    } else if peers_answered {
        stalled(in_flight, &peers, config, now)
    } else {
        None
    }
}

/// The share rule: the backend's failures in the window, or since its re-admission while on
/// probation, against its peers' (see the module's notes).
fn failing(
    traffic: &Traffic,
    standing: &Standing,
    peers: &Traffic,
    config: &OutlierConfig,
    now: Time,
) -> Option<Verdict> {
    let window = config.window;
    let theirs = peers.tally(peers.weights(now, window));
    if theirs.requests < f64::from(config.min_requests) {
        return None;
    }
    let gap = f64::from(config.failure_gap);
    let verdict = |mine: Tally, since_readmission: bool| Verdict::Failing {
        failed: count(mine.failures),
        requests: count(mine.requests),
        kind: traffic.last_failure(now, window),
        since_readmission,
        peers_failed: count(theirs.failures),
        peers_requests: count(theirs.requests),
    };
    // The cheap tests first: a healthy backend fails the count, nearly always.
    let stands_out = |mine: Tally, needed: u32, chance: f64| {
        mine.failures >= f64::from(needed)
            && (mine.share() - theirs.share()) * 100.0 >= gap
            && mine.surprise(peers.tally_whole(now, window).rate()) > -chance.ln()
    };
    let in_window = traffic.tally(traffic.weights(now, window));
    if stands_out(in_window, config.min_failures, SHARE_CHANCE) {
        return Some(verdict(in_window, false));
    }
    let readmitted = standing.readmitted_at(now)?;
    let since = traffic.tally(traffic.weights_since(readmitted, now, window));
    stands_out(since, PROBATION_FAILURES, PROBATION_CHANCE).then(|| verdict(since, true))
}

/// `latency` × `config.latency_factor`, saturating.
fn times_factor(latency: Duration, config: &OutlierConfig) -> Duration {
    latency
        .checked_mul(config.latency_factor)
        .unwrap_or(Duration::MAX)
}

fn slow(traffic: &Traffic, peers: &Traffic, config: &OutlierConfig, now: Time) -> Option<Verdict> {
    let window = config.window;
    let median = traffic.median_latency_bounds(now, window)?;
    let peers_median = peers.median_latency_bounds(now, window)?.high;
    let slow = median.low >= config.min_latency && median.low >= times_factor(peers_median, config);
    slow.then_some(Verdict::Slow {
        median,
        peers_median,
    })
}

fn stalled(
    in_flight: &[Time],
    peers: &Traffic,
    config: &OutlierConfig,
    now: Time,
) -> Option<Verdict> {
    let peers_p99 = peers.p99_upper(now, config.window)?;
    let waited = config.stall_after.max(times_factor(peers_p99, config));
    let ages = in_flight
        .iter()
        .map(|start| now.saturating_sub(*start))
        .filter(|age| *age >= waited);
    let (waiting, oldest) = ages.fold((0u32, Duration::ZERO), |(n, oldest), age| {
        (n.saturating_add(1), oldest.max(age))
    });
    (waiting >= STALLED_REQUESTS).then_some(Verdict::Stalled {
        waiting,
        waited,
        oldest,
        peers_p99,
    })
}

/// An outlier ejection in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct InForce {
    until: Time,
    length: Duration,
    verdict: Verdict,
}

/// A re-admission after an outlier ejection, on probation until `clean_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Readmission {
    at: Time,
    clean_at: Time,
}

/// One backend's record as an outlier, shared process-wide: the ejection in force, the offences
/// that lengthen the next one, and its probation after a re-admission.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Standing {
    ejection: Option<InForce>,
    /// Consecutive offences, each without a clean period in between.
    offences: u32,
    readmitted: Option<Readmission>,
}

/// An outlier ejection just decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ejection {
    /// When it ends.
    pub until: Time,
    /// How long it lasts.
    pub length: Duration,
}

/// An outlier ejection that ended: the backend is back in rotation, on probation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// What it was ejected for.
    pub verdict: Verdict,
    /// How long it was out.
    pub length: Duration,
    /// Its consecutive offences so far.
    pub offences: u32,
}

impl Standing {
    /// Whether an outlier ejection is in force at `now`.
    pub fn is_ejected(&self, now: Time) -> bool {
        self.ejection.as_ref().is_some_and(|e| now < e.until)
    }

    /// The ejection in force at `now`: what it was for and when it ends.
    pub fn in_force(&self, now: Time) -> Option<(&Verdict, Time)> {
        self.ejection
            .as_ref()
            .filter(|e| now < e.until)
            .map(|e| (&e.verdict, e.until))
    }

    /// When the ejection in force at `now` began.
    pub fn ejected_since(&self, now: Time) -> Option<Time> {
        self.ejection
            .as_ref()
            .filter(|e| now < e.until)
            .map(|e| e.until.saturating_sub(e.length))
    }

    /// Consecutive offences: the next ejection lasts `ejection` × 2^offences.
    pub fn offences(&self) -> u32 {
        self.offences
    }

    /// When it was re-admitted, while it is on probation at `now`.
    pub fn readmitted_at(&self, now: Time) -> Option<Time> {
        match &self.ejection {
            Some(e) if now < e.until => None,
            // Ended, though not yet ticked.
            Some(e) => (now < e.until.saturating_add(e.length)).then_some(e.until),
            None => self.readmitted.filter(|r| now < r.clean_at).map(|r| r.at),
        }
    }

    /// Ejects the backend at `now` for `verdict`: for `ejection`, doubled for each offence since
    /// it was last clean, at most `max_ejection`. Call [`Standing::tick`] first, or the end of an
    /// earlier ejection goes unreported.
    pub fn eject(&mut self, verdict: Verdict, now: Time, config: &OutlierConfig) -> Ejection {
        // Settles an earlier ejection and probation; reporting their end is `tick`'s caller's.
        self.tick(now);
        self.offences = self.offences.saturating_add(1);
        let doubling = 2u32.checked_pow(self.offences - 1);
        let length = doubling
            .and_then(|d| config.ejection.checked_mul(d))
            .unwrap_or(Duration::MAX)
            .min(config.max_ejection);
        let until = now.saturating_add(length);
        self.ejection = Some(InForce {
            until,
            length,
            verdict,
        });
        self.readmitted = None;
        Ejection { until, length }
    }

    /// Holds at `now` the ejection in force in `theirs`, another balancer's standing of the
    /// backend ([`crate::etcd`]), until its end: the next offence here lasts as long as the next
    /// one there. `None` if one is in force here already, or none there.
    pub fn adopt(&mut self, theirs: &Standing, now: Time) -> Option<Ejection> {
        self.tick(now);
        let e = theirs.ejection.as_ref().filter(|e| now < e.until)?;
        if self.is_ejected(now) {
            return None;
        }
        self.offences = self.offences.max(theirs.offences);
        self.ejection = Some(e.clone());
        self.readmitted = None;
        Some(Ejection {
            until: e.until,
            length: e.length,
        })
    }

    /// Brings the standing to `now`: an ejection that has run its course ends (returned once, for
    /// the log), starting the backend's probation; a probation served without offence makes it
    /// clean again.
    pub fn tick(&mut self, now: Time) -> Option<Ended> {
        let ended = match self.ejection.take() {
            Some(e) if now >= e.until => {
                self.readmitted = Some(Readmission {
                    at: e.until,
                    clean_at: e.until.saturating_add(e.length),
                });
                Some(Ended {
                    verdict: e.verdict,
                    length: e.length,
                    offences: self.offences,
                })
            }
            in_force => {
                self.ejection = in_force;
                None
            }
        };
        if self.ejection.is_none() && self.readmitted.is_some_and(|r| now >= r.clean_at) {
            self.offences = 0;
            self.readmitted = None;
        }
        ended
    }
}
