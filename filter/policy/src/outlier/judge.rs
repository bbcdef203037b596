//! Setting one backend against its peers: the share rule (failing), the latency rule (slow) and
//! the stall rule (stalled), each only on enough evidence.

use super::chance::{count, Tally, PROBATION_CHANCE, RETRY_CHANCE, SHARE_CHANCE};
use super::standing::Standing;
use super::verdict::Verdict;
use super::window::Traffic;
use crate::time::Time;
use std::time::Duration;
use upcheck_config::Outlier as OutlierConfig;

/// Failures since its re-admission that eject a backend on probation again.
pub const PROBATION_FAILURES: u32 = 2;

/// Requests in flight that must have waited too long before a backend is judged stalled: one
/// slow request is a slow page, three at once are a backend that stopped answering.
pub const STALLED_REQUESTS: u32 = 3;

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
/// probation, against its peers' (see [`crate::outlier`] and [`super::chance`]).
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

/// Failures a backend must have in the window before it can stand out for a retry: one failure
/// is a page, two on a backend whose peers fail none is a backend.
pub const RETRY_FAILURES: u32 = 2;

/// Whether a backend stands out from its peers by its failures, on the evidence a repeat needs:
/// in the window ([`RETRY_FAILURES`], [`RETRY_CHANCE`], and the share's gap: the share rule's
/// question on thinner evidence), or by its latest `run` requests process-wide all failing, a
/// run its peers' failure share makes less likely than [`RETRY_CHANCE`] (the run rule's question:
/// a backend that served well and then broke shows in a run long before its share moves).
pub fn odd_one_out(
    traffic: &Traffic,
    run: u32,
    peers: &Traffic,
    config: &OutlierConfig,
    now: Time,
) -> bool {
    let window = config.window;
    let mine = traffic.tally(traffic.weights(now, window));
    let theirs = peers.tally(peers.weights(now, window));
    let whole = peers.tally_whole(now, window);
    let by_share = mine.failures >= f64::from(RETRY_FAILURES)
        && (mine.share() - theirs.share()) * 100.0 >= f64::from(config.failure_gap)
        && mine.surprise(whole.rate()) > -RETRY_CHANCE.ln();
    let by_run = run >= RETRY_FAILURES
        && whole.requests >= f64::from(config.min_requests)
        && whole.share().powi(i32::try_from(run).unwrap_or(i32::MAX)) < RETRY_CHANCE;
    by_share || by_run
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
