//! The module's metrics in Prometheus' text exposition format (version 0.0.4), served at
//! [`METRICS_PATH`] on the status page's listener, so that a host with no metrics endpoint of its
//! own (NGINX with ngx_wasm_module keeps the module's metrics to itself) is scraped as Envoy's
//! `/stats/prometheus` is, and one alert file and one dashboard serve both hosts.
//!
//! The series are exactly the ones Envoy shows once its `stats_tags` ([`crate::series`]) have
//! made labels of the pool, the backend and the state: the same names, types and labels, each
//! family under one `# TYPE` line, counters first, then gauges, each family's series in the order
//! of their Envoy names, and a series with no label written `name{}`, all as Envoy writes them.
//! The values are the host's own: the adapter reads each of the module's metrics back from the
//! host (`proxy_get_metric`), which keeps them process-wide (Envoy's stat store sums a counter's
//! increments from every VM; ngx_wasm_module's shared memory does the same over workers), so a
//! counter is the total over every worker, as a scrape of Envoy shows it, and a gauge is what the
//! prober last wrote. The fleet's gauges are the prober's record
//! of the fleet as shared with every VM ([`Shown`]), from which the prober sets them.
//!
//! What the module cannot show: Envoy's own stats of the VM (`envoy_wasm_upcheck_vm_reload*`),
//! which are Envoy's, not the module's; and a metric the host would not read back, left out
//! rather than shown as a value nobody measured. As on Envoy, `requests` lags by up to a tick
//! (each VM adds its count to the host's counter once a tick).

use crate::etcd::shown::{Holder, Shown};
use crate::pool::Pool;
use crate::series::{self, Aggregate, Metric, BACKEND_METRICS};
use crate::state::State;
use std::fmt::Write;

/// The path the metrics are served at, on the status page's listener.
pub const METRICS_PATH: &str = "/upcheck/metrics";

/// The `content-type` of the text exposition format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One of the module's metrics, whose value the adapter reads back from the host by its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    /// A per-backend metric ([`BACKEND_METRICS`]) of the backend at this index in the pool.
    Backend(usize, Metric),
    /// The gauge that is 1 while the backend at this index is in this state.
    State(usize, State),
    /// A pool-wide metric: [`series::POOL_GUARD`], [`series::POOL_GUARD_DEPRECATED`] or
    /// [`series::RETRIES_REFUSED`].
    Pool(&'static str),
}

/// A family of series: one metric name, its `# TYPE`, and where each series' value comes from.
#[derive(Debug, Clone, Copy)]
enum Family {
    /// One per backend.
    Backend(Metric),
    /// `upcheck_state{backend, state}`.
    State,
    /// A pool-wide metric, read from the host.
    Pool(&'static str, Aggregate),
    /// A fleet gauge of the pool, from the shown record.
    Fleet(&'static str),
    /// `upcheck_probe_duty{backend}`, from the shown record.
    Duty,
}

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Backend(metric) => metric.name,
            Family::State => "state",
            Family::Pool(name, _) | Family::Fleet(name) => name,
            Family::Duty => series::PROBE_DUTY,
        }
    }

    fn kind(self) -> Aggregate {
        match self {
            Family::Backend(metric) => metric.kind,
            Family::Pool(_, kind) => kind,
            Family::State | Family::Fleet(_) | Family::Duty => Aggregate::Gauge,
        }
    }
}

/// Every family the module shows; the fleet's only with a fleet shown, the watch's only while it
/// follows etcd with one. Counters first, then gauges, each kind by name.
fn families(fleet: Option<&Shown>) -> Vec<Family> {
    let mut all: Vec<Family> = BACKEND_METRICS
        .iter()
        .copied()
        .map(Family::Backend)
        .collect();
    all.extend([
        Family::State,
        Family::Pool(series::POOL_GUARD, Aggregate::Gauge),
        Family::Pool(series::POOL_GUARD_DEPRECATED, Aggregate::Gauge),
        Family::Pool(series::RETRIES_REFUSED, Aggregate::Counter),
    ]);
    if let Some(fleet) = fleet {
        all.extend([
            Family::Fleet(series::FLEET_LOCAL),
            Family::Fleet(series::FLEET_BALANCERS),
            Family::Duty,
        ]);
        if fleet.watching().is_some() {
            all.extend(
                [
                    series::FLEET_WATCH,
                    series::FLEET_REVISION,
                    series::FLEET_WATCH_EVENTS,
                    series::FLEET_RESYNCS,
                ]
                .map(Family::Fleet),
            );
        }
    }
    all.sort_by_key(|f| (f.kind() == Aggregate::Gauge, f.name()));
    all
}

/// The value of a fleet gauge as the prober sets it from `shown`.
fn fleet_gauge(shown: &Shown, name: &str) -> Option<u64> {
    let watching = shown.watching();
    match name {
        series::FLEET_LOCAL => Some(u64::from(shown.local())),
        series::FLEET_BALANCERS => Some(shown.balancers()),
        series::FLEET_WATCH => watching.map(|w| u64::from(w.live)),
        series::FLEET_REVISION => watching.map(|w| w.revision),
        series::FLEET_WATCH_EVENTS => watching.map(|w| w.events),
        series::FLEET_RESYNCS => watching.map(|w| w.resyncs),
        _ => None,
    }
}

/// The pool's metrics in Prometheus' text format: every series Envoy's `/stats/prometheus` shows
/// of the module, each value read by `read` (`None`: the series is left out), the fleet's gauges
/// from `fleet`, the prober's shown record, when the pool has one.
pub fn prometheus<H>(
    pool: &Pool<H>,
    fleet: Option<&Shown>,
    mut read: impl FnMut(Stat) -> Option<u64>,
) -> String {
    let named = pool.config().pool.as_deref();
    let mut out = String::new();
    // Each family's series, each with the part of its Envoy name after the pool's: Envoy lists
    // a family's series in the order of their names.
    let mut lines: Vec<(String, String)> = Vec::new();
    for family in families(fleet) {
        lines.clear();
        let name = family.name();
        let mut line = |stat: String, labels: &[(&str, &str)], value: Option<u64>| {
            if let Some(value) = value {
                let mut text = String::new();
                sample(&mut text, name, named, labels, value);
                lines.push((stat, text));
            }
        };
        match family {
            Family::Backend(metric) => {
                for (i, m) in pool.members().iter().enumerate() {
                    let stat = format!("{}.{name}", m.name());
                    line(
                        stat,
                        &[("backend", m.name())],
                        read(Stat::Backend(i, metric)),
                    );
                }
            }
            Family::State => {
                for (i, m) in pool.members().iter().enumerate() {
                    for state in State::ALL {
                        let stat = format!("{}.state_{}", m.name(), state.as_str());
                        let labels = [("backend", m.name()), ("state", state.as_str())];
                        line(stat, &labels, read(Stat::State(i, state)));
                    }
                }
            }
            Family::Pool(name, _) => line(String::new(), &[], read(Stat::Pool(name))),
            Family::Fleet(name) => {
                line(String::new(), &[], fleet.and_then(|f| fleet_gauge(f, name)));
            }
            Family::Duty => {
                for m in pool.members() {
                    let here = fleet.map(|f| matches!(f.holder(&m.key), Some(Holder::Here)));
                    let stat = format!("{}.{name}", m.name());
                    line(stat, &[("backend", m.name())], here.map(u64::from));
                }
            }
        }
        if !lines.is_empty() {
            let kind = match family.kind() {
                Aggregate::Counter => "counter",
                Aggregate::Gauge => "gauge",
            };
            let _ = writeln!(out, "# TYPE {}_{name} {kind}", series::ROOT);
            lines.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            for (_, text) in &lines {
                out.push_str(text);
            }
        }
    }
    out
}

/// One sample's line onto `out`: `upcheck_<name>{pool="…",labels…} value`, `{}` with no label
/// as Envoy writes it.
fn sample(out: &mut String, name: &str, pool: Option<&str>, labels: &[(&str, &str)], value: u64) {
    let _ = write!(out, "{}_{name}{{", series::ROOT);
    let pool = pool.map(|p| ("pool", p));
    for (n, (label, value)) in pool.iter().chain(labels).enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(label);
        out.push_str("=\"");
        escape(out, value);
        out.push('"');
    }
    let _ = writeln!(out, "}} {value}");
}

/// A label's value onto `out`, escaped as the format asks: a backslash, a double quote and a line
/// feed as `\\`, `\"` and `\n`. (Backend and pool names are validated to need none of it.)
fn escape(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{fleet, fleet_watching, pool};
    use super::*;
    use crate::etcd::shown::Watching;
    use upcheck_config::Config;

    /// Reads every metric as its position among the backends' metrics plus one: each value tells
    /// which series it was read for.
    fn numbered(stat: Stat) -> Option<u64> {
        match stat {
            Stat::Backend(_, metric) => BACKEND_METRICS
                .iter()
                .position(|m| *m == metric)
                .and_then(|i| u64::try_from(i + 1).ok()),
            Stat::State(_, state) => Some(u64::from(state == State::Healthy)),
            Stat::Pool(name) => Some(u64::from(name == series::RETRIES_REFUSED) * 7),
        }
    }

    #[test]
    fn every_series_envoy_shows_of_the_module_is_rendered_once_under_its_type() {
        let text = prometheus(&pool(), None, numbered);
        for metric in BACKEND_METRICS {
            let kind = match metric.kind {
                Aggregate::Counter => "counter",
                Aggregate::Gauge => "gauge",
            };
            let type_line = format!("# TYPE upcheck_{} {kind}\n", metric.name);
            assert_eq!(text.matches(&type_line).count(), 1, "{type_line}{text}");
            for backend in ["app1", "app-2"] {
                let prefix = format!("upcheck_{}{{backend=\"{backend}\"}} ", metric.name);
                assert_eq!(text.matches(&prefix).count(), 1, "{prefix}{text}");
            }
        }
        assert!(text.contains("# TYPE upcheck_state gauge\n"), "{text}");
        assert!(
            text.contains("upcheck_state{backend=\"app-2\",state=\"healthy\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("upcheck_state{backend=\"app1\",state=\"unknown\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE upcheck_pool_guard gauge\nupcheck_pool_guard{} 0\n"));
        assert!(text.contains("# TYPE upcheck_fleet_guard gauge\nupcheck_fleet_guard{} 0\n"));
        assert!(
            text.contains("# TYPE upcheck_retries_refused counter\nupcheck_retries_refused{} 7\n"),
            "{text}"
        );
        assert!(!text.contains("probe_duty") && !text.contains("fleet_local"));
        assert_eq!(text.matches("# TYPE ").count(), BACKEND_METRICS.len() + 4);
    }

    #[test]
    fn each_series_carries_the_value_the_host_gave_for_its_metric() {
        let text = prometheus(&pool(), None, numbered);
        assert!(
            text.contains("upcheck_probes{backend=\"app1\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("upcheck_last_change_seconds{backend=\"app-2\"} 17\n"),
            "{text}"
        );
    }

    #[test]
    fn counters_come_before_gauges_and_each_kind_is_in_order_of_name() {
        let text = prometheus(&pool(), None, numbered);
        let types: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        let first_gauge = types.iter().position(|t| t.ends_with(" gauge"));
        let last_counter = types.iter().rposition(|t| t.ends_with(" counter"));
        assert!(last_counter < first_gauge, "{types:?}");
        for kind in [" counter", " gauge"] {
            let names: Vec<&&str> = types.iter().filter(|t| t.ends_with(kind)).collect();
            let mut sorted = names.clone();
            sorted.sort();
            assert_eq!(names, sorted);
        }
    }

    #[test]
    fn a_familys_series_are_in_the_order_of_their_envoy_names_as_envoy_lists_them() {
        let text = prometheus(&pool(), None, numbered);
        let healthy: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("upcheck_healthy{"))
            .collect();
        // `upcheck.app-2.healthy` before `upcheck.app1.healthy`: '-' sorts before '1'.
        assert_eq!(
            healthy,
            [
                "upcheck_healthy{backend=\"app-2\"} 14",
                "upcheck_healthy{backend=\"app1\"} 14"
            ]
        );
        let states: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("upcheck_state{backend=\"app1\",state=\""))
            .filter_map(|l| l.split('"').next())
            .collect();
        assert_eq!(
            states,
            ["draining", "ejected", "healthy", "unhealthy", "unknown"]
        );
    }

    #[test]
    fn a_metric_the_host_would_not_read_back_is_left_out_and_so_is_its_type_line() {
        let text = prometheus(&pool(), None, |stat| match stat {
            Stat::Backend(_, metric) if metric == series::PROBES => None,
            other => numbered(other),
        });
        assert!(!text.contains("upcheck_probes"), "{text}");
        assert!(text.contains("upcheck_probe_failures{backend=\"app1\"} 2\n"));
        assert_eq!(prometheus(&pool(), None, |_| None), "");
    }

    #[test]
    fn a_named_pool_is_a_label_before_the_backend_on_every_series() {
        let config = Config::parse(br#"{"pool":"site","upstreams":[{"name":"app1"}]}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        let pool: Pool = Pool::new(config, std::time::Duration::ZERO, |_| ());
        let text = prometheus(&pool, None, numbered);
        assert!(
            text.contains("upcheck_healthy{pool=\"site\",backend=\"app1\"} 14\n"),
            "{text}"
        );
        assert!(
            text.contains("upcheck_state{pool=\"site\",backend=\"app1\",state=\"ejected\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("upcheck_pool_guard{pool=\"site\"} 0\n"),
            "{text}"
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.contains("{pool=\"site\""), "{line}");
        }
    }

    #[test]
    fn the_fleets_gauges_are_the_shown_record_as_the_prober_sets_them() {
        let pool = pool();
        let shown = fleet(&pool, false);
        let text = prometheus(&pool, Some(&shown), numbered);
        assert!(
            text.contains("# TYPE upcheck_fleet_local gauge\nupcheck_fleet_local{} 0\n"),
            "{text}"
        );
        assert!(text.contains("upcheck_fleet_balancers{} 3\n"), "{text}");
        assert!(
            text.contains(
                "upcheck_probe_duty{backend=\"app-2\"} 0\nupcheck_probe_duty{backend=\"app1\"} 1\n"
            ),
            "{text}"
        );
        let local = prometheus(&pool, Some(&fleet(&pool, true)), numbered);
        assert!(
            local.contains("upcheck_fleet_local{} 1\n")
                && local.contains("upcheck_probe_duty{backend=\"app-2\"} 1\n"),
            "fallen back to local, it probes everything: {local}"
        );
        assert!(!text.contains("upcheck_fleet_watch"), "{text}");
        let live = Watching {
            live: true,
            revision: 42,
            events: 7,
            resyncs: 1,
            last_event: None,
        };
        let shown = fleet_watching(&pool, false, Some(live));
        let text = prometheus(&pool, Some(&shown), numbered);
        for line in [
            "upcheck_fleet_watch{} 1\n",
            "upcheck_fleet_revision{} 42\n",
            "upcheck_fleet_watch_events{} 7\n",
            "upcheck_fleet_resyncs{} 1\n",
        ] {
            assert!(text.contains(line), "{line}{text}");
        }
    }

    #[test]
    fn label_values_are_escaped_as_the_exposition_format_asks() {
        let mut out = String::new();
        escape(&mut out, "a\\b\"c\nd.e-f:g");
        assert_eq!(out, "a\\\\b\\\"c\\nd.e-f:g");
        let mut line = String::new();
        sample(
            &mut line,
            "healthy",
            Some("p\"q"),
            &[("backend", "x\\y")],
            1,
        );
        assert_eq!(
            line,
            "upcheck_healthy{pool=\"p\\\"q\",backend=\"x\\\\y\"} 1\n"
        );
    }
}
