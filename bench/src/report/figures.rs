//! How the table writes a figure and a verdict, and the one statistic every part's rows take of
//! repeated runs.

use std::fmt::Display;
use std::time::Duration;

/// A target's verdict.
pub(super) fn verdict(met: bool, missed_by: impl Display) -> String {
    if met {
        "met".to_owned()
    } else {
        format!("**missed** by {missed_by}")
    }
}

/// Thousands separated by commas: 1,000,000.
pub(super) fn n(value: u64) -> String {
    let mut groups = Vec::new();
    let mut rest = value;
    while rest >= 1000 {
        groups.push(format!("{:03}", rest % 1000));
        rest /= 1000;
    }
    groups.push(rest.to_string());
    groups.reverse();
    groups.join(",")
}

pub(super) fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// Median, minimum and maximum of `values`.
pub(super) fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = match sorted.len() {
        0 => 0.0,
        len if len % 2 == 1 => sorted[len / 2],
        len => (sorted[len / 2 - 1] + sorted[len / 2]) / 2.0,
    };
    let min = sorted.first().copied().unwrap_or(0.0);
    let max = sorted.last().copied().unwrap_or(0.0);
    (median, min, max)
}
