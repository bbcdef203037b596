//! The one table: every figure beside its target, each target marked met or missed (by how
//! much), never asserted. Rows are numbered by the brief's items: 1 size, 2 instructions,
//! 3 throughput, 4 memory, 5 probes, 6 detection, 7 start-up. A part not run (`--only`) has no
//! rows.
//!
//! The rows of each part are written in a module of their own: the wasmtime host's (items 2 and
//! 4, `host`), the throughput rounds' (item 3, `throughput`) and Envoy's start-up (item 7,
//! `start_up`); how a figure and a verdict read is `figures`'.

mod figures;
mod host;
mod start_up;
mod throughput;

use crate::detection;
use crate::effort::Effort;
use crate::inhost::HostFigures;
use crate::startup::StartUp;
use crate::throughput::Throughput;
use figures::{n, verdict};
use std::fmt;
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

/// Upper bound on upcheck.wasm after wasm-opt: 1 MiB.
const SIZE_TARGET: u64 = 1 << 20;

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
