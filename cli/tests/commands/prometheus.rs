//! What an operator's Prometheus sees of upcheck: a real Prometheus 2.42 on loopback scrapes the
//! `/stats/prometheus` of a real Envoy running what `upcheck envoy` wrote from the operators'
//! Caddy JSON, in the incident (app1 healthy, app2's sidecar answering 502 to everything), and
//! is asked over its HTTP API, as a dashboard or an alert would ask it.
//!
//! Envoy comes from `UPCHECK_ENVOY`, the module from `UPCHECK_WASM`, Prometheus from
//! `UPCHECK_PROMETHEUS` (`make e2e` sets all three); the tests fail without them. Each waits at
//! most [`PATIENCE`] for what it looks for.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;
use upcheck_e2e::caddy::{dialling, operators_caddy_json, write_envoy_yaml};
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::prometheus::{Prometheus, Sample};
use upcheck_e2e::upstream::FakeUpstream;

/// How long a test waits for a query to show what it looks for: Envoy's start, the first probe
/// round (10 s interval, at once on start) and two scrapes fit in it many times over.
const PATIENCE: Duration = Duration::from_secs(30);

/// Every series upcheck's Envoy shows Prometheus, with its labels (Prometheus's own `job` and
/// `instance` left out), as docs/operating.md lists them.
const SERIES: [&str; 29] = [
    "upcheck_probes{backend}",
    "upcheck_probe_failures{backend}",
    "upcheck_requests{backend}",
    "upcheck_request_failures{backend}",
    "upcheck_retried{backend}",
    "upcheck_retried_recovered{backend}",
    "upcheck_hedges{backend}",
    "upcheck_hedges_won{backend}",
    "upcheck_ejections{backend}",
    "upcheck_outlier_failing{backend}",
    "upcheck_outlier_slow{backend}",
    "upcheck_outlier_stalled{backend}",
    "upcheck_state_changes{backend}",
    "upcheck_healthy{backend}",
    "upcheck_draining{backend}",
    "upcheck_state{backend,state}",
    "upcheck_probe_latency_ms{backend}",
    "upcheck_last_change_seconds{backend}",
    "upcheck_pool_guard",
    // The pool guard under its former name, kept for existing alerts (docs/operating.md).
    "upcheck_fleet_guard",
    "upcheck_retries_refused",
    "envoy_wasm_upcheck_vm_reload",
    "envoy_wasm_upcheck_vm_reload_success",
    "envoy_wasm_upcheck_vm_reload_failure",
    "envoy_wasm_upcheck_vm_reload_backoff",
    "envoy_wasm_upcheck_status_vm_reload",
    "envoy_wasm_upcheck_status_vm_reload_success",
    "envoy_wasm_upcheck_status_vm_reload_failure",
    "envoy_wasm_upcheck_status_vm_reload_backoff",
];

/// The incident: app1 healthy and app2 answering 502, behind an Envoy running what `upcheck
/// envoy` wrote from the operators' Caddy JSON.
pub(crate) struct Incident {
    pub(crate) envoy: Envoy,
    _app1: FakeUpstream,
    _app2: FakeUpstream,
}

/// Starts [`Incident`].
pub(crate) async fn the_incident() -> anyhow::Result<Incident> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Status(502)).await?;
    let caddy = std::fs::read_to_string(operators_caddy_json())?;
    let dialled = dialling(&caddy, [app1.addr(), app2.addr()])?;
    let envoy = Envoy::builder()
        .concurrency(2)
        .start_yaml(|ports| {
            write_envoy_yaml(Path::new(env!("CARGO_BIN_EXE_upcheck")), &dialled, ports)?.yaml()
        })
        .await?;
    Ok(Incident {
        envoy,
        _app1: app1,
        _app2: app2,
    })
}

/// The incident, and a Prometheus scraping it.
struct Scraped {
    prometheus: Prometheus,
    _incident: Incident,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The shipped alert rules.
fn alerts() -> PathBuf {
    workspace().join("config/prometheus/alerts.yml")
}

/// app1 healthy, app2 answering 502, Envoy running what `upcheck envoy` wrote, and Prometheus
/// scraping it with the shipped alert rules loaded, once it has scraped both backends.
async fn the_incident_scraped() -> anyhow::Result<Scraped> {
    let incident = the_incident().await?;
    let admin: SocketAddr = incident
        .envoy
        .admin_url("")
        .trim_start_matches("http://")
        .parse()
        .context("the admin address")?;
    let prometheus = Prometheus::scraping(admin, &[alerts()]).await?;
    prometheus
        .query_until("upcheck_healthy", PATIENCE, |samples| samples.len() == 2)
        .await?;
    Ok(Scraped {
        prometheus,
        _incident: incident,
    })
}

/// `backend`'s value among `samples`.
fn of(samples: &[Sample], backend: &str) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.label("backend") == backend)
        .map(|s| s.value)
}

#[tokio::test]
async fn prometheus_scraping_envoy_in_the_incident_finds_app2_out_of_rotation_and_app1_in(
) -> anyhow::Result<()> {
    let scraped = the_incident_scraped().await?;
    let prometheus = &scraped.prometheus;
    let healthy = prometheus
        .query_until("upcheck_healthy", PATIENCE, |s| {
            of(s, "app2") == Some(0.0) && of(s, "app1") == Some(1.0)
        })
        .await?;
    println!("upcheck_healthy: {healthy:?}");
    let out = prometheus
        .query(r#"upcheck_healthy{backend="app2"} == 0"#)
        .await?;
    assert_eq!(out.len(), 1, "{out:?}");
    let in_rotation = prometheus
        .query(r#"upcheck_healthy{backend="app1"} == 1"#)
        .await?;
    assert_eq!(in_rotation.len(), 1, "{in_rotation:?}");
    // One alertable series per backend: the state it is in.
    let states = prometheus.query("upcheck_state == 1").await?;
    let mut seen: Vec<(String, String)> = states
        .iter()
        .map(|s| (s.label("backend").to_owned(), s.label("state").to_owned()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("app1".to_owned(), "healthy".to_owned()),
            ("app2".to_owned(), "unhealthy".to_owned())
        ]
    );
    let failures = prometheus.query("upcheck_probe_failures").await?;
    assert_eq!(of(&failures, "app1"), Some(0.0), "{failures:?}");
    assert!(of(&failures, "app2") >= Some(1.0), "{failures:?}");
    Ok(())
}

/// The series Prometheus has from upcheck, as `name{label,…}`, Prometheus's own labels left out.
async fn series(prometheus: &Prometheus) -> anyhow::Result<BTreeSet<String>> {
    let data = prometheus
        .api("series", &[("match[]", r#"{__name__=~".*upcheck.*"}"#)])
        .await?;
    let mut found = BTreeSet::new();
    for series in data.as_array().into_iter().flatten() {
        let labels = series.as_object().context("a series is an object")?;
        let name = labels
            .get("__name__")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let rest: Vec<&str> = labels
            .keys()
            .map(String::as_str)
            .filter(|l| !["__name__", "job", "instance"].contains(l))
            .collect();
        found.insert(if rest.is_empty() {
            name.to_owned()
        } else {
            format!("{name}{{{}}}", rest.join(","))
        });
    }
    Ok(found)
}

#[tokio::test]
async fn prometheus_has_exactly_the_series_docs_operating_lists() -> anyhow::Result<()> {
    let scraped = the_incident_scraped().await?;
    let found = series(&scraped.prometheus).await?;
    let listed: BTreeSet<String> = SERIES.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(found, listed, "the series Prometheus scraped");
    let operating = std::fs::read_to_string(workspace().join("docs/operating.md"))?;
    for series in SERIES {
        let listed = format!("`{series}`");
        assert!(
            operating.contains(&listed),
            "docs/operating.md does not list {listed}"
        );
    }
    Ok(())
}

#[test]
fn the_stats_tags_docs_operating_md_gives_are_those_upcheck_envoy_writes() {
    let operating =
        std::fs::read_to_string(workspace().join("docs/operating.md")).expect("docs/operating.md");
    for rule in upcheck_policy::series::STATS_TAGS {
        let written = format!(
            "- tag_name: {}\n      regex: {}\n",
            rule.label,
            upcheck_cli::tree::scalar(rule.regex)
        );
        assert!(
            operating.contains(&written),
            "docs/operating.md lacks\n{written}"
        );
    }
}

#[test]
fn docs_operating_md_says_what_each_backend_metric_is_as_the_core_states_it() {
    let operating =
        std::fs::read_to_string(workspace().join("docs/operating.md")).expect("docs/operating.md");
    for metric in upcheck_policy::series::BACKEND_METRICS {
        let kind = match metric.kind {
            upcheck_policy::series::Aggregate::Counter => "counter",
            upcheck_policy::series::Aggregate::Gauge => "gauge",
        };
        let row = format!(
            "| `upcheck_{}{{backend}}` | {kind} | {} |",
            metric.name, metric.about
        );
        assert!(operating.contains(&row), "docs/operating.md lacks {row}");
    }
}

/// The metric names (`upcheck_…`, `envoy_…`) a PromQL expression names.
fn names_in(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut word = String::new();
    let mut in_quotes = false;
    for c in expr.chars().chain([' ']) {
        if c == '"' {
            in_quotes = !in_quotes;
        }
        if !in_quotes && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
            continue;
        }
        if word.starts_with("upcheck_") || word.starts_with("envoy_") {
            names.insert(word.clone());
        }
        word.clear();
    }
    names
}

#[test]
fn names_in_finds_metric_names_but_not_label_values() {
    assert_eq!(
        names_in(r#"sum by (backend) (rate(upcheck_requests{backend="upcheck_x"}[1m]))"#),
        BTreeSet::from(["upcheck_requests".to_owned()])
    );
}

/// Every query of the dashboard: each panel target's `expr` (PromQL, `$backend` the backend
/// variable's regex), and the backend variable's Grafana `label_values(…)`, which is not PromQL
/// (`false`).
fn dashboard_queries() -> anyhow::Result<Vec<(String, bool)>> {
    let path = workspace().join("config/grafana/upcheck.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                queries.push((expr.replace("$backend", ".*"), true));
            }
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            queries.push((query.to_owned(), false));
        }
    }
    Ok(queries)
}

#[tokio::test]
async fn every_dashboard_query_and_alert_rule_names_only_series_prometheus_has(
) -> anyhow::Result<()> {
    let scraped = the_incident_scraped().await?;
    let prometheus = &scraped.prometheus;
    let has: BTreeSet<String> = prometheus.names().await?.into_iter().collect();
    let queries = dashboard_queries()?;
    assert!(
        queries.len() >= 6,
        "the dashboard has {} queries",
        queries.len()
    );
    // The rules as the real Prometheus loaded them from config/prometheus/alerts.yml.
    let groups = prometheus.api("rules", &[]).await?;
    let mut rules = Vec::new();
    for group in groups["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let name = rule["name"].as_str().unwrap_or_default().to_owned();
            let query = rule["query"].as_str().unwrap_or_default().to_owned();
            rules.push((name, query));
        }
    }
    assert!(rules.len() >= 5, "alerts.yml loaded as {rules:?}");
    let dashboard = queries
        .into_iter()
        .map(|(query, promql)| ("dashboard".to_owned(), query, promql));
    let rules = rules.into_iter().map(|(name, query)| (name, query, true));
    for (what, query, promql) in dashboard.chain(rules) {
        let names = names_in(&query);
        assert!(!names.is_empty(), "{what}: {query} names no upcheck series");
        let missing: Vec<&String> = names.difference(&has).collect();
        assert!(
            missing.is_empty(),
            "{what}: {query} names {missing:?}, which Prometheus has not"
        );
        if promql {
            // And Prometheus evaluates it.
            let evaluated = prometheus.query(&query).await;
            assert!(evaluated.is_ok(), "{what}: {query}: {evaluated:?}");
        }
    }
    Ok(())
}
