//! The rows of Envoy's start-up with each module (item 7): time to readiness, CPU time, the
//! base VM's compile, and what each worker VM adds in time and memory.

use super::figures::spread;
use super::{Report, Table};
use crate::startup::{ModuleStarts, Start, WORKERS};

impl Report {
    pub(super) fn start_up(&self, t: &mut Table) {
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
