//! The one table: every figure beside its target, each target marked met or missed (by how
//! much), never asserted. Rows are numbered by the brief's items: 1 size, 2 instructions,
//! 3 throughput, 4 memory, 5 probes, 6 detection, 7 start-up. A part not run (`--only`) has no
//! rows.

use crate::detection;
use crate::effort::Effort;
use crate::inhost::{total_calls, HostFigures, PerRequest, BACKENDS};
use crate::startup::{ModuleStarts, Start, StartUp, WORKERS};
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
    pub host: Option<HostFigures>,
    /// Item 3.
    pub throughput: Option<Throughput>,
    /// Item 7.
    pub start_up: Option<StartUp>,
    /// Item 5: probes per backend per interval at `--concurrency` 1, 2, 4.
    pub probes: Option<[f64; 3]>,
    /// Item 6.
    pub detection: Option<[detection::Outcome; 4]>,
    /// The counts the figures were measured with.
    pub effort: Effort,
    /// Wall time of the whole run.
    pub elapsed: Duration,
}

/// Functions shown in the per-function rows.
const TOP_FUNCTIONS: usize = 40;

/// Envoy's CPU use (cores) below which a setup was not limited by Envoy.
const ENVOY_BOUND: f64 = 0.9;

/// Upper bound on upcheck.wasm after wasm-opt: 1 MiB.
const SIZE_TARGET: u64 = 1 << 20;

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

/// Each request callback's fuel per request and, in brackets, its hostcalls per request.
fn per_callback(figures: &PerRequest) -> String {
    figures
        .fuel
        .callbacks
        .iter()
        .map(|(name, fuel)| {
            let hostcalls = figures
                .hostcalls
                .iter()
                .find(|(callback, _)| callback == name)
                .map(|(_, calls)| calls.as_slice())
                .unwrap_or_default();
            format!(
                "{} {} ({})",
                name.trim_start_matches("proxy_on_"),
                n(*fuel),
                calls(hostcalls)
            )
        })
        .collect::<Vec<_>>()
        .join(" · ")
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
        self.start_up(&mut t);
        let wall = format!("{:.0} s", self.elapsed.as_secs_f64());
        match &self.host {
            Some(host) => t.row(
                "",
                "wall time of this run (of which the host figures, run alongside 5 and 6)",
                format!("{wall} ({:.0} s)", host.elapsed.as_secs_f64()),
                "",
                String::new(),
            ),
            None => t.row("", "wall time of this run", wall, "", String::new()),
        }
        t
    }

    fn sizes(&self, t: &mut Table) {
        let Sizes { upcheck, floor } = self.sizes;
        t.row(
            "1",
            "upcheck.wasm size",
            format!("{} B", n(upcheck)),
            "≤ 1 MiB (1,048,576 B)",
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
        let Some(host) = &self.host else {
            return;
        };
        let per_count = |f: &dyn Fn(usize) -> String| -> String {
            BACKENDS
                .iter()
                .enumerate()
                .map(|(i, b)| format!("{}: {}", n(*b as u64), f(i)))
                .collect::<Vec<_>>()
                .join(" · ")
        };
        let floor = host.floor.fuel.total;
        let [cluster, routed_host] = [&host.routed[0].fuel.total, &host.routed[1].fuel.total];
        let two = host.requests[0].total;
        let thousand = host.requests[2].total;
        t.row(
            "2",
            "fuel per request, upcheck, cluster routing, by backends",
            per_count(&|i| n(host.requests[i].total)),
            "",
            String::new(),
        );
        t.row(
            "2",
            "fuel per request, upcheck (2 backends, deployed configuration: outlier detection on), cluster routing · host routing",
            format!("{} · {}", n(*cluster), n(*routed_host)),
            "",
            String::new(),
        );
        let off = host.detection_off.total;
        t.row(
            "2",
            "fuel per request, upcheck, cluster routing, outlier detection off (2 backends)",
            n(off),
            "≤ 5,684 (the request path before the pipeline and detection)",
            verdict(off <= 5_684, n(off.saturating_sub(5_684))),
        );
        t.row("2", "fuel per request, floor", n(floor), "", String::new());
        let ratio = *cluster as f64 / floor.max(1) as f64;
        t.row(
            "2",
            "fuel per request, upcheck cluster routing (2 backends) ÷ floor",
            format!("{ratio:.2}×"),
            "≤ 1.5×",
            verdict(
                ratio <= 1.5,
                format_args!(
                    "{:.2}× ({} instructions over 1.5×; per callback below)",
                    ratio - 1.5,
                    n(cluster.saturating_sub(floor * 3 / 2))
                ),
            ),
        );
        t.row(
            "2",
            "fuel per request, upcheck host routing (2 backends) ÷ floor · ÷ cluster routing",
            format!(
                "{:.2}× · {:.2}×",
                *routed_host as f64 / floor.max(1) as f64,
                *routed_host as f64 / (*cluster).max(1) as f64
            ),
            "",
            String::new(),
        );
        let growth = thousand as f64 / two.max(1) as f64;
        t.row(
            "2",
            "fuel per request, 1,000 ÷ 2 backends",
            format!("{growth:.3}×"),
            "≤ 1.2×",
            verdict(growth <= 1.2, format_args!("{:.3}×", growth - 1.2)),
        );
        for (what, figures) in [
            ("upcheck, cluster routing", &host.routed[0]),
            ("upcheck, host routing", &host.routed[1]),
            ("floor", &host.floor),
        ] {
            t.row(
                "2",
                &format!("… per callback, {what}: instructions (host calls)"),
                per_callback(figures),
                "",
                String::new(),
            );
            t.row(
                "2",
                &format!("… host calls per request, {what}"),
                calls(&total_calls(&figures.hostcalls)),
                "",
                String::new(),
            );
        }
        for (routing, spent) in ["cluster", "host"].iter().zip(&host.functions) {
            let total: f64 = spent.iter().map(|s| s.per_request).sum();
            let top: Vec<String> = spent
                .iter()
                .take(TOP_FUNCTIONS)
                .map(|s| format!("{} {:.0}", s.function, s.per_request))
                .collect();
            t.row(
                "2",
                &format!(
                    "where a request's instructions go, {routing} routing: the {TOP_FUNCTIONS} costliest functions, own instructions per request"
                ),
                top.join(" · "),
                "",
                format!("{total:.0} in all, with the allocations the host has the module make inside a request's hostcalls"),
            );
        }
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

    fn memory(&self, t: &mut Table) {
        let Some(host) = &self.host else {
            return;
        };
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
        let Some(probes) = self.probes else {
            return;
        };
        let figures: Vec<String> = [1, 2, 4]
            .iter()
            .zip(probes)
            .map(|(workers, p)| format!("{workers}: {p:.2}"))
            .collect();
        let (low, high) = (
            probes.iter().copied().fold(f64::INFINITY, f64::min),
            probes.iter().copied().fold(0.0, f64::max),
        );
        // A prober per VM would show 2 or more; a schedule that drifts shows up as a shortfall.
        let one_prober = (0.9..=1.1).contains(&low) && (0.9..=1.1).contains(&high);
        t.row(
            "5",
            &format!(
                "probes per backend per 1 s interval, by --concurrency ({} intervals)",
                self.effort.probe_intervals
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
        let Some(detection) = &self.detection else {
            return;
        };
        for outcome in detection {
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
                    self.effort.detection_length.as_secs(),
                    self.effort.detection_break_at.as_secs(),
                    detection::WORKERS,
                ),
                format!("{} of {} · {last}", report.failures(), report.requests()),
                "",
                format!("{:?}", report.outcomes()),
            );
        }
    }

    fn start_up(&self, t: &mut Table) {
        let Some(start_up) = &self.start_up else {
            return;
        };
        let [floor, upcheck] = &start_up.modules;
        let by_workers = |starts: &ModuleStarts, get: fn(&Start) -> f64| -> [(f64, f64, f64); 2] {
            [0, 1].map(|i| spread(&starts.by_workers[i].iter().map(get).collect::<Vec<_>>()))
        };
        let ready = |s: &Start| s.ready.as_secs_f64() * 1e3;
        let cpu = |s: &Start| s.cpu.as_secs_f64() * 1e3;
        let compile = |s: &Start| s.compile.as_secs_f64() * 1e3;
        let worker_cpu = |s: &Start| s.worker_cpu.as_secs_f64() * 1e3;
        let resident = |s: &Start| s.resident as f64 / f64::from(1 << 20);
        for (what, get, decimals) in [
            (READY, ready as fn(&Start) -> f64, 0),
            ("Envoy's CPU time (all threads) at /ready", cpu, 0),
            (
                "a worker thread's CPU time at /ready (its VM and its start)",
                worker_cpu,
                2,
            ),
        ] {
            let floor_medians = by_workers(floor, get).map(|(median, _, _)| median);
            for starts in [floor, upcheck] {
                let medians = by_workers(starts, get);
                let figures: Vec<String> = WORKERS
                    .iter()
                    .zip(medians)
                    .map(|(workers, (median, min, max))| {
                        format!(
                            "{workers}: {median:.decimals$} ms ({min:.decimals$}–{max:.decimals$})"
                        )
                    })
                    .collect();
                let mut notes = Vec::new();
                if std::ptr::eq(starts, upcheck) {
                    let gaps: Vec<String> = medians
                        .iter()
                        .zip(floor_medians)
                        .map(|((median, _, _), floor)| format!("{:+.decimals$}", median - floor))
                        .collect();
                    notes.push(format!("upcheck − floor: {} ms", gaps.join(" · ")));
                }
                if what == READY {
                    notes.push(format!("VMs created by /ready: {}", vms_created(starts)));
                }
                t.row(
                    "7",
                    &format!(
                        "start-up, {}: {what}, by --concurrency, median (min–max) of {}",
                        starts.name, self.effort.start_up_repeats
                    ),
                    figures.join(" · "),
                    "",
                    notes.join("; "),
                );
            }
        }
        // The base VM's compile does not depend on the workers: every start of a module counts.
        let all = |starts: &ModuleStarts| -> f64 {
            let values: Vec<f64> = starts.by_workers.iter().flatten().map(compile).collect();
            spread(&values).0
        };
        let (floor_compile, upcheck_compile) = (all(floor), all(upcheck));
        t.row(
            "7",
            &format!(
                "start-up: base VM load + compile + start, once per process (Envoy's log, main thread), median of {}",
                2 * self.effort.start_up_repeats
            ),
            format!("floor {floor_compile:.0} ms · upcheck {upcheck_compile:.0} ms"),
            "",
            format!("upcheck − floor {:+.0} ms", upcheck_compile - floor_compile),
        );
        // Per worker: the medians' difference between 4 workers and 1, over the 3 added.
        let added = f64::from(WORKERS[1] - WORKERS[0]);
        let per_worker = |starts: &ModuleStarts, get: fn(&Start) -> f64| -> f64 {
            let [one, four] = by_workers(starts, get);
            (four.0 - one.0) / added
        };
        let (floor_wall, floor_cpu) = (per_worker(floor, ready), per_worker(floor, cpu));
        let (upcheck_wall, upcheck_cpu) = (per_worker(upcheck, ready), per_worker(upcheck, cpu));
        t.row(
            "7",
            &format!(
                "start-up per worker VM: (--concurrency {} − {}) ÷ {added:.0} of the medians, wall · CPU",
                WORKERS[1], WORKERS[0]
            ),
            format!(
                "floor {floor_wall:+.1} · {floor_cpu:+.1} ms · upcheck {upcheck_wall:+.1} · {upcheck_cpu:+.1} ms"
            ),
            "",
            format!(
                "upcheck − floor {:+.1} · {:+.1} ms (CPU time is counted in 10 ms ticks)",
                upcheck_wall - floor_wall,
                upcheck_cpu - floor_cpu
            ),
        );
        let (floor_one, upcheck_one) = (by_workers(floor, resident), by_workers(upcheck, resident));
        let (floor_vm, upcheck_vm) = (per_worker(floor, resident), per_worker(upcheck, resident));
        t.row(
            "7",
            &format!(
                "memory: Envoy's resident set at /ready, --concurrency {} · per worker VM ((--concurrency {} − {}) ÷ {added:.0})",
                WORKERS[0], WORKERS[1], WORKERS[0]
            ),
            format!(
                "floor {:.1} · {floor_vm:+.2} MiB · upcheck {:.1} · {upcheck_vm:+.2} MiB",
                floor_one[0].0, upcheck_one[0].0
            ),
            "",
            format!(
                "upcheck − floor: {:+.1} MiB per process, {:+.2} MiB per VM",
                upcheck_one[0].0 - floor_one[0].0,
                upcheck_vm - floor_vm
            ),
        );
    }
}

/// The start-up row of the wall time to readiness.
const READY: &str = "spawn → admin /ready";

/// The VMs Envoy had created by `/ready`, by [`WORKERS`]: one count, or a range if starts differ.
fn vms_created(starts: &ModuleStarts) -> String {
    let counts: Vec<String> = starts
        .by_workers
        .iter()
        .map(|runs| {
            let low = runs.iter().map(|s| s.vms).min().unwrap_or(0);
            let high = runs.iter().map(|s| s.vms).max().unwrap_or(0);
            if low == high {
                low.to_string()
            } else {
                format!("{low}–{high}")
            }
        })
        .collect();
    counts.join(" · ")
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Machine: {}", self.machine)?;
        if self.effort.quick {
            writeln!(
                f,
                "Quick run (--quick): every part ran once, briefly; these figures measure nothing."
            )?;
        }
        writeln!(f)?;
        writeln!(f, "| # | measure | figure | target | verdict / notes |")?;
        writeln!(f, "| --- | --- | --- | --- | --- |")?;
        for row in self.table().0 {
            writeln!(f, "| {} |", row.join(" | "))?;
        }
        Ok(())
    }
}
