//! The rows of the throughput rounds (item 3): each setup's figures, and the setups against one
//! another round by round.

use super::figures::{n, spread, us, verdict};
use super::{Report, Table};
use crate::throughput::Setup;
use std::time::Duration;

/// Envoy's CPU use (cores) below which a setup was not limited by Envoy.
const ENVOY_BOUND: f64 = 0.9;

/// Setup `x` against setup `y`, both as [`medians`]: the req/s ratio, the p50 and p99 gaps.
fn against(x: (f64, f64, f64), y: (f64, f64, f64)) -> String {
    format!("{:.3} · {}", x.0 / y.0.max(1.0), gaps(x, y))
}

/// The p50 and p99 gaps of `x` over `y`, both as [`medians`].
fn gaps(x: (f64, f64, f64), y: (f64, f64, f64)) -> String {
    format!(
        "{:+.0} µs · {:+.0} µs",
        (x.1 - y.1) * 1e6,
        (x.2 - y.2) * 1e6
    )
}

/// Median req/s, p50 and p99 (seconds) of a setup.
fn medians(setup: &Setup) -> (f64, f64, f64) {
    let of =
        |f: fn(&crate::wrk::Run) -> f64| spread(&setup.runs.iter().map(f).collect::<Vec<_>>()).0;
    (
        of(|r| r.rate),
        of(|r| r.p50.as_secs_f64()),
        of(|r| r.p99.as_secs_f64()),
    )
}

/// `x`'s req/s over `y`'s, round by round: the setups take turns, so the two runs of a round
/// saw the same machine, and the spread of these ratios is how sure the comparison is.
fn paired_ratios(x: &Setup, y: &Setup) -> Vec<f64> {
    x.runs
        .iter()
        .zip(&y.runs)
        .map(|(x, y)| x.rate / y.rate.max(1.0))
        .collect()
}

/// Whether the ratios of every round are at least `target`: met when even the lowest round is,
/// missed when even the highest is not, and otherwise not settled by this run.
fn ratio_verdict(ratios: &[f64], target: f64) -> String {
    let (_, low, high) = spread(ratios);
    if low >= target {
        "met in every round".to_owned()
    } else if high < target {
        format!(
            "**missed** in every round, by {:.3} at least",
            target - high
        )
    } else {
        format!(
            "not settled: the rounds span the target ({} rounds; more rounds narrow it)",
            ratios.len()
        )
    }
}

/// `median (min–max)` of one field of the runs, formatted by `show`.
fn field(setup: &Setup, get: fn(&crate::wrk::Run) -> f64, show: fn(f64) -> String) -> String {
    let (median, min, max) = spread(&setup.runs.iter().map(get).collect::<Vec<_>>());
    format!("{} ({}–{})", show(median), show(min), show(max))
}

impl Report {
    pub(super) fn throughput(&self, t: &mut Table) {
        let Some(th) = &self.throughput else {
            return;
        };
        let rate = |r: &crate::wrk::Run| r.rate;
        let p50 = |r: &crate::wrk::Run| r.p50.as_secs_f64();
        let p99 = |r: &crate::wrk::Run| r.p99.as_secs_f64();
        let show_rate = |v: f64| n(v.round() as u64);
        let show_us = |v: f64| format!("{:.0}", v * 1e6);
        for setup in &th.setups {
            let cores = spread(&setup.envoy_cores).0;
            let load = spread(&setup.load_core).0;
            t.row(
                "3",
                &format!(
                    "{}: req/s · p50 µs · p99 µs, median (min–max) of {}",
                    setup.name,
                    setup.runs.len()
                ),
                format!(
                    "{} · {} · {}",
                    field(setup, rate, show_rate),
                    field(setup, p50, show_us),
                    field(setup, p99, show_us)
                ),
                "",
                format!(
                    "Envoy {cores:.2} cores = {:.0} µs CPU per request; load core {:.0} % busy{}",
                    cores / medians(setup).0.max(1.0) * 1e6,
                    load * 100.0,
                    if cores < ENVOY_BOUND {
                        " — **Envoy not saturated: something else loads the machine, rerun**"
                    } else {
                        ""
                    }
                ),
            );
        }
        let [a, b, c, d] = [0, 1, 2, 3].map(|i| medians(&th.setups[i]));
        let ba = paired_ratios(&th.setups[1], &th.setups[0]);
        let (median, low, high) = spread(&ba);
        t.row(
            "3",
            &format!(
                "req/s b/a (cluster routing against the floor), round by round: median (min–max) of {}",
                ba.len()
            ),
            format!("{median:.3} ({low:.3}–{high:.3})"),
            "≥ 0.95",
            ratio_verdict(&ba, 0.95),
        );
        let p99_gap = Duration::from_secs_f64((b.2 - a.2).max(0.0));
        t.row(
            "3",
            "p99 b − a",
            format!("{:+.0} µs", (b.2 - a.2) * 1e6),
            "≤ 50 µs",
            verdict(
                p99_gap <= Duration::from_micros(50),
                us(p99_gap.saturating_sub(Duration::from_micros(50))),
            ),
        );
        t.row(
            "3",
            "req/s d/a · p50 d − a · p99 d − a (host routing against the floor)",
            against(d, a),
            "",
            String::new(),
        );
        let db = paired_ratios(&th.setups[3], &th.setups[1]);
        let (median, low, high) = spread(&db);
        t.row(
            "3",
            "req/s d/b (host routing against cluster routing), round by round: median (min–max) · p50 d − b · p99 d − b",
            format!(
                "{median:.3} ({low:.3}–{high:.3}) · {}",
                gaps(d, b)
            ),
            "req/s ≥ 0.90",
            ratio_verdict(&db, 0.90),
        );
        t.row(
            "3",
            "req/s b/c · p50 b − c · p99 b − c",
            against(b, c),
            "",
            String::new(),
        );
        let slowest = th
            .setups
            .iter()
            .map(|s| medians(s).0)
            .fold(f64::INFINITY, f64::min);
        let fastest = th.setups.iter().map(|s| medians(s).0).fold(0.0, f64::max);
        let pinning = if th.pinned {
            "wrk + upstream on core 1, as in the rounds"
        } else {
            "unpinned (one core)"
        };
        for (what, run) in [
            ("the bench's upstream", &th.upstream_alone),
            ("the e2e fake upstream (ok mode)", &th.e2e_alone),
        ] {
            t.row(
                "3",
                &format!(
                    "bottleneck check: wrk -t{} -c{} straight at {what}, {pinning}",
                    th.wrk.threads, th.wrk.connections
                ),
                format!("{} req/s, p99 {}", n(run.rate.round() as u64), us(run.p99)),
                "≫ every setup",
                format!(
                    "{:.1}× the fastest setup, {:.1}× the slowest",
                    run.rate / fastest.max(1.0),
                    run.rate / slowest.max(1.0)
                ),
            );
        }
    }
}
