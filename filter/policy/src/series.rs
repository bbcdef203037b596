//! upcheck's metrics as Envoy names them and as Prometheus shows them.
//!
//! A proxy-wasm metric has a name and no labels, so the backend goes into the name
//! (`upcheck.app1.healthy`, which Envoy shows as `wasmcustom.upcheck.app1.healthy`). Envoy's
//! bootstrap `stats_config.stats_tags` turn it back into a label: each rule's regex is matched
//! against the whole name, its first capture group is cut out of the name and its second is the
//! label's value, so Prometheus sees `upcheck_healthy{backend="app1"}` and one alert or panel
//! covers every backend. [`STATS_TAGS`] are those rules; `upcheck envoy` writes them into every
//! configuration. Measured on Envoy 1.40: a backend name with dots (`app.v2`), dashes, colons or
//! any other HTTP token character comes through as its label value unchanged, while one ending
//! in a dot loses it (`trail.` shows as `trail`, the label of another backend); so
//! [`upcheck_config::label_value_problem`] refuses a name with an empty dot-separated part anywhere.
//!
//! The rules rest on the shape of the names, which this module alone writes: a backend's metric
//! is the last part and never holds a dot, and a pool-wide metric (`upcheck.pool_guard`) has a
//! single part, so the backend rule never takes one for the other, whatever the backend's name.
//! A configuration that names its pool (for an Envoy that runs several) puts the name after a
//! colon (`upcheck:site.app1.healthy`), which no backend name can take the place of, and the
//! pool rule makes it a `pool` label.

/// The first part of every upcheck metric's name.
pub const ROOT: &str = "upcheck";

/// Whether Envoy adds a metric up over VMs or keeps the last value written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// Summed over every VM.
    Counter,
    /// The last value any VM wrote.
    Gauge,
}

/// One per-backend metric: the last part of its name, its kind and what it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// The last part of its name (`upcheck.<backend>.<name>`), also its Prometheus name after
    /// `upcheck_`.
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: Aggregate,
    /// What it says: its line in docs/operating.md's table of series (a test checks it is there).
    pub about: &'static str,
}

const fn counter(name: &'static str, about: &'static str) -> Metric {
    Metric {
        name,
        kind: Aggregate::Counter,
        about,
    }
}

const fn gauge(name: &'static str, about: &'static str) -> Metric {
    Metric {
        name,
        kind: Aggregate::Gauge,
        about,
    }
}

/// Probes sent.
pub const PROBES: Metric = counter("probes", "probes sent");
/// Probes that did not pass.
pub const PROBE_FAILURES: Metric = counter("probe_failures", "probes that did not pass");
/// User requests routed.
pub const REQUESTS: Metric = counter("requests", "user requests routed to it");
/// User requests that counted as failures.
pub const REQUEST_FAILURES: Metric =
    counter("request_failures", "user requests that counted as failures");
/// User requests whose attempt here failed or outlasted its per-try timeout, answered by
/// another backend ([`crate::retry`]).
pub const RETRIED: Metric = counter(
    "retried",
    "user requests whose attempt here failed or outlasted its per-try timeout and were answered by another backend",
);
/// Of those, the ones their user got no 5xx for: failures the users never saw.
pub const RETRIED_RECOVERED: Metric = counter(
    "retried_recovered",
    "of those, the ones another backend answered without a 5xx: failures its users never saw",
);
/// Attempts here that outlasted the per-try timeout from the peers, so another went out.
pub const HEDGES: Metric = counter(
    "hedges",
    "attempts here that outlasted the per-try timeout its peers give, so the proxy sent another",
);
/// Of those, the ones the other attempt answered first.
pub const HEDGES_WON: Metric = counter(
    "hedges_won",
    "of those, the ones the other attempt answered first",
);
/// Passive ejections, outlier ejections included.
pub const EJECTIONS: Metric = counter("ejections", "ejections, outlier ejections included");
/// Outlier ejections for a share or run of failures.
pub const OUTLIER_FAILING: Metric = counter(
    "outlier_failing",
    "outlier ejections for failing more than its peers",
);
/// Outlier ejections for a median latency far above its peers'.
pub const OUTLIER_SLOW: Metric = counter(
    "outlier_slow",
    "outlier ejections for being slower than its peers",
);
/// Outlier ejections for requests stalled far longer than its peers take.
pub const OUTLIER_STALLED: Metric = counter(
    "outlier_stalled",
    "outlier ejections for requests stalled far longer than its peers'",
);
/// Changes of its [`crate::state::State`].
pub const STATE_CHANGES: Metric = counter("state_changes", "changes of its state");
/// 1 while probes pass and it is not ejected.
pub const HEALTHY: Metric = gauge("healthy", "1 while its probes pass and it is not ejected");
/// 1 while it drains.
pub const DRAINING: Metric = gauge("draining", "1 while it drains");
/// The last probe's latency, in milliseconds.
pub const PROBE_LATENCY_MS: Metric =
    gauge("probe_latency_ms", "how long its last probe took to settle");
/// When its state last changed, in seconds since the Unix epoch.
pub const LAST_CHANGE_SECONDS: Metric = gauge(
    "last_change_seconds",
    "when its state last changed (Unix time); `time() - …` is how long it has been so",
);

/// Every per-backend metric but the state's, in the order the docs list them.
pub const BACKEND_METRICS: [Metric; 17] = [
    PROBES,
    PROBE_FAILURES,
    REQUESTS,
    REQUEST_FAILURES,
    RETRIED,
    RETRIED_RECOVERED,
    HEDGES,
    HEDGES_WON,
    EJECTIONS,
    OUTLIER_FAILING,
    OUTLIER_SLOW,
    OUTLIER_STALLED,
    STATE_CHANGES,
    HEALTHY,
    DRAINING,
    PROBE_LATENCY_MS,
    LAST_CHANGE_SECONDS,
];

/// The pool guard's gauge, 1 while it widens the routable set: `upcheck.pool_guard`.
pub const POOL_GUARD: &str = "pool_guard";

/// Requests the retry budget withheld their advice from ([`crate::retry::Budget`]), a counter:
/// `upcheck.retries_refused`.
pub const RETRIES_REFUSED: &str = "retries_refused";

/// The pool guard's gauge under the name it had before, `upcheck.fleet_guard` (when "fleet" also
/// named the backends), written beside [`POOL_GUARD`] with the same value so that alerts and
/// dashboards on it keep working. Deprecated: it goes in a later version.
pub const POOL_GUARD_DEPRECATED: &str = "fleet_guard";

/// The fleet's gauges, set by the balancer's prober when it shows the fleet (`upcheck.fleet_local`
/// and so on; per backend `upcheck.<name>.probe_duty`): 1 while fallen back to probing everything
/// here.
pub const FLEET_LOCAL: &str = "fleet_local";
/// How many balancers the last read of the fleet counted.
pub const FLEET_BALANCERS: &str = "fleet_balancers";
/// Per backend, 1 on the balancer that probes it.
pub const PROBE_DUTY: &str = "probe_duty";
/// 1 while etcd's watch is in place.
pub const FLEET_WATCH: &str = "fleet_watch";
/// The store's revision the watch holds.
pub const FLEET_REVISION: &str = "fleet_revision";
/// Changes the watch heard.
pub const FLEET_WATCH_EVENTS: &str = "fleet_watch_events";
/// Fresh reads of the prefix after the first.
pub const FLEET_RESYNCS: &str = "fleet_resyncs";

/// The first part of the names of a pool's metrics: `upcheck`, or `upcheck:<pool>` for a
/// configuration that names its pool (`pool`; a colon, because no backend name or metric follows
/// `upcheck` with one).
pub fn root(pool: Option<&str>) -> String {
    match pool {
        Some(pool) => format!("{ROOT}:{pool}"),
        None => ROOT.to_owned(),
    }
}

/// The name of `metric` of `backend` in `pool`: `upcheck[:<pool>].<backend>.<metric>`.
pub fn backend_stat(pool: Option<&str>, backend: &str, metric: &str) -> String {
    format!("{}.{backend}.{metric}", root(pool))
}

/// The name of the gauge that is 1 while `backend` is in the state named `state`
/// ([`crate::state::State::as_str`]): `upcheck[:<pool>].<backend>.state_<state>`, which
/// Prometheus shows as `upcheck_state{backend, state}`.
pub fn state_stat(pool: Option<&str>, backend: &str, state: &str) -> String {
    backend_stat(pool, backend, &format!("state_{state}"))
}

/// The name of a pool-wide metric: `upcheck[:<pool>].<metric>`.
pub fn pool_stat(pool: Option<&str>, metric: &str) -> String {
    format!("{}.{metric}", root(pool))
}

/// One of Envoy's `stats_config.stats_tags`: a label and the regex that finds its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagRule {
    /// The label (`tag_name`).
    pub label: &'static str,
    /// Matched against the whole name (with Envoy's `wasmcustom.` in front): the first capture
    /// group is cut out of the name, the second is the label's value.
    pub regex: &'static str,
    /// Why, for the comment next to it.
    pub about: &'static str,
}

/// The rules that make the pool, backend and state labels, in the order Envoy applies them.
pub const STATS_TAGS: [TagRule; 3] = [
    TagRule {
        label: "pool",
        regex: r"^wasmcustom\.upcheck(:([\w-]+))\.",
        about: "upcheck:<pool>.… (a configuration with a `pool` name, where one Envoy runs \
                several pools) becomes upcheck_…{pool=\"<pool>\"}.",
    },
    TagRule {
        label: "backend",
        regex: r"^wasmcustom\.upcheck(?::[\w-]+)?\.((.+?)\.)\w+$",
        about: "upcheck.<backend>.<metric> becomes upcheck_<metric>{backend=\"<backend>\"}; the \
                metric is the last part and has no dot, so a backend named with dots keeps them.",
    },
    TagRule {
        label: "state",
        regex: r"^wasmcustom\.upcheck(?::[\w-]+)?\..+\.state(_(healthy|unhealthy|ejected|draining|unknown))$",
        about:
            "upcheck.<backend>.state_<state> becomes upcheck_state{backend, state=\"<state>\"}: \
                1 for the state the backend is in, 0 for the others.",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::State;

    #[test]
    fn a_backend_metric_is_named_after_the_backend_then_the_metric() {
        assert_eq!(
            backend_stat(None, "app.v2", HEALTHY.name),
            "upcheck.app.v2.healthy"
        );
        assert_eq!(
            state_stat(None, "app1", State::Ejected.as_str()),
            "upcheck.app1.state_ejected"
        );
        assert_eq!(pool_stat(None, POOL_GUARD), "upcheck.pool_guard");
    }

    #[test]
    fn a_named_pool_follows_the_root_after_a_colon() {
        assert_eq!(
            backend_stat(Some("site"), "app1", PROBES.name),
            "upcheck:site.app1.probes"
        );
        assert_eq!(
            pool_stat(Some("api-2"), POOL_GUARD),
            "upcheck:api-2.pool_guard"
        );
    }

    #[test]
    fn no_backend_metric_name_holds_a_dot_so_the_backend_rule_finds_the_whole_name() {
        for metric in BACKEND_METRICS {
            assert!(!metric.name.contains('.'), "{}", metric.name);
        }
        for state in State::ALL {
            assert!(!state.as_str().contains('.'), "{state:?}");
        }
    }

    #[test]
    fn the_state_rule_lists_every_state() {
        for state in State::ALL {
            assert!(STATS_TAGS[2].regex.contains(state.as_str()), "{state:?}");
        }
    }
}
