//! Peer-relative outlier detection: the backend that fails or lags while its peers do not.
//!
//! The app's `/up` does not query the database, by design, so a backend that booted but cannot
//! reach it passes every probe while every page answers 500; a slow or hung backend passes too, or
//! is caught only once its probe times out. What gives such a backend away is its peers: backends
//! behind one balancer serve the same mix of requests, so the one whose failures or latency are
//! far from theirs is the odd one out.
//!
//! **What is compared.** Each backend's recent outcomes are counted in a [`Traffic`]: requests,
//! failures (any 5xx from the backend, 500 included, plus connection failures, resets and timeouts)
//! and a histogram of latencies. [`judge`](fn@judge) sets one backend against its peers (the other
//! backends in rotation, pooled into one) and finds it
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
//! do, fail this much by chance? A backend's failures are set against the highest rate its peers
//! plausibly fail at, by a bound of the binomial tail (`chance` says which, and why).
//!
//! A backend that was serving and then breaks is judged later than one broken from the start:
//! its successes still in the window dilute its failure share (under the floor and as evidence).
//! The run rule ([`run_rule`](fn@run_rule)) closes that gap: its last few requests,
//! process-wide, all failing while its peers rarely fail make it failing within a few requests.
//!
//! **Repeat offenders** are tracked in a [`Standing`]: each ejection is twice as long as the one
//! before (up to `max_ejection`), and a re-admitted backend is on probation: [`PROBATION_FAILURES`]
//! failures since its re-admission eject it again (under the same share rule, at
//! [`PROBATION_CHANCE`]: it was found failing already), so a backend that 500s every page costs at
//! most two requests per re-admission. Back in rotation for as long as its
//! last ejection lasted without a new offence, it is clean again.
//!
//! **The window** is a sliding window counter over two half-window buckets (`window`): its
//! memory per backend is fixed, and counts made apart, one VM's and another's, add up
//! ([`Traffic::merge`]).
//!
//! One concern a module: `latency` (the histogram's buckets, [`Bounds`]), `window` (the counts,
//! [`Traffic`]), `chance` (how unlikely counts are, and the chances that decide), `verdict` (what
//! is found, [`Verdict`]), `judge` (the share, latency and stall rules), `run_rule` (the run rule)
//! and `standing` (repeat offenders, [`Standing`]).

mod chance;
mod judge;
mod latency;
mod run_rule;
mod standing;
mod verdict;
mod window;

pub use crate::outcome::FailureKind;
pub use chance::{PROBATION_CHANCE, RETRY_CHANCE, RUN_CHANCE, SHARE_CHANCE};
pub use judge::{judge, odd_one_out, PROBATION_FAILURES, RETRY_FAILURES, STALLED_REQUESTS};
pub use latency::{Bounds, LATENCY_BUCKETS};
pub use run_rule::{run_rule, RunRule};
pub use standing::{Ejection, Ended, Standing};
pub use verdict::Verdict;
pub use window::{Traffic, WindowClock};
