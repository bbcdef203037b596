//! Two pools in one Envoy, each naming its backends app1 and app2 (different clusters): with a
//! `pool` name in each plugin configuration, Envoy's /stats/prometheus keeps them apart by a
//! `pool` label, so the site's broken app2 and the api's healthy app2 are two series, not one
//! gauge two pools overwrite.

use std::time::Duration;

use serde_json::json;
use tokio::time::{sleep, Instant};
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::fast_checks;
use upcheck_e2e::upstream::FakeUpstream;

/// How long the series may take to show what they must: a few 1 s probe rounds.
const PATIENCE: Duration = Duration::from_secs(20);

/// [`fast_checks`] for a pool named `pool` whose app1 and app2 are the clusters `clusters`.
fn named_pool(pool: &str, clusters: [&str; 2]) -> serde_json::Value {
    let mut config = fast_checks(&["app1", "app2"]);
    config["pool"] = json!(pool);
    for (i, cluster) in clusters.iter().enumerate() {
        config["upstreams"][i]["cluster"] = json!(cluster);
    }
    config
}

#[tokio::test]
async fn two_pools_with_backends_of_the_same_names_are_told_apart_by_the_pool_label(
) -> anyhow::Result<()> {
    let site1 = FakeUpstream::start("site1", Mode::Ok).await?;
    let site2 = FakeUpstream::start("site2", Mode::Status(502)).await?;
    let api1 = FakeUpstream::start("api1", Mode::Ok).await?;
    let api2 = FakeUpstream::start("api2", Mode::Ok).await?;
    let envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&site1)
        .upstream(&site2)
        .upstream(&api1)
        .upstream(&api2)
        .wasm_filter(named_pool("site", ["site1", "site2"]))
        .second_listener(named_pool("api", ["api1", "api2"]))
        .start()
        .await?;
    let wanted = [
        r#"upcheck_healthy{pool="site",backend="app1"} 1"#,
        r#"upcheck_healthy{pool="site",backend="app2"} 0"#,
        r#"upcheck_healthy{pool="api",backend="app1"} 1"#,
        r#"upcheck_healthy{pool="api",backend="app2"} 1"#,
        r#"upcheck_state{pool="site",backend="app2",state="unhealthy"} 1"#,
        r#"upcheck_state{pool="api",backend="app2",state="healthy"} 1"#,
        r#"upcheck_pool_guard{pool="site"} 0"#,
        r#"upcheck_pool_guard{pool="api"} 0"#,
        // The pool guard's former name, kept for existing alerts (docs/operating.md), labelled alike.
        r#"upcheck_fleet_guard{pool="site"} 0"#,
    ];
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = envoy.admin("/stats/prometheus?filter=upcheck").await?;
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|line| !text.lines().any(|l| l == *line))
            .collect();
        if missing.is_empty() {
            // No series without its pool: every upcheck series of a named pool carries it.
            let unlabelled: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("upcheck_") && !l.contains("pool=\""))
                .collect();
            assert!(unlabelled.is_empty(), "{unlabelled:?}");
            println!(
                "{}",
                text.lines()
                    .filter(|l| l.starts_with("upcheck_healthy"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            return Ok(());
        }
        assert!(
            Instant::now() < deadline,
            "after {PATIENCE:?}, /stats/prometheus lacks {missing:?}:\n{text}"
        );
        sleep(Duration::from_millis(250)).await;
    }
}
