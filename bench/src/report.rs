//! The one table: every figure beside its target, each target marked met or missed (by how
//! much), never asserted. Rows are numbered by the brief's items: 1 size, 2 instructions,
//! 3 throughput, 4 memory, 5 probes, 6 detection.

use crate::detection;
use crate::inhost::{HostFigures, RequestFuel, RoutedFigures, Routing, BACKENDS};
use crate::throughput::{Setup, Throughput};
use std::fmt::{self, Display};
use std::time::Duration;

/// Sizes of the modules as shipped, in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// upcheck.wasm.
    pub upcheck: u64,
    /// The floor filter.
    pub floor: u64,
}

/// Everything measured in one run.
pub struct Report {
    /// `nproc`, CPU model, kernel.
    pub machine: String,
    /// Item 1.
    pub sizes: Sizes,
    /// Items 2 and 4.
    pub host: HostFigures,
    /// Item 3.
    pub throughput: Throughput,
    /// Item 5: probes per backend per interval at `--concurrency` 1, 2, 4.
    pub probes: [f64; 3],
    /// Item 6.
    pub detection: [detection::Outcome; 4],
    /// Wall time of the whole run.
    pub elapsed: Duration,
}

/// Envoy's CPU use (cores) below which a setup was not limited by Envoy.
const ENVOY_BOUND: f64 = 0.9;

/// Upper bound on upcheck.wasm: 150 KiB.
const SIZE_TARGET: u64 = 150 * 1024;

/// A target's verdict.
fn verdict(met: bool, missed_by: impl Display) -> String {
    if met {
        "met".to_owned()
    } else {
        format!("**missed** by {missed_by}")
    }
}

/// Thousands separated by commas: 1,000,000.
fn n(value: u64) -> String {
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

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// Median, minimum and maximum of `values`.
fn spread(values: &[f64]) -> (f64, f64, f64) {
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

/// Median req/s, p50 and p99 (seconds) of a setup.
/// Setup `x` against setup `y`, both as [`medians`]: the req/s ratio, the p50 and p99 gaps.
fn against(x: (f64, f64, f64), y: (f64, f64, f64)) -> String {
    format!(
        "{:.3} · {:+.0} µs · {:+.0} µs",
        x.0 / y.0.max(1.0),
        (x.1 - y.1) * 1e6,
        (x.2 - y.2) * 1e6
    )
}

fn medians(setup: &Setup) -> (f64, f64, f64) {
    let of =
        |f: fn(&crate::wrk::Run) -> f64| spread(&setup.runs.iter().map(f).collect::<Vec<_>>()).0;
    (
        of(|r| r.rate),
        of(|r| r.p50.as_secs_f64()),
        of(|r| r.p99.as_secs_f64()),
    )
}

/// `median (min–max)` of one field of the runs, formatted by `show`.
fn field(setup: &Setup, get: fn(&crate::wrk::Run) -> f64, show: fn(f64) -> String) -> String {
    let (median, min, max) = spread(&setup.runs.iter().map(get).collect::<Vec<_>>());
    format!("{} ({}–{})", show(median), show(min), show(max))
}

/// Hostcalls as `name ×count`, without the `env.proxy_` prefix.
fn calls(profile: &[(String, f64)]) -> String {
    let list: Vec<String> = profile
        .iter()
        .map(|(name, count)| {
            let short = name.trim_start_matches("env.").trim_start_matches("proxy_");
            format!("{short} ×{count:.2}").replace(".00", "")
        })
        .collect();
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

/// Fuel per request in each callback, in order.
fn per_callback(fuel: &RequestFuel) -> String {
    fuel.callbacks
        .iter()
        .map(|(name, fuel)| format!("{} {}", name.trim_start_matches("proxy_on_"), n(*fuel)))
        .collect::<Vec<_>>()
        .join(", ")
}

struct Table(Vec<[String; 5]>);

impl Table {
    fn row(&mut self, item: &str, what: &str, figure: String, target: &str, verdict: String) {
        self.0.push([
            item.to_owned(),
            what.to_owned(),
            figure,
            target.to_owned(),
            verdict,
        ]);
    }
}

impl Report {
    fn table(&self) -> Table {
        let mut t = Table(Vec::new());
        self.sizes(&mut t);
        self.instructions(&mut t);
        self.throughput(&mut t);
        self.memory(&mut t);
        self.probes(&mut t);
        self.detection(&mut t);
        t.row(
            "",
            "wall time of this run (of which the host figures, run alongside 5 and 6)",
            format!(
                "{:.0} s ({:.0} s)",
                self.elapsed.as_secs_f64(),
                self.host.elapsed.as_secs_f64()
            ),
            "",
            String::new(),
        );
        t
    }

    fn sizes(&self, t: &mut Table) {
        let Sizes { upcheck, floor } = self.sizes;
        t.row(
            "1",
            "upcheck.wasm size",
            format!("{} B", n(upcheck)),
            "≤ 150 KiB (153,600 B)",
            verdict(
                upcheck <= SIZE_TARGET,
                format_args!(
                    "{} B (+{:.0} %)",
                    n(upcheck.saturating_sub(SIZE_TARGET)),
                    (upcheck as f64 / SIZE_TARGET as f64 - 1.0) * 100.0
                ),
            ),
        );
        t.row(
            "1",
            "floor.wasm size",
            format!("{} B", n(floor)),
            "",
            String::new(),
        );
    }

    fn instructions(&self, t: &mut Table) {
        let host = &self.host;
        let per_count = |f: &dyn Fn(usize) -> String| -> String {
            BACKENDS
                .iter()
                .enumerate()
                .map(|(i, b)| format!("{}: {}", n(*b as u64), f(i)))
                .collect::<Vec<_>>()
                .join(" · ")
        };
        let floor = host.floor.total;
        let two = host.requests[0].total;
        let thousand = host.requests[2].total;
        t.row(
            "2",
            "fuel per request, upcheck, by backends",
            per_count(&|i| n(host.requests[i].total)),
            "",
            String::new(),
        );
        t.row(
            "2",
            "fuel per request, upcheck (2 backends) with the status page off",
            n(host.no_status_page.total),
            "",
            String::new(),
        );
        t.row("2", "fuel per request, floor", n(floor), "", String::new());
        let ratio = two as f64 / floor.max(1) as f64;
        t.row(
            "2",
            "fuel per request, upcheck (2 backends) ÷ floor",
            format!("{ratio:.2}×"),
            "≤ 2×",
            verdict(
                ratio <= 2.0,
                format_args!(
                    "{:.2}× ({} instructions over 2×)",
                    ratio - 2.0,
                    n(two.saturating_sub(2 * floor))
                ),
            ),
        );
        let growth = thousand as f64 / two.max(1) as f64;
        t.row(
            "2",
            "fuel per request, 1,000 ÷ 2 backends",
            format!("{growth:.3}×"),
            "≤ 1.2×",
            verdict(growth <= 1.2, format_args!("{:.3}×", growth - 1.2)),
        );
        t.row(
            "2",
            "… per callback, upcheck (2 backends)",
            per_callback(&host.requests[0]),
            "",
            String::new(),
        );
        t.row(
            "2",
            "… per callback, floor",
            per_callback(&host.floor),
            "",
            String::new(),
        );
        t.row(
            "2",
            "… hostcalls per request, upcheck (2 backends)",
            calls(&host.hostcalls),
            "",
            String::new(),
        );
        t.row(
            "2",
            "… hostcalls per request, floor",
            calls(&host.floor_hostcalls),
            "",
            String::new(),
        );
        t.row(
            "2",
            "fuel per probe round per backend (on_tick + on_http_call_response ÷ probes, idle ticks included)",
            per_count(&|i| n(host.probes[i].per_backend_round)),
            "",
            String::new(),
        );
        t.row(
            "2",
            "… of which probing (idle tick cost × ticks taken out)",
            per_count(&|i| n(host.probes[i].probing_per_backend)),
            "",
            String::new(),
        );
        t.row(
            "2",
            "fuel per tick when nothing is due (any VM)",
            per_count(&|i| n(host.probes[i].idle_tick)),
            "",
            String::new(),
        );
    }

    fn throughput(&self, t: &mut Table) {
        let th = &self.throughput;
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
        let ba = b.0 / a.0.max(1.0);
        t.row(
            "3",
            "req/s b/a",
            format!("{ba:.3}"),
            "≥ 0.95",
            verdict(ba >= 0.95, format_args!("{:.3}", 0.95 - ba)),
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
            "req/s d/b · p50 d − b · p99 d − b (host routing against cluster routing)",
            against(d, b),
            "",
            String::new(),
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

    fn memory(&self, t: &mut Table) {
        let host = &self.host;
        for (backends, run) in BACKENDS.iter().zip(&host.memory) {
            t.row(
                "4",
                &format!(
                    "linear memory, {} backends: pages after warm-up → after {} requests and {} probe rounds",
                    n(*backends as u64),
                    n(run.requests),
                    n(run.rounds)
                ),
                format!(
                    "{} → {} pages ({} KiB)",
                    run.warm_pages,
                    run.end_pages,
                    n(run.end_pages * 64)
                ),
                "flat",
                verdict(
                    run.end_pages <= run.warm_pages,
                    format_args!("{} pages", run.end_pages.saturating_sub(run.warm_pages)),
                ),
            );
        }
    }

    fn probes(&self, t: &mut Table) {
        let figures: Vec<String> = [1, 2, 4]
            .iter()
            .zip(self.probes)
            .map(|(workers, p)| format!("{workers}: {p:.2}"))
            .collect();
        let (low, high) = (
            self.probes.iter().copied().fold(f64::INFINITY, f64::min),
            self.probes.iter().copied().fold(0.0, f64::max),
        );
        // A prober per VM would show 2 or more; a schedule that drifts shows up as a shortfall.
        let one_prober = (0.9..=1.1).contains(&low) && (0.9..=1.1).contains(&high);
        t.row(
            "5",
            &format!(
                "probes per backend per 1 s interval, by --concurrency ({} intervals)",
                crate::probes::INTERVALS
            ),
            figures.join(" · "),
            "1 (one prober, not one per VM)",
            verdict(
                one_prober,
                format_args!("{low:.2}–{high:.2} (±10 % allowed)"),
            ),
        );
    }

    fn detection(&self, t: &mut Table) {
        for outcome in &self.detection {
            let report = &outcome.report;
            let last = outcome
                .last_failure_after_break()
                .map_or_else(|| "-".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()));
            t.row(
                "6",
                &format!(
                    "{}: failed requests of all · last failure after the break ({} req/s × {} s, break at {} s, --concurrency {})",
                    outcome.case.label(),
                    detection::RATE,
                    detection::DURATION.as_secs(),
                    detection::BREAK_AT.as_secs(),
                    detection::WORKERS,
                ),
                format!("{} of {} · {last}", report.failures(), report.requests()),
                "",
                format!("{:?}", report.outcomes()),
            );
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Machine: {}", self.machine)?;
        writeln!(f)?;
        writeln!(f, "| # | measure | figure | target | verdict / notes |")?;
        writeln!(f, "| --- | --- | --- | --- | --- |")?;
        for row in self.table().0 {
            writeln!(f, "| {} |", row.join(" | "))?;
        }
        Ok(())
    }
}

/// The per-request figures alone (`--only fuel`), 2 backends: one row per module and routing.
pub struct RequestReport(pub Vec<(&'static str, RoutedFigures)>);

impl fmt::Display for RequestReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| module | routing | fuel per request | per callback | hostcalls per request |"
        )?;
        writeln!(f, "| --- | --- | --- | --- | --- |")?;
        for (module, figures) in &self.0 {
            let routing = match figures.routing {
                Routing::Cluster => "cluster",
                Routing::Host => "host",
            };
            writeln!(
                f,
                "| {module} | {routing} | {} | {} | {} |",
                n(figures.fuel.total),
                per_callback(&figures.fuel),
                calls(&figures.hostcalls)
            )?;
        }
        Ok(())
    }
}
