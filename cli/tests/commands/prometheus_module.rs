//! The module's own metrics page beside Envoy's stats: a real Prometheus 2.42 scrapes both
//! `/stats/prometheus?filter=upcheck` on Envoy's admin and `/upcheck/metrics` on the status page's
//! listener of the same Envoy, in the incident (app1 healthy, app2 answering 502), and finds the
//! same series with the same values, so one alert file and one dashboard serve a host with no
//! stats of its own (NGINX) as they serve Envoy. Read directly, the two are the same text but for
//! Envoy's own counters of its VMs.
//!
//! Envoy, the module and Prometheus come from `UPCHECK_ENVOY`, `UPCHECK_WASM` and
//! `UPCHECK_PROMETHEUS` (`make e2e` sets all three).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context};
use tokio::time::{sleep, Instant};
use upcheck_e2e::prometheus::{Job, Prometheus, Sample, SCRAPE_INTERVAL};

use crate::prometheus::the_incident;

/// How long the test waits for Prometheus to have both jobs' series, and then for a moment when
/// they agree (a probe landing between the two scrapes moves a counter on one side only).
const PATIENCE: Duration = Duration::from_secs(40);

/// A series as Prometheus keeps it, `job` and `instance` left out: `name{label="value",…}`.
fn key(sample: &Sample) -> String {
    let labels: Vec<String> = sample
        .labels
        .iter()
        .filter(|(l, _)| !["__name__", "job", "instance"].contains(&l.as_str()))
        .map(|(l, v)| format!("{l}={}", v.as_str().unwrap_or_default()))
        .collect();
    format!("{}{{{}}}", sample.label("__name__"), labels.join(","))
}

/// The module's series Prometheus scraped in `job`, by [`key`], with their values.
async fn scraped(prometheus: &Prometheus, job: &str) -> anyhow::Result<BTreeMap<String, f64>> {
    let samples = prometheus
        .query(&format!(r#"{{__name__=~"upcheck_.*",job="{job}"}}"#))
        .await?;
    Ok(samples.iter().map(|s| (key(s), s.value)).collect())
}

/// The `# TYPE` lines of upcheck's series in an exposition.
fn types(exposition: &str) -> BTreeSet<&str> {
    exposition
        .lines()
        .filter(|l| l.starts_with("# TYPE upcheck_"))
        .collect()
}

#[tokio::test]
async fn envoys_stats_and_the_modules_metrics_page_give_prometheus_the_same_series_and_values(
) -> anyhow::Result<()> {
    let incident = the_incident().await?;
    let envoy = &incident.envoy;
    let address = |url: String| -> anyhow::Result<SocketAddr> {
        let rest = url.trim_start_matches("http://");
        let host = rest.split('/').next().unwrap_or_default();
        host.parse().with_context(|| format!("an address: {url}"))
    };
    let admin = address(envoy.admin_url(""))?;
    let status = address(envoy.status_url("/")?)?;
    let jobs = [Job::envoy("envoy", admin), Job::module("module", status)];
    let prometheus = Prometheus::scraping_jobs(&jobs, &[]).await?;
    for job in ["envoy", "module"] {
        prometheus
            .query_until(
                &format!(r#"upcheck_healthy{{job="{job}"}}"#),
                PATIENCE,
                |s| s.len() == 2 && s.iter().any(|s| s.value == 0.0),
            )
            .await?;
    }

    // Side by side, as an operator would read them: the same text, but for Envoy's own counters
    // of its VMs, once no probe lands between the two reads.
    let http = reqwest::Client::builder().no_proxy().build()?;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let from_envoy = envoy.admin("/stats/prometheus?filter=upcheck").await?;
        let page = http
            .get(envoy.status_url("/upcheck/metrics")?)
            .send()
            .await?;
        let content_type = page.headers().get("content-type").cloned();
        let from_module = page.text().await?;
        assert_eq!(
            types(&from_module),
            types(&from_envoy),
            "each family's type"
        );
        assert_eq!(
            content_type.as_ref().and_then(|v| v.to_str().ok()),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let envoys_own = |l: &&str| {
            l.starts_with("envoy_wasm_upcheck") || l.starts_with("# TYPE envoy_wasm_upcheck")
        };
        let modules: Vec<&str> = from_envoy.lines().filter(|l| !envoys_own(l)).collect();
        if modules == from_module.lines().collect::<Vec<_>>() {
            println!("== /stats/prometheus?filter=upcheck\n{from_envoy}\n== /upcheck/metrics\n{from_module}");
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "never the same text:\n{from_envoy}\n---\n{from_module}"
        );
        sleep(Duration::from_millis(200)).await;
    }

    // No user traffic moves; only probes do, every 10 s, so within a few scrapes both sides show
    // the same moment.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let envoy_side = scraped(&prometheus, "envoy").await?;
        let module_side = scraped(&prometheus, "module").await?;
        let names: BTreeSet<&String> = envoy_side.keys().collect();
        assert_eq!(
            module_side.keys().collect::<BTreeSet<_>>(),
            names,
            "the same series from both"
        );
        if envoy_side == module_side {
            for ((series, from_envoy), from_module) in envoy_side.iter().zip(module_side.values()) {
                println!("{series:<60} envoy {from_envoy:>12} module {from_module:>12}");
            }
            assert_eq!(module_side.get("upcheck_healthy{backend=app2}"), Some(&0.0));
            assert_eq!(module_side.get("upcheck_healthy{backend=app1}"), Some(&1.0));
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "never the same values:\nenvoy  {envoy_side:?}\nmodule {module_side:?}"
        );
        sleep(SCRAPE_INTERVAL).await;
    }
}
