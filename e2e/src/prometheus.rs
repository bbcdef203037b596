//! A real Prometheus on loopback that scrapes one Envoy's `/stats/prometheus`, as an operator's
//! would, or any other targets ([`Job`]: the module's own `/upcheck/metrics` on the status page's
//! listener), and answers PromQL over its HTTP API.
//!
//! Debian's `prometheus` 2.42 (`make prometheus` installs it); the binary comes from
//! `UPCHECK_PROMETHEUS`, and a test fails (not skips) without it. Each one runs in a temporary
//! directory of its own (its configuration, its database, its log), scrapes every second with
//! the scrape configuration docs/operating.md gives, and is killed by its own pid when dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use tempfile::TempDir;
use tokio::time::{sleep, Instant};

use crate::ports::free_addr;

/// How often it scrapes and evaluates rules.
pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);

/// How long it may take to start and be ready.
const PATIENCE: Duration = Duration::from_secs(30);

/// One sample of an instant query: its labels (the metric name as `__name__`) and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Every label, `__name__` included.
    pub labels: serde_json::Map<String, Value>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, or "" without it.
    pub fn label(&self, name: &str) -> &str {
        self.labels
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// One scrape job: its name, the target's address and the path scraped there, with its query.
#[derive(Debug, Clone)]
pub struct Job {
    /// `job_name`, the `job` label of what it scrapes.
    pub name: String,
    /// The target, `host:port`.
    pub target: SocketAddr,
    /// `metrics_path`.
    pub path: String,
    /// The query's parameters (`params`), each once.
    pub params: Vec<(String, String)>,
}

impl Job {
    /// Envoy's admin interface at `admin`: `/stats/prometheus?filter=upcheck`, as
    /// docs/operating.md gives it.
    pub fn envoy(name: &str, admin: SocketAddr) -> Job {
        Job {
            name: name.to_owned(),
            target: admin,
            path: "/stats/prometheus".to_owned(),
            params: vec![("filter".to_owned(), "upcheck".to_owned())],
        }
    }

    /// The module's own metrics on the status page's listener at `status`: `/upcheck/metrics`.
    pub fn module(name: &str, status: SocketAddr) -> Job {
        Job {
            name: name.to_owned(),
            target: status,
            path: "/upcheck/metrics".to_owned(),
            params: Vec::new(),
        }
    }

    /// Its entry under `scrape_configs`.
    fn config(&self) -> String {
        let params: String = self
            .params
            .iter()
            .map(|(k, v)| format!("      {k}: [{}]\n", Value::String(v.clone())))
            .collect();
        format!(
            "  - job_name: {name}\n    metrics_path: {path}\n{params}    static_configs:\n      \
             - targets: ['{target}']\n",
            name = Value::String(self.name.clone()),
            path = Value::String(self.path.clone()),
            params = if params.is_empty() {
                String::new()
            } else {
                format!("    params:\n{params}")
            },
            target = self.target,
        )
    }
}

/// A running Prometheus, killed when dropped.
pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: TempDir,
    http: reqwest::Client,
}

/// The Prometheus binary: `UPCHECK_PROMETHEUS`.
fn binary() -> Result<PathBuf> {
    let path = std::env::var_os("UPCHECK_PROMETHEUS")
        .map(PathBuf::from)
        .context(
        "UPCHECK_PROMETHEUS is not set: run `make prometheus` (Debian's prometheus) and set it \
         to /usr/bin/prometheus, or run the tests through `make e2e`",
    )?;
    ensure!(
        path.is_file(),
        "UPCHECK_PROMETHEUS={} is not a file",
        path.display()
    );
    Ok(path)
}

impl Prometheus {
    /// Starts one that scrapes Envoy's admin interface at `admin` every [`SCRAPE_INTERVAL`], with
    /// the rule files `rules` loaded, and waits until it is ready.
    pub async fn scraping(admin: SocketAddr, rules: &[PathBuf]) -> Result<Prometheus> {
        Prometheus::scraping_jobs(&[Job::envoy("upcheck", admin)], rules).await
    }

    /// Starts one that scrapes each of `jobs` every [`SCRAPE_INTERVAL`], with the rule files
    /// `rules` loaded, and waits until it is ready.
    pub async fn scraping_jobs(jobs: &[Job], rules: &[PathBuf]) -> Result<Prometheus> {
        let dir = tempfile::Builder::new()
            .prefix("upcheck-prometheus-")
            .tempdir()?;
        let rule_files: Vec<String> = rules
            .iter()
            .map(|r| format!("  - {}\n", Value::String(r.display().to_string())))
            .collect();
        let scrapes: Vec<String> = jobs.iter().map(Job::config).collect();
        let config = format!(
            "global:\n  scrape_interval: {every}s\n  evaluation_interval: {every}s\n\
             rule_files:\n{rules}\
             scrape_configs:\n{scrapes}",
            every = SCRAPE_INTERVAL.as_secs(),
            rules = if rule_files.is_empty() {
                "  []\n".to_owned()
            } else {
                rule_files.concat()
            },
            scrapes = scrapes.concat(),
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config)?;
        let addr = free_addr()?;
        let log = std::fs::File::create(dir.path().join("prometheus.log"))?;
        let child = Command::new(binary()?)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot run prometheus")?;
        let http = reqwest::Client::builder().no_proxy().build()?;
        let mut prometheus = Prometheus {
            child,
            addr,
            dir,
            http,
        };
        prometheus.until_ready().await?;
        Ok(prometheus)
    }

    async fn until_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + PATIENCE;
        let url = format!("http://{}/-/ready", self.addr);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("prometheus exited ({status}):\n{}", self.log());
            }
            if let Ok(response) = self.http.get(&url).send().await {
                if response.status().is_success() {
                    return Ok(());
                }
            }
            ensure!(
                Instant::now() < deadline,
                "prometheus not ready after {PATIENCE:?}:\n{}",
                self.log()
            );
            sleep(Duration::from_millis(100)).await;
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/<path>` with `params`: the `data` of a successful answer.
    pub async fn api(&self, path: &str, params: &[(&str, &str)]) -> Result<Value> {
        let url = reqwest::Url::parse_with_params(
            &format!("http://{}/api/v1/{path}", self.addr),
            params,
        )?;
        let text = self.http.get(url).send().await?.text().await?;
        let answer: Value = serde_json::from_str(&text)
            .with_context(|| format!("/api/v1/{path} is not JSON: {text}"))?;
        ensure!(
            answer["status"] == "success",
            "/api/v1/{path} {params:?} failed: {text}"
        );
        Ok(answer["data"].clone())
    }

    /// The instant query `expr`, evaluated now.
    pub async fn query(&self, expr: &str) -> Result<Vec<Sample>> {
        let data = self.api("query", &[("query", expr)]).await?;
        let result = data["result"].as_array().cloned().unwrap_or_default();
        result
            .iter()
            .map(|r| {
                let labels = r["metric"].as_object().cloned().unwrap_or_default();
                let value = r["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok())
                    .with_context(|| format!("{expr}: a sample without a value: {r}"))?;
                Ok(Sample { labels, value })
            })
            .collect()
    }

    /// `expr` queried every scrape interval until `done` holds for its samples (returned), for
    /// at most `patience`; an error with the last samples after that.
    pub async fn query_until(
        &self,
        expr: &str,
        patience: Duration,
        done: impl Fn(&[Sample]) -> bool,
    ) -> Result<Vec<Sample>> {
        let deadline = Instant::now() + patience;
        loop {
            let samples = self.query(expr).await?;
            if done(&samples) {
                return Ok(samples);
            }
            ensure!(
                Instant::now() < deadline,
                "{expr} after {patience:?}: {samples:?}\n{}",
                self.log()
            );
            sleep(SCRAPE_INTERVAL / 2).await;
        }
    }

    /// Every metric name it has a series of.
    pub async fn names(&self) -> Result<Vec<String>> {
        let data = self.api("label/__name__/values", &[]).await?;
        Ok(data
            .as_array()
            .map(|names| {
                names
                    .iter()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
