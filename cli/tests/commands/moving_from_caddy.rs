//! The steps of docs/moving-from-caddy.md, run as written, from Caddy's JSON to a running Envoy.
//!
//! `config/caddy.json` stands for `curl -s localhost:2019/config/` (no Caddy runs here); its copy
//! dials two fake upstreams on loopback instead of 127.0.0.1:3001 and :3002. The built `upcheck`
//! writes `envoy.yaml` with the listener, admin and status page listener on free loopback ports, `envoy --mode validate
//! -c envoy.yaml` accepts it, and Envoy runs it with two workers. Then the README's last two steps:
//! the status page lists both backends in rotation and healthy, the admin's stats show the probes,
//! and user requests reach both backends. Envoy comes from `UPCHECK_ENVOY`, the module from
//! `UPCHECK_WASM` (`make e2e` sets both); the test fails without them.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context};
use tokio::time::{sleep, Instant};
use upcheck_e2e::caddy::{dialling, operators_caddy_json, write_envoy_yaml};
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::RATE;
use upcheck_e2e::replay::Replay;
use upcheck_e2e::upstream::FakeUpstream;

/// How long Envoy has to probe both backends once: it probes when it starts.
const FIRST_PROBES: Duration = Duration::from_secs(15);

/// `envoy --mode validate -c envoy.yaml` in `dir`: Ok, or what Envoy said.
fn validate(dir: &Path) -> anyhow::Result<()> {
    let binary = std::env::var_os("UPCHECK_ENVOY")
        .filter(|v| !v.is_empty())
        .context("UPCHECK_ENVOY is not set: run this test through `make e2e`")?;
    let output = Command::new(&binary)
        .args(["--mode", "validate", "-c", "envoy.yaml"])
        .current_dir(dir)
        .output()
        .with_context(|| format!("cannot run {binary:?}"))?;
    ensure!(
        output.status.success(),
        "envoy --mode validate -c envoy.yaml refused it:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// Whether the text status page shows `name` in rotation, healthy, with a passed probe.
fn in_and_healthy(page: &str, name: &str) -> bool {
    page.lines().any(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        words.starts_with(&[name, "in", "healthy"]) && line.contains("last probe passed")
    })
}

/// `curl -s 127.0.0.1:<status>/upcheck/status` until both backends are in and healthy: the page.
async fn status_page_once_probed(envoy: &Envoy) -> anyhow::Result<String> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    let deadline = Instant::now() + FIRST_PROBES;
    loop {
        let response = http
            .get(envoy.status_url("/upcheck/status")?)
            .send()
            .await?;
        let status = response.status();
        let page = response.text().await?;
        ensure!(status == 200, "/upcheck/status answered {status}: {page}");
        if in_and_healthy(&page, "app1") && in_and_healthy(&page, "app2") {
            return Ok(page);
        }
        ensure!(
            Instant::now() < deadline,
            "after {FIRST_PROBES:?} the status page still says:\n{page}"
        );
        sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_readme_steps_take_caddys_json_to_an_envoy_that_probes_and_serves_both_backends(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let started = Instant::now();
    let caddy = std::fs::read_to_string(operators_caddy_json())?;
    let dialled = dialling(&caddy, [app1.addr(), app2.addr()])?;
    let envoy = Envoy::builder()
        .concurrency(2)
        .start_yaml(|ports| {
            let written =
                write_envoy_yaml(Path::new(env!("CARGO_BIN_EXE_upcheck")), &dialled, ports)?;
            validate(written.dir.path())?;
            written.yaml()
        })
        .await?;
    println!("written, validated and ready in {:?}", started.elapsed());

    let page = status_page_once_probed(&envoy).await?;
    println!("/upcheck/status after {:?}:\n{page}", started.elapsed());

    let stats = envoy.stats("wasmcustom.upcheck").await?;
    println!("/stats?filter=wasmcustom.upcheck: {stats:?}");
    for name in ["app1", "app2"] {
        let stat = |what: &str| {
            stats
                .get(&format!("wasmcustom.upcheck.{name}.{what}"))
                .copied()
        };
        assert!(stat("probes") >= Some(1), "{name} probed: {stats:?}");
        assert_eq!(stat("probe_failures"), Some(0), "{stats:?}");
        assert_eq!(stat("healthy"), Some(1), "{stats:?}");
    }

    let prometheus = envoy.admin("/stats/prometheus?filter=upcheck").await?;
    for line in [
        "# TYPE upcheck_probes counter",
        "# TYPE upcheck_probe_failures counter",
        "upcheck_probe_failures{backend=\"app2\"} 0",
        "# TYPE upcheck_healthy gauge",
        "upcheck_healthy{backend=\"app1\"} 1",
        "upcheck_healthy{backend=\"app2\"} 1",
        "upcheck_state{backend=\"app2\",state=\"healthy\"} 1",
        "upcheck_state{backend=\"app2\",state=\"unknown\"} 0",
        "upcheck_pool_guard{} 0",
    ] {
        assert!(
            prometheus.lines().any(|l| l == line),
            "/stats/prometheus has no line {line:?}:\n{prometheus}"
        );
    }

    let report = Replay::new(envoy.url("/"), RATE, Duration::from_secs(1))
        .connection_per_request()
        .run()
        .await?;
    let (one, two) = (app1.counts(), app2.counts());
    println!("users: {report}; app1 {one:?}, app2 {two:?}");
    assert_eq!(report.failures(), 0, "{report}");
    assert_eq!(one.requests + two.requests, u64::from(RATE));
    assert!(one.requests > 0 && two.requests > 0, "{one:?} {two:?}");
    Ok(())
}
