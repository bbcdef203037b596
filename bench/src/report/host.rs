//! The rows of the wasmtime host's figures: instructions per request and per probe round
//! (item 2) and linear memory over a long run (item 4).

use super::figures::{n, verdict};
use super::{Report, Table};
use crate::inhost::{total_calls, PerRequest, BACKENDS};

/// Functions shown in the per-function rows.
const TOP_FUNCTIONS: usize = 40;

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

impl Report {
    pub(super) fn instructions(&self, t: &mut Table) {
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

    pub(super) fn memory(&self, t: &mut Table) {
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
}
