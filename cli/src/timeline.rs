//! The story of a simulated run, as text: what changed (the scenario's own changes and the
//! module's log lines: health changes with their reasons, ejections, the pool guard) at the
//! instant it changed, and what users saw each second (requests, failed and slow ones, per
//! backend), with a total at the end. Two runs of the same scenario print side by side.
//!
//! Seconds where nobody failed, nobody waited and nothing changed are folded into one row with
//! their totals (`6-59s`), so a ten-minute scenario reads in a screen; `every_second` unfolds
//! them.

use std::fmt::Write as _;
use std::time::Duration;

use upcheck_policy::duration;

use crate::scenario::{describe, Scenario};
use crate::simulation::{Run, UserRequest};

/// One run to show, under a label (`A`, `B`) when shown beside another.
pub struct Shown<'a> {
    /// The column label; empty when alone.
    pub label: &'a str,
    /// What it did.
    pub run: &'a Run,
}

/// Requests, failed and slow, of one backend over one stretch of time.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Requests sent in the stretch.
    pub requests: u64,
    /// Of those, failed.
    pub failed: u64,
    /// Of those, slow.
    pub slow: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.requests += other.requests;
        self.failed += other.failed;
        self.slow += other.slow;
    }

    fn count(&mut self, request: &UserRequest) {
        self.add(Tally {
            requests: 1,
            failed: u64::from(request.failed),
            slow: u64::from(request.slow),
        });
    }

    fn troubled(&self) -> bool {
        self.failed > 0 || self.slow > 0
    }
}

/// What one run's users saw, per second and per column: the scenario's backends in order, then
/// `proxy` (answered without reaching a backend) when some were.
struct Grid {
    /// `[second][column]`.
    seconds: Vec<Vec<Tally>>,
}

impl Grid {
    fn new(run: &Run, columns: usize, seconds: usize) -> Grid {
        let mut grid = Grid {
            seconds: vec![vec![Tally::default(); columns]; seconds],
        };
        for request in &run.requests {
            let second = second_of(request.sent);
            let column = request.backend.unwrap_or(columns - 1);
            if let Some(tally) = grid.seconds.get_mut(second).and_then(|s| s.get_mut(column)) {
                tally.count(request);
            }
        }
        grid
    }

    fn total(&self, seconds: std::ops::Range<usize>) -> Vec<Tally> {
        let mut total = vec![Tally::default(); self.seconds.first().map_or(0, Vec::len)];
        for second in &self.seconds[seconds] {
            for (sum, tally) in total.iter_mut().zip(second) {
                sum.add(*tally);
            }
        }
        total
    }
}

fn second_of(at: Duration) -> usize {
    usize::try_from(at.as_secs()).unwrap_or(usize::MAX)
}

/// Something that happened at an instant, for the timeline.
struct Change {
    at: Duration,
    text: String,
}

/// The scenario's own changes: backends joining, answers changing.
fn scenario_changes(scenario: &Scenario) -> Vec<Change> {
    let mut changes = Vec::new();
    for backend in &scenario.backends {
        if let Some(at) = backend.added {
            changes.push(Change {
                at,
                text: format!(
                    "scenario: {} joins the configuration (up {}, pages {})",
                    backend.name,
                    describe(&backend.up),
                    describe(&backend.pages)
                ),
            });
        }
        for change in &backend.changes {
            let parts: Vec<String> = [("up", &change.up), ("pages", &change.pages)]
                .into_iter()
                .filter_map(|(what, b)| b.as_ref().map(|b| format!("{what} {}", describe(b))))
                .collect();
            changes.push(Change {
                at: change.at,
                text: format!(
                    "scenario: {} now answers {}",
                    backend.name,
                    parts.join(", ")
                ),
            });
        }
    }
    changes
}

/// The whole timeline of `shown` (one run, or two of the same scenario side by side).
pub fn render(scenario: &Scenario, shown: &[Shown], every_second: bool) -> String {
    let mut changes = scenario_changes(scenario);
    for one in shown {
        let tag = if one.label.is_empty() {
            String::new()
        } else {
            format!("[{}] ", one.label)
        };
        changes.extend(one.run.log.iter().map(|(at, message)| Change {
            at: *at,
            text: format!("{tag}{message}"),
        }));
    }
    // Stable: the scenario's change comes before what the module made of it.
    changes.sort_by_key(|change| change.at);

    let unrouted = shown
        .iter()
        .any(|one| one.run.requests.iter().any(|r| r.backend.is_none()));
    let mut names: Vec<&str> = scenario.backends.iter().map(|b| b.name.as_str()).collect();
    if unrouted {
        names.push("proxy");
    }
    let last_request = shown
        .iter()
        .flat_map(|one| one.run.requests.iter().map(|r| second_of(r.sent)))
        .max();
    let seconds = last_request.map_or(0, |last| last + 1);
    let grids: Vec<Grid> = shown
        .iter()
        .map(|one| Grid::new(one.run, scenario.backends.len() + 1, seconds))
        .collect();
    let width = names.len();

    let mut out = String::new();
    header(&mut out, shown, &names);
    let mut pending = changes.iter().peekable();
    let mut quiet_from: Option<usize> = None;
    for second in 0..seconds {
        let end = Duration::from_secs(second as u64 + 1);
        let eventful = pending.peek().is_some_and(|change| change.at < end);
        let troubled = grids
            .iter()
            .any(|grid| grid.seconds[second][..width].iter().any(Tally::troubled));
        if !every_second && !eventful && !troubled {
            quiet_from.get_or_insert(second);
            continue;
        }
        if let Some(from) = quiet_from.take() {
            row(&mut out, &span(from, second), &grids, from..second, width);
        }
        while let Some(change) = pending.next_if(|change| change.at < end) {
            let _ = writeln!(out, "  {:>9}  {}", at(change.at), change.text);
        }
        row(
            &mut out,
            &span(second, second + 1),
            &grids,
            second..second + 1,
            width,
        );
    }
    if let Some(from) = quiet_from {
        row(&mut out, &span(from, seconds), &grids, from..seconds, width);
    }
    for change in pending {
        let _ = writeln!(out, "  {:>9}  {}", at(change.at), change.text);
    }
    rule(&mut out, shown.len(), width);
    row(&mut out, "total", &grids, 0..seconds, width);
    for (one, grid) in shown.iter().zip(&grids) {
        let total = grid.total(0..seconds);
        let per_backend: Vec<String> = names
            .iter()
            .zip(&total)
            .map(|(name, t)| {
                format!(
                    "{name} {} requests, {} failed, {} slow",
                    t.requests, t.failed, t.slow
                )
            })
            .collect();
        let label = if one.label.is_empty() {
            String::new()
        } else {
            format!("{}: ", one.label)
        };
        let _ = writeln!(out, "{label}{}", per_backend.join("; "));
    }
    out
}

/// Columns of one backend: requests, failed, slow.
const CELL: usize = 18;

fn header(out: &mut String, shown: &[Shown], names: &[&str]) {
    let mut groups = String::new();
    let mut fields = String::new();
    for one in shown {
        for name in names {
            let title = if one.label.is_empty() {
                name.to_string()
            } else {
                format!("{} {name}", one.label)
            };
            let _ = write!(groups, "  {title:>CELL$}");
            let _ = write!(fields, "  {:>CELL$}", "req  fail  slow");
        }
    }
    let _ = writeln!(out, "  {:>9}{groups}", "");
    let _ = writeln!(out, "  {:>9}{fields}", "time");
}

fn rule(out: &mut String, runs: usize, width: usize) {
    let _ = writeln!(out, "  {}", "-".repeat(9 + runs * width * (CELL + 2)));
}

fn row(
    out: &mut String,
    label: &str,
    grids: &[Grid],
    seconds: std::ops::Range<usize>,
    width: usize,
) {
    let _ = write!(out, "  {label:>9}");
    for grid in grids {
        for tally in &grid.total(seconds.clone())[..width] {
            let cell = format!("{:>6}{:>6}{:>6}", tally.requests, tally.failed, tally.slow);
            let _ = write!(out, "  {cell:>CELL$}");
        }
    }
    out.push('\n');
}

/// `12s` for one second, `6-59s` for several.
fn span(from: usize, to: usize) -> String {
    if to == from + 1 {
        format!("{from}s")
    } else {
        format!("{from}-{}s", to - 1)
    }
}

/// An instant, to the millisecond.
fn at(at: Duration) -> String {
    format!("{:.3}s", at.as_secs_f64())
}

/// How a scenario reads in one line: its pace and length.
pub fn pace(scenario: &Scenario) -> String {
    format!(
        "{} requests a second for {}",
        scenario.rate,
        duration::display(scenario.duration)
    )
}
