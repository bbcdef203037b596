//! The run rule: how many failures in a row, process-wide, make a backend failing at its peers'
//! failure share; it catches within a few requests a backend that served well and then broke (why,
//! in [`crate::outlier`]).

use super::chance::{count, RUN_CHANCE};
use super::verdict::Verdict;
use super::window::Traffic;
use crate::outcome::FailureKind;
use crate::time::Time;
use upcheck_config::Outlier as OutlierConfig;

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

/// The run rule at `now`, given a backend's `peers` (pooled): at least `min_failures` failures in a
/// row, and as many as make the run less likely than [`RUN_CHANCE`] at the peers' failure share p
/// over the whole window (the smallest k with p^k below it): 5 with peers at 0–1 %, 9 at 20 %, 20
/// at 50 %. A backend that served well and then broke is judged on its run within a few requests,
/// where its earlier successes would dilute its share for many more; a fault every backend shares
/// never makes such a run. `None`: detection is off, the peers had fewer than `min_requests`
/// requests in the window (each half-window counted whole), or they fail nearly everything
/// themselves.
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
